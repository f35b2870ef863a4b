//! Garbage collection both ways between NodeClaims and the cloud's instances (upstream core
//! `nodeclaim/garbagecollection` and `aws:pkg/controllers/nodeclaim/garbagecollection`):
//!
//! - an instance the provider lists as this cluster's (tagged with a NodePool) that no NodeClaim
//!   accounts for (by providerID, or by the NodeClaim named in its tag while that NodeClaim is
//!   still launching) and that launched more than [`ORPHAN_MIN_AGE`] ago is terminated, with a
//!   log line naming it, and its Node, if one registered, is deleted;
//! - a launched NodeClaim whose instance the provider no longer lists, launched more than
//!   [`ORPHAN_MIN_AGE`] ago, is deleted with an Event (its finalizer then finds the instance gone);
//! - a Node labelled `karpenter.sh/nodepool` that no NodeClaim accounts for (by providerID, or
//!   through the NodeClaim its instance is tagged with) is reported with an `OrphanedNode` Event
//!   when first seen and, when it is Karpenter's (it has our termination finalizer or runs on an
//!   instance of this cluster), deleted once it has stayed orphaned for the `orphaned_node_grace`
//!   setting (our finalizer, if it has it, drains it and terminates the instance).
//!
//! Runs every 10 s for its first 20 passes, then every 2 minutes (upstream's cadence).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crds::NodeClaim;
use crds::conditions::{self, LAUNCHED};
use crds::labels::{NODEPOOL_LABEL, TERMINATION_FINALIZER};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::DeleteParams;

use crate::runtime::Context;
use crate::runtime::events::{DEFAULT_DEDUPE, EventSpec, EventType, reason, reference};
use karpenter_core::cloud::CloudError;
use karpenter_core::cloud::Instance;

/// Instances and NodeClaims younger than this are never collected: a launch may not have
/// written its providerID yet, and a list may lag a launch (upstream: 30 s).
pub const ORPHAN_MIN_AGE: SignedDuration = SignedDuration::from_secs(30);
const FAST_PERIOD: Duration = Duration::from_secs(10);
const FAST_PASSES: usize = 20;
const SLOW_PERIOD: Duration = Duration::from_secs(120);

/// What one pass decided: instances to terminate and NodeClaims to delete.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Collection {
    /// Instances to terminate: launched over [`ORPHAN_MIN_AGE`] ago, with no NodeClaim holding
    /// their providerID or, by tag, still launching for them.
    pub instances: Vec<Instance>,
    /// NodeClaims (names) whose instance is gone.
    pub nodeclaims: Vec<String>,
}

/// Decide what to collect from the cloud's list and the NodeClaims (pure).
pub fn plan(instances: &[Instance], claims: &[Arc<NodeClaim>], now: Timestamp) -> Collection {
    let claimed: HashSet<&str> = claims
        .iter()
        .filter_map(|c| c.status.as_ref()?.provider_id.as_deref())
        .collect();
    let launching: HashSet<&str> = claims
        .iter()
        .filter(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_none_or(str::is_empty)
        })
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    let old = |t: Timestamp| now.duration_since(t) >= ORPHAN_MIN_AGE;
    let orphans = instances
        .iter()
        .filter(|i| !claimed.contains(i.provider_id.as_str()))
        .filter(|i| {
            !i.nodeclaim
                .as_deref()
                .is_some_and(|n| launching.contains(n))
        })
        .filter(|i| old(i.launched_at))
        .cloned()
        .collect();
    let listed: HashSet<&str> = instances.iter().map(|i| i.provider_id.as_str()).collect();
    let gone = claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| {
            let conds = c
                .status
                .as_ref()
                .map(|s| s.conditions.as_slice())
                .unwrap_or_default();
            conditions::is_true(conds, LAUNCHED)
                && conds
                    .iter()
                    .find(|x| x.type_ == LAUNCHED)
                    .is_some_and(|x| old(x.last_transition_time.0))
        })
        .filter(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| !listed.contains(p))
        })
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    Collection {
        instances: orphans,
        nodeclaims: gone,
    }
}

/// Nodes that carry a NodePool label but that no NodeClaim accounts for, by name: not
/// deleting, and neither a NodeClaim with the node's providerID (or node name) nor the
/// NodeClaim named by its instance's tag exists (pure).
pub fn orphaned_nodes(
    nodes: &[Arc<Node>],
    claims: &[Arc<NodeClaim>],
    instances: &[Instance],
) -> Vec<String> {
    let claimed: HashSet<&str> = claims
        .iter()
        .filter_map(|c| c.status.as_ref()?.provider_id.as_deref())
        .collect();
    let claimed_nodes: HashSet<&str> = claims
        .iter()
        .filter_map(|c| c.status.as_ref()?.node_name.as_deref())
        .collect();
    let names: HashSet<&str> = claims
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    let tagged: HashMap<&str, &str> = instances
        .iter()
        .filter_map(|i| Some((i.provider_id.as_str(), i.nodeclaim.as_deref()?)))
        .collect();
    nodes
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter(|n| {
            n.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(NODEPOOL_LABEL))
        })
        .filter(|n| {
            let pid = n
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .unwrap_or("");
            let name = n.metadata.name.as_deref().unwrap_or("");
            !claimed.contains(pid)
                && !claimed_nodes.contains(name)
                && !tagged.get(pid).is_some_and(|c| names.contains(c))
        })
        .filter_map(|n| n.metadata.name.clone())
        .collect()
}

