//! Provisioning: pending pods open a batch window (closed after `BATCH_IDLE_DURATION` without new
//! pods or `BATCH_MAX_DURATION` in all); then the instance types of each node class are listed,
//! `karpenter_core::provisioning::plan` decides the pass over a state snapshot, and one executor
//! ([`execute`]) creates the NodeClaims, re-checking NodePool limits against the latest state
//! just before each create, and tells each pod where it will go (upstream
//! `provisioning/provisioner.go`, `batcher.go`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crds::NodeClaim;
use futures::StreamExt;
use karpenter_core::pod_view::PodView;
use karpenter_core::provisioning::NOMINATION_PREFIX;
use karpenter_core::provisioning::plan::{self, Listing, Plan, PlannedNodeClaim, Target};
use karpenter_core::provisioning::template::{self, SkipReason};
use karpenter_core::scheduling::pod::PodKey;
use karpenter_core::scheduling::resources::Resources;
use karpenter_core::snapshot::Snapshot;
use kube::Api;

use crate::nodeclaim::writes::{CreateOutcome, create_named, generated_name};
use crate::state::OwnCreate;

use crate::runtime::Context;
use crate::runtime::events::{self, EventSpec, EventType, reason, reference};

pub mod batch;
pub mod nomination;

/// How often pods that are still pending are re-provisioned for without new events.
pub const REQUEUE: Duration = Duration::from_secs(10);
/// NodeClaim creates in flight at once (for NodePools without limits): one, for now. Upstream
/// creates all of a pass's NodeClaims at once (`workqueue.ParallelizeUntil` with one worker per
/// NodeClaim, in `provisioner.go`), and launches are concurrent here as there
/// ([`crate::nodeclaim::lifecycle::concurrency`]). With creates as concurrent as launches, the
/// duplicate of stop 45 is gone (a snapshot race, fixed in `ClusterState::snapshot`), and every
/// fault, crash and lost-response test passed locally; but on the 2-core CI runner, with eight
/// tests at once, `faults::the_heavy_fault_profile_makes_one_nodeclaim_per_pod_whatever_the_seed`
/// left one pod pending beside an empty node for the whole 120 s settle (seed 7), which it
/// never did with creates one at a time. Until that is understood, creates stay sequential.
fn create_concurrency(_ctx: &Context) -> usize {
    1
}
/// How long the provisioner waits for its own NodeClaims to reach the cache.
const OWN_WRITES_TIMEOUT: Duration = Duration::from_secs(10);

/// What one provisioning pass did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PassResult {
    /// Pending, provisionable pods the pass considered.
    pub pods: usize,
    /// Names of the NodeClaims created.
    pub created: Vec<String>,
    /// Names of the NodeClaims whose create's answer was lost ([`CreateOutcome::Unknown`]):
    /// they may exist, and count as in-flight capacity until that is settled
    /// ([`confirm_own_creates`]).
    pub unknown: Vec<String>,
    /// Pods that fit existing nodes or in-flight NodeClaims.
    pub placed_existing: usize,
    /// Pods that could not be placed (including those of NodeClaims that could not be created).
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
                if ctx.settings.nominate_planned_pods {
                    nomination::sweep(&ctx).await;
                }
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

/// Keep the window open while pods keep arriving ([`batch::Window`]): close after `batch_idle`
/// without a trigger or `batch_max` in all.
async fn batch_window(ctx: &Context) {
    let opened = tokio::time::Instant::now();
    let mut window = batch::Window::open(&ctx.settings);
    loop {
        let closes = window.closes_at();
        if opened.elapsed() >= closes {
            return;
        }
        tokio::select! {
            _ = ctx.state.pod_trigger.notified() => window.arrived(opened.elapsed()),
            _ = tokio::time::sleep_until(opened + closes) => return,
        }
    }
}

/// Why a provisioning pass failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// The blocking planning task panicked or was cancelled (its join error).
    #[error("planning task failed: {0}")]
    Plan(String),
}

/// The instance types of every node class a NodePool of `snap` uses, listed from the cloud
/// (once per node class). A listing that fails is logged and kept as the reason its NodePools
/// are left out of the pass.
pub(crate) async fn list_instance_types(
    ctx: &Context,
    snap: &Snapshot,
) -> HashMap<String, Listing> {
    let mut listings = HashMap::new();
    for pool in &snap.nodepools {
        let Ok(nc) = template::node_class_of(pool, snap) else {
            continue;
        };
        let class = nc.metadata.name.clone().unwrap_or_default();
        if listings.contains_key(&class) {
            continue;
        }
        let listing = ctx.cloud.instance_types(nc).await.map_err(|e| {
            tracing::warn!(nodepool = %pool.metadata.name.as_deref().unwrap_or_default(), error = %e, "listing instance types failed");
            e.to_string()
        });
        listings.insert(class, listing);
    }
    listings
}

