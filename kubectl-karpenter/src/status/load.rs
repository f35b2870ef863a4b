//! What runs on each node, as `kubectl karpenter status` shows it beside its NodeClaim (the view
//! eks-node-viewer gives): how many pods are bound to it, how many of those consolidation would
//! have to move, and the cpu and memory they request against the node's allocatable cpu, memory
//! and pods. Requests
//! are counted as kube-scheduler counts them (karpenter-core's [`pod_requests`]), over the pods
//! it counts (bound and not Succeeded or Failed). And which nodes are unhealthy, as node repair
//! sees them. Pure: the pods and Nodes come in as arguments.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap, HashSet};

use crds::labels::DISRUPTED_TAINT_KEY;

use crds::NodeClaim;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karpenter_core::disruption::candidates::is_reschedulable;
use karpenter_core::lifecycle::repair::{Unhealthy, aws_policies, unhealthy};
use karpenter_core::pod_view::PodView;
use karpenter_core::scheduling::pod::{is_terminal, pod_requests};
use karpenter_core::scheduling::resources::{CPU, MEMORY, PODS, parse_milli, parse_units};
use serde::Serialize;

/// An amount of cpu and memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Amounts {
    /// CPU in millicores.
    pub cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
}

/// What pods may use of a node: its cpu, memory and pod slots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Allocatable {
    /// CPU in millicores.
    pub cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Pods the kubelet admits (its `maxPods`); `null` when the list does not say or the
    /// value does not parse as a quantity.
    pub pods: Option<i64>,
}

impl Allocatable {
    /// The `cpu`, `memory` and `pods` of a resource list (a Node's or NodeClaim's
    /// `status.allocatable`), or `None` when cpu or memory is missing or does not parse as a
    /// quantity (a missing or malformed `pods` leaves only `pods` unknown).
    pub fn of_list(list: &BTreeMap<String, Quantity>) -> Option<Allocatable> {
        let cpu = i64::try_from(parse_milli(&list.get(CPU)?.0).ok()?).ok()?;
        let memory = parse_units(&list.get(MEMORY)?.0).ok()?;
        let pods = list.get(PODS).and_then(|q| parse_units(&q.0).ok());
        Some(Allocatable { cpu, memory, pods })
    }
}

/// The pods bound to one node, summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodLoad {
    /// Pods bound to the node and not Succeeded or Failed, DaemonSet and static pods included
    /// (as eks-node-viewer counts them).
    pub pods: usize,
    /// Of those, the ones consolidation would have to move (karpenter-core's
    /// [`is_reschedulable`], upstream `IsReschedulable`): not owned by a DaemonSet, not static
    /// (owned by the Node), not being deleted. 0 means the node is empty in upstream's sense.
    pub reschedulable: usize,
    /// Their summed requests (a pod whose requests do not parse adds nothing).
    pub requests: Amounts,
}

/// Sums the pods bound to each node, by node name, in one pass over every pod (pending pods,
/// which no node hosts yet, and Succeeded or Failed ones are left out).
pub fn loads_by_node<P: Borrow<Pod>>(pods: &[P]) -> HashMap<String, PodLoad> {
    let mut loads: HashMap<String, PodLoad> = HashMap::new();
    for pod in pods {
        let pod = &PodView::from(pod.borrow());
        let Some(node) = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())
        else {
            continue;
        };
        if is_terminal(pod) {
            continue;
        }
        let load = loads.entry(node.to_owned()).or_default();
        load.pods += 1;
        if is_reschedulable(pod) {
            load.reschedulable += 1;
        }
        if let Ok(r) = pod_requests(pod) {
            load.requests.cpu += r.cpu;
            load.requests.memory += r.memory;
        }
    }
    loads
}

/// One NodeClaim's node as the PODS, CPU and MEMORY columns show it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeLoad {
    /// The pods on its node ([`PodLoad`]); all zero without a node.
    pub pods: PodLoad,
    /// Its node's `status.allocatable`; for a NodeClaim whose Node is not there (yet), the
    /// NodeClaim's own `status.allocatable`; `None` when neither says (not launched yet).
    pub allocatable: Option<Allocatable>,
}

