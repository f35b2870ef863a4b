//! The operator: settings, the shared controller context, events, and starting every
//! controller against a cluster (`karpenter run`) or the embedded sandbox (`karpenter sandbox`).

pub mod cloud;
pub mod events;
pub mod metrics;
pub mod options;
pub mod reconcile;
pub mod report;
pub mod sandbox;
pub mod workload;

use std::sync::Arc;

use kube::Client;
use tokio::task::JoinHandle;

use crate::clock::Clock;
use crate::cloudprovider::CloudProvider;
use crate::state::ClusterState;

pub use options::{ControllerOptions, Settings};

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
/// Errors: the client cannot be built from `config` (TLS or proxy settings).
pub fn client(mut config: kube::Config) -> Result<Client, kube::Error> {
    config.default_retry = false;
    Client::try_from(config)
}

/// Start the watches and every controller. The returned handles stop them when aborted.
pub fn start(
    client: Client,
    cloud: Arc<dyn CloudProvider>,
    clock: Arc<dyn Clock>,
    settings: Settings,
) -> (Arc<Context>, Vec<JoinHandle<()>>) {
    let (state, mut tasks) = ClusterState::start(&client);
    let ctx = Arc::new(Context {
        recorder: events::Recorder::new(client.clone()),
        client,
        cloud,
        state,
        clock,
        settings,
        evictions: Default::default(),
        metrics: Arc::new(metrics::Metrics::new()),
    });
    tasks.push(tokio::spawn(crate::provisioning::run(Arc::clone(&ctx))));
    tasks.push(tokio::spawn(crate::nodeclaim::lifecycle::run(Arc::clone(
        &ctx,
    ))));
    tasks.push(tokio::spawn(crate::node::termination::run(Arc::clone(
        &ctx,
    ))));
    tasks.push(tokio::spawn(crate::nodepool::run(Arc::clone(&ctx))));
    tasks.push(tokio::spawn(crate::nodeclass::run(Arc::clone(&ctx))));
    tasks.push(tokio::spawn(crate::disruption::run(Arc::clone(&ctx))));
    tasks.push(tokio::spawn(crate::disruption::upgrade::run(Arc::clone(
        &ctx,
    ))));
    tasks.push(tokio::spawn(crate::nodeclaim::garbagecollection::run(
        Arc::clone(&ctx),
    )));
    (ctx, tasks)
}
