//! The pure core of `why-pending`: which pods are pending, what each one waits for (the
//! NodeClaim or node Karpenter nominated it to), and otherwise every NodePool's verdict from
//! the controller's [`explain`]. Everything comes in as
//! arguments: the objects read from the cluster and the instance types of a node class.

use std::sync::Arc;

use crds::conditions::{self, VALIDATION_SUCCEEDED};
use crds::{EC2NodeClass, NodeOverlay, StatusConditions};
use k8s_openapi::api::core::v1::{Event, Pod};
use karpenter_core::capacity::InstanceType;
use karpenter_core::pod_view::PodView;
use karpenter_core::scheduling::explain::{self, PoolCandidate, PoolVerdict, Verdict};
use karpenter_core::scheduling::pod::{PodInfo, is_owned_by, is_provisionable};
use karpenter_core::scheduling::volumes::VolumeIndex;
use karpenter_core::snapshot::Snapshot;
use serde::Serialize;

use super::conflicts;
use crate::render::format_price;
use crate::status::rows::State;

/// Everything read from the cluster.
#[derive(Clone, Debug, Default)]
pub struct World {
    /// The pods to look at (those of the selected namespaces, or the one named).
    pub pods: Vec<Pod>,
    /// Events of those pods' namespaces (the `Nominated` ones matter).
    pub events: Vec<Event>,
    /// Every pod of the cluster (bound ones use node capacity), NodePools, EC2NodeClasses,
    /// NodeClaims, Nodes, DaemonSets, Namespaces and volumes.
    pub snapshot: Snapshot,
}

/// The NodeOverlays the controller applies, of those listed: all of them once one carries a
/// `ValidationSucceeded` condition (only the NodeOverlay controller writes it, and it runs
/// only with `FEATURE_GATES=NodeOverlay=true`), else none (the gate is off, or the controller
/// has not evaluated them yet). Which ones apply, and how, the core decides as the controller
/// does (`karpenter_core::provisioning::listing`).
pub fn overlays_in_effect(listed: Vec<NodeOverlay>) -> Vec<Arc<NodeOverlay>> {
    let evaluated = listed
        .iter()
        .any(|o| conditions::get(o.status_conditions(), VALIDATION_SUCCEEDED).is_some());
    if !evaluated {
        return Vec::new();
    }
    listed.into_iter().map(Arc::new).collect()
}

/// Where a pod stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum PodState {
    /// Bound to a node: not pending (only reported when the pod was named).
    Bound,
    /// Nominated to a NodeClaim that still exists: capacity is on its way.
    WaitingForNodeClaim,
    /// Nominated to an existing node: kube-scheduler should bind it there.
    WaitingForNode,
    /// Some NodePool can launch capacity for it: Karpenter should do so at its next pass.
    Provisionable,
    /// No NodePool can launch capacity for it.
    Unschedulable,
    /// Its own node requirements conflict (`nodeSelector` against node affinity, or `In` and
    /// `NotIn` of one value): no node, existing or launched, can take it.
    ConflictingRequirements,
    /// Karpenter cannot provision for the pod at all (its spec does not compile).
    NotProvisionable,
    /// DaemonSet and static pods: Karpenter never provisions for them.
    Ignored,
    /// Held by `spec.schedulingGates`: neither kube-scheduler nor Karpenter looks at it until
    /// they are removed.
    Gated,
    /// `spec.schedulerName` names a scheduler other than kube-scheduler's `default-scheduler`:
    /// Karpenter only acts on pods kube-scheduler marked unschedulable.
    OtherScheduler,
    /// kube-scheduler has not (yet) marked it `PodScheduled=False` with reason
    /// `Unschedulable`, which Karpenter waits for before provisioning.
    NotYetUnschedulable,
}

impl PodState {
    /// Whether the pod is stuck with no NodePool that can take it (exit status 1).
    pub fn is_problem(self) -> bool {
        matches!(
            self,
            PodState::Unschedulable
                | PodState::ConflictingRequirements
                | PodState::NotProvisionable
        )
    }
}

/// One NodePool's verdict with its message.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PoolLine {
    /// NodePool and verdict (`verdict`, and for rejections `reason` with its details).
    #[serde(flatten)]
    pub verdict: PoolVerdict,
    /// The verdict as one line of text.
    pub message: String,
}

/// Why one pod is pending.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name; text output prints `NAMESPACE/NAME`.
    pub name: String,
    /// Where it stands, e.g. `WaitingForNodeClaim` or `Unschedulable`.
    pub state: PodState,
    /// The state as one line, e.g. `waiting for NodeClaim default-x7k2p (Registering)`.
    pub message: String,
    /// The NodeClaim it waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodeclaim: Option<String>,
    /// The node it waits for or is bound to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Each NodePool's verdict, heaviest weight first (when it waits for nothing).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodepools: Vec<PoolLine>,
}

