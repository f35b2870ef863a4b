//! API fault injection for fault-tolerance tests and demos: the API server can answer a share of
//! clients' requests the way a loaded or failing kube-apiserver does (409 Conflict on writes,
//! 429 TooManyRequests with `Retry-After`, 500 InternalError, slow responses, watches that drop,
//! 410 Expired "too old resource version" on watches and lists from a resourceVersion, and
//! writes that take effect while the client is told they timed out).
//!
//! A [`Faults`] is shared (`Arc`) between the server and the test or CLI that steers it, and can
//! be switched at runtime. Decisions come from a seeded ChaCha RNG, so a run with the same seed
//! and the same request order makes the same decisions (concurrent clients may interleave
//! differently from run to run). An optional budget bounds how many faults are injected in all,
//! and a User-Agent filter limits faults to one client (e.g. leave kubectl's requests alone).

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

pub use faults::{Counters, Dice, FaultKindName, Setting, Tally, parse_settings};

/// A kind of injected fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// 409 `Conflict` (stale resourceVersion) on a write (PUT or PATCH).
    Conflict,
    /// 429 `TooManyRequests` with `Retry-After: 1` (API priority and fairness rejecting).
    TooManyRequests,
    /// 500 `InternalError`, on any request.
    InternalError,
    /// A delay before the request is handled (then it is answered normally).
    Slow,
    /// A watch stream that breaks off (connection dropped) a short while after it started.
    DropWatch,
    /// 410 `Expired` ("too old resource version") for a watch or list from a resourceVersion:
    /// the client must list again.
    ExpiredResourceVersion,
    /// A write (POST, PUT, PATCH, DELETE) takes effect, but the client gets 504 `Timeout`, as
    /// from kube-apiserver when storage commits after the request timed out: a client that
    /// retries blindly writes twice (e.g. creates a second NodeClaim).
    LostResponse,
}

impl FaultKind {
    /// Every kind, in the order a request's fault is drawn.
    pub const ALL: [FaultKind; 7] = [
        FaultKind::Conflict,
        FaultKind::TooManyRequests,
        FaultKind::InternalError,
        FaultKind::Slow,
        FaultKind::DropWatch,
        FaultKind::ExpiredResourceVersion,
        FaultKind::LostResponse,
    ];

    /// A short name (`conflict`, `too-many-requests`, `internal-error`, `slow`, `drop-watch`,
    /// `expired`, `lost-response`), as used in reports and in [`FaultConfig::parse`].
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Conflict => "conflict",
            FaultKind::TooManyRequests => "too-many-requests",
            FaultKind::InternalError => "internal-error",
            FaultKind::Slow => "slow",
            FaultKind::DropWatch => "drop-watch",
            FaultKind::ExpiredResourceVersion => "expired",
            FaultKind::LostResponse => "lost-response",
        }
    }

    /// Whether this kind can hit `req`.
    fn applies(self, req: &RequestInfo<'_>) -> bool {
        match self {
            FaultKind::Conflict => matches!(req.method, "PUT" | "PATCH"),
            FaultKind::TooManyRequests | FaultKind::InternalError | FaultKind::Slow => true,
            FaultKind::DropWatch => req.watch,
            // resourceVersion "0" means "any version" and is never too old.
            FaultKind::ExpiredResourceVersion => {
                req.method == "GET" && req.resource_version.is_some_and(|rv| rv != "0")
            }
            FaultKind::LostResponse => matches!(req.method, "POST" | "PUT" | "PATCH" | "DELETE"),
        }
    }
}

impl FaultKindName for FaultKind {
    const ALL: &'static [FaultKind] = &FaultKind::ALL;
    const LABEL: &'static str = "api faults";

    fn as_str(self) -> &'static str {
        FaultKind::as_str(self)
    }
}

