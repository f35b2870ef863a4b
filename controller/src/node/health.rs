//! Node repair (upstream `pkg/controllers/node/health`; started only with the `NodeRepair`
//! feature gate and a cloud provider that has repair policies): executes
//! `karpenter_core::lifecycle::repair::decide` over the caches. A node whose condition matches a
//! repair policy for longer than the policy tolerates has its NodeClaim stamped with
//! `karpenter.sh/nodeclaim-termination-timestamp` = now (its drain then deletes pods without
//! waiting for PodDisruptionBudgets) and deleted through [`disrupt_claim`] with the
//! `DisruptionReason` `Unhealthy`, which the termination finalizer records in the disruption
//! history; no budget applies and no replacement is launched first (the provisioner serves
//! the evicted pods). While more than 20% of a NodePool's nodes are unhealthy, repair holds
//! back and says so in a `NodeRepairBlocked` Event on the NodePool, the nodes and their
//! NodeClaims (deduplicated for 15 minutes, as upstream does).
//!
//! One pass decides for every node at once (the 20% rule needs them all). A pass runs when a
//! node's conditions change, as the node cache applies it (a trigger from the cache the pass
//! reads: a pass never decides on an older copy of the node that triggered it), when an
//! unhealthy node's toleration runs out, and at least every [`RECHECK`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crds::duration::human_duration;
use crds::labels::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION;
use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use karpenter_core::lifecycle::repair::{self, Blocked, Input, Repair, RepairPolicy, Scope};
use karpenter_core::snapshot::nodepool_of;
use serde_json::json;

use crate::nodeclaim::writes::{disrupt_claim, patch_metadata};
use crate::runtime::Context;
use crate::runtime::events::{EventSpec, EventType, NODE_REPAIR_BLOCKED_DEDUPE, reason, reference};
use crate::runtime::metrics;
use crate::runtime::reconcile::{CONFLICT_REQUEUE, ERROR_REQUEUE};

/// The longest a pass waits for a trigger (upstream re-checks a held-back repair after 5
/// minutes); changes only some other cache sees (a NodeClaim appearing for a node that was
/// already unhealthy) are picked up then.
pub const RECHECK: Duration = repair::BLOCKED_RECHECK;

/// Run node repair until the task is aborted.
pub async fn run(ctx: Arc<Context>) {
    // Counting before the caches hold every node would misjudge the 20% rule.
    if ctx.state.wait_synced().await.is_err() {
        tracing::error!("node repair not started: the cluster state never synced");
        return;
    }
    let policies = ctx.cloud.repair_policies();
    if policies.is_empty() {
        tracing::info!("node repair off: the cloud provider has no repair policies");
        return;
    }
    let mut changes = std::pin::pin!(ctx.state.node_changes.subscribe().ready_chunks(1024));
    let mut health = Health::default();
    loop {
        let wait = health.pass(&ctx, &policies).await;
        let deadline = tokio::time::Instant::now() + wait;
        let mut jumps = ctx.clock_jumps.clone();
        jumps.mark_unchanged();
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => break,
                // The clock jumped: what `pass` measured on it may be due now.
                () = crate::runtime::next_jump(&mut jumps) => break,
                batch = changes.next() => match batch {
                    // Every node of the batch is remembered, so no `any` short-circuit.
                    Some(nodes) => {
                        let relevant = nodes
                            .iter()
                            .fold(false, |any, n| health.changed(n) | any);
                        if relevant {
                            break;
                        }
                    }
                    None => return,
                },
            }
        }
    }
}

/// What node repair remembers between passes.
#[derive(Default)]
struct Health {
    /// Per node name, what a pass depends on of it ([`fingerprint`]).
    seen: HashMap<String, String>,
    /// Per blocked scope, the (unhealthy, total) counts last logged.
    blocked: BTreeMap<Scope, (usize, usize)>,
}

impl Health {
    /// Whether `node` changed in a way that can change a decision; remembers it.
    fn changed(&mut self, node: &Node) -> bool {
        let name = node.metadata.name.clone().unwrap_or_default();
        let print = fingerprint(node);
        self.seen.insert(name, print.clone()).as_ref() != Some(&print)
    }

