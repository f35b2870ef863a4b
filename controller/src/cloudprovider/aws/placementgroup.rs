//! Placement groups (upstream `aws:pkg/providers/placementgroup` and the node class's
//! `PlacementGroupReady` condition, `aws:pkg/controllers/nodeclass/placementgroup.go`): the group
//! an EC2NodeClass's `placementGroupSelector` names, looked up by id or name among the
//! `available` groups; the condition that lookup gives; the requirements it adds to the node
//! class's instance types (its id, and a partition group's partitions, upstream's
//! `InjectOfferings`); the partition a NodeClaim asks for; the scope of a capacity error in it
//! (upstream's unavailable-offerings cache key, `aws:pkg/cache/unavailableofferings.go`); and the
//! labels a NodeClaim launched into the group carries.

use std::sync::Arc;

use crds::NodeClaim;
use crds::conditions::reason::{PLACEMENT_GROUP_NOT_FOUND, PLACEMENT_GROUP_RESOLUTION_FAILED};
use crds::ec2nodeclass::PlacementGroupSelector;
use crds::labels::{PLACEMENT_GROUP_ID_LABEL, PLACEMENT_GROUP_PARTITION_LABEL};
use ec2api::{Ec2, Ec2Error, Filter, PlacementGroupInfo, PlacementGroupQuery};
use jiff::SignedDuration;
use karpenter_core::capacity::InstanceType;
use karpenter_core::scheduling::requirements::Requirement;

/// How long a looked-up placement group is used before it is looked up again (upstream's
/// placement group cache, 1m). A failed lookup keeps using the last one found.
pub const PLACEMENT_GROUP_TTL: SignedDuration = SignedDuration::from_secs(60);

/// The `strategy` of a partition placement group.
pub const PARTITION: &str = "partition";
/// The `strategy` of a spread placement group (at most 7 running instances per zone).
pub const SPREAD: &str = "spread";

/// What EC2's `InsufficientInstanceCapacity` message says when a spread placement group already
/// holds its 7 instances in the zone (upstream `IsSpreadPlacementGroupLimitError`).
const SPREAD_LIMIT_MESSAGE: &str = "limit of instances in this spread placement group";

/// Where a capacity error of a launch into a placement group applies (upstream's
/// `WithPlacementGroup` / `WithPlacementGroupPartition` cache scopes): the offering is then out
/// of capacity for launches into that group (and partition) only, not for everyone.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope {
    /// The group's id (`pg-...`).
    pub group_id: String,
    /// The partition the launch asked for, as its requirement spells it (`"2"`); `None` for a
    /// launch that asked for none, and for a spread group's zone limit.
    pub partition: Option<String>,
}

impl Scope {
    /// The whole group `group_id` (no partition).
    pub fn group(group_id: &str) -> Scope {
        Scope {
            group_id: group_id.to_string(),
            partition: None,
        }
    }
}

/// The scope of `claim`'s launch into `group`: its id, and the lowest partition value (in string
/// order) of the claim's partition requirement when it has one (upstream scopes to the
/// partition targeted, whatever the group's strategy).
pub fn scope(group: &PlacementGroupInfo, claim: &NodeClaim) -> Scope {
    Scope {
        group_id: group.id.clone(),
        partition: asked(claim).map(str::to_string),
    }
}

/// Whether a fleet error's `message` is a spread placement group's per-zone limit (7 instances):
/// every instance type is then out of capacity in that zone for that group (the limit is per
/// group and zone, not per type).
pub fn is_spread_limit(message: &str) -> bool {
    message.contains(SPREAD_LIMIT_MESSAGE)
}

/// The requirements instance types of a node class launching into `group` carry, so the
/// scheduler sees the group's topology domains (upstream `InjectOfferings`):
/// `karpenter.k8s.aws/placement-group-id In [id]`, and for a partition group with
/// `PartitionCount` N, `karpenter.k8s.aws/placement-group-partition In [1..N]`.
pub fn requirements(group: &PlacementGroupInfo) -> Vec<Requirement> {
    let mut reqs = vec![Requirement::is_in(
        PLACEMENT_GROUP_ID_LABEL,
        [group.id.clone()],
    )];
    if group.strategy == PARTITION && group.partition_count > 0 {
        reqs.push(Requirement::is_in(
            PLACEMENT_GROUP_PARTITION_LABEL,
            (1..=group.partition_count).map(|p| p.to_string()),
        ));
    }
    reqs
}

/// Whether a type whose `PlacementGroupInfo.SupportedStrategies` are `strategies` can launch
/// into `group` (upstream's placement group compatibility check: a type that cannot has no
/// available offering for the node class). A type EC2 says nothing about counts as able.
pub fn supports(strategies: &[String], group: &PlacementGroupInfo) -> bool {
    strategies.is_empty() || strategies.contains(&group.strategy)
}

