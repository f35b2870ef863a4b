//! The interruption controller (upstream `aws/karpenter-provider-aws`
//! `pkg/controllers/interruption`): long-polls the cloud's interruption queue
//! ([`crate::cloudprovider::CloudProvider::interruption_queue`], `--interruption-queue`), reads
//! each message ([`karpenter_core::interruption::parse`]), finds the NodeClaims of the
//! instances it names (by providerID), and acts as upstream does:
//! - Events on the NodeClaim and its Node (`SpotInterrupted`, `SpotRebalanceRecommendation`,
//!   `InstanceUnhealthy`, `InstanceStopping`, `InstanceTerminating`);
//! - a spot interruption marks its offering unavailable in the capacity-error cache (3 min);
//! - interruptions, scheduled changes and instances stopping or terminating replace and drain
//!   the node: an interruption command of the one disruption orchestrator
//!   ([`crate::disruption::interruption`]), which launches the replacement at once;
//! - rebalance recommendations are Events only.
//!
//! Handled and unreadable messages are deleted; a message whose handling failed (an API
//! error) stays in the queue and comes back after its visibility timeout. Metrics:
//! `karpenter_interruption_received_messages_total{message_type}`,
//! `karpenter_interruption_deleted_messages_total`,
//! `karpenter_interruption_message_queue_duration_seconds`.

use std::sync::Arc;
use std::time::Duration;

use crds::NodeClaim;
use crds::labels::{
    CAPACITY_TYPE_LABEL, CAPACITY_TYPE_SPOT, INSTANCE_TYPE_LABEL, TOPOLOGY_ZONE_LABEL,
};
use karpenter_core::interruption::{self as messages, Action, Kind, Message};
use karpenter_core::snapshot::Snapshot;
use kube::ResourceExt;

use crate::cloudprovider::queue::{InterruptionQueue, QueueMessage};
use crate::disruption::interruption as command;
use crate::runtime::Context;
use crate::runtime::events::{EventSpec, EventType, reference};

/// The longest wait before reading a queue that failed again (doubling from 1 s).
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What became of one queue message.
#[derive(Clone, Debug, PartialEq)]
pub enum Processed {
    /// Read and acted on (or nothing to do), then deleted: its kind and the NodeClaims it
    /// named that exist.
    Handled {
        /// The message's kind.
        kind: Kind,
        /// NodeClaims of the instances it named (0: an instance Karpenter does not know).
        nodeclaims: usize,
    },
    /// Not an interruption message; deleted. The reason, as logged.
    Unreadable(String),
    /// Acting on it failed; left in the queue to come back. The error, as logged.
    Failed(String),
}