/// What the NodeClaim rows need to know about nodes: the pods on each, each Node's
/// allocatable, and the condition of each that a repair policy matches, by node name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Loads {
    pods: HashMap<String, PodLoad>,
    allocatable: HashMap<String, Allocatable>,
    unhealthy: HashMap<String, Unhealthy>,
    /// The Nodes carrying the `karpenter.sh/disrupted` taint.
    disrupted: HashSet<String>,
}

impl Loads {
    /// Indexes `nodes` (their allocatable, and the condition each matches of the repair
    /// policies node repair uses: karpenter-core's [`aws_policies`]) and sums `pods` by node
    /// name.
    pub fn of<P: Borrow<Pod>>(nodes: &[Node], pods: &[P]) -> Loads {
        let policies = aws_policies();
        let unhealthy = nodes
            .iter()
            .filter_map(|n| Some((n.metadata.name.clone()?, unhealthy(n, &policies)?)))
            .collect();
        let allocatable = nodes
            .iter()
            .filter_map(|n| {
                let name = n.metadata.name.clone()?;
                let list = n.status.as_ref()?.allocatable.as_ref()?;
                Some((name, Allocatable::of_list(list)?))
            })
            .collect();
        let disrupted = nodes
            .iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| t.iter().any(|t| t.key == DISRUPTED_TAINT_KEY))
            })
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        Loads {
            pods: loads_by_node(pods),
            allocatable,
            unhealthy,
            disrupted,
        }
    }

    /// Whether `claim`'s node carries the `karpenter.sh/disrupted` taint: Karpenter has begun
    /// to disrupt it (no new pods land there) or is terminating it.
    pub fn disrupted_taint_of(&self, claim: &NodeClaim) -> bool {
        claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| self.disrupted.contains(n))
    }

    /// The repair policy `claim`'s node (its `status.nodeName`) matches, if any.
    pub fn unhealthy_of(&self, claim: &NodeClaim) -> Option<&Unhealthy> {
        let node = claim.status.as_ref()?.node_name.as_deref()?;
        self.unhealthy.get(node)
    }

    /// The load of the Node named `node`: its pods and its allocatable (`None` when the Node
    /// is not known or does not say).
    pub fn of_node(&self, node: &str) -> NodeLoad {
        NodeLoad {
            pods: self.pods.get(node).copied().unwrap_or_default(),
            allocatable: self.allocatable.get(node).copied(),
        }
    }

    /// The load of `claim`'s node (its `status.nodeName`), falling back to the NodeClaim's own
    /// allocatable when that Node is not known.
    pub fn of_claim(&self, claim: &NodeClaim) -> NodeLoad {
        let status = claim.status.as_ref();
        let node = status
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty());
        let pods = node
            .and_then(|n| self.pods.get(n))
            .copied()
            .unwrap_or_default();
        let allocatable = node
            .and_then(|n| self.allocatable.get(n))
            .copied()
            .or_else(|| status.and_then(|s| Allocatable::of_list(&s.allocatable)));
        NodeLoad { pods, allocatable }
    }
}

