//! Every write to a NodeClaim, in one place: metadata merge patches, condition changes, status
//! patches guarded by the resourceVersion they were computed from, and deletes (plain, or only
//! if the NodeClaim is still as it was read). The lifecycle, termination, drift, upgrade and
//! garbage-collection controllers all write through these, so the conflict semantics are the
//! same everywhere: a write computed from a stale read answers 409 and the reconcile retries on
//! the fresh object.

use std::collections::BTreeMap;

use crds::{DisruptionReason, NodeClaim, StatusConditions};
use karpenter_core::snapshot::{Snapshot, nodepool_of};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::runtime::Context;
use crate::runtime::events::{EventType, reason};
use crate::runtime::metrics;
use crate::runtime::reconcile::ReconcileError;

/// Merge-patch a NodeClaim's metadata (labels, annotations, finalizers; with a
/// `resourceVersion` in `metadata` the patch conflicts when the NodeClaim changed). Returns its
/// new resourceVersion.
pub async fn patch_metadata(
    ctx: &Context,
    name: &str,
    metadata: serde_json::Value,
) -> Result<Option<String>, kube::Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let patched = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": metadata})),
        )
        .await?;
    Ok(patched.metadata.resource_version)
}

/// Change one of the NodeClaim's conditions, writing the status only when it changed, with the
/// NodeClaim's resourceVersion (a concurrent writer makes this conflict and retry, instead of
/// one overwriting the other's conditions). Returns whether it changed.
pub async fn set_condition(
    ctx: &Context,
    claim: &NodeClaim,
    change: impl FnOnce(&mut crds::conditions::ConditionSet<'_>) -> bool,
) -> Result<bool, ReconcileError> {
    let mut updated = claim.clone();
    if !change(&mut updated.condition_set(ctx.clock.now())) {
        return Ok(false);
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    api.patch_status(
        claim.metadata.name.as_deref().unwrap_or(""),
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"resourceVersion": claim.metadata.resource_version},
            "status": updated.status,
        })),
    )
    .await?;
    Ok(true)
}

/// Delete a NodeClaim (its finalizer then terminates the instance).
pub async fn delete_claim(ctx: &Context, name: &str) -> Result<(), kube::Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Delete `claim` only if it is still as it was read: not already deleting, and with a
/// precondition on its `resourceVersion`, so the API server answers 409 Conflict when anyone
/// (another replica, or this controller acting on a stale cache) changed or deleted it since.
/// Returns whether this call started the deletion, which is when a disruption is counted: a
/// repeated DELETE of a NodeClaim held by its finalizer answers 200 too, and must not count
/// again. Already deleting, or gone (404): `Ok(false)`.
///
/// Errors: 409 Conflict when the NodeClaim changed since it was read (someone else acted
/// first; reconcilers retry conflicts quietly and decide again on the fresh object), and any
/// other API failure.
pub async fn delete_claim_as_read(
    client: &kube::Client,
    claim: &NodeClaim,
) -> Result<bool, kube::Error> {
    if claim.metadata.deletion_timestamp.is_some() {
        return Ok(false);
    }
    let name = claim.metadata.name.as_deref().unwrap_or("");
    let api: Api<NodeClaim> = Api::all(client.clone());
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: claim.metadata.resource_version.clone(),
            uid: claim.metadata.uid.clone(),
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Delete `claim` (as read) for a Karpenter reason: first set its `DisruptionReason` condition
/// to True with `reason` (one of [`crds::history::reason`], upstream Karpenter v1's
/// `ConditionTypeDisruptionReason`) and `message`, in a status patch guarded by the
/// resourceVersion read, then delete it with a precondition on the resourceVersion that patch
/// returned ([`delete_claim_as_read`]). The termination finalizer reads the condition back when
/// it records the removal. Returns whether this call started the deletion (already deleting,
/// or gone: `Ok(false)`).
///
/// Errors: 409 Conflict when the NodeClaim changed since it was read (at either write), and any
/// other API failure.
pub async fn disrupt_claim(
    ctx: &Context,
    claim: &NodeClaim,
    reason: &str,
    message: &str,
) -> Result<bool, kube::Error> {
    if claim.metadata.deletion_timestamp.is_some() {
        return Ok(false);
    }
    let mut marked = claim.clone();
    let changed = marked.condition_set(ctx.clock.now()).set_true_with_reason(
        crds::conditions::DISRUPTION_REASON,
        reason,
        message,
    );
    if changed {
        let api: Api<NodeClaim> = Api::all(ctx.client.clone());
        let name = claim.metadata.name.as_deref().unwrap_or("");
        let written = api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"resourceVersion": claim.metadata.resource_version},
                    "status": marked.status,
                })),
            )
            .await;
        match written {
            Ok(w) => marked.metadata.resource_version = w.metadata.resource_version,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    delete_claim_as_read(&ctx.client, &marked).await
}