/// Whether a pod is pending: not bound to a node, not finished and not being deleted (the
/// provisioner's own rule, [`karpenter_core::snapshot::is_waiting`]).
pub use karpenter_core::snapshot::is_waiting as is_pending;

/// Reports for the pending pods of `world` (every pod of it when `named`, pending or not), in
/// namespace and name order. `instance_types` lists a node class's instance types.
pub fn build(
    world: &World,
    named: bool,
    instance_types: impl Fn(&EC2NodeClass) -> Result<Vec<Arc<InstanceType>>, String>,
) -> Vec<PodReport> {
    let mut pods: Vec<&Pod> = world
        .pods
        .iter()
        .filter(|p| named || is_pending(&PodView::from(*p)))
        .collect();
    pods.sort_by_key(|p| (p.metadata.namespace.clone(), p.metadata.name.clone()));
    let snap = &world.snapshot;
    let mut pools: Option<Vec<PoolCandidate>> = None;
    let volumes = VolumeIndex::new(&snap.pvcs, &snap.pvs, &snap.storage_classes);
    let namespaces = snap.namespace_labels();
    pods.into_iter()
        .map(|full| {
            let pod = &PodView::from(full);
            let mut report = PodReport {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                state: PodState::Bound,
                message: String::new(),
                nodeclaim: None,
                node: None,
                nodepools: Vec::new(),
            };
            if waiting(pod, world, &mut report) || not_considered(pod, &mut report) {
                return report;
            }
            if let Some(conflicts) = conflicts::unsatisfiable(full) {
                report.state = PodState::ConflictingRequirements;
                report.message = conflicts::message(&conflicts);
                return report;
            }
            let mut info = match PodInfo::from_pod(pod) {
                Ok(info) => info,
                Err(e) => {
                    report.state = PodState::NotProvisionable;
                    report.message = format!("Karpenter cannot provision for it: {e}");
                    return report;
                }
            };
            info.add_volume_requirements(&volumes.requirements(pod));
            info.volumes = volumes.attachments(pod);
            let pools = pools.get_or_insert_with(|| explain::candidates(snap, &instance_types));
            if let Some(target) = explain::existing_fit(&info, snap, pools) {
                fits_existing(&mut report, snap, target);
                return report;
            }
            let verdicts = explain::explain(&info, pools, &namespaces);
            judge(&mut report, verdicts);
            report
        })
        .collect()
}

/// Fills in bound, ignored and waiting pods; false when the NodePools must be asked.
fn waiting(pod: &PodView, world: &World, report: &mut PodReport) -> bool {
    if let Some(node) = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty())
    {
        report.message = format!("not pending: bound to node {node}");
        report.node = Some(node);
        return true;
    }
    if is_owned_by(pod, "DaemonSet") || is_owned_by(pod, "Node") {
        report.state = PodState::Ignored;
        report.message =
            "DaemonSet and static pods run on every node: Karpenter does not provision for them"
                .into();
        return true;
    }
    let snap = &world.snapshot;
    let node_exists = |name: &str| {
        snap.nodes
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(name))
    };
    if let Some(node) = pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.clone())
        .filter(|n| !n.is_empty())
    {
        report.state = PodState::WaitingForNode;
        report.message = format!("waiting for node {node} (nominated by the scheduler)");
        report.node = Some(node);
        return true;
    }
    let Some((kind, target)) = latest_nomination(pod, &world.events) else {
        return false;
    };
    match kind {
        "nodeclaim" => {
            let claim = snap
                .nodeclaims
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(target));
            let Some(claim) = claim.filter(|c| c.metadata.deletion_timestamp.is_none()) else {
                return false;
            };
            let state = State::of(claim);
            report.state = PodState::WaitingForNodeClaim;
            report.message = format!(
                "waiting for NodeClaim {target} ({state}){}",
                relaxed_note(claim)
            );
            report.nodeclaim = Some(target.to_string());
            report.node = claim.status.as_ref().and_then(|s| s.node_name.clone());
            true
        }
        "node" if node_exists(target) => {
            report.state = PodState::WaitingForNode;
            report.message = format!("waiting for node {target} (nominated by Karpenter)");
            report.node = Some(target.to_string());
            true
        }
        _ => false,
    }
}