/// One provisioning pass over the current state: list instance types, plan, execute.
///
/// Errors: only when the planning task itself could not run; per-pod and per-NodeClaim failures
/// are reported as Events and in the result.
pub async fn provision(ctx: &Context) -> Result<PassResult, ProvisionError> {
    if ctx.settings.nominate_planned_pods {
        nomination::sweep(ctx).await;
    }
    confirm_own_creates(ctx).await;
    let snap = Arc::new(ctx.state.snapshot());
    if snap.provisionable_pods().is_empty() {
        return Ok(PassResult::default());
    }
    let listings = list_instance_types(ctx, &snap).await;
    let settings = plan::Settings {
        hash_versions: ctx.settings.hash_versions.clone(),
        repack: ctx.settings.cost_repack,
        min_values_policy: ctx.settings.min_values_policy,
    };
    let started = Instant::now();
    let planned = {
        let snap = Arc::clone(&snap);
        tokio::task::spawn_blocking(move || plan::plan(&snap, &listings, &settings))
            .await
            .map_err(|e| ProvisionError::Plan(e.to_string()))?
    };
    ctx.metrics
        .scheduling_simulated(crate::runtime::metrics::PROVISIONER, started.elapsed());
    Ok(execute(ctx, &snap, planned).await)
}

/// Apply a plan: Events for NodePools left out for lack of compatible instance types, create
/// each NodeClaim unless the NodePool's limits no longer allow it, nominate pods, and report
/// the pods that fit nowhere. Waits until the cache holds the NodeClaims created, so the next
/// pass counts them as in-flight capacity.
pub async fn execute(ctx: &Context, snap: &Snapshot, planned: Plan) -> PassResult {
    let pods: HashMap<PodKey, &Arc<PodView>> =
        snap.pods.iter().map(|p| (PodKey::of(p), p)).collect();
    let mut result = PassResult {
        pods: planned.pods,
        failed: planned.failures.len(),
        ..PassResult::default()
    };
    for (name, why) in &planned.skipped {
        if !matches!(why, SkipReason::NoCompatibleInstanceTypes) {
            continue;
        }
        let pool = snap
            .nodepools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name));
        if let Some(pool) = pool {
            ctx.recorder.publish(EventSpec {
                regarding: reference(pool.as_ref()),
                type_: EventType::Warning,
                reason: reason::NO_COMPATIBLE_INSTANCE_TYPES,
                message: why.to_string(),
                dedupe: events::NODEPOOL_DEDUPE,
            });
        }
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let mut taken = taken_names(ctx);
    let mut created_usage: BTreeMap<String, (Resources, i64)> = BTreeMap::new();
    // A NodePool with limits has its NodeClaims created one at a time, each limit re-check
    // counting the ones before it; the others up to `create_concurrency` at a time.
    let (limited, unlimited): (Vec<&PlannedNodeClaim>, Vec<&PlannedNodeClaim>) = planned
        .nodeclaims
        .iter()
        .partition(|c| !c.nodepool.spec.limits.is_empty());
    for claim in limited {
        if let Err(why) = recheck_limits(ctx, claim, &planned, &created_usage) {
            result.failed += claim.decision.pods.len();
            fail_pods(ctx, &pods, &claim.decision.pods, &why);
            continue;
        }
        let nodeclaim = named(claim, &mut taken);
        let outcome = create_named(&api, &nodeclaim).await;
        record_create(
            ctx,
            &pods,
            claim,
            nodeclaim,
            outcome,
            &mut result,
            &mut created_usage,
        );
    }
    let jobs: Vec<(usize, NodeClaim)> = unlimited
        .iter()
        .enumerate()
        .map(|(i, c)| (i, named(c, &mut taken)))
        .collect();
    // Each create is accounted for as it completes, not after the whole batch: its plan record
    // must exist before its node registers (seconds later), or registration has nothing to
    // nominate and the planned pods' room goes to whichever pod kube-scheduler takes next.
    let mut outcomes = futures::stream::iter(jobs)
        .map(|(i, nodeclaim)| {
            let api = api.clone();
            async move {
                let outcome = create_named(&api, &nodeclaim).await;
                (i, nodeclaim, outcome)
            }
        })
        .buffer_unordered(create_concurrency(ctx));
    while let Some((i, nodeclaim, outcome)) = outcomes.next().await {
        record_create(
            ctx,
            &pods,
            unlimited[i],
            nodeclaim,
            outcome,
            &mut result,
            &mut created_usage,
        );
    }
    // Pods planned onto a Karpenter node are nominated there now (it is typically still
    // initializing); onto an in-flight NodeClaim, when its node registers. A node Karpenter does
    // not manage only gets the Event: nothing would take back a nomination kube-scheduler
    // cannot honour there.
    let managed: std::collections::HashSet<&str> = snap
        .nodes
        .iter()
        .filter(|n| karpenter_core::snapshot::nodepool_of(n.metadata.labels.as_ref()).is_some())
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    let mut to_nodes: BTreeMap<&str, Vec<PodKey>> = BTreeMap::new();
    for n in planned
        .nominations
        .iter()
        .filter(|_| ctx.settings.nominate_planned_pods)
    {
        match &n.target {
            Target::Node(node) if managed.contains(node.as_str()) => {
                to_nodes.entry(node).or_default().push(n.pod.clone())
            }
            Target::Node(_) => {}
            Target::NodeClaim(claim) => {
                ctx.state.planned().insert(n.pod.clone(), claim.clone());
            }
        }
    }
    for (node, pods) in to_nodes {
        nomination::nominate(ctx, &pods, node).await;
    }
    for nomination in &planned.nominations {
        result.placed_existing += 1;
        pod_event(
            ctx,
            &pods,
            &nomination.pod,
            EventType::Normal,
            reason::NOMINATED,
            format!("{NOMINATION_PREFIX}{}", nomination.target),
        );
    }
    for failure in &planned.failures {
        fail_pods(
            ctx,
            &pods,
            std::slice::from_ref(&failure.pod),
            &failure.reason,
        );
    }
    let written: Vec<String> = result
        .created
        .iter()
        .chain(&result.unknown)
        .cloned()
        .collect();
    wait_for_own_writes(ctx, &written).await;
    result
}

