//! Why a pending pod can or cannot get a node from each NodePool (`kubectl karpenter
//! why-pending`): the solver is run for the pod alone against one NodePool at a time, and its
//! rejection is made precise — the untolerated taint, the requirement key with both sides, the
//! largest instance type against the request, the limit with its usage, the minValues shortfall.
//! NodePools are prepared from a state snapshot with the provisioner's own template functions.
//! Pure: no I/O, no clock.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use crds::EC2NodeClass;
use crds::labels::WELL_KNOWN_LABELS;
use serde::Serialize;

use super::attach::{LimitReached, type_exceeded};
use super::constraints::{Relaxation, node_requirements};
use super::pod::PodInfo;
use super::requirements::{Incompatible, Requirements};
use super::resources::{Resources, format_quantities};
use super::solver::{Input, LIMIT_NODES, NodePoolTemplate, Rejection, solve, within_limits};
use crate::capacity::InstanceType;
use crate::capacity::index::TypeIndex;
use crate::provisioning::listing::{self, Listing};
use crate::provisioning::template;
use crate::snapshot::Snapshot;

/// At most this many values are listed on the NodePool's side of a requirement conflict.
const MAX_LISTED_VALUES: usize = 12;

/// A NodePool as [`explain`] sees it: ready (as the solver's template) or why not.
#[derive(Clone, Debug)]
pub struct PoolCandidate {
    /// NodePool name.
    pub name: String,
    /// `spec.weight` (higher is tried first).
    pub weight: i32,
    /// The solver's template, or why the provisioner skips this NodePool.
    pub state: Result<NodePoolTemplate, Reason>,
    /// `spec.limits` as amounts (cpu in millicores, memory in bytes, `nodes` as a count).
    pub limits: BTreeMap<String, i64>,
}

/// Why a NodePool cannot take the pod, most fundamental first.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "reason", rename_all_fields = "camelCase")]
pub enum Reason {
    /// The provisioner skips the NodePool: not Ready, being deleted, static, its node class
    /// missing or its requirements invalid.
    NotReady {
        /// Why, as the provisioner's skip reason words it, e.g. `Ready=False
        /// NodeClassNotReady: ...` or `EC2NodeClass "default" not found`.
        detail: String,
    },
    /// The NodePool's own requirements leave no available instance type (upstream's
    /// `NoCompatibleInstanceTypes` event).
    NoInstanceTypes,
    /// A template taint the pod does not tolerate (`key=value:Effect`).
    Taint {
        /// The first untolerated `NoSchedule` or `NoExecute` taint, `key=value:Effect` (or
        /// `key:Effect`).
        taint: String,
    },
    /// A pod requirement no value of the NodePool (its requirements, or what its instance
    /// types offer) satisfies.
    RequirementConflict {
        /// The label key both sides constrain, e.g. `topology.kubernetes.io/zone`.
        key: String,
        /// The pod's requirement, e.g. `topology.kubernetes.io/zone In [mars-1a]`.
        required: String,
        /// What the NodePool allows for the key, e.g. `topology.kubernetes.io/zone In [...]`.
        allowed: String,
    },
    /// The pod requires a custom label the NodePool does not define.
    UnknownLabel {
        /// The custom label key the pod requires, e.g. `example.com/team`; neither the
        /// NodePool's requirements and labels nor its instance types give it a value.
        key: String,
    },
    /// A topology spread or pod (anti-)affinity constraint leaves no domain.
    Topology {
        /// The solver's message, `unsatisfiable <kind> constraint on <topology key>`
        /// ([`TopologyError`](crate::scheduling::topology::TopologyError)).
        detail: String,
    },
    /// Pod and NodePool requirements together leave no available instance type (no single
    /// requirement is to blame).
    NoCompatibleInstanceType {
        /// Pod and NodePool requirements together, joined by `, ` (e.g. `kubernetes.io/arch
        /// In [arm64], node.kubernetes.io/instance-type In [m5.large]`).
        requirements: String,
    },
    /// No compatible instance type has room for the pod plus DaemonSet overhead.
    TooLarge {
        /// Pod requests plus DaemonSet overhead, e.g. `{cpu: 200, memory: 1Gi, pods: 1}`.
        requests: String,
        /// Per resource no instance type can hold: the largest allocatable amount and its type.
        largest: Vec<Largest>,
    },
    /// Every instance type that fits the pod would exceed one of `spec.limits`.
    LimitReached {
        /// Limited resource (`cpu`, `memory`, `nodes`, ...).
        resource: String,
        /// The limit in `spec.limits`, as a quantity (e.g. `100`, `400Gi`, `10` nodes); it,
        /// `usage`, `left` and `needed` are written in one unit (`4000m`, `3500m`, `500m`,
        /// `2000m`, never `4` against `3500m`).
        limit: String,
        /// What the NodePool's nodes and NodeClaims already use.
        usage: String,
        /// What is left under the limit (`limit - usage`, 0 when over it).
        left: String,
        /// What the smallest fitting instance type would add (more than `left`).
        needed: String,
        /// The smallest fitting instance type for that resource, e.g. `m5.large`.
        instance_type: String,
    },
    /// No instance type that fits the pod can attach its volumes (CSI attach limits,
    /// [`crate::scheduling::attach`]).
    AttachLimit {
        /// The CSI driver whose limit is reached, e.g. `ebs.csi.aws.com`.
        driver: String,
        /// The largest limit among the fitting instance types (volumes per node).
        limit: i64,
    },
    /// Fewer distinct values than a requirement's `minValues` remain.
    MinValues {
        /// The requirement's label key, e.g. `node.kubernetes.io/instance-type`.
        key: String,
        /// The requirement's `minValues` (1 to 50).
        min: usize,
        /// Distinct values the fitting instance types offer.
        available: usize,
    },
    /// The solver rejected the pod for a reason not broken down further.
    Other {
        /// The solver's rejection as it words it (or `the solver placed the pod nowhere`).
        detail: String,
    },
}

