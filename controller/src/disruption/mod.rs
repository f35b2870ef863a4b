//! The one disruption orchestrator (Karpenter's node-upgrades design; upstream
//! `pkg/controllers/disruption/controller.go`): a single loop that owns every voluntary
//! disruption so the methods never fight. Each tick it first advances the serial upgrades of
//! drifted nodes ([`upgrade`]), then, every `Settings::disruption_poll` (10 s),
//! consolidation ([`consolidation`]):
//! pod events and the `Consolidatable` condition, the commands in progress, and a new command
//! (emptiness, then multi-node, then single-node); interruption commands ([`interruption`],
//! started by `crate::interruption_queue` at the warning) advance with consolidation's. All read
//! one in-progress set from the
//! cluster (a node being replaced for one reason is never a candidate for another) and one
//! budget accounting per NodePool and reason.

pub mod consolidation;
pub mod interruption;
pub mod marks;
pub mod pod_events;
pub mod queue;
pub mod report;
pub mod upgrade;

use std::sync::Arc;
use std::time::Duration;

use crate::runtime::Context;

/// How often the orchestrator ticks: upgrade steps advance at this pace.
pub const TICK: Duration = Duration::from_secs(1);

/// Run the orchestrator until the task is aborted. When the next consolidation pass is due is
/// measured on the context's clock, and a jump of the clock wakes the loop at once.
pub async fn run(ctx: Arc<Context>) {
    if ctx.state.wait_synced().await.is_err() {
        tracing::error!("disruption orchestrator not started: the cluster state never synced");
        return;
    }
    let mut upgrades = upgrade::Unobserved::default();
    let mut consolidation = consolidation::Consolidation::default();
    let mut next = ctx.clock.now();
    loop {
        upgrade::tick(&ctx, &mut upgrades).await;
        // Consolidation decides from the cache: not while an upgrade step just started is
        // missing from it (both would take the same budget, or the same node).
        if ctx.clock.now() >= next && upgrades.all_observed() {
            let wait = consolidation.tick(&ctx).await.unwrap_or(TICK);
            let wait = jiff::SignedDuration::try_from(wait).unwrap_or(jiff::SignedDuration::MAX);
            let now = ctx.clock.now();
            next = now.checked_add(wait).unwrap_or(now);
        }
        ctx.pause(TICK).await;
    }
}
