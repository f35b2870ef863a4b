//! The provisioning solver (upstream `provisioning/scheduling/scheduler.go`): pods in first-fit-
//! decreasing order go to existing nodes and in-flight NodeClaims first, then to NodeClaims
//! opened earlier in this run, then to a new NodeClaim from the first NodePool (by weight) that
//! admits them. Each new NodeClaim keeps every instance type that still fits, cheapest first.
//! Pure: no I/O, no clock.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Taint;

use super::pod::{PodInfo, PodKey, queue_order};
use super::requirements::{Incompatible, Requirement, Requirements};
use super::resources::Resources;
use super::taints::{taint_string, untolerated};
use crate::cloudprovider::InstanceType;
use crds::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL};

/// Upper bound on instance types written into one NodeClaim (upstream `MaxInstanceTypes`).
pub const MAX_INSTANCE_TYPES: usize = 600;

/// A NodePool as the solver uses it.
#[derive(Clone, Debug)]
pub struct NodePoolTemplate {
    /// NodePool name.
    pub name: String,
    /// Higher weights are tried first.
    pub weight: i32,
    /// Pool requirements, its template labels (as `In`) and `karpenter.sh/nodepool In [name]`.
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
    /// Labels or requirements.
    pub labels: NodeLabels,
    /// Taints pods must tolerate.
    pub taints: Vec<Taint>,
    /// Allocatable minus the requests of pods bound (or about to be bound) there.
    pub available: Resources,
    /// Initialized nodes are tried first.
    pub initialized: bool,
}

/// Everything one solve needs.
#[derive(Clone, Debug, Default)]
pub struct Input {
    /// Pods to place (order does not matter; the solver sorts).
    pub pods: Vec<PodInfo>,
    /// Existing nodes and in-flight NodeClaims.
    pub existing: Vec<ExistingNode>,
    /// Ready NodePools.
    pub nodepools: Vec<NodePoolTemplate>,
    /// Label keys a pod may require without the pool defining them (well-known labels).
    pub well_known_labels: Vec<String>,
}

/// A NodeClaim to create.
#[derive(Clone, Debug)]
pub struct NewClaim {
    /// The NodePool it belongs to.
    pub nodepool: String,
    /// Requirements including `node.kubernetes.io/instance-type In [options]` (cheapest first)
    /// and the capacity types those options offer.
    pub requirements: Requirements,
    /// Instance-type options, cheapest available compatible offering first.
    pub instance_types: Vec<Arc<InstanceType>>,
    /// Requests of its pods plus daemon overhead.
    pub requests: Resources,
    /// Pods planned onto it.
    pub pods: Vec<PodKey>,
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
    /// No instance type satisfies both requirements and resources.
    NoInstanceType {
        /// Pod requests plus daemon overhead.
        requests: Resources,
        /// Combined requirements.
        requirements: String,
        /// Which check eliminated the last candidates.
        detail: &'static str,
    },
    /// The pool's limits leave no room.
    Limits(String),
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Taint(t) => write!(f, "did not tolerate taint {t}"),
            Rejection::Requirements(i) => write!(f, "{i}"),
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
        }
    }
}

/// Why a pod could not be placed at all.
#[derive(Clone, Debug, PartialEq)]
pub struct PodError {
    /// The pod.
    pub pod: PodKey,
    /// One entry per NodePool tried (empty when there are no ready NodePools).
    pub rejections: Vec<(String, Rejection)>,
}

impl fmt::Display for PodError {
    /// Upstream-style: `incompatible with nodepool "a", <why>; incompatible with nodepool "b", ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rejections.is_empty() {
            return write!(f, "no ready NodePool can launch capacity");
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
    /// NodeClaims to create.
    pub new_claims: Vec<NewClaim>,
    /// Pods that fit existing capacity, by the existing node's name.
    pub existing: BTreeMap<String, Vec<PodKey>>,
    /// Pods that fit nowhere, with the reason per NodePool.
    pub errors: Vec<PodError>,
}

struct OpenClaim {
    pool: usize,
    requirements: Requirements,
    requests: Resources,
    /// Indexes into the pool's instance types that still fit.
    options: Vec<usize>,
    /// Component-wise max allocatable over `options` (quick reject).
    max_allocatable: Resources,
    pods: Vec<PodKey>,
}

