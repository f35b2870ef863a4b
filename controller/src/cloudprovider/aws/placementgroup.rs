//! Placement groups (upstream `aws:pkg/providers/placementgroup` and the node class's
//! `PlacementGroupReady` condition, `aws:pkg/controllers/nodeclass/placementgroup.go`): the group
//! an EC2NodeClass's `placementGroupSelector` names, looked up by id or name among the
//! `available` groups; the condition that lookup gives; the partition a NodeClaim asks for; and
//! the labels a NodeClaim launched into the group carries.

use crds::NodeClaim;
use crds::conditions::reason::{PLACEMENT_GROUP_NOT_FOUND, PLACEMENT_GROUP_RESOLUTION_FAILED};
use crds::ec2nodeclass::PlacementGroupSelector;
use crds::labels::{PLACEMENT_GROUP_ID_LABEL, PLACEMENT_GROUP_PARTITION_LABEL};
use ec2api::{Ec2, Ec2Error, Filter, PlacementGroupInfo, PlacementGroupQuery};
use jiff::SignedDuration;

/// How long a looked-up placement group is used before it is looked up again (upstream's
/// placement group cache, 1m). A failed lookup keeps using the last one found.
pub const PLACEMENT_GROUP_TTL: SignedDuration = SignedDuration::from_secs(60);

/// The `strategy` of a partition placement group.
pub const PARTITION: &str = "partition";

/// The DescribePlacementGroups request for `selector`: its id, else its name, among the groups
/// in state `available`.
pub fn query(selector: &PlacementGroupSelector) -> PlacementGroupQuery {
    let mut q = PlacementGroupQuery {
        filters: vec![Filter::new("state", "available")],
        ..PlacementGroupQuery::default()
    };
    if let Some(id) = selector.id.as_deref().filter(|s| !s.is_empty()) {
        q.ids.push(id.to_string());
    } else if let Some(name) = selector.name.as_deref().filter(|s| !s.is_empty()) {
        q.names.push(name.to_string());
    }
    q
}

/// The selector as users wrote it (its name, else its id), for messages and as a cache key.
pub fn shown(selector: &PlacementGroupSelector) -> String {
    selector
        .name
        .clone()
        .or_else(|| selector.id.clone())
        .unwrap_or_default()
}

/// The placement group `selector` names: `Ok(None)` when EC2 knows no such available group
/// (an unknown name or id is answered `InvalidPlacementGroup.Unknown`, which counts as none).
///
/// Errors: DescribePlacementGroups failed otherwise.
pub async fn describe(
    ec2: &dyn Ec2,
    selector: &PlacementGroupSelector,
) -> Result<Option<PlacementGroupInfo>, Ec2Error> {
    match ec2.describe_placement_groups(query(selector)).await {
        Ok(found) => Ok(found.into_iter().next()),
        Err(e) if e.code.starts_with("InvalidPlacementGroup") || e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The node class's `PlacementGroupReady=False` (condition, reason, message) for a lookup's
/// result, as upstream writes it; `None` when the group was found.
pub fn not_ready(
    selector: &PlacementGroupSelector,
    found: &Result<Option<PlacementGroupInfo>, Ec2Error>,
) -> Option<(String, String, String)> {
    let condition = crds::conditions::PLACEMENT_GROUP_READY.to_string();
    match found {
        Ok(Some(_)) => None,
        Ok(None) => Some((
            condition,
            PLACEMENT_GROUP_NOT_FOUND.into(),
            format!("Placement group {:?} not found", shown(selector)),
        )),
        Err(e) => Some((
            condition,
            PLACEMENT_GROUP_RESOLUTION_FAILED.into(),
            format!(
                "Failed to resolve placement group {:?}: {e}",
                shown(selector)
            ),
        )),
    }
}

/// The partition `claim` asks for: the lowest value (in string order, as upstream sorts them)
/// of its `karpenter.k8s.aws/placement-group-partition In` requirement that parses as a number;
/// `None` without one.
pub fn partition(claim: &NodeClaim) -> Option<i32> {
    let mut values: Vec<&String> = claim
        .spec
        .requirements
        .iter()
        .filter(|r| r.key == PLACEMENT_GROUP_PARTITION_LABEL && r.operator == crds::Operator::In)
        .flat_map(|r| &r.values)
        .collect();
    values.sort();
    values.first().and_then(|v| v.parse().ok())
}

/// The labels of a NodeClaim launched into `group`: its id, and for a partition group the
/// partition launched into when one was asked for (upstream leaves the partition to a
/// registration hook otherwise, which is not built here).
pub fn labels(group: &PlacementGroupInfo, partition: Option<i32>) -> Vec<(String, String)> {
    let mut labels = vec![(PLACEMENT_GROUP_ID_LABEL.to_string(), group.id.clone())];
    if group.strategy == PARTITION
        && let Some(p) = partition
    {
        labels.push((PLACEMENT_GROUP_PARTITION_LABEL.to_string(), p.to_string()));
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use crds::Operator;

    fn group(strategy: &str) -> PlacementGroupInfo {
        PlacementGroupInfo {
            id: "pg-0abc".into(),
            name: "training".into(),
            strategy: strategy.into(),
            partition_count: 3,
            spread_level: None,
            state: "available".into(),
        }
    }

    #[test]
    fn a_selector_asks_by_id_else_by_name_among_available_groups() {
        let by_id = query(&PlacementGroupSelector {
            id: Some("pg-0abc".into()),
            name: None,
        });
        assert_eq!(by_id.ids, ["pg-0abc"]);
        assert!(by_id.names.is_empty());
        assert_eq!(by_id.filters, [Filter::new("state", "available")]);
        let by_name = query(&PlacementGroupSelector {
            id: None,
            name: Some("training".into()),
        });
        assert_eq!(by_name.names, ["training"]);
        assert!(by_name.ids.is_empty());
    }

    #[test]
    fn the_condition_says_not_found_or_failed_and_names_the_group() {
        let selector = PlacementGroupSelector {
            id: None,
            name: Some("training".into()),
        };
        assert_eq!(not_ready(&selector, &Ok(Some(group("cluster")))), None);
        let (condition, reason, message) = not_ready(&selector, &Ok(None)).expect("not found");
        assert_eq!(condition, "PlacementGroupReady");
        assert_eq!(reason, "PlacementGroupNotFound");
        assert_eq!(message, "Placement group \"training\" not found");
        let failed = Err(Ec2Error {
            code: "RequestLimitExceeded".into(),
            message: "slow down".into(),
        });
        let (_, reason, message) = not_ready(&selector, &failed).expect("failed");
        assert_eq!(reason, "PlacementGroupResolutionFailed");
        assert!(message.contains("RequestLimitExceeded"), "{message}");
    }

    #[test]
    fn the_lowest_asked_partition_is_launched_into_and_labelled_for_partition_groups_only() {
        let claim = testutil::nodeclaim("p")
            .requirement(PLACEMENT_GROUP_PARTITION_LABEL, Operator::In, ["3", "2"])
            .build();
        assert_eq!(partition(&claim), Some(2));
        assert_eq!(partition(&testutil::nodeclaim("q").build()), None);
        assert_eq!(
            labels(&group(PARTITION), Some(2)),
            [
                (PLACEMENT_GROUP_ID_LABEL.to_string(), "pg-0abc".to_string()),
                (PLACEMENT_GROUP_PARTITION_LABEL.to_string(), "2".to_string()),
            ]
        );
        assert_eq!(
            labels(&group("cluster"), Some(2)),
            [(PLACEMENT_GROUP_ID_LABEL.to_string(), "pg-0abc".to_string())]
        );
    }
}
