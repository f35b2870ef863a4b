//! When a deleting NodeClaim must be gone (upstream's `karpenter.sh/nodeclaim-termination-timestamp`):
//! its deletion time plus its `terminationGracePeriod`. The finalizer that enforces it is
//! `controller::nodeclaim::termination`.

use crds::NodeClaim;
use jiff::{SignedDuration, Timestamp};

/// When a deleting NodeClaim must be gone: its deletion time plus its `terminationGracePeriod`
/// (upstream's `karpenter.sh/nodeclaim-termination-timestamp`). `None` without a grace period
/// (the drain then waits for as long as PDBs and do-not-disrupt pods make it).
pub fn termination_deadline(claim: &NodeClaim) -> Option<Timestamp> {
    let deleted = claim.metadata.deletion_timestamp.as_ref()?.0;
    let grace = claim.spec.termination_grace_period.as_ref()?.duration();
    deleted
        .checked_add(SignedDuration::try_from(grace).ok()?)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use testutil::nodeclaim;

    #[test]
    fn the_deadline_is_deletion_plus_the_grace_period() {
        let mut claim = nodeclaim("c")
            .deleting("2026-01-01T00:00:00Z")
            .termination_grace_period("1h30m")
            .build();
        assert_eq!(
            termination_deadline(&claim),
            Some("2026-01-01T01:30:00Z".parse().expect("timestamp"))
        );
        claim.spec.termination_grace_period = None;
        assert_eq!(termination_deadline(&claim), None);
    }
}