/// [`disrupt_claim`] on the NodeClaim `name` as the API server has it now (read fresh, retried
/// up to three times when it changes in between), for deletions decided about a NodeClaim the
/// caller did not read itself, such as a rolled-back replacement. Gone: `Ok(false)`.
///
/// Errors: it kept changing (409), or any other API failure.
pub async fn disrupt_by_name(
    ctx: &Context,
    name: &str,
    reason: &str,
    message: &str,
) -> Result<bool, kube::Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let mut attempt = 0;
    loop {
        attempt += 1;
        let Some(fresh) = api.get_opt(name).await? else {
            return Ok(false);
        };
        match disrupt_claim(ctx, &fresh, reason, message).await {
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 3 => continue,
            other => return other,
        }
    }
}

/// One status patch, only when the status changed, with the resourceVersion the status was
/// computed from (`after`'s: the reconcile's own metadata patches update it), so a concurrent
/// writer, such as node termination setting `Drained`, makes it conflict and retry instead of
/// losing a condition.
pub async fn write_status(
    ctx: &Context,
    before: &NodeClaim,
    after: &NodeClaim,
) -> Result<Option<String>, kube::Error> {
    if before.status == after.status {
        return Ok(after.metadata.resource_version.clone());
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let name = after.metadata.name.clone().unwrap_or_default();
    let written = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"resourceVersion": after.metadata.resource_version},
                "status": after.status,
            })),
        )
        .await?;
    Ok(written.metadata.resource_version)
}

/// Write the labels and annotations `after` adds or changes relative to `before` (a merge
/// patch of only those keys, without a resourceVersion: keys others wrote meanwhile are kept).
/// Returns the new resourceVersion, or `None` when nothing changed.
///
/// Errors: the patch failed.
pub async fn write_metadata(
    ctx: &Context,
    before: &NodeClaim,
    after: &NodeClaim,
) -> Result<Option<String>, kube::Error> {
    let changed = |b: Option<&BTreeMap<String, String>>, a: Option<&BTreeMap<String, String>>| {
        let b = b.cloned().unwrap_or_default();
        a.cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, v)| b.get(k) != Some(v))
            .collect::<BTreeMap<_, _>>()
    };
    let labels = changed(
        before.metadata.labels.as_ref(),
        after.metadata.labels.as_ref(),
    );
    let annotations = changed(
        before.metadata.annotations.as_ref(),
        after.metadata.annotations.as_ref(),
    );
    if labels.is_empty() && annotations.is_empty() {
        return Ok(None);
    }
    let name = after.metadata.name.as_deref().unwrap_or_default();
    patch_metadata(
        ctx,
        name,
        json!({"labels": labels, "annotations": annotations}),
    )
    .await
}

/// How a NodeClaim create ended ([`create_named`]).
#[derive(Debug)]
pub enum CreateOutcome {
    /// The NodeClaim exists: the create's answer, or a read after a lost answer.
    Created(Box<NodeClaim>),
    /// The API refused the create (it does not exist): 400, 403, 404, 422, a name another
    /// NodeClaim already has, or throttling that outlasted the retries.
    Refused(kube::Error),
    /// An attempt's answer was lost (a 5xx, a timeout, a dropped connection) and no later
    /// attempt or read settled whether it took effect: the NodeClaim may exist.
    Unknown(kube::Error),
}

/// Attempts at one NodeClaim create, answers lost included ([`create_named`]).
const CREATE_ATTEMPTS: usize = 5;

