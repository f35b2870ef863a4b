//! kube-scheduler's filter and score steps over the shared scheduling core, for the sandbox's
//! simulated scheduler: filters in kube-scheduler's plugin order (NodeUnschedulable, NodeName,
//! TaintToleration, NodeAffinity, NodeResourcesFit), scoring by the default LeastAllocated
//! strategy over the first 100 feasible nodes, and kube-scheduler's `0/N nodes are available`
//! messages for pods that fit nowhere.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use sandbox::actors::PodPlacer;

use super::pod::PodInfo;
use super::resources::Resources;
use super::taints::{taint, untolerated};

/// kube-scheduler stops looking after this many feasible nodes (`minFeasibleNodesToFind`).
const FEASIBLE_NODES_TO_SCORE: usize = 100;

struct CompiledPod {
    info: PodInfo,
    /// Nodes named by `matchFields metadata.name` (DaemonSet pods), if any.
    node_names: Option<Vec<String>>,
}

struct NodeState {
    name: String,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    unschedulable: bool,
    allocatable: Resources,
    used: Resources,
}

/// The simulated kube-scheduler's placement logic.
#[derive(Default)]
pub struct KubeScheduler {
    compiled: Mutex<HashMap<String, (String, Arc<CompiledPod>)>>,
}

impl KubeScheduler {
    /// A scheduler with an empty compile cache.
    pub fn new() -> KubeScheduler {
        KubeScheduler::default()
    }

    fn compile(&self, pod: &Pod) -> Result<Arc<CompiledPod>, String> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let rv = pod.metadata.resource_version.clone().unwrap_or_default();
        // Objects without a uid (a DaemonSet's probe pod) are compiled every time.
        let cacheable = !uid.is_empty();
        if cacheable {
            let cache = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((cached_rv, c)) = cache.get(&uid)
                && *cached_rv == rv
            {
                return Ok(Arc::clone(c));
            }
        }
        let mut stripped = pod.clone();
        let mut node_names = None;
        let terms = stripped
            .spec
            .as_mut()
            .and_then(|s| s.affinity.as_mut())
            .and_then(|a| a.node_affinity.as_mut())
            .and_then(|na| {
                na.required_during_scheduling_ignored_during_execution
                    .as_mut()
            });
        if let Some(ns) = terms {
            for term in &mut ns.node_selector_terms {
                for f in term.match_fields.take().unwrap_or_default() {
                    if f.key == "metadata.name" && f.operator == "In" {
                        node_names
                            .get_or_insert_with(Vec::new)
                            .extend(f.values.unwrap_or_default());
                    }
                }
            }
        }
        let info = PodInfo::from_pod(&stripped).map_err(|e| e.to_string())?;
        let compiled = Arc::new(CompiledPod { info, node_names });
        if cacheable {
            let mut cache = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
            cache.insert(uid, (rv, Arc::clone(&compiled)));
        }
        Ok(compiled)
    }

    /// Forget compiled pods that are gone, once the cache holds many more than the live pods.
    fn prune<'a>(&self, live: impl Iterator<Item = &'a Arc<Pod>>) {
        let live: std::collections::HashSet<&str> =
            live.filter_map(|p| p.metadata.uid.as_deref()).collect();
        let mut cache = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() > 2 * live.len() + 1024 {
            cache.retain(|uid, _| live.contains(uid.as_str()));
        }
    }

    fn node_state(node: &Node) -> Option<NodeState> {
        if node.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let spec = node.spec.as_ref();
        let status = node.status.as_ref();
        let mut taints = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if !ready {
            taints.push(taint("node.kubernetes.io/not-ready", None, "NoSchedule"));
        }
        Some(NodeState {
            name: node.metadata.name.clone()?,
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints,
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            allocatable: status
                .and_then(|s| s.allocatable.as_ref())
                .and_then(|a| Resources::from_list(a).ok())
                .unwrap_or_default(),
            used: Resources::default(),
        })
    }

    /// The first filter a node fails for a pod, as kube-scheduler words it.
    fn filter(pod: &CompiledPod, node: &NodeState) -> Result<(), Vec<String>> {
        let tolerations = &pod.info.tolerations;
        if node.unschedulable {
            let unschedulable = taint("node.kubernetes.io/unschedulable", None, "NoSchedule");
            if untolerated(std::slice::from_ref(&unschedulable), tolerations).is_some() {
                return Err(vec!["node(s) were unschedulable".into()]);
            }
        }
        if let Some(names) = &pod.node_names
            && !names.contains(&node.name)
        {
            return Err(vec![
                "node(s) didn't satisfy plugin(s) [NodeAffinity]".into(),
            ]);
        }
        if let Some(t) = untolerated(&node.taints, tolerations) {
            let value = t.value.clone().unwrap_or_default();
            return Err(vec![format!(
                "node(s) had untolerated taint {{{}: {value}}}",
                t.key
            )]);
        }
        if !pod
            .info
            .requirement_terms
            .iter()
            .any(|t| t.matches_labels(&node.labels).is_ok())
        {
            return Err(vec![
                "node(s) didn't match Pod's node affinity/selector".into(),
            ]);
        }
        let total = node.used.plus(&pod.info.requests);
        let short: Vec<String> = total
            .exceeding(&node.allocatable)
            .into_iter()
            .map(|r| {
                if r == "pods" {
                    "Too many pods".to_string()
                } else {
                    format!("Insufficient {r}")
                }
            })
            .collect();
        if short.is_empty() { Ok(()) } else { Err(short) }
    }

    /// LeastAllocated: the mean free fraction of cpu and memory after placing the pod.
    fn score(pod: &CompiledPod, node: &NodeState) -> f64 {
        let free = |alloc: i64, used: i64| {
            if alloc <= 0 {
                0.0
            } else {
                (alloc - used) as f64 / alloc as f64
            }
        };
        let after = node.used.plus(&pod.info.requests);
        (free(node.allocatable.cpu, after.cpu) + free(node.allocatable.memory, after.memory)) / 2.0
    }
}

