//! The consolidation simulator (upstream `disruption/helpers.go` `SimulateScheduling` and the
//! replacement's pricing in `consolidation.go`): removes a set of candidates from one snapshot
//! and schedules their pods, with every pending pod, onto what remains, in-flight NodeClaims and
//! new NodeClaims, by the provisioner's solver. Its verdict is delete, replace with one cheaper
//! NodeClaim, or why neither; [`Placement`]s say where each moving pod went.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crds::NodePool;
use crds::labels::{
    CAPACITY_TYPE_LABEL, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, INSTANCE_TYPE_LABEL,
};

use super::candidates::Candidate;
use super::consolidation::{
    Action, Replacement, SPOT_TO_SPOT_MIN_OPTIONS, Settings, Unconsolidatable,
};
use crate::capacity::InstanceType;
use crate::provisioning::plan::{self, Listing, PlannedNodeClaim};
use crate::provisioning::template;
use crate::scheduling::choices;
use crate::scheduling::pod::{PodInfo, PodKey};
use crate::scheduling::requirements::Requirement;
use crate::scheduling::solver::{self, Input, NewClaim};
use crate::scheduling::volumes::VolumeIndex;
use crate::snapshot::Snapshot;

/// Whether a pod takes part in inter-pod constraints: topology spread, (anti-)affinity, or host
/// ports. Bound pods matter to a solve only through these.
fn interacts(p: &PodInfo) -> bool {
    let c = &p.constraints;
    !(c.spread.is_empty()
        && c.affinity.is_empty()
        && c.anti_affinity.is_empty()
        && c.preferred_affinity.is_empty()
        && c.preferred_anti_affinity.is_empty()
        && c.host_ports.is_empty())
}

/// Simulates removing sets of candidates with the provisioner's solver, over one snapshot.
pub struct Simulator<'a> {
    base: Input,
    /// The bound pods, kept aside while no pod in play interacts with others ([`interacts`]):
    /// then they change nothing in a solve, and leaving them out saves counting tens of
    /// thousands of pods per simulation.
    bound: Vec<crate::scheduling::solver::BoundPod>,
    bound_interact: bool,
    pools: HashMap<String, Arc<NodePool>>,
    pending: HashSet<PodKey>,
    volumes: VolumeIndex,
    settings: &'a Settings,
}

impl<'a> Simulator<'a> {
    /// The solver's input for `snap` (as the provisioner prepares it: ready NodePools with the
    /// instance types in `listings`, existing nodes and in-flight NodeClaims, pending pods).
    pub fn new(
        snap: &Snapshot,
        listings: &HashMap<String, Listing>,
        settings: &'a Settings,
    ) -> Self {
        let solve = plan::Settings {
            hash_versions: settings.hash_versions.clone(),
            repack: false,
            min_values_policy: settings.min_values_policy,
        };
        let mut prepared = plan::prepare(snap, listings, &solve);
        let pending = prepared.input.pods.iter().map(|p| p.key.clone()).collect();
        let bound_interact = prepared.input.bound_pods.iter().any(|b| interacts(&b.pod))
            || prepared.input.pods.iter().any(interacts);
        let bound = std::mem::take(&mut prepared.input.bound_pods);
        Simulator {
            bound,
            bound_interact,
            base: prepared.input,
            pools: prepared.pools,
            pending,
            volumes: VolumeIndex::new(&snap.pvcs, &snap.pvs, &snap.storage_classes),
            settings,
        }
    }

    /// What removing `candidates` would take: delete them, replace them with one cheaper
    /// NodeClaim, or why neither. The solver's input is borrowed and restored, not copied: a
    /// pass simulates hundreds of sets over thousands of bound pods.
    pub fn simulate(&mut self, candidates: &[&Candidate]) -> Result<Action, Unconsolidatable> {
        self.simulate_placed(candidates).0
    }

