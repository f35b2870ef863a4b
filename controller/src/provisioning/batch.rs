//! The provisioning batch window (upstream `provisioning/batcher.go`): the first pending pod
//! opens it, pods that keep arriving hold it open, and it closes `BATCH_IDLE_DURATION` after the
//! last one arrived or `BATCH_MAX_DURATION` after it opened, whichever comes first. Times are
//! offsets from the opening, so the window is computed without a clock.

use std::time::Duration;

use crate::runtime::options::Settings;

/// One batch window, from the settings' idle and maximum durations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    idle: Duration,
    max: Duration,
    last: Duration,
}

impl Window {
    /// A window opened by a pod arriving now, with `settings`' `batch_idle` and `batch_max`.
    pub fn open(settings: &Settings) -> Window {
        Window {
            idle: settings.batch_idle,
            max: settings.batch_max,
            last: Duration::ZERO,
        }
    }

    /// Another pending pod arrived `at` after the window opened.
    pub fn arrived(&mut self, at: Duration) {
        self.last = self.last.max(at);
    }

    /// When the window closes, after its opening: `idle` after the last arrival, at most `max`.
    pub fn closes_at(&self) -> Duration {
        (self.last + self.idle).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::options::ControllerOptions;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        controller: ControllerOptions,
    }

    /// The settings of `karpenter run` with `args` (the flags of `BATCH_IDLE_DURATION` and
    /// `BATCH_MAX_DURATION`).
    fn settings(args: &[&str]) -> Settings {
        let argv = std::iter::once("karpenter").chain(args.iter().copied());
        Cli::try_parse_from(argv)
            .expect("flags parse")
            .controller
            .settings()
            .expect("valid settings")
    }

    /// When a window of `settings` closes if pods arrive at `arrivals` (milliseconds after it
    /// opened) while it is open.
    fn closes(settings: &Settings, arrivals: &[u64]) -> Duration {
        let mut w = Window::open(settings);
        for at in arrivals.iter().map(|ms| Duration::from_millis(*ms)) {
            if at < w.closes_at() {
                w.arrived(at);
            }
        }
        w.closes_at()
    }

    #[test]
    fn the_window_closes_idle_after_the_last_pod_or_at_the_maximum() {
        let ms = Duration::from_millis;
        // Upstream's defaults: idle 1s, max 10s.
        let default = settings(&[]);
        assert_eq!(closes(&default, &[]), ms(1000));
        assert_eq!(closes(&default, &[500, 1200]), ms(2200));
        // A pod after the window closed does not reopen it.
        assert_eq!(closes(&default, &[500, 1600]), ms(1500));
        let steady: Vec<u64> = (1..100).map(|i| i * 500).collect();
        assert_eq!(closes(&default, &steady), ms(10000));
        // BATCH_IDLE_DURATION: a longer idle window takes in the pod at 1.6s.
        let patient = settings(&["--batch-idle-duration", "3s"]);
        assert_eq!(closes(&patient, &[]), ms(3000));
        assert_eq!(closes(&patient, &[500, 1600]), ms(4600));
        // BATCH_MAX_DURATION: a steady stream is cut at the maximum.
        let short = settings(&["--batch-max-duration", "4s"]);
        assert_eq!(closes(&short, &steady), ms(4000));
        let long = settings(&["--batch-max-duration", "30s"]);
        assert_eq!(closes(&long, &steady), ms(30000));
    }
}
