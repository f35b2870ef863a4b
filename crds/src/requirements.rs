//! Node selector requirements with `minValues`: how NodePools and NodeClaims constrain the
//! instance types, zones, capacity types and other labels Karpenter may launch
//! (`NodeSelectorRequirementWithMinValues` in `pkg/apis/v1/nodeclaim.go`).

use std::fmt;
use std::str::FromStr;

use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema;

/// Most requirements a NodePool or NodeClaim may list (CRD `maxItems`).
pub const MAX_REQUIREMENTS: usize = 100;
/// Smallest allowed `minValues`.
pub const MIN_VALUES_MIN: i64 = 1;
/// Largest allowed `minValues`.
pub const MIN_VALUES_MAX: i64 = 50;

/// How a requirement relates a label key to its values.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum Operator {
    /// The label's value is one of `values`.
    In,
    /// The label's value is none of `values`, or the label is absent.
    NotIn,
    /// The label is present, with any value.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label's value, as an integer, is greater than the single value.
    Gt,
    /// The label's value, as an integer, is less than the single value.
    Lt,
    /// The label's value, as an integer, is greater than or equal to the single value (Karpenter only).
    Gte,
    /// The label's value, as an integer, is less than or equal to the single value (Karpenter only).
    Lte,
}

impl Operator {
    /// All operators, in upstream's order.
    pub const ALL: [Operator; 8] = [
        Operator::In,
        Operator::NotIn,
        Operator::Exists,
        Operator::DoesNotExist,
        Operator::Gt,
        Operator::Lt,
        Operator::Gte,
        Operator::Lte,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
            Operator::Gte => "Gte",
            Operator::Lte => "Lte",
        }
    }

    /// Whether the operator compares one integer value (`Gt`, `Lt`, `Gte`, `Lte`).
    pub fn is_numeric(self) -> bool {
        matches!(
            self,
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte
        )
    }

    /// Whether the operator takes no values (`Exists`, `DoesNotExist`).
    pub fn is_existence(self) -> bool {
        matches!(self, Operator::Exists | Operator::DoesNotExist)
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An operator string Karpenter does not support.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unsupported operator {0:?}, expected one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte"
)]
pub struct UnsupportedOperator(pub String);

impl FromStr for Operator {
    type Err = UnsupportedOperator;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Operator::ALL
            .into_iter()
            .find(|op| op.as_str() == s)
            .ok_or_else(|| UnsupportedOperator(s.to_string()))
    }
}

/// A node selector requirement with an optional minimum number of distinct values the
/// scheduler must keep available (flexibility), e.g. "at least 5 instance families".
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    /// Label key the requirement applies to, e.g. `node.kubernetes.io/instance-type`.
    #[schemars(transform = schema::requirement_key)]
    pub key: String,
    /// How the key relates to `values`: In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte.
    pub operator: Operator,
    /// Values for the operator: at least one for In; exactly one non-negative integer for Gt,
    /// Lt, Gte and Lte; none for Exists and DoesNotExist. Replaced as a whole on merge.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::label_value_list)]
    pub values: Vec<String>,
    /// Alpha: the minimum number of distinct values of this key that the launch decision must
    /// keep open (1 to 50). With operator In, `values` must list at least this many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50))]
    pub min_values: Option<i64>,
}

impl NodeSelectorRequirementWithMinValues {
    /// A requirement without `minValues`.
    pub fn new(
        key: impl Into<String>,
        operator: Operator,
        values: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            key: key.into(),
            operator,
            values: values.into_iter().map(Into::into).collect(),
            min_values: None,
        }
    }

    /// This requirement with `minValues` set.
    pub fn with_min_values(mut self, min_values: i64) -> Self {
        self.min_values = Some(min_values);
        self
    }
}

impl From<&NodeSelectorRequirementWithMinValues> for NodeSelectorRequirement {
    fn from(r: &NodeSelectorRequirementWithMinValues) -> Self {
        NodeSelectorRequirement {
            key: r.key.clone(),
            operator: r.operator.as_str().to_string(),
            values: (!r.values.is_empty()).then(|| r.values.clone()),
        }
    }
}

impl TryFrom<&NodeSelectorRequirement> for NodeSelectorRequirementWithMinValues {
    type Error = UnsupportedOperator;
    fn try_from(r: &NodeSelectorRequirement) -> Result<Self, Self::Error> {
        Ok(Self {
            key: r.key.clone(),
            operator: r.operator.parse()?,
            values: r.values.clone().unwrap_or_default(),
            min_values: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_round_trip() {
        for op in Operator::ALL {
            assert_eq!(op.as_str().parse(), Ok(op));
            assert_eq!(serde_json::to_value(op).expect("ser"), op.as_str());
        }
        assert!("Foo".parse::<Operator>().is_err());
        assert!(Operator::Gte.is_numeric() && !Operator::In.is_numeric());
        assert!(Operator::Exists.is_existence());
    }

    #[test]
    fn serializes_like_upstream() {
        let r = NodeSelectorRequirementWithMinValues::new(
            "karpenter.k8s.aws/instance-family",
            Operator::Exists,
            Vec::<String>::new(),
        )
        .with_min_values(5);
        assert_eq!(
            serde_json::to_value(&r).expect("ser"),
            serde_json::json!({"key": "karpenter.k8s.aws/instance-family", "operator": "Exists", "minValues": 5})
        );
        let core: NodeSelectorRequirement = (&r).into();
        assert_eq!(core.values, None);
        let back = NodeSelectorRequirementWithMinValues::try_from(&core).expect("operator");
        assert_eq!(back.min_values, None);
    }
}
