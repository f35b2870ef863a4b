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
    use testutil::{T0, nodeclaim};

    /// A NodeClaim created at [`T0`] that expires `expire_after` later.
    fn claim(expire_after: &str) -> NodeClaim {
        nodeclaim("c")
            .created(T0)
            .expire_after(expire_after)
            .build()
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