    /// [`Simulator::simulate`], and where the solver put each pod of the candidates: an
    /// existing node or in-flight NodeClaim (by name), the one new NodeClaim, or nowhere. The
    /// placements are those of the solve, whatever the verdict (`kubectl karpenter disruption
    /// explain` shows them for a node that cannot go).
    pub fn simulate_placed(
        &mut self,
        candidates: &[&Candidate],
    ) -> (Result<Action, Unconsolidatable>, Vec<Placement>) {
        let mut moving = HashSet::new();
        let mut infos = Vec::new();
        for c in candidates {
            for pod in &c.pods {
                let Ok(mut info) = PodInfo::from_pod(pod) else {
                    let why = Unconsolidatable::PodWouldNotSchedule {
                        pod: PodKey::of(pod).to_string(),
                        why: "its spec cannot be read".into(),
                    };
                    return (Err(why), Vec::new());
                };
                info.add_volume_requirements(&self.volumes.requirements(pod));
                info.volumes = self.volumes.attachments(pod);
                moving.insert(info.key.clone());
                infos.push(info);
            }
        }
        let removed_names: HashSet<&str> = candidates.iter().map(|c| c.node_name()).collect();
        let mut removed = Vec::new();
        let mut i = 0;
        while i < self.base.existing.len() {
            if removed_names.contains(self.base.existing[i].name.as_str()) {
                removed.push(self.base.existing.swap_remove(i));
            } else {
                i += 1;
            }
        }
        let pending = self.base.pods.len();
        let with_bound = self.bound_interact || infos.iter().any(interacts);
        self.base.pods.extend(infos);
        if with_bound {
            std::mem::swap(&mut self.base.bound_pods, &mut self.bound);
        }
        let out = solver::solve(&self.base);
        if with_bound {
            std::mem::swap(&mut self.base.bound_pods, &mut self.bound);
        }
        self.base.pods.truncate(pending);
        self.base.existing.extend(removed);
        let placements = placements(&out, &moving);
        if let Some(e) = out.errors.iter().find(|e| moving.contains(&e.pod)) {
            let why = Unconsolidatable::PodWouldNotSchedule {
                pod: e.pod.to_string(),
                why: e.to_string(),
            };
            return (Err(why), placements);
        }
        let needed: Vec<NewClaim> = out
            .new_claims
            .into_iter()
            .filter(|c| c.pods.iter().any(|p| !self.pending.contains(p)))
            .collect();
        let verdict = match needed.len() {
            0 => Ok(Action::Delete),
            1 => self.replacement(candidates, needed.into_iter().next().expect("one")),
            n => Err(Unconsolidatable::NeedsSeveralNodeClaims { count: n }),
        };
        (verdict, placements)
    }

    /// A replacement for a node whose `pods` must move to a node launched from its NodePool's
    /// current template (a drifted node): the solver places those pods alone (no existing node,
    /// no pending pod), so the replacement honours their zones, volumes, affinities and spread
    /// as a provisioned node would. `Ok(None)` when nothing needs placing (an empty node).
    ///
    /// Errors: a pod does not schedule on any NodePool, or needs more than one new NodeClaim.
    pub fn replacement_for(
        &mut self,
        pods: &[Arc<crate::pod_view::PodView>],
    ) -> Result<Option<PlannedNodeClaim>, Unconsolidatable> {
        let mut infos = Vec::new();
        for pod in pods {
            let Ok(mut info) = PodInfo::from_pod(pod) else {
                return Err(Unconsolidatable::PodWouldNotSchedule {
                    pod: PodKey::of(pod).to_string(),
                    why: "its spec cannot be read".into(),
                });
            };
            info.add_volume_requirements(&self.volumes.requirements(pod));
            info.volumes = self.volumes.attachments(pod);
            infos.push(info);
        }
        if infos.is_empty() {
            return Ok(None);
        }
        let pending = std::mem::replace(&mut self.base.pods, infos);
        let existing = std::mem::take(&mut self.base.existing);
        // Nothing exists in this solve: bound pods, whose nodes are not in it, count for nothing.
        let out = solver::solve(&self.base);
        self.base.pods = pending;
        self.base.existing = existing;
        if let Some(e) = out.errors.first() {
            return Err(Unconsolidatable::PodWouldNotSchedule {
                pod: e.pod.to_string(),
                why: e.to_string(),
            });
        }
        let mut claims = out.new_claims;
        if claims.len() > 1 {
            return Err(Unconsolidatable::NeedsSeveralNodeClaims {
                count: claims.len(),
            });
        }
        let Some(decision) = claims.pop() else {
            return Ok(None);
        };
        let Some(pool) = self.pools.get(&decision.nodepool) else {
            return Err(Unconsolidatable::NeedsSeveralNodeClaims { count: 0 });
        };
        Ok(Some(PlannedNodeClaim {
            nodeclaim: template::nodeclaim(pool, &decision, &self.settings.hash_versions),
            nodepool: Arc::clone(pool),
            decision,
        }))
    }

