//! Static NodePools (`spec.replicas`, upstream v1.8, gate `StaticCapacity`,
//! `pkg/controllers/static/{provisioning,deprovisioning}`): a static pool keeps exactly
//! `replicas` NodeClaims whether or not pods need them, within `limits.nodes`. The dynamic
//! provisioner never creates NodeClaims for a static pool (pods still land on its nodes), and
//! consolidation leaves its nodes alone; drift and expiry replace them, since a deleting
//! NodeClaim no longer counts and this decision creates its successor.
//!
//! [`decide`] is pure: from a snapshot, one static NodePool and its node class's instance types,
//! the NodeClaims to create (each on the cheapest instance types that hold the pool's DaemonSet
//! pods, as any new NodeClaim lists them) and the NodeClaims to delete, in upstream's order.

use std::cmp::Ordering;
use std::sync::Arc;

use crds::{NodeClaim, NodePool};
use jiff::Timestamp;

use super::plan::{PlannedNodeClaim, Settings};
use super::template;
use crate::capacity::InstanceType;
use crate::capacity::index::TypeIndex;
use crate::disruption::blockers::opts_out;
use crate::disruption::candidates::{eviction_cost, is_reschedulable};
use crate::lifecycle::expiration::expires_at;
use crate::scheduling::choices;
use crate::scheduling::requirements::Requirement;
use crate::scheduling::solver::{LIMIT_NODES, NewClaim};
use crate::snapshot::{Snapshot, annotation, nodepool_of};
use crds::disruption::COMMAND_ANNOTATION;
use crds::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL};
use crds::upgrade::REPLACEMENT_ANNOTATION;

/// Where a static NodePool stands against `spec.replicas`, as its `StaticCapacity` condition
/// reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// As many NodeClaims (not being deleted) as `replicas`.
    Satisfied {
        /// `spec.replicas`.
        replicas: i64,
    },
    /// NodeClaims are being created or deleted toward `replicas`.
    Scaling {
        /// NodeClaims of the pool not being deleted, before this decision.
        have: i64,
        /// `spec.replicas`.
        replicas: i64,
    },
    /// `limits.nodes` leaves room for fewer NodeClaims than `replicas` (upstream only logs
    /// "nodepool node limit reached").
    NodeLimitReached {
        /// `limits.nodes`.
        limit: i64,
        /// `spec.replicas`.
        replicas: i64,
    },
    /// No instance type of the node class can launch a node of the pool: why, e.g. `no instance
    /// type the NodePool allows has an available offering`.
    NoInstanceType(String),
}

/// One static NodePool's decision: apply the creates, then the deletes.
#[derive(Clone, Debug)]
pub struct Decision {
    /// NodeClaims to create (with `generateName`), none of them holding pods.
    pub create: Vec<PlannedNodeClaim>,
    /// NodeClaims to delete, as read, in the order they go: not yet launched first, then nodes
    /// without reschedulable pods, then the cheapest to disrupt (upstream
    /// `getDeprovisioningCandidates`).
    pub delete: Vec<Arc<NodeClaim>>,
    /// Where the pool stands.
    pub verdict: Verdict,
}

/// Whether an upgrade step or a consolidation command holds the NodeClaim for replacement.
fn pending_disruption(claim: &NodeClaim) -> bool {
    annotation(claim, REPLACEMENT_ANNOTATION).is_some()
        || annotation(claim, COMMAND_ANNOTATION).is_some()
}

/// The pool's `limits.nodes`, if set and readable (an unreadable one counts as 0, as
/// [`template::remaining_limits`] treats it).
fn node_limit(pool: &NodePool) -> Option<i64> {
    pool.spec.limits.get(LIMIT_NODES).map(|q| {
        crate::scheduling::resources::parse_units(&q.0)
            .unwrap_or(0)
            .max(0)
    })
}

