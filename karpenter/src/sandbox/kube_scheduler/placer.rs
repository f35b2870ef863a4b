//! kube-scheduler's filter and score steps over the shared scheduling core, for the sandbox's
//! simulated scheduler: VolumeBinding's PreFilter (claims that keep a pod off every node), filters
//! in kube-scheduler's plugin order (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity,
//! NodePorts, NodeResourcesFit, NodeVolumeLimits, PodTopologySpread, InterPodAffinity), volume
//! topology, scoring by the default LeastAllocated
//! strategy over the first 100 feasible nodes, and kube-scheduler's `0/N nodes are available`
//! messages.
//! Preferences (preferred affinities, `ScheduleAnyway` spreads) only score in kube-scheduler, so
//! they never filter here.
//!
//! Nominations (`status.nominatedNodeName`) as kube-scheduler 1.35 treats them with KEP-5278's
//! `NominatedNodeNameForExpectation` (beta, on by default): a pod's nominated node is evaluated
//! first and, when it passes the filters, taken without scoring (`schedule_one.go`
//! `evaluateNominatedNode`); every other pod is filtered as if the pods nominated to a node
//! with equal or higher priority were already there (their requests and host ports:
//! `RunFilterPluginsWithNominatedPods`, whose with-nominated pass is the stricter one for
//! those filters), while scoring ignores them; a nomination is never cleared on failure
//! (KEP-5278 removed that), and the binding clears it (kube-apiserver, `sandbox::pods::bind`).
//! Nominated pods are not added to the topology counts of the with-nominated pass (pod
//! (anti-)affinity, spread): a simplification.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use std::borrow::Cow;

use karpenter_core::pod_view::PodView;
use karpenter_core::scheduling::constraints::{HostPort, Relaxation};
use karpenter_core::scheduling::pod::PodInfo;
use karpenter_core::scheduling::requirements::Requirements;
use karpenter_core::scheduling::resources::Resources;
use karpenter_core::scheduling::taints::{taint, untolerated};
use karpenter_core::scheduling::topology::{
    Mode, PodRef, Target, Topology, TopologyError, Universe,
};
use karpenter_core::scheduling::volumes::VolumeIndex;
use sandbox::actors::NodeEligibility;

use super::unschedulable::{Plugin, Unschedulable};
use super::view::{ClusterView, PodPlacer};
use super::volume_binding::VolumeBinding;
use super::volume_limits::{MAX_VOLUME_COUNT, VolumeLimits, pending_volumes};

/// kube-scheduler stops looking after this many feasible nodes (`minFeasibleNodesToFind`).
const FEASIBLE_NODES_TO_SCORE: usize = 100;

/// What one required node-affinity term asks of a node's name, beyond the labels its compiled
/// requirements check: `matchFields` on `metadata.name` (DaemonSet pods), and whether the term
/// can match at all.
#[derive(Clone, Debug, Default)]
struct NameFilter {
    /// The term matches no node: it is empty, or kube-scheduler cannot parse it.
    nothing: bool,
    /// `metadata.name In`: the names allowed (every such field must hold).
    within: Option<BTreeSet<String>>,
    /// `metadata.name NotIn`: names excluded.
    excluded: BTreeSet<String>,
}

impl NameFilter {
    fn allows(&self, node: &str) -> bool {
        !self.nothing
            && self.within.as_ref().is_none_or(|w| w.contains(node))
            && !self.excluded.contains(node)
    }
}

struct CompiledPod {
    info: PodInfo,
    /// One entry per `info.requirement_terms` term.
    names: Vec<NameFilter>,
    /// kube-scheduler's NodeAffinity PreFilter result: when every term names its nodes, only
    /// those nodes are considered.
    prefilter: Option<BTreeSet<String>>,
}

impl CompiledPod {
    /// The first required term (with its compiled requirements) the node satisfies.
    fn matching_term(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
    ) -> Option<&Requirements> {
        self.info
            .requirement_terms
            .iter()
            .zip(&self.names)
            .find(|(t, n)| n.allows(name) && t.matches_labels(labels).is_ok())
            .map(|(t, _)| t)
    }
}

