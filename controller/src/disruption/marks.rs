//! The marks a disruption command leaves in the cluster, and how they are written: the
//! `karpenter.sh/disrupted:NoSchedule` taint on its candidates' nodes (upstream
//! `disruption/queue.go` StartCommand) and the command annotations on their NodeClaims
//! (`crds::disruption`). Every change is computed from the object as the API server holds it
//! now, not from a snapshot (a snapshot taken before the taint was written shows no taint to
//! remove), written with that object's resourceVersion, and retried until it holds: a conflict
//! reads again at once, a throttled, failed or lost answer reads again after a backoff (the
//! next read tells whether a lost write took effect).

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use crds::NodeClaim;
use crds::disruption::{
    COMMAND_ANNOTATION, DRAIN_BY_ANNOTATION, REASON_ANNOTATION, REPLACEMENT_ANNOTATION,
    REPLACES_ANNOTATION, STARTED_ANNOTATION,
};
use crds::history::CANDIDATES_ANNOTATION;
use crds::labels::{DISRUPTED_TAINT_KEY, disrupted_no_schedule_taint};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use karpenter_core::disruption::candidates;
use karpenter_core::snapshot::Snapshot;

use crate::runtime::Context;

/// Attempts at one mark change before it is given up (conflicts, failures and lost answers
/// alike); the backoff between failed attempts runs from 100 ms to 2 s, about 8 s in all.
const ATTEMPTS: usize = 8;

/// Where a mark change ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// The object now holds the change (written now, or it already did).
    Yes,
    /// The object is gone (404), so there is nothing to mark.
    Gone,
}

/// The replacement NodeClaim of command `command`, to be created: `planned` (the solver's
/// NodeClaim) named `name` (not generated, so a restart finds it by the candidates'
/// `REPLACEMENT_ANNOTATION`), annotated with the command and the candidates it replaces
/// (`replaces`, comma-separated NodeClaim names).
pub fn replacement_claim(
    planned: &NodeClaim,
    name: &str,
    command: &str,
    replaces: &str,
) -> NodeClaim {
    let mut claim = planned.clone();
    claim.metadata.generate_name = None;
    claim.metadata.name = Some(name.to_string());
    let annotations = claim
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(COMMAND_ANNOTATION.into(), command.to_string());
    annotations.insert(REPLACES_ANNOTATION.into(), replaces.to_string());
    claim
}

/// Add (`on`) or remove the `karpenter.sh/disrupted:NoSchedule` taint on the node `name`, read
/// live and retried until it holds.
///
/// Errors: the last API failure once [`ATTEMPTS`] attempts are spent, or a refusal (a 4xx other
/// than conflict, not-found and throttling) at once.
pub async fn taint(ctx: &Context, name: &str, on: bool) -> Result<Held, kube::Error> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    converge(&api, name, |node: &Node| {
        let mut taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        if taints.iter().any(|t| t.key == DISRUPTED_TAINT_KEY) == on {
            return None;
        }
        if on {
            taints.push(disrupted_no_schedule_taint());
        } else {
            taints.retain(|t| t.key != DISRUPTED_TAINT_KEY);
        }
        Some(json!({"spec": {"taints": taints}}))
    })
    .await
}

/// Whether the node `name` carries the disrupted taint now, read from the API server (`false`
/// when it is gone).
///
/// Errors: the API failure.
pub async fn is_tainted(ctx: &Context, name: &str) -> Result<bool, kube::Error> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    Ok(api.get_opt(name).await?.is_some_and(|n| has_taint(&n)))
}

/// Whether `node` carries the `karpenter.sh/disrupted` taint.
pub fn has_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == DISRUPTED_TAINT_KEY))
}

/// Remove the annotations of command `id` (candidate's and replacement's) from the NodeClaim
/// `name`, read live and retried until it holds; a NodeClaim whose annotations name another
/// command (or none) is left as it is. Returns the NodeClaim as it is now (`None`: gone).
///
/// Errors: as [`taint`].
pub async fn clear_command(
    ctx: &Context,
    name: &str,
    id: &str,
) -> Result<Option<NodeClaim>, kube::Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let mut last = None;
    let held = converge(&api, name, |claim: &NodeClaim| {
        last = Some(claim.clone());
        let annotations = claim.metadata.annotations.as_ref()?;
        if annotations.get(COMMAND_ANNOTATION).map(String::as_str) != Some(id) {
            return None;
        }
        let marked: serde_json::Map<String, Value> = COMMAND_ANNOTATIONS
            .iter()
            .filter(|k| annotations.contains_key(**k))
            .map(|k| (k.to_string(), Value::Null))
            .collect();
        Some(json!({"metadata": {"annotations": marked}}))
    })
    .await?;
    Ok(match held {
        Held::Gone => None,
        // The NodeClaim as last read, without what was just removed.
        Held::Yes => last.map(|mut c| {
            if let Some(a) = c.metadata.annotations.as_mut()
                && a.get(COMMAND_ANNOTATION).map(String::as_str) == Some(id)
            {
                a.retain(|k, _| !COMMAND_ANNOTATIONS.contains(&k.as_str()));
            }
            c
        }),
    })
}

