//! The keys that end `status --watch` on a terminal, as in eks-node-viewer: `q`, Esc or Ctrl-C.
//! While the cockpit is drawn the terminal is in raw mode ([`RawMode`]), so keys arrive one by
//! one without Enter and Ctrl-C arrives as a key rather than as a signal; [`QuitKeys`] reads them
//! on a blocking thread. When the terminal cannot be read, raw mode is turned off again so that
//! Ctrl-C goes back to ending the process as a signal.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use tokio::sync::oneshot;

/// How long the key reader waits for a key before it checks whether the watch is over.
const POLL: Duration = Duration::from_millis(100);

/// Whether `key` ends the watch: `q`, `Q`, Esc or Ctrl-C, when pressed (not released).
pub fn is_quit(key: &KeyEvent) -> bool {
    if key.kind == KeyEventKind::Release {
        return false;
    }
    match key.code {
        KeyCode::Char('q' | 'Q') | KeyCode::Esc => true,
        KeyCode::Char('c') => key.modifiers.contains(KeyModifiers::CONTROL),
        _ => false,
    }
}

/// The terminal in raw mode while it exists (when it could be switched; see [`RawMode::on`]).
pub struct RawMode {
    on: bool,
}

impl RawMode {
    /// Switches the terminal to raw mode; when that fails (no terminal to switch), nothing
    /// changes and Ctrl-C stays a signal.
    pub fn enter() -> RawMode {
        RawMode {
            on: crossterm::terminal::enable_raw_mode().is_ok(),
        }
    }

    /// Whether raw mode is on (keys can be read).
    pub fn on(&self) -> bool {
        self.on
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if self.on {
            // Nothing useful can be done when the terminal cannot be restored any more.
            let _ = crossterm::terminal::disable_raw_mode();
        }
    }
}

/// Reads keys until one ends the watch ([`is_quit`]) or it is dropped.
pub struct QuitKeys {
    pressed: oneshot::Receiver<()>,
    done: Arc<AtomicBool>,
}

impl QuitKeys {
    /// Starts reading keys on a blocking thread of the tokio runtime.
    pub fn start() -> QuitKeys {
        let (tx, pressed) = oneshot::channel();
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        tokio::task::spawn_blocking(move || {
            while !flag.load(Ordering::Relaxed) {
                match event::poll(POLL) {
                    Ok(false) => {}
                    Ok(true) => {
                        if let Ok(Event::Key(key)) = event::read()
                            && is_quit(&key)
                        {
                            let _ = tx.send(());
                            return;
                        }
                    }
                    Err(_) => {
                        // No keys to read: give Ctrl-C back to the signal.
                        let _ = crossterm::terminal::disable_raw_mode();
                        return;
                    }
                }
            }
        });
        QuitKeys { pressed, done }
    }

    /// Resolves when a key ends the watch; never when the keys cannot be read.
    pub async fn pressed(&mut self) {
        if (&mut self.pressed).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for QuitKeys {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q_esc_and_ctrl_c_quit() {
        let key = |code, modifiers| KeyEvent::new(code, modifiers);
        assert!(is_quit(&key(KeyCode::Char('q'), KeyModifiers::NONE)));
        assert!(is_quit(&key(KeyCode::Char('Q'), KeyModifiers::SHIFT)));
        assert!(is_quit(&key(KeyCode::Esc, KeyModifiers::NONE)));
        assert!(is_quit(&key(KeyCode::Char('c'), KeyModifiers::CONTROL)));
        assert!(!is_quit(&key(KeyCode::Char('c'), KeyModifiers::NONE)));
        assert!(!is_quit(&key(KeyCode::Char('x'), KeyModifiers::NONE)));
        let mut released = key(KeyCode::Char('q'), KeyModifiers::NONE);
        released.kind = KeyEventKind::Release;
        assert!(!is_quit(&released));
    }
}