/// The name kube-scheduler answers to; pods naming no scheduler get it.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// Fills in a pending pod Karpenter does not consider (see
/// [`is_provisionable`]): gated, for another
/// scheduler, or not yet marked unschedulable; false when Karpenter considers it.
fn not_considered(pod: &PodView, report: &mut PodReport) -> bool {
    if is_provisionable(pod) {
        return false;
    }
    let spec = pod.spec.as_ref();
    let gates: Vec<&str> = spec
        .and_then(|s| s.scheduling_gates.as_ref())
        .into_iter()
        .flatten()
        .map(|g| g.name.as_str())
        .collect();
    let scheduler = spec
        .and_then(|s| s.scheduler_name.as_deref())
        .filter(|n| !n.is_empty() && *n != DEFAULT_SCHEDULER);
    (report.state, report.message) = if !gates.is_empty() {
        (
            PodState::Gated,
            format!(
                "gated by schedulingGates: {}; nothing schedules it until they are removed",
                gates.join(", ")
            ),
        )
    } else if let Some(scheduler) = scheduler {
        (
            PodState::OtherScheduler,
            format!(
                "uses scheduler {scheduler}: Karpenter only provisions for pods \
                 {DEFAULT_SCHEDULER} marked unschedulable"
            ),
        )
    } else {
        (
            PodState::NotYetUnschedulable,
            "not yet marked unschedulable by kube-scheduler (no PodScheduled=False/Unschedulable \
             condition): Karpenter waits for that"
                .to_owned(),
        )
    };
    true
}

/// `; minValues relaxed (MIN_VALUES_POLICY=BestEffort): KEY>=N, ...` for a NodeClaim the
/// provisioner created with lowered `minValues` (annotated
/// `karpenter.sh/nodeclaim-min-values-relaxed: "true"`), listing the values its requirements
/// now carry; empty for any other NodeClaim.
fn relaxed_note(claim: &crds::NodeClaim) -> String {
    let relaxed = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crds::labels::NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION))
        .is_some_and(|v| v == "true");
    if !relaxed {
        return String::new();
    }
    let kept: Vec<String> = claim
        .spec
        .requirements
        .iter()
        .filter_map(|r| r.min_values.map(|m| format!("{}>={m}", r.key)))
        .collect();
    format!(
        "; minValues relaxed (MIN_VALUES_POLICY=BestEffort): {}",
        if kept.is_empty() {
            "dropped".to_owned()
        } else {
            kept.join(", ")
        }
    )
}

/// A pod no Event nominated that fits an existing node or in-flight NodeClaim (by name).
fn fits_existing(report: &mut PodReport, snap: &Snapshot, target: String) {
    let claim = snap
        .nodeclaims
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(target.as_str()));
    match claim {
        Some(claim) => {
            report.state = PodState::WaitingForNodeClaim;
            report.message = format!(
                "waiting for NodeClaim {target} ({}): it fits that in-flight capacity{}",
                State::of(claim),
                relaxed_note(claim)
            );
            report.nodeclaim = Some(target);
        }
        None => {
            report.state = PodState::WaitingForNode;
            report.message =
                format!("fits node {target}: waiting for kube-scheduler to bind it there");
            report.node = Some(target);
        }
    }
}

/// The target of the newest `Nominated` Event about the pod (matched by UID when both have
/// one, else by namespace and name).
fn latest_nomination<'a>(pod: &PodView, events: &'a [Event]) -> Option<(&'a str, &'a str)> {
    let uid = pod.metadata.uid.as_deref();
    events
        .iter()
        .filter(|e| {
            let o = &e.involved_object;
            e.reason.as_deref() == Some(karpenter_core::provisioning::NOMINATED_REASON)
                && o.kind.as_deref() == Some("Pod")
                && o.namespace == pod.metadata.namespace
                && o.name == pod.metadata.name
                && (uid.is_none() || o.uid.is_none() || o.uid.as_deref() == uid)
        })
        .max_by_key(|e| {
            e.event_time
                .as_ref()
                .map(|t| t.0)
                .or(e.last_timestamp.as_ref().map(|t| t.0))
                .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0))
        })
        .and_then(|e| explain::nominated_target(e.message.as_deref()?))
}

fn judge(report: &mut PodReport, verdicts: Vec<PoolVerdict>) {
    let first_fit = verdicts.iter().find_map(|v| match &v.verdict {
        Verdict::Compatible {
            instance_type,
            price,
            ..
        } => Some(format!(
            "NodePool {} can launch {instance_type} ({}/hour) for it",
            v.nodepool,
            format_price(*price)
        )),
        Verdict::Rejected(_) => None,
    });
    (report.state, report.message) = match first_fit {
        Some(fit) => (PodState::Provisionable, fit),
        None if verdicts.is_empty() => (
            PodState::Unschedulable,
            "no NodePool exists to launch capacity for it".into(),
        ),
        None => (
            PodState::Unschedulable,
            "no NodePool can launch capacity for it".into(),
        ),
    };
    report.nodepools = verdicts
        .into_iter()
        .map(|v| PoolLine {
            message: verdict_text(&v.verdict),
            verdict: v,
        })
        .collect();
}

/// A verdict as one line of text.
pub fn verdict_text(v: &Verdict) -> String {
    match v {
        Verdict::Compatible {
            instance_type,
            price,
            options,
        } => format!(
            "compatible: would launch {instance_type} ({}/hour; {options} instance types fit)",
            format_price(*price)
        ),
        Verdict::Rejected(reason) => reason.to_string(),
    }
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
