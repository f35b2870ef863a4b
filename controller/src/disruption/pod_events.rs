//! Upstream's pod-event tracking (`nodeclaim/podevents`, `nodeclaim/disruption/consolidation.go`):
//! each NodeClaim's `status.lastPodEventTime` (when a pod last arrived on or left its node) and
//! its `Consolidatable` condition, which `consolidateAfter` counts from.

use std::collections::{BTreeSet, HashMap};

use crds::conditions::{CONSOLIDATABLE, INITIALIZED};
use crds::{NodeClaim, StatusConditions, conditions};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_core::disruption::candidates::consolidatable_at;
use karpenter_core::snapshot::{Snapshot, nodepool_of};
use kube::ResourceExt;

use crate::nodeclaim::writes::set_condition;
use crate::runtime::Context;

/// Each NodeClaim's node's pod-event count (`ClusterState::pod_events`) at the last pass, by
/// NodeClaim name. In memory only: after a restart the counting starts again.
#[derive(Debug, Default)]
pub struct PodEvents {
    counts: HashMap<String, u64>,
}

impl PodEvents {
    /// Upstream's pod-event tracking: when a pod arrived on or left a NodeClaim's node since the
    /// last pass (counted by the pod cache as it applies each change, so a pod that came and
    /// went between two passes counts too), its `status.lastPodEventTime` becomes now (so
    /// `consolidateAfter` counts from the last change); and its `Consolidatable` condition
    /// follows `consolidateAfter`. Returns the NodeClaims whose pod event it wrote, as written.
    pub async fn write(
        &mut self,
        ctx: &Context,
        snap: &Snapshot,
        now: Timestamp,
    ) -> Vec<NodeClaim> {
        let mut written = Vec::new();
        let events = &ctx.state.pod_events;
        let nodes: BTreeSet<&str> = snap
            .nodes
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        events.retain(|n| nodes.contains(n));
        let pools: HashMap<&str, _> = snap
            .nodepools
            .iter()
            .filter_map(|p| Some((p.metadata.name.as_deref()?, p)))
            .collect();
        let mut seen = HashMap::new();
        for claim in &snap.nodeclaims {
            if claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(pool) = nodepool_of(claim.metadata.labels.as_ref()).and_then(|p| pools.get(p))
            else {
                continue;
            };
            let name = claim.name_any();
            let node = claim.status.as_ref().and_then(|s| s.node_name.as_deref());
            let count = node.map_or(0, |n| events.count(n));
            let before = self.counts.get(&name).copied();
            let changed = before.is_some_and(|c| c != count);
            let mut updated = (**claim).clone();
            if changed {
                updated
                    .status
                    .get_or_insert_with(Default::default)
                    .last_pod_event_time = Some(Time(now));
            }
            let consolidatable = consolidatable_at(&updated, pool).is_some_and(|at| at <= now);
            let initialized = conditions::is_true(claim.status_conditions(), INITIALIZED);
            let result = if changed {
                write_pod_event(ctx, claim, &updated, consolidatable && initialized).await
            } else if initialized {
                set_condition(ctx, claim, |set| {
                    if consolidatable {
                        set.set_true(CONSOLIDATABLE)
                    } else {
                        set.set_false(CONSOLIDATABLE, "NotConsolidatable", "")
                    }
                })
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
            } else {
                Ok(())
            };
            match result {
                // A pod event not written is written at the next pass, not lost.
                Err(e) if changed => {
                    tracing::debug!(nodeclaim = %name, error = %e, "writing pod event");
                    seen.insert(name, before.unwrap_or(count));
                }
                Err(e) => {
                    tracing::debug!(nodeclaim = %name, error = %e, "writing Consolidatable");
                    seen.insert(name, count);
                }
                Ok(()) => {
                    if changed {
                        written.push(updated);
                    }
                    seen.insert(name, count);
                }
            }
        }
        self.counts = seen;
        written
    }
}

/// Write a pod event: `lastPodEventTime` and the `Consolidatable` condition in one status patch.
async fn write_pod_event(
    ctx: &Context,
    before: &NodeClaim,
    after: &NodeClaim,
    consolidatable: bool,
) -> Result<(), String> {
    let mut after = after.clone();
    let mut set = after.condition_set(ctx.clock.now());
    if consolidatable {
        set.set_true(CONSOLIDATABLE);
    } else {
        set.set_false(CONSOLIDATABLE, "NotConsolidatable", "");
    }
    crate::nodeclaim::writes::write_status(ctx, before, &after)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}
