//! The provisioning solver (upstream `provisioning/scheduling/scheduler.go`): pods in first-fit-
//! decreasing order go to existing nodes and in-flight NodeClaims first, then to NodeClaims
//! opened earlier in this run, then to a new NodeClaim from the first NodePool (by weight) that
//! admits them. Topology spread, pod (anti-)affinity, host ports, CSI attach limits
//! ([`super::attach`]) and minValues are honoured;
//! preferences are treated as required and relaxed one at a time when a pod cannot otherwise
//! schedule. Each new NodeClaim keeps every instance type that still fits, cheapest first.
//! Pure: no I/O, no clock.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt;
use std::rc::Rc;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Taint, Toleration};

use super::attach::{AttachLimits, LimitReached, Volumes, type_exceeded};
use super::choices::{self, MinValuesPolicy};
use super::constraints::{HostPort, Relaxation, node_requirements};
use super::pod::{PodInfo, PodKey, queue_order};
use super::requirements::{Incompatible, Requirement, Requirements};
use super::resources::{Resources, format_quantity};
use super::taints::{taint_string, untolerated};
use super::topology::{Mode, PodRef, Target, Topology, TopologyError, Universe};
use crate::capacity::{InstanceType, Offering};
use crds::labels::{CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, INSTANCE_TYPE_LABEL, TOPOLOGY_ZONE_LABEL};

/// Why a pod fails when no NodePool is ready (a verdict that may change once one is).
pub const NO_READY_NODEPOOL: &str = "no ready NodePool can launch capacity";
/// The `nodes` key of NodePool limits (a node count).
pub const LIMIT_NODES: &str = "nodes";

/// A NodePool as the solver uses it.
#[derive(Clone, Debug)]
pub struct NodePoolTemplate {
    /// NodePool name.
    pub name: String,
    /// Higher weights are tried first.
    pub weight: i32,
    /// Pool requirements (with minValues), its template labels (as `In`) and
    /// `karpenter.sh/nodepool In [name]`.
    pub requirements: Requirements,
    /// Template taints pods must tolerate (startup taints are not considered, as upstream).
    pub taints: Vec<Taint>,
    /// Instance types of the pool's node class.
    pub instance_types: Vec<Arc<InstanceType>>,
    /// Requests of the DaemonSet pods every new node of this pool will run.
    pub daemon_overhead: Resources,
    /// What `spec.limits` still allows, per limited resource (cpu in millicores, memory in
    /// bytes, `nodes` as a count); resources not listed are unlimited.
    pub remaining: BTreeMap<String, i64>,
}

/// How an existing node or in-flight NodeClaim constrains which pods it accepts.
#[derive(Clone, Debug)]
pub enum NodeLabels {
    /// A registered node: its actual labels.
    Known(BTreeMap<String, String>),
    /// An in-flight NodeClaim not yet launched or registered: its requirements.
    Pending(Requirements),
}

/// Capacity that exists or is in flight.
#[derive(Clone, Debug)]
pub struct ExistingNode {
    /// Node name, or the NodeClaim name while no node exists.
    pub name: String,
    /// A registered node's labels ([`NodeLabels::Known`]) or an in-flight NodeClaim's
    /// requirements ([`NodeLabels::Pending`]).
    pub labels: NodeLabels,
    /// Taints pods must tolerate.
    pub taints: Vec<Taint>,
    /// Allocatable minus the requests of pods bound (or about to be bound) there.
    pub available: Resources,
    /// Initialized nodes are tried first.
    pub initialized: bool,
    /// The volumes its pods (bound or about to be) attach, per CSI driver.
    pub volumes: Volumes,
    /// How many volumes it may attach per CSI driver (drivers not listed are unlimited): a
    /// node's CSINode, an in-flight NodeClaim's instance types ([`super::attach`]).
    pub attach_limits: AttachLimits,
}

/// A pod already running on an existing node: it counts for topology and holds host ports.
#[derive(Clone, Debug)]
pub struct BoundPod {
    /// The pod, compiled: its labels count for topology, its host ports stay taken.
    pub pod: PodInfo,
    /// The node it is bound to (`spec.nodeName`), one of [`Input::existing`].
    pub node: String,
}

/// Everything one solve needs.
#[derive(Clone, Debug, Default)]
pub struct Input {
    /// Pods to place (order does not matter; the solver sorts).
    pub pods: Vec<PodInfo>,
    /// Existing nodes and in-flight NodeClaims.
    pub existing: Vec<ExistingNode>,
    /// Pods running on existing nodes.
    pub bound_pods: Vec<BoundPod>,
    /// The NodePools that may launch (Ready, not deleting, not static), as templates; tried
    /// heaviest weight first.
    pub nodepools: Vec<NodePoolTemplate>,
    /// Label keys a pod may require without the pool defining them (well-known labels).
    pub well_known_labels: Vec<String>,
    /// Namespaces and their labels (for affinity terms' namespace selectors).
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Run the cost re-pack after first fit ([`super::repack`]). `karpenter simulate` and the live
    /// provisioner do: the plan's pods are nominated to their nodes (plan = binding,
    /// [`crate::provisioning::nomination`]), so tightly packed NodeClaims get the pods they were
    /// packed for. Consolidation's what-if simulations do not.
    pub repack: bool,
    /// Whether a `minValues` the fitting instance types cannot meet stops a new NodeClaim
    /// (`Strict`) or is lowered to what they offer (`BestEffort`), as upstream's
    /// `MIN_VALUES_POLICY` decides.
    pub min_values_policy: MinValuesPolicy,
}

/// A NodeClaim to create.
#[derive(Clone, Debug)]
pub struct NewClaim {
    /// The NodePool it belongs to.
    pub nodepool: String,
    /// Requirements including `node.kubernetes.io/instance-type In [options]` and the capacity
    /// types those options offer.
    pub requirements: Requirements,
    /// Instance-type options, cheapest available compatible offering first: the ones a user
    /// would accept ([`super::choices::accepted`]), at most
    /// [`super::choices::MAX_INSTANCE_TYPES`] unless `minValues` needs more.
    pub instance_types: Vec<Arc<InstanceType>>,
    /// Every instance type that fits, cheapest first, before that choice: consolidation chooses
    /// again once it has fixed a replacement's capacity type.
    pub fitting: Vec<Arc<InstanceType>>,
    /// Requests of its pods plus daemon overhead.
    pub requests: Resources,
    /// Pods planned onto it.
    pub pods: Vec<PodKey>,
    /// Some `minValues` in `requirements` was lowered under [`MinValuesPolicy::BestEffort`]
    /// (the NodeClaim's `karpenter.sh/nodeclaim-min-values-relaxed` annotation).
    pub min_values_relaxed: bool,
}

impl NewClaim {
    /// Price of the cheapest compatible offering, USD/hour.
    pub fn cheapest_price(&self) -> Option<f64> {
        self.instance_types
            .first()
            .and_then(|it| it.cheapest_offering(&self.requirements))
            .map(|o| o.price)
    }
}