/// Orphaned Nodes seen so far, with when each was first seen orphaned.
type Sightings = HashMap<String, Timestamp>;

/// Run until the task is aborted.
pub async fn run(ctx: Arc<Context>) {
    if ctx.state.wait_synced().await.is_err() {
        return;
    }
    let mut passes = 0usize;
    let mut sightings = Sightings::new();
    loop {
        if let Err(e) = pass(&ctx, &mut sightings).await {
            tracing::warn!(error = %e, "garbage collection pass failed; retrying");
        }
        passes += 1;
        let period = if passes < FAST_PASSES {
            FAST_PERIOD
        } else {
            SLOW_PERIOD
        };
        ctx.pause(period).await;
    }
}

/// One pass: list, decide, act.
///
/// Errors: the cloud could not be listed (nothing is collected then).
async fn pass(ctx: &Context, sightings: &mut Sightings) -> Result<Collection, CloudError> {
    let instances = ctx.cloud.list().await?;
    let claims = ctx.state.nodeclaims.state();
    let now = ctx.clock.now();
    let decided = plan(&instances, &claims, now);
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    collect_nodes(ctx, &nodes, &claims, &instances, now, sightings).await;
    for i in &decided.instances {
        tracing::info!(instance = %i.id, provider_id = %i.provider_id, nodepool = ?i.nodepool,
            nodeclaim = ?i.nodeclaim, instance_type = %i.instance_type,
            "garbage collecting instance with no NodeClaim");
    }
    if let Err(e) = ctx.cloud.delete_instances(&decided.instances).await {
        tracing::warn!(error = %e, "terminating orphaned instances");
    }
    for i in &decided.instances {
        for node in ctx.state.node_for_provider_id(&i.provider_id) {
            if let Some(name) = node.metadata.name.as_deref() {
                match nodes.delete(name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => tracing::warn!(node = %name, error = %e, "deleting orphaned node"),
                }
            }
        }
    }
    for name in &decided.nodeclaims {
        if let Some(claim) = claims
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
        {
            ctx.recorder.publish(EventSpec {
                regarding: reference(claim.as_ref()),
                type_: EventType::Warning,
                reason: reason::INSTANCE_GONE,
                message: format!("NodeClaim {name}: its instance no longer exists; deleting it"),
                dedupe: DEFAULT_DEDUPE,
            });
        }
        tracing::info!(nodeclaim = %name, "garbage collecting nodeclaim whose instance is gone");
        let Some(claim) = claims
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
        else {
            continue;
        };
        // Counted only when this call started the deletion (not when the NodeClaim was
        // already deleting, or changed since it was read).
        let why = format!("NodeClaim {name}: its instance no longer exists");
        let gc = crds::history::reason::GARBAGE_COLLECTED;
        match super::writes::disrupt_claim(ctx, claim, gc, &why).await {
            Ok(true) => {
                let gc = crate::runtime::metrics::reason::GARBAGE_COLLECTED;
                ctx.metrics.nodeclaim_disrupted(claim, gc, &ctx.state);
            }
            Ok(false) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                tracing::debug!(nodeclaim = %name, "nodeclaim changed since it was read; next pass decides again");
            }
            Err(e) => tracing::warn!(nodeclaim = %name, error = %e, "deleting nodeclaim"),
        }
    }
    Ok(decided)
}

