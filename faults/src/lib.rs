//! Seeded, budgeted fault decisions shared by every fault injector of this project: the
//! sandbox API server's (`sandbox::faults`: 409s, 429s, dropped watches, lost responses) and the
//! simulated cloud's (`controller::cloudprovider::sim::faults`: throttling, insufficient
//! capacity, slow launches). Both count, report, roll and parse their configuration the same
//! way: per-mille rates drawn from a ChaCha RNG (the same seed and the same order of questions
//! give the same answers), an optional budget of faults in all, and `key=value,...` settings.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A closed set of fault kinds with short report names (an injector's own enum implements it).
pub trait FaultKindName: Copy + Eq + fmt::Debug + 'static {
    /// Every kind, in a fixed order (counters and reports follow it).
    const ALL: &'static [Self];
    /// What the injector's reports call its faults, e.g. `api faults`.
    const LABEL: &'static str;

    /// A short name (lower case, dashes), as used in reports and configuration strings.
    fn as_str(self) -> &'static str;

    /// The position of this kind in [`FaultKindName::ALL`].
    fn index(self) -> usize {
        Self::ALL.iter().position(|k| *k == self).unwrap_or(0)
    }

    /// The kind named `name` (see [`FaultKindName::as_str`]), if any.
    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|k| k.as_str() == name)
    }
}

/// A snapshot of faults injected per kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tally<K> {
    /// Faults injected, per kind, every kind listed (zero included) in [`FaultKindName::ALL`]
    /// order.
    pub injected: Vec<(K, u64)>,
}

impl<K: FaultKindName> Default for Tally<K> {
    /// Zero of every kind.
    fn default() -> Self {
        Tally {
            injected: K::ALL.iter().map(|k| (*k, 0)).collect(),
        }
    }
}

impl<K: FaultKindName> Tally<K> {
    /// Faults injected in all.
    pub fn total(&self) -> u64 {
        self.injected.iter().map(|(_, n)| n).sum()
    }

    /// Faults of `kind`; 0 for a kind the tally does not list.
    pub fn of(&self, kind: K) -> u64 {
        self.injected
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(0, |(_, n)| *n)
    }

    /// The per-kind counts as `name=count` separated by spaces, e.g. `conflict=3 slow=0`.
    pub fn breakdown(&self) -> String {
        let kinds: Vec<String> = self
            .injected
            .iter()
            .map(|(k, n)| format!("{}={n}", k.as_str()))
            .collect();
        kinds.join(" ")
    }
}

impl<K: FaultKindName> fmt::Display for Tally<K> {
    /// `<label>: <total> (<name>=<count> ...)`, e.g. `cloud faults: 7 (throttle=3 ...)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({})", K::LABEL, self.total(), self.breakdown())
    }
}

/// Live per-kind fault counters, safe to bump from many threads.
#[derive(Debug)]
pub struct Counters<K> {
    counts: Vec<AtomicU64>,
    kind: std::marker::PhantomData<K>,
}

impl<K: FaultKindName> Default for Counters<K> {
    /// Zero of every kind.
    fn default() -> Self {
        Counters {
            counts: K::ALL.iter().map(|_| AtomicU64::new(0)).collect(),
            kind: std::marker::PhantomData,
        }
    }
}

impl<K: FaultKindName> Counters<K> {
    /// Count one fault of `kind`.
    pub fn add(&self, kind: K) {
        if let Some(c) = self.counts.get(kind.index()) {
            c.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Set every count to zero.
    pub fn reset(&self) {
        for c in &self.counts {
            c.store(0, Ordering::SeqCst);
        }
    }

    /// Faults counted in all.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::SeqCst)).sum()
    }

    /// A snapshot of the counts, every kind in [`FaultKindName::ALL`] order (each count read
    /// atomically, not the set as a whole).
    pub fn tally(&self) -> Tally<K> {
        Tally {
            injected: K::ALL
                .iter()
                .zip(&self.counts)
                .map(|(k, c)| (*k, c.load(Ordering::SeqCst)))
                .collect(),
        }
    }
}

/// The seeded decision source of a fault injector: a ChaCha RNG (same seed and same order of
/// questions, same answers) and an optional budget of faults in all.
#[derive(Debug)]
pub struct Dice {
    rng: ChaCha8Rng,
    budget: Option<u64>,
}

impl Dice {
    /// Dice seeded with `seed` that stop hitting once `budget` faults were injected (`None`: no
    /// bound).
    pub fn new(seed: u64, budget: Option<u64>) -> Dice {
        Dice {
            rng: ChaCha8Rng::seed_from_u64(seed),
            budget,
        }
    }

    /// Whether `injected` faults exhaust the budget.
    pub fn budget_spent(&self, injected: u64) -> bool {
        self.budget.is_some_and(|b| injected >= b)
    }

    /// A uniform draw in `0..1000`, to compare with per-mille rates: a rate of `r`‰ hits when
    /// the draw is below `r`.
    pub fn per_mille(&mut self) -> u32 {
        self.rng.random_range(0..1000u32)
    }

    /// A uniform random duration from zero up to `max`, at millisecond resolution.
    pub fn duration_up_to(&mut self, max: Duration) -> Duration {
        let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(self.rng.random_range(0..=max_ms))
    }
}

/// One `key=value` item of a fault configuration string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting<'a> {
    /// The text before the first `=`, e.g. `throttle`.
    pub key: &'a str,
    /// The text after it, e.g. `100`.
    pub value: &'a str,
}

impl Setting<'_> {
    /// The value as a non-negative integer.
    ///
    /// Errors: why the value is not one.
    pub fn number(&self) -> Result<u64, &'static str> {
        self.value
            .parse::<u64>()
            .map_err(|_| "the value must be a non-negative integer")
    }

    /// The value as a per-mille rate, `0..=1000`.
    ///
    /// Errors: why the value is not one.
    pub fn per_mille(&self) -> Result<u32, &'static str> {
        u32::try_from(self.number()?)
            .ok()
            .filter(|n| *n <= 1000)
            .ok_or("a rate is per mille, at most 1000")
    }
}

/// Walk a fault configuration string: comma-separated `key=value` items (blank items skipped),
/// each handed to `apply`.
///
/// Errors: `error(item, why)` for the first item without `=` or that `apply` rejects with `why`.
pub fn parse_settings<E>(
    s: &str,
    error: impl Fn(&str, &str) -> E,
    mut apply: impl FnMut(Setting<'_>) -> Result<(), &'static str>,
) -> Result<(), E> {
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| error(item, "expected key=value"))?;
        apply(Setting { key, value }).map_err(|why| error(item, why))?;
    }
    Ok(())
}