/// The planned NodeClaim under a name chosen now (`<nodepool>-<5 letters>`) instead of
/// `generateName`, so a create whose answer is lost can be told apart from one that never
/// happened ([`create_named`]). The name is drawn again while `taken` holds it, and then added
/// to it: two NodeClaims of one pass with the same spec must not share a name, or the second
/// create's `AlreadyExists` would read back the first as its own and its pods would get no
/// capacity (one pass of 200 alike NodeClaims draws a name twice about once in 700).
fn named(claim: &PlannedNodeClaim, taken: &mut HashSet<String>) -> NodeClaim {
    let mut name = generated_name(&claim.decision.nodepool);
    while taken.contains(&name) {
        name = generated_name(&claim.decision.nodepool);
    }
    taken.insert(name.clone());
    let mut nodeclaim = claim.nodeclaim.clone();
    nodeclaim.metadata.name = Some(name);
    nodeclaim.metadata.generate_name = None;
    nodeclaim
}

/// Names a new NodeClaim must not take: those of the NodeClaim cache and of this controller's
/// creates the cache has not shown yet.
fn taken_names(ctx: &Context) -> HashSet<String> {
    let mut taken = cached_names(ctx);
    taken.extend(ctx.state.own_creates().keys().cloned());
    taken
}

/// Names of the NodeClaims in the cache.
fn cached_names(ctx: &Context) -> HashSet<String> {
    ctx.state
        .nodeclaims
        .state()
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect()
}

/// After this long unseen by the cache, an own create is read back by name
/// ([`confirm_own_creates`]).
const OWN_CREATE_RECHECK: Duration = Duration::from_secs(15);