/// Create `claim`, which must carry a name (not `generateName`): as kube-apiserver may apply a
/// create and lose its answer (a 504 after the write, a connection that drops), a create whose
/// outcome is unknown is sent again under the same name, and an `AlreadyExists` answer is read
/// back by name: with the spec sent, it is this create's result (kube's client resends a
/// create answered 504 by itself, so the first answer seen may already be this one); with
/// another spec, the name is taken and the create refused. Throttling (429) and unknown
/// outcomes are retried with exponential backoff (100 ms doubling to 2 s), at most
/// [`CREATE_ATTEMPTS`] attempts in all. Never creates two NodeClaims for one call.
pub async fn create_named(api: &Api<NodeClaim>, claim: &NodeClaim) -> CreateOutcome {
    use backon::{BackoffBuilder, ExponentialBuilder};
    let name = claim.metadata.name.clone().unwrap_or_default();
    let mut delays = ExponentialBuilder::default()
        .with_min_delay(std::time::Duration::from_millis(100))
        .with_max_delay(std::time::Duration::from_secs(2))
        .with_factor(2.0)
        .without_max_times()
        .build();
    // Whether an earlier attempt may have taken effect.
    let mut maybe_applied = false;
    let mut attempt = 1;
    loop {
        let err = match api.create(&PostParams::default(), claim).await {
            Ok(created) => return CreateOutcome::Created(Box::new(created)),
            Err(e) => e,
        };
        let answer = match &err {
            kube::Error::Api(ae) => Some((ae.code, ae.reason.as_str())),
            _ => None,
        };
        let err = match answer {
            // An earlier attempt of ours took effect (kube's client also resends a create
            // answered 504 on its own), or another NodeClaim has the name: the spec tells.
            Some((409, "AlreadyExists")) => match api.get_opt(&name).await {
                Ok(Some(existing)) if existing.spec == claim.spec => {
                    return CreateOutcome::Created(Box::new(existing));
                }
                Ok(Some(_)) => return CreateOutcome::Refused(err),
                // Deleted since: whatever deleted it decided so; create it again.
                Ok(None) => err,
                Err(read) => {
                    maybe_applied = true;
                    read
                }
            },
            Some((429, _)) => err,
            Some((code, _)) if code < 500 => {
                return match maybe_applied {
                    true => CreateOutcome::Unknown(err),
                    false => CreateOutcome::Refused(err),
                };
            }
            _ => {
                tracing::debug!(nodeclaim = %name, error = %err, "create answer lost; trying again under the same name");
                maybe_applied = true;
                err
            }
        };
        let delay = delays.next();
        if attempt >= CREATE_ATTEMPTS || delay.is_none() {
            return match maybe_applied {
                true => CreateOutcome::Unknown(err),
                false => CreateOutcome::Refused(err),
            };
        }
        attempt += 1;
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
    }
}

/// `<prefix>-<5 letters>`: a NodeClaim name chosen before the create (so a restart creates the
/// same one), with a suffix like the API server's `generateName` ones (lowercase consonants and
/// digits, no vowels: no words).
pub fn generated_name(prefix: &str) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{prefix}-{suffix}")
}

/// Delete the disruption candidate `name` (read live; gone is done) through the termination
/// path (drain, then terminate) with [`disrupt_claim`], and, if this call started the deletion,
/// count it in `karpenter_nodeclaims_disrupted_total` (with its NodePool's consolidation
/// policy from `snap`) and publish the `DisruptionTerminating` Event with `message`.
///
/// Errors: the read or [`disrupt_claim`] failed.
pub async fn terminate_candidate(
    ctx: &Context,
    snap: &Snapshot,
    name: &str,
    reason: DisruptionReason,
    message: &str,
) -> Result<(), kube::Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let Some(fresh) = api.get_opt(name).await? else {
        return Ok(());
    };
    if disrupt_claim(ctx, &fresh, reason.as_str(), message).await? {
        let policy = snap
            .nodepools
            .iter()
            .find(|p| Some(p.name_any().as_str()) == nodepool_of(fresh.metadata.labels.as_ref()))
            .map(|p| p.spec.disruption.consolidation_policy);
        ctx.metrics
            .nodeclaim_disrupted_with(&fresh, metric_reason(reason), policy);
        ctx.recorder.about(
            &fresh,
            EventType::Normal,
            reason::DISRUPTION_TERMINATING,
            message.to_string(),
        );
    }
    Ok(())
}

