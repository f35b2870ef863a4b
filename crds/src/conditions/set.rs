//! Condition sets: a root `Ready` condition kept in sync with its dependent conditions while
//! conditions are set (operatorpkg `ConditionTypes`/`ConditionSet`), and the traits the
//! kinds implement to expose their conditions.

use std::cmp::Ordering;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;

/// A root condition and the dependent conditions it is computed from (operatorpkg
/// `ConditionTypes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConditionTypes {
    /// The root type, [`READY`].
    pub root: &'static str,
    /// Types that must all be True for the root to be True.
    pub dependents: &'static [&'static str],
}

/// NodeClaim: `Ready` = Launched ∧ Registered ∧ Initialized (`pkg/apis/v1/nodeclaim_status.go`).
pub const NODECLAIM_CONDITIONS: ConditionTypes = ConditionTypes {
    root: READY,
    dependents: &[LAUNCHED, REGISTERED, INITIALIZED],
};

/// NodePool: `Ready` = ValidationSucceeded ∧ NodeClassReady (`pkg/apis/v1/nodepool_status.go`).
pub const NODEPOOL_CONDITIONS: ConditionTypes = ConditionTypes {
    root: READY,
    dependents: &[VALIDATION_SUCCEEDED, NODE_CLASS_READY],
};

/// NodeOverlay: `Ready` = ValidationSucceeded (`pkg/apis/v1alpha1/nodeoverlay_status.go`).
pub const NODEOVERLAY_CONDITIONS: ConditionTypes = ConditionTypes {
    root: READY,
    dependents: &[VALIDATION_SUCCEEDED],
};

/// EC2NodeClass: `Ready` = AMIs, subnets, security groups, instance profile, validation and
/// placement group all ready (`aws:pkg/apis/v1/ec2nodeclass_status.go`).
pub const EC2NODECLASS_CONDITIONS: ConditionTypes = ConditionTypes {
    root: READY,
    dependents: &[
        AMIS_READY,
        SUBNETS_READY,
        SECURITY_GROUPS_READY,
        INSTANCE_PROFILE_READY,
        VALIDATION_SUCCEEDED,
        PLACEMENT_GROUP_READY,
    ],
};

/// [`EC2NODECLASS_CONDITIONS`] plus `CapacityReservationsReady`, used when reserved capacity
/// is enabled.
pub const EC2NODECLASS_CONDITIONS_WITH_CAPACITY_RESERVATIONS: ConditionTypes = ConditionTypes {
    root: READY,
    dependents: &[
        AMIS_READY,
        SUBNETS_READY,
        SECURITY_GROUPS_READY,
        INSTANCE_PROFILE_READY,
        VALIDATION_SUCCEEDED,
        PLACEMENT_GROUP_READY,
        CAPACITY_RESERVATIONS_READY,
    ],
};

impl ConditionTypes {
    /// Whether `type_` is the root or one of its dependents.
    pub fn is_dependent(&self, type_: &str) -> bool {
        type_ == self.root || self.dependents.contains(&type_)
    }

    /// Opens a [`ConditionSet`] over `conditions`, first initializing the root and every
    /// dependent that is missing to Unknown/`AwaitingReconciliation`, with lastTransitionTime
    /// set to the object's creation time (operatorpkg `For`).
    pub fn for_object<'a>(
        &self,
        conditions: &'a mut Vec<Condition>,
        object: ObjectInfo,
        now: Timestamp,
    ) -> ConditionSet<'a> {
        let mut set = ConditionSet {
            types: *self,
            conditions,
            object,
            now,
        };
        for t in std::iter::once(self.root).chain(self.dependents.iter().copied()) {
            if set.get(t).is_none() {
                set.set_unknown(t);
            }
        }
        set
    }
}

/// What a [`ConditionSet`] needs to know about the object that owns the conditions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectInfo {
    /// `metadata.generation`; stamped as `observedGeneration` on every condition set.
    pub generation: i64,
    /// `metadata.creationTimestamp`; the lastTransitionTime of initialized dependents
    /// (`now` when absent).
    pub created: Option<Timestamp>,
    /// Whether `metadata.deletionTimestamp` is set; then every condition's observedGeneration
    /// is bumped on each change, as upstream does.
    pub deleting: bool,
}

/// Mutable view of one object's conditions that keeps the root condition up to date
/// (operatorpkg `ConditionSet`).
#[derive(Debug)]
pub struct ConditionSet<'a> {
    types: ConditionTypes,
    conditions: &'a mut Vec<Condition>,
    object: ObjectInfo,
    now: Timestamp,
}

/// Errors from [`ConditionSet::clear`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConditionError {
    /// Root and dependent conditions always exist and cannot be cleared.
    #[error("condition {0:?} is the root or a dependent and cannot be cleared")]
    DependentNotClearable(String),
}

