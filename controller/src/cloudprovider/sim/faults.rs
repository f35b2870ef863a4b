//! Cloud fault injection for the simulated EC2 account: API throttling (EC2's
//! `RequestLimitExceeded`, which callers retry with backoff), insufficient capacity for single
//! offerings at launch (as CreateFleet reports per override; the launch moves on to the next
//! offering and the offering is marked unavailable for the ICE cache TTL), and slow launches.
//!
//! Off until [`SimFaults::configure`] and [`SimFaults::enable`]; decisions come from a seeded
//! ChaCha RNG and an optional budget bounds how many faults are injected in all. Counting,
//! rolling and configuration parsing are shared with the sandbox's API faults (the `faults`
//! crate).

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use faults::{Counters, Dice, FaultKindName, Tally, parse_settings};

use karpenter_core::cloud::CloudError;

/// A kind of injected cloud fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SimFaultKind {
    /// A call fails with `RequestLimitExceeded` (a retryable [`CloudError::Other`]).
    Throttle,
    /// An offering tried at launch has no capacity.
    InsufficientCapacity,
    /// A launch is delayed by a random time up to [`SimFaultConfig::slow_launch_max`].
    SlowLaunch,
}

impl SimFaultKind {
    /// Every kind.
    pub const ALL: [SimFaultKind; 3] = [
        SimFaultKind::Throttle,
        SimFaultKind::InsufficientCapacity,
        SimFaultKind::SlowLaunch,
    ];

    /// `throttle`, `capacity` or `slow-launch` (reports and [`SimFaultConfig::parse`]).
    pub fn as_str(self) -> &'static str {
        match self {
            SimFaultKind::Throttle => "throttle",
            SimFaultKind::InsufficientCapacity => "capacity",
            SimFaultKind::SlowLaunch => "slow-launch",
        }
    }
}

impl FaultKindName for SimFaultKind {
    const ALL: &'static [SimFaultKind] = &SimFaultKind::ALL;
    const LABEL: &'static str = "cloud faults";

    fn as_str(self) -> &'static str {
        SimFaultKind::as_str(self)
    }
}

/// What cloud faults to inject. Rates are per mille (‰): of cloud calls (create, delete, get,
/// list) for throttling, of offerings tried for capacity errors, of launches for slow launches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimFaultConfig {
    /// Per-mille rate of throttled calls.
    pub throttle: u32,
    /// Per-mille rate of offerings found out of capacity at launch.
    pub capacity: u32,
    /// Per-mille rate of slow launches.
    pub slow_launch: u32,
    /// A slow launch takes a uniform random extra time up to this long.
    pub slow_launch_max: Duration,
    /// Stop injecting after this many faults in all (`None`: no bound).
    pub budget: Option<u64>,
    /// Seed of the decision RNG.
    pub seed: u64,
}

impl Default for SimFaultConfig {
    /// No faults; slow launches up to 2 s; seed 0.
    fn default() -> Self {
        SimFaultConfig {
            throttle: 0,
            capacity: 0,
            slow_launch: 0,
            slow_launch_max: Duration::from_secs(2),
            budget: None,
            seed: 0,
        }
    }
}

/// A cloud fault configuration string that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid cloud fault setting {item:?}: {why}")]
pub struct SimFaultConfigError {
    /// The offending `key=value` item.
    pub item: String,
    /// What is wrong with it.
    pub why: String,
}

impl SimFaultConfig {
    /// The same per-mille rate for every kind.
    pub fn uniform(per_mille: u32) -> SimFaultConfig {
        let rate = per_mille.min(1000);
        SimFaultConfig {
            throttle: rate,
            capacity: rate,
            slow_launch: rate,
            ..SimFaultConfig::default()
        }
    }

    /// Parse comma-separated `key=value` items: `all=<‰>`, `throttle=<‰>`, `capacity=<‰>`,
    /// `slow-launch=<‰>`, `slow-launch-max-ms=<ms>`, `budget=<count>`, `seed=<u64>`.
    ///
    /// Errors: an unknown key, a value that is not a number, a rate above 1000.
    pub fn parse(s: &str) -> Result<SimFaultConfig, SimFaultConfigError> {
        let mut cfg = SimFaultConfig::default();
        let error = |item: &str, why: &str| SimFaultConfigError {
            item: item.to_string(),
            why: why.to_string(),
        };
        parse_settings(s, error, |setting| {
            match setting.key {
                "all" => {
                    let rate = setting.per_mille()?;
                    (cfg.throttle, cfg.capacity, cfg.slow_launch) = (rate, rate, rate);
                }
                "throttle" => cfg.throttle = setting.per_mille()?,
                "capacity" => cfg.capacity = setting.per_mille()?,
                "slow-launch" => cfg.slow_launch = setting.per_mille()?,
                "slow-launch-max-ms" => {
                    cfg.slow_launch_max = Duration::from_millis(setting.number()?);
                }
                "budget" => cfg.budget = Some(setting.number()?),
                "seed" => cfg.seed = setting.number()?,
                _ => return Err("unknown key"),
            }
            Ok(())
        })?;
        Ok(cfg)
    }
}

/// Counts since the last [`SimFaults::configure`], per kind (every kind listed); displayed as
/// `cloud faults: 7 (throttle=3 capacity=2 slow-launch=2)`.
pub type SimFaultCounts = Tally<SimFaultKind>;

struct Inner {
    config: SimFaultConfig,
    dice: Dice,
}

/// The simulated cloud's fault injector.
pub struct SimFaults {
    enabled: AtomicBool,
    inner: Mutex<Inner>,
    injected: Counters<SimFaultKind>,
}

impl Default for SimFaults {
    fn default() -> Self {
        SimFaults {
            enabled: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                config: SimFaultConfig::default(),
                dice: Dice::new(0, None),
            }),
            injected: Default::default(),
        }
    }
}