/// Report newly orphaned Nodes and delete those orphaned for longer than the grace period.
async fn collect_nodes(
    ctx: &Context,
    api: &Api<Node>,
    claims: &[Arc<NodeClaim>],
    instances: &[Instance],
    now: Timestamp,
    sightings: &mut Sightings,
) {
    let all = ctx.state.nodes.state();
    let orphans = orphaned_nodes(&all, claims, instances);
    sightings.retain(|name, _| orphans.contains(name));
    let grace = SignedDuration::try_from(ctx.settings.orphaned_node_grace).unwrap_or_default();
    for name in orphans {
        let Some(node) = all
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name.as_str()))
        else {
            continue;
        };
        // Only a node Karpenter registered (it has our finalizer) or one running on an
        // instance of this cluster is deleted; a node someone labelled by hand is only reported.
        let pid = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .unwrap_or("");
        let ours = node
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == TERMINATION_FINALIZER)
            || instances.iter().any(|i| i.provider_id == pid);
        let since = *sightings.entry(name.clone()).or_insert_with(|| {
            let what = if ours {
                format!(
                    "deleting it (and terminating its instance) in {}",
                    crds::duration::format_go_duration(ctx.settings.orphaned_node_grace)
                )
            } else {
                "not deleting it: it has neither Karpenter's finalizer nor an instance of this cluster".to_string()
            };
            ctx.recorder.about(
                node.as_ref(),
                EventType::Warning,
                reason::ORPHANED_NODE,
                format!("Node has label {NODEPOOL_LABEL} but no NodeClaim; {what}"),
            );
            tracing::warn!(node = %name, deletable = ours, "node without a NodeClaim");
            now
        });
        if !ours {
            continue;
        }
        if now.duration_since(since) < grace {
            continue;
        }
        tracing::info!(node = %name, "deleting node without a NodeClaim");
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {
                sightings.remove(&name);
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => tracing::warn!(node = %name, error = %e, "deleting node without a NodeClaim"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use testutil::{condition, nodeclaim};

    fn instance(id: &str, claim: Option<&str>, age_s: i64, now: Timestamp) -> Instance {
        Instance {
            provider_id: format!("aws:///us-east-1a/{id}"),
            id: id.into(),
            nodeclaim: claim.map(str::to_string),
            nodepool: Some("default".into()),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: "on-demand".into(),
            price: 0.096,
            launched_at: now - SignedDuration::from_secs(age_s),
            image_id: "ami-1".into(),
            subnet_id: "subnet-1".into(),
            security_group_ids: vec!["sg-1".into()],
        }
    }

    /// A NodeClaim launched as `provider_id` `launched_s_ago` seconds before `now`, or not
    /// launched yet.
    fn claim(
        name: &str,
        provider_id: Option<&str>,
        launched_s_ago: i64,
        now: Timestamp,
    ) -> Arc<NodeClaim> {
        let c = nodeclaim(name);
        match provider_id {
            Some(p) => c.provider_id(p).with_condition(
                condition("Launched", "True").at(now - SignedDuration::from_secs(launched_s_ago)),
            ),
            None => c,
        }
        .arc()
    }

    #[test]
    fn old_unclaimed_instances_are_collected_and_young_or_claimed_ones_are_not() {
        let now = Timestamp::from_second(1_800_000_000).expect("time");
        let instances = vec![
            instance("i-orphan", None, 60, now),
            instance("i-young", None, 5, now),
            instance("i-owned", Some("a"), 600, now),
            instance("i-launching", Some("b"), 600, now),
        ];
        let claims = vec![
            claim("a", Some("aws:///us-east-1a/i-owned"), 600, now),
            claim("b", None, 0, now),
        ];
        let c = plan(&instances, &claims, now);
        let ids: Vec<&str> = c.instances.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, vec!["i-orphan"]);
        assert!(c.nodeclaims.is_empty());
    }

    /// A Node with `provider_id`, labelled as the NodePool `default`'s when `nodepool`.
    fn node(name: &str, provider_id: &str, nodepool: bool) -> Arc<Node> {
        let n = testutil::node(name).provider_id(provider_id);
        if nodepool {
            n.label(NODEPOOL_LABEL, "default").arc()
        } else {
            n.arc()
        }
    }

    #[test]
    fn nodes_with_a_nodepool_label_and_no_nodeclaim_are_orphans() {
        let now = Timestamp::from_second(1_800_000_000).expect("time");
        let claims = vec![
            claim("a", Some("aws:///us-east-1a/i-a"), 600, now),
            claim("launching", None, 0, now),
        ];
        let instances = vec![instance("i-b", Some("launching"), 5, now)];
        let nodes = vec![
            node("owned", "aws:///us-east-1a/i-a", true),
            node("being-launched", "aws:///us-east-1a/i-b", true),
            node("orphan", "aws:///us-east-1a/i-c", true),
            node("not-ours", "aws:///us-east-1a/i-d", false),
        ];
        assert_eq!(
            orphaned_nodes(&nodes, &claims, &instances),
            vec!["orphan".to_string()]
        );
    }

    #[test]
    fn launched_nodeclaims_whose_instance_is_gone_are_collected() {
        let now = Timestamp::from_second(1_800_000_000).expect("time");
        let claims = vec![
            claim("gone", Some("aws:///us-east-1a/i-gone"), 600, now),
            claim("just-launched", Some("aws:///us-east-1a/i-new"), 3, now),
        ];
        let c = plan(&[], &claims, now);
        assert_eq!(c.nodeclaims, vec!["gone".to_string()]);
    }
}