/// Why one NodePool cannot take a pod.
#[derive(Clone, Debug, PartialEq)]
pub enum Rejection {
    /// A template taint the pod does not tolerate.
    Taint(String),
    /// Pod and pool requirements conflict.
    Requirements(Incompatible),
    /// A topology spread or pod (anti-)affinity constraint leaves no domain.
    Topology(TopologyError),
    /// No instance type satisfies both requirements and resources.
    NoInstanceType {
        /// Pod requests plus daemon overhead.
        requests: Resources,
        /// Pod and NodePool requirements together, as text joined by `, `.
        requirements: String,
        /// Which check eliminated the last candidates.
        detail: &'static str,
    },
    /// The pool's limits leave no room: what is left of each limited resource, as quantities,
    /// e.g. `remaining {cpu: 3500m, memory: 8Gi, nodes: 0}`.
    Limits(String),
    /// No instance type that fits can attach the pod's volumes: the largest limit among them.
    AttachLimit(LimitReached),
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Taint(t) => write!(f, "did not tolerate taint {t}"),
            Rejection::Requirements(i) => write!(f, "{i}"),
            Rejection::Topology(t) => write!(f, "{t}"),
            Rejection::NoInstanceType {
                requests,
                requirements,
                detail,
            } => write!(
                f,
                "no instance type satisfied resources {requests} and requirements {requirements} ({detail})"
            ),
            Rejection::Limits(l) => write!(
                f,
                "all available instance types exceed limits for nodepool: {l}"
            ),
            Rejection::AttachLimit(l) => {
                write!(f, "no instance type can attach the pod's volumes: {l}")
            }
        }
    }
}

/// Why a pod could not be placed at all.
#[derive(Clone, Debug, PartialEq)]
pub struct PodError {
    /// The pod that fits nowhere.
    pub pod: PodKey,
    /// One entry per NodePool tried (empty when there are no ready NodePools).
    pub rejections: Vec<(String, Rejection)>,
}

impl fmt::Display for PodError {
    /// Upstream-style: `incompatible with nodepool "a", <why>; incompatible with nodepool "b", ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rejections.is_empty() {
            return write!(f, "{NO_READY_NODEPOOL}");
        }
        let parts: Vec<String> = self
            .rejections
            .iter()
            .map(|(pool, r)| format!("incompatible with nodepool \"{pool}\", {r}"))
            .collect();
        write!(f, "{}", parts.join("; "))
    }
}

/// What the solve decided.
#[derive(Clone, Debug, Default)]
pub struct Output {
    /// NodeClaims to create, each with its pods and instance-type options (cheapest first).
    pub new_claims: Vec<NewClaim>,
    /// Pods that fit existing capacity, by the existing node's name.
    pub existing: BTreeMap<String, Vec<PodKey>>,
    /// Pods that fit nowhere, with the reason per NodePool.
    pub errors: Vec<PodError>,
}

/// Whether a node of this capacity fits what the limits still allow: every limited resource
/// (and one more node, when `nodes` is limited).
pub fn within_limits(capacity: &Resources, remaining: &BTreeMap<String, i64>) -> bool {
    remaining.iter().all(|(name, left)| {
        if name == LIMIT_NODES {
            *left >= 1
        } else {
            capacity.get(name) <= *left
        }
    })
}

/// A re-pack shape's identity: dense requests, class, hostname repellers.
type ShapeKey = (Vec<i64>, Option<usize>, Vec<usize>);

struct OpenClaim {
    pool: usize,
    requirements: Requirements,
    requests: Resources,
    /// Indexes into the pool's instance types that still fit.
    options: Vec<usize>,
    /// Component-wise max allocatable over `options` (quick reject).
    max_allocatable: Resources,
    /// Component-wise min allocatable over `options`: requests within it fit every option, so
    /// adding a pod that brings no requirement and no volume leaves the options as they are.
    min_allocatable: Resources,
    /// Indexes into the input pods.
    pods: Vec<usize>,
    host_ports: Vec<HostPort>,
    /// The volumes its pods attach, per CSI driver.
    volumes: Volumes,
    /// A `minValues` of `requirements` was lowered ([`MinValuesPolicy::BestEffort`]).
    min_values_relaxed: bool,
}

struct Pool<'a> {
    t: &'a NodePoolTemplate,
    /// Instance types compatible with the pool's own requirements.
    base: Vec<usize>,
    remaining: BTreeMap<String, i64>,
}

struct Existing {
    available: Resources,
    host_ports: Vec<HostPort>,
    volumes: Volumes,
}

struct Solver<'a> {
    input: &'a Input,
    pools: Vec<Pool<'a>>,
    order: Vec<usize>,
    existing: Vec<Existing>,
    claims: Vec<OpenClaim>,
    topology: Topology,
    well_known: HashSet<&'a str>,
    prefer_no_schedule: bool,
    /// Per NodePool and requirement set: which of the pool's instance types are compatible.
    compat: HashMap<(usize, Requirements), Rc<[bool]>>,
    out: Output,
}

/// Run one scheduling simulation.
pub fn solve(input: &Input) -> Output {
    let mut templates: Vec<&NodePoolTemplate> = input.nodepools.iter().collect();
    templates.sort_by(|a, b| b.weight.cmp(&a.weight).then(b.name.cmp(&a.name)));
    let pools: Vec<Pool> = templates
        .into_iter()
        .map(|t| Pool {
            base: (0..t.instance_types.len())
                .filter(|&i| t.instance_types[i].compatible(&t.requirements))
                .collect(),
            remaining: t.remaining.clone(),
            t,
        })
        .collect();
    let mut order: Vec<usize> = (0..input.existing.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&input.existing[a], &input.existing[b]);
        y.initialized.cmp(&x.initialized).then(x.name.cmp(&y.name))
    });
    let node_index: HashMap<&str, usize> = input
        .existing
        .iter()
        .enumerate()
        .map(|(i, e)| (e.name.as_str(), i))
        .collect();
    let mut existing: Vec<Existing> = input
        .existing
        .iter()
        .map(|e| Existing {
            available: e.available.clone(),
            host_ports: Vec::new(),
            volumes: e.volumes.clone(),
        })
        .collect();
    for b in &input.bound_pods {
        if let Some(&i) = node_index.get(b.node.as_str()) {
            existing[i]
                .host_ports
                .extend(b.pod.constraints.host_ports.iter().cloned());
        }
    }
    let topology = build_topology(input, &pools, &node_index);
    let mut solver = Solver {
        input,
        prefer_no_schedule: pools
            .iter()
            .any(|p| p.t.taints.iter().any(|t| t.effect == "PreferNoSchedule")),
        pools,
        order,
        existing,
        claims: Vec::new(),
        topology,
        well_known: input.well_known_labels.iter().map(String::as_str).collect(),
        compat: HashMap::new(),
        out: Output::default(),
    };
    solver.run();
    if input.repack {
        solver.repack(&mut Prices::new(ReservedPricing::Repack));
    }
    let Solver {
        claims,
        pools,
        mut out,
        ..
    } = solver;
    let mut ledger = Ledger::of(&pools);
    let mut prices = Prices::new(ReservedPricing::Launch);
    for (id, room) in &ledger.0 {
        if *room <= 0 {
            prices.mark_full(id);
        }
    }
    for c in claims {
        match finish(c, &pools, &input.pods, &mut prices) {
            Ok(claim) => {
                let taken = claim
                    .instance_types
                    .first()
                    .and_then(|t| prices.launch_offering(t, &claim.requirements))
                    .and_then(|o| o.reservation_id.clone());
                if let Some(id) = taken
                    && ledger.take(&id)
                {
                    prices.mark_full(&id);
                }
                out.new_claims.push(claim);
            }
            Err(errors) => out.errors.extend(errors),
        }
    }
    out
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