impl PodPlacer for KubeScheduler {
    fn place(
        &self,
        pending: &[Arc<Pod>],
        nodes: &[Arc<Node>],
        bound: &[Arc<Pod>],
    ) -> Vec<Result<String, String>> {
        let mut states: Vec<NodeState> = nodes
            .iter()
            .filter_map(|n| KubeScheduler::node_state(n))
            .collect();
        states.sort_by(|a, b| a.name.cmp(&b.name));
        let index: HashMap<String, usize> = states
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), i))
            .collect();
        for pod in bound {
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .unwrap_or("");
            if let (Some(&i), Ok(c)) = (index.get(node), self.compile(pod)) {
                states[i].used.add(&c.info.requests);
            }
        }
        self.prune(pending.iter().chain(bound.iter()));
        let total = states.len();
        pending
            .iter()
            .map(|pod| {
                let compiled = self.compile(pod)?;
                if total == 0 {
                    return Err("no nodes available to schedule pods".to_string());
                }
                let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
                let mut best: Option<(f64, usize)> = None;
                let mut feasible = 0;
                for (i, node) in states.iter().enumerate() {
                    match KubeScheduler::filter(&compiled, node) {
                        Ok(()) => {
                            let s = KubeScheduler::score(&compiled, node);
                            if best.is_none_or(|(b, _)| s > b) {
                                best = Some((s, i));
                            }
                            feasible += 1;
                            if feasible >= FEASIBLE_NODES_TO_SCORE {
                                break;
                            }
                        }
                        Err(rs) => {
                            for r in rs {
                                *reasons.entry(r).or_default() += 1;
                            }
                        }
                    }
                }
                match best {
                    Some((_, i)) => {
                        states[i].used.add(&compiled.info.requests);
                        Ok(states[i].name.clone())
                    }
                    None => {
                        let why: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
                        Err(format!(
                            "0/{total} nodes are available: {}. preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling.",
                            why.join(", ")
                        ))
                    }
                }
            })
            .collect()
    }

    fn eligible(&self, pod: &Pod, node: &Node) -> bool {
        let (Ok(compiled), Some(state)) = (self.compile(pod), KubeScheduler::node_state(node))
        else {
            return false;
        };
        untolerated(&state.taints, &compiled.info.tolerations).is_none()
            && compiled
                .info
                .requirement_terms
                .iter()
                .any(|t| t.matches_labels(&state.labels).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, cpu: &str, extra: serde_json::Value) -> Arc<Pod> {
        let mut v = json!({"metadata": {"name": name, "namespace": "default", "uid": name, "resourceVersion": "1"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}});
        if let (Some(spec), Some(e)) = (v["spec"].as_object_mut(), extra.as_object()) {
            for (k, val) in e {
                spec.insert(k.clone(), val.clone());
            }
        }
        Arc::new(serde_json::from_value(v).expect("pod"))
    }

    fn node(name: &str, cpu: &str, taints: serde_json::Value) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "spec": {"taints": taints},
                "status": {"allocatable": {"cpu": cpu, "memory": "4Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}]}}),
            )
            .expect("node"),
        )
    }

    #[test]
    fn least_allocated_spreads_and_capacity_is_consumed_within_a_pass() {
        let s = KubeScheduler::new();
        let nodes = vec![node("a", "2", json!([])), node("b", "2", json!([]))];
        let pending = vec![
            pod("p1", "1", json!({})),
            pod("p2", "1", json!({})),
            pod("p3", "1", json!({})),
            pod("p4", "1", json!({})),
            pod("p5", "1", json!({})),
        ];
        let r = s.place(&pending, &nodes, &[]);
        assert_eq!(r[0], Ok("a".to_string()));
        assert_eq!(
            r[1],
            Ok("b".to_string()),
            "LeastAllocated prefers the emptier node"
        );
        assert!(r[2].is_ok() && r[3].is_ok());
        assert_eq!(
            r[4],
            Err("0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.".to_string())
        );
    }

    #[test]
    fn unregistered_taint_blocks_and_daemon_pods_pin_by_name() {
        let s = KubeScheduler::new();
        let nodes = vec![
            node(
                "a",
                "2",
                json!([{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]),
            ),
            node("b", "2", json!([])),
        ];
        let r = s.place(
            &[pod(
                "p",
                "100m",
                json!({"nodeSelector": {"kubernetes.io/hostname": "a"}}),
            )],
            &nodes,
            &[],
        );
        assert_eq!(
            r[0],
            Err("0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {karpenter.sh/unregistered: }. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.".to_string())
        );
        let ds = pod(
            "ds",
            "100m",
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}}}),
        );
        assert_eq!(
            s.place(&[Arc::clone(&ds)], &nodes, &[])[0],
            Ok("b".to_string())
        );
        assert!(s.eligible(&ds, &nodes[1]));
        assert!(
            !s.eligible(&ds, &nodes[0]),
            "the unregistered taint is not tolerated"
        );
        assert_eq!(
            s.place(&[pod("x", "1", json!({}))], &[], &[])[0],
            Err("no nodes available to schedule pods".to_string())
        );
    }
}