/// A valid label value (`validation.IsValidLabelValue`): at most 63 characters, empty or
/// alphanumeric at both ends with `-`, `_` and `.` inside.
fn valid_label_value(v: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    v.is_empty()
        || (v.len() <= 63
            && alnum(v.chars().next())
            && alnum(v.chars().last())
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
}

/// The name filter of each required node-affinity term (one unrestricted filter when the pod
/// has none), and the PreFilter node set.
fn name_filters(pod: &Pod) -> (Vec<NameFilter>, Option<BTreeSet<String>>) {
    let Some(selector) = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    else {
        return (vec![NameFilter::default()], None);
    };
    if selector.node_selector_terms.is_empty() {
        // No term: nothing matches.
        let nothing = NameFilter {
            nothing: true,
            ..NameFilter::default()
        };
        return (vec![nothing], None);
    }
    let mut prefilter: Option<BTreeSet<String>> = Some(BTreeSet::new());
    let filters = selector
        .node_selector_terms
        .iter()
        .map(|term| {
            let fields = term.match_fields.as_deref().unwrap_or_default();
            let expressions = term.match_expressions.as_deref().unwrap_or_default();
            let mut f = NameFilter {
                nothing: fields.is_empty() && expressions.is_empty(),
                ..NameFilter::default()
            };
            for e in expressions {
                if matches!(e.operator.as_str(), "In" | "NotIn")
                    && !e.values.iter().flatten().all(|v| valid_label_value(v))
                {
                    f.nothing = true;
                }
            }
            for field in fields {
                let values: BTreeSet<String> = field.values.iter().flatten().cloned().collect();
                match (field.key.as_str(), field.operator.as_str()) {
                    ("metadata.name", "In") => {
                        f.within = Some(match f.within.take() {
                            Some(w) => w.intersection(&values).cloned().collect(),
                            None => values,
                        });
                    }
                    ("metadata.name", "NotIn") => f.excluded.extend(values),
                    _ => f.nothing = true,
                }
            }
            match (&mut prefilter, &f.within) {
                (Some(all), Some(w)) => all.extend(w.iter().cloned()),
                _ => prefilter = None,
            }
            f
        })
        .collect();
    (filters, prefilter)
}

struct NodeState {
    name: String,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    unschedulable: bool,
    allocatable: Resources,
    used: Resources,
    ports: Vec<HostPort>,
}

/// The resources whose sum over `parts` is non-zero and exceeds `allocatable`, in
/// [`Resources::iter`]'s order (cpu, memory, pods, ephemeral-storage, then extended resources by
/// name): what `parts` summed and [`Resources::exceeding`] would say, without building the sum
/// (this runs for every pending pod on every node).
fn short_of<'a>(allocatable: &Resources, parts: [&'a Resources; 3]) -> Vec<&'a str> {
    use karpenter_core::scheduling::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS};
    let mut out = Vec::new();
    for (name, get) in [
        (CPU, (|r: &Resources| r.cpu) as fn(&Resources) -> i64),
        (MEMORY, |r: &Resources| r.memory),
        (PODS, |r: &Resources| r.pods),
        (EPHEMERAL_STORAGE, |r: &Resources| r.ephemeral),
    ] {
        let total: i64 = parts.iter().map(|r| get(r)).sum();
        if total != 0 && total > get(allocatable) {
            out.push(name);
        }
    }
    if parts.iter().any(|r| !r.extended.is_empty()) {
        let names: BTreeSet<&'a str> = parts
            .iter()
            .flat_map(|r| r.extended.keys().map(String::as_str))
            .collect();
        for name in names {
            let total: i64 = parts.iter().map(|r| r.get(name)).sum();
            if total != 0 && total > allocatable.get(name) {
                out.push(name);
            }
        }
    }
    out
}

/// Room held on a node for the pods nominated to it (kube-scheduler's nominator).
#[derive(Default)]
struct Nominator {
    /// Each pending pod's nominated node (an index into the node states), while it waits.
    node_of: Vec<Option<usize>>,
    /// Each pending pod's priority (`spec.priority`, 0 when unset).
    priority: Vec<i32>,
    /// Each pending pod's requests (empty for pods that did not compile).
    requests: Vec<Resources>,
    /// Each pending pod's host ports.
    ports: Vec<Vec<HostPort>>,
    /// Pending pods nominated to each node.
    by_node: Vec<Vec<usize>>,
    /// Of those, the ones with host ports.
    with_ports: Vec<Vec<usize>>,
    /// Per priority threshold asked so far: the requests nominated to each node by waiting
    /// pods of at least that priority.
    totals: HashMap<i32, Vec<Resources>>,
}