impl fmt::Debug for SimFaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFaults")
            .field("enabled", &self.is_enabled())
            .field("counts", &self.counts())
            .finish()
    }
}

impl SimFaults {
    /// Replace the configuration, reseed the RNG and reset the counters.
    pub fn configure(&self, config: SimFaultConfig) {
        let mut inner = self.lock();
        inner.dice = Dice::new(config.seed, config.budget);
        inner.config = config;
        self.injected.reset();
    }

    /// Start injecting, at the configured rates.
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::SeqCst);
    }

    /// Stop injecting (counters are kept; offerings already marked unavailable stay so until
    /// their ICE TTL passes, as in EC2).
    pub fn disable(&self) {
        self.enabled.store(false, Ordering::SeqCst);
    }

    /// Whether faults are being injected.
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::SeqCst)
    }

    /// Faults injected per kind since the last [`SimFaults::configure`].
    pub fn counts(&self) -> SimFaultCounts {
        self.injected.tally()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Roll for one fault of `kind`; counts it when it hits. `then` makes a follow-up draw
    /// while still locked.
    fn roll<T>(&self, kind: SimFaultKind, then: impl FnOnce(&mut Inner) -> T) -> Option<T> {
        if !self.is_enabled() {
            return None;
        }
        let mut inner = self.lock();
        let rate = match kind {
            SimFaultKind::Throttle => inner.config.throttle,
            SimFaultKind::InsufficientCapacity => inner.config.capacity,
            SimFaultKind::SlowLaunch => inner.config.slow_launch,
        };
        if rate == 0 {
            return None;
        }
        if inner.dice.budget_spent(self.injected.total()) || inner.dice.per_mille() >= rate {
            return None;
        }
        self.injected.add(kind);
        Some(then(&mut inner))
    }

    /// A throttling error for the cloud call `call`, if one is injected.
    ///
    /// Errors: `RequestLimitExceeded` as [`CloudError::Other`] (retried with backoff).
    pub fn throttle(&self, call: &str) -> Result<(), CloudError> {
        match self.roll(SimFaultKind::Throttle, |_| ()) {
            Some(()) => Err(CloudError::Other(format!(
                "{call}: RequestLimitExceeded: Request limit exceeded (injected fault)"
            ))),
            None => Ok(()),
        }
    }

    /// Whether the offering tried next at launch is out of capacity (injected).
    pub fn out_of_capacity(&self) -> bool {
        self.roll(SimFaultKind::InsufficientCapacity, |_| ())
            .is_some()
    }

    /// The extra time a launch takes, if this one is slow.
    pub fn launch_delay(&self) -> Option<Duration> {
        self.roll(SimFaultKind::SlowLaunch, |inner| {
            let max = inner.config.slow_launch_max;
            inner.dice.duration_up_to(max)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_injected_while_off() {
        let faults = SimFaults::default();
        faults.configure(SimFaultConfig::uniform(1000));
        assert_eq!(faults.throttle("create"), Ok(()));
        assert!(!faults.out_of_capacity());
        assert_eq!(faults.launch_delay(), None);
        assert_eq!(faults.counts().total(), 0);
    }

    #[test]
    fn rates_budget_and_seed_shape_the_load() {
        let run = |seed| {
            let faults = SimFaults::default();
            faults.configure(SimFaultConfig {
                throttle: 200,
                budget: Some(50),
                seed,
                ..SimFaultConfig::default()
            });
            faults.enable();
            let results: Vec<bool> = (0..1000)
                .map(|_| faults.throttle("list").is_err())
                .collect();
            (results, faults.counts())
        };
        let (a, counts) = run(3);
        assert_eq!(
            counts.of(SimFaultKind::Throttle),
            50,
            "the budget bounds the load"
        );
        assert_eq!(a.iter().filter(|x| **x).count(), 50);
        // 50 faults at 20% take about 250 calls; none after the budget is spent.
        let last = a.iter().rposition(|x| *x).unwrap_or_default();
        assert!((150..400).contains(&last), "last fault at call {last}");
        assert_eq!(run(3).0, a, "same seed, same decisions");
        assert_ne!(run(4).0, a);
    }

    #[test]
    fn throttling_is_a_retryable_error() {
        let faults = SimFaults::default();
        faults.configure(SimFaultConfig {
            throttle: 1000,
            ..SimFaultConfig::default()
        });
        faults.enable();
        let err = faults.throttle("create").expect_err("throttled");
        assert!(matches!(&err, CloudError::Other(m) if m.contains("RequestLimitExceeded")));
    }

    #[test]
    fn slow_launches_stay_within_the_maximum() {
        let faults = SimFaults::default();
        faults.configure(SimFaultConfig {
            slow_launch: 1000,
            slow_launch_max: Duration::from_millis(300),
            ..SimFaultConfig::default()
        });
        faults.enable();
        for _ in 0..100 {
            let d = faults.launch_delay().expect("every launch is slow");
            assert!(d <= Duration::from_millis(300));
        }
    }

    #[test]
    fn config_strings_parse_or_say_why_not() {
        let cfg = SimFaultConfig::parse("all=20,capacity=100,seed=9,slow-launch-max-ms=500")
            .expect("parses");
        assert_eq!((cfg.throttle, cfg.capacity, cfg.slow_launch), (20, 100, 20));
        assert_eq!(cfg.seed, 9);
        assert_eq!(cfg.slow_launch_max, Duration::from_millis(500));
        assert!(SimFaultConfig::parse("nope=1").is_err());
        assert!(SimFaultConfig::parse("throttle=2000").is_err());
        assert!(SimFaultConfig::parse("throttle=x").is_err());
    }
}
