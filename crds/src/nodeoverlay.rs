//! The NodeOverlay kind (`karpenter.sh/v1alpha1`, alpha behind the `NodeOverlay` feature gate):
//! changes the price or adds extended-resource capacity of the instance types Karpenter
//! simulates with, for those matching its requirements (`pkg/apis/v1alpha1/nodeoverlay.go`,
//! `nodeoverlay_status.go`). The pure evaluation lives in `karpenter_core::capacity::overlay`.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::{
    self, Condition, ConditionTypes, HasConditions, ObjectInfo, StatusConditions,
};
use crate::requirements::{NodeSelectorRequirementWithMinValues, Operator};
use crate::schema;

/// CRD pattern for `spec.price`: an unsigned decimal in USD/hour, e.g. `0.432` or `43`.
pub const PRICE_PATTERN: &str = r"^\d+(\.\d+)?$";
/// CRD pattern for `spec.priceAdjustment`: a signed amount in USD/hour (`+43`, `-0.5`), a
/// positive percentage (`+298%`) or a negative one from `-0%` to `-99.99…%` or exactly `-100%`.
pub const PRICE_ADJUSTMENT_PATTERN: &str =
    r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$";
/// Smallest `spec.weight` that may be written; an unset weight counts as 0, below every set one.
pub const WEIGHT_MIN: i32 = 1;
/// Largest `spec.weight`.
pub const WEIGHT_MAX: i32 = 10_000;
/// Resources `spec.capacity` may not set (the CRD's CEL rule): an overlay only adds extended
/// resources. Runtime validation refuses every [`crate::labels::WELL_KNOWN_RESOURCES`] entry.
pub const CEL_RESTRICTED_CAPACITY: &[&str] = schema::OVERLAY_RESTRICTED_CAPACITY;
/// Message of the spec rule refusing `price` together with `priceAdjustment`.
pub const BOTH_PRICES_MESSAGE: &str = "cannot set both 'price' and 'priceAdjustment'";
/// Message of the `spec.capacity` rule refusing [`CEL_RESTRICTED_CAPACITY`].
pub const RESTRICTED_CAPACITY_MESSAGE: &str = schema::OVERLAY_RESTRICTED_CAPACITY_MESSAGE;

/// The desired state of a NodeOverlay.
// kube's repeated `printcolumn(...)` entries look like duplicated attributes to clippy.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[kube(
    group = "karpenter.sh",
    version = "v1alpha1",
    kind = "NodeOverlay",
    plural = "nodeoverlays",
    status = "NodeOverlayStatus",
    derive = "PartialEq",
    category = "karpenter",
    shortname = "overlays",
    doc = "A NodeOverlay adjusts what Karpenter assumes about the instance types it schedules with: the price of the offerings, or extra extended-resource capacity, for every instance type (per NodePool) that matches its requirements. Alpha; the NodeOverlay feature gate must be on.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Weight",
        type_ = "integer",
        json_path = ".spec.weight",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.price) || !has(self.priceAdjustment)", "message": BOTH_PRICES_MESSAGE}
]))]
pub struct NodeOverlaySpec {
    /// Which instance types the overlay changes, per NodePool: the requirements must be
    /// compatible with the instance type's labels, the NodePool's template labels and
    /// `karpenter.sh/nodepool`; zone and capacity-type requirements also pick the offerings
    /// whose price changes. A label no instance type defines matches only NotIn and
    /// DoesNotExist. At most 100.
    #[schemars(transform = schema::overlay_requirements)]
    pub requirements: Vec<OverlayRequirement>,
    /// The new price of every matching offering, in USD/hour (an unsigned decimal, e.g.
    /// `0.432`). Not with `priceAdjustment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = PRICE_PATTERN))]
    pub price: Option<String>,
    /// A change to the cloud price of every matching offering: a signed amount in USD/hour
    /// (`+0.1`, `-0.5`) or a signed percentage of it (`+10%`, `-15%`, at most `-100%`). A price
    /// that would go below zero becomes zero. Not with `price`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = PRICE_ADJUSTMENT_PATTERN))]
    pub price_adjustment: Option<String>,
    /// Extended resources every matching instance type gets, by resource name (e.g.
    /// `smarter-devices/fuse: 1`, `hugepages-1Gi: 2Gi`), added to its capacity or replacing
    /// the amount it reports. cpu, memory, ephemeral-storage and pods may not be set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::overlay_capacity")]
    pub capacity: BTreeMap<String, Quantity>,
    /// Precedence among overlays, 1 to 10000; unset counts as 0. Where overlays change the
    /// same offering's price only the highest weight applies; for the same resource the
    /// highest weight's amount wins. Two overlays of equal weight that change the same price
    /// or resource conflict, and the one earlier in the alphabet is not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub weight: Option<i32>,
}

