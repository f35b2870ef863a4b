//! Expiration (upstream `nodeclaim/expiration`): a NodeClaim is deleted once `expireAfter` has
//! passed since its creation. Forceful: no disruption budget applies and no replacement is
//! launched first; the NodeClaim's `terminationGracePeriod` bounds its drain.

use crds::NodeClaim;
use jiff::{SignedDuration, Timestamp};

/// When the NodeClaim expires: creation + `spec.expireAfter`; `None` for `Never` or a NodeClaim
/// without a creation time.
pub fn expires_at(claim: &NodeClaim) -> Option<Timestamp> {
    let created = claim.metadata.creation_timestamp.as_ref()?.0;
    let after = SignedDuration::try_from(claim.spec.expire_after.duration()?).ok()?;
    created.checked_add(after).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(expire_after: &str) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"requirements": [], "expireAfter": expire_after,
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}))
        .expect("claim")
    }

    #[test]
    fn expiry_is_creation_plus_expire_after_and_never_means_never() {
        assert_eq!(
            expires_at(&claim("720h")),
            Some("2026-01-31T00:00:00Z".parse().expect("timestamp"))
        );
        assert_eq!(expires_at(&claim("Never")), None);
    }
}