/// Domains of every topology key in play: values from the pools' requirements and instance
/// types (with the pool's taints) and from existing nodes' labels.
fn build_topology(input: &Input, pools: &[Pool], node_index: &HashMap<&str, usize>) -> Topology {
    let mut keys: BTreeSet<&str> = BTreeSet::new();
    for p in input
        .pods
        .iter()
        .chain(input.bound_pods.iter().map(|b| &b.pod))
    {
        let c = &p.constraints;
        keys.extend(c.spread.iter().map(|s| s.key.as_str()));
        for t in c
            .affinity
            .iter()
            .chain(&c.anti_affinity)
            .chain(&c.preferred_affinity)
            .chain(&c.preferred_anti_affinity)
        {
            keys.insert(t.key.as_str());
        }
    }
    keys.remove(HOSTNAME_LABEL);
    let mut universe: Universe = BTreeMap::new();
    for key in keys {
        let mut values: BTreeSet<(String, Vec<String>)> = BTreeSet::new();
        let mut entries = Vec::new();
        let mut push = |v: &str, taints: &[Taint]| {
            let id = (
                v.to_string(),
                taints.iter().map(taint_string).collect::<Vec<_>>(),
            );
            if values.insert(id) {
                entries.push((v.to_string(), taints.to_vec()));
            }
        };
        for pool in pools {
            let pool_req = pool.t.requirements.get(key);
            let mut seen: BTreeSet<&str> = BTreeSet::new();
            for &i in &pool.base {
                if let Some(vals) = pool.t.instance_types[i]
                    .requirements
                    .get(key)
                    .and_then(|r| r.values())
                {
                    for v in vals {
                        if pool_req.is_none_or(|r| r.has(v)) {
                            seen.insert(v);
                        }
                    }
                }
            }
            if let Some(vals) = pool_req.and_then(|r| r.values()) {
                seen.extend(vals.iter().map(String::as_str));
            }
            for v in seen {
                push(v, &pool.t.taints);
            }
        }
        for e in &input.existing {
            if let NodeLabels::Known(labels) = &e.labels
                && let Some(v) = labels.get(key)
            {
                push(v, &e.taints);
            }
        }
        universe.insert(key.to_string(), entries);
    }
    let pods: Vec<PodRef> = input.pods.iter().map(pod_ref).collect();
    let existing: Vec<(PodRef, Target)> = input
        .bound_pods
        .iter()
        .filter_map(|b| {
            let &i = node_index.get(b.node.as_str())?;
            let e = &input.existing[i];
            let target = match &e.labels {
                NodeLabels::Known(labels) => Target::Node {
                    id: i,
                    labels,
                    taints: &e.taints,
                },
                NodeLabels::Pending(reqs) => Target::Claim {
                    id: i,
                    requirements: reqs,
                    taints: &e.taints,
                },
            };
            Some((pod_ref(&b.pod), target))
        })
        .collect();
    Topology::new(
        Mode::Provisioning,
        &pods,
        &existing,
        universe,
        &input.namespaces,
        input.existing.len(),
    )
}

/// The pod's tolerations at a relaxation level (plus `PreferNoSchedule` once relaxed).
fn tolerations(pod: &PodInfo, r: &Relaxation) -> Vec<Toleration> {
    let mut t = pod.tolerations.clone();
    if r.tolerate_prefer_no_schedule {
        t.push(Toleration {
            operator: Some("Exists".into()),
            effect: Some("PreferNoSchedule".into()),
            ..Toleration::default()
        });
    }
    t
}

fn ports_conflict(used: &[HostPort], wanted: &[HostPort]) -> bool {
    wanted.iter().any(|w| used.iter().any(|u| u.conflicts(w)))
}

/// How many distinct values of the requirement's key, among those it allows, the options
/// (indexes into `types`) have: type names for `node.kubernetes.io/instance-type`, else the
/// values of the types' requirements (their labels, and every zone and capacity type their
/// offerings have), as upstream's `InstanceTypes.SatisfiesMinValues` counts them.
fn distinct_values(r: &Requirement, types: &[Arc<InstanceType>], options: &[usize]) -> usize {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for &i in options {
        let it = &types[i];
        if r.key == INSTANCE_TYPE_LABEL {
            seen.insert(it.name.as_str());
        } else if let Some(values) = it.requirements.get(&r.key).and_then(|t| t.values()) {
            seen.extend(values.iter().map(String::as_str).filter(|v| r.has(v)));
        }
    }
    seen.len()
}

/// Whether the instance types keep at least `minValues` distinct values for every requirement
/// that sets it.
fn min_values_ok(reqs: &Requirements, types: &[Arc<InstanceType>], options: &[usize]) -> bool {
    reqs.iter()
        .filter(|r| r.min_values.is_some())
        .all(|r| distinct_values(r, types, options) >= r.min_values.unwrap_or(0))
}

/// Lower every `minValues` the options cannot meet to the number of distinct values they offer
/// (none left: `minValues` dropped, since the API's minimum is 1), as upstream's BestEffort
/// policy does for a new NodeClaim (`scheduling/nodeclaim.go`, `CanAdd` with relaxation).
/// Returns whether any was lowered.
fn relax_min_values(
    reqs: &mut Requirements,
    types: &[Arc<InstanceType>],
    options: &[usize],
) -> bool {
    let short: Vec<(String, usize)> = reqs
        .iter()
        .filter_map(|r| {
            let have = distinct_values(r, types, options);
            (have < r.min_values?).then(|| (r.key.clone(), have))
        })
        .collect();
    for (key, have) in &short {
        if let Some(mut r) = reqs.remove(key) {
            r.min_values = (*have > 0).then_some(*have);
            reqs.add(r);
        }
    }
    !short.is_empty()
}

