//! What every controller stands on: the shared [`Context`] (API client, cloud, caches, clock,
//! settings, Event recorder, metrics), the API client's configuration, the reconcile error and
//! requeue policy ([`reconcile`]), Events ([`events`]), metrics ([`metrics`], [`metered`]),
//! settings ([`options`], [`feature_gates`]), leader election ([`leader`]), the HTTP endpoints
//! ([`http`]), logging ([`logging`]) and eviction pacing ([`eviction`]). Nothing here knows a
//! particular controller; `crate::controllers` starts them.

pub mod events;
pub mod eviction;
pub mod feature_gates;
pub mod http;
pub mod leader;
pub mod logging;
pub mod metered;
pub mod metrics;
pub mod options;
pub mod reconcile;
pub mod summary;
pub mod unsupported;

use std::sync::Arc;
use std::time::Duration;

use kube::Client;

use crate::cloudprovider::CloudProvider;
use crate::state::ClusterState;
use karpenter_core::clock::Clock;

pub use options::{ControllerOptions, RunOptions, RunSettings, Settings};

/// What every controller shares, built once per replica by `crate::controllers::start_caches`.
pub struct Context {
    /// The API client every controller writes through ([`client`] or [`rate_limited_client`]).
    pub client: Client,
    /// The cloud provider, wrapped so every call is timed and its errors counted
    /// ([`metered::MeteredCloud`]).
    pub cloud: Arc<dyn CloudProvider>,
    /// The watch-fed caches decisions read (`ClusterState::snapshot` copies them).
    pub state: ClusterState,
    /// Publishes Events with upstream's reasons and dedupe windows.
    pub recorder: events::Recorder,
    /// Where decisions read "now" (the system clock, or a shifted one in tests).
    pub clock: Arc<dyn Clock>,
    /// Counts the jumps of `clock` (a test moving it on; the system clock never jumps), so
    /// waits measured on the clock are evaluated again at once: every kube-runtime controller
    /// reconciles all its objects ([`reconcile::drive`]) and loops wake up ([`Context::pause`]).
    pub clock_jumps: tokio::sync::watch::Receiver<u64>,
    /// Settings validated once at startup (timeouts, batch windows, feature gates, ...).
    pub settings: Settings,
    /// Per-pod retry delays of refused evictions on draining nodes.
    pub evictions: eviction::EvictionBackoff,
    /// This replica's Prometheus registry, served on `/metrics`.
    pub metrics: Arc<metrics::Metrics>,
}

impl Context {
    /// Wait `period` of real time, or less when the clock jumps (a test moved it on): loops
    /// that poll on a period call this, so what they measure on the clock is looked at again
    /// as soon as the clock says it is due.
    pub async fn pause(&self, period: Duration) {
        let mut jumps = self.clock_jumps.clone();
        jumps.mark_unchanged();
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            () = next_jump(&mut jumps) => {}
        }
    }

    /// A stream that yields once each time the clock jumps (nothing from the system clock).
    pub fn clock_jumped(&self) -> impl futures::Stream<Item = ()> + Send + Sync + 'static {
        use futures::StreamExt;
        tokio_stream::wrappers::WatchStream::from_changes(self.clock_jumps.clone()).map(|_| ())
    }
}