/// Read the interruption queue until the task is aborted; returns at once when the cloud has
/// no queue (interruption handling off).
pub async fn run(ctx: Arc<Context>) {
    let Some(queue) = ctx.cloud.interruption_queue() else {
        return;
    };
    if ctx.state.wait_synced().await.is_err() {
        tracing::error!("interruption controller not started: the cluster state never synced");
        return;
    }
    tracing::info!(queue = queue.name(), "watching interruption queue");
    let mut backoff = Duration::from_secs(1);
    loop {
        match queue.receive().await {
            Ok(batch) => {
                backoff = Duration::from_secs(1);
                for message in batch {
                    process(&ctx, queue.as_ref(), message).await;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "reading the interruption queue failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Handle one received message and delete it unless handling failed.
pub async fn process(
    ctx: &Context,
    queue: &dyn InterruptionQueue,
    received: QueueMessage,
) -> Processed {
    let parsed = match received.body.as_deref() {
        None => Err("the message has no body".to_string()),
        Some(body) => messages::parse(body).map_err(|e| e.to_string()),
    };
    let outcome = match parsed {
        Err(why) => {
            tracing::error!(queue = queue.name(), message_id = %received.id, error = %why,
                "failed parsing interruption message; deleting it");
            Processed::Unreadable(why)
        }
        Ok(message) => {
            ctx.metrics.interruption_received(message.kind.as_str());
            match handle(ctx, &message).await {
                Ok(nodeclaims) => {
                    let raised = message.time.or(received.sent);
                    if let Some(raised) = raised {
                        let waited = ctx.clock.now().duration_since(raised);
                        ctx.metrics.interruption_handled_after(waited.as_secs_f64());
                    }
                    Processed::Handled {
                        kind: message.kind,
                        nodeclaims,
                    }
                }
                Err(e) => {
                    tracing::warn!(queue = queue.name(), message_id = %received.id, kind = %message.kind,
                        error = %e, "handling an interruption message failed; it stays in the queue");
                    return Processed::Failed(e.to_string());
                }
            }
        }
    };
    match queue.delete(&received.receipt).await {
        Ok(()) => ctx.metrics.interruption_deleted(),
        Err(e) => tracing::warn!(error = %e, "deleting an interruption message failed"),
    }
    outcome
}

/// Act on one message; returns how many NodeClaims it named. Instances without a NodeClaim
/// (not Karpenter's, or gone already) are skipped.
///
/// Errors: an API failure on one of its NodeClaims (the others are still acted on).
pub async fn handle(ctx: &Context, message: &Message) -> Result<usize, kube::Error> {
    if message.kind == Kind::NoOp {
        return Ok(0);
    }
    let snap = Arc::new(ctx.state.snapshot());
    let mut found = 0;
    let mut failed = None;
    for id in &message.instance_ids {
        let claims: Vec<Arc<NodeClaim>> = snap
            .nodeclaims
            .iter()
            .filter(|c| instance_of(c) == Some(id.as_str()))
            .cloned()
            .collect();
        if claims.is_empty() {
            tracing::debug!(instance = %id, kind = %message.kind, "interruption message for an instance without a NodeClaim");
        }
        for claim in claims {
            found += 1;
            if let Err(e) = handle_claim(ctx, &snap, message, &claim).await {
                failed = Some(e);
            }
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(found),
    }
}

/// The EC2 instance id of a NodeClaim's providerID.
fn instance_of(claim: &NodeClaim) -> Option<&str> {
    let pid = claim.status.as_ref()?.provider_id.as_deref()?;
    messages::instance_id(pid)
}

async fn handle_claim(
    ctx: &Context,
    snap: &Arc<Snapshot>,
    message: &Message,
    claim: &NodeClaim,
) -> Result<(), kube::Error> {
    let kind = message.kind;
    tracing::info!(nodeclaim = %claim.name_any(), kind = %kind, message_id = %message.id,
        "interruption message");
    notify(ctx, snap, claim, kind);
    if kind == Kind::SpotInterrupted {
        let labels = claim.metadata.labels.as_ref();
        let get = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
        if let (Some(t), Some(z)) = (get(INSTANCE_TYPE_LABEL), get(TOPOLOGY_ZONE_LABEL))
            && get(CAPACITY_TYPE_LABEL) == Some(CAPACITY_TYPE_SPOT)
        {
            ctx.cloud
                .mark_offering_unavailable(t, z, CAPACITY_TYPE_SPOT);
        }
    }
    match kind.action() {
        Action::NoAction => Ok(()),
        Action::CordonAndDrain => command::start(ctx, snap, message, claim).await,
    }
}

/// The message's Event on the NodeClaim and on its Node (deduplicated per object and kind, as
/// upstream's are).
fn notify(ctx: &Context, snap: &Snapshot, claim: &NodeClaim, kind: Kind) {
    let Some(reason) = kind.event_reason() else {
        return;
    };
    let type_ = if kind.is_warning() {
        EventType::Warning
    } else {
        EventType::Normal
    };
    let node = claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .and_then(|pid| {
            snap.nodes
                .iter()
                .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(pid))
        });
    let mut regarding = vec![reference(claim)];
    regarding.extend(node.map(|n| reference(n.as_ref())));
    for r in regarding {
        ctx.recorder.publish(EventSpec {
            regarding: r,
            type_,
            reason,
            message: kind.event_message().to_string(),
            dedupe: crate::runtime::events::DEFAULT_DEDUPE,
        });
    }
}