/// The `karpenter_nodeclaims_disrupted_total` reason of a consolidation or drift disruption.
fn metric_reason(reason: DisruptionReason) -> &'static str {
    match reason {
        DisruptionReason::Empty => metrics::reason::EMPTY,
        DisruptionReason::Underutilized => metrics::reason::UNDERUTILIZED,
        DisruptionReason::Drifted => metrics::reason::DRIFTED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crds::labels::TERMINATION_FINALIZER;
    use testutil::nodeclaim;

    /// A sandbox API server with the NodeClaim CRD installed, and a client of it.
    async fn served() -> (sandbox::runtime::Sandbox, kube::Client) {
        let server = sandbox::runtime::Sandbox::start(0).await.expect("sandbox");
        let store = server.store();
        let crd_type = store
            .resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .expect("CRDs are served");
        for crd in crds::generate::crds() {
            let crd = serde_json::to_value(&crd).expect("CRD as JSON");
            store.create(&crd_type, "", crd).expect("install the CRD");
        }
        let config = server.client_config();
        let client = kube::Client::try_from(config).expect("client");
        (server, client)
    }

    /// Every write answers 504 after taking effect (kube-apiserver's lost answer) until the
    /// budget runs out: the create is sent again under the same name, its AlreadyExists is
    /// read back, and exactly one NodeClaim exists.
    #[tokio::test]
    async fn a_create_whose_answer_is_lost_is_read_back_not_made_twice() {
        use sandbox::faults::{FaultConfig, FaultKind};
        let (server, client) = served().await;
        let api: Api<NodeClaim> = Api::all(client);
        let mut config = FaultConfig::default().with_rate(FaultKind::LostResponse, 1000);
        config.budget = Some(2);
        server.faults().configure(config);
        server.faults().enable();
        let claim = nodeclaim("default-lost").build();
        let outcome = create_named(&api, &claim).await;
        server.faults().disable();
        let CreateOutcome::Created(created) = outcome else {
            panic!("expected the NodeClaim read back, got {outcome:?}");
        };
        assert_eq!(created.metadata.name.as_deref(), Some("default-lost"));
        assert!(
            created.metadata.uid.is_some(),
            "the stored object, not the one sent"
        );
        let all = api.list(&Default::default()).await.expect("list");
        assert_eq!(all.items.len(), 1, "one NodeClaim, not one per attempt");
    }

    /// A create under a name another NodeClaim (another spec) has is refused at once; the
    /// same create sent again is its own result (kube's client resends creates answered 504);
    /// one whose every answer is lost ends unknown, not refused.
    #[tokio::test]
    async fn refused_repeated_and_unknown_creates_are_told_apart() {
        use sandbox::faults::{FaultConfig, FaultKind};
        let (server, client) = served().await;
        let api: Api<NodeClaim> = Api::all(client);
        let claim = nodeclaim("default-taken").request("cpu", "1").build();
        let CreateOutcome::Created(first) = create_named(&api, &claim).await else {
            panic!("the first create succeeds");
        };
        let CreateOutcome::Created(again) = create_named(&api, &claim).await else {
            panic!("the same create again reads back the first");
        };
        assert_eq!(again.metadata.uid, first.metadata.uid);
        let other = nodeclaim("default-taken").request("cpu", "2").build();
        assert!(matches!(
            create_named(&api, &other).await,
            CreateOutcome::Refused(kube::Error::Api(e)) if e.code == 409
        ));
        server
            .faults()
            .configure(FaultConfig::default().with_rate(FaultKind::InternalError, 1000));
        server.faults().enable();
        let unsure = nodeclaim("default-unsure").build();
        let outcome = create_named(&api, &unsure).await;
        server.faults().disable();
        assert!(
            matches!(outcome, CreateOutcome::Unknown(_)),
            "every answer a 500: {outcome:?}"
        );
    }

    /// Against the sandbox API server: the first delete of a NodeClaim as read starts its
    /// deletion; repeating it with the same (now stale) read is refused with 409, and with a
    /// fresh read (already deleting) does nothing, so a disruption is counted once.
    #[tokio::test]
    async fn a_nodeclaim_is_deleted_once_per_read() {
        let (_server, client) = served().await;
        let api: Api<NodeClaim> = Api::all(client.clone());
        let claim = nodeclaim("default-x")
            .finalizer(TERMINATION_FINALIZER)
            .build();
        let read = api
            .create(&kube::api::PostParams::default(), &claim)
            .await
            .expect("create");
        assert_eq!(delete_claim_as_read(&client, &read).await.ok(), Some(true));
        let again = delete_claim_as_read(&client, &read).await;
        assert!(
            matches!(&again, Err(kube::Error::Api(e)) if e.code == 409),
            "a stale read must conflict: {again:?}"
        );
        let fresh = api.get("default-x").await.expect("still there (finalizer)");
        assert!(fresh.metadata.deletion_timestamp.is_some());
        assert_eq!(
            delete_claim_as_read(&client, &fresh).await.ok(),
            Some(false)
        );
        let mut gone = fresh.clone();
        gone.metadata.deletion_timestamp = None;
        gone.metadata.name = Some("never-existed".into());
        assert_eq!(delete_claim_as_read(&client, &gone).await.ok(), Some(false));
    }
}