/// The largest allocatable amount of one resource over the compatible instance types.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Largest {
    /// Resource name, e.g. `cpu`, `memory`, `nvidia.com/gpu`.
    pub resource: String,
    /// What the pod (plus DaemonSet overhead) requests, as a quantity in the same unit as
    /// `available` (e.g. `20500m`).
    pub requested: String,
    /// The largest allocatable amount on any compatible type, as a quantity in the same unit as
    /// `requested` (e.g. `16000m`, not `16`).
    pub available: String,
    /// The instance type that has it.
    pub instance_type: String,
    /// Why that type's allocatable is what it is, in its node class's numbers (e.g.
    /// `maxPods 8 (EC2NodeClass capped)`), when the instance type says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sizing: Option<String>,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NotReady { detail } => write!(f, "NodePool not ready: {detail}"),
            Reason::NoInstanceTypes => write!(
                f,
                "no instance types: the NodePool's requirements filter out every available instance type"
            ),
            Reason::Taint { taint } => write!(f, "taint not tolerated: {taint}"),
            Reason::RequirementConflict {
                key,
                required,
                allowed,
            } => write!(
                f,
                "requirement conflict on {key}: pod requires {required}, NodePool allows {allowed}"
            ),
            Reason::UnknownLabel { key } => write!(
                f,
                "requirement conflict on {key}: the NodePool does not define label {key:?} (no known values)"
            ),
            Reason::Topology { detail } => write!(f, "topology: {detail}"),
            Reason::NoCompatibleInstanceType { requirements } => write!(
                f,
                "no instance type satisfies the requirements together: {requirements}"
            ),
            Reason::TooLarge { requests, largest } => {
                write!(f, "no instance type large enough for {requests}")?;
                if largest.is_empty() {
                    return write!(f, ": no single instance type has room for all of it");
                }
                let parts: Vec<String> = largest
                    .iter()
                    .map(|l| {
                        let mut part = format!(
                            "{} requested {}, largest {} ({}",
                            l.resource, l.requested, l.available, l.instance_type
                        );
                        if let Some(sizing) = &l.sizing {
                            part.push_str(": ");
                            part.push_str(sizing);
                        }
                        part.push(')');
                        part
                    })
                    .collect();
                write!(f, ": {}", parts.join("; "))
            }
            Reason::LimitReached {
                resource,
                limit,
                usage,
                left,
                needed,
                instance_type,
            } => write!(
                f,
                "limit reached: {resource} limit {limit}, in use {usage}, {left} left; the smallest instance type that fits ({instance_type}) would add {needed}"
            ),
            Reason::AttachLimit { driver, limit } => {
                write!(f, "{driver} attach limit {limit} reached")
            }
            Reason::MinValues {
                key,
                min,
                available,
            } => write!(
                f,
                "minValues not satisfiable: {key} needs {min} distinct values, the instance types that fit offer {available} (MIN_VALUES_POLICY=BestEffort would relax it to {available})"
            ),
            Reason::Other { detail } => write!(f, "{detail}"),
        }
    }
}