struct Pool<'a> {
    t: &'a NodePoolTemplate,
    /// Instance types compatible with the pool's own requirements.
    base: Vec<usize>,
    remaining: BTreeMap<String, i64>,
}

/// Run one scheduling simulation.
pub fn solve(input: &Input) -> Output {
    let mut pods: Vec<&PodInfo> = input.pods.iter().collect();
    pods.sort_by(|a, b| queue_order(a, b));
    let mut existing: Vec<ExistingNode> = input.existing.clone();
    existing.sort_by(|a, b| b.initialized.cmp(&a.initialized).then(a.name.cmp(&b.name)));
    let mut templates: Vec<&NodePoolTemplate> = input.nodepools.iter().collect();
    templates.sort_by(|a, b| b.weight.cmp(&a.weight).then(b.name.cmp(&a.name)));
    let mut pools: Vec<Pool> = templates
        .into_iter()
        .map(|t| Pool {
            base: (0..t.instance_types.len())
                .filter(|&i| t.instance_types[i].compatible(&t.requirements))
                .collect(),
            remaining: t.remaining.clone(),
            t,
        })
        .collect();
    let well_known = |k: &str| input.well_known_labels.iter().any(|w| w == k);
    let mut out = Output::default();
    let mut claims: Vec<OpenClaim> = Vec::new();
    let mut type_memo: HashMap<(usize, String), Vec<usize>> = HashMap::new();

    'pods: for pod in pods {
        for term in &pod.requirement_terms {
            if let Some(node) = place_existing(&mut existing, pod, term, &well_known) {
                out.existing.entry(node).or_default().push(pod.key.clone());
                continue 'pods;
            }
            if place_open_claim(&mut claims, &pools, pod, term, &well_known) {
                continue 'pods;
            }
        }
        let mut rejections = Vec::new();
        for (pi, pool) in pools.iter_mut().enumerate() {
            let mut last = None;
            for term in &pod.requirement_terms {
                match open_claim(pi, pool, pod, term, &well_known, &mut type_memo) {
                    Ok(claim) => {
                        claims.push(claim);
                        continue 'pods;
                    }
                    Err(r) => last = Some(r),
                }
            }
            if let Some(r) = last {
                rejections.push((pool.t.name.clone(), r));
            }
        }
        out.errors.push(PodError {
            pod: pod.key.clone(),
            rejections,
        });
    }
    out.new_claims = claims.into_iter().map(|c| finish(c, &pools)).collect();
    out
}

fn place_existing(
    existing: &mut [ExistingNode],
    pod: &PodInfo,
    term: &Requirements,
    well_known: &dyn Fn(&str) -> bool,
) -> Option<String> {
    for node in existing.iter_mut() {
        if !pod.requests.fits_in(&node.available)
            || untolerated(&node.taints, &pod.tolerations).is_some()
        {
            continue;
        }
        let admits = match &node.labels {
            NodeLabels::Known(labels) => term.matches_labels(labels).is_ok(),
            NodeLabels::Pending(reqs) => reqs.compatible(term, well_known).is_ok(),
        };
        if admits {
            node.available.sub(&pod.requests);
            return Some(node.name.clone());
        }
    }
    None
}

fn place_open_claim(
    claims: &mut [OpenClaim],
    pools: &[Pool],
    pod: &PodInfo,
    term: &Requirements,
    well_known: &dyn Fn(&str) -> bool,
) -> bool {
    for claim in claims.iter_mut() {
        let total = claim.requests.plus(&pod.requests);
        if !total.fits_in(&claim.max_allocatable) {
            continue;
        }
        let pool = pools[claim.pool].t;
        if untolerated(&pool.taints, &pod.tolerations).is_some() {
            continue;
        }
        let narrowed = !term.is_empty();
        let merged = if narrowed {
            if claim.requirements.compatible(term, well_known).is_err() {
                continue;
            }
            let mut m = claim.requirements.clone();
            m.add_all(term);
            Some(m)
        } else {
            None
        };
        let reqs = merged.as_ref().unwrap_or(&claim.requirements);
        let options: Vec<usize> = claim
            .options
            .iter()
            .copied()
            .filter(|&i| {
                let it = &pool.instance_types[i];
                total.fits_in(&it.allocatable) && (!narrowed || it.compatible(reqs))
            })
            .collect();
        if options.is_empty() {
            continue;
        }
        claim.max_allocatable = max_allocatable(pool, &options);
        claim.options = options;
        claim.requests = total;
        if let Some(m) = merged {
            claim.requirements = m;
        }
        claim.pods.push(pod.key.clone());
        return true;
    }
    false
}