impl Solver<'_> {
    /// Which of a pool's instance types can serve `requirements` (memoized: claims share a few
    /// requirement sets).
    fn compatible_types(&mut self, pool: usize, requirements: &Requirements) -> Rc<[bool]> {
        let key = (pool, requirements.clone());
        if let Some(c) = self.compat.get(&key) {
            return Rc::clone(c);
        }
        let p = &self.pools[pool];
        let mut c = vec![false; p.t.instance_types.len()];
        for &o in &p.base {
            c[o] = p.t.instance_types[o].compatible(requirements);
        }
        let c: Rc<[bool]> = c.into();
        self.compat.insert(key, Rc::clone(&c));
        c
    }

    fn run(&mut self) {
        let mut queue: VecDeque<(usize, Relaxation)> = {
            let mut idx: Vec<usize> = (0..self.input.pods.len()).collect();
            idx.sort_by(|&a, &b| queue_order(&self.input.pods[a], &self.input.pods[b]));
            idx.into_iter()
                .map(|i| (i, Relaxation::default()))
                .collect()
        };
        // Upstream's queue: a failed pod is retried after relaxing, or after other pods made
        // progress since its last failure; otherwise it fails for good.
        let mut placed = 0usize;
        let mut failed_at: HashMap<usize, usize> = HashMap::new();
        while let Some((i, relax)) = queue.pop_front() {
            match self.place(i, &relax) {
                Ok(()) => placed += 1,
                Err(rejections) => {
                    let pod = &self.input.pods[i];
                    if let Some(next) = relax.next(
                        pod.requirement_terms.len(),
                        &pod.constraints,
                        self.prefer_no_schedule,
                    ) {
                        queue.push_back((i, next));
                    } else if failed_at.get(&i) != Some(&placed) && !queue.is_empty() {
                        failed_at.insert(i, placed);
                        queue.push_back((i, relax));
                    } else {
                        self.out.errors.push(PodError {
                            pod: pod.key.clone(),
                            rejections,
                        });
                    }
                }
            }
        }
    }

    fn place(&mut self, i: usize, relax: &Relaxation) -> Result<(), Vec<(String, Rejection)>> {
        let input = self.input;
        let pod = &input.pods[i];
        let reqs = node_requirements(&pod.requirement_terms, &pod.constraints, relax);
        let tols = tolerations(pod, relax);
        if self.place_existing(i, pod, relax, &reqs, &tols)
            || self.place_open_claim(i, pod, relax, &reqs, &tols)
        {
            return Ok(());
        }
        let mut rejections = Vec::new();
        for pi in 0..self.pools.len() {
            match self.open_claim(i, pi, pod, relax, &reqs, &tols) {
                Ok(claim) => {
                    let id = input.existing.len() + self.claims.len();
                    let taints = &self.pools[claim.pool].t.taints;
                    let target = Target::Claim {
                        id,
                        requirements: &claim.requirements,
                        taints,
                    };
                    self.topology.record(i, &target);
                    self.claims.push(claim);
                    return Ok(());
                }
                Err(r) => rejections.push((self.pools[pi].t.name.clone(), r)),
            }
        }
        Err(rejections)
    }

    fn place_existing(
        &mut self,
        i: usize,
        pod: &PodInfo,
        relax: &Relaxation,
        reqs: &Requirements,
        tols: &[Toleration],
    ) -> bool {
        let involves = self.topology.involves(i);
        for &n in &self.order {
            let node = &self.input.existing[n];
            let state = &self.existing[n];
            if !pod.requests.fits_in(&state.available)
                || (involves && self.topology.hostname_blocked(i, relax, &pod_ref(pod), n))
                || untolerated(&node.taints, tols).is_some()
            {
                continue;
            }
            let target = match &node.labels {
                NodeLabels::Known(labels) => {
                    if reqs.matches_labels(labels).is_err() {
                        continue;
                    }
                    Target::Node {
                        id: n,
                        labels,
                        taints: &node.taints,
                    }
                }
                NodeLabels::Pending(claim_reqs) => {
                    if claim_reqs
                        .compatible(reqs, |k| self.well_known.contains(k))
                        .is_err()
                    {
                        continue;
                    }
                    Target::Claim {
                        id: n,
                        requirements: claim_reqs,
                        taints: &node.taints,
                    }
                }
            };
            if ports_conflict(&state.host_ports, &pod.constraints.host_ports)
                || (!pod.volumes.is_empty()
                    && state
                        .volumes
                        .exceeds(&pod.volumes, &node.attach_limits)
                        .is_some())
            {
                continue;
            }
            if involves
                && self
                    .topology
                    .requirements(i, &pod_ref(pod), relax, reqs, &target)
                    .is_err()
            {
                continue;
            }
            self.topology.record(i, &target);
            let state = &mut self.existing[n];
            state.available.sub(&pod.requests);
            state
                .host_ports
                .extend(pod.constraints.host_ports.iter().cloned());
            state.volumes.add(&pod.volumes);
            self.out
                .existing
                .entry(node.name.clone())
                .or_default()
                .push(pod.key.clone());
            return true;
        }
        false
    }

    fn place_open_claim(
        &mut self,
        i: usize,
        pod: &PodInfo,
        relax: &Relaxation,
        reqs: &Requirements,
        tols: &[Toleration],
    ) -> bool {
        let involves = self.topology.involves(i);
        let base_id = self.input.existing.len();
        for ci in 0..self.claims.len() {
            let claim = &self.claims[ci];
            if !claim
                .requests
                .fits_in_with(&pod.requests, &claim.max_allocatable)
                || (involves
                    && self
                        .topology
                        .hostname_blocked(i, relax, &pod_ref(pod), base_id + ci))
            {
                continue;
            }
            let total = claim.requests.plus(&pod.requests);
            let pool = self.pools[claim.pool].t;
            if untolerated(&pool.taints, tols).is_some()
                || ports_conflict(&claim.host_ports, &pod.constraints.host_ports)
            {
                continue;
            }
            if !reqs.is_empty()
                && claim
                    .requirements
                    .compatible(reqs, |k| self.well_known.contains(k))
                    .is_err()
            {
                continue;
            }
            let extra = if involves {
                let target = Target::Claim {
                    id: base_id + ci,
                    requirements: &claim.requirements,
                    taints: &pool.taints,
                };
                match self
                    .topology
                    .requirements(i, &pod_ref(pod), relax, reqs, &target)
                {
                    Ok(extra) => extra,
                    Err(_) => continue,
                }
            } else {
                Requirements::new()
            };
            let merged = if reqs.is_empty() && extra.is_empty() {
                None
            } else {
                let mut m = claim.requirements.clone();
                m.add_all(reqs);
                m.add_all(&extra);
                (m != claim.requirements).then_some(m)
            };
            let pool_index = claim.pool;
            let volumes = (!pod.volumes.is_empty()).then(|| {
                let mut v = claim.volumes.clone();
                v.add(&pod.volumes);
                v
            });
            let compat = merged
                .as_ref()
                .map(|m| self.compatible_types(pool_index, m));
            let claim = &self.claims[ci];
            // Nothing narrows the options when every one has room and the pod brings no
            // requirement and no volume (most pods on most NodeClaims).
            let unchanged =
                compat.is_none() && volumes.is_none() && total.fits_in(&claim.min_allocatable);
            let options = if unchanged {
                None
            } else {
                let check = merged.as_ref().unwrap_or(&claim.requirements);
                let options: Vec<usize> = claim
                    .options
                    .iter()
                    .copied()
                    .filter(|&o| {
                        let it = &pool.instance_types[o];
                        total.fits_in(&it.allocatable)
                            && compat.as_ref().is_none_or(|c| c[o])
                            && volumes
                                .as_ref()
                                .is_none_or(|v| type_exceeded(it, v).is_none())
                    })
                    .collect();
                if options.is_empty() || !min_values_ok(check, &pool.instance_types, &options) {
                    continue;
                }
                Some(options)
            };
            let claim = &mut self.claims[ci];
            // The options only ever shrink: the room bounds change only when some went.
            if let Some(options) = options
                && options.len() != claim.options.len()
            {
                claim.max_allocatable = max_allocatable(pool, &options);
                claim.min_allocatable = min_allocatable(pool, &options);
                claim.options = options;
            }
            claim.requests = total;
            if let Some(m) = merged {
                claim.requirements = m;
            }
            if let Some(v) = volumes {
                claim.volumes = v;
            }
            claim.pods.push(i);
            claim
                .host_ports
                .extend(pod.constraints.host_ports.iter().cloned());
            let target = Target::Claim {
                id: base_id + ci,
                requirements: &claim.requirements,
                taints: &pool.taints,
            };
            self.topology.record(i, &target);
            return true;
        }
        false
    }

    fn open_claim(
        &mut self,
        i: usize,
        pi: usize,
        pod: &PodInfo,
        relax: &Relaxation,
        reqs: &Requirements,
        tols: &[Toleration],
    ) -> Result<OpenClaim, Rejection> {
        let pool = &self.pools[pi];
        let t = pool.t;
        if let Some(taint) = untolerated(&t.taints, tols) {
            return Err(Rejection::Taint(taint_string(taint)));
        }
        t.requirements
            .compatible(reqs, |k| self.well_known.contains(k))
            .map_err(Rejection::Requirements)?;
        let mut requirements = t.requirements.clone();
        requirements.add_all(reqs);
        if self.topology.involves(i) {
            let id = self.input.existing.len() + self.claims.len();
            let target = Target::Claim {
                id,
                requirements: &requirements,
                taints: &t.taints,
            };
            let extra = self
                .topology
                .requirements(i, &pod_ref(pod), relax, reqs, &target)
                .map_err(Rejection::Topology)?;
            requirements.add_all(&extra);
        }
        let compatible: Vec<usize> = if reqs.is_empty() && !self.topology.involves(i) {
            pool.base.clone()
        } else {
            let compat = self.compatible_types(pi, &requirements);
            self.pools[pi]
                .base
                .iter()
                .copied()
                .filter(|&o| compat[o])
                .collect()
        };
        let requests = pod.requests.plus(&t.daemon_overhead);
        let no_type = |detail| Rejection::NoInstanceType {
            requests: requests.clone(),
            requirements: requirements.to_string(),
            detail,
        };
        if compatible.is_empty() {
            return Err(no_type(
                "no instance type met the scheduling requirements or had a required offering",
            ));
        }
        let fitting: Vec<usize> = compatible
            .iter()
            .copied()
            .filter(|&o| requests.fits_in(&t.instance_types[o].allocatable))
            .collect();
        if fitting.is_empty() {
            return Err(no_type("no instance type has enough resources"));
        }
        let fitting = attachable(t, fitting, &pod.volumes)?;
        let pool = &mut self.pools[pi];
        let options: Vec<usize> = fitting
            .into_iter()
            .filter(|&o| within_limits(&t.instance_types[o].capacity, &pool.remaining))
            .collect();
        if options.is_empty() {
            let limits: Vec<String> = pool
                .remaining
                .iter()
                .map(|(k, v)| format!("{k}: {}", format_quantity(k, *v)))
                .collect();
            return Err(Rejection::Limits(format!(
                "remaining {{{}}}",
                limits.join(", ")
            )));
        }
        let mut min_values_relaxed = false;
        if !min_values_ok(&requirements, &t.instance_types, &options) {
            if self.input.min_values_policy == MinValuesPolicy::Strict {
                return Err(no_type("minValues requirement is not met"));
            }
            min_values_relaxed = relax_min_values(&mut requirements, &t.instance_types, &options);
        }
        // Reserve the largest option's capacity against the limits, as upstream does, so that
        // whichever option launches the pool stays within its limits.
        reserve(&mut pool.remaining, t, &options, -1);
        Ok(OpenClaim {
            pool: pi,
            max_allocatable: max_allocatable(t, &options),
            min_allocatable: min_allocatable(t, &options),
            requirements,
            requests,
            options,
            pods: vec![i],
            host_ports: pod.constraints.host_ports.clone(),
            volumes: pod.volumes.clone(),
            min_values_relaxed,
        })
    }
}

