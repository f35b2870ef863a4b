//! Drift hash stamps (upstream `nodepool/hash` and AWS `nodeclass/hash` controllers): keep the
//! current hash and hash version on each NodePool and EC2NodeClass, and when a NodeClaim was
//! stamped under another version (an older controller, or upstream Karpenter taking over),
//! re-stamp it with the current hash instead of letting it count as drifted. NodeClaims that are
//! already `Drifted` keep their stamp: their drift was real under the old hashing.

use std::collections::BTreeMap;

use crds::hash::{self, HashedFields, Stamp};
use crds::labels::{
    EC2NODECLASS_HASH_ANNOTATION, EC2NODECLASS_HASH_VERSION_ANNOTATION, NODEPOOL_HASH_ANNOTATION,
    NODEPOOL_HASH_VERSION_ANNOTATION,
};
use crds::{EC2NodeClass, NodeClaim, NodePool};
use karpenter_core::lifecycle::stamp::restamps;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::nodeclaim::writes::patch_metadata;
use crate::runtime::Context;
use crate::runtime::events::{EventType, reason};
use crate::runtime::reconcile::ReconcileError;
use karpenter_core::snapshot::nodepool_of;

/// How soon a reconcile that left NodeClaims to re-stamp runs again.
pub const RESTAMP_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// One kind of drift stamp: which annotations, how the stamp is read and built, and which
/// NodeClaims it applies to.
struct StampKind {
    /// `NodePool` or `EC2NodeClass`, for messages.
    kind: &'static str,
    /// The hash annotation, e.g. `karpenter.sh/nodepool-hash`.
    hash_key: &'static str,
    /// The hash version annotation, e.g. `karpenter.sh/nodepool-hash-version`.
    version_key: &'static str,
    /// Read the stamp from annotations.
    read: fn(Option<&BTreeMap<String, String>>) -> Stamp,
    /// Build the stamp annotations for fields under a version.
    build: fn(&HashedFields, &str) -> BTreeMap<String, String>,
    /// Only launched NodeClaims carry it (the node class stamp is written at launch).
    launched_only: bool,
}

const NODEPOOL_STAMP: StampKind = StampKind {
    kind: "NodePool",
    hash_key: NODEPOOL_HASH_ANNOTATION,
    version_key: NODEPOOL_HASH_VERSION_ANNOTATION,
    read: Stamp::nodepool,
    build: hash::nodepool_stamp,
    launched_only: false,
};

const NODECLASS_STAMP: StampKind = StampKind {
    kind: "EC2NodeClass",
    hash_key: EC2NODECLASS_HASH_ANNOTATION,
    version_key: EC2NODECLASS_HASH_VERSION_ANNOTATION,
    read: Stamp::nodeclass,
    build: hash::nodeclass_stamp,
    launched_only: true,
};

/// Stamp a NodePool with its current hash and version, and back-propagate to its NodeClaims
/// stamped under another version.
///
/// Returns how many NodeClaims are still to re-stamp (a write conflicted or failed; the caller
/// retries soon). Errors: the NodePool's own stamp could not be written.
pub async fn stamp_nodepool(ctx: &Context, pool: &NodePool) -> Result<usize, ReconcileError> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let claims: Vec<NodeClaim> = ctx
        .state
        .nodeclaims
        .state()
        .iter()
        .filter(|c| nodepool_of(c.metadata.labels.as_ref()) == Some(name.as_str()))
        .map(|c| (**c).clone())
        .collect();
    let api: Api<NodePool> = Api::all(ctx.client.clone());
    let version = &ctx.settings.hash_versions.nodepool;
    stamp(
        ctx,
        &NODEPOOL_STAMP,
        &api,
        pool,
        &hash::nodepool_fields(pool),
        version,
        &claims,
    )
    .await
}

/// Stamp an EC2NodeClass with its current hash and version, and back-propagate to the launched
/// NodeClaims using it that were stamped under another version.
///
/// Returns how many NodeClaims are still to re-stamp. Errors: the EC2NodeClass's own stamp could
/// not be written.
pub async fn stamp_nodeclass(ctx: &Context, class: &EC2NodeClass) -> Result<usize, ReconcileError> {
    let name = class.metadata.name.clone().unwrap_or_default();
    let claims: Vec<NodeClaim> = ctx
        .state
        .nodeclaims
        .state()
        .iter()
        .filter(|c| c.spec.node_class_ref.name == name)
        .map(|c| (**c).clone())
        .collect();
    let api: Api<EC2NodeClass> = Api::all(ctx.client.clone());
    let version = &ctx.settings.hash_versions.nodeclass;
    stamp(
        ctx,
        &NODECLASS_STAMP,
        &api,
        class,
        &hash::nodeclass_fields(class),
        version,
        &claims,
    )
    .await
}

/// Write `owner`'s own stamp when it changed, then re-stamp its stale `claims`.
async fn stamp<K>(
    ctx: &Context,
    kind: &StampKind,
    api: &Api<K>,
    owner: &K,
    fields: &HashedFields,
    version: &str,
    claims: &[NodeClaim],
) -> Result<usize, ReconcileError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let own = (kind.read)(owner.meta().annotations.as_ref());
    let hash = fields.hash();
    if own.hash.as_deref() != Some(hash.as_str()) || own.version.as_deref() != Some(version) {
        api.patch(
            owner.meta().name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                kind.hash_key: hash,
                kind.version_key: version,
            }}})),
        )
        .await?;
    }
    let stale = restamps(
        claims,
        |c| (kind.read)(c.metadata.annotations.as_ref()),
        version,
        kind.launched_only,
    );
    let stamp = (kind.build)(fields, version);
    let mut pending = 0;
    for claim in stale {
        // One NodeClaim that cannot be written must not hold up the others, nor the caller's
        // status work: the caller retries soon.
        match restamp(ctx, claim, kind, &stamp, version, &hash).await {
            Ok(true) => {}
            Ok(false) => pending += 1,
            Err(e) => {
                pending += 1;
                tracing::warn!(nodeclaim = %claim.metadata.name.as_deref().unwrap_or_default(), error = %e, "re-stamping drift hash");
            }
        }
    }
    Ok(pending)
}

/// Write `stamp` on one NodeClaim (guarded by its resourceVersion) with an Event. Returns
/// false when it changed meanwhile (retry with the fresh object).
async fn restamp(
    ctx: &Context,
    claim: &NodeClaim,
    kind: &StampKind,
    stamp: &BTreeMap<String, String>,
    version: &str,
    hash: &str,
) -> Result<bool, ReconcileError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let old = (kind.read)(claim.metadata.annotations.as_ref());
    match patch_metadata(
        ctx,
        &name,
        json!({"resourceVersion": claim.metadata.resource_version, "annotations": stamp}),
    )
    .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => return Ok(false),
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(true),
        Err(e) => return Err(e.into()),
    }
    let what = kind.kind;
    let message = match &old.version {
        Some(v) => {
            format!("{what} hash re-stamped: version {v} -> {version} (hash {hash}), not drifted")
        }
        None => format!("{what} hash stamped: version {version} (hash {hash})"),
    };
    tracing::info!(nodeclaim = %name, kind = what, old_version = ?old.version, "re-stamped drift hash");
    ctx.recorder
        .about(claim, EventType::Normal, reason::HASH_RESTAMPED, message);
    Ok(true)
}
