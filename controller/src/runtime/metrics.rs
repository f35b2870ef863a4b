//! Prometheus metrics under upstream Karpenter's names (`karpenter_…`), served on `/metrics`.
//!
//! One [`Metrics`] per operator (kept in the controller [`super::Context`]), so tests that run
//! several clusters in one process do not share counters. Two kinds of families:
//!
//! - **Decisions** (counters and histograms) are recorded where they happen, by one call per
//!   decision point: NodeClaims created, disrupted and terminated, nodes created and terminated,
//!   scheduling simulation durations, and every cloud provider call (through
//!   [`crate::runtime::metered::MeteredCloud`]).
//! - **State** (gauges) is derived from the cluster caches at scrape time by [`Metrics::encode`]:
//!   each gauge family is cleared and refilled, so the series of deleted objects disappear and no
//!   controller has to maintain them. Pods by state, nodes by phase, NodePool usage and limits,
//!   NodeClaim conditions.
//!
//! Names and labels follow upstream (`pkg/metrics`, `pkg/controllers/metrics/*`, the generated
//! metrics reference). Resource values are plain numbers: cpu in cores, memory and storage in
//! bytes, everything else in units (upstream's `Quantity.AsApproximateFloat64`).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crds::labels::{
    ARCH_LABEL, CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION,
    NODEPOOL_LABEL, TOPOLOGY_ZONE_LABEL,
};
use crds::{ConsolidationPolicy, NodeClaim, NodePool};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karpenter_core::pod_view::PodView;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::runtime::summary::{self, Summary};
use crate::state::ClusterState;
use karpenter_core::scheduling::pod::{PodInfo, is_owned_by};
use karpenter_core::scheduling::resources::parse_milli;

/// Metric reasons (the `reason` label of `karpenter_nodeclaims_created_total` and
/// `karpenter_nodeclaims_disrupted_total`), spelled as upstream does (lower snake case).
pub mod reason {
    /// Created by the provisioner for pending pods.
    pub const PROVISIONED: &str = "provisioned";
    /// Created to replace, or deleted as, a drifted NodeClaim.
    pub const DRIFTED: &str = "drifted";
    /// Deleted because `expireAfter` elapsed.
    pub const EXPIRED: &str = "expired";
    /// Deleted by node repair: its node matched a repair policy for longer than it tolerates.
    pub const UNHEALTHY: &str = "unhealthy";
    /// Deleted because its instance is gone.
    pub const GARBAGE_COLLECTED: &str = "garbage_collected";
    /// Deleted because no offering had capacity.
    pub const INSUFFICIENT_CAPACITY: &str = "insufficient_capacity";
    /// Deleted because its node class was not ready.
    pub const NODECLASS_NOT_READY: &str = "nodeclass_not_ready";
    /// Deleted because it did not launch within the launch timeout.
    pub const LAUNCH_TIMEOUT: &str = karpenter_core::lifecycle::liveness::LAUNCH_TIMEOUT;
    /// Deleted by consolidation because it was empty.
    pub const EMPTY: &str = "empty";
    /// Deleted or replaced by consolidation because its pods fit elsewhere or on a cheaper
    /// node (also the creation reason of that replacement).
    pub const UNDERUTILIZED: &str = "underutilized";
    /// Deleted because its node did not register within the registration TTL.
    pub const REGISTRATION_TIMEOUT: &str =
        karpenter_core::lifecycle::liveness::REGISTRATION_TIMEOUT;
}

/// The `controller` label of the provisioner's scheduling simulations.
pub const PROVISIONER: &str = "provisioner";
/// The `controller` label of consolidation's scheduling simulations (one per pass).
pub const DISRUPTION: &str = "disruption";

/// Histogram buckets for durations, in seconds (5ms to 10 minutes).
const DURATION_BUCKETS: [f64; 16] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

type FloatGauge = Gauge<f64, AtomicU64>;
type Amounts = BTreeMap<String, f64>;
type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// Buckets of `karpenter_consolidation_score` (upstream `disruption/metrics.go`); 0.5 is the
/// Balanced threshold at k = 2.
const SCORE_BUCKETS: [f64; 8] = [0.1, 0.25, 0.33, 0.5, 1.0, 2.0, 5.0, 10.0];