/// Decide for static NodePool `pool` (`spec.replicas` set; otherwise nothing to do): count its
/// NodeClaims in `snap` that are not being deleted; fewer than `replicas` → create the
/// difference, capped so that all its NodeClaims (deleting ones included, as upstream counts
/// them) stay within `limits.nodes`; more → delete the surplus. `types` are its node class's
/// instance types; `now` dates the lifetime that disruption cost is weighed by.
pub fn decide(
    snap: &Snapshot,
    pool: &Arc<NodePool>,
    types: &[Arc<InstanceType>],
    settings: &Settings,
    now: Timestamp,
) -> Decision {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let replicas = pool.spec.replicas.unwrap_or(0).max(0);
    let claims: Vec<&Arc<NodeClaim>> = snap
        .nodeclaims
        .iter()
        .filter(|c| nodepool_of(c.metadata.labels.as_ref()) == Some(name.as_str()))
        .collect();
    let active: Vec<&Arc<NodeClaim>> = claims
        .iter()
        .copied()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .collect();
    let have = i64::try_from(active.len()).unwrap_or(i64::MAX);
    let total = i64::try_from(claims.len()).unwrap_or(i64::MAX);
    // NodeClaims an upgrade step or a disruption command is replacing count against
    // `replicas` when creating (their replacement is on its way), not when removing (upstream
    // leaves PendingDisruption out of the scale-down count).
    let removable: Vec<&Arc<NodeClaim>> = active
        .iter()
        .copied()
        .filter(|c| !pending_disruption(c))
        .collect();
    let keep = i64::try_from(removable.len()).unwrap_or(i64::MAX);
    let mut decision = Decision {
        create: Vec::new(),
        delete: Vec::new(),
        verdict: Verdict::Satisfied { replicas },
    };
    if keep > replicas {
        let surplus = usize::try_from(keep - replicas).unwrap_or(0);
        decision.delete = removal_order(snap, &removable, now)
            .into_iter()
            .take(surplus)
            .collect();
        decision.verdict = Verdict::Scaling { have, replicas };
        return decision;
    }
    let wanted = replicas - have;
    let limit = node_limit(pool);
    let allowed = limit.map_or(wanted, |l| wanted.min((l - total).max(0)));
    if let Some(l) = limit.filter(|&l| l < replicas) {
        decision.verdict = Verdict::NodeLimitReached { limit: l, replicas };
    } else if wanted > 0 {
        decision.verdict = Verdict::Scaling { have, replicas };
    }
    if allowed <= 0 {
        return decision;
    }
    match static_claim(snap, pool, types) {
        Ok(claim) => {
            let nodeclaim = template::nodeclaim(pool, &claim, &settings.hash_versions);
            for _ in 0..allowed {
                decision.create.push(PlannedNodeClaim {
                    nodeclaim: nodeclaim.clone(),
                    nodepool: Arc::clone(pool),
                    decision: claim.clone(),
                });
            }
        }
        Err(why) => decision.verdict = Verdict::NoInstanceType(why),
    }
    decision
}

/// The NodeClaim a static pool launches: its requirements, sized for its DaemonSet pods, on the
/// instance types that hold them, cheapest available offering first, narrowed as every new
/// NodeClaim is ([`choices::accepted`]). Upstream leaves the choice to the cloud provider's
/// launch ("cheapest instance possible"); here the NodeClaim lists it, so `status`,
/// `simulate` and limits see the same options the launch tries.
///
/// Errors: the requirements do not parse, or no type fits and meets `minValues`.
fn static_claim(
    snap: &Snapshot,
    pool: &Arc<NodePool>,
    types: &[Arc<InstanceType>],
) -> Result<NewClaim, String> {
    let requirements = template::pool_requirements(pool).map_err(|e| e.to_string())?;
    let (tmpl, requests) = template::pool_template(
        pool,
        requirements.clone(),
        types,
        snap,
        &TypeIndex::default(),
    );
    let mut fitting: Vec<(f64, Arc<InstanceType>)> = tmpl
        .instance_types
        .iter()
        .filter(|t| t.compatible(&requirements) && requests.fits_in(&t.allocatable))
        .filter_map(|t| {
            t.cheapest_offering(&requirements)
                .map(|o| (o.price, Arc::clone(t)))
        })
        .collect();
    fitting.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.name.cmp(&b.1.name)));
    let fitting: Vec<Arc<InstanceType>> = fitting.into_iter().map(|(_, t)| t).collect();
    if fitting.is_empty() {
        return Err(format!(
            "no instance type the NodePool allows has an available offering and room for its \
             DaemonSet pods ({requests})"
        ));
    }
    if let Some(short) = choices::min_values_shortfall(&requirements, &fitting) {
        return Err(format!(
            "minValues requirement is not met: {} needs {} distinct values, the instance types \
             offer {}",
            short.key, short.needed, short.left
        ));
    }
    let instance_types: Vec<Arc<InstanceType>> = choices::accepted(&requirements, &fitting)
        .into_iter()
        .map(|i| Arc::clone(&fitting[i]))
        .collect();
    let mut capacity_types: Vec<String> = instance_types
        .iter()
        .flat_map(|t| {
            t.offerings
                .iter()
                .filter(|o| o.available && o.compatible(&requirements))
                .map(|o| o.capacity_type.clone())
        })
        .collect();
    capacity_types.sort();
    capacity_types.dedup();
    let mut reqs = requirements;
    reqs.add(Requirement::is_in(CAPACITY_TYPE_LABEL, capacity_types));
    let min_values = reqs.get(INSTANCE_TYPE_LABEL).and_then(|r| r.min_values);
    reqs.remove(INSTANCE_TYPE_LABEL);
    let mut listed = Requirement::is_in(
        INSTANCE_TYPE_LABEL,
        instance_types.iter().map(|t| t.name.clone()),
    );
    listed.min_values = min_values;
    reqs.add(listed);
    Ok(NewClaim {
        nodepool: tmpl.name,
        requirements: reqs,
        instance_types,
        fitting,
        requests,
        pods: Vec::new(),
        min_values_relaxed: false,
    })
}