/// Which clients' requests may be faulted, by their `User-Agent` header.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum UserAgentFilter {
    /// Every client, whatever its User-Agent (the default).
    #[default]
    Any,
    /// Only clients whose User-Agent starts with this prefix.
    Only(String),
    /// Every client except those whose User-Agent starts with this prefix (e.g. `kubectl`).
    Except(String),
}

impl UserAgentFilter {
    fn admits(&self, user_agent: &str) -> bool {
        match self {
            UserAgentFilter::Any => true,
            UserAgentFilter::Only(p) => user_agent.starts_with(p.as_str()),
            UserAgentFilter::Except(p) => !user_agent.starts_with(p.as_str()),
        }
    }
}

/// What faults to inject: per-kind rates in per mille (‰) of the requests a kind can apply to,
/// delays, a budget and a client filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultConfig {
    /// Per-mille rate of each kind, indexed like [`FaultKind::ALL`]. A request gets at most one
    /// fault; the rates of the kinds that apply to it are summed (capped at 1000‰).
    rates: [u32; 7],
    /// Slow responses wait a uniform random time up to this long.
    pub slow_max: Duration,
    /// Dropped watches break off a uniform random time up to this long after they start.
    pub drop_watch_max: Duration,
    /// Stop injecting after this many faults in all (`None`: no bound).
    pub budget: Option<u64>,
    /// Which clients are faulted, by User-Agent prefix (default: every client).
    pub user_agent: UserAgentFilter,
    /// Seed of the decision RNG.
    pub seed: u64,
}

impl Default for FaultConfig {
    /// No faults; delays up to 200 ms, watches dropped within 2 s, seed 0, every client.
    fn default() -> Self {
        FaultConfig {
            rates: [0; 7],
            slow_max: Duration::from_millis(200),
            drop_watch_max: Duration::from_secs(2),
            budget: None,
            user_agent: UserAgentFilter::Any,
            seed: 0,
        }
    }
}

/// A fault configuration string that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid API fault setting {item:?}: {why}")]
pub struct FaultConfigError {
    /// The offending `key=value` item.
    pub item: String,
    /// What is wrong with it.
    pub why: String,
}

impl FaultConfig {
    /// The same rate for every kind, in per mille of the requests each kind applies to.
    pub fn uniform(per_mille: u32) -> FaultConfig {
        FaultConfig {
            rates: [per_mille.min(1000); 7],
            ..FaultConfig::default()
        }
    }

    /// Set one kind's rate (per mille, capped at 1000).
    #[must_use]
    pub fn with_rate(mut self, kind: FaultKind, per_mille: u32) -> FaultConfig {
        self.rates[kind.index()] = per_mille.min(1000);
        self
    }

    /// A kind's rate in per mille.
    pub fn rate(&self, kind: FaultKind) -> u32 {
        self.rates[kind.index()]
    }

    /// Parse `key=value` items separated by commas: `all=<‰>` (every kind), a kind name from
    /// [`FaultKind::as_str`] `=<‰>`, `seed=<u64>`, `budget=<count>`, `slow-max-ms=<ms>`,
    /// `drop-watch-max-ms=<ms>`, `except-agent=<prefix>`, `only-agent=<prefix>`. Example:
    /// `all=20,slow=50,seed=7,budget=300,except-agent=kubectl`.
    ///
    /// Errors: an unknown key or a value that is not a number.
    pub fn parse(s: &str) -> Result<FaultConfig, FaultConfigError> {
        let mut cfg = FaultConfig::default();
        let error = |item: &str, why: &str| FaultConfigError {
            item: item.to_string(),
            why: why.to_string(),
        };
        parse_settings(s, error, |setting| {
            match setting.key {
                "all" => cfg.rates = [setting.per_mille()?; 7],
                "seed" => cfg.seed = setting.number()?,
                "budget" => cfg.budget = Some(setting.number()?),
                "slow-max-ms" => cfg.slow_max = Duration::from_millis(setting.number()?),
                "drop-watch-max-ms" => {
                    cfg.drop_watch_max = Duration::from_millis(setting.number()?);
                }
                "except-agent" => {
                    cfg.user_agent = UserAgentFilter::Except(setting.value.to_string());
                }
                "only-agent" => cfg.user_agent = UserAgentFilter::Only(setting.value.to_string()),
                kind => {
                    let kind =
                        <FaultKind as FaultKindName>::from_name(kind).ok_or("unknown key")?;
                    cfg.rates[kind.index()] = setting.per_mille()?;
                }
            }
            Ok(())
        })?;
        Ok(cfg)
    }
}

