//! How many EBS volumes a sandbox node's simulated EBS CSI driver says it can attach (its CSINode
//! `allocatable.count` for `ebs.csi.aws.com`), by instance type: the same rule the provisioner
//! plans in-flight nodes with ([`karpenter_core::capacity::ebs_attach_limit`]: the catalog's
//! `ebs_max_attachments` less the root volume), so a plan and the node agree.
//!
//! The real driver (its node plugin's volume limit) starts from the Nitro shared attachment
//! limit, or a type's dedicated EBS limit where it has one, and subtracts the network interfaces
//! and NVMe instance-store volumes attached when it starts as well as the block devices already
//! attached (the root volume); the sandbox attaches no extra interfaces, so the root volume is
//! the only subtraction here.

use karpenter_core::capacity::catalog::Catalog;
use karpenter_core::capacity::ebs_attach_limit;

/// The number of EBS volumes pods can attach on a node of `instance_type` (e.g. `m5.large` →
/// 26); `None` for a type the catalog does not know (the node then reports no limit).
pub fn attach_limit(instance_type: &str) -> Option<i32> {
    let catalog = Catalog::embedded().ok()?;
    let limit = ebs_attach_limit(catalog.get(instance_type)?.spec.ebs_max_attachments)?;
    i32::try_from(limit).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_come_from_the_catalog_minus_the_root_volume() {
        assert_eq!(attach_limit("m5.large"), Some(26));
        assert_eq!(attach_limit("m7i.large"), Some(31));
        assert_eq!(attach_limit("m4.large"), Some(39));
        assert_eq!(attach_limit("no.such-type"), None);
    }
}
