//! Status conditions of NodePools, NodeClaims, EC2NodeClasses and NodeOverlays: the condition types and
//! reasons Karpenter sets, and pure helpers that follow upstream's `operatorpkg/status`
//! conventions (a root `Ready` condition derived from dependent conditions, lastTransitionTime
//! kept while the status is unchanged, new conditions start `Unknown`/`AwaitingReconciliation`).
//!
//! Nothing here reads a clock: every mutation takes `now`.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The `metav1.Condition` shape used in every status (`type`, `status`, `observedGeneration`,
/// `lastTransitionTime`, `reason`, `message`).
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

// ---------------------------------------------------------------------------------------------
// Condition types

/// Root condition of every kind; derived from the kind's dependent conditions.
pub const READY: &str = "Ready";

/// NodeClaim: the cloud provider created the instance.
pub const LAUNCHED: &str = "Launched";
/// NodeClaim: a Node with the NodeClaim's providerID joined and was synced.
pub const REGISTERED: &str = "Registered";
/// NodeClaim: the Node is Ready, startup taints are gone and requested resources are registered.
pub const INITIALIZED: &str = "Initialized";
/// NodeClaim: eligible for consolidation (`consolidateAfter` elapsed since the last pod event).
pub const CONSOLIDATABLE: &str = "Consolidatable";
/// NodeClaim: no longer matches its NodePool/NodeClass; the reason names the drift.
pub const DRIFTED: &str = "Drifted";
/// NodeClaim: the node has been drained during termination.
pub const DRAINED: &str = "Drained";
/// NodeClaim: volume attachments are gone during termination.
pub const VOLUMES_DETACHED: &str = "VolumesDetached";
/// NodeClaim: the cloud provider is terminating the instance.
pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
/// NodeClaim: the Node's shape matches what the NodeClaim promised.
pub const CONSISTENT_STATE_FOUND: &str = "ConsistentStateFound";
/// NodeClaim: why Karpenter is disrupting it (reason = disruption reason).
pub const DISRUPTION_REASON: &str = "DisruptionReason";

/// NodePool, EC2NodeClass and NodeOverlay: runtime validation of the spec passed (for a
/// NodeOverlay, also: no conflict with another overlay).
pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
/// NodePool: the referenced node class exists and is Ready.
pub const NODE_CLASS_READY: &str = "NodeClassReady";
/// NodePool: recent NodeClaims launched and registered; informational, not part of `Ready`.
pub const NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";
/// NodePool (static, `spec.replicas` set; not upstream's): True when it has `replicas`
/// NodeClaims; False while scaling, when `limits.nodes` caps it, when no instance type can
/// launch its nodes, or when the `StaticCapacity` feature gate is off. Not part of `Ready`.
pub const STATIC_CAPACITY: &str = "StaticCapacity";

/// EC2NodeClass: AMIs resolved from `amiSelectorTerms`.
pub const AMIS_READY: &str = "AMIsReady";
/// EC2NodeClass: subnets resolved from `subnetSelectorTerms`.
pub const SUBNETS_READY: &str = "SubnetsReady";
/// EC2NodeClass: security groups resolved from `securityGroupSelectorTerms`.
pub const SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
/// EC2NodeClass: the instance profile exists (created from `role` or given).
pub const INSTANCE_PROFILE_READY: &str = "InstanceProfileReady";
/// EC2NodeClass: capacity reservations resolved (only a dependent when reserved capacity is on).
pub const CAPACITY_RESERVATIONS_READY: &str = "CapacityReservationsReady";
/// EC2NodeClass: the placement group resolved.
pub const PLACEMENT_GROUP_READY: &str = "PlacementGroupReady";

/// Condition reasons, as upstream spells them.
pub mod reason;
mod set;

pub use set::*;

// ---------------------------------------------------------------------------------------------
// Status values

/// A condition's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    /// `"True"`.
    True,
    /// `"False"`.
    False,
    /// `"Unknown"`.
    Unknown,
}