/// `requested` as a whole percentage of `allocatable`, rounded down as `kubectl describe node`
/// does; `None` when nothing is allocatable.
pub fn percent(requested: i64, allocatable: i64) -> Option<i64> {
    (allocatable > 0).then(|| requested.saturating_mul(100) / allocatable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use testutil::{node, nodeclaim, pod};

    fn pods() -> Vec<Pod> {
        vec![
            pod("web-1").cpu("500m").memory("1Gi").on_node("n1").build(),
            pod("web-2")
                .cpu("250m")
                .memory("512Mi")
                .on_node("n1")
                .build(),
            pod("agent-n1")
                .cpu("100m")
                .memory("128Mi")
                .owner("apps/v1", "DaemonSet", "agent", "u")
                .on_node("n1")
                .build(),
            pod("agent-n2")
                .cpu("100m")
                .memory("128Mi")
                .owner("apps/v1", "DaemonSet", "agent", "u")
                .on_node("n2")
                .build(),
            pod("done")
                .cpu("4")
                .on_node("n2")
                .phase("Succeeded")
                .build(),
            pod("failed").cpu("4").on_node("n2").phase("Failed").build(),
            pod("pending").cpu("4").build(),
            pod("bad").cpu("lots").on_node("n2").build(),
        ]
    }

    #[test]
    fn sums_active_pods_by_node() {
        let loads = loads_by_node(&pods());
        assert_eq!(loads.len(), 2);
        assert_eq!(
            loads["n1"],
            PodLoad {
                pods: 3,
                reschedulable: 2,
                requests: Amounts {
                    cpu: 850,
                    memory: (1 << 30) + (640 << 20)
                },
            }
        );
        // Only a DaemonSet pod and a pod whose request does not parse (counted, adding
        // nothing): empty in upstream's sense but for that pod.
        assert_eq!(
            loads["n2"],
            PodLoad {
                pods: 2,
                reschedulable: 1,
                requests: Amounts {
                    cpu: 100,
                    memory: 128 << 20
                },
            }
        );
    }

    #[test]
    fn allocatable_comes_from_the_node_else_the_nodeclaim() {
        let nodes = vec![
            node("n1")
                .allocatable("cpu", "1930m")
                .allocatable("memory", "7548500Ki")
                .allocatable("pods", "29")
                .build(),
            node("broken").allocatable("cpu", "2").build(),
        ];
        let loads = Loads::of(&nodes, &pods());
        let on_node = |name: &str| {
            nodeclaim(format!("claim-{name}"))
                .allocatable("cpu", "3920m")
                .allocatable("memory", "14Gi")
                .merge(serde_json::json!({"status": {"nodeName": name}}))
                .build()
        };
        let n1 = loads.of_claim(&on_node("n1"));
        assert_eq!(n1.pods.pods, 3);
        assert_eq!(
            n1.allocatable,
            Some(Allocatable {
                cpu: 1930,
                memory: 7_548_500 << 10,
                pods: Some(29),
            })
        );
        // No usable Node (no memory in its allocatable): the NodeClaim's figures, which do
        // not say how many pods.
        let broken = loads.of_claim(&on_node("broken"));
        assert_eq!(broken.pods, PodLoad::default());
        assert_eq!(
            broken.allocatable,
            Some(Allocatable {
                cpu: 3920,
                memory: 14 << 30,
                pods: None,
            })
        );
        // In flight: no node, no pods, the NodeClaim's allocatable if it has one.
        let launched = nodeclaim("launched")
            .allocatable("cpu", "2")
            .allocatable("memory", "4Gi")
            .allocatable("pods", "8")
            .build();
        assert_eq!(
            loads.of_claim(&launched),
            NodeLoad {
                pods: PodLoad::default(),
                allocatable: Some(Allocatable {
                    cpu: 2000,
                    memory: 4 << 30,
                    pods: Some(8),
                }),
            }
        );
        // A malformed pod count leaves only the pods unknown.
        let odd = nodeclaim("odd")
            .allocatable("cpu", "2")
            .allocatable("memory", "4Gi")
            .allocatable("pods", "many")
            .build();
        assert_eq!(
            loads.of_claim(&odd).allocatable.map(|a| (a.cpu, a.pods)),
            Some((2000, None))
        );
        assert_eq!(
            loads.of_claim(&nodeclaim("launching").build()),
            NodeLoad::default()
        );
    }

    #[test]
    fn percent_rounds_down_and_needs_allocatable() {
        assert_eq!(percent(1200, 3920), Some(30));
        assert_eq!(percent(0, 3920), Some(0));
        assert_eq!(percent(3920, 3920), Some(100));
        assert_eq!(percent(5, 0), None);
    }
}