impl Solver<'_> {
    /// The cost re-pack of each NodePool's new NodeClaims ([`super::repack`]), kept for a pool
    /// only when it is cheaper and stays within the pool's limits and minValues.
    fn repack(&mut self, prices: &mut Prices) {
        for pi in 0..self.pools.len() {
            let Some((claims, remaining)) = self.repack_pool(pi, prices) else {
                continue;
            };
            let mut claims = claims.into_iter();
            let old = std::mem::take(&mut self.claims);
            // The pool's claims are replaced where its first one was, so output order stays
            // grouped as before.
            let mut inserted = false;
            for c in old {
                if c.pool != pi {
                    self.claims.push(c);
                } else if !inserted {
                    inserted = true;
                    self.claims.extend(claims.by_ref());
                }
            }
            self.pools[pi].remaining = remaining;
        }
    }

    /// The re-packed claims of pool `pi` and the limits they leave, or `None` to keep the
    /// first-fit claims.
    fn repack_pool(
        &mut self,
        pi: usize,
        prices: &mut Prices,
    ) -> Option<(Vec<OpenClaim>, BTreeMap<String, i64>)> {
        use super::repack::{Bin, Candidate, Dims, Shape, non_dominated, pack, worths};
        let input = self.input;
        let t = self.pools[pi].t;
        let mine: Vec<usize> = (0..self.claims.len())
            .filter(|&c| self.claims[c].pool == pi)
            .collect();
        if mine.is_empty() {
            return None;
        }
        let dims = Dims::of(
            mine.iter()
                .map(|&c| &self.claims[c].requests)
                .chain([&t.daemon_overhead]),
        );
        let overhead = dims.dense(&t.daemon_overhead);
        // Classes: distinct claim requirements, the pool's own first (for unrestricted pods).
        let mut class_reqs: Vec<Requirements> = vec![t.requirements.clone()];
        let mut class_of = |reqs: &Requirements| match class_reqs.iter().position(|r| r == reqs) {
            Some(c) => c,
            None => {
                class_reqs.push(reqs.clone());
                class_reqs.len() - 1
            }
        };
        let claim_class: Vec<usize> = mine
            .iter()
            .map(|&c| class_of(&self.claims[c].requirements))
            .collect();
        let mut bins: Vec<Bin> = Vec::new();
        let mut shapes: Vec<Shape> = Vec::new();
        let mut shape_index: HashMap<ShapeKey, usize> = HashMap::new();
        let mut any_movable = false;
        for (k, &c) in mine.iter().enumerate() {
            let mut fixed = Bin {
                class: claim_class[k],
                used: vec![0; dims.len()],
                repels: Vec::new(),
                pods: Vec::new(),
            };
            for &i in &self.claims[c].pods {
                let pod = &input.pods[i];
                let request = dims.dense(&pod.requests);
                // Pods with volumes stay where first fit put them: moving them would need the
                // attach limits in the packing.
                let mobility = if pod.constraints.host_ports.is_empty() && pod.volumes.is_empty() {
                    self.topology.mobility(i)
                } else {
                    None
                };
                match mobility {
                    None => {
                        for (u, r) in fixed.used.iter_mut().zip(&request) {
                            *u += r;
                        }
                        fixed.repels.extend(self.topology.hostname_repels(i));
                        fixed.pods.push(i);
                    }
                    Some(pinned) => {
                        any_movable = true;
                        let unrestricted = !pinned
                            && pod.requirement_terms.iter().all(Requirements::is_empty)
                            && pod.constraints.preferred_node.is_empty();
                        let class = (!unrestricted).then_some(claim_class[k]);
                        let repellers = self.topology.hostname_repellers(i);
                        let key = (request, class, repellers);
                        let s = match shape_index.get(&key) {
                            Some(&s) => s,
                            None => {
                                shapes.push(Shape {
                                    request: key.0.clone(),
                                    worth: 0.0,
                                    class,
                                    repellers: key.2.clone(),
                                    pods: Vec::new(),
                                });
                                shape_index.insert(key, shapes.len() - 1);
                                shapes.len() - 1
                            }
                        };
                        shapes[s].pods.push(i);
                    }
                }
            }
            if !fixed.pods.is_empty() {
                fixed.repels.sort_unstable();
                fixed.repels.dedup();
                bins.push(fixed);
            }
        }
        if !any_movable {
            return None;
        }
        // Candidate types per class, cheapest first.
        let mut classes: Vec<Vec<Candidate>> = Vec::with_capacity(class_reqs.len());
        for reqs in &class_reqs {
            let compat = self.compatible_types(pi, reqs);
            let offers = prices.get(pi, t, reqs);
            let candidates: Vec<Candidate> = self.pools[pi]
                .base
                .iter()
                .filter(|&&o| compat[o])
                .filter_map(|&o| {
                    let price = offers.price[o]?;
                    let room: Vec<i64> = dims
                        .dense(&t.instance_types[o].allocatable)
                        .iter()
                        .zip(&overhead)
                        .map(|(a, h)| a - h)
                        .collect();
                    room.iter().all(|r| *r >= 0).then_some(Candidate {
                        index: o,
                        price,
                        room,
                        order: Vec::new(),
                    })
                })
                .collect();
            let exotic = |o: usize| offers.summary[o].exotic;
            classes.push(non_dominated(launchable(candidates, exotic, reqs)));
        }
        let work = shapes.len() * classes.iter().map(Vec::len).sum::<usize>();
        if work > super::repack::MAX_WORK {
            return None;
        }
        // Worth: against the pool's own candidates, counting every pod of the pool's claims
        // (fixed ones too: they use the same capacity).
        let mut counted: BTreeMap<&[i64], usize> = BTreeMap::new();
        let fixed_requests: Vec<Vec<i64>> = bins
            .iter()
            .flat_map(|b| b.pods.iter().map(|&i| dims.dense(&input.pods[i].requests)))
            .collect();
        for r in &fixed_requests {
            *counted.entry(r.as_slice()).or_default() += 1;
        }
        for s in &shapes {
            *counted.entry(s.request.as_slice()).or_default() += s.pods.len();
        }
        let counted: Vec<(&[i64], usize)> = counted.into_iter().collect();
        let worth = worths(&dims, &classes[0], &counted)?;
        let by_request: HashMap<&[i64], f64> = counted.iter().map(|(r, _)| *r).zip(worth).collect();
        let worth_of: Vec<f64> = shapes
            .iter()
            .map(|s| by_request.get(s.request.as_slice()).copied().unwrap_or(0.0))
            .collect();
        for (s, w) in shapes.iter_mut().zip(worth_of) {
            s.worth = w;
        }
        for s in &mut shapes {
            // Pods popped from the end: keep the first-fit order within a shape.
            s.pods.reverse();
        }
        let bins = pack(bins, &mut shapes, classes, 0, dims.len())?;
        // Costs as launched: each claim at the cheapest option it would list.
        let mut old_cost = 0.0;
        for &c in &mine {
            let claim = &self.claims[c];
            old_cost += launch_price(pi, t, &claim.requirements, &claim.options, prices)?;
        }
        // Limits: give back what the first-fit claims reserved, then reserve for the new ones.
        let mut remaining = self.pools[pi].remaining.clone();
        for &c in &mine {
            reserve(&mut remaining, t, &self.claims[c].options, 1);
        }
        let mut claims = Vec::with_capacity(bins.len());
        let mut new_cost = 0.0;
        for b in bins {
            let mut requirements = class_reqs[b.class].clone();
            let mut requests = t.daemon_overhead.clone();
            let mut host_ports = Vec::new();
            let mut volumes = Volumes::default();
            for &i in &b.pods {
                requests.add(&input.pods[i].requests);
                host_ports.extend(input.pods[i].constraints.host_ports.iter().cloned());
                volumes.add(&input.pods[i].volumes);
            }
            let compat = self.compatible_types(pi, &requirements);
            let options: Vec<usize> = self.pools[pi]
                .base
                .iter()
                .copied()
                .filter(|&o| {
                    let it = &t.instance_types[o];
                    compat[o]
                        && requests.fits_in(&it.allocatable)
                        && within_limits(&it.capacity, &remaining)
                        && type_exceeded(it, &volumes).is_none()
                })
                .collect();
            if options.is_empty() {
                return None;
            }
            let mut min_values_relaxed = false;
            if !min_values_ok(&requirements, &t.instance_types, &options) {
                if input.min_values_policy == MinValuesPolicy::Strict {
                    return None;
                }
                min_values_relaxed =
                    relax_min_values(&mut requirements, &t.instance_types, &options);
            }
            new_cost += launch_price(pi, t, &requirements, &options, prices)?;
            if new_cost >= old_cost - 1e-9 {
                return None;
            }
            reserve(&mut remaining, t, &options, -1);
            claims.push(OpenClaim {
                pool: pi,
                max_allocatable: max_allocatable(t, &options),
                min_allocatable: min_allocatable(t, &options),
                requirements,
                requests,
                options,
                pods: b.pods,
                host_ports,
                volumes,
                min_values_relaxed,
            });
        }
        Some((claims, remaining))
    }
}