    /// The one new NodeClaim as a replacement, if it can be made strictly cheaper within the
    /// capacity-type rules.
    fn replacement(
        &self,
        candidates: &[&Candidate],
        mut decision: NewClaim,
    ) -> Result<Action, Unconsolidatable> {
        let current: Option<f64> = candidates.iter().map(|c| c.price).sum();
        let all_spot = candidates
            .iter()
            .all(|c| c.capacity_type == CAPACITY_TYPE_SPOT);
        let allows = |ct: &str| {
            decision
                .requirements
                .get(CAPACITY_TYPE_LABEL)
                .is_none_or(|r| r.has(ct))
        };
        let spot_to_spot = all_spot && allows(CAPACITY_TYPE_SPOT);
        if !self.settings.spot_to_spot {
            if all_spot {
                return Err(Unconsolidatable::SpotToSpotDisabled);
            }
            if !allows(CAPACITY_TYPE_ON_DEMAND) {
                return Err(Unconsolidatable::SpotToSpotDisabled);
            }
            decision.requirements.add(Requirement::is_in(
                CAPACITY_TYPE_LABEL,
                [CAPACITY_TYPE_ON_DEMAND],
            ));
        } else if allows(CAPACITY_TYPE_SPOT) && allows(CAPACITY_TYPE_ON_DEMAND) {
            // As upstream: the options were priced assuming spot launches; an on-demand
            // fallback could cost more than the nodes it replaces.
            decision.requirements.add(Requirement::is_in(
                CAPACITY_TYPE_LABEL,
                [CAPACITY_TYPE_SPOT],
            ));
        }
        let priced = rechoose(&mut decision);
        let cheapest = priced.iter().map(|(p, _)| *p).fold(f64::INFINITY, f64::min);
        let Some(current) = current else {
            return Err(Unconsolidatable::NotCheaper {
                current: None,
                replacement: cheapest,
            });
        };
        let mut cheaper: Vec<(f64, Arc<InstanceType>)> =
            priced.into_iter().filter(|(p, _)| *p < current).collect();
        cheaper.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.name.cmp(&b.1.name)));
        if cheaper.is_empty() {
            return Err(Unconsolidatable::NotCheaper {
                current: Some(current),
                replacement: cheapest,
            });
        }
        if spot_to_spot && self.settings.spot_to_spot {
            if candidates.len() == 1 && cheaper.len() < SPOT_TO_SPOT_MIN_OPTIONS {
                return Err(Unconsolidatable::TooFewSpotOptions {
                    options: cheaper.len(),
                });
            }
            cheaper.truncate(SPOT_TO_SPOT_MIN_OPTIONS.max(min_values_needed(&decision)));
        }
        let types: Vec<Arc<InstanceType>> = cheaper.iter().map(|(_, t)| Arc::clone(t)).collect();
        check_min_values(&decision, &types)?;
        decision.requirements.add(Requirement::is_in(
            INSTANCE_TYPE_LABEL,
            types.iter().map(|t| t.name.clone()),
        ));
        decision.instance_types = types;
        let Some(pool) = self.pools.get(&decision.nodepool) else {
            return Err(Unconsolidatable::NeedsSeveralNodeClaims { count: 0 });
        };
        let price = cheaper[0].0;
        Ok(Action::Replace(Box::new(Replacement {
            planned: PlannedNodeClaim {
                nodeclaim: template::nodeclaim(pool, &decision, &self.settings.hash_versions),
                nodepool: Arc::clone(pool),
                decision,
            },
            price,
        })))
    }
}

/// Where one moving pod went in a simulation.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// The pod, `namespace/name`.
    pub pod: String,
    /// Its destination.
    pub to: Destination,
}

