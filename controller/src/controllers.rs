//! Where every controller is started (upstream `pkg/controllers/controllers.go`): the caches and
//! the [`Context`], then provisioning, the NodeClaim lifecycle, node termination, NodePools, node
//! classes, drift, serial upgrades, garbage collection, NodeOverlay statuses (with
//! `NodeOverlay`; without it, a warning per overlay) and (with `NodeRepair`) node repair, each
//! as a task in a span named as upstream's logs name it. This is the one module that knows every controller; the controllers
//! know only `crate::runtime` and the caches.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use karpenter_core::clock::Clock;
use kube::Client;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::cloudprovider::CloudProvider;
use crate::runtime::feature_gates::FeatureGate;
use crate::runtime::{Context, Settings, events, metered, metrics};
use crate::state::ClusterState;

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
    let overlays = settings.feature_gates.enabled(FeatureGate::NodeOverlay);
    let (state, tasks) = ClusterState::start(&client, overlays);
    let metrics = Arc::new(metrics::Metrics::new());
    let ctx = Arc::new(Context {
        recorder: events::Recorder::new(client.clone()),
        client,
        cloud: metered::MeteredCloud::wrap(cloud, Arc::clone(&metrics)),
        state,
        clock_jumps: crate::runtime::clock_jumps(clock.as_ref()),
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
    let mut all: Vec<(&'static str, Controller)> = vec![
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
        ("nodeclaim.disruption", Box::pin(crate::drift::run(c()))),
        ("disruption", Box::pin(crate::disruption::run(c()))),
        (
            "interruption",
            Box::pin(crate::interruption_queue::run(c())),
        ),
        (
            "nodeclaim.garbagecollection",
            Box::pin(crate::nodeclaim::garbagecollection::run(c())),
        ),
    ];
    // Upstream registers its capacity reservation controllers only with the gate on.
    if ctx
        .settings
        .feature_gates
        .enabled(FeatureGate::ReservedCapacity)
    {
        all.push((
            "capacityreservation",
            Box::pin(crate::nodeclaim::capacity_reservation::run(c())),
        ));
    }
    // Upstream registers the NodeOverlay controller only with its gate on; with it off, each
    // overlay is told it is not applied.
    if ctx.settings.feature_gates.enabled(FeatureGate::NodeOverlay) {
        all.push(("nodeoverlay", Box::pin(crate::nodeoverlay::run(c()))));
    } else {
        all.push((
            "nodeoverlay.featuregate",
            Box::pin(crate::nodeoverlay::warn_gate_off(c())),
        ));
    }
    // Upstream registers node repair only with the gate on and a provider that has policies.
    if ctx.settings.feature_gates.enabled(FeatureGate::NodeRepair)
        && !ctx.cloud.repair_policies().is_empty()
    {
        all.push(("node.health", Box::pin(crate::node::health::run(c()))));
    }
    all
}

/// Spawn every controller (provisioning, NodeClaim lifecycle, termination, NodePool, node
/// class, disruption, upgrades, garbage collection, node repair with its gate) on `ctx`, each in
/// a span carrying its `controller` name. The handles stop them when aborted.
pub fn start_controllers(ctx: &Arc<Context>) -> Vec<(&'static str, JoinHandle<()>)> {
    crate::runtime::unsupported::log_gates(&ctx.settings.feature_gates);
    controllers(ctx)
        .into_iter()
        .map(|(name, run)| {
            let span = tracing::info_span!("controller", controller = name);
            let run = metered::in_controller(name, run);
            (name, tokio::spawn(run.instrument(span)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use karpenter_core::clock::SystemClock;

    use super::*;
    use crate::cloudprovider::sim::SimCloud;

    /// The controllers' names with `NodeRepair` on or off, on a context whose client points at
    /// nothing (the controllers are built, not run).
    async fn names(repair: bool) -> Vec<&'static str> {
        names_with(FeatureGate::NodeRepair, repair).await
    }

    /// The controllers' names with `gate` on or off.
    async fn names_with(gate: FeatureGate, on: bool) -> Vec<&'static str> {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        let client = Client::try_from(config).expect("client");
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let cloud = Arc::new(SimCloud::new("demo", Arc::clone(&clock)).expect("catalog"));
        let mut settings = Settings::default();
        settings.feature_gates.set(gate, on);
        let (ctx, tasks) = start_caches(client, cloud, clock, settings);
        let names = controllers(&ctx).into_iter().map(|(n, _)| n).collect();
        tasks.iter().for_each(JoinHandle::abort);
        names
    }

    #[tokio::test]
    async fn node_repair_runs_only_with_its_feature_gate() {
        assert!(names(true).await.contains(&"node.health"));
        let off = names(false).await;
        assert!(!off.contains(&"node.health"), "{off:?}");
        assert!(off.contains(&"interruption"), "{off:?}");
    }

    #[tokio::test]
    async fn the_nodeoverlay_controller_runs_only_with_its_feature_gate() {
        let on = names_with(FeatureGate::NodeOverlay, true).await;
        assert!(on.contains(&"nodeoverlay"), "{on:?}");
        assert!(!on.contains(&"nodeoverlay.featuregate"), "{on:?}");
        let off = names_with(FeatureGate::NodeOverlay, false).await;
        assert!(!off.contains(&"nodeoverlay"), "{off:?}");
        assert!(off.contains(&"nodeoverlay.featuregate"), "{off:?}");
    }

    #[tokio::test]
    async fn capacity_reservations_are_watched_only_with_their_feature_gate() {
        let on = names_with(FeatureGate::ReservedCapacity, true).await;
        assert!(on.contains(&"capacityreservation"), "{on:?}");
        let off = names_with(FeatureGate::ReservedCapacity, false).await;
        assert!(!off.contains(&"capacityreservation"), "{off:?}");
    }
}