impl Nominator {
    /// The room nominated pods hold on `node` against pod `k`: requests and host ports of the
    /// waiting pods nominated there with a priority of at least `k`'s, `k` itself excluded.
    fn held(&mut self, node: usize, k: usize) -> (std::borrow::Cow<'_, Resources>, Vec<HostPort>) {
        let threshold = self.priority[k];
        if !self.totals.contains_key(&threshold) {
            let mut totals = vec![Resources::default(); self.by_node.len()];
            for (n, pods) in self.by_node.iter().enumerate() {
                for &q in pods {
                    if self.priority[q] >= threshold {
                        totals[n].add(&self.requests[q]);
                    }
                }
            }
            self.totals.insert(threshold, totals);
        }
        let total = &self.totals[&threshold][node];
        let requests = if self.node_of[k] == Some(node) {
            let mut own_excluded = total.clone();
            own_excluded.sub(&self.requests[k]);
            std::borrow::Cow::Owned(own_excluded)
        } else {
            std::borrow::Cow::Borrowed(total)
        };
        let ports = self.with_ports[node]
            .iter()
            .filter(|&&q| q != k && self.priority[q] >= threshold)
            .flat_map(|&q| self.ports[q].iter().cloned())
            .collect();
        (requests, ports)
    }

    /// Pod `k` was placed: its nomination no longer holds room.
    fn resolve(&mut self, k: usize) {
        let Some(node) = self.node_of[k].take() else {
            return;
        };
        self.by_node[node].retain(|&q| q != k);
        self.with_ports[node].retain(|&q| q != k);
        for (threshold, totals) in &mut self.totals {
            if self.priority[k] >= *threshold {
                totals[node].sub(&self.requests[k]);
            }
        }
    }
}

/// The simulated kube-scheduler's placement logic.
#[derive(Default)]
pub struct KubeScheduler {
    compiled: Mutex<HashMap<String, (String, Arc<CompiledPod>)>>,
}

/// Every preference dropped: kube-scheduler only scores preferences.
fn required_only(c: &karpenter_core::scheduling::constraints::PodConstraints) -> Relaxation {
    Relaxation {
        node_terms: 0,
        affinity: c.preferred_affinity.len(),
        anti_affinity: c.preferred_anti_affinity.len(),
        preferred_node: c.preferred_node.len(),
        anyway_spreads: c.spread.iter().filter(|s| !s.hard).count(),
        tolerate_prefer_no_schedule: false,
    }
}

fn pod_ref(p: &PodInfo) -> PodRef<'_> {
    PodRef {
        namespace: &p.key.namespace,
        labels: &p.labels,
        constraints: &p.constraints,
        node_terms: &p.requirement_terms,
        tolerations: &p.tolerations,
    }
}

