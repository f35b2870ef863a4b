//! CSI attach limits (upstream `pkg/scheduling/volumeusage.go`, `state/statenode.go`
//! `VolumeUsage`, `provisioning/scheduling/existingnode.go`): each unique volume a node's pods
//! use takes one attachment slot of its CSI driver, and a node attaches at most its limit per
//! driver. An existing node's limits come from its CSINode; an in-flight or new NodeClaim's from
//! its instance type's EBS limit ([`crate::capacity::ebs_attach_limit`]), which upstream leaves
//! unlimited until the CSINode reports.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::storage::v1::CSINode;

use crate::capacity::InstanceType;

/// The AWS EBS CSI driver, whose limit the instance types know.
pub const EBS_CSI_DRIVER: &str = "ebs.csi.aws.com";

/// Attach limits per CSI driver name (volumes a node may attach); a driver not listed is
/// unlimited.
pub type AttachLimits = BTreeMap<String, i64>;

/// Volumes per CSI driver, each named by its claim (`namespace/claim`, as upstream counts them):
/// two pods sharing a claim use one slot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Volumes(BTreeMap<String, BTreeSet<String>>);

/// A driver whose limit a placement would exceed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitReached {
    /// CSI driver name, e.g. `ebs.csi.aws.com`.
    pub driver: String,
    /// Its attach limit on the node (volumes).
    pub limit: i64,
}

impl fmt::Display for LimitReached {
    /// `ebs.csi.aws.com attach limit 25 reached`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} attach limit {} reached", self.driver, self.limit)
    }
}

impl Volumes {
    /// Record volume `id` (`namespace/claim`) of `driver`.
    pub fn insert(&mut self, driver: &str, id: String) {
        self.0.entry(driver.to_string()).or_default().insert(id);
    }

    /// Whether no volume is recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Add every volume of `other` (a volume already here is not counted twice).
    pub fn add(&mut self, other: &Volumes) {
        for (driver, ids) in &other.0 {
            self.0
                .entry(driver.clone())
                .or_default()
                .extend(ids.iter().cloned());
        }
    }

    /// How many distinct volumes of `driver` are recorded.
    pub fn count(&self, driver: &str) -> usize {
        self.0.get(driver).map_or(0, BTreeSet::len)
    }

    /// The first driver (by name) whose distinct volumes, these and `more` together, would
    /// exceed its limit in `limits`; `None` when all fit. Volumes already counted here cost
    /// nothing again.
    pub fn exceeds(&self, more: &Volumes, limits: &AttachLimits) -> Option<LimitReached> {
        more.0.iter().find_map(|(driver, ids)| {
            let limit = *limits.get(driver)?;
            let mine = self.0.get(driver);
            let new = ids
                .iter()
                .filter(|id| mine.is_none_or(|m| !m.contains(*id)));
            let total = mine.map_or(0, BTreeSet::len) + new.count();
            (i64::try_from(total).unwrap_or(i64::MAX) > limit).then(|| LimitReached {
                driver: driver.clone(),
                limit,
            })
        })
    }
}

/// A node's limits from its CSINode (`storage.k8s.io/v1`, named as the node): each driver's
/// `allocatable.count`; drivers without one are unlimited, as upstream.
pub fn csinode_limits(csinode: &CSINode) -> AttachLimits {
    csinode
        .spec
        .drivers
        .iter()
        .filter_map(|d| Some((d.name.clone(), i64::from(d.allocatable.as_ref()?.count?))))
        .collect()
}

/// The limits of an instance type: its EBS attach limit for [`EBS_CSI_DRIVER`] (none when
/// unknown).
pub fn instance_type_limits(it: &InstanceType) -> AttachLimits {
    it.ebs_attach_limit
        .map(|n| (EBS_CSI_DRIVER.to_string(), n))
        .into_iter()
        .collect()
}

/// The limits every one of `types` honours: per driver the smallest limit, and a driver is
/// limited if any type limits it (the NodeClaim may launch as any of them). Empty for no types.
pub fn tightest<'a>(types: impl IntoIterator<Item = &'a InstanceType>) -> AttachLimits {
    let mut out = AttachLimits::new();
    for it in types {
        for (driver, n) in instance_type_limits(it) {
            out.entry(driver)
                .and_modify(|m| *m = (*m).min(n))
                .or_insert(n);
        }
    }
    out
}

/// Whether an instance type can attach `volumes`: `None`, or the limit they exceed.
pub fn type_exceeded(it: &InstanceType, volumes: &Volumes) -> Option<LimitReached> {
    if volumes.is_empty() {
        return None;
    }
    Volumes::default().exceeds(volumes, &instance_type_limits(it))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vols(driver: &str, ids: &[&str]) -> Volumes {
        let mut v = Volumes::default();
        for id in ids {
            v.insert(driver, id.to_string());
        }
        v
    }

    #[test]
    fn shared_claims_count_once_and_unlisted_drivers_are_unlimited() {
        let limits: AttachLimits = [(EBS_CSI_DRIVER.to_string(), 2)].into();
        let used = vols(EBS_CSI_DRIVER, &["ns/a", "ns/b"]);
        assert_eq!(
            used.exceeds(&vols(EBS_CSI_DRIVER, &["ns/a"]), &limits),
            None
        );
        assert_eq!(
            used.exceeds(&vols(EBS_CSI_DRIVER, &["ns/c"]), &limits),
            Some(LimitReached {
                driver: EBS_CSI_DRIVER.into(),
                limit: 2
            })
        );
        assert_eq!(
            used.exceeds(&vols("efs.csi.aws.com", &["ns/c"]), &limits),
            None
        );
        assert_eq!(
            used.exceeds(&vols(EBS_CSI_DRIVER, &["ns/c"]), &limits)
                .map(|l| l.to_string())
                .as_deref(),
            Some("ebs.csi.aws.com attach limit 2 reached")
        );
    }

    #[test]
    fn a_csinode_limits_only_drivers_that_report_a_count() {
        let csinode: CSINode = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "spec": {"drivers": [
                {"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 25}},
                {"name": "efs.csi.aws.com", "nodeID": "i-1"}
            ]}
        }))
        .expect("csinode");
        let limits = csinode_limits(&csinode);
        assert_eq!(limits.get(EBS_CSI_DRIVER), Some(&25));
        assert_eq!(limits.len(), 1);
    }
}
