//! The provisioner's decision as data (upstream `provisioning/provisioner.go` `Schedule`): from
//! a cluster snapshot and the instance types each node class offers, which NodeClaims to create
//! (as the objects to send), which pending pods go to existing or in-flight capacity
//! (nominations), which pods cannot be placed and why, and which NodePools were left out. The
//! controller's executor (`controller::provisioning`) writes the NodeClaims, re-checks limits
//! against the latest state just before each create and publishes the Events.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use crds::labels::WELL_KNOWN_LABELS;
use crds::{NodeClaim, NodePool};

use super::listing;
use super::template::{self, SkipReason};
use crate::capacity::index::TypeIndex;
use crate::lifecycle::drift::HashVersions;
use crate::scheduling::choices::MinValuesPolicy;
use crate::scheduling::pod::{PodInfo, PodKey};
use crate::scheduling::resources::Resources;
use crate::scheduling::solver::{self, Input, LIMIT_NODES, NewClaim, within_limits};
use crate::scheduling::volumes::VolumeIndex;
use crate::snapshot::Snapshot;

/// What a pass is decided with besides the snapshot.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings {
    /// The drift hash versions stamped on the NodeClaims created.
    pub hash_versions: HashVersions,
    /// Run the solver's cost re-pack after first fit (`karpenter simulate` and the live
    /// provisioner do; see [`Input::repack`]).
    pub repack: bool,
    /// `MIN_VALUES_POLICY`: whether an unmet `minValues` stops a NodeClaim or is relaxed
    /// ([`Input::min_values_policy`]).
    pub min_values_policy: MinValuesPolicy,
}

pub use super::listing::Listing;

/// Where a pod was planned onto capacity that exists already.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A registered node, by name.
    Node(String),
    /// An in-flight NodeClaim (launched or not, no node yet), by name.
    NodeClaim(String),
}

impl fmt::Display for Target {
    /// `node/NAME` or `nodeclaim/NAME`, as upstream's `Nominated` Events name the target.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Node(name) => write!(f, "node/{name}"),
            Target::NodeClaim(name) => write!(f, "nodeclaim/{name}"),
        }
    }
}

/// A pending pod planned onto existing capacity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nomination {
    /// The pending pod.
    pub pod: PodKey,
    /// The node or in-flight NodeClaim it fits, named in its `Nominated` Event.
    pub target: Target,
}

/// A pending pod no pass can place, with the reason (upstream's `FailedScheduling` message
/// after `Failed to schedule pod, `).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The pod that stays pending.
    pub pod: PodKey,
    /// Why: its spec could not be read, or every NodePool's rejection.
    pub reason: String,
}

/// A NodeClaim to create: the object to send (`metadata.generateName` set, name empty) and the
/// solver's decision behind it (NodePool, instance-type options cheapest first, requests in
/// millicores and bytes, the pods planned onto it).
#[derive(Clone, Debug)]
pub struct PlannedNodeClaim {
    /// The NodeClaim to create.
    pub nodeclaim: NodeClaim,
    /// Its NodePool, as the snapshot held it.
    pub nodepool: Arc<NodePool>,
    /// The solver's decision it was built from.
    pub decision: NewClaim,
}

impl PlannedNodeClaim {
    /// The component-wise largest capacity among its instance-type options: what NodePool limits
    /// are checked against before it is created (cpu in millicores, memory in bytes, ...).
    pub fn largest_capacity(&self) -> Resources {
        self.decision
            .instance_types
            .iter()
            .fold(Resources::default(), |acc, t| acc.max(&t.capacity))
    }
}

/// One provisioning pass, decided: apply it in order.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Pods the pass considered (pending and provisionable).
    pub pods: usize,
    /// NodeClaims to create, in the solver's order.
    pub nodeclaims: Vec<PlannedNodeClaim>,
    /// Pods that fit existing nodes or in-flight NodeClaims.
    pub nominations: Vec<Nomination>,
    /// Pods that fit nowhere, and provisionable pods whose spec could not be read; each gets
    /// a `FailedScheduling` Event.
    pub failures: Vec<Failure>,
    /// NodePools left out of the pass and why (not ready, no node class, no compatible
    /// instance types, instance types not listed, ...), by name.
    pub skipped: Vec<(String, SkipReason)>,
    /// Every instance type listed for the pass, by name and per NodePool (overlays applied):
    /// what in-flight NodeClaims are sized with when limits are re-checked
    /// ([`Snapshot::pool_usage`]).
    pub types: TypeIndex,
}

/// What [`prepare`] hands the solver, and what [`plan`] needs to turn its output into a plan.
#[derive(Clone, Debug, Default)]
pub struct Prepared {
    /// The solver's input: provisionable pods (with volume requirements), existing capacity
    /// with its bound pods, and the usable NodePools as templates.
    pub input: Input,
    /// Usable NodePools, by name.
    pub pools: HashMap<String, Arc<NodePool>>,
    /// Every instance type listed, by name and per NodePool ([`listing::Listed::index`]).
    pub types: TypeIndex,
    /// NodePools left out, and why.
    pub skipped: Vec<(String, SkipReason)>,
    /// Provisionable pods whose spec could not be read, and why.
    pub unreadable: Vec<Failure>,
}