/// Every annotation a disruption command writes on its NodeClaims.
const COMMAND_ANNOTATIONS: [&str; 7] = [
    COMMAND_ANNOTATION,
    REASON_ANNOTATION,
    REPLACEMENT_ANNOTATION,
    STARTED_ANNOTATION,
    DRAIN_BY_ANNOTATION,
    CANDIDATES_ANNOTATION,
    REPLACES_ANNOTATION,
];

/// Abandon command `id` on the NodeClaims `names`: remove its annotations (where they still
/// name this command) and then the disrupted taint from each node no disruption holds any
/// more; every change read live and retried until it holds (this module). A change that still
/// fails is logged, and the next pass finds what is left: a half-started command is abandoned
/// again (`super::queue`), a leaked taint is swept ([`sweep_stale_taints`]).
pub async fn abandon(ctx: &Context, snap: &Snapshot, id: &str, names: &[String]) {
    for name in names {
        let claim = match clear_command(ctx, name, id).await {
            Ok(Some(claim)) => claim,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(command = %id, nodeclaim = %name, error = %e, "clearing a consolidation command");
                continue;
            }
        };
        if candidates::is_held(&claim) {
            continue;
        }
        let Some(node) = node_name(snap, &claim) else {
            continue;
        };
        if let Err(e) = taint(ctx, &node, false).await {
            tracing::warn!(command = %id, node = %node, error = %e, "removing the disrupted taint");
        }
    }
}

/// The name of `claim`'s node: its status, else the node of its providerID in `snap`.
fn node_name(snap: &Snapshot, claim: &NodeClaim) -> Option<String> {
    let status = claim.status.as_ref()?;
    if let Some(n) = &status.node_name {
        return Some(n.clone());
    }
    let pid = status.provider_id.as_deref()?;
    snap.nodes
        .iter()
        .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(pid))
        .and_then(|n| n.metadata.name.clone())
}

/// Remove the disrupted taints nothing holds any more
/// ([`candidates::stale_disrupted_taints`]), each after reading its NodeClaim again: the
/// cache may show a command's taint before the annotations written just before it.
pub async fn sweep_stale_taints(ctx: &Context, snap: &Snapshot) {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for (node, claim) in candidates::stale_disrupted_taints(snap) {
        match api.get_opt(&claim).await {
            Ok(Some(live))
                if live.metadata.deletion_timestamp.is_none() && !candidates::is_held(&live) => {}
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(nodeclaim = %claim, error = %e, "reading a NodeClaim before sweeping its node's taint");
                continue;
            }
        }
        match taint(ctx, &node, false).await {
            Ok(_) => tracing::info!(node = %node, nodeclaim = %claim,
                "removed a karpenter.sh/disrupted taint no disruption holds"),
            Err(e) => tracing::warn!(node = %node, error = %e, "removing a stale disrupted taint"),
        }
    }
}

/// Whether the node of candidate `claim` carries the disrupted taint: in `snap`, else as the
/// API server has it now (the cache may not show a taint just written). No node: `false`.
///
/// Errors: the API failure of the live read.
pub async fn candidate_tainted(
    ctx: &Context,
    snap: &Snapshot,
    claim: &NodeClaim,
) -> Result<bool, kube::Error> {
    let Some(node) = node_name(snap, claim) else {
        return Ok(false);
    };
    let cached = snap
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node.as_str()));
    if cached.is_some_and(|n| has_taint(n)) {
        return Ok(true);
    }
    is_tainted(ctx, &node).await
}

/// Read `name`, ask `change` for the merge patch that makes it hold (`None`: it holds), write
/// it guarded by the resourceVersion read, and start again until it holds or the attempts run
/// out: a conflict at once, a throttled (429), failed (5xx) or lost answer after a backoff.
async fn converge<K>(
    api: &Api<K>,
    name: &str,
    mut change: impl FnMut(&K) -> Option<Value>,
) -> Result<Held, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let mut delays = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(2))
        .with_factor(2.0)
        .without_max_times()
        .build();
    let mut attempt = 1;
    loop {
        let err = match write_once(api, name, &mut change).await {
            Ok(held) => return Ok(held),
            Err(e) => e,
        };
        let code = match &err {
            kube::Error::Api(status) => Some(status.code),
            _ => None,
        };
        let retry = code.is_none_or(|c| c == 409 || c == 429 || c >= 500);
        if !retry || attempt >= ATTEMPTS {
            return Err(err);
        }
        attempt += 1;
        if code != Some(409)
            && let Some(delay) = delays.next()
        {
            tokio::time::sleep(delay).await;
        }
    }
}

/// One read and, when the object does not hold the change yet, one guarded write.
async fn write_once<K>(
    api: &Api<K>,
    name: &str,
    change: &mut impl FnMut(&K) -> Option<Value>,
) -> Result<Held, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let Some(live) = api.get_opt(name).await? else {
        return Ok(Held::Gone);
    };
    let Some(mut patch) = change(&live) else {
        return Ok(Held::Yes);
    };
    patch["metadata"]["resourceVersion"] = json!(live.meta().resource_version);
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(Held::Yes),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Held::Gone),
        Err(e) => Err(e),
    }
}