/// What the fault hook needs to know about a request.
#[derive(Clone, Copy, Debug)]
pub struct RequestInfo<'a> {
    /// HTTP method, upper case.
    pub method: &'a str,
    /// Request path, e.g. `/apis/karpenter.sh/v1/nodeclaims/x/status`.
    pub path: &'a str,
    /// Whether it is a watch (`watch=true`).
    pub watch: bool,
    /// The `resourceVersion` query parameter, if non-empty.
    pub resource_version: Option<&'a str>,
    /// The `User-Agent` header (empty when absent).
    pub user_agent: &'a str,
}

/// The fault chosen for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer 409 Conflict (a stale resourceVersion) without writing.
    Conflict,
    /// Answer 429 with `Retry-After: 1`.
    TooManyRequests,
    /// Answer 500 `InternalError` without handling the request.
    InternalError,
    /// Wait this long, then handle the request.
    Slow(Duration),
    /// Handle the watch, but break its stream off after this long.
    DropWatch(Duration),
    /// Answer 410 Expired for this resourceVersion.
    Expired(String),
    /// Handle the write, then answer 504 Timeout instead of its result.
    LostResponse,
}

impl Fault {
    /// The kind of this fault.
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::Conflict => FaultKind::Conflict,
            Fault::TooManyRequests => FaultKind::TooManyRequests,
            Fault::InternalError => FaultKind::InternalError,
            Fault::Slow(_) => FaultKind::Slow,
            Fault::DropWatch(_) => FaultKind::DropWatch,
            Fault::Expired(_) => FaultKind::ExpiredResourceVersion,
            Fault::LostResponse => FaultKind::LostResponse,
        }
    }
}

/// Counts since the last [`Faults::configure`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Requests the filter admitted while faults were on.
    pub considered: u64,
    /// Faults injected, per kind (every kind listed, zero included).
    pub injected: Tally<FaultKind>,
    /// Requests whose method and path repeat an earlier request that was failed by a fault
    /// (409, 429, 500, 410, 504): the client retried it.
    pub retried: u64,
}

impl FaultCounts {
    /// Faults injected in all kinds since the last [`Faults::configure`].
    pub fn total(&self) -> u64 {
        self.injected.total()
    }

    /// Faults of `kind` injected since the last [`Faults::configure`].
    pub fn of(&self, kind: FaultKind) -> u64 {
        self.injected.of(kind)
    }
}

impl fmt::Display for FaultCounts {
    /// `api faults: 12 of 340 requests (conflict=3 ...); retried 9`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} of {} requests ({}); retried after a failure: {}",
            <FaultKind as FaultKindName>::LABEL,
            self.total(),
            self.considered,
            self.injected.breakdown(),
            self.retried
        )
    }
}

struct Inner {
    config: FaultConfig,
    dice: Dice,
    /// Failed requests (method, path) not retried yet, with how many times each failed.
    failed: HashMap<(String, String), u64>,
}

/// The API server's fault injector (off until [`Faults::configure`] and [`Faults::enable`]).
pub struct Faults {
    enabled: AtomicBool,
    inner: Mutex<Inner>,
    considered: AtomicU64,
    injected: Counters<FaultKind>,
    retried: AtomicU64,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            enabled: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                config: FaultConfig::default(),
                dice: Dice::new(0, None),
                failed: HashMap::new(),
            }),
            considered: AtomicU64::new(0),
            injected: Default::default(),
            retried: AtomicU64::new(0),
        }
    }
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faults")
            .field("enabled", &self.is_enabled())
            .field("counts", &self.counts())
            .finish()
    }
}