/// A pod's destination in a simulation.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Destination {
    /// A node, or an in-flight NodeClaim, that exists already.
    Existing {
        /// The node's (or in-flight NodeClaim's) name.
        name: String,
    },
    /// A NodeClaim the simulation would create.
    #[serde(rename_all = "camelCase")]
    NewNodeClaim {
        /// Which new NodeClaim of the simulation, counted from 0 (pods sharing it share a node).
        claim: usize,
        /// Its NodePool.
        nodepool: String,
        /// Its cheapest instance-type option, e.g. `m5.large`.
        instance_type: String,
        /// How many instance types it could launch.
        options: usize,
        /// Its cheapest offering, USD/hour.
        price: Option<f64>,
    },
    /// Nowhere: the pod would not schedule.
    Unschedulable {
        /// The solver's reason.
        why: String,
    },
}

/// The destination of every pod of `moving` in a solve, in pod order.
fn placements(out: &solver::Output, moving: &HashSet<PodKey>) -> Vec<Placement> {
    let mut placed = Vec::new();
    for (name, pods) in &out.existing {
        for p in pods.iter().filter(|p| moving.contains(*p)) {
            placed.push((p.clone(), Destination::Existing { name: name.clone() }));
        }
    }
    for (i, claim) in out.new_claims.iter().enumerate() {
        let to = Destination::NewNodeClaim {
            claim: i,
            nodepool: claim.nodepool.clone(),
            instance_type: claim
                .instance_types
                .first()
                .map(|t| t.name.clone())
                .unwrap_or_default(),
            options: claim.instance_types.len(),
            price: claim.cheapest_price(),
        };
        for p in claim.pods.iter().filter(|p| moving.contains(*p)) {
            placed.push((p.clone(), to.clone()));
        }
    }
    for e in out.errors.iter().filter(|e| moving.contains(&e.pod)) {
        placed.push((
            e.pod.clone(),
            Destination::Unschedulable { why: e.to_string() },
        ));
    }
    placed.sort_by(|a, b| a.0.cmp(&b.0));
    placed
        .into_iter()
        .map(|(pod, to)| Placement {
            pod: pod.to_string(),
            to,
        })
        .collect()
}

/// The decision's options chosen again ([`choices::accepted`]) for its requirements as the
/// replacement launches with them (capacity type fixed), from every type that fits, with their
/// prices (USD/hour), cheapest first. The solver chose for the claim's own requirements, under
/// which, say, spot types dearer than on-demand ones go; an on-demand replacement keeps them.
/// The instance-type requirement is widened back to every fitting type (its `minValues` kept).
fn rechoose(decision: &mut NewClaim) -> Vec<(f64, Arc<InstanceType>)> {
    let min_values = decision
        .requirements
        .get(INSTANCE_TYPE_LABEL)
        .and_then(|r| r.min_values);
    decision.requirements.remove(INSTANCE_TYPE_LABEL);
    let mut fitting = Requirement::is_in(
        INSTANCE_TYPE_LABEL,
        decision.fitting.iter().map(|t| t.name.clone()),
    );
    fitting.min_values = min_values;
    decision.requirements.add(fitting);
    let mut priced: Vec<(f64, Arc<InstanceType>)> = decision
        .fitting
        .iter()
        .filter_map(|t| {
            t.cheapest_offering(&decision.requirements)
                .map(|o| (o.price, Arc::clone(t)))
        })
        .collect();
    priced.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.name.cmp(&b.1.name)));
    let types: Vec<&InstanceType> = priced.iter().map(|(_, t)| &**t).collect();
    choices::accepted(&decision.requirements, &types)
        .into_iter()
        .map(|i| priced[i].clone())
        .collect()
}

/// The largest `minValues` among a decision's requirements (0 without any).
fn min_values_needed(decision: &NewClaim) -> usize {
    decision
        .requirements
        .iter()
        .filter_map(|r| r.min_values)
        .max()
        .unwrap_or(0)
}

/// Every requirement with `minValues` still has that many distinct values among `types`.
fn check_min_values(
    decision: &NewClaim,
    types: &[Arc<InstanceType>],
) -> Result<(), Unconsolidatable> {
    match choices::min_values_shortfall(&decision.requirements, types) {
        None => Ok(()),
        Some(s) => Err(Unconsolidatable::MinValues {
            key: s.key,
            needed: s.needed,
            left: s.left,
        }),
    }
}
