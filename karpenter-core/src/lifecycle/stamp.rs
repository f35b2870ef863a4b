//! Drift hash stamps as data (upstream `nodepool/hash` and AWS `nodeclass/hash`): which
//! NodeClaims a hash-version change re-stamps instead of drifting, and what a launch stamps on
//! its NodeClaim. The controller that writes them is `controller::drift::stamp`.

use std::collections::BTreeMap;

use crds::conditions::{self, DRIFTED, LAUNCHED};
use crds::hash::Stamp;
use crds::{EC2NodeClass, NodeClaim, StatusConditions};

use super::drift::{HashVersions, IMAGE_NAME_ANNOTATION};

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