/// `types` with [`requirements`] of `group` in place of whatever they said of those labels.
pub fn with_requirements(
    types: &[Arc<InstanceType>],
    group: &PlacementGroupInfo,
) -> Vec<Arc<InstanceType>> {
    let added = requirements(group);
    types
        .iter()
        .map(|t| {
            let mut t = InstanceType::clone(t);
            for r in &added {
                t.requirements.remove(&r.key);
                t.requirements.add(r.clone());
            }
            Arc::new(t)
        })
        .collect()
}

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
    asked(claim).and_then(|v| v.parse().ok())
}

/// The lowest value (in string order) of `claim`'s partition `In` requirement.
fn asked(claim: &NodeClaim) -> Option<&str> {
    claim
        .spec
        .requirements
        .iter()
        .filter(|r| r.key == PLACEMENT_GROUP_PARTITION_LABEL && r.operator == crds::Operator::In)
        .flat_map(|r| &r.values)
        .min()
        .map(String::as_str)
}

/// The labels of a NodeClaim launched into `group`: its id, and for a partition group the
/// partition asked for (`partition`), else the one EC2 placed the instance in (`placed`, the
/// instance's `Placement.PartitionNumber`, which upstream's registration hook reads with
/// DescribeInstances). With neither known the partition label is left off (upstream writes an
/// empty value and holds registration until EC2 reports it; no such hook is built here).
pub fn labels(
    group: &PlacementGroupInfo,
    partition: Option<i32>,
    placed: Option<i32>,
) -> Vec<(String, String)> {
    let mut labels = vec![(PLACEMENT_GROUP_ID_LABEL.to_string(), group.id.clone())];
    if group.strategy == PARTITION
        && let Some(p) = partition.or(placed)
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
        let id = (PLACEMENT_GROUP_ID_LABEL.to_string(), "pg-0abc".to_string());
        let part = |p: &str| (PLACEMENT_GROUP_PARTITION_LABEL.to_string(), p.to_string());
        assert_eq!(
            labels(&group(PARTITION), Some(2), Some(3)),
            [id.clone(), part("2")]
        );
        assert_eq!(
            labels(&group("cluster"), Some(2), Some(2)),
            std::slice::from_ref(&id)
        );
        // Asked for none: the partition EC2 placed the instance in.
        assert_eq!(
            labels(&group(PARTITION), None, Some(3)),
            [id.clone(), part("3")]
        );
        assert_eq!(labels(&group(PARTITION), None, None), [id]);
    }

    #[test]
    fn a_capacity_error_is_scoped_to_the_group_and_the_partition_asked_for() {
        let asked = testutil::nodeclaim("p")
            .requirement(PLACEMENT_GROUP_PARTITION_LABEL, Operator::In, ["3", "2"])
            .build();
        assert_eq!(
            scope(&group(PARTITION), &asked),
            Scope {
                group_id: "pg-0abc".into(),
                partition: Some("2".into()),
            }
        );
        let any = testutil::nodeclaim("q").build();
        assert_eq!(scope(&group(PARTITION), &any), Scope::group("pg-0abc"));
        assert!(is_spread_limit(
            "You've reached the limit of instances in this spread placement group. A spread \
             placement group can have up to seven instances per Availability Zone."
        ));
        assert!(!is_spread_limit(
            "We currently do not have sufficient m5.large capacity"
        ));
    }

    #[test]
    fn only_types_supporting_the_groups_strategy_launch_into_it() {
        let burstable = ["partition".to_string(), "spread".into()];
        assert!(!supports(&burstable, &group("cluster")));
        assert!(supports(&burstable, &group(PARTITION)));
        assert!(supports(&[], &group("cluster")));
    }

    #[test]
    fn instance_types_carry_the_group_and_a_partition_groups_partitions() {
        let parts: Vec<_> = requirements(&group(PARTITION))
            .iter()
            .map(|r| (r.key.clone(), r.values().cloned().unwrap_or_default()))
            .collect();
        assert_eq!(
            parts,
            [
                (
                    PLACEMENT_GROUP_ID_LABEL.to_string(),
                    ["pg-0abc".to_string()].into()
                ),
                (
                    PLACEMENT_GROUP_PARTITION_LABEL.to_string(),
                    ["1", "2", "3"].map(String::from).into()
                ),
            ]
        );
        let cluster = requirements(&group("cluster"));
        assert_eq!(cluster.len(), 1);
        assert_eq!(cluster[0].key, PLACEMENT_GROUP_ID_LABEL);
    }
}