impl ConditionStatus {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }

    /// The status of `condition`; anything but `True`/`False` (or a missing condition) is Unknown.
    pub fn of(condition: Option<&Condition>) -> Self {
        condition.map_or(Self::Unknown, |c| c.status.parse().unwrap_or(Self::Unknown))
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status string other than `True`, `False` or `Unknown`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid condition status {0:?}: expected True, False or Unknown")]
pub struct InvalidConditionStatus(pub String);

impl FromStr for ConditionStatus {
    type Err = InvalidConditionStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "True" => Ok(Self::True),
            "False" => Ok(Self::False),
            "Unknown" => Ok(Self::Unknown),
            other => Err(InvalidConditionStatus(other.to_string())),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pure helpers over a condition list

/// The condition of type `type_`, if present.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// The status of `type_`; a missing condition is Unknown.
pub fn status(conditions: &[Condition], type_: &str) -> ConditionStatus {
    ConditionStatus::of(get(conditions, type_))
}

/// Whether `type_` is present and True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    status(conditions, type_) == ConditionStatus::True
}

/// Whether `type_` is present and False.
pub fn is_false(conditions: &[Condition], type_: &str) -> bool {
    status(conditions, type_) == ConditionStatus::False
}

/// Whether `type_` is Unknown or missing.
pub fn is_unknown(conditions: &[Condition], type_: &str) -> bool {
    status(conditions, type_) == ConditionStatus::Unknown
}

/// Builds a condition; an empty `reason` defaults to the condition type (a True condition's
/// reason is its type upstream, and the CRD requires a non-empty reason).
pub fn new_condition(
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    observed_generation: i64,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.as_str().to_string(),
        reason: if reason.is_empty() { type_ } else { reason }.to_string(),
        message: message.to_string(),
        observed_generation: Some(observed_generation),
        last_transition_time: Time(now),
    }
}

/// Sets `condition` in the list, replacing one of the same type. The lastTransitionTime is kept
/// when the status did not change and set to `now` when it did or the condition is new
/// (`condition.last_transition_time` is ignored). Returns whether anything changed.
pub fn set(conditions: &mut Vec<Condition>, mut condition: Condition, now: Timestamp) -> bool {
    if condition.reason.is_empty() {
        condition.reason.clone_from(&condition.type_);
    }
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) => {
            condition.last_transition_time = if existing.status == condition.status {
                existing.last_transition_time.clone()
            } else {
                Time(now)
            };
            if *existing == condition {
                return false;
            }
            *existing = condition;
            true
        }
        None => {
            condition.last_transition_time = Time(now);
            conditions.push(condition);
            true
        }
    }
}

/// Removes the condition of type `type_`; returns whether one was removed.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// The root condition computed from dependents, without its timestamps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootStatus {
    /// True when every dependent is True at the current generation, False when a dependent is
    /// False at the current generation, otherwise Unknown.
    pub status: ConditionStatus,
    /// The root type for True, else [`reason::UNHEALTHY_DEPENDENTS`] or
    /// [`reason::RECONCILING_DEPENDENTS`].
    pub reason: String,
    /// Empty for True; otherwise the unhealthy dependents as `Type=Status`, most recently
    /// transitioned first, e.g. `AMIsReady=False, SubnetsReady=Unknown`.
    pub message: String,
}

/// Dependents that are not True at `generation` (missing ones count as Unknown), most recently
/// transitioned first, as `(type, status, condition)`.
pub fn unhealthy_dependents<'a>(
    conditions: &'a [Condition],
    dependents: &[&'a str],
    generation: i64,
) -> Vec<(&'a str, ConditionStatus, Option<&'a Condition>)> {
    let mut unhealthy: Vec<_> = dependents
        .iter()
        .filter_map(|t| {
            let c = get(conditions, t);
            let s = ConditionStatus::of(c);
            let stale = c.is_some_and(|c| c.observed_generation.unwrap_or(0) != generation);
            (s != ConditionStatus::True || stale).then_some((*t, s, c))
        })
        .collect();
    unhealthy.sort_by(|a, b| match (a.2, b.2) {
        (Some(x), Some(y)) => y.last_transition_time.cmp(&x.last_transition_time),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    });
    unhealthy
}

