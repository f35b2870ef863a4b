//! Time as an injected dependency, so lifecycle timeouts, consolidation's delays and simulated
//! launches are testable without sleeping: decisions read "now" from a [`Clock`], and a test
//! moves a [`ShiftedClock`] forward instead of waiting.

use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};

/// What a clock calls when it jumps forward; it returns whether it wants the next jump too.
pub type JumpListener = Box<dyn Fn() -> bool + Send + Sync>;

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time; decision code reads time only through this.
    fn now(&self) -> Timestamp;

    /// Call `listener` each time the clock jumps (a test moving it on), until it returns
    /// `false`; code that waits on timers measured in real time (a requeue, a poll) uses it to
    /// evaluate its waits again at once. A clock that only follows real time never jumps and
    /// drops the listener.
    fn on_jump(&self, listener: JumpListener) {
        drop(listener);
    }
}

/// The real wall clock (`Timestamp::now()`), used everywhere but tests.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock tests move by hand; it stands still otherwise. For pure decisions and the simulated
/// cloud in unit tests; a running cluster uses [`ShiftedClock`].
#[derive(Debug)]
pub struct FakeClock(Mutex<Timestamp>);

impl FakeClock {
    /// A fake clock at `start`.
    pub fn new(start: Timestamp) -> FakeClock {
        FakeClock(Mutex::new(start))
    }

    /// Moves the time by `by` (a negative duration moves it back); a result out of
    /// `Timestamp`'s range leaves the time unchanged.
    pub fn advance(&self, by: SignedDuration) {
        let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *t = t.checked_add(by).unwrap_or(*t);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Real time shifted forward by whatever a test advanced it by: a whole cluster (API server,
/// simulated kubelets and cloud, the controller) shares one, so a test skips five minutes of
/// `consolidateAfter` or a registration TTL in one call while everything that runs on real
/// time (kubelet delays, batching windows, HTTP timeouts) keeps running. Each advance calls the
/// [`Clock::on_jump`] listeners.
#[derive(Default)]
pub struct ShiftedClock {
    offset: Mutex<SignedDuration>,
    listeners: Mutex<Vec<JumpListener>>,
}

impl ShiftedClock {
    /// A clock that reads real time until it is advanced.
    pub fn new() -> ShiftedClock {
        ShiftedClock::default()
    }

    /// Moves the clock forward by `by` (a negative or zero duration is ignored: time never runs
    /// back for the cluster) and tells the listeners.
    pub fn advance(&self, by: SignedDuration) {
        if !by.is_positive() {
            return;
        }
        {
            let mut offset = self.offset.lock().unwrap_or_else(|e| e.into_inner());
            *offset = offset.checked_add(by).unwrap_or(*offset);
        }
        self.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|listener| listener());
    }

    /// How far ahead of real time the clock is.
    pub fn offset(&self) -> SignedDuration {
        *self.offset.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for ShiftedClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShiftedClock")
            .field("offset", &self.offset())
            .finish_non_exhaustive()
    }
}

impl Clock for ShiftedClock {
    fn now(&self) -> Timestamp {
        let now = Timestamp::now();
        now.checked_add(self.offset()).unwrap_or(now)
    }

    fn on_jump(&self, listener: JumpListener) {
        self.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(listener);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[test]
    fn a_shifted_clock_runs_with_real_time_ahead_by_what_it_was_advanced() {
        let clock = ShiftedClock::new();
        let before = Timestamp::now();
        clock.advance(SignedDuration::from_mins(5));
        clock.advance(SignedDuration::from_secs(-60));
        let now = clock.now();
        assert!(
            now >= before + SignedDuration::from_mins(5),
            "{now} vs {before}"
        );
        assert!(now < Timestamp::now() + SignedDuration::from_mins(6));
        assert_eq!(clock.offset(), SignedDuration::from_mins(5));
    }

    #[test]
    fn listeners_hear_each_jump_until_they_stop_listening() {
        let clock = ShiftedClock::new();
        let heard = Arc::new(AtomicU32::new(0));
        let counter = Arc::clone(&heard);
        clock.on_jump(Box::new(move || counter.fetch_add(1, Ordering::SeqCst) < 1));
        clock.advance(SignedDuration::from_secs(1));
        clock.advance(SignedDuration::ZERO);
        clock.advance(SignedDuration::from_secs(1));
        clock.advance(SignedDuration::from_secs(1));
        assert_eq!(heard.load(Ordering::SeqCst), 2, "heard twice, then stopped");
        // The system clock never jumps.
        SystemClock.on_jump(Box::new(|| panic!("the system clock jumped")));
    }
}