/// Settle this controller's creates the NodeClaim cache has not applied yet: one whose answer
/// was lost, or that the cache has not shown for [`OWN_CREATE_RECHECK`], is read by name; found,
/// it stays in-flight capacity until the cache applies it; absent (never created, or deleted
/// before the cache saw it), it is dropped and its pods are planned again. A read that fails
/// leaves it as it is, still counted: capacity counted twice is launched once at worst too
/// late, never twice.
async fn confirm_own_creates(ctx: &Context) {
    let due: Vec<String> = ctx
        .state
        .own_creates()
        .iter()
        .filter(|(_, o)| !o.confirmed || o.since.elapsed() > OWN_CREATE_RECHECK)
        .map(|(name, _)| name.clone())
        .collect();
    if due.is_empty() {
        return;
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for name in due {
        match api.get_opt(&name).await {
            Ok(Some(found)) => {
                if let Some(own) = ctx.state.own_creates().get_mut(&name) {
                    own.claim = Arc::new(found);
                    own.confirmed = true;
                    own.since = Instant::now();
                }
            }
            Ok(None) => {
                tracing::info!(nodeclaim = %name, "nodeclaim whose create was not confirmed does not exist; its pods are planned again");
                ctx.state.own_creates().remove(&name);
                ctx.state.planned().retain(|_, claim| *claim != name);
            }
            Err(e) => {
                tracing::warn!(nodeclaim = %name, error = %e, "reading back a nodeclaim this controller created failed; still counting it");
            }
        }
    }
}

/// Account for one NodeClaim create: on success the metric, the plan record (its pods are
/// planned onto it), the NodePool's usage for later limit re-checks, the log line and each
/// pod's `Nominated` Event; on an unknown outcome the same plan record and usage, and the
/// NodeClaim counts as in-flight capacity until its existence is settled; on a refusal a
/// `FailedScheduling` Event for each of its pods.
fn record_create(
    ctx: &Context,
    pods: &HashMap<PodKey, &Arc<PodView>>,
    claim: &PlannedNodeClaim,
    sent: NodeClaim,
    outcome: CreateOutcome,
    result: &mut PassResult,
    created_usage: &mut BTreeMap<String, (Resources, i64)>,
) {
    let decision = &claim.decision;
    let (own, confirmed) = match outcome {
        CreateOutcome::Created(created) => (*created, true),
        CreateOutcome::Unknown(e) => {
            tracing::warn!(nodeclaim = %sent.metadata.name.as_deref().unwrap_or_default(), nodepool = %decision.nodepool, error = %e,
                "creating nodeclaim: the answer was lost; counting it as in-flight until a read settles whether it exists");
            (sent, false)
        }
        CreateOutcome::Refused(e) => {
            tracing::warn!(nodepool = %decision.nodepool, error = %e, "creating nodeclaim failed");
            result.failed += decision.pods.len();
            fail_pods(
                ctx,
                pods,
                &decision.pods,
                &format!("creating nodeclaim: {e}"),
            );
            return;
        }
    };
    let name = own.metadata.name.clone().unwrap_or_default();
    ctx.state.own_creates().insert(
        name.clone(),
        OwnCreate {
            claim: Arc::new(own.clone()),
            confirmed,
            since: Instant::now(),
        },
    );
    if ctx.settings.nominate_planned_pods {
        ctx.state
            .planned()
            .extend(decision.pods.iter().map(|k| (k.clone(), name.clone())));
    }
    let entry = created_usage.entry(decision.nodepool.clone()).or_default();
    entry.0.add(&claim.largest_capacity());
    entry.1 += 1;
    if !confirmed {
        result.unknown.push(name);
        return;
    }
    ctx.metrics
        .nodeclaim_created(&own, crate::runtime::metrics::reason::PROVISIONED);
    tracing::info!(nodeclaim = %name, nodepool = %decision.nodepool, requests = %decision.requests,
        instance_types = decision.instance_types.len(), pods = decision.pods.len(), "created nodeclaim");
    for key in &decision.pods {
        pod_event(
            ctx,
            pods,
            key,
            EventType::Normal,
            reason::NOMINATED,
            format!("{NOMINATION_PREFIX}nodeclaim/{name}"),
        );
    }
    result.created.push(name);
}

/// Limits re-checked just before create, against the latest state plus this pass's creations
/// (another pass, or another replica, may have launched capacity since the plan was made).
/// Errors: the message of the `NodePoolLimitExceeded` Event, which is published.
fn recheck_limits(
    ctx: &Context,
    claim: &PlannedNodeClaim,
    planned: &Plan,
    created: &BTreeMap<String, (Resources, i64)>,
) -> Result<(), String> {
    let pool = claim.nodepool.as_ref();
    if pool.spec.limits.is_empty() {
        return Ok(());
    }
    let nodepool = &claim.decision.nodepool;
    let (mut used, mut count) = ctx.state.snapshot().pool_usage(nodepool, &planned.types);
    if let Some((r, n)) = created.get(nodepool) {
        used.add(r);
        count += n;
    }
    let exceeded = plan::exceeded_limits(pool, &claim.largest_capacity(), &used, count);
    if exceeded.is_empty() {
        return Ok(());
    }
    let message = format!(
        "nodepool {:?} limits exceeded for {}",
        nodepool,
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
    pods: &HashMap<PodKey, &Arc<PodView>>,
    key: &PodKey,
    type_: EventType,
    reason: &'static str,
    message: String,
) {
    let Some(pod) = pods.get(key) else {
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
fn fail_pods(ctx: &Context, pods: &HashMap<PodKey, &Arc<PodView>>, keys: &[PodKey], why: &str) {
    for key in keys {
        pod_event(
            ctx,
            pods,
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
        let cached = cached_names(ctx);
        if names.iter().all(|n| cached.contains(n)) || Instant::now() > deadline {
            return;
        }
        let changed = ctx.state.nodeclaim_changed.notified();
        let _ = tokio::time::timeout(Duration::from_millis(100), changed).await;
    }
}
