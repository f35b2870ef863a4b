//! The operator: settings, the shared controller context, events, and starting every
//! controller against a cluster (`karpenter run`) or the embedded sandbox (`karpenter sandbox`),
//! directly ([`start`]) or only while this replica holds the leader Lease ([`start_operator`]).

pub mod cloud;
pub mod events;
pub mod feature_gates;
pub mod http;
pub mod leader;
pub mod logging;
pub mod metrics;
pub mod options;
pub mod reconcile;
pub mod replica;
pub mod report;
pub mod sandbox;
pub mod workload;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::clock::Clock;
use crate::cloudprovider::CloudProvider;
use crate::state::ClusterState;

pub use options::{ControllerOptions, RunOptions, RunSettings, Settings};
pub use replica::{Operator, Stopped, start_operator};

/// What every controller shares.
pub struct Context {
    /// API client.
    pub client: Client,
    /// The cloud.
    pub cloud: Arc<dyn CloudProvider>,
    /// Watch-fed caches.
    pub state: ClusterState,
    /// Event publisher.
    pub recorder: events::Recorder,
    /// Time source.
    pub clock: Arc<dyn Clock>,
    /// Validated settings.
    pub settings: Settings,
    /// Eviction retry delays of pods on draining nodes.
    pub evictions: crate::node::drain::EvictionBackoff,
    /// Prometheus metrics (`/metrics`).
    pub metrics: Arc<metrics::Metrics>,
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

/// Start the watches and every controller. The returned handles stop them when aborted.
pub fn start(
    client: Client,
    cloud: Arc<dyn CloudProvider>,
    clock: Arc<dyn Clock>,
    settings: Settings,
) -> (Arc<Context>, Vec<JoinHandle<()>>) {
    let (ctx, mut tasks) = start_caches(client, cloud, clock, settings);
    tasks.extend(start_controllers(&ctx).into_iter().map(|(_, t)| t));
    (ctx, tasks)
}

/// Start the watches (the cluster-state caches) and build the context, without any
/// controller: what a standby replica runs. The handles end the watches when aborted.
pub fn start_caches(
    client: Client,
    cloud: Arc<dyn CloudProvider>,
    clock: Arc<dyn Clock>,
    settings: Settings,
) -> (Arc<Context>, Vec<JoinHandle<()>>) {
    let (state, tasks) = ClusterState::start(&client);
    let metrics = Arc::new(metrics::Metrics::new());
    let ctx = Arc::new(Context {
        recorder: events::Recorder::new(client.clone()),
        client,
        cloud: crate::cloudprovider::metered::MeteredCloud::wrap(cloud, Arc::clone(&metrics)),
        state,
        clock,
        settings,
        evictions: Default::default(),
        metrics,
    });
    (ctx, tasks)
}

type Controller = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Every controller, named as upstream's logs name them (the `controller` log field).
fn controllers(ctx: &Arc<Context>) -> Vec<(&'static str, Controller)> {
    let c = || Arc::clone(ctx);
    vec![
        ("provisioner", Box::pin(crate::provisioning::run(c()))),
        (
            "nodeclaim.lifecycle",
            Box::pin(crate::nodeclaim::lifecycle::run(c())),
        ),
        (
            "node.termination",
            Box::pin(crate::node::termination::run(c())),
        ),
        ("nodepool", Box::pin(crate::nodepool::run(c()))),
        ("nodeclass", Box::pin(crate::nodeclass::run(c()))),
        ("disruption", Box::pin(crate::disruption::run(c()))),
        (
            "disruption.upgrade",
            Box::pin(crate::disruption::upgrade::run(c())),
        ),
        (
            "nodeclaim.garbagecollection",
            Box::pin(crate::nodeclaim::garbagecollection::run(c())),
        ),
    ]
}

/// Spawn every controller (provisioning, NodeClaim lifecycle, termination, NodePool, node
/// class, disruption, upgrades, garbage collection) on `ctx`, each in a span carrying its
/// `controller` name. The handles stop them when aborted.
pub fn start_controllers(ctx: &Arc<Context>) -> Vec<(&'static str, JoinHandle<()>)> {
    controllers(ctx)
        .into_iter()
        .map(|(name, run)| {
            let span = tracing::info_span!("controller", controller = name);
            let run = crate::cloudprovider::metered::in_controller(name, run);
            (name, tokio::spawn(run.instrument(span)))
        })
        .collect()
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