/// The `fitting` options (indexes into the pool's instance types) that can attach `volumes`.
///
/// Errors: [`Rejection::AttachLimit`] when none can, naming the largest limit reached.
fn attachable(
    pool: &NodePoolTemplate,
    fitting: Vec<usize>,
    volumes: &Volumes,
) -> Result<Vec<usize>, Rejection> {
    if volumes.is_empty() {
        return Ok(fitting);
    }
    let mut reached: Option<LimitReached> = None;
    let mut kept = Vec::with_capacity(fitting.len());
    for o in fitting {
        match type_exceeded(&pool.instance_types[o], volumes) {
            None => kept.push(o),
            Some(l) => {
                if reached.as_ref().is_none_or(|r| l.limit > r.limit) {
                    reached = Some(l);
                }
            }
        }
    }
    match reached {
        Some(l) if kept.is_empty() => Err(Rejection::AttachLimit(l)),
        _ => Ok(kept),
    }
}

/// Reserve (`sign` -1) or give back (+1) one node and the largest option's capacity against a
/// pool's remaining limits, as upstream does, so whichever option launches stays within them.
fn reserve(
    remaining: &mut BTreeMap<String, i64>,
    pool: &NodePoolTemplate,
    options: &[usize],
    sign: i64,
) {
    if remaining.is_empty() {
        return;
    }
    let largest = options.iter().fold(Resources::default(), |acc, &o| {
        acc.max(&pool.instance_types[o].capacity)
    });
    for (name, left) in remaining.iter_mut() {
        let amount = if name == LIMIT_NODES {
            1
        } else {
            largest.get(name)
        };
        *left += sign * amount;
    }
}

