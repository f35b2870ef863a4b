//! Provisioning: pending pods open a batch window (closed after `BATCH_IDLE_DURATION` without new
//! pods or `BATCH_MAX_DURATION` in all), then one solve over a state snapshot decides NodeClaims,
//! and one executor creates them and tells each pod where it will go (upstream
//! `provisioning/provisioner.go`, `batcher.go`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crds::labels::WELL_KNOWN_LABELS;
use crds::{NodeClaim, NodePool};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;

use crate::runtime::Context;
use crate::runtime::events::{self, EventSpec, EventType, reason, reference};
use karpenter_core::capacity::InstanceType;
use karpenter_core::provisioning::template;
use karpenter_core::scheduling::pod::{PodInfo, PodKey};
use karpenter_core::scheduling::resources::Resources;
use karpenter_core::scheduling::solver::{
    self, Input, LIMIT_NODES, NewClaim, Output, within_limits,
};
use karpenter_core::scheduling::volumes::VolumeIndex;
use karpenter_core::snapshot::Snapshot;

/// The message of a `Nominated` Event is this, then `nodeclaim/NAME` or `node/NAME` (upstream's
/// wording; `kubectl karpenter why-pending` reads it back through
/// [`explain::nominated_target`](karpenter_core::scheduling::explain::nominated_target)).
pub const NOMINATION_PREFIX: &str = "Pod should schedule on: ";

/// How often pods that are still pending are re-provisioned for without new events.
pub const REQUEUE: Duration = Duration::from_secs(10);
/// How long the provisioner waits for its own NodeClaims to reach the cache.
const OWN_WRITES_TIMEOUT: Duration = Duration::from_secs(10);

/// What one provisioning pass did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PassResult {
    /// Pods considered.
    pub pods: usize,
    /// NodeClaims created.
    pub created: Vec<String>,
    /// Pods that fit existing or in-flight capacity.
    pub placed_existing: usize,
    /// Pods that could not be placed.
    pub failed: usize,
}

/// Batch pending pods and provision for them until the task is aborted.
pub async fn run(ctx: Arc<Context>) {
    if let Err(e) = ctx.state.wait_synced().await {
        tracing::error!(error = %e, "cluster state never synced; provisioning is off");
        return;
    }
    let mut requeue = tokio::time::interval(REQUEUE);
    loop {
        tokio::select! {
            _ = ctx.state.pod_trigger.notified() => {}
            _ = requeue.tick() => {
                if ctx.state.snapshot().provisionable_pods().is_empty() {
                    continue;
                }
            }
        }
        batch_window(&ctx).await;
        match provision(&ctx).await {
            Ok(r) if r.pods > 0 => tracing::info!(
                pods = r.pods,
                nodeclaims = r.created.len(),
                existing = r.placed_existing,
                failed = r.failed,
                "computed new nodeclaim(s) to fit pod(s)"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "provisioning failed"),
        }
    }
}

/// Keep the window open while pods keep arriving: close after `batch_idle` without a trigger or
/// `batch_max` in all.
async fn batch_window(ctx: &Context) {
    let start = Instant::now();
    loop {
        let left = ctx.settings.batch_max.saturating_sub(start.elapsed());
        if left.is_zero() {
            return;
        }
        tokio::select! {
            _ = ctx.state.pod_trigger.notified() => {}
            _ = tokio::time::sleep(ctx.settings.batch_idle.min(left)) => return,
        }
    }
}

/// Why a provisioning pass failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// The solve task died.
    #[error("solver task failed: {0}")]
    Solver(String),
}

struct Prepared {
    input: Input,
    pools: HashMap<String, Arc<NodePool>>,
    types: HashMap<String, Arc<InstanceType>>,
    pods: HashMap<PodKey, Arc<Pod>>,
}

