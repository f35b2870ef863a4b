//! Test builders for `status`: three NodePools (limited, paused without limits, idle), the
//! shared NodeClaim sample plus a drifted NodeClaim, the Nodes they registered, the pods on
//! them and the `default` EC2NodeClass (`maxPods: 8`), at the shared fixed `now`.

use std::sync::Arc;

use crds::upgrade::PAUSED_ANNOTATION;
use crds::{EC2NodeClass, NodeClaim, NodePool};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use testutil::{condition, ec2nodeclass, node, nodepool, pod};

use super::document::Snapshot;

use super::limits::Sizing;
use super::load::Loads;
use super::rows::{PriceBook, Row};
use super::sort::{SortBy, sort_rows};

pub use crate::fixtures::FixedPrices;

/// The instant every snapshot is taken at.
pub fn now() -> Timestamp {
    crate::fixtures::now()
}

/// A NodePool named `name`, created 2025-05-01, with `limits` (resource, quantity).
pub fn pool(name: &str, limits: &[(&str, &str)]) -> NodePool {
    limits
        .iter()
        .fold(nodepool(name), |pool, (resource, quantity)| {
            pool.limit(resource, quantity)
        })
        .created("2025-05-01T00:00:00Z")
        .build()
}

/// Sets the NodePool's `status.resources`.
pub fn set_usage(pool: &mut NodePool, usage: &[(&str, &str)]) {
    let status = pool.status.get_or_insert_with(Default::default);
    for (k, v) in usage {
        status.resources.insert(
            (*k).to_owned(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity((*v).to_owned()),
        );
    }
}

/// Sets condition `type_` of the NodePool to `status` with `reason`.
pub fn set_condition(pool: &mut NodePool, type_: &str, status: &str, reason: &str) {
    let conds = &mut pool.status.get_or_insert_with(Default::default).conditions;
    conds.retain(|c| c.type_ != type_);
    let condition = condition(type_, status)
        .reason(reason)
        .at("2025-06-01T11:00:00Z");
    conds.push(serde_json::from_value(condition.json()).expect("valid condition"));
}

/// `default` (limits cpu 1000, memory 1000Gi; two nodes' worth of usage; the controller says
/// drifted nodes wait), `gpu` (no limits, paused by an operator) and `idle` (cpu limit 10, no
/// status yet).
pub fn pools() -> Vec<NodePool> {
    let mut default = pool("default", &[("cpu", "1000"), ("memory", "1000Gi")]);
    set_usage(
        &mut default,
        &[("cpu", "6"), ("memory", "24064Mi"), ("nodes", "2")],
    );
    set_condition(
        &mut default,
        crds::upgrade::UPGRADING_CONDITION,
        "False",
        "Waiting",
    );
    let mut gpu = pool("gpu", &[]);
    set_usage(
        &mut gpu,
        &[("cpu", "4"), ("memory", "16Gi"), ("nodes", "1")],
    );
    gpu.metadata.annotations = Some([(PAUSED_ANNOTATION.to_owned(), "true".to_owned())].into());
    let idle = pool("idle", &[("cpu", "10")]);
    vec![idle, gpu, default]
}

/// The shared sample (one NodeClaim in each state, one stray) plus `default-drift`: ready and
/// drifted, a spot c5.xlarge created two days before [`now`]. The registering NodeClaim has an
/// allocatable (no Node yet). The `gpu` NodeClaims name the node class `gpu`, which is not
/// among [`node_classes`]; the others name `default`.
pub fn claims() -> Vec<NodeClaim> {
    let mut claims = crate::fixtures::sample();
    let mut drifted = crate::fixtures::claim("default-drift", "default", "2025-05-30T09:30:00Z");
    crate::fixtures::set_offering(&mut drifted, "c5.xlarge", "spot", "us-east-1c");
    crate::fixtures::set_true(
        &mut drifted,
        &["Launched", "Registered", "Initialized", "Ready", "Drifted"],
    );
    let status = drifted.status.get_or_insert_with(Default::default);
    status.provider_id = Some("aws:///us-east-1c/i-0a1b2c3d4e5f60005".into());
    status.node_name = Some("ip-10-0-3-44.ec2.internal".into());
    claims.push(drifted);
    // The registering NodeClaim knows its allocatable before its Node joins.
    if let Some(registering) = claims
        .iter_mut()
        .find(|c| c.metadata.name.as_deref() == Some("default-fghij"))
    {
        let status = registering.status.get_or_insert_with(Default::default);
        for (resource, quantity) in [("cpu", "3920m"), ("memory", "6903Mi")] {
            status.allocatable.insert(
                resource.to_owned(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(quantity.to_owned()),
            );
        }
    }
    for claim in &mut claims {
        if claim
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("gpu-"))
        {
            claim.spec.node_class_ref.name = "gpu".into();
        }
    }
    claims
}

/// The `default` EC2NodeClass: AL2023 with `kubelet.maxPods: 8`.
pub fn node_classes() -> Vec<EC2NodeClass> {
    vec![
        ec2nodeclass("default")
            .merge(serde_json::json!({"spec": {"kubelet": {"maxPods": 8}}}))
            .build(),
    ]
}

/// Every NodePool, NodeClaim, Node, pod and EC2NodeClass of the fixtures.
pub fn snapshot() -> Snapshot {
    Snapshot {
        pools: pools(),
        claims: claims(),
        nodes: nodes(),
        pods: pods().into_iter().map(Arc::new).collect(),
        node_classes: node_classes(),
    }
}

/// [`snapshot`] plus `default-spot`, a spot c5.large Karpenter is replacing because EC2 sent
/// its two-minute interruption warning (drain due at 12:01:40), and its replacement
/// The document of [`snapshot`] under the default view, at [`now`], priced by [`FixedPrices`].
pub fn document() -> super::document::Document {
    super::document::Document::build(
        &snapshot(),
        &super::document::View::default(),
        now(),
        &FixedPrices,
    )
}

/// `default-spot-r`, launching.
pub fn snapshot_with_interruption() -> Snapshot {
    let mut snapshot = snapshot();
    let mut spot = crate::fixtures::claim("default-spot", "default", "2025-06-01T10:00:00Z");
    crate::fixtures::set_offering(&mut spot, "c5.large", "spot", "us-east-1b");
    crate::fixtures::set_true(
        &mut spot,
        &["Launched", "Registered", "Initialized", "Ready"],
    );
    crate::fixtures::mark_disrupted(&mut spot, "SpotInterrupted", Some("2025-06-01T12:01:40Z"));
    let status = spot.status.get_or_insert_with(Default::default);
    status.provider_id = Some("aws:///us-east-1b/i-0a1b2c3d4e5f60006".into());
    status.node_name = Some("ip-10-0-2-6.ec2.internal".into());
    let mut replacement =
        crate::fixtures::claim("default-spot-r", "default", "2025-06-01T11:59:41Z");
    replacement.metadata.annotations = Some(
        [
            (
                crds::disruption::COMMAND_ANNOTATION.to_owned(),
                "spotinterrupted-x7k2p".to_owned(),
            ),
            (
                crds::disruption::REPLACES_ANNOTATION.to_owned(),
                "default-spot".to_owned(),
            ),
        ]
        .into(),
    );
    snapshot.claims.extend([spot, replacement]);
    snapshot.nodes.push(sized_node(
        "ip-10-0-2-6.ec2.internal",
        "1930m",
        "3389Mi",
        "8",
    ));
    snapshot.pods.push(Arc::new(
        pod("cart-1")
            .cpu("250m")
            .memory("256Mi")
            .owner("apps/v1", "ReplicaSet", "cart-7c9f", "uid-cart")
            .on_node("ip-10-0-2-6.ec2.internal")
            .build(),
    ));
    snapshot
}

/// A scale-down as two snapshots: [`snapshot`] plus `default-idle`, a ready on-demand m5.large
/// running only a DaemonSet's pod (consolidation's Empty case); then the same with
/// `default-idle` deleted by consolidation (a deletionTimestamp and the `DisruptionReason`
/// condition the controller sets, reason `Empty`) and its node tainted `karpenter.sh/disrupted`.
pub fn scale_down() -> (Snapshot, Snapshot) {
    let mut before = snapshot();
    let mut idle = crate::fixtures::claim("default-idle", "default", "2025-06-01T09:00:00Z");
    crate::fixtures::set_offering(&mut idle, "m5.large", "on-demand", "us-east-1b");
    crate::fixtures::set_true(
        &mut idle,
        &["Launched", "Registered", "Initialized", "Ready"],
    );
    let status = idle.status.get_or_insert_with(Default::default);
    status.provider_id = Some("aws:///us-east-1b/i-0a1b2c3d4e5f60007".into());
    status.node_name = Some("ip-10-0-2-50.ec2.internal".into());
    before.claims.push(idle);
    before.nodes.push(sized_node(
        "ip-10-0-2-50.ec2.internal",
        "1930m",
        "7291Mi",
        "8",
    ));
    before
        .pods
        .push(Arc::new(daemon_pod("ip-10-0-2-50.ec2.internal")));
    let mut after = before.clone();
    let idle = after
        .claims
        .iter_mut()
        .find(|c| c.metadata.name.as_deref() == Some("default-idle"))
        .expect("just added");
    crate::fixtures::mark_deleting(idle);
    let reason = condition(crds::conditions::DISRUPTION_REASON, "True")
        .reason("Empty")
        .at("2025-06-01T11:59:00Z");
    if let Some(status) = idle.status.as_mut() {
        status
            .conditions
            .push(serde_json::from_value(reason.json()).expect("valid condition"));
    }
    // Termination taints the node so that nothing new lands on it.
    if let Some(node) = after
        .nodes
        .iter_mut()
        .find(|n| n.metadata.name.as_deref() == Some("ip-10-0-2-50.ec2.internal"))
    {
        node.spec.get_or_insert_with(Default::default).taints =
            Some(vec![crds::labels::disrupted_no_schedule_taint()]);
    }
    (before, after)
}

/// A Node `name` with an EKS-like allocatable.
fn sized_node(name: &str, cpu: &str, memory: &str, pods: &str) -> Node {
    node(name)
        .allocatable("cpu", cpu)
        .allocatable("memory", memory)
        .allocatable("pods", pods)
        .build()
}

/// The Nodes of the ready (m5.large) and drifted (c5.xlarge) NodeClaims, 8 pods each as their
/// node class says; of the initializing and terminating (g5.xlarge) NodeClaims, ENI-limited
/// to 58 pods; and one no NodeClaim names.
pub fn nodes() -> Vec<Node> {
    vec![
        sized_node("ip-10-0-1-17.ec2.internal", "1930m", "7291Mi", "8"),
        sized_node("ip-10-0-3-44.ec2.internal", "3920m", "6903Mi", "8"),
        sized_node("ip-10-0-3-9.ec2.internal", "3920m", "14879Mi", "58"),
        sized_node("ip-10-0-1-200.ec2.internal", "3920m", "14879Mi", "58"),
        other_node(),
    ]
}

/// `ip-10-0-9-9.ec2.internal`, a Node no NodeClaim names: an on-demand m5.large of an EKS
/// managed node group, ready, created 30 days before [`now`].
pub fn other_node() -> Node {
    node("ip-10-0-9-9.ec2.internal")
        .label("node.kubernetes.io/instance-type", "m5.large")
        .label("eks.amazonaws.com/capacityType", "ON_DEMAND")
        .label("eks.amazonaws.com/nodegroup", "system")
        .label("topology.kubernetes.io/zone", "us-east-1a")
        .created("2025-05-02T12:00:00Z")
        .ready("True")
        .allocatable("cpu", "1930m")
        .allocatable("memory", "7291Mi")
        .allocatable("pods", "29")
        .build()
}

/// A DaemonSet's pod on `node`.
fn daemon_pod(node: &str) -> Pod {
    pod(format!("agent-{node}"))
        .namespace("kube-system")
        .cpu("100m")
        .memory("128Mi")
        .owner("apps/v1", "DaemonSet", "agent", "uid-agent")
        .on_node(node)
        .build()
}

/// The ready node runs two web pods and the DaemonSet's; the drifted node only the
/// DaemonSet's (empty); the initializing node nothing yet; the terminating node a pod being
/// evicted and the DaemonSet's. Plus a pending pod, a finished one and pods on a Node no
/// NodeClaim names, none of which count on the NodeClaims' nodes.
pub fn pods() -> Vec<Pod> {
    let ready = "ip-10-0-1-17.ec2.internal";
    let terminating = "ip-10-0-1-200.ec2.internal";
    let web = |name: &str, node: &str| {
        pod(name)
            .cpu("500m")
            .memory("1Gi")
            .owner("apps/v1", "ReplicaSet", "web-5d8f", "uid-web")
            .on_node(node)
    };
    vec![
        web("web-1", ready).build(),
        web("web-2", ready).build(),
        daemon_pod(ready),
        daemon_pod("ip-10-0-3-44.ec2.internal"),
        web("web-3", terminating)
            .deleting("2025-06-01T11:59:30Z")
            .build(),
        daemon_pod(terminating),
        pod("pending").cpu("2").build(),
        pod("job-done")
            .cpu("2")
            .on_node(ready)
            .phase("Succeeded")
            .build(),
        web("web-4", "ip-10-0-9-9.ec2.internal").build(),
    ]
}

/// Rows for every NodeClaim, in the default order.
pub fn build_rows(claims: &[NodeClaim], now: Timestamp, prices: &dyn PriceBook) -> Vec<Row> {
    let (loads, sizing) = (Loads::default(), Sizing::default());
    let mut rows: Vec<Row> = claims
        .iter()
        .map(|c| Row::of(c, now, prices, &loads, &sizing))
        .collect();
    sort_rows(&mut rows, SortBy::default());
    rows
}