fn max_allocatable(pool: &NodePoolTemplate, options: &[usize]) -> Resources {
    let mut max = Resources::default();
    for &i in options {
        max.max_with(&pool.instance_types[i].allocatable);
    }
    max
}

/// Component-wise min allocatable over `options` (an extended resource some option lacks is
/// zero); all zero when there are none.
fn min_allocatable(pool: &NodePoolTemplate, options: &[usize]) -> Resources {
    let mut types = options.iter().map(|&i| &pool.instance_types[i].allocatable);
    let Some(first) = types.next() else {
        return Resources::default();
    };
    let mut min = first.clone();
    for a in types {
        min.min_with(a);
    }
    min
}

/// Per instance type of a pool: the cheapest compatible available offering's price (USD/hour)
/// and the capacity types of its compatible available offerings (bits into `capacity_types`).
struct Offers {
    price: Vec<Option<f64>>,
    /// What [`choices::accepted_by`] reads of the offerings that count.
    summary: Vec<choices::OfferSummary>,
    capacity_type_bits: Vec<u64>,
    capacity_types: Vec<String>,
}

/// How [`Prices`] counts `reserved` offerings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReservedPricing {
    /// As launched: a reserved offering is priced at its reservation's price while the
    /// [`Ledger`] has room in it, and left out once it is full.
    Launch,
    /// For the cost re-pack, which does not count how many NodeClaims take a reservation: a
    /// type is priced by its other offerings, and by its reserved ones only when it has no
    /// other. Without this, near-free reserved types would be packed into as many NodeClaims
    /// as the pods fill, far beyond the reservations' room.
    Repack,
}

/// [`Offers`] per pool and the requirements offerings depend on (zone and capacity type); many
/// claims share these.
struct Prices {
    cache: HashMap<(usize, Option<Requirement>, Option<Requirement>), Rc<Offers>>,
    reserved: ReservedPricing,
    /// Reservations with no room left: their offerings are left out.
    full: HashSet<String>,
}

impl Prices {
    fn new(reserved: ReservedPricing) -> Prices {
        Prices {
            cache: HashMap::new(),
            reserved,
            full: HashSet::new(),
        }
    }

    /// Leave reservation `id`'s offerings out from now on.
    fn mark_full(&mut self, id: &str) {
        if self.full.insert(id.to_string()) {
            self.cache.clear();
        }
    }

    /// The offering a NodeClaim of these requirements launches `t` as: its cheapest available
    /// compatible offering that counts ([`Prices::counts`]).
    fn launch_offering<'t>(
        &self,
        t: &'t InstanceType,
        reqs: &Requirements,
    ) -> Option<&'t Offering> {
        let filter = crate::capacity::OfferingFilter::of(reqs);
        let admitted: Vec<&Offering> = t
            .offerings
            .iter()
            .filter(|o| o.available && filter.admits(o))
            .collect();
        let unreserved = admitted.iter().any(|o| o.reservation_id.is_none());
        admitted
            .into_iter()
            .filter(|o| self.counts(o, unreserved))
            .min_by(|a, b| a.price.total_cmp(&b.price))
    }

    /// Whether an admitted offering counts for its type's price and capacity types, given the
    /// type's admitted offerings.
    fn counts(&self, o: &Offering, others_admitted: bool) -> bool {
        match (&o.reservation_id, self.reserved) {
            (None, _) => true,
            (Some(id), ReservedPricing::Launch) => !self.full.contains(id),
            (Some(_), ReservedPricing::Repack) => !others_admitted,
        }
    }

    fn get(
        &mut self,
        pool_index: usize,
        pool: &NodePoolTemplate,
        reqs: &Requirements,
    ) -> Rc<Offers> {
        let zone = reqs.get(TOPOLOGY_ZONE_LABEL).cloned();
        let capacity_type = reqs.get(CAPACITY_TYPE_LABEL).cloned();
        let key = (pool_index, zone, capacity_type);
        if let Some(p) = self.cache.get(&key) {
            return Rc::clone(p);
        }
        let mut offering_reqs = Requirements::new();
        for r in key.1.iter().chain(key.2.iter()) {
            offering_reqs.add(r.clone());
        }
        let mut offers = Offers {
            price: Vec::with_capacity(pool.instance_types.len()),
            summary: Vec::with_capacity(pool.instance_types.len()),
            capacity_type_bits: Vec::with_capacity(pool.instance_types.len()),
            capacity_types: Vec::new(),
        };
        let filter = crate::capacity::OfferingFilter::of(&offering_reqs);
        for it in &pool.instance_types {
            let admitted = |o: &&Offering| o.available && filter.admits(o);
            let unreserved = it
                .offerings
                .iter()
                .filter(admitted)
                .any(|o| o.reservation_id.is_none());
            let mut price: Option<f64> = None;
            let mut summary = choices::OfferSummary {
                exotic: choices::is_exotic(it),
                ..choices::OfferSummary::default()
            };
            let mut bits = 0u64;
            for o in it.offerings.iter().filter(admitted) {
                if !self.counts(o, unreserved) {
                    continue;
                }
                price = Some(price.map_or(o.price, |p| p.min(o.price)));
                summary.add(o);
                let known = offers
                    .capacity_types
                    .iter()
                    .position(|c| *c == o.capacity_type);
                let bit = known.unwrap_or_else(|| {
                    offers.capacity_types.push(o.capacity_type.clone());
                    offers.capacity_types.len() - 1
                });
                bits |= 1 << bit.min(63);
            }
            offers.price.push(price);
            offers.summary.push(summary);
            offers.capacity_type_bits.push(bits);
        }
        let offers = Rc::new(offers);
        self.cache.insert(key, Rc::clone(&offers));
        offers
    }
}

/// Room left in each capacity reservation while new NodeClaims are priced in order (upstream's
/// `ReservationManager`): a NodeClaim whose first instance type launches cheapest into a
/// reservation takes one instance of it; a full reservation's offerings are left out of the
/// NodeClaims after it, so they list and launch as their other capacity types. A
/// reservation's room is the most any of its offerings reports (the cloud's
/// `AvailableInstanceCount`); in-flight NodeClaims not launched yet are not counted against
/// it, and a launch that finds it full falls back as the cloud provider decides.
#[derive(Default)]
struct Ledger(HashMap<String, i64>);