/// The solver's input for a pass: ready NodePools with their node class's instance types
/// (`listings`, by node class name, with the snapshot's NodeOverlays applied per NodePool,
/// [`listing::pool_types`]) as templates, with DaemonSet overhead and remaining limits; the
/// provisionable pods with their volume requirements; existing nodes and in-flight NodeClaims
/// with the pods bound to them. Consolidation, interruption and upgrade replacements are
/// simulated from this input too, so overlays reach them all.
pub fn prepare(
    snap: &Snapshot,
    listings: &HashMap<String, Listing>,
    settings: &Settings,
) -> Prepared {
    let mut out = Prepared::default();
    let mut usable = Vec::new();
    let listed = listing::pool_types(snap, listings);
    out.types = listed.index;
    for (pool, types) in listed.pools {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let types = match types {
            Ok(types) => types,
            Err(why) => {
                out.skipped.push((name, why));
                continue;
            }
        };
        match template::usable_requirements(&pool, &types) {
            Ok(reqs) => usable.push((pool, reqs, types)),
            Err(why) => out.skipped.push((name, why)),
        }
    }
    let mut overhead_by_pool = HashMap::new();
    let mut templates = Vec::new();
    for (pool, reqs, types) in usable {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let (tmpl, overhead) = template::pool_template(&pool, reqs, &types, snap, &out.types);
        templates.push(tmpl);
        overhead_by_pool.insert(name.clone(), overhead);
        out.pools.insert(name, pool);
    }
    let volumes = VolumeIndex::new(&snap.pvcs, &snap.pvs, &snap.storage_classes);
    let mut infos = Vec::new();
    for pod in snap.provisionable_pods() {
        match PodInfo::from_pod(&pod) {
            Ok(mut info) => {
                info.add_volume_requirements(&volumes.requirements(&pod));
                info.volumes = volumes.attachments(&pod);
                infos.push(info);
            }
            Err(e) => out.unreadable.push(Failure {
                pod: PodKey::of(&pod),
                reason: e.to_string(),
            }),
        }
    }
    let existing = snap.existing_capacity(&overhead_by_pool, &out.types);
    let names: HashSet<String> = existing.iter().map(|e| e.name.clone()).collect();
    out.input = Input {
        pods: infos,
        bound_pods: snap.bound_pods(&names),
        existing,
        nodepools: templates,
        well_known_labels: WELL_KNOWN_LABELS.iter().map(|s| s.to_string()).collect(),
        namespaces: snap.namespace_labels(),
        repack: settings.repack,
        min_values_policy: settings.min_values_policy,
    };
    out
}

/// Decide one provisioning pass: [`prepare`], solve, and turn the solver's output into the
/// NodeClaims to create, the nominations and the failures. Pure; the solve can take seconds for
/// tens of thousands of pods, so async callers run it off their runtime.
pub fn plan(snap: &Snapshot, listings: &HashMap<String, Listing>, settings: &Settings) -> Plan {
    let prepared = prepare(snap, listings, settings);
    let output = solver::solve(&prepared.input);
    let nodes: HashSet<&str> = snap
        .nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    let nodeclaims = output
        .new_claims
        .into_iter()
        .filter_map(|decision| {
            let pool = prepared.pools.get(&decision.nodepool)?;
            Some(PlannedNodeClaim {
                nodeclaim: template::nodeclaim(pool, &decision, &settings.hash_versions),
                nodepool: Arc::clone(pool),
                decision,
            })
        })
        .collect();
    let nominations = output
        .existing
        .into_iter()
        .flat_map(|(target, pods)| {
            let target = if nodes.contains(target.as_str()) {
                Target::Node(target)
            } else {
                Target::NodeClaim(target)
            };
            pods.into_iter().map(move |pod| Nomination {
                pod,
                target: target.clone(),
            })
        })
        .collect();
    let mut failures = prepared.unreadable;
    // With no NodePool to try, say why each was left out: the fix is there, not in the pod.
    let left_out = (!prepared.skipped.is_empty()).then(|| {
        let why: Vec<String> = prepared
            .skipped
            .iter()
            .map(|(pool, why)| format!("nodepool {pool:?}: {why}"))
            .collect();
        format!("{} ({})", solver::NO_READY_NODEPOOL, why.join("; "))
    });
    failures.extend(output.errors.iter().map(|e| Failure {
        pod: e.pod.clone(),
        reason: match (&left_out, e.rejections.is_empty()) {
            (Some(why), true) => why.clone(),
            _ => e.to_string(),
        },
    }));
    Plan {
        pods: prepared.input.pods.len(),
        nodeclaims,
        nominations,
        failures,
        skipped: prepared.skipped,
        types: prepared.types,
    }
}

/// The limits of `pool` that a NodeClaim whose largest option is `largest` would exceed, given
/// what the NodePool already uses (`used`, and `count` NodeClaims): resource names, and `nodes`
/// when the node count is limited and reached. Empty when it fits (or the pool has no limits).
pub fn exceeded_limits(
    pool: &NodePool,
    largest: &Resources,
    used: &Resources,
    count: i64,
) -> Vec<String> {
    if pool.spec.limits.is_empty() {
        return Vec::new();
    }
    let remaining: BTreeMap<String, i64> = template::remaining_limits(pool, used, count);
    if within_limits(largest, &remaining) {
        return Vec::new();
    }
    remaining
        .iter()
        .filter(|(k, v)| {
            if k.as_str() == LIMIT_NODES {
                **v < 1
            } else {
                largest.get(k) > **v
            }
        })
        .map(|(k, _)| k.clone())
        .collect()
}

#[cfg(test)]
mod tests;