/// Resolves when the clock behind `jumps` next jumps, and never for a clock that cannot jump
/// (one that dropped its listener, such as the system clock, closes the channel at once: a
/// plain `changed()` would then resolve immediately and turn every wait into a busy loop).
pub async fn next_jump(jumps: &mut tokio::sync::watch::Receiver<u64>) {
    if jumps.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A receiver of `clock`'s jump count for [`Context::clock_jumps`].
pub fn clock_jumps(clock: &dyn Clock) -> tokio::sync::watch::Receiver<u64> {
    let (jumped, jumps) = tokio::sync::watch::channel(0u64);
    clock.on_jump(Box::new(move || {
        jumped.send_modify(|n| *n += 1);
        !jumped.is_closed()
    }));
    jumps
}

/// The API client controllers use. kube's blanket client-side retry of 429, 503 and 504 is
/// turned off: every controller already retries a failed reconcile with backoff, and an
/// eviction refused by a PodDisruptionBudget answers 429, which the blanket retry would hide
/// for minutes (15 attempts) instead of letting the drain report it and move on.
///
/// Every request carries the User-Agent [`USER_AGENT`], so API server audit logs (and the
/// sandbox's, which tests check against `deploy/`'s RBAC rules) tell the controller's calls apart.
///
/// Errors: the client cannot be built from `config` (TLS or proxy settings).
pub fn client(config: kube::Config) -> Result<Client, kube::Error> {
    Client::try_from(controller_config(config))
}

/// What [`client`] changes in a configuration: no blanket retry, and our User-Agent unless
/// `config` already names one (a request carries one User-Agent header, not two).
fn controller_config(mut config: kube::Config) -> kube::Config {
    config.default_retry = false;
    if !config
        .headers
        .iter()
        .any(|(name, _)| name == ::http::header::USER_AGENT)
    {
        config.headers.push((
            ::http::header::USER_AGENT,
            ::http::HeaderValue::from_static(USER_AGENT),
        ));
    }
    config
}

/// [`client`] with client-go's client-side rate limit (`KUBE_CLIENT_QPS`, `KUBE_CLIENT_BURST`):
/// at most `burst` requests are sent in any window of `burst / qps` seconds, so the average
/// stays at `qps` with bursts up to `burst` (tower's fixed-window limiter; client-go uses a
/// token bucket with the same long-run rate). A watch counts once, when it is opened. Values
/// below 1 are taken as 1.
///
/// Errors: as [`client`].
pub fn rate_limited_client(
    config: kube::Config,
    qps: u32,
    burst: u32,
) -> Result<Client, kube::Error> {
    let limit = rate_limit(qps, burst);
    Ok(
        kube::client::ClientBuilder::try_from(controller_config(config))?
            .with_layer(&limit)
            .build(),
    )
}

/// The User-Agent of the controller's API client: `karpenter-rs/<version>`.
pub const USER_AGENT: &str = concat!("karpenter-rs/", env!("CARGO_PKG_VERSION"));

/// The limiter [`rate_limited_client`] puts in front of the API: `burst` requests per window of
/// `burst / qps` seconds.
fn rate_limit(qps: u32, burst: u32) -> tower::limit::RateLimitLayer {
    let (qps, burst) = (qps.max(1), burst.max(1));
    let window = Duration::from_secs_f64(f64::from(burst) / f64::from(qps));
    tower::limit::RateLimitLayer::new(u64::from(burst), window)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer, Service, ServiceExt};

    #[test]
    fn the_user_agent_is_added_once() {
        let url: ::http::Uri = "https://127.0.0.1:6443".parse().expect("url");
        let ours = controller_config(kube::Config::new(url.clone()));
        let agents: Vec<_> = ours
            .headers
            .iter()
            .filter(|(n, _)| n == ::http::header::USER_AGENT)
            .map(|(_, v)| v.clone())
            .collect();
        assert_eq!(agents, vec![::http::HeaderValue::from_static(USER_AGENT)]);
        assert!(!ours.default_retry);
        let mut given = kube::Config::new(url);
        given.headers.push((
            ::http::header::USER_AGENT,
            ::http::HeaderValue::from_static("replica-a"),
        ));
        let theirs = controller_config(given);
        let agents: Vec<_> = theirs
            .headers
            .iter()
            .filter(|(n, _)| n == ::http::header::USER_AGENT)
            .map(|(_, v)| v.clone())
            .collect();
        assert_eq!(agents, vec![::http::HeaderValue::from_static("replica-a")]);
    }

    /// A clock that never jumps (the system clock drops its listener) leaves a wait to its
    /// timer: the regression was a closed jump channel ending every wait at once, so the
    /// garbage collector, the disruption loop and node repair spun on a core. A shifted clock
    /// that jumps ends the wait early. On tokio's paused clock: no real time passes.
    #[tokio::test(start_paused = true)]
    async fn a_wait_ends_on_its_timer_or_a_clock_jump_never_at_once() {
        use karpenter_core::clock::{ShiftedClock, SystemClock};
        let period = Duration::from_secs(10);
        let wait = |mut jumps: tokio::sync::watch::Receiver<u64>| async move {
            let start = tokio::time::Instant::now();
            tokio::select! {
                () = tokio::time::sleep(period) => {}
                () = next_jump(&mut jumps) => {}
            }
            start.elapsed()
        };
        assert_eq!(wait(clock_jumps(&SystemClock)).await, period);

        let shifted = ShiftedClock::default();
        let jumps = clock_jumps(&shifted);
        assert_eq!(
            wait(jumps.clone()).await,
            period,
            "no jump: the timer ends it"
        );
        let waiting = tokio::spawn(wait(jumps));
        tokio::time::sleep(Duration::from_secs(3)).await;
        shifted.advance(jiff::SignedDuration::from_mins(5));
        let waited = waiting.await.expect("wait");
        assert_eq!(waited, Duration::from_secs(3), "the jump ends it");
    }

    /// On tokio's paused clock (no real time passes): a burst goes through at once, the next
    /// request waits for the window, and the long-run rate is `qps`.
    #[tokio::test(start_paused = true)]
    async fn the_client_rate_limit_allows_a_burst_then_qps() {
        let mut svc = rate_limit(2, 4).layer(tower::service_fn(|()| async {
            Ok::<_, std::convert::Infallible>(tokio::time::Instant::now())
        }));
        let start = tokio::time::Instant::now();
        let mut sent = Vec::new();
        for _ in 0..9 {
            let at = svc
                .ready()
                .await
                .expect("ready")
                .call(())
                .await
                .expect("call");
            sent.push(at.duration_since(start));
        }
        assert!(sent[..4].iter().all(|d| d.is_zero()), "{sent:?}");
        assert_eq!(sent[4], Duration::from_secs(2), "{sent:?}");
        assert_eq!(
            sent[8],
            Duration::from_secs(4),
            "9 requests at 2 qps, burst 4"
        );
    }
}