/// Computes the root condition from its dependents as operatorpkg's `recomputeRootCondition`
/// does (`awslabs/operatorpkg status/condition_set.go`).
pub fn root_status(
    root: &str,
    conditions: &[Condition],
    dependents: &[&str],
    generation: i64,
) -> RootStatus {
    let unhealthy = unhealthy_dependents(conditions, dependents, generation);
    if unhealthy.is_empty() {
        return RootStatus {
            status: ConditionStatus::True,
            reason: root.to_string(),
            message: String::new(),
        };
    }
    let failed = unhealthy.iter().any(|(_, s, c)| {
        *s == ConditionStatus::False
            && c.is_some_and(|c| c.observed_generation.unwrap_or(0) == generation)
    });
    let (status, reason) = if failed {
        (ConditionStatus::False, reason::UNHEALTHY_DEPENDENTS)
    } else {
        (ConditionStatus::Unknown, reason::RECONCILING_DEPENDENTS)
    };
    let message = unhealthy
        .iter()
        .map(|(t, s, _)| format!("{t}={s}"))
        .collect::<Vec<_>>()
        .join(", ");
    RootStatus {
        status,
        reason: reason.to_string(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).expect("valid timestamp")
    }

    fn info(generation: i64) -> ObjectInfo {
        ObjectInfo {
            generation,
            created: Some(ts(100)),
            deleting: false,
        }
    }

    #[test]
    fn set_keeps_transition_time_when_status_unchanged() {
        let mut conds = Vec::new();
        assert!(set(
            &mut conds,
            new_condition(DRIFTED, ConditionStatus::True, "", "", 1, ts(0)),
            ts(10)
        ));
        assert_eq!(conds[0].reason, DRIFTED);
        assert_eq!(conds[0].last_transition_time, Time(ts(10)));
        // Same status, new reason: modified, time kept.
        let c = new_condition(DRIFTED, ConditionStatus::True, "AMIDrift", "", 1, ts(0));
        assert!(set(&mut conds, c.clone(), ts(20)));
        assert_eq!(conds[0].last_transition_time, Time(ts(10)));
        // Identical: not modified.
        assert!(!set(&mut conds, c, ts(30)));
        // New status: time moves.
        let c = new_condition(DRIFTED, ConditionStatus::False, "x", "", 1, ts(0));
        assert!(set(&mut conds, c, ts(40)));
        assert_eq!(conds[0].last_transition_time, Time(ts(40)));
        assert!(remove(&mut conds, DRIFTED));
        assert!(conds.is_empty());
    }

    #[test]
    fn initializes_dependents_unknown_at_creation() {
        let mut conds = Vec::new();
        let set = NODEPOOL_CONDITIONS.for_object(&mut conds, info(1), ts(500));
        let root = set.root().expect("root");
        assert_eq!(root.status, "Unknown");
        assert_eq!(root.reason, reason::RECONCILING_DEPENDENTS);
        assert_eq!(
            root.message,
            "ValidationSucceeded=Unknown, NodeClassReady=Unknown"
        );
        let v = set.get(VALIDATION_SUCCEEDED).expect("dependent");
        assert_eq!(v.reason, reason::AWAITING_RECONCILIATION);
        assert_eq!(v.last_transition_time, Time(ts(100)));
        assert_eq!(set.list().last().map(|c| c.type_.as_str()), Some(READY));
    }

    #[test]
    fn root_follows_dependents() {
        let mut conds = Vec::new();
        let mut set = NODECLAIM_CONDITIONS.for_object(&mut conds, info(2), ts(200));
        set.set_true(LAUNCHED);
        set.set_true(REGISTERED);
        assert_eq!(ConditionStatus::of(set.root()), ConditionStatus::Unknown);
        set.set_false(
            INITIALIZED,
            reason::NODE_NOT_READY,
            "Node status is NotReady",
        );
        let root = set.root().expect("root");
        assert_eq!(root.status, "False");
        assert_eq!(root.reason, reason::UNHEALTHY_DEPENDENTS);
        assert_eq!(root.message, "Initialized=False");
        set.set_true(INITIALIZED);
        let root = set.root().expect("root");
        assert_eq!(
            (root.status.as_str(), root.reason.as_str()),
            ("True", READY)
        );
        assert_eq!(root.observed_generation, Some(2));
        assert!(set.clear(LAUNCHED).is_err());
        set.set_true(DRIFTED);
        assert_eq!(set.clear(DRIFTED), Ok(true));
    }

    #[test]
    fn stale_generation_is_unhealthy() {
        let conds = vec![
            new_condition(
                VALIDATION_SUCCEEDED,
                ConditionStatus::True,
                "",
                "",
                1,
                ts(1),
            ),
            new_condition(
                NODE_CLASS_READY,
                ConditionStatus::False,
                "NodeClassNotFound",
                "",
                1,
                ts(2),
            ),
        ];
        // At generation 1 the False dependent makes the root False.
        let r = root_status(READY, &conds, NODEPOOL_CONDITIONS.dependents, 1);
        assert_eq!(r.status, ConditionStatus::False);
        // At generation 2 both are stale: Unknown, newest first.
        let r = root_status(READY, &conds, NODEPOOL_CONDITIONS.dependents, 2);
        assert_eq!(r.status, ConditionStatus::Unknown);
        assert_eq!(r.message, "NodeClassReady=False, ValidationSucceeded=True");
    }

    #[test]
    fn status_parsing() {
        assert_eq!("True".parse(), Ok(ConditionStatus::True));
        assert!("true".parse::<ConditionStatus>().is_err());
        assert_eq!(ConditionStatus::of(None), ConditionStatus::Unknown);
    }
}
