//! Drift hash stamps (upstream `nodepool/hash` and AWS `nodeclass/hash` controllers): keep the
//! current hash and hash version on each NodePool and EC2NodeClass, and when a NodeClaim was
//! stamped under another version (an older controller, or upstream Karpenter taking over),
//! re-stamp it with the current hash instead of letting it count as drifted. NodeClaims that are
//! already `Drifted` keep their stamp: their drift was real under the old hashing.

use std::collections::BTreeMap;

use crds::conditions::{self, DRIFTED, LAUNCHED};
use crds::hash::{self, HashedFields, Stamp};
use crds::labels::{
    EC2NODECLASS_HASH_ANNOTATION, EC2NODECLASS_HASH_VERSION_ANNOTATION, NODEPOOL_HASH_ANNOTATION,
    NODEPOOL_HASH_VERSION_ANNOTATION,
};
use crds::{EC2NodeClass, NodeClaim, NodePool, StatusConditions};

use super::drift::{HashVersions, IMAGE_NAME_ANNOTATION};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::nodeclaim::lifecycle::patch_metadata;
use crate::operator::Context;
use crate::operator::events::{EventType, reason};
use crate::operator::reconcile::ReconcileError;
use crate::state::snapshot::nodepool_of;

/// How soon a reconcile that left NodeClaims to re-stamp runs again.
pub const RESTAMP_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// The NodeClaims to re-stamp: those stamped under a version
/// other than `version` (or not at all) and not `Drifted`. `launched_only` skips NodeClaims not
/// launched yet (the node class stamp is written at launch).
pub fn restamps<'a>(
    claims: impl IntoIterator<Item = &'a NodeClaim>,
    stamp_of: impl Fn(&NodeClaim) -> Stamp,
    version: &str,
    launched_only: bool,
) -> Vec<&'a NodeClaim> {
    claims
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| stamp_of(c).version.as_deref() != Some(version))
        .filter(|c| !conditions::is_true(c.status_conditions(), DRIFTED))
        .filter(|c| !launched_only || conditions::is_true(c.status_conditions(), LAUNCHED))
        .collect()
}

/// Stamp a NodePool with its current hash and version, and back-propagate to its NodeClaims
/// stamped under another version.
///
/// Returns how many NodeClaims are still to re-stamp (a write conflicted or failed; the caller
/// retries soon). Errors: the NodePool's own stamp could not be written.
pub async fn stamp_nodepool(ctx: &Context, pool: &NodePool) -> Result<usize, ReconcileError> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let version = &ctx.settings.hash_versions.nodepool;
    let fields = hash::nodepool_fields(pool);
    let own = Stamp::nodepool(pool.metadata.annotations.as_ref());
    if own.hash.as_deref() != Some(fields.hash().as_str()) || own.version.as_ref() != Some(version)
    {
        let api: Api<NodePool> = Api::all(ctx.client.clone());
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                NODEPOOL_HASH_ANNOTATION: fields.hash(),
                NODEPOOL_HASH_VERSION_ANNOTATION: version,
            }}})),
        )
        .await?;
    }
    let claims: Vec<NodeClaim> = ctx
        .state
        .nodeclaims
        .state()
        .iter()
        .filter(|c| nodepool_of(c.metadata.labels.as_ref()) == Some(name.as_str()))
        .map(|c| (**c).clone())
        .collect();
    let stale = restamps(
        &claims,
        |c| Stamp::nodepool(c.metadata.annotations.as_ref()),
        version,
        false,
    );
    let stamp = hash::nodepool_stamp(&fields, version);
    let mut pending = 0;
    for claim in stale {
        // One NodeClaim that cannot be written must not hold up the others, nor the caller's
        // status work: the caller retries soon.
        match restamp(ctx, claim, &stamp, "NodePool", &fields).await {
            Ok(true) => {}
            Ok(false) => pending += 1,
            Err(e) => {
                pending += 1;
                tracing::warn!(nodeclaim = ?claim.metadata.name, error = %e, "re-stamping drift hash");
            }
        }
    }
    Ok(pending)
}