impl Faults {
    /// Replace the configuration, reseed the RNG from it and reset the counters (faults stay on
    /// or off as they were).
    pub fn configure(&self, config: FaultConfig) {
        let mut inner = self.lock();
        inner.dice = Dice::new(config.seed, config.budget);
        inner.config = config;
        inner.failed.clear();
        self.considered.store(0, Ordering::SeqCst);
        self.injected.reset();
        self.retried.store(0, Ordering::SeqCst);
    }

    /// Start injecting, at the configured rates, into requests the filter admits.
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::SeqCst);
    }

    /// Stop injecting (counters are kept). Watches already told to drop still drop.
    pub fn disable(&self) {
        self.enabled.store(false, Ordering::SeqCst);
    }

    /// Whether faults are being injected.
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::SeqCst)
    }

    /// Faults left in the budget (`None`: unbounded).
    pub fn budget_left(&self) -> Option<u64> {
        let budget = self.lock().config.budget?;
        Some(budget.saturating_sub(self.counts().total()))
    }

    /// Requests considered, faults injected per kind and retries seen, since the last
    /// [`Faults::configure`].
    pub fn counts(&self) -> FaultCounts {
        FaultCounts {
            considered: self.considered.load(Ordering::SeqCst),
            injected: self.injected.tally(),
            retried: self.retried.load(Ordering::SeqCst),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decide the fault for one request, if any, and count it. Requests the User-Agent filter
    /// excludes, and every request while faults are off, are never faulted.
    pub fn decide(&self, req: &RequestInfo<'_>) -> Option<Fault> {
        if !self.is_enabled() {
            return None;
        }
        let mut inner = self.lock();
        if !inner.config.user_agent.admits(req.user_agent) {
            return None;
        }
        self.considered.fetch_add(1, Ordering::SeqCst);
        let key = (req.method.to_string(), req.path.to_string());
        if inner.failed.remove(&key).is_some() {
            self.retried.fetch_add(1, Ordering::SeqCst);
        }
        if inner.dice.budget_spent(self.injected.total()) {
            return None;
        }
        let roll = inner.dice.per_mille();
        let mut threshold = 0;
        let mut chosen = None;
        for kind in FaultKind::ALL {
            if !kind.applies(req) {
                continue;
            }
            threshold += inner.config.rate(kind);
            if roll < threshold {
                chosen = Some(kind);
                break;
            }
        }
        let kind = chosen?;
        let fault = match kind {
            FaultKind::Conflict => Fault::Conflict,
            FaultKind::TooManyRequests => Fault::TooManyRequests,
            FaultKind::InternalError => Fault::InternalError,
            FaultKind::Slow => {
                let max = inner.config.slow_max;
                Fault::Slow(inner.dice.duration_up_to(max))
            }
            FaultKind::DropWatch => {
                let max = inner.config.drop_watch_max;
                Fault::DropWatch(inner.dice.duration_up_to(max))
            }
            FaultKind::ExpiredResourceVersion => {
                Fault::Expired(req.resource_version.unwrap_or_default().to_string())
            }
            FaultKind::LostResponse => Fault::LostResponse,
        };
        if !matches!(fault, Fault::Slow(_) | Fault::DropWatch(_)) {
            *inner.failed.entry(key).or_default() += 1;
        }
        self.injected.add(kind);
        Some(fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str) -> RequestInfo<'_> {
        RequestInfo {
            method: "GET",
            path,
            watch: false,
            resource_version: None,
            user_agent: "kube-rs",
        }
    }

    fn decisions(faults: &Faults, req: &RequestInfo<'_>, n: usize) -> Vec<Option<Fault>> {
        (0..n).map(|_| faults.decide(req)).collect()
    }

    #[test]
    fn off_until_enabled_and_after_disabled() {
        let faults = Faults::default();
        faults.configure(FaultConfig::uniform(1000));
        assert_eq!(faults.decide(&get("/api/v1/pods")), None);
        faults.enable();
        assert!(faults.decide(&get("/api/v1/pods")).is_some());
        faults.disable();
        assert_eq!(faults.decide(&get("/api/v1/pods")), None);
        assert_eq!(faults.counts().total(), 1);
    }

    #[test]
    fn same_seed_same_decisions() {
        let run = |seed| {
            let faults = Faults::default();
            faults.configure(FaultConfig {
                seed,
                ..FaultConfig::uniform(100)
            });
            faults.enable();
            decisions(&faults, &get("/api/v1/pods"), 200)
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn rates_are_per_mille_of_applicable_requests() {
        let faults = Faults::default();
        faults.configure(FaultConfig::default().with_rate(FaultKind::InternalError, 200));
        faults.enable();
        let n = decisions(&faults, &get("/api/v1/pods"), 5000)
            .into_iter()
            .flatten()
            .count();
        // 20% of 5000 = 1000; a seeded RNG lands well within ±20%.
        assert!((800..1200).contains(&n), "{n} faults");
        assert_eq!(faults.counts().of(FaultKind::InternalError), n as u64);
        assert_eq!(faults.counts().considered, 5000);
    }

    #[test]
    fn kinds_only_hit_requests_they_apply_to() {
        let faults = Faults::default();
        faults.configure(
            FaultConfig::default()
                .with_rate(FaultKind::Conflict, 1000)
                .with_rate(FaultKind::DropWatch, 1000)
                .with_rate(FaultKind::ExpiredResourceVersion, 1000),
        );
        faults.enable();
        assert_eq!(faults.decide(&get("/api/v1/pods")), None);
        let patch = RequestInfo {
            method: "PATCH",
            ..get("/api/v1/nodes/a")
        };
        assert_eq!(faults.decide(&patch), Some(Fault::Conflict));
        faults.configure(FaultConfig::default().with_rate(FaultKind::LostResponse, 1000));
        let post = RequestInfo {
            method: "POST",
            ..get("/api/v1/pods")
        };
        assert_eq!(faults.decide(&post), Some(Fault::LostResponse));
        assert_eq!(faults.decide(&get("/api/v1/pods")), None);
        faults.configure(
            FaultConfig::default()
                .with_rate(FaultKind::DropWatch, 1000)
                .with_rate(FaultKind::ExpiredResourceVersion, 1000),
        );
        let watch = RequestInfo {
            watch: true,
            resource_version: Some("0"),
            ..get("/api/v1/pods")
        };
        assert!(matches!(faults.decide(&watch), Some(Fault::DropWatch(_))));
        let from_rv = RequestInfo {
            resource_version: Some("12"),
            ..get("/api/v1/pods")
        };
        assert_eq!(faults.decide(&from_rv), Some(Fault::Expired("12".into())));
    }

    #[test]
    fn budget_bounds_the_load() {
        let faults = Faults::default();
        faults.configure(FaultConfig {
            budget: Some(5),
            ..FaultConfig::uniform(1000)
        });
        faults.enable();
        let n = decisions(&faults, &get("/api/v1/pods"), 50)
            .into_iter()
            .flatten()
            .count();
        assert_eq!(n, 5);
        assert_eq!(faults.budget_left(), Some(0));
    }

    #[test]
    fn user_agent_filter_spares_other_clients() {
        let faults = Faults::default();
        faults.configure(FaultConfig {
            user_agent: UserAgentFilter::Except("kubectl".into()),
            ..FaultConfig::uniform(1000)
        });
        faults.enable();
        let kubectl = RequestInfo {
            user_agent: "kubectl/v1.33.0 (linux/amd64)",
            ..get("/api/v1/pods")
        };
        assert_eq!(faults.decide(&kubectl), None);
        assert!(faults.decide(&get("/api/v1/pods")).is_some());
        assert_eq!(faults.counts().considered, 1);
    }

    #[test]
    fn a_repeated_failed_request_counts_as_a_retry() {
        let faults = Faults::default();
        faults.configure(FaultConfig {
            budget: Some(1),
            ..FaultConfig::default().with_rate(FaultKind::InternalError, 1000)
        });
        faults.enable();
        assert_eq!(faults.decide(&get("/a")), Some(Fault::InternalError));
        assert_eq!(faults.decide(&get("/b")), None);
        assert_eq!(faults.counts().retried, 0);
        assert_eq!(faults.decide(&get("/a")), None);
        assert_eq!(faults.decide(&get("/a")), None);
        assert_eq!(faults.counts().retried, 1);
    }

    #[test]
    fn counters_tally_every_kind_and_reset() {
        let counters = Counters::<FaultKind>::default();
        counters.add(FaultKind::Slow);
        counters.add(FaultKind::Slow);
        counters.add(FaultKind::LostResponse);
        let tally = counters.tally();
        assert_eq!(tally.injected.len(), FaultKind::ALL.len());
        assert_eq!((tally.total(), tally.of(FaultKind::Slow)), (3, 2));
        assert_eq!(tally.of(FaultKind::Conflict), 0);
        assert_eq!(
            tally.to_string(),
            "api faults: 3 (conflict=0 too-many-requests=0 internal-error=0 slow=2 \
             drop-watch=0 expired=0 lost-response=1)"
        );
        counters.reset();
        assert_eq!(counters.tally(), Tally::default());
    }

    #[test]
    fn dice_respect_the_budget_and_the_maximum_duration() {
        let mut dice = Dice::new(1, Some(2));
        assert!(!dice.budget_spent(1));
        assert!(dice.budget_spent(2));
        assert!(!Dice::new(1, None).budget_spent(u64::MAX));
        for _ in 0..200 {
            assert!(dice.per_mille() < 1000);
            assert!(dice.duration_up_to(Duration::from_millis(5)) <= Duration::from_millis(5));
        }
    }

    #[test]
    fn settings_hand_over_items_and_name_the_bad_one() {
        let mut seen = Vec::new();
        let ok: Result<(), String> = parse_settings(
            " a=1, ,b=x ",
            |item, why| format!("{item}: {why}"),
            |s| {
                seen.push((s.key.to_string(), s.value.to_string()));
                Ok(())
            },
        );
        assert_eq!(ok, Ok(()));
        assert_eq!(seen, [("a".into(), "1".into()), ("b".into(), "x".into())]);
        let error = |item: &str, why: &str| format!("{item}: {why}");
        let rate = |s: Setting<'_>| s.per_mille().map(drop);
        assert_eq!(
            parse_settings("a=1001", error, rate),
            Err("a=1001: a rate is per mille, at most 1000".to_string())
        );
        assert_eq!(
            parse_settings("a=-1", error, rate),
            Err("a=-1: the value must be a non-negative integer".to_string())
        );
        assert_eq!(
            parse_settings("a", error, rate),
            Err("a: expected key=value".to_string())
        );
    }

    #[test]
    fn config_strings_parse_or_say_why_not() {
        let cfg = FaultConfig::parse("all=20,slow=50,seed=7,budget=300,except-agent=kubectl")
            .expect("parses");
        assert_eq!(cfg.rate(FaultKind::Conflict), 20);
        assert_eq!(cfg.rate(FaultKind::Slow), 50);
        assert_eq!(cfg.seed, 7);
        assert_eq!(cfg.budget, Some(300));
        assert_eq!(cfg.user_agent, UserAgentFilter::Except("kubectl".into()));
        assert!(FaultConfig::parse("bogus=1").is_err());
        assert!(FaultConfig::parse("slow=1001").is_err());
        assert!(FaultConfig::parse("slow").is_err());
        assert!(FaultConfig::parse("seed=-1").is_err());
    }
}