fn score_histogram() -> Histogram {
    Histogram::new(SCORE_BUCKETS)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileResultLabels {
    controller: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MoveLabels {
    decision: String,
    nodepool: String,
    policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CreatedLabels {
    reason: String,
    nodepool: String,
    min_values_relaxed: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TerminatedLabels {
    nodepool: String,
    capacity_type: String,
    zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DisruptedLabels {
    reason: String,
    nodepool: String,
    capacity_type: String,
    consolidation_policy: String,
    termination_mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    decision: String,
    reason: String,
    consolidation_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolReasonLabels {
    nodepool: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConsolidationTypeLabels {
    consolidation_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeCountLabels {
    nodepool: String,
    zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CloudLabels {
    controller: String,
    method: String,
    provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CloudErrorLabels {
    controller: String,
    method: String,
    provider: String,
    error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MessageTypeLabels {
    message_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PodStateLabels {
    name: String,
    namespace: String,
    owner: String,
    node: String,
    scheduled: String,
    nodepool: String,
    zone: String,
    arch: String,
    capacity_type: String,
    instance_type: String,
    phase: String,
    ready: String,
    managed: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeResourceLabels {
    node_name: String,
    nodepool: String,
    zone: String,
    arch: String,
    capacity_type: String,
    instance_type: String,
    phase: String,
    resource_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolResourceLabels {
    nodepool: String,
    resource_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabels {
    namespace: String,
    name: String,
    #[prometheus(flatten)]
    condition: ConditionKey,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionKey {
    r#type: String,
    status: String,
    reason: String,
}

/// The objects the scrape-time gauges are derived from (a copy of the cluster caches).
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// Pods in every namespace.
    pub pods: Vec<Arc<PodView>>,
    /// Every Node: `karpenter_nodes_allocatable`, the `karpenter_nodes_total_*_requests`
    /// gauges, `karpenter_cluster_state_node_count` and the node labels of `karpenter_pods_state`.
    pub nodes: Vec<Arc<Node>>,
    /// Every NodeClaim: NodePool usage (their `status.capacity`) and status-condition gauges.
    pub nodeclaims: Vec<Arc<NodeClaim>>,
    /// Every NodePool: `karpenter_nodepools_limit` and `karpenter_nodepools_usage`.
    pub nodepools: Vec<Arc<NodePool>>,
    /// Whether every cache has completed its initial list.
    pub synced: bool,
}

impl Observed {
    /// The current contents of the cluster caches.
    pub fn from_state(state: &ClusterState) -> Observed {
        Observed {
            pods: state.pods.state(),
            nodes: state.nodes.state(),
            nodeclaims: state.nodeclaims.state(),
            nodepools: state.nodepools.state(),
            synced: super::http::synced(state),
        }
    }
}

/// The operator's metric families and the registry that encodes them.
pub struct Metrics {
    registry: Registry,
    /// Serializes scrapes: each clears and refills the state gauges before encoding.
    scrape: Mutex<()>,
    nodeclaims_created: Family<CreatedLabels, Counter>,
    nodeclaims_terminated: Family<TerminatedLabels, Counter>,
    nodeclaims_disrupted: Family<DisruptedLabels, Counter>,
    nodes_created: Family<NodeCountLabels, Counter>,
    nodes_terminated: Family<NodeCountLabels, Counter>,
    eviction_requests: Family<CodeLabels, Counter>,
    scheduling_duration: Histograms<ControllerLabels>,
    cloud_duration: Histograms<CloudLabels>,
    cloud_errors: Family<CloudErrorLabels, Counter>,
    pods_state: Family<PodStateLabels, FloatGauge>,
    nodes_allocatable: Family<NodeResourceLabels, FloatGauge>,
    nodes_pod_requests: Family<NodeResourceLabels, FloatGauge>,
    nodes_daemon_requests: Family<NodeResourceLabels, FloatGauge>,
    node_count: FloatGauge,
    synced: FloatGauge,
    nodepools_usage: Family<PoolResourceLabels, FloatGauge>,
    nodepools_limit: Family<PoolResourceLabels, FloatGauge>,
    nodeclaim_conditions: Family<ConditionLabels, FloatGauge>,
    disruption_decisions: Family<DecisionLabels, Counter>,
    disruption_eligible: Family<ReasonLabels, FloatGauge>,
    allowed_disruptions: Family<PoolReasonLabels, FloatGauge>,
    consolidation_timeouts: Family<ConsolidationTypeLabels, Counter>,
    consolidation_score: Histograms<MoveLabels>,
    reconcile_time: Histograms<ReconcileLabels>,
    reconcile_total: Family<ReconcileResultLabels, Counter>,
    nodes_termination_duration: Summary,
    pods_startup_duration: Summary,
    consolidation_moves: Family<MoveLabels, Counter>,
    interruption_received: Family<MessageTypeLabels, Counter>,
    interruption_deleted: Counter,
    interruption_queue_duration: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry with every family registered and zero samples.
    pub fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            scrape: Mutex::new(()),
            nodeclaims_created: Family::default(),
            nodeclaims_terminated: Family::default(),
            nodeclaims_disrupted: Family::default(),
            nodes_created: Family::default(),
            nodes_terminated: Family::default(),
            eviction_requests: Family::default(),
            scheduling_duration: Family::new_with_constructor(duration_histogram),
            cloud_duration: Family::new_with_constructor(duration_histogram),
            cloud_errors: Family::default(),
            pods_state: Family::default(),
            nodes_allocatable: Family::default(),
            nodes_pod_requests: Family::default(),
            nodes_daemon_requests: Family::default(),
            node_count: FloatGauge::default(),
            synced: FloatGauge::default(),
            nodepools_usage: Family::default(),
            nodepools_limit: Family::default(),
            nodeclaim_conditions: Family::default(),
            disruption_decisions: Family::default(),
            disruption_eligible: Family::default(),
            allowed_disruptions: Family::default(),
            consolidation_timeouts: Family::default(),
            consolidation_score: Family::new_with_constructor(score_histogram),
            reconcile_time: Family::new_with_constructor(duration_histogram),
            reconcile_total: Family::default(),
            nodes_termination_duration: Summary::new(
                "karpenter_nodes_termination_duration_seconds",
                "The time taken between a node's deletion request and the removal of its finalizer. Labeled by NodePool.",
                &["nodepool"],
            ),
            pods_startup_duration: Summary::new(
                "karpenter_pods_startup_duration_seconds",
                "The time from pod creation until the pod is ready, for pods that waited to be scheduled.",
                &[],
            ),
            consolidation_moves: Family::default(),
            interruption_received: Family::default(),
            interruption_deleted: Counter::default(),
            interruption_queue_duration: duration_histogram(),
        };
        m.registered()
    }

    fn registered(mut self) -> Metrics {
        let r = &mut self.registry;
        // Counters get their `_total` suffix from the encoder.
        r.register(
            "karpenter_nodeclaims_created",
            "Number of nodeclaims created in total by Karpenter. Labeled by reason the nodeclaim was created, the owning nodepool, and whether minValues was relaxed.",
            self.nodeclaims_created.clone(),
        );
        r.register(
            "karpenter_nodeclaims_terminated",
            "Number of nodeclaims terminated in total by Karpenter. Labeled by the owning nodepool, capacity type and zone.",
            self.nodeclaims_terminated.clone(),
        );
        r.register(
            "karpenter_nodeclaims_disrupted",
            "Number of nodeclaims disrupted in total by Karpenter. Labeled by reason, the owning nodepool, capacity type, consolidation policy and termination mode.",
            self.nodeclaims_disrupted.clone(),
        );
        r.register(
            "karpenter_voluntary_disruption_decisions",
            "Number of disruption decisions performed. Labeled by disruption decision (delete, replace), reason and consolidation type.",
            self.disruption_decisions.clone(),
        );
        r.register(
            "karpenter_voluntary_disruption_eligible_nodes",
            "Number of nodes eligible for disruption by Karpenter. Labeled by disruption reason.",
            self.disruption_eligible.clone(),
        );
        r.register(
            "karpenter_nodepools_allowed_disruptions",
            "The number of nodes for a given NodePool that can be concurrently disrupting at a point in time. Labeled by NodePool and reason.",
            self.allowed_disruptions.clone(),
        );
        r.register(
            "karpenter_voluntary_disruption_consolidation_timeouts",
            "Number of times the consolidation algorithm has reached a timeout. Labeled by consolidation type.",
            self.consolidation_timeouts.clone(),
        );
        r.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller.",
            self.reconcile_time.clone(),
        );
        r.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller, by result (success or error).",
            self.reconcile_total.clone(),
        );
        r.register(
            "karpenter_consolidation_score",
            "Scores of consolidation moves of Balanced NodePools (savings fraction over disruption fraction). Labeled by decision, NodePool and consolidation policy.",
            self.consolidation_score.clone(),
        );
        r.register(
            "karpenter_consolidation_moves",
            "Consolidation moves approved or rejected by their NodePool's consolidation policy. Labeled by decision, NodePool and consolidation policy.",
            self.consolidation_moves.clone(),
        );
        r.register(
            "karpenter_interruption_received_messages",
            "Count of messages received from the SQS queue. Broken down by message type.",
            self.interruption_received.clone(),
        );
        r.register(
            "karpenter_interruption_deleted_messages",
            "Count of messages deleted from the SQS queue.",
            self.interruption_deleted.clone(),
        );
        r.register(
            "karpenter_interruption_message_queue_duration_seconds",
            "Amount of time an interruption message is on the queue before it is processed by karpenter.",
            self.interruption_queue_duration.clone(),
        );
        r.register(
            "karpenter_nodes_created",
            "Number of nodes created in total by Karpenter. Labeled by owning nodepool and zone.",
            self.nodes_created.clone(),
        );
        r.register(
            "karpenter_nodes_terminated",
            "Number of nodes terminated in total by Karpenter. Labeled by owning nodepool and zone.",
            self.nodes_terminated.clone(),
        );
        r.register(
            "karpenter_pods_eviction_requests",
            "The total number of pod eviction requests made by Karpenter, labeled by response code.",
            self.eviction_requests.clone(),
        );
        r.register(
            "karpenter_scheduler_scheduling_duration_seconds",
            "Duration of scheduling simulations used for deprovisioning and provisioning in seconds.",
            self.scheduling_duration.clone(),
        );
        r.register(
            "karpenter_cloudprovider_duration_seconds",
            "Duration of cloud provider method calls. Labeled by the controller, method name and provider.",
            self.cloud_duration.clone(),
        );
        r.register(
            "karpenter_cloudprovider_errors",
            "Total number of errors returned from CloudProvider calls. Labeled by the controller, method name, provider and error category.",
            self.cloud_errors.clone(),
        );
        r.register(
            "karpenter_pods_state",
            "Pod state is the current state of pods, one series of value 1 per pod, labeled by name, namespace, owner, node, whether scheduled, nodepool, zone, architecture, capacity type, instance type, phase, readiness and whether the node is Karpenter-managed.",
            self.pods_state.clone(),
        );
        r.register(
            "karpenter_nodes_allocatable",
            "Node allocatable are the resources allocatable by nodes (cpu in cores, memory in bytes).",
            self.nodes_allocatable.clone(),
        );
        r.register(
            "karpenter_nodes_total_pod_requests",
            "Node total pod requests are the resources requested by pods bound to nodes, including the DaemonSet pods.",
            self.nodes_pod_requests.clone(),
        );
        r.register(
            "karpenter_nodes_total_daemon_requests",
            "Node total daemon requests are the resources requested by DaemonSet pods bound to nodes.",
            self.nodes_daemon_requests.clone(),
        );
        r.register(
            "karpenter_cluster_state_node_count",
            "Current count of nodes in cluster state.",
            self.node_count.clone(),
        );
        r.register(
            "karpenter_cluster_state_synced",
            "Returns 1 if cluster state is synced (every cache completed its initial list) and 0 otherwise.",
            self.synced.clone(),
        );
        r.register(
            "karpenter_nodepools_usage",
            "The amount of resources that have been provisioned for a nodepool (the sum of its NodeClaims' capacity; nodes counts its NodeClaims). Labeled by nodepool name and resource type.",
            self.nodepools_usage.clone(),
        );
        r.register(
            "karpenter_nodepools_limit",
            "Limits specified on the nodepool that restrict the quantity of resources provisioned. Labeled by nodepool name and resource type.",
            self.nodepools_limit.clone(),
        );
        r.register(
            "operator_nodeclaim_status_condition_count",
            "The number of a condition for a given nodeclaim, type and status.",
            self.nodeclaim_conditions.clone(),
        );
        self
    }

    /// Count a NodeClaim created for `reason` ([`reason::PROVISIONED`], or the disruption reason
    /// of the NodeClaim it replaces, e.g. [`reason::DRIFTED`]).
    pub fn nodeclaim_created(&self, claim: &NodeClaim, reason: &str) {
        let relaxed = annotation(claim, NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION) == "true";
        self.nodeclaims_created
            .get_or_create(&CreatedLabels {
                reason: reason.into(),
                nodepool: label(claim.metadata.labels.as_ref(), NODEPOOL_LABEL),
                min_values_relaxed: relaxed.to_string(),
            })
            .inc();
    }

    /// Count one disruption command started: `decision` `delete` or `replace`, `reason` the
    /// budget reason (`Empty`, `Underutilized`, `Drifted`), `consolidation_type` `empty`,
    /// `multi`, `single` (empty for drift).
    pub fn disruption_decided(&self, decision: &str, reason: &str, consolidation_type: &str) {
        self.disruption_decisions
            .get_or_create(&DecisionLabels {
                decision: decision.into(),
                reason: reason.into(),
                consolidation_type: consolidation_type.into(),
            })
            .inc();
    }

    /// Set how many nodes are eligible for disruption for `reason` (`Empty`, `Underutilized`)
    /// after the orchestrator's last pass.
    pub fn disruption_eligible(&self, reason: &str, nodes: usize) {
        self.disruption_eligible
            .get_or_create(&ReasonLabels {
                reason: reason.into(),
            })
            .set(nodes as f64);
    }

    /// Set how many more nodes `nodepool` may start disrupting for `reason` now (a NodePool's
    /// budgets minus the nodes already disrupting; `u32::MAX` stands for unlimited).
    pub fn allowed_disruptions(&self, nodepool: &str, reason: &str, allowed: usize) {
        self.allowed_disruptions
            .get_or_create(&PoolReasonLabels {
                nodepool: nodepool.into(),
                reason: reason.into(),
            })
            .set(allowed.min(u32::MAX as usize) as f64);
    }

    /// Count a consolidation move of `nodepool` (whose `consolidationPolicy` is `policy`)
    /// approved or rejected, and observe its Balanced score when it was scored (upstream's
    /// `karpenter_consolidation_moves_total` and `karpenter_consolidation_score`).
    pub fn consolidation_move(
        &self,
        nodepool: &str,
        policy: ConsolidationPolicy,
        approved: bool,
        score: Option<f64>,
    ) {
        let labels = MoveLabels {
            decision: if approved { "approved" } else { "rejected" }.into(),
            nodepool: nodepool.into(),
            policy: policy.as_str().into(),
        };
        self.consolidation_moves.get_or_create(&labels).inc();
        if let Some(score) = score {
            self.consolidation_score
                .get_or_create(&labels)
                .observe(score);
        }
    }

    /// Time and count one reconcile of `controller` (a kube-runtime controller driven by
    /// [`crate::runtime::reconcile::drive`]): `ok` is its result (`success`, else `error`).
    pub fn reconciled(&self, controller: &str, ok: bool, took: Duration) {
        self.reconcile_time
            .get_or_create(&ReconcileLabels {
                controller: controller.into(),
            })
            .observe(took.as_secs_f64());
        self.reconcile_total
            .get_or_create(&ReconcileResultLabels {
                controller: controller.into(),
                result: if ok { "success" } else { "error" }.into(),
            })
            .inc();
    }

    /// Count a consolidation search that ran out of time (`multi` or `single`).
    pub fn consolidation_timed_out(&self, consolidation_type: &str) {
        self.consolidation_timeouts
            .get_or_create(&ConsolidationTypeLabels {
                consolidation_type: consolidation_type.into(),
            })
            .inc();
    }

    /// Count a NodeClaim whose termination finished (its finalizer was released).
    pub fn nodeclaim_terminated(&self, claim: &NodeClaim) {
        let labels = claim.metadata.labels.as_ref();
        self.nodeclaims_terminated
            .get_or_create(&TerminatedLabels {
                nodepool: label(labels, NODEPOOL_LABEL),
                capacity_type: label(labels, CAPACITY_TYPE_LABEL),
                zone: label(labels, TOPOLOGY_ZONE_LABEL),
            })
            .inc();
    }

    /// Count a NodeClaim Karpenter deleted for `reason` (see [`reason`]), looking its NodePool's
    /// consolidation policy up in `state`.
    pub fn nodeclaim_disrupted(&self, claim: &NodeClaim, reason: &str, state: &ClusterState) {
        let pool = label(claim.metadata.labels.as_ref(), NODEPOOL_LABEL);
        let policy = state
            .nodepools
            .state()
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(pool.as_str()))
            .map(|p| p.spec.disruption.consolidation_policy);
        self.nodeclaim_disrupted_with(claim, reason, policy);
    }

    /// [`Metrics::nodeclaim_disrupted`] with the NodePool's consolidation policy given (`None`:
    /// the NodePool is gone; the label is then empty).
    pub fn nodeclaim_disrupted_with(
        &self,
        claim: &NodeClaim,
        reason: &str,
        policy: Option<ConsolidationPolicy>,
    ) {
        let labels = claim.metadata.labels.as_ref();
        self.nodeclaims_disrupted
            .get_or_create(&DisruptedLabels {
                reason: reason.into(),
                nodepool: label(labels, NODEPOOL_LABEL),
                capacity_type: label(labels, CAPACITY_TYPE_LABEL),
                consolidation_policy: policy.map(policy_label).unwrap_or_default().into(),
                termination_mode: termination_mode(claim).into(),
            })
            .inc();
    }

    /// Count the node that registered for `claim` (labelled with the NodeClaim's NodePool and
    /// zone, which registration copies onto the node).
    pub fn node_created(&self, claim: &NodeClaim) {
        let labels = node_count(claim.metadata.labels.as_ref());
        self.nodes_created.get_or_create(&labels).inc();
    }

    /// Count a node whose termination finished (its finalizer was released) at `now`, and
    /// observe how long that took since its deletion (`karpenter_nodes_termination_duration_seconds`,
    /// by NodePool).
    pub fn node_terminated(&self, node: &Node, now: jiff::Timestamp) {
        let labels = node_count(node.metadata.labels.as_ref());
        if let Some(deleted) = node.metadata.deletion_timestamp.as_ref() {
            let seconds = now.duration_since(deleted.0).as_secs_f64().max(0.0);
            self.nodes_termination_duration
                .observe(&[labels.nodepool.as_str()], seconds);
        }
        self.nodes_terminated.get_or_create(&labels).inc();
    }

    /// Observe pods' startup durations (seconds from creation until Ready), as the pod cache
    /// saw them ([`crate::state::pod_startup::PodStartup`]).
    pub fn pods_started(&self, seconds: impl IntoIterator<Item = f64>) {
        for s in seconds {
            self.pods_startup_duration.observe(&[], s);
        }
    }

    /// Count one request to the eviction API by its HTTP status code (`200` when it was
    /// granted, `429` when a PodDisruptionBudget refused it, `unknown` without a response).
    pub fn eviction_requested<T>(&self, result: &Result<T, kube::Error>) {
        let code = match result {
            Ok(_) => "200".to_string(),
            Err(kube::Error::Api(status)) => status.code.to_string(),
            Err(_) => "unknown".to_string(),
        };
        self.eviction_requests
            .get_or_create(&CodeLabels { code })
            .inc();
    }

    /// Count an interruption message read from the queue, by its kind (`message_type`, e.g.
    /// `spot_interrupted`; unreadable messages are not counted, as upstream).
    pub fn interruption_received(&self, message_type: &str) {
        self.interruption_received
            .get_or_create(&MessageTypeLabels {
                message_type: message_type.into(),
            })
            .inc();
    }

    /// Count an interruption message deleted from the queue (handled or unreadable).
    pub fn interruption_deleted(&self) {
        self.interruption_deleted.inc();
    }

    /// Record how long a handled interruption message waited, in seconds, from the event's
    /// time to the end of its handling.
    pub fn interruption_handled_after(&self, seconds: f64) {
        self.interruption_queue_duration.observe(seconds.max(0.0));
    }

    /// Record one scheduling simulation of `controller` (e.g. [`PROVISIONER`]) that took
    /// `elapsed`.
    pub fn scheduling_simulated(&self, controller: &str, elapsed: Duration) {
        self.scheduling_duration
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Record one cloud provider call: its duration and, when it failed, its error category.
    pub fn cloud_call(
        &self,
        controller: &str,
        method: &str,
        provider: &str,
        elapsed: Duration,
        error: Option<&str>,
    ) {
        let labels = CloudLabels {
            controller: controller.into(),
            method: method.into(),
            provider: provider.into(),
        };
        self.cloud_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        if let Some(error) = error {
            self.cloud_errors
                .get_or_create(&CloudErrorLabels {
                    controller: labels.controller,
                    method: labels.method,
                    provider: labels.provider,
                    error: error.into(),
                })
                .inc();
        }
    }

    /// The Prometheus text exposition (OpenMetrics) of every family. On the replica that
    /// `leading`, the gauges derived from the cluster caches (`state`) are refreshed first; on
    /// a standby they are emptied instead (see [`Metrics::encode_standby`]).
    pub fn encode(&self, state: &ClusterState, leading: bool) -> String {
        self.pods_started(state.pod_startup.drain());
        if leading {
            self.encode_observed(&Observed::from_state(state))
        } else {
            self.encode_standby()
        }
    }

    /// The exposition of a standby replica: the cluster-state gauges (pods, nodes, NodePools,
    /// NodeClaim conditions, node count, synced) are cleared rather than refreshed, so that
    /// only the leader reports the cluster's state (upstream's state metrics come from
    /// controllers that run only on the leader) and summing over replicas does not count it
    /// twice. Counters and histograms keep what this process recorded.
    pub fn encode_standby(&self) -> String {
        let _scrape = self.scrape.lock().unwrap_or_else(|e| e.into_inner());
        self.clear_state();
        let mut out = String::new();
        // Encoding into a String cannot fail (fmt::Write on String is infallible).
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        self.with_summaries(out)
    }

    /// `exposition` with the summaries (which the registry cannot hold) added before `# EOF`.
    fn with_summaries(&self, exposition: String) -> String {
        let mut extra = String::new();
        self.nodes_termination_duration.encode(&mut extra);
        self.pods_startup_duration.encode(&mut extra);
        summary::splice(exposition, &extra)
    }

    fn clear_state(&self) {
        self.synced.set(0.0);
        self.node_count.set(0.0);
        self.pods_state.clear();
        self.nodes_allocatable.clear();
        self.nodes_pod_requests.clear();
        self.nodes_daemon_requests.clear();
        self.nodepools_usage.clear();
        self.nodepools_limit.clear();
        self.nodeclaim_conditions.clear();
    }

    /// [`Metrics::encode`] over a given copy of the caches.
    pub fn encode_observed(&self, observed: &Observed) -> String {
        let _scrape = self.scrape.lock().unwrap_or_else(|e| e.into_inner());
        self.refresh(observed);
        let mut out = String::new();
        // Encoding into a String cannot fail (fmt::Write on String is infallible).
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        self.with_summaries(out)
    }

    fn refresh(&self, o: &Observed) {
        self.synced.set(if o.synced { 1.0 } else { 0.0 });
        self.refresh_pods(o);
        self.refresh_nodes(o);
        self.refresh_nodepools(o);
        self.nodeclaim_conditions.clear();
        for claim in &o.nodeclaims {
            for c in claim.status.iter().flat_map(|s| &s.conditions) {
                self.nodeclaim_conditions
                    .get_or_create(&ConditionLabels {
                        namespace: String::new(),
                        name: claim.metadata.name.clone().unwrap_or_default(),
                        condition: ConditionKey {
                            r#type: c.type_.clone(),
                            status: c.status.clone(),
                            reason: c.reason.clone(),
                        },
                    })
                    .set(1.0);
            }
        }
    }

    fn refresh_pods(&self, o: &Observed) {
        self.pods_state.clear();
        let nodes: BTreeMap<&str, &Node> = o
            .nodes
            .iter()
            .filter_map(|n| Some((n.metadata.name.as_deref()?, n.as_ref())))
            .collect();
        for pod in &o.pods {
            let node_name = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            let node_labels = nodes
                .get(node_name.as_str())
                .and_then(|n| n.metadata.labels.as_ref());
            let owner = pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|r| r.controller == Some(true))
                .map(|r| format!("{}/{}", r.kind, r.name))
                .unwrap_or_default();
            let status = pod.status.as_ref();
            let ready = status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let labels = PodStateLabels {
                name: pod.metadata.name.clone().unwrap_or_default(),
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                owner,
                scheduled: (!node_name.is_empty()).to_string(),
                node: node_name,
                nodepool: label(node_labels, NODEPOOL_LABEL),
                zone: label(node_labels, TOPOLOGY_ZONE_LABEL),
                arch: label(node_labels, ARCH_LABEL),
                capacity_type: label(node_labels, CAPACITY_TYPE_LABEL),
                instance_type: label(node_labels, INSTANCE_TYPE_LABEL),
                // The API server defaults the phase to Pending; a pod without one is pending.
                phase: status
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_else(|| "Pending".into()),
                ready: ready.to_string(),
                managed: node_labels
                    .is_some_and(|l| l.contains_key(NODEPOOL_LABEL))
                    .to_string(),
            };
            self.pods_state.get_or_create(&labels).set(1.0);
        }
    }

    fn refresh_nodes(&self, o: &Observed) {
        self.nodes_allocatable.clear();
        self.nodes_pod_requests.clear();
        self.nodes_daemon_requests.clear();
        self.node_count.set(o.nodes.len() as f64);
        // Per node: (every pod's requests, DaemonSet pods' requests), by resource.
        let mut requests: BTreeMap<&str, (Amounts, Amounts)> = BTreeMap::new();
        for pod in &o.pods {
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
                continue;
            };
            if karpenter_core::scheduling::pod::is_terminal(pod) {
                continue;
            }
            let Ok(info) = PodInfo::from_bound_pod(pod) else {
                continue;
            };
            let entry = requests.entry(node).or_default();
            let daemon = is_owned_by(pod, "DaemonSet");
            for (name, value) in info.requests.iter() {
                let v = resource_value(name, value);
                *entry.0.entry(name.to_string()).or_default() += v;
                if daemon {
                    *entry.1.entry(name.to_string()).or_default() += v;
                }
            }
        }
        for node in &o.nodes {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            let labels = node.metadata.labels.as_ref();
            let key = |resource_type: &str| NodeResourceLabels {
                node_name: name.to_string(),
                nodepool: label(labels, NODEPOOL_LABEL),
                zone: label(labels, TOPOLOGY_ZONE_LABEL),
                arch: label(labels, ARCH_LABEL),
                capacity_type: label(labels, CAPACITY_TYPE_LABEL),
                instance_type: label(labels, INSTANCE_TYPE_LABEL),
                phase: node_phase(node).into(),
                resource_type: resource_type.into(),
            };
            let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
            for (resource, q) in allocatable.into_iter().flatten() {
                if let Some(v) = quantity_value(q) {
                    self.nodes_allocatable.get_or_create(&key(resource)).set(v);
                }
            }
            if let Some((pods, daemons)) = requests.get(name) {
                for (resource, v) in pods {
                    self.nodes_pod_requests
                        .get_or_create(&key(resource))
                        .set(*v);
                }
                for (resource, v) in daemons {
                    self.nodes_daemon_requests
                        .get_or_create(&key(resource))
                        .set(*v);
                }
            }
        }
    }

    fn refresh_nodepools(&self, o: &Observed) {
        self.nodepools_usage.clear();
        self.nodepools_limit.clear();
        for pool in &o.nodepools {
            let name = pool.metadata.name.clone().unwrap_or_default();
            let key = |resource_type: &str| PoolResourceLabels {
                nodepool: name.clone(),
                resource_type: resource_type.into(),
            };
            for (resource, q) in &pool.spec.limits {
                if let Some(v) = quantity_value(q) {
                    self.nodepools_limit.get_or_create(&key(resource)).set(v);
                }
            }
            let mut usage: BTreeMap<&str, f64> = BTreeMap::new();
            let mut nodes = 0.0;
            for claim in &o.nodeclaims {
                if label(claim.metadata.labels.as_ref(), NODEPOOL_LABEL) != name {
                    continue;
                }
                nodes += 1.0;
                for (resource, q) in claim.status.iter().flat_map(|s| &s.capacity) {
                    if let Some(v) = quantity_value(q) {
                        *usage.entry(resource).or_default() += v;
                    }
                }
            }
            for (resource, v) in usage {
                self.nodepools_usage.get_or_create(&key(resource)).set(v);
            }
            self.nodepools_usage.get_or_create(&key("nodes")).set(nodes);
        }
    }
}

/// A label of an object, empty when absent.
fn label(labels: Option<&BTreeMap<String, String>>, key: &str) -> String {
    labels.and_then(|l| l.get(key)).cloned().unwrap_or_default()
}

fn annotation(claim: &NodeClaim, key: &str) -> String {
    label(claim.metadata.annotations.as_ref(), key)
}

fn node_count(labels: Option<&BTreeMap<String, String>>) -> NodeCountLabels {
    NodeCountLabels {
        nodepool: label(labels, NODEPOOL_LABEL),
        zone: label(labels, TOPOLOGY_ZONE_LABEL),
    }
}

/// Upstream's `consolidation_policy` label values.
fn policy_label(policy: ConsolidationPolicy) -> &'static str {
    match policy {
        ConsolidationPolicy::WhenEmpty => "when_empty",
        ConsolidationPolicy::WhenEmptyOrUnderutilized => "when_empty_or_underutilized",
        ConsolidationPolicy::Balanced => "balanced",
    }
}

/// Upstream's `termination_mode`: `graceful` without a `terminationGracePeriod` (PDBs and
/// do-not-disrupt are respected), `eventual` with a positive one (it bounds the drain),
/// `forceful` with a zero one.
fn termination_mode(claim: &NodeClaim) -> &'static str {
    match &claim.spec.termination_grace_period {
        None => "graceful",
        Some(d) if d.duration().is_zero() => "forceful",
        Some(_) => "eventual",
    }
}

/// A node's `phase` label. Kubelets no longer set `status.phase` (deprecated), so the label
/// carries the node's state instead: `Terminating` once deleted, else `Ready` or `NotReady`
/// from its Ready condition.
fn node_phase(node: &Node) -> &'static str {
    if node.metadata.deletion_timestamp.is_some() {
        return "Terminating";
    }
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if ready { "Ready" } else { "NotReady" }
}

/// A quantity as a plain number (cpu in cores, bytes, units); `None` when malformed.
fn quantity_value(q: &Quantity) -> Option<f64> {
    parse_milli(&q.0).ok().map(|milli| milli as f64 / 1000.0)
}

/// A scheduler resource amount as a plain number: cpu millicores become cores.
fn resource_value(name: &str, value: i64) -> f64 {
    if name == karpenter_core::scheduling::resources::CPU {
        value as f64 / 1000.0
    } else {
        value as f64
    }
}

/// One sample of a text exposition: the series name (with its `_total`, `_bucket`, `_sum` or
/// `_count` suffix), its labels and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Series name with its suffix, e.g. `karpenter_nodeclaims_created_total`.
    pub name: String,
    /// Label names and (unescaped) values.
    pub labels: BTreeMap<String, String>,
    /// The sample's value (cpu gauges in cores, memory in bytes).
    pub value: f64,
}

impl Sample {
    /// Whether this sample is of series `name` and its labels include every `(name, value)`
    /// pair of `labels`.
    pub fn matches(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.name == name
            && labels
                .iter()
                .all(|(k, v)| self.labels.get(*k).map(String::as_str) == Some(*v))
    }
}

/// A malformed line of a text exposition.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub message: String,
}

/// Parse the samples of a Prometheus/OpenMetrics text exposition (what [`Metrics::encode`]
/// writes), skipping comments (`# HELP`, `# TYPE`, `# EOF`). For tests and tools that read
/// `/metrics`; timestamps and exemplars are not supported.
///
/// Errors: a line that is not `name{label="value",...} value`.
pub fn parse_samples(text: &str) -> Result<Vec<Sample>, ParseError> {
    let mut samples = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |message: &str| ParseError {
            line: i + 1,
            message: format!("{message}: {line:?}"),
        };
        let name_end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .ok_or_else(|| err("no value"))?;
        let name = line[..name_end].to_string();
        let mut rest = &line[name_end..];
        let mut labels = BTreeMap::new();
        if let Some(body) = rest.strip_prefix('{') {
            let mut chars = body.char_indices();
            let mut key = String::new();
            let end = loop {
                let Some((at, c)) = chars.next() else {
                    return Err(err("unterminated label set"));
                };
                match c {
                    '}' if key.trim().is_empty() => break at,
                    ',' | ' ' if key.is_empty() => {}
                    '=' => {
                        if chars.next().map(|(_, c)| c) != Some('"') {
                            return Err(err("label value is not quoted"));
                        }
                        let mut value = String::new();
                        loop {
                            match chars.next().map(|(_, c)| c) {
                                Some('"') => break,
                                Some('\\') => match chars.next().map(|(_, c)| c) {
                                    Some('n') => value.push('\n'),
                                    Some(c) => value.push(c),
                                    None => return Err(err("unterminated label value")),
                                },
                                Some(c) => value.push(c),
                                None => return Err(err("unterminated label value")),
                            }
                        }
                        labels.insert(std::mem::take(&mut key), value);
                    }
                    c => key.push(c),
                }
            };
            rest = &body[end + 1..];
        }
        let value = rest
            .split_whitespace()
            .next()
            .ok_or_else(|| err("no value"))?;
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().map_err(|_| err("the value is not a number"))?,
        };
        samples.push(Sample {
            name,
            labels,
            value,
        });
    }
    Ok(samples)
}

#[cfg(test)]
mod tests;