/// One NodePool's verdict for a pod.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all_fields = "camelCase")]
pub enum Verdict {
    /// The provisioner would launch a NodeClaim of this NodePool for the pod.
    Compatible {
        /// The cheapest instance type it would offer.
        instance_type: String,
        /// Its cheapest compatible offering, USD/hour.
        price: Option<f64>,
        /// How many instance types the NodeClaim would offer.
        options: usize,
    },
    /// The NodePool cannot take the pod.
    Rejected(Reason),
}

/// A NodePool and its verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PoolVerdict {
    /// Name of the NodePool judged.
    pub nodepool: String,
    /// [`Verdict::Compatible`] with what it would launch, or [`Verdict::Rejected`] with the
    /// [`Reason`]; flattened into this object in JSON (`verdict`, `reason` and their fields).
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// Every NodePool of the snapshot as [`explain`] needs it, heaviest weight first (the order the
/// solver tries them), then by name, prepared by the provisioner's own functions:
/// [`template::node_class_of`], [`template::usable_requirements`] and
/// [`template::pool_template`], with each NodePool's instance types overlaid by the snapshot's
/// NodeOverlays and usage priced by the instance types of every NodePool whose types could be
/// listed ([`listing::pool_types`]), as the provisioner does. `instance_types` lists a node
/// class's instance types, once per node class (errors become [`Reason::NotReady`]).
pub fn candidates(
    snap: &Snapshot,
    instance_types: impl Fn(&EC2NodeClass) -> Result<Vec<Arc<InstanceType>>, String>,
) -> Vec<PoolCandidate> {
    let mut listings: HashMap<String, Listing> = HashMap::new();
    for pool in &snap.nodepools {
        if let Ok(class) = template::node_class_of(pool, snap) {
            let name = class.metadata.name.clone().unwrap_or_default();
            listings
                .entry(name)
                .or_insert_with(|| instance_types(class).map(Arc::new));
        }
    }
    let listed = listing::pool_types(snap, &listings);
    let mut out: Vec<PoolCandidate> = listed
        .pools
        .iter()
        .map(|(pool, types)| PoolCandidate {
            name: pool.metadata.name.clone().unwrap_or_default(),
            weight: pool.weight(),
            state: types
                .clone()
                .and_then(|types| {
                    let reqs = template::usable_requirements(pool, &types)?;
                    Ok(template::pool_template(pool, reqs, &types, snap, &listed.index).0)
                })
                .map_err(Reason::from),
            limits: template::remaining_limits(pool, &Resources::default(), 0),
        })
        .collect();
    out.sort_by(|a, b| b.weight.cmp(&a.weight).then(a.name.cmp(&b.name)));
    out
}

impl From<template::SkipReason> for Reason {
    fn from(skip: template::SkipReason) -> Reason {
        match skip {
            template::SkipReason::NoCompatibleInstanceTypes => Reason::NoInstanceTypes,
            other => Reason::NotReady {
                detail: other.to_string(),
            },
        }
    }
}