/// Ready NodePools with their node class's instance types, as solver templates.
async fn prepare(ctx: &Context, snap: &Snapshot) -> Prepared {
    let well_known: Vec<String> = WELL_KNOWN_LABELS.iter().map(|s| s.to_string()).collect();
    let mut pools = HashMap::new();
    let mut types_by_name: HashMap<String, Arc<InstanceType>> = HashMap::new();
    let mut prepared_pools = Vec::new();
    for pool in &snap.nodepools {
        let Ok(nc) = template::node_class_of(pool, snap) else {
            continue;
        };
        let types = match ctx.cloud.instance_types(nc).await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(nodepool = ?pool.metadata.name, error = %e, "listing instance types failed");
                continue;
            }
        };
        template::index_types(&mut types_by_name, &types);
        let reqs = match template::usable_requirements(pool, &types) {
            Ok(reqs) => reqs,
            Err(e @ template::SkipReason::NoCompatibleInstanceTypes) => {
                ctx.recorder.publish(EventSpec {
                    regarding: reference(pool.as_ref()),
                    type_: EventType::Warning,
                    reason: reason::NO_COMPATIBLE_INSTANCE_TYPES,
                    message: e.to_string(),
                    dedupe: events::NODEPOOL_DEDUPE,
                });
                continue;
            }
            Err(_) => continue,
        };
        prepared_pools.push((Arc::clone(pool), reqs, types));
    }
    let mut overhead_by_pool = HashMap::new();
    let mut templates = Vec::new();
    for (pool, reqs, types) in prepared_pools {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let (tmpl, overhead) = template::pool_template(&pool, reqs, &types, snap, &types_by_name);
        templates.push(tmpl);
        overhead_by_pool.insert(name.clone(), overhead);
        pools.insert(name, pool);
    }
    let mut pods = HashMap::new();
    let mut infos = Vec::new();
    let volumes = VolumeIndex::new(&snap.pvcs, &snap.pvs, &snap.storage_classes);
    for pod in snap.provisionable_pods() {
        match PodInfo::from_pod(&pod) {
            Ok(mut info) => {
                info.add_volume_requirements(&volumes.requirements(&pod));
                pods.insert(info.key.clone(), Arc::clone(&pod));
                infos.push(info);
            }
            Err(e) => ctx.recorder.publish(EventSpec {
                regarding: reference(pod.as_ref()),
                type_: EventType::Warning,
                reason: reason::FAILED_SCHEDULING,
                message: format!("Failed to schedule pod, {e}"),
                dedupe: events::FAILED_SCHEDULING_DEDUPE,
            }),
        }
    }
    let existing = snap.existing_capacity(&overhead_by_pool, &types_by_name);
    let names: std::collections::HashSet<String> =
        existing.iter().map(|e| e.name.clone()).collect();
    Prepared {
        input: Input {
            pods: infos,
            bound_pods: snap.bound_pods(&names),
            existing,
            nodepools: templates,
            well_known_labels: well_known,
            namespaces: snap.namespace_labels(),
            repack: false,
        },
        pools,
        types: types_by_name,
        pods,
    }
}

/// One provisioning pass over the current state.
///
/// Errors: only when the solve itself could not run; per-pod and per-NodeClaim failures are
/// reported as Events and in the result.
pub async fn provision(ctx: &Context) -> Result<PassResult, ProvisionError> {
    let snap = ctx.state.snapshot();
    if snap.provisionable_pods().is_empty() {
        return Ok(PassResult::default());
    }
    let prepared = prepare(ctx, &snap).await;
    let input = prepared.input.clone();
    let started = Instant::now();
    let output = tokio::task::spawn_blocking(move || solver::solve(&input))
        .await
        .map_err(|e| ProvisionError::Solver(e.to_string()))?;
    ctx.metrics
        .scheduling_simulated(crate::runtime::metrics::PROVISIONER, started.elapsed());
    Ok(execute(ctx, &prepared, output).await)
}

async fn execute(ctx: &Context, prepared: &Prepared, output: Output) -> PassResult {
    let mut result = PassResult {
        pods: prepared.input.pods.len(),
        failed: output.errors.len(),
        ..PassResult::default()
    };
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let mut created_usage: BTreeMap<String, (Resources, i64)> = BTreeMap::new();
    for decision in &output.new_claims {
        let Some(pool) = prepared.pools.get(&decision.nodepool) else {
            continue;
        };
        if let Err(why) = recheck_limits(ctx, pool, decision, &prepared.types, &created_usage) {
            fail_pods(ctx, prepared, &decision.pods, &why);
            continue;
        }
        let claim = template::nodeclaim(pool, decision, &ctx.settings.hash_versions);
        match api.create(&PostParams::default(), &claim).await {
            Ok(created) => {
                ctx.metrics
                    .nodeclaim_created(&created, crate::runtime::metrics::reason::PROVISIONED);
                let name = created.metadata.name.clone().unwrap_or_default();
                let largest = decision
                    .instance_types
                    .iter()
                    .fold(Resources::default(), |acc, t| acc.max(&t.capacity));
                let entry = created_usage.entry(decision.nodepool.clone()).or_default();
                entry.0.add(&largest);
                entry.1 += 1;
                tracing::info!(nodeclaim = %name, nodepool = %decision.nodepool, requests = %decision.requests,
                    instance_types = decision.instance_types.len(), pods = decision.pods.len(), "created nodeclaim");
                for key in &decision.pods {
                    pod_event(
                        ctx,
                        prepared,
                        key,
                        EventType::Normal,
                        reason::NOMINATED,
                        format!("{NOMINATION_PREFIX}nodeclaim/{name}"),
                    );
                }
                result.created.push(name);
            }
            Err(e) => {
                tracing::warn!(nodepool = %decision.nodepool, error = %e, "creating nodeclaim failed");
                fail_pods(
                    ctx,
                    prepared,
                    &decision.pods,
                    &format!("creating nodeclaim: {e}"),
                );
            }
        }
    }
    for (target, keys) in &output.existing {
        result.placed_existing += keys.len();
        let kind = if ctx
            .state
            .nodes
            .state()
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(target))
        {
            "node"
        } else {
            "nodeclaim"
        };
        for key in keys {
            pod_event(
                ctx,
                prepared,
                key,
                EventType::Normal,
                reason::NOMINATED,
                format!("{NOMINATION_PREFIX}{kind}/{target}"),
            );
        }
    }
    for err in &output.errors {
        fail_pods(
            ctx,
            prepared,
            std::slice::from_ref(&err.pod),
            &err.to_string(),
        );
    }
    wait_for_own_writes(ctx, &result.created).await;
    result
}

