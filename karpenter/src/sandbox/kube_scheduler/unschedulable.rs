//! Why kube-scheduler could not place a pod: the plugins that rejected it (which decide the
//! cluster events that may requeue it, [`super::queue`]) and the per-node reasons, kept as
//! counts and rendered into kube-scheduler's `0/N nodes are available: ...` message only when
//! the scheduler reports it (upstream `framework.FitError.Error`, `schedule_one.go`).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

/// A kube-scheduler plugin that can reject a pod, named as upstream names it
/// (`pkg/scheduler/framework/plugins/names`). The queue asks each rejecting plugin's queueing
/// hints whether a cluster event may make the pod schedulable (KEP-4247).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Plugin {
    /// `spec.unschedulable` nodes (cordoned).
    NodeUnschedulable,
    /// Taints the pod does not tolerate.
    TaintToleration,
    /// `nodeSelector` and required node affinity.
    NodeAffinity,
    /// Host ports already taken on the node.
    NodePorts,
    /// Requests beyond the node's allocatable.
    NodeResourcesFit,
    /// More volumes than the node's CSI drivers can attach.
    NodeVolumeLimits,
    /// Hard (`DoNotSchedule`) topology spread constraints.
    PodTopologySpread,
    /// Required pod affinity and anti-affinity, the pod's and existing pods'.
    InterPodAffinity,
    /// Claims that are missing, deleting, or whose volumes confine the pod.
    VolumeBinding,
}

/// The failure of one scheduling attempt: which plugins rejected the pod and why, per node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unschedulable {
    /// The rejecting plugins (upstream `QueuedPodInfo.UnschedulablePlugins`); empty when no
    /// plugin is to blame (no nodes at all, a spec that cannot be evaluated), and then any
    /// cluster event requeues the pod.
    pub plugins: BTreeSet<Plugin>,
    why: Why,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Why {
    /// The cluster has no node (upstream `ErrNoNodesAvailable`).
    NoNodes,
    /// A PreFilter rejected the pod for all `nodes` nodes with one reason.
    PreFilter { nodes: usize, reason: String },
    /// Filters rejected each of `nodes` nodes; how many nodes failed for each reason.
    Filters {
        nodes: usize,
        reasons: BTreeMap<Cow<'static, str>, usize>,
    },
    /// The pod could not be evaluated; the error.
    Invalid(String),
}

impl Unschedulable {
    /// No node exists.
    pub fn no_nodes() -> Unschedulable {
        Unschedulable {
            plugins: BTreeSet::new(),
            why: Why::NoNodes,
        }
    }

    /// `plugin`'s PreFilter rejected the pod on every one of `nodes` nodes for `reason`.
    pub fn pre_filter(plugin: Plugin, nodes: usize, reason: String) -> Unschedulable {
        Unschedulable {
            plugins: BTreeSet::from([plugin]),
            why: Why::PreFilter { nodes, reason },
        }
    }

    /// The pod's spec could not be evaluated (`error`, reported as is).
    pub fn invalid(error: String) -> Unschedulable {
        Unschedulable {
            plugins: BTreeSet::new(),
            why: Why::Invalid(error),
        }
    }

    /// An attempt over `nodes` nodes that no filter has rejected yet; see [`Unschedulable::reject`].
    pub fn filters(nodes: usize) -> Unschedulable {
        Unschedulable {
            plugins: BTreeSet::new(),
            why: Why::Filters {
                nodes,
                reasons: BTreeMap::new(),
            },
        }
    }

    /// `plugin` rejected one more node for `reason` (a static text costs no allocation).
    pub fn reject(&mut self, plugin: Plugin, reason: Cow<'static, str>) {
        self.plugins.insert(plugin);
        if let Why::Filters { reasons, .. } = &mut self.why {
            *reasons.entry(reason).or_default() += 1;
        }
    }

    /// kube-scheduler's message for the condition and the `FailedScheduling` Event: reasons
    /// sorted by text, each with its node count, then the preemption summary (upstream
    /// `FitError.Error`; the simulated scheduler never preempts).
    pub fn message(&self) -> String {
        let (nodes, reasons) = match &self.why {
            Why::NoNodes => return "no nodes available to schedule pods".to_string(),
            Why::Invalid(e) => return e.clone(),
            Why::PreFilter { nodes, reason } => (*nodes, reason.clone()),
            Why::Filters { nodes, reasons } => {
                let parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
                (*nodes, parts.join(", "))
            }
        };
        format!(
            "0/{nodes} nodes are available: {reasons}. preemption: 0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reasons are counted per node and sorted by text, as `FitError.Error` sorts them
    /// (`pkg/scheduler/framework/types.go`).
    #[test]
    fn a_filter_failure_renders_kube_schedulers_message() {
        let mut u = Unschedulable::filters(3);
        u.reject(Plugin::NodeResourcesFit, "Insufficient cpu".into());
        u.reject(
            Plugin::TaintToleration,
            "node(s) had untolerated taint {a: b}".into(),
        );
        u.reject(Plugin::NodeResourcesFit, "Insufficient cpu".into());
        assert_eq!(
            u.message(),
            "0/3 nodes are available: 2 Insufficient cpu, 1 node(s) had untolerated taint {a: b}. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        );
        assert_eq!(
            u.plugins,
            BTreeSet::from([Plugin::NodeResourcesFit, Plugin::TaintToleration])
        );
        assert_eq!(
            Unschedulable::no_nodes().message(),
            "no nodes available to schedule pods"
        );
        assert!(Unschedulable::no_nodes().plugins.is_empty());
    }
}