/// A label requirement of a NodeOverlay: a key, an operator and values (a node selector
/// requirement without `minValues`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub struct OverlayRequirement {
    /// Label key the requirement applies to, e.g. `node.kubernetes.io/instance-type`, a
    /// NodePool template label, or `karpenter.sh/nodepool`.
    #[schemars(transform = schema::requirement_key)]
    pub key: String,
    /// How the key relates to `values`: In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte.
    pub operator: Operator,
    /// Values for the operator: at least one for In and NotIn; exactly one non-negative
    /// integer for Gt, Lt, Gte and Lte; none for Exists and DoesNotExist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::label_value_list)]
    pub values: Vec<String>,
}

impl OverlayRequirement {
    /// A requirement on `key`.
    pub fn new(
        key: impl Into<String>,
        operator: Operator,
        values: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            key: key.into(),
            operator,
            values: values.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<&OverlayRequirement> for NodeSelectorRequirementWithMinValues {
    fn from(r: &OverlayRequirement) -> Self {
        NodeSelectorRequirementWithMinValues::new(&r.key, r.operator, r.values.iter().cloned())
    }
}

/// Observed state of a NodeOverlay.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq)]
pub struct NodeOverlayStatus {
    /// `Ready` follows `ValidationSucceeded`, which is False with reason RuntimeValidation (the
    /// message says what is invalid) or Conflict (another overlay of the same weight changes
    /// the same price or resource).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions_map_list")]
    pub conditions: Vec<Condition>,
}

impl HasConditions for NodeOverlayStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

impl StatusConditions for NodeOverlay {
    fn condition_types(&self) -> ConditionTypes {
        conditions::NODEOVERLAY_CONDITIONS
    }
    fn status_conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
    fn object_info(&self) -> ObjectInfo {
        conditions::object_info(&self.metadata)
    }
    fn status_conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.status.get_or_insert_with(Default::default).conditions
    }
}

impl NodeOverlay {
    /// The precedence weight; unset counts as 0.
    pub fn weight(&self) -> i32 {
        self.spec.weight.unwrap_or(0)
    }

    /// The object's name (empty when unset).
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    /// Whether the overlay changes prices (`price` or `priceAdjustment` set).
    pub fn changes_price(&self) -> bool {
        self.spec.price.is_some() || self.spec.price_adjustment.is_some()
    }

    /// Whether the overlay changes capacity (`capacity` not empty).
    pub fn changes_capacity(&self) -> bool {
        !self.spec.capacity.is_empty()
    }
}

/// Precedence of two overlays, first-processed first: higher weight first, then, at equal
/// weight, the name later in the alphabet first (upstream `NodeOverlayList.OrderByWeight`).
/// Sort with `overlays.sort_by(precedence)`.
pub fn precedence(a: &NodeOverlay, b: &NodeOverlay) -> Ordering {
    b.weight()
        .cmp(&a.weight())
        .then_with(|| b.name().cmp(a.name()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlay(name: &str, weight: Option<i32>) -> NodeOverlay {
        NodeOverlay::new(
            name,
            NodeOverlaySpec {
                requirements: vec![],
                price: None,
                price_adjustment: None,
                capacity: BTreeMap::new(),
                weight,
            },
        )
    }

    #[test]
    fn precedence_is_weight_then_reverse_name() {
        let mut list = [
            overlay("a", Some(10)),
            overlay("z", None),
            overlay("b", Some(10)),
            overlay("c", Some(20)),
        ];
        list.sort_by(precedence);
        let names: Vec<&str> = list.iter().map(NodeOverlay::name).collect();
        assert_eq!(names, ["c", "b", "a", "z"]);
    }

    #[test]
    fn serializes_like_upstream() {
        let yaml = r#"
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: fuse}
spec:
  requirements:
  - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
  priceAdjustment: "-10%"
  capacity: {smarter-devices/fuse: "1"}
  weight: 10
"#;
        let o: NodeOverlay = serde_saphyr::from_str(yaml).expect("parse");
        assert_eq!(o.weight(), 10);
        assert!(o.changes_price() && o.changes_capacity());
        let json = serde_json::to_value(&o.spec).expect("ser");
        assert_eq!(
            json,
            serde_json::json!({
                "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}],
                "priceAdjustment": "-10%",
                "capacity": {"smarter-devices/fuse": "1"},
                "weight": 10
            })
        );
    }
}