impl Ledger {
    fn of(pools: &[Pool]) -> Ledger {
        let mut room: HashMap<String, i64> = HashMap::new();
        for p in pools {
            for t in &p.t.instance_types {
                for o in &t.offerings {
                    if let Some(id) = &o.reservation_id {
                        let r = room.entry(id.clone()).or_insert(0);
                        *r = (*r).max(o.reservation_capacity);
                    }
                }
            }
        }
        Ledger(room)
    }

    /// Take one instance of reservation `id`; true when that leaves it full.
    fn take(&mut self, id: &str) -> bool {
        match self.0.get_mut(id) {
            Some(left) => {
                *left -= 1;
                *left <= 0
            }
            None => true,
        }
    }
}

/// Re-pack candidates a claim of these requirements could launch as: without `minValues`, an
/// exotic type ([`choices::is_exotic`]) goes when an ordinary candidate has at least its room,
/// since every filling that fits it fits the ordinary one and [`choices::accepted`] would list
/// that one instead. `is_exotic` answers by index into the pool's instance types.
fn launchable(
    candidates: Vec<super::repack::Candidate>,
    is_exotic: impl Fn(usize) -> bool,
    reqs: &Requirements,
) -> Vec<super::repack::Candidate> {
    if choices::has_min_values(reqs) {
        return candidates;
    }
    let exotic = |c: &super::repack::Candidate| is_exotic(c.index);
    let ordinary: Vec<&[i64]> = candidates
        .iter()
        .filter(|c| !exotic(c))
        .map(|c| c.room.as_slice())
        .collect();
    let shadowed: Vec<bool> = candidates
        .iter()
        .map(|c| {
            exotic(c)
                && ordinary
                    .iter()
                    .any(|room| room.iter().zip(&c.room).all(|(a, b)| a >= b))
        })
        .collect();
    candidates
        .into_iter()
        .zip(shadowed)
        .filter(|(_, s)| !s)
        .map(|(c, _)| c)
        .collect()
}

/// What a claim of these requirements and options (indexes into the pool's instance types)
/// costs as launched, USD/hour: the price of the first type its NodeClaim would list.
fn launch_price(
    pool_index: usize,
    pool: &NodePoolTemplate,
    requirements: &Requirements,
    options: &[usize],
    prices: &mut Prices,
) -> Option<f64> {
    let offers = prices.get(pool_index, pool, requirements);
    let sorted = priced_options(pool, &offers, options);
    let first = *accepted_options(pool, requirements, &offers, sorted.into_iter()).first()?;
    offers.price[first]
}

/// `options` with a compatible offering, cheapest first (ties by name).
fn priced_options(pool: &NodePoolTemplate, offers: &Offers, options: &[usize]) -> Vec<usize> {
    let mut priced: Vec<(f64, usize)> = options
        .iter()
        .filter_map(|&i| offers.price[i].map(|p| (p, i)))
        .collect();
    priced.sort_by(|a, b| {
        a.0.total_cmp(&b.0).then(
            pool.instance_types[a.1]
                .name
                .cmp(&pool.instance_types[b.1].name),
        )
    });
    priced.into_iter().map(|(_, i)| i).collect()
}

/// The options (indexes into the pool's instance types, cheapest first) a NodeClaim lists, in
/// order: [`choices::accepted`] applied to `options`.
fn accepted_options(
    pool: &NodePoolTemplate,
    requirements: &Requirements,
    offers: &Offers,
    options: impl Iterator<Item = usize>,
) -> Vec<usize> {
    let options: Vec<usize> = options.collect();
    let types: Vec<&InstanceType> = options.iter().map(|&i| &*pool.instance_types[i]).collect();
    choices::accepted_by(requirements, &types, |k| offers.summary[options[k]])
        .into_iter()
        .map(|k| options[k])
        .collect()
}

/// Why an open claim's pods stay pending when every option it had launches only into capacity
/// reservations that earlier NodeClaims of the pass filled.
pub const RESERVATIONS_FULL: &str =
    "its instance types launch only into capacity reservations that are full";

/// The [`NewClaim`] for an open claim: its options priced for its requirements, sorted cheapest
/// first (ties by name), narrowed to the ones a user would accept ([`choices::accepted`]); its
/// capacity-type requirement lists what those options offer. Errors, one per pod, when no
/// option is left to launch: they could launch only into reservations now full
/// ([`RESERVATIONS_FULL`]).
fn finish(
    claim: OpenClaim,
    pools: &[Pool],
    pods: &[PodInfo],
    prices: &mut Prices,
) -> Result<NewClaim, Vec<PodError>> {
    let pool = pools[claim.pool].t;
    let offers = prices.get(claim.pool, pool, &claim.requirements);
    let sorted = priced_options(pool, &offers, &claim.options);
    let kept = accepted_options(pool, &claim.requirements, &offers, sorted.iter().copied());
    if kept.is_empty() {
        let rejection = || Rejection::NoInstanceType {
            requests: claim.requests.clone(),
            requirements: claim.requirements.to_string(),
            detail: RESERVATIONS_FULL,
        };
        return Err(claim
            .pods
            .iter()
            .map(|&i| PodError {
                pod: pods[i].key.clone(),
                rejections: vec![(pool.name.clone(), rejection())],
            })
            .collect());
    }
    let fitting: Vec<Arc<InstanceType>> = sorted
        .iter()
        .map(|&i| Arc::clone(&pool.instance_types[i]))
        .collect();
    let instance_types: Vec<Arc<InstanceType>> = kept
        .iter()
        .map(|&i| Arc::clone(&pool.instance_types[i]))
        .collect();
    let mut requirements = claim.requirements;
    let bits = kept
        .iter()
        .fold(0u64, |acc, &i| acc | offers.capacity_type_bits[i]);
    let capacity_types: Vec<&String> = offers
        .capacity_types
        .iter()
        .enumerate()
        .filter(|(b, _)| bits & (1 << (*b).min(63)) != 0)
        .map(|(_, c)| c)
        .collect();
    requirements.add(Requirement::is_in(CAPACITY_TYPE_LABEL, capacity_types));
    let min_values = requirements
        .get(INSTANCE_TYPE_LABEL)
        .and_then(|r| r.min_values);
    requirements.remove(INSTANCE_TYPE_LABEL);
    let mut it_req = Requirement::is_in(
        INSTANCE_TYPE_LABEL,
        instance_types.iter().map(|it| it.name.clone()),
    );
    it_req.min_values = min_values;
    requirements.add(it_req);
    Ok(NewClaim {
        nodepool: pool.name.clone(),
        requirements,
        instance_types,
        fitting,
        requests: claim.requests,
        pods: claim.pods.iter().map(|&i| pods[i].key.clone()).collect(),
        min_values_relaxed: claim.min_values_relaxed,
    })
}