impl ConditionSet<'_> {
    /// The conditions, in order.
    pub fn list(&self) -> &[Condition] {
        self.conditions
    }

    /// The condition of type `type_`.
    pub fn get(&self, type_: &str) -> Option<&Condition> {
        get(self.conditions, type_)
    }

    /// The root condition (`Ready`); always present once [`ConditionTypes::for_object`] has
    /// opened the set.
    pub fn root(&self) -> Option<&Condition> {
        self.get(self.types.root)
    }

    /// Whether every listed type is True.
    pub fn is_true(&self, types: &[&str]) -> bool {
        types.iter().all(|t| is_true(self.conditions, t))
    }

    /// Sets `type_` True with reason = type and an empty message.
    pub fn set_true(&mut self, type_: &str) -> bool {
        self.set_true_with_reason(type_, type_, "")
    }

    /// Sets `type_` True with a reason and message.
    pub fn set_true_with_reason(&mut self, type_: &str, reason: &str, message: &str) -> bool {
        self.set(type_, ConditionStatus::True, reason, message)
    }

    /// Sets `type_` False; the root becomes False if `type_` is a dependent.
    pub fn set_false(&mut self, type_: &str, reason: &str, message: &str) -> bool {
        self.set(type_, ConditionStatus::False, reason, message)
    }

    /// Sets `type_` Unknown with reason `AwaitingReconciliation`.
    pub fn set_unknown(&mut self, type_: &str) -> bool {
        self.set_unknown_with_reason(
            type_,
            reason::AWAITING_RECONCILIATION,
            reason::AWAITING_RECONCILIATION_MESSAGE,
        )
    }

    /// Sets `type_` Unknown with a reason and message.
    pub fn set_unknown_with_reason(&mut self, type_: &str, reason: &str, message: &str) -> bool {
        self.set(type_, ConditionStatus::Unknown, reason, message)
    }

    /// Sets a condition, stamps the object's generation, keeps conditions sorted by
    /// lastTransitionTime with the root last, and recomputes the root. Returns whether anything
    /// changed.
    pub fn set(
        &mut self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
    ) -> bool {
        let generation = self.object.generation;
        let mut condition = new_condition(type_, status, reason, message, generation, self.now);
        let existing = self.conditions.iter().find(|c| c.type_ == type_);
        let found = existing.is_some();
        if let Some(existing) = existing {
            if existing.status == condition.status {
                condition.last_transition_time = existing.last_transition_time.clone();
            }
            if *existing == condition {
                return false;
            }
        }
        if self.object.deleting {
            for other in self.conditions.iter_mut() {
                other.observed_generation = Some(generation);
            }
        }
        if !found && self.types.is_dependent(type_) {
            // A dependent that was never set "transitioned" when the object was created.
            condition.last_transition_time = Time(self.object.created.unwrap_or(self.now));
        }
        self.conditions.retain(|c| c.type_ != type_);
        self.conditions.push(condition);
        let root = self.types.root;
        self.conditions
            .sort_by(|a, b| match (a.type_ == root, b.type_ == root) {
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                _ => a.last_transition_time.cmp(&b.last_transition_time),
            });
        if type_ != root {
            self.recompute_root();
        }
        true
    }

    /// Removes an independent condition (e.g. `Drifted`, `Consolidatable`).
    pub fn clear(&mut self, type_: &str) -> Result<bool, ConditionError> {
        if self.types.is_dependent(type_) {
            return Err(ConditionError::DependentNotClearable(type_.to_string()));
        }
        Ok(remove(self.conditions, type_))
    }

    fn recompute_root(&mut self) {
        let root = root_status(
            self.types.root,
            self.conditions,
            self.types.dependents,
            self.object.generation,
        );
        self.set(self.types.root, root.status, &root.reason, &root.message);
    }
}

/// A status object that carries a condition list.
pub trait HasConditions {
    /// The status's `conditions` list as stored (empty when none were ever set).
    fn conditions(&self) -> &[Condition];
    /// The same list, for changing in place; go through a [`ConditionSet`] to keep `Ready` in
    /// step with its dependents.
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
}

/// A Karpenter kind whose status has conditions with a root `Ready` condition.
pub trait StatusConditions {
    /// The kind's root and dependent condition types.
    fn condition_types(&self) -> ConditionTypes;
    /// The object's conditions (empty when there is no status yet).
    fn status_conditions(&self) -> &[Condition];
    /// The object's generation, creation time and deletion state.
    fn object_info(&self) -> ObjectInfo;
    /// The condition list, creating an empty status if needed.
    fn status_conditions_mut(&mut self) -> &mut Vec<Condition>;

    /// A [`ConditionSet`] over this object's conditions (initializing missing ones).
    fn condition_set(&mut self, now: Timestamp) -> ConditionSet<'_> {
        let types = self.condition_types();
        self.condition_set_with(types, now)
    }

    /// Like [`StatusConditions::condition_set`] with explicit condition types (e.g.
    /// [`EC2NODECLASS_CONDITIONS_WITH_CAPACITY_RESERVATIONS`]).
    fn condition_set_with(&mut self, types: ConditionTypes, now: Timestamp) -> ConditionSet<'_> {
        let object = self.object_info();
        types.for_object(self.status_conditions_mut(), object, now)
    }

    /// Whether the root `Ready` condition is True.
    fn is_ready(&self) -> bool {
        is_true(self.status_conditions(), READY)
    }
}

/// [`ObjectInfo`] from object metadata.
pub fn object_info(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> ObjectInfo {
    ObjectInfo {
        generation: meta.generation.unwrap_or(0),
        created: meta.creation_timestamp.as_ref().map(|t| t.0),
        deleting: meta.deletion_timestamp.is_some(),
    }
}