    /// Decide and execute once; returns how long to wait for a trigger.
    async fn pass(&mut self, ctx: &Context, policies: &[RepairPolicy]) -> Duration {
        let now = ctx.clock.now();
        let (nodes, claims, pools) = (
            ctx.state.nodes.state(),
            ctx.state.nodeclaims.state(),
            ctx.state.nodepools.state(),
        );
        let decision = repair::decide(&Input {
            nodes: &nodes,
            nodeclaims: &claims,
            nodepools: &pools,
            policies,
            now,
        });
        self.report_blocked(ctx, &decision.blocked);
        let mut wait = decision
            .recheck_at
            .and_then(|at| Duration::try_from(at.duration_since(now)).ok())
            .unwrap_or(RECHECK)
            .min(RECHECK);
        for r in &decision.repairs {
            if let Err(e) = execute(ctx, r, now).await {
                let conflict = matches!(&e, kube::Error::Api(s) if s.code == 409);
                let name = r.nodeclaim.metadata.name.as_deref().unwrap_or_default();
                if conflict {
                    tracing::debug!(nodeclaim = %name, error = %e, "repair conflicted; retrying");
                    wait = wait.min(CONFLICT_REQUEUE);
                } else {
                    tracing::warn!(nodeclaim = %name, error = %e, "repair failed; retrying");
                    wait = wait.min(ERROR_REQUEUE);
                }
            }
        }
        wait
    }

    /// Publish the `NodeRepairBlocked` Events of every held-back scope (the recorder drops
    /// repeats within 15 minutes) and log each scope when its counts change.
    fn report_blocked(&mut self, ctx: &Context, blocked: &[Blocked]) {
        let mut now_blocked = BTreeMap::new();
        for b in blocked {
            let message = b.message();
            let counts = (b.unhealthy, b.total);
            if self.blocked.get(&b.scope) != Some(&counts) {
                let scope = match &b.scope {
                    Scope::NodePool(name) => name.as_str(),
                    Scope::Cluster => "",
                };
                tracing::warn!(nodepool = %scope, unhealthy = b.unhealthy, nodes = b.total,
                    allowed = b.allowed, held = b.held.len(), "node repair blocked");
            }
            now_blocked.insert(b.scope.clone(), counts);
            let publish = |regarding| {
                ctx.recorder.publish(EventSpec {
                    regarding,
                    type_: EventType::Warning,
                    reason: reason::NODE_REPAIR_BLOCKED,
                    message: message.clone(),
                    dedupe: NODE_REPAIR_BLOCKED_DEDUPE,
                });
            };
            if let Some(pool) = &b.nodepool {
                publish(reference(pool.as_ref()));
            }
            for (node, claim, _) in &b.held {
                publish(reference(node.as_ref()));
                publish(reference(claim.as_ref()));
            }
        }
        self.blocked = now_blocked;
    }
}

/// What a pass depends on of a node: whether it is being deleted, its NodePool label, and each
/// condition's type, status and lastTransitionTime (upstream's trigger compares the same;
/// heartbeats and status counters do not count).
fn fingerprint(node: &Node) -> String {
    let mut conditions: Vec<String> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .map(|c| {
            let at = c.last_transition_time.as_ref().map(|t| t.0.to_string());
            format!("{}={}@{}", c.type_, c.status, at.unwrap_or_default())
        })
        .collect();
    conditions.sort();
    format!(
        "{}|{}|{}",
        node.metadata.deletion_timestamp.is_some(),
        nodepool_of(node.metadata.labels.as_ref()).unwrap_or_default(),
        conditions.join(",")
    )
}

/// The `DisruptionReason` message and Event of a repair, e.g. `Repairing node ip-10-0-1-5:
/// Ready=False for 31m, longer than the 30m its repair policy tolerates`.
pub fn message(r: &Repair, node: &str) -> String {
    let human = |d: Duration| human_duration(SignedDuration::try_from(d).unwrap_or_default());
    let held = if r.unhealthy.since.is_some() {
        format!(" for {}", human(r.held_for))
    } else {
        String::new()
    };
    format!(
        "Repairing node {node}: {}{held}, longer than the {} its repair policy tolerates",
        r.unhealthy.policy.condition(),
        human(r.unhealthy.policy.toleration)
    )
}