/// Each NodePool's verdict for `pod`, in the order of `pools`: the solver run for the pod alone
/// against that NodePool (existing nodes and other pending pods are not considered), its
/// rejection broken down by [`Reason`]. `namespaces` (name to labels) serve affinity terms'
/// namespace selectors.
pub fn explain(
    pod: &PodInfo,
    pools: &[PoolCandidate],
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<PoolVerdict> {
    pools
        .iter()
        .map(|c| PoolVerdict {
            nodepool: c.name.clone(),
            verdict: match &c.state {
                Err(reason) => Verdict::Rejected(reason.clone()),
                Ok(t) => judge(pod, t, &c.limits, namespaces),
            },
        })
        .collect()
}

fn judge(
    pod: &PodInfo,
    t: &NodePoolTemplate,
    limits: &BTreeMap<String, i64>,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
) -> Verdict {
    let input = Input {
        pods: vec![pod.clone()],
        nodepools: vec![t.clone()],
        well_known_labels: WELL_KNOWN_LABELS.iter().map(|s| s.to_string()).collect(),
        namespaces: namespaces.clone(),
        ..Input::default()
    };
    let out = solve(&input);
    if let Some(claim) = out.new_claims.first() {
        return Verdict::Compatible {
            instance_type: claim
                .instance_types
                .first()
                .map(|it| it.name.clone())
                .unwrap_or_default(),
            price: claim.cheapest_price(),
            options: claim.instance_types.len(),
        };
    }
    let rejection = out
        .errors
        .first()
        .and_then(|e| e.rejections.first())
        .map(|(_, r)| r);
    Verdict::Rejected(match rejection {
        Some(Rejection::Taint(taint)) => Reason::Taint {
            taint: taint.clone(),
        },
        Some(Rejection::Requirements(Incompatible::Conflict {
            key,
            wanted,
            allowed,
        })) => Reason::RequirementConflict {
            key: key.clone(),
            required: wanted.clone(),
            allowed: allowed.clone(),
        },
        Some(Rejection::Requirements(Incompatible::UnknownLabel { key })) => {
            Reason::UnknownLabel { key: key.clone() }
        }
        Some(Rejection::Topology(e)) => Reason::Topology {
            detail: e.to_string(),
        },
        Some(Rejection::AttachLimit(l)) => Reason::AttachLimit {
            driver: l.driver.clone(),
            limit: l.limit,
        },
        Some(r @ (Rejection::NoInstanceType { .. } | Rejection::Limits(_))) => {
            instance_types(pod, t, limits).unwrap_or_else(|| Reason::Other {
                detail: r.to_string(),
            })
        }
        None => Reason::Other {
            detail: "the solver placed the pod nowhere".into(),
        },
    })
}

/// Which instance-type check fails, in the solver's order: compatibility, size, attach
/// limits, NodePool limits, minValues. The pod's requirements are taken fully relaxed (its last required term, no
/// preferences), as they stand when the solver gives up. `None` when every check passes.
fn instance_types(
    pod: &PodInfo,
    t: &NodePoolTemplate,
    limits: &BTreeMap<String, i64>,
) -> Option<Reason> {
    let last = Relaxation {
        node_terms: pod.requirement_terms.len().saturating_sub(1),
        preferred_node: usize::MAX,
        ..Relaxation::default()
    };
    let pod_reqs = node_requirements(&pod.requirement_terms, &pod.constraints, &last);
    let base: Vec<&Arc<InstanceType>> = t
        .instance_types
        .iter()
        .filter(|it| it.compatible(&t.requirements))
        .collect();
    let mut reqs = t.requirements.clone();
    reqs.add_all(&pod_reqs);
    let compatible: Vec<&Arc<InstanceType>> = base
        .iter()
        .copied()
        .filter(|it| it.compatible(&reqs))
        .collect();
    if compatible.is_empty() {
        return Some(conflicting_key(t, &base, &pod_reqs).unwrap_or(
            Reason::NoCompatibleInstanceType {
                requirements: reqs.to_string(),
            },
        ));
    }
    let requests = pod.requests.plus(&t.daemon_overhead);
    let fitting: Vec<&Arc<InstanceType>> = compatible
        .iter()
        .copied()
        .filter(|it| requests.fits_in(&it.allocatable))
        .collect();
    if fitting.is_empty() {
        return Some(too_large(&requests, &compatible));
    }
    if !pod.volumes.is_empty() {
        let reached: Vec<LimitReached> = fitting
            .iter()
            .filter_map(|it| type_exceeded(it, &pod.volumes))
            .collect();
        if reached.len() == fitting.len()
            && let Some(l) = reached.into_iter().max_by_key(|l| l.limit)
        {
            return Some(Reason::AttachLimit {
                driver: l.driver,
                limit: l.limit,
            });
        }
    }
    let options: Vec<&Arc<InstanceType>> = fitting
        .iter()
        .copied()
        .filter(|it| within_limits(&it.capacity, &t.remaining))
        .filter(|it| type_exceeded(it, &pod.volumes).is_none())
        .collect();
    if options.is_empty() {
        return limit_reached(t, limits, &fitting);
    }
    min_values(&reqs, &options)
}

/// The first pod requirement that alone leaves no instance type, with what the NodePool's
/// instance types offer for its key.
fn conflicting_key(
    t: &NodePoolTemplate,
    base: &[&Arc<InstanceType>],
    pod_reqs: &Requirements,
) -> Option<Reason> {
    for r in pod_reqs.iter() {
        let mut one = t.requirements.clone();
        one.add(r.clone());
        if base.iter().any(|it| it.compatible(&one)) {
            continue;
        }
        let pool_req = t.requirements.get(&r.key);
        let offered: BTreeSet<&str> = base
            .iter()
            .filter_map(|it| it.requirements.get(&r.key).and_then(|x| x.values()))
            .flatten()
            .map(String::as_str)
            .filter(|v| pool_req.is_none_or(|p| p.has(v)))
            .collect();
        let mut listed: Vec<&str> = offered.iter().copied().take(MAX_LISTED_VALUES).collect();
        let more = offered.len().saturating_sub(MAX_LISTED_VALUES);
        let more_text = format!("... {more} more");
        if more > 0 {
            listed.push(&more_text);
        }
        return Some(Reason::RequirementConflict {
            key: r.key.clone(),
            required: r.to_string(),
            allowed: format!("{} In [{}]", r.key, listed.join(" ")),
        });
    }
    None
}

fn too_large(requests: &Resources, compatible: &[&Arc<InstanceType>]) -> Reason {
    let mut largest = Vec::new();
    for (name, wanted) in requests.iter() {
        let best = compatible
            .iter()
            .max_by_key(|it| it.allocatable.get(name))
            .filter(|it| it.allocatable.get(name) < wanted);
        if let Some(it) = best {
            let [requested, available] = alike(name, [wanted, it.allocatable.get(name)]);
            largest.push(Largest {
                resource: name.to_string(),
                requested,
                available,
                instance_type: it.name.clone(),
                sizing: it.sizing.get(name).cloned(),
            });
        }
    }
    Reason::TooLarge {
        requests: requests.to_string(),
        largest,
    }
}

/// The first limited resource that even the smallest fitting instance type would exceed.
fn limit_reached(
    t: &NodePoolTemplate,
    limits: &BTreeMap<String, i64>,
    fitting: &[&Arc<InstanceType>],
) -> Option<Reason> {
    for (name, left) in &t.remaining {
        let need = |it: &Arc<InstanceType>| {
            if name == LIMIT_NODES {
                1
            } else {
                it.capacity.get(name)
            }
        };
        let smallest = fitting.iter().min_by_key(|it| {
            (
                need(it),
                it.capacity.cpu,
                it.capacity.memory,
                it.name.clone(),
            )
        })?;
        if need(smallest) <= *left {
            continue;
        }
        let limit = limits.get(name).copied().unwrap_or(0);
        let [limit, usage, left, needed] =
            alike(name, [limit, limit - left, (*left).max(0), need(smallest)]);
        return Some(Reason::LimitReached {
            resource: name.clone(),
            limit,
            usage,
            left,
            needed,
            instance_type: smallest.name.clone(),
        });
    }
    None
}

/// `values` of resource `name` as quantities in one unit ([`format_quantities`]): the amounts a
/// reason compares.
fn alike<const N: usize>(name: &str, values: [i64; N]) -> [String; N] {
    let mut texts = format_quantities(name, &values).into_iter();
    values.map(|_| texts.next().unwrap_or_default())
}

/// The first requirement with `minValues` the options cannot meet.
fn min_values(reqs: &Requirements, options: &[&Arc<InstanceType>]) -> Option<Reason> {
    let types: Vec<&InstanceType> = options.iter().map(|it| it.as_ref()).collect();
    super::choices::min_values_shortfall(reqs, &types).map(|s| Reason::MinValues {
        key: s.key,
        min: s.needed,
        available: s.left,
    })
}

/// The existing node or in-flight NodeClaim the provisioner would put the pod on instead of
/// launching (upstream: pods that fit in-flight capacity wait for it), by name; `None` when it
/// fits none. `snap.pods` must hold the cluster's bound pods (they use the capacity);
/// `pools` give the DaemonSet overhead and instance types in-flight NodeClaims are sized by.
pub fn existing_fit(pod: &PodInfo, snap: &Snapshot, pools: &[PoolCandidate]) -> Option<String> {
    let mut overhead = HashMap::new();
    let mut types = TypeIndex::default();
    for c in pools {
        if let Ok(t) = &c.state {
            overhead.insert(c.name.clone(), t.daemon_overhead.clone());
            types.add_listed(&t.instance_types);
            types.add_pool(&c.name, &t.instance_types);
        }
    }
    let existing = snap.existing_capacity(&overhead, &types);
    if existing.is_empty() {
        return None;
    }
    let names = existing.iter().map(|e| e.name.clone()).collect();
    let input = Input {
        pods: vec![pod.clone()],
        bound_pods: snap.bound_pods(&names),
        existing,
        well_known_labels: WELL_KNOWN_LABELS.iter().map(|s| s.to_string()).collect(),
        namespaces: snap.namespace_labels(),
        ..Input::default()
    };
    solve(&input).existing.into_keys().next()
}

/// Where a `Nominated` Event sends its pod, from the provisioner's message
/// [`NOMINATION_PREFIX`](crate::provisioning::NOMINATION_PREFIX)`<kind>/<name>` (`kind` is
/// `nodeclaim` or `node`).
pub fn nominated_target(message: &str) -> Option<(&str, &str)> {
    let target = message.strip_prefix(crate::provisioning::NOMINATION_PREFIX)?;
    let (kind, name) = target.trim().split_once('/')?;
    (!kind.is_empty() && !name.is_empty()).then_some((kind, name))
}

#[cfg(test)]
#[path = "explain_tests.rs"]
mod tests;
