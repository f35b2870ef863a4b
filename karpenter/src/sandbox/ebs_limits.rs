//! How many EBS volumes a sandbox node's simulated EBS CSI driver says it can attach (its CSINode
//! `allocatable.count` for `ebs.csi.aws.com`), by instance type, from the vendored EC2 catalog's
//! `ebs_max_attachments` column (DescribeInstanceTypes' EBS attachment limit).
//!
//! The rule modelled: the type's attachment limit minus one for the root volume every node
//! boots with. The real driver (its node plugin's volume limit) starts from the Nitro shared
//! attachment limit, or a type's dedicated EBS limit where it has one, and subtracts the network
//! interfaces and NVMe instance-store volumes attached when it starts as well as the block
//! devices already attached (the root volume); the sandbox attaches no extra interfaces, so the
//! root volume is the only subtraction here.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;

/// The vendored catalog (the same file the capacity model reads).
const INSTANCE_TYPES_CSV: &str =
    include_str!("../../../karpenter-core/data/ec2/ec2-instance-types.csv");

/// Volumes every node has attached before any pod: the root volume.
const ROOT_VOLUMES: i32 = 1;

#[derive(Deserialize)]
struct Row {
    instance_type: String,
    ebs_max_attachments: Option<i32>,
}

/// `ebs_max_attachments` of every type in the catalog, read once; rows that do not parse are
/// skipped with a warning (the vendored file is checked by the tests below).
fn table() -> &'static HashMap<String, i32> {
    static TABLE: OnceLock<HashMap<String, i32>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut out = HashMap::new();
        for row in csv::Reader::from_reader(INSTANCE_TYPES_CSV.as_bytes()).deserialize::<Row>() {
            match row {
                Ok(Row {
                    instance_type,
                    ebs_max_attachments: Some(n),
                }) => {
                    out.insert(instance_type, n);
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "skipping an ec2-instance-types.csv row"),
            }
        }
        out
    })
}

/// The number of EBS volumes pods can attach on a node of `instance_type` (e.g. `m5.large` →
/// 26): the catalog's attachment limit minus the root volume; `None` for a type the catalog does
/// not know (the node then reports no limit).
pub fn attach_limit(instance_type: &str) -> Option<i32> {
    table()
        .get(instance_type)
        .map(|n| (n - ROOT_VOLUMES).max(0))
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
        assert!(
            table().len() > 1000,
            "every catalog row parses: {}",
            table().len()
        );
    }
}