/// A failing node's reason: the plugin and kube-scheduler's words for it.
type Rejection = (Plugin, Cow<'static, str>);

fn reason(e: &TopologyError) -> Rejection {
    if e.inverse {
        return (
            Plugin::InterPodAffinity,
            "node(s) didn't satisfy existing pods anti-affinity rules".into(),
        );
    }
    match e.kind {
        "topology spread" => (
            Plugin::PodTopologySpread,
            "node(s) didn't match pod topology spread constraints".into(),
        ),
        "pod affinity" => (
            Plugin::InterPodAffinity,
            "node(s) didn't match pod affinity rules".into(),
        ),
        _ => (
            Plugin::InterPodAffinity,
            "node(s) didn't match pod anti-affinity rules".into(),
        ),
    }
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
        // `matchFields` become per-term name filters; the rest compiles as for provisioning.
        let (names, prefilter) = name_filters(pod);
        let mut stripped = pod.clone();
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
                term.match_fields = None;
            }
        }
        let info = PodInfo::from_pod(&PodView::from(&stripped)).map_err(|e| e.to_string())?;
        if info.requirement_terms.len() != names.len() {
            return Err("node affinity terms did not compile one to one".into());
        }
        let compiled = Arc::new(CompiledPod {
            info,
            names,
            prefilter,
        });
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
            ports: Vec::new(),
        })
    }

    /// The node filters before topology, as kube-scheduler words their failures, with the room
    /// nominated pods hold on the node (`held`: requests and host ports) taken.
    fn filter(
        pod: &CompiledPod,
        node: &NodeState,
        held: &(std::borrow::Cow<'_, Resources>, Vec<HostPort>),
    ) -> Result<Requirements, Vec<Rejection>> {
        let tolerations = &pod.info.tolerations;
        if node.unschedulable {
            let unschedulable = taint("node.kubernetes.io/unschedulable", None, "NoSchedule");
            if untolerated(std::slice::from_ref(&unschedulable), tolerations).is_some() {
                return Err(vec![(
                    Plugin::NodeUnschedulable,
                    "node(s) were unschedulable".into(),
                )]);
            }
        }
        if let Some(names) = &pod.prefilter
            && !names.contains(&node.name)
        {
            return Err(vec![(
                Plugin::NodeAffinity,
                "node(s) didn't satisfy plugin(s) [NodeAffinity]".into(),
            )]);
        }
        if let Some(t) = untolerated(&node.taints, tolerations) {
            let value = t.value.clone().unwrap_or_default();
            return Err(vec![(
                Plugin::TaintToleration,
                format!("node(s) had untolerated taint {{{}: {value}}}", t.key).into(),
            )]);
        }
        let Some(term) = pod.matching_term(&node.name, &node.labels) else {
            return Err(vec![(
                Plugin::NodeAffinity,
                "node(s) didn't match Pod's node affinity/selector".into(),
            )]);
        };
        if pod
            .info
            .constraints
            .host_ports
            .iter()
            .any(|p| node.ports.iter().chain(&held.1).any(|u| u.conflicts(p)))
        {
            return Err(vec![(
                Plugin::NodePorts,
                "node(s) didn't have free ports for the requested pod ports".into(),
            )]);
        }
        let short: Vec<Rejection> =
            short_of(&node.allocatable, [&node.used, &held.0, &pod.info.requests])
                .into_iter()
                .map(|r| {
                    let text: Cow<'static, str> = match r {
                        "pods" => "Too many pods".into(),
                        "cpu" => "Insufficient cpu".into(),
                        "memory" => "Insufficient memory".into(),
                        "ephemeral-storage" => "Insufficient ephemeral-storage".into(),
                        other => format!("Insufficient {other}").into(),
                    };
                    (Plugin::NodeResourcesFit, text)
                })
                .collect();
        if short.is_empty() {
            Ok(term.clone())
        } else {
            Err(short)
        }
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

    fn topology(
        view: &ClusterView,
        states: &[NodeState],
        pending: &[Arc<CompiledPod>],
        bound: &[(Arc<CompiledPod>, usize, bool)],
    ) -> Topology {
        let mut keys: BTreeSet<&str> = BTreeSet::new();
        for c in pending.iter().chain(bound.iter().map(|(c, _, _)| c)) {
            let k = &c.info.constraints;
            keys.extend(k.spread.iter().map(|s| s.key.as_str()));
            for t in k
                .affinity
                .iter()
                .chain(&k.anti_affinity)
                .chain(&k.preferred_affinity)
                .chain(&k.preferred_anti_affinity)
            {
                keys.insert(t.key.as_str());
            }
        }
        // The hostname is a label like any other here: its domains come from the nodes too.
        let mut universe: Universe = BTreeMap::new();
        for key in keys {
            let mut seen = BTreeSet::new();
            let entries = states
                .iter()
                .filter_map(|s| s.labels.get(key).map(|v| (v.clone(), s.taints.clone())))
                .filter(|(v, t)| {
                    seen.insert((
                        v.clone(),
                        t.iter()
                            .map(karpenter_core::scheduling::taints::taint_string)
                            .collect::<Vec<_>>(),
                    ))
                })
                .collect();
            universe.insert(key.to_string(), entries);
        }
        let pods: Vec<PodRef> = pending.iter().map(|c| pod_ref(&c.info)).collect();
        let existing: Vec<(PodRef, Target)> = bound
            .iter()
            .map(|(c, i, _)| {
                (
                    pod_ref(&c.info),
                    Target::Node {
                        id: *i,
                        labels: &states[*i].labels,
                        taints: &states[*i].taints,
                    },
                )
            })
            .collect();
        // PodTopologySpread skips terminating pods; pod (anti-)affinity counts them.
        let spread_counts: Vec<bool> = bound
            .iter()
            .map(|(_, _, terminating)| !terminating)
            .collect();
        Topology::with_spread_counts(
            Mode::KubeScheduler,
            &pods,
            &existing,
            &spread_counts,
            universe,
            view.namespaces,
        )
    }
}