/// Limits re-checked just before create against the latest state plus this pass's creations.
fn recheck_limits(
    ctx: &Context,
    pool: &NodePool,
    decision: &NewClaim,
    types: &HashMap<String, Arc<InstanceType>>,
    created: &BTreeMap<String, (Resources, i64)>,
) -> Result<(), String> {
    if pool.spec.limits.is_empty() {
        return Ok(());
    }
    let snap = ctx.state.snapshot();
    let (mut used, mut count) = snap.pool_usage(&decision.nodepool, types);
    if let Some((r, n)) = created.get(&decision.nodepool) {
        used.add(r);
        count += n;
    }
    let remaining = template::remaining_limits(pool, &used, count);
    let largest = decision
        .instance_types
        .iter()
        .fold(Resources::default(), |acc, t| acc.max(&t.capacity));
    if within_limits(&largest, &remaining) {
        return Ok(());
    }
    let exceeded: Vec<&str> = remaining
        .iter()
        .filter(|(k, v)| {
            if k.as_str() == LIMIT_NODES {
                **v < 1
            } else {
                largest.get(k) > **v
            }
        })
        .map(|(k, _)| k.as_str())
        .collect();
    let message = format!(
        "nodepool {:?} limits exceeded for {}",
        decision.nodepool,
        exceeded.join(", ")
    );
    ctx.recorder.publish(EventSpec {
        regarding: reference(pool),
        type_: EventType::Warning,
        reason: reason::NODEPOOL_LIMIT_EXCEEDED,
        message: message.clone(),
        dedupe: events::NODEPOOL_DEDUPE,
    });
    Err(message)
}

fn pod_event(
    ctx: &Context,
    prepared: &Prepared,
    key: &PodKey,
    type_: EventType,
    reason: &'static str,
    message: String,
) {
    let Some(pod) = prepared.pods.get(key) else {
        return;
    };
    let dedupe = if reason == reason::FAILED_SCHEDULING {
        events::FAILED_SCHEDULING_DEDUPE
    } else {
        events::DEFAULT_DEDUPE
    };
    ctx.recorder.publish(EventSpec {
        regarding: reference(pod.as_ref()),
        type_,
        reason,
        message,
        dedupe,
    });
}

/// Tell pods why they were not provisioned for (`FailedScheduling`).
fn fail_pods(ctx: &Context, prepared: &Prepared, pods: &[PodKey], why: &str) {
    for key in pods {
        pod_event(
            ctx,
            prepared,
            key,
            EventType::Warning,
            reason::FAILED_SCHEDULING,
            format!("Failed to schedule pod, {why}"),
        );
    }
}

/// The next pass must see this pass's NodeClaims, or it would launch the same capacity again.
async fn wait_for_own_writes(ctx: &Context, names: &[String]) {
    if names.is_empty() {
        return;
    }
    let deadline = Instant::now() + OWN_WRITES_TIMEOUT;
    loop {
        let cached: std::collections::HashSet<String> = ctx
            .state
            .nodeclaims
            .state()
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        if names.iter().all(|n| cached.contains(n)) || Instant::now() > deadline {
            return;
        }
        let changed = ctx.state.nodeclaim_changed.notified();
        let _ = tokio::time::timeout(Duration::from_millis(100), changed).await;
    }
}
