//! Observed state of an EC2NodeClass: the subnets, security groups, AMIs, capacity
//! reservations and instance profile its selectors resolved to (`aws:pkg/apis/v1/ec2nodeclass_status.go`).

use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::InstanceMatchCriteria;
use crate::conditions::{Condition, HasConditions};
use crate::schema;

/// Type of a capacity reservation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, JsonSchema, PartialEq, Eq, Hash)]
pub enum CapacityReservationType {
    /// An on-demand capacity reservation.
    #[default]
    #[serde(rename = "default")]
    Default,
    /// A capacity block for ML.
    #[serde(rename = "capacity-block")]
    CapacityBlock,
}

/// State of a capacity reservation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum CapacityReservationState {
    /// `active`: instances can launch into the reservation now.
    #[default]
    Active,
    /// A capacity block inside EC2's reclamation window (its last 40 minutes).
    Expiring,
}

/// Observed state of an EC2NodeClass: what its selectors resolved to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassStatus {
    /// Subnets matched by `subnetSelectorTerms`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<Subnet>,
    /// Security groups matched by `securityGroupSelectorTerms`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<SecurityGroup>,
    /// Capacity reservations matched by `capacityReservationSelectorTerms`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservations: Vec<CapacityReservation>,
    /// AMIs matched by `amiSelectorTerms`, with the instance requirements each one fits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<Ami>,
    /// The instance profile nodes use (created from `role`, or `spec.instanceProfile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// Readiness signals; `Ready` needs AMIs, subnets, security groups, instance profile,
    /// validation and placement group to be ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions_list")]
    pub conditions: Vec<Condition>,
}

/// A resolved subnet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Subnet {
    /// Subnet id, e.g. `subnet-0123456789abcdef0`.
    pub id: String,
    /// Availability zone, e.g. `us-west-2a`.
    pub zone: String,
    /// Availability zone id, e.g. `usw2-az1`.
    #[serde(rename = "zoneID", default, skip_serializing_if = "Option::is_none")]
    pub zone_id: Option<String>,
}

/// A resolved security group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq, Eq)]
pub struct SecurityGroup {
    /// Security group id, e.g. `sg-0123456789abcdef0`.
    pub id: String,
    /// The group's name as EC2 reports it (`GroupName`, not the `Name` tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A resolved AMI.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq)]
pub struct Ami {
    /// AMI id, e.g. `ami-0123456789abcdef0`.
    pub id: String,
    /// The image's name as EC2 reports it (not the `Name` tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Whether the AMI is deprecated; deprecated AMIs are used only when nothing else matches.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deprecated: bool,
    /// Instance requirements (architecture, GPU, ...) this AMI can run on.
    #[schemars(schema_with = "schema::node_selector_requirements")]
    pub requirements: Vec<NodeSelectorRequirement>,
}

/// A resolved capacity reservation.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservation {
    /// Availability zone of the reservation.
    pub availability_zone: String,
    /// When the reservation expires and its capacity is released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// Reservation id, e.g. `cr-0123456789abcdef0`.
    #[schemars(extend("pattern" = "^cr-[0-9a-z]+$"))]
    pub id: String,
    /// Which launches the reservation accepts.
    pub instance_match_criteria: InstanceMatchCriteria,
    /// The one instance type the reservation holds capacity for, e.g. `m5.large`.
    pub instance_type: String,
    /// 12-digit account id that owns the reservation.
    #[serde(rename = "ownerID")]
    #[schemars(extend("pattern" = "^[0-9]{12}$"))]
    pub owner_id: String,
    /// `default` or `capacity-block`.
    #[serde(default)]
    pub reservation_type: CapacityReservationType,
    /// Whether the reservation can be interrupted.
    #[serde(default)]
    pub interruptible: bool,
    /// `active`, or `expiring` for a capacity block about to be reclaimed.
    #[serde(default)]
    pub state: CapacityReservationState,
    /// Instances that can still launch into the reservation (EC2's `AvailableInstanceCount`,
    /// this cluster's running instances counted). This project's addition: upstream's status
    /// has no count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_instance_count: Option<i64>,
    /// Instances the reservation holds in all (EC2's `TotalInstanceCount`). This project's
    /// addition, beside `availableInstanceCount`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_instance_count: Option<i64>,
}

impl HasConditions for EC2NodeClassStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}