/// Stamp an EC2NodeClass with its current hash and version, and back-propagate to the launched
/// NodeClaims using it that were stamped under another version.
///
/// Returns how many NodeClaims are still to re-stamp. Errors: the EC2NodeClass's own stamp could
/// not be written.
pub async fn stamp_nodeclass(ctx: &Context, class: &EC2NodeClass) -> Result<usize, ReconcileError> {
    let name = class.metadata.name.clone().unwrap_or_default();
    let version = &ctx.settings.hash_versions.nodeclass;
    let fields = hash::nodeclass_fields(class);
    let own = Stamp::nodeclass(class.metadata.annotations.as_ref());
    if own.hash.as_deref() != Some(fields.hash().as_str()) || own.version.as_ref() != Some(version)
    {
        let api: Api<EC2NodeClass> = Api::all(ctx.client.clone());
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                EC2NODECLASS_HASH_ANNOTATION: fields.hash(),
                EC2NODECLASS_HASH_VERSION_ANNOTATION: version,
            }}})),
        )
        .await?;
    }
    let claims: Vec<NodeClaim> = ctx
        .state
        .nodeclaims
        .state()
        .iter()
        .filter(|c| c.spec.node_class_ref.name == name)
        .map(|c| (**c).clone())
        .collect();
    let stale = restamps(
        &claims,
        |c| Stamp::nodeclass(c.metadata.annotations.as_ref()),
        version,
        true,
    );
    let stamp = hash::nodeclass_stamp(&fields, version);
    let mut pending = 0;
    for claim in stale {
        // One NodeClaim that cannot be written must not hold up the others, nor the caller's
        // status work: the caller retries soon.
        match restamp(ctx, claim, &stamp, "EC2NodeClass", &fields).await {
            Ok(true) => {}
            Ok(false) => pending += 1,
            Err(e) => {
                pending += 1;
                tracing::warn!(nodeclaim = ?claim.metadata.name, error = %e, "re-stamping drift hash");
            }
        }
    }
    Ok(pending)
}

/// What a launch stamps on its NodeClaim besides labels: the node class drift stamp (hash,
/// version and field snapshot; upstream stamps the hash at launch too) and the name of the image
/// the instance booted, when the node class's status names it.
pub fn launch_stamp(
    node_class: &EC2NodeClass,
    image_id: &str,
    versions: &HashVersions,
) -> BTreeMap<String, String> {
    let mut out = crds::hash::nodeclass_stamp(
        &crds::hash::nodeclass_fields(node_class),
        &versions.nodeclass,
    );
    let name = node_class
        .status
        .as_ref()
        .and_then(|s| s.amis.iter().find(|a| a.id == image_id))
        .and_then(|a| a.name.clone());
    if let Some(name) = name {
        out.insert(IMAGE_NAME_ANNOTATION.to_string(), name);
    }
    out
}

async fn restamp(
    ctx: &Context,
    claim: &NodeClaim,
    stamp: &BTreeMap<String, String>,
    kind: &str,
    fields: &HashedFields,
) -> Result<bool, ReconcileError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let old = match kind {
        "NodePool" => Stamp::nodepool(claim.metadata.annotations.as_ref()),
        _ => Stamp::nodeclass(claim.metadata.annotations.as_ref()),
    };
    match patch_metadata(
        ctx,
        &name,
        json!({"resourceVersion": claim.metadata.resource_version, "annotations": stamp}),
    )
    .await
    {
        Ok(_) => {}
        // Changed meanwhile: retried soon with the fresh object.
        Err(kube::Error::Api(e)) if e.code == 409 => return Ok(false),
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(true),
        Err(e) => return Err(e.into()),
    }
    let message = match &old.version {
        Some(v) => format!(
            "{kind} hash re-stamped: version {v} -> {} (hash {}), not drifted",
            stamp_version(stamp),
            fields.hash()
        ),
        None => format!(
            "{kind} hash stamped: version {} (hash {})",
            stamp_version(stamp),
            fields.hash()
        ),
    };
    tracing::info!(nodeclaim = %name, kind, old_version = ?old.version, "re-stamped drift hash");
    ctx.recorder
        .about(claim, EventType::Normal, reason::HASH_RESTAMPED, message);
    Ok(true)
}

fn stamp_version(stamp: &BTreeMap<String, String>) -> &str {
    stamp
        .get(NODEPOOL_HASH_VERSION_ANNOTATION)
        .or_else(|| stamp.get(EC2NODECLASS_HASH_VERSION_ANNOTATION))
        .map(String::as_str)
        .unwrap_or("")
}