/// Execute one repair: the termination timestamp first (guarded by the resourceVersion read),
/// then the delete through [`disrupt_claim`], counted once as `karpenter_nodeclaims_disrupted_total
/// {reason="unhealthy"}` with a `DisruptionTerminating` Event. Gone: nothing to do.
///
/// Errors: 409 when the NodeClaim changed since it was read (the next pass decides again), or
/// any other API failure.
async fn execute(ctx: &Context, r: &Repair, now: Timestamp) -> Result<(), kube::Error> {
    let mut claim = (*r.nodeclaim).clone();
    let name = claim.metadata.name.clone().unwrap_or_default();
    let node = r.node.metadata.name.clone().unwrap_or_default();
    if let Some(at) = r.termination_timestamp {
        let at = at.to_string();
        let written = patch_metadata(
            ctx,
            &name,
            json!({"resourceVersion": claim.metadata.resource_version,
                "annotations": {NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION: at}}),
        )
        .await;
        match written {
            Ok(version) => claim.metadata.resource_version = version,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(e) => return Err(e),
        }
        claim
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION.into(),
                at.clone(),
            );
        tracing::info!(nodeclaim = %name, node = %node, termination_timestamp = %at,
            "annotated nodeclaim");
    }
    if !r.delete {
        return Ok(());
    }
    let message = message(r, &node);
    if disrupt_claim(ctx, &claim, crds::history::reason::UNHEALTHY, &message).await? {
        ctx.metrics
            .nodeclaim_disrupted_with(&claim, metrics::reason::UNHEALTHY, None);
        tracing::info!(nodeclaim = %name, node = %node,
            condition = %r.unhealthy.policy.condition(),
            held_for = ?r.held_for, at = %now, "deleting unhealthy node");
        ctx.recorder.about(
            &claim,
            EventType::Warning,
            reason::DISRUPTION_TERMINATING,
            message.clone(),
        );
        ctx.recorder.about(
            r.node.as_ref(),
            EventType::Warning,
            reason::DISRUPTION_TERMINATING,
            message,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use testutil::{condition, node};

    #[test]
    fn only_condition_changes_trigger_a_pass() {
        let mut health = Health::default();
        let base = || {
            node("n1")
                .label(crds::labels::NODEPOOL_LABEL, "default")
                .with_condition(condition("Ready", "True").at("2026-01-01T00:00:00Z"))
        };
        assert!(health.changed(&base().build()), "a new node");
        assert!(!health.changed(&base().build()), "the same again");
        // Allocatable, other labels and heartbeats do not matter.
        assert!(!health.changed(&base().label("team", "a").allocatable("cpu", "2").build()));
        let failed = node("n1")
            .label(crds::labels::NODEPOOL_LABEL, "default")
            .with_condition(condition("Ready", "False").at("2026-01-01T00:00:00Z"))
            .build();
        assert!(health.changed(&failed), "a status change");
        let backdated = node("n1")
            .label(crds::labels::NODEPOOL_LABEL, "default")
            .with_condition(condition("Ready", "False").at("2025-12-31T23:00:00Z"))
            .build();
        assert!(health.changed(&backdated), "a new transition time");
        let moved = node("n1")
            .label(crds::labels::NODEPOOL_LABEL, "other")
            .with_condition(condition("Ready", "False").at("2025-12-31T23:00:00Z"))
            .build();
        assert!(health.changed(&moved), "another NodePool");
    }

    #[test]
    fn the_message_says_what_held_and_for_how_long() {
        let r = Repair {
            nodeclaim: Arc::new(testutil::nodeclaim("c").build()),
            node: Arc::new(node("n1").build()),
            unhealthy: repair::Unhealthy {
                policy: RepairPolicy::new("Ready", "False", 30),
                since: Some("2026-01-01T00:00:00Z".parse().expect("time")),
            },
            held_for: Duration::from_secs(31 * 60 + 5),
            termination_timestamp: None,
            delete: true,
        };
        assert_eq!(
            message(&r, "n1"),
            "Repairing node n1: Ready=False for 31m, longer than the 30m its repair policy \
             tolerates"
        );
        let unknown = Repair {
            unhealthy: repair::Unhealthy {
                since: None,
                ..r.unhealthy.clone()
            },
            ..r
        };
        assert_eq!(
            message(&unknown, "n1"),
            "Repairing node n1: Ready=False, longer than the 30m its repair policy tolerates"
        );
    }
}