/// How a NodeClaim ranks for removal when a static pool scales down: lower goes first.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
struct RemovalRank {
    /// 0 not launched (no providerID), 1 a node without reschedulable pods, 2 the rest.
    tier: u8,
    /// A pod on the node opts out of disruption (`karpenter.sh/do-not-disrupt: "true"`).
    opted_out: bool,
    /// Summed eviction cost of its reschedulable pods times the fraction of its lifetime
    /// (`expireAfter`) left, upstream's disruption cost.
    cost: f64,
}

/// `active` in the order a static pool removes them (upstream `getDeprovisioningCandidates`):
/// NodeClaims not yet launched; then nodes without reschedulable pods (none opting out of
/// disruption); then the rest, those without a do-not-disrupt pod first, cheapest disruption
/// cost first. Ties by name.
fn removal_order(
    snap: &Snapshot,
    active: &[&Arc<NodeClaim>],
    now: Timestamp,
) -> Vec<Arc<NodeClaim>> {
    let mut ranked: Vec<(RemovalRank, &Arc<NodeClaim>)> = active
        .iter()
        .map(|claim| (rank(snap, claim, now), *claim))
        .collect();
    ranked.sort_by(|(a, x), (b, y)| {
        a.partial_cmp(b)
            .unwrap_or(Ordering::Equal)
            .then(x.metadata.name.cmp(&y.metadata.name))
    });
    ranked.into_iter().map(|(_, c)| Arc::clone(c)).collect()
}

fn rank(snap: &Snapshot, claim: &NodeClaim, now: Timestamp) -> RemovalRank {
    let status = claim.status.as_ref();
    let launched = status
        .and_then(|s| s.provider_id.as_deref())
        .is_some_and(|id| !id.is_empty());
    if !launched {
        return RemovalRank {
            tier: 0,
            opted_out: false,
            cost: 0.0,
        };
    }
    let node = status.and_then(|s| s.node_name.as_deref());
    let pods: Vec<_> = snap
        .pods
        .iter()
        .filter(|p| node.is_some() && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == node)
        .filter(|p| is_reschedulable(p))
        .collect();
    let opted_out = pods
        .iter()
        .any(|p| opts_out(p.metadata.annotations.as_ref()));
    let remaining = match (
        expires_at(claim),
        claim.metadata.creation_timestamp.as_ref(),
    ) {
        (Some(end), Some(created)) => {
            let life = end.duration_since(created.0).as_secs_f64();
            let left = end.duration_since(now).as_secs_f64();
            if life > 0.0 {
                (left / life).clamp(0.0, 1.0)
            } else {
                0.0
            }
        }
        _ => 1.0,
    };
    let cost: f64 = pods.iter().map(|p| eviction_cost(p)).sum::<f64>() * remaining;
    RemovalRank {
        tier: if pods.is_empty() { 1 } else { 2 },
        opted_out,
        cost,
    }
}

#[cfg(test)]
#[path = "static_capacity_tests.rs"]
mod tests;