fn max_allocatable(pool: &NodePoolTemplate, options: &[usize]) -> Resources {
    options.iter().fold(Resources::default(), |acc, &i| {
        acc.max(&pool.instance_types[i].allocatable)
    })
}

fn open_claim(
    pi: usize,
    pool: &mut Pool,
    pod: &PodInfo,
    term: &Requirements,
    well_known: &dyn Fn(&str) -> bool,
    memo: &mut HashMap<(usize, String), Vec<usize>>,
) -> Result<OpenClaim, Rejection> {
    let t = pool.t;
    if let Some(taint) = untolerated(&t.taints, &pod.tolerations) {
        return Err(Rejection::Taint(taint_string(taint)));
    }
    t.requirements
        .compatible(term, well_known)
        .map_err(Rejection::Requirements)?;
    let mut requirements = t.requirements.clone();
    requirements.add_all(term);
    let compatible: &Vec<usize> = if term.is_empty() {
        &pool.base
    } else {
        memo.entry((pi, requirements.to_string()))
            .or_insert_with(|| {
                pool.base
                    .iter()
                    .copied()
                    .filter(|&i| t.instance_types[i].compatible(&requirements))
                    .collect()
            })
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
        .filter(|&i| requests.fits_in(&t.instance_types[i].allocatable))
        .collect();
    if fitting.is_empty() {
        return Err(no_type("no instance type has enough resources"));
    }
    let options: Vec<usize> = fitting
        .into_iter()
        .filter(|&i| within_limits(&t.instance_types[i].capacity, &pool.remaining))
        .collect();
    if options.is_empty() {
        let limits: Vec<String> = pool
            .remaining
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        return Err(Rejection::Limits(format!(
            "remaining {{{}}}",
            limits.join(", ")
        )));
    }
    // Reserve the largest option's capacity against the limits, as upstream does, so that
    // whichever option launches the pool stays within its limits.
    let largest = options.iter().fold(Resources::default(), |acc, &i| {
        acc.max(&t.instance_types[i].capacity)
    });
    for (name, left) in pool.remaining.iter_mut() {
        *left -= if name == LIMIT_NODES {
            1
        } else {
            largest.get(name)
        };
    }
    Ok(OpenClaim {
        pool: pi,
        max_allocatable: max_allocatable(t, &options),
        requirements,
        requests,
        options,
        pods: vec![pod.key.clone()],
    })
}

fn finish(claim: OpenClaim, pools: &[Pool]) -> NewClaim {
    let pool = pools[claim.pool].t;
    let mut priced: Vec<(f64, Arc<InstanceType>)> = claim
        .options
        .iter()
        .filter_map(|&i| {
            let it = &pool.instance_types[i];
            it.cheapest_offering(&claim.requirements)
                .map(|o| (o.price, Arc::clone(it)))
        })
        .collect();
    priced.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.name.cmp(&b.1.name)));
    priced.truncate(MAX_INSTANCE_TYPES);
    let instance_types: Vec<Arc<InstanceType>> = priced.into_iter().map(|(_, it)| it).collect();
    let mut requirements = claim.requirements;
    let mut capacity_types: Vec<String> = instance_types
        .iter()
        .flat_map(|it| {
            it.offerings
                .iter()
                .filter(|o| o.available && o.compatible(&requirements))
                .map(|o| o.capacity_type.clone())
        })
        .collect();
    capacity_types.sort();
    capacity_types.dedup();
    requirements.add(Requirement::is_in(CAPACITY_TYPE_LABEL, capacity_types));
    requirements.remove(INSTANCE_TYPE_LABEL);
    requirements.add(Requirement::is_in(
        INSTANCE_TYPE_LABEL,
        instance_types.iter().map(|it| it.name.clone()),
    ));
    NewClaim {
        nodepool: pool.name.clone(),
        requirements,
        instance_types,
        requests: claim.requests,
        pods: claim.pods,
    }
}

/// The `nodes` key of NodePool limits (a node count).
pub const LIMIT_NODES: &str = "nodes";

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