impl PodPlacer for KubeScheduler {
    fn place(&self, view: &ClusterView) -> Vec<Result<String, Unschedulable>> {
        let mut states: Vec<NodeState> = view
            .nodes
            .iter()
            .filter_map(|n| KubeScheduler::node_state(n))
            .collect();
        states.sort_by(|a, b| a.name.cmp(&b.name));
        let index: HashMap<String, usize> = states
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), i))
            .collect();
        self.prune(view.pending.iter().chain(view.bound.iter()));
        let mut bound = Vec::new();
        for pod in view.bound {
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .unwrap_or("");
            if let (Some(&i), Ok(c)) = (index.get(node), self.compile(pod)) {
                states[i].used.add(&c.info.requests);
                states[i]
                    .ports
                    .extend(c.info.constraints.host_ports.iter().cloned());
                bound.push((c, i, pod.metadata.deletion_timestamp.is_some()));
            }
        }
        let volumes = VolumeIndex::new(view.pvcs, view.pvs, view.storage_classes);
        let mut limits = VolumeLimits::new(view);
        let pod_volumes = pending_volumes(&limits, view.pending);
        let binding = VolumeBinding::new(view.pvcs, view.storage_classes);
        let compiled: Vec<Result<Arc<CompiledPod>, Unschedulable>> = view
            .pending
            .iter()
            .map(|p| {
                if let Some(why) = binding.blocker(p) {
                    return Err(Unschedulable::pre_filter(
                        Plugin::VolumeBinding,
                        states.len(),
                        why,
                    ));
                }
                let c = self.compile(p).map_err(Unschedulable::invalid)?;
                // Only a pod with volumes has volume topology (the view is made only then).
                let has_volumes = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.volumes.as_ref())
                    .is_some_and(|v| !v.is_empty());
                let alternatives = if has_volumes {
                    volumes.requirements(&PodView::from(&**p))
                } else {
                    Vec::new()
                };
                if alternatives.is_empty() {
                    return Ok(c);
                }
                let mut info = c.info.clone();
                info.add_volume_requirements(&alternatives);
                // Each term became one term per alternative, in order.
                let names = c
                    .names
                    .iter()
                    .flat_map(|n| std::iter::repeat_n(n.clone(), alternatives.len()))
                    .collect();
                Ok(Arc::new(CompiledPod {
                    info,
                    names,
                    prefilter: c.prefilter.clone(),
                }))
            })
            .collect();
        let ok: Vec<Arc<CompiledPod>> = compiled
            .iter()
            .filter_map(|c| c.as_ref().ok().cloned())
            .collect();
        let mut topology = KubeScheduler::topology(view, &states, &ok, &bound);
        // Pods waiting in the queue hold their nominated room too; they are not placed.
        let waiting: Vec<Option<Arc<CompiledPod>>> = view
            .nominated
            .iter()
            .map(|p| self.compile(p).ok())
            .collect();
        let compiled_ok: Vec<Option<&Arc<CompiledPod>>> = compiled
            .iter()
            .map(|c| c.as_ref().ok())
            .chain(waiting.iter().map(Option::as_ref))
            .collect();
        let mut nominator = Nominator {
            node_of: view
                .pending
                .iter()
                .chain(view.nominated)
                .map(|p| {
                    let nominated = p.status.as_ref()?.nominated_node_name.as_deref()?;
                    index.get(nominated).copied()
                })
                .collect(),
            priority: view
                .pending
                .iter()
                .chain(view.nominated)
                .map(|p| p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0))
                .collect(),
            requests: compiled_ok
                .iter()
                .map(|c| c.map(|c| c.info.requests.clone()).unwrap_or_default())
                .collect(),
            ports: compiled_ok
                .iter()
                .map(|c| {
                    c.map(|c| c.info.constraints.host_ports.clone())
                        .unwrap_or_default()
                })
                .collect(),
            by_node: vec![Vec::new(); states.len()],
            with_ports: vec![Vec::new(); states.len()],
            totals: HashMap::new(),
        };
        for (k, node) in nominator.node_of.clone().into_iter().enumerate() {
            match (node, compiled_ok[k]) {
                (Some(i), Some(_)) => {
                    nominator.by_node[i].push(k);
                    if !nominator.ports[k].is_empty() {
                        nominator.with_ports[i].push(k);
                    }
                }
                _ => nominator.node_of[k] = None,
            }
        }
        let total = states.len();
        let mut topo_index = 0;
        let mut out = Vec::with_capacity(compiled.len());
        for (k, c) in compiled.into_iter().enumerate() {
            let compiled = match c {
                Ok(c) => c,
                Err(e) => {
                    out.push(Err(e));
                    continue;
                }
            };
            let ti = topo_index;
            topo_index += 1;
            if total == 0 {
                out.push(Err(Unschedulable::no_nodes()));
                continue;
            }
            let relax = required_only(&compiled.info.constraints);
            let involves = topology.involves(ti);
            let check = |i: usize, nominator: &mut Nominator| {
                let node = &states[i];
                let held = nominator.held(i, k);
                KubeScheduler::filter(&compiled, node, &held).and_then(|term| {
                    if !limits.fits(&node.name, &pod_volumes[k]) {
                        return Err(vec![(Plugin::NodeVolumeLimits, MAX_VOLUME_COUNT.into())]);
                    }
                    if !involves {
                        return Ok(());
                    }
                    let target = Target::Node {
                        id: i,
                        labels: &node.labels,
                        taints: &node.taints,
                    };
                    let own = topology.requirements(
                        ti,
                        &pod_ref(&compiled.info),
                        &Relaxation {
                            node_terms: 0,
                            ..relax
                        },
                        &term,
                        &target,
                    );
                    own.map(|_| ()).map_err(|e| vec![reason(&e)])
                })
            };
            // evaluateNominatedNode: a nominated node that passes the filters is taken as the
            // only feasible node, without scoring.
            let nominated = nominator.node_of[k].filter(|&i| check(i, &mut nominator).is_ok());
            let mut why = Unschedulable::filters(total);
            let mut best: Option<(f64, usize)> = nominated.map(|i| (0.0, i));
            if nominated.is_none() {
                let mut feasible = 0;
                for (i, node) in states.iter().enumerate() {
                    match check(i, &mut nominator) {
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
                            for (plugin, r) in rs {
                                why.reject(plugin, r);
                            }
                        }
                    }
                }
            }
            match best {
                Some((_, i)) => {
                    nominator.resolve(k);
                    let node = &mut states[i];
                    node.used.add(&compiled.info.requests);
                    node.ports
                        .extend(compiled.info.constraints.host_ports.iter().cloned());
                    let target = Target::Node {
                        id: i,
                        labels: &states[i].labels,
                        taints: &states[i].taints,
                    };
                    topology.record(ti, &target);
                    limits.add(&states[i].name, pod_volumes[k].clone());
                    out.push(Ok(states[i].name.clone()));
                }
                None => out.push(Err(why)),
            }
        }
        out
    }
}

/// The DaemonSet controller's question (which nodes its pods belong on), answered with the same
/// compiled node affinity and taints as the filters.
impl NodeEligibility for KubeScheduler {
    fn eligible(&self, pod: &Pod, node: &Node) -> bool {
        let (Ok(compiled), Some(state)) = (self.compile(pod), KubeScheduler::node_state(node))
        else {
            return false;
        };
        // The DaemonSet controller asks with a probe pod whose name filter names no node: judge
        // labels only, skipping terms that can match nothing.
        untolerated(&state.taints, &compiled.info.tolerations).is_none()
            && compiled
                .info
                .requirement_terms
                .iter()
                .zip(&compiled.names)
                .any(|(t, n)| !n.nothing && t.matches_labels(&state.labels).is_ok())
    }
}
