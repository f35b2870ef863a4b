//! The NodePool kind (`karpenter.sh/v1`): a template for the NodeClaims Karpenter may launch,
//! with disruption settings, resource limits and a scheduling weight
//! (`pkg/apis/v1/nodepool.go`, `nodepool_status.go`).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::{
    self, Condition, ConditionTypes, HasConditions, ObjectInfo, StatusConditions,
};
use crate::duration::{GoDuration, NillableDuration};
use crate::nodeclaim::{NodeClassReference, default_expire_after};
use crate::requirements::NodeSelectorRequirementWithMinValues;
use crate::schema;

/// Default budget: at most 10% of a NodePool's nodes disrupted at once.
pub const DEFAULT_BUDGET_NODES: &str = "10%";
/// Default `consolidateAfter`: consolidate as soon as a node is eligible.
pub const DEFAULT_CONSOLIDATE_AFTER: &str = "0s";
/// Most budgets a NodePool may have.
pub const MAX_BUDGETS: usize = 50;
/// CRD pattern for a budget's `nodes`: a count or a percentage from 0% to 100%.
pub const BUDGET_NODES_PATTERN: &str = r"^((100|[0-9]{1,2})%|[0-9]+)$";
/// CRD pattern for a budget's `schedule`: a cron macro or five cron fields.
pub const BUDGET_SCHEDULE_PATTERN: &str =
    r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$";
/// Longest NodePool name, in characters: the name is the value of the `karpenter.sh/nodepool`
/// label on every NodeClaim and Node the pool launches, and a label value has at most 63
/// (apimachinery's `IsValidLabelValue`). Upstream Karpenter's CRD does not say so, so there a
/// longer name is accepted and the pool can never launch a node (each NodeClaim create fails
/// on the label); this project's CRD refuses the name instead ([`NODEPOOL_NAME_RULE`]).
pub const NODEPOOL_NAME_MAX: usize = 63;
/// The CEL rule at the root of the NodePool CRD that enforces [`NODEPOOL_NAME_MAX`]. Its
/// message is [`NODEPOOL_NAME_MESSAGE`].
pub const NODEPOOL_NAME_RULE: &str = "self.metadata.name.size() <= 63";
/// The message of [`NODEPOOL_NAME_RULE`].
pub const NODEPOOL_NAME_MESSAGE: &str = "metadata.name must be no more than 63 characters: it is the value of the karpenter.sh/nodepool label on the NodePool's NodeClaims and Nodes";
/// Scoring parameter of the Balanced policy: a move is approved when its score is at least 1/k.
pub const BALANCED_K: i32 = 2;

/// The desired state of a NodePool.
// kube's repeated `printcolumn(...)` entries look like duplicated attributes to clippy.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    plural = "nodepools",
    status = "NodePoolStatus",
    derive = "PartialEq",
    category = "karpenter",
    doc = "A NodePool tells Karpenter which nodes it may launch for pending pods (requirements, taints, labels, node class), how it may disrupt them (consolidation, expiry, budgets) and how much capacity it may own (limits).",
    printcolumn(
        name = "NodeClass",
        type_ = "string",
        json_path = ".spec.template.spec.nodeClassRef.name"
    ),
    printcolumn(name = "Nodes", type_ = "string", json_path = ".status.nodes"),
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
    ),
    printcolumn(
        name = "CPU",
        type_ = "string",
        json_path = ".status.resources.cpu",
        priority = 1
    ),
    printcolumn(
        name = "Memory",
        type_ = "string",
        json_path = ".status.resources.memory",
        priority = 1
    ),
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.nodes"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.replicas) == has(oldSelf.replicas)",
        "message": "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes"
    },
    {
        "rule": "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits))",
        "message": "only 'limits.nodes' is supported on static NodePools"
    },
    {
        "rule": "!has(self.replicas) || !has(self.weight)",
        "message": "'weight' is not supported on static NodePools"
    }
]))]
pub struct NodePoolSpec {
    /// The NodeClaims this pool launches. Each NodeClaim is usually narrower than the template,
    /// constrained further by the pods it is launched for.
    pub template: NodeClaimTemplate,
    /// When and how fast Karpenter may disrupt this pool's nodes.
    #[serde(default)]
    pub disruption: Disruption,
    /// Upper bounds on the total resources of this pool's nodes, by resource name; `nodes`
    /// bounds the node count. Static pools (with `replicas`) accept only `nodes`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::quantity_map")]
    pub limits: BTreeMap<String, Quantity>,
    /// Priority among NodePools, 1 to 100: higher weights are tried first; unset counts as 0.
    /// Not allowed on static pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
    /// Alpha: a fixed number of nodes to keep (static capacity) instead of scaling with pending
    /// pods. Consolidation settings are then ignored and only `limits.nodes` may be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
}

/// Template for NodeClaims: labels and annotations plus the NodeClaim spec without resources.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
pub struct NodeClaimTemplate {
    /// Labels and annotations put on every NodeClaim and its Node.
    #[serde(default, skip_serializing_if = "TemplateMetadata::is_empty")]
    pub metadata: TemplateMetadata,
    /// The NodeClaim spec shared by all NodeClaims of the pool.
    pub spec: NodeClaimTemplateSpec,
}

/// Labels and annotations of a NodeClaim template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq)]
pub struct TemplateMetadata {
    /// Labels for the NodeClaim and Node. Keys in Karpenter's domains (except well-known ones),
    /// `karpenter.sh/nodepool` and `kubernetes.io/hostname` are not allowed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::template_labels")]
    pub labels: BTreeMap<String, String>,
    /// Annotations for the NodeClaim and Node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::annotations")]
    pub annotations: BTreeMap<String, String>,
}

impl TemplateMetadata {
    /// Whether neither labels nor annotations are set.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

/// The NodeClaim spec in a NodePool template (no resource requests: those come from pods).
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    /// Taints applied to every node; pods must tolerate them to schedule there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::taints")]
    pub taints: Vec<Taint>,
    /// Taints every node starts with that something on the node (usually a DaemonSet) removes
    /// once it is ready. Pods need not tolerate them for Karpenter to launch a node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::taints")]
    pub startup_taints: Vec<Taint>,
    /// Label requirements every node satisfies (combined with the template labels). At most
    /// 100; `karpenter.sh/nodepool` may not be used.
    #[schemars(transform = schema::nodepool_requirements)]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The provider-specific node class (e.g. an EC2NodeClass) that configures instances.
    /// Its group and kind cannot be changed.
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.group == oldSelf.group", "message": "nodeClassRef.group is immutable"},
        {"rule": "self.kind == oldSelf.kind", "message": "nodeClassRef.kind is immutable"}
    ]))]
    pub node_class_ref: NodeClassReference,
    /// Longest time a deleting node may spend draining, measured from deletion; after it, pods
    /// are deleted regardless of PodDisruptionBudgets and `karpenter.sh/do-not-disrupt`, each
    /// early enough to get its own terminationGracePeriodSeconds, and drifted nodes start
    /// draining even when pods block eviction. Unset: wait for the drain forever. Go duration
    /// in s/m/h, e.g. `24h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = r"^([0-9]+(s|m|h))+$"))]
    pub termination_grace_period: Option<GoDuration>,
    /// How long after creation a node is replaced (e.g. `720h`), or `Never`. Useful for
    /// rolling upgrades and bounding node age; expiry ignores disruption budgets.
    #[serde(default = "default_expire_after")]
    pub expire_after: NillableDuration,
}

/// Disruption settings of a NodePool.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// How long a node must stay consolidatable (empty or underutilized, per the policy) since
    /// its last pod change before Karpenter consolidates it, e.g. `30s`; `Never` disables
    /// consolidation. Ignored on static pools.
    #[serde(default = "default_consolidate_after")]
    pub consolidate_after: NillableDuration,
    /// Which nodes consolidation may remove or replace: `WhenEmpty`,
    /// `WhenEmptyOrUnderutilized` (default) or `Balanced`. Ignored on static pools.
    #[serde(default)]
    pub consolidation_policy: ConsolidationPolicy,
    /// Limits on how many nodes may be disrupted at once; when several are active the most
    /// restrictive applies. Defaults to one budget of 10%.
    #[serde(default = "default_budgets")]
    #[schemars(extend(
        "maxItems" = 50,
        "x-kubernetes-list-type" = "atomic",
        "x-kubernetes-validations" = [{"rule": "self.all(x, has(x.schedule) == has(x.duration))", "message": "'schedule' must be set with 'duration'"}]
    ))]
    pub budgets: Vec<Budget>,
}

impl Default for Disruption {
    fn default() -> Self {
        Self {
            consolidate_after: default_consolidate_after(),
            consolidation_policy: ConsolidationPolicy::default(),
            budgets: default_budgets(),
        }
    }
}

fn default_consolidate_after() -> NillableDuration {
    NillableDuration::parse(DEFAULT_CONSOLIDATE_AFTER)
        .unwrap_or_else(|_| NillableDuration::new(std::time::Duration::ZERO))
}

fn default_budgets() -> Vec<Budget> {
    vec![Budget::default()]
}

fn default_budget_nodes() -> String {
    DEFAULT_BUDGET_NODES.to_string()
}

/// Which nodes consolidation may act on.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, JsonSchema, PartialEq, Eq, Hash)]
pub enum ConsolidationPolicy {
    /// Only nodes without (non-daemon) pods.
    WhenEmpty,
    /// Empty nodes and nodes whose pods fit elsewhere or on a cheaper replacement.
    #[default]
    WhenEmptyOrUnderutilized,
    /// Like WhenEmptyOrUnderutilized, but a move must save enough relative to the pods it
    /// disrupts (score ≥ 1/k with k = 2).
    Balanced,
}

impl ConsolidationPolicy {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WhenEmpty => "WhenEmpty",
            Self::WhenEmptyOrUnderutilized => "WhenEmptyOrUnderutilized",
            Self::Balanced => "Balanced",
        }
    }
}

impl fmt::Display for ConsolidationPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A disruption method a budget can be limited to.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, JsonSchema, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
pub enum DisruptionReason {
    /// Consolidation of underutilized nodes.
    Underutilized,
    /// Removal of empty nodes.
    Empty,
    /// Replacement of drifted nodes.
    Drifted,
}

impl DisruptionReason {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Underutilized => "Underutilized",
            Self::Empty => "Empty",
            Self::Drifted => "Drifted",
        }
    }
}

impl fmt::Display for DisruptionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A limit on how many of a pool's nodes may be disrupted at once, optionally only during a
/// schedule window and only for some disruption reasons.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
pub struct Budget {
    /// Disruption reasons this budget limits (Underutilized, Empty, Drifted); unset means all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxItems" = 50, "x-kubernetes-list-type" = "set"))]
    pub reasons: Option<Vec<DisruptionReason>>,
    /// Most nodes that may be disrupting at once: a count (`5`) or a percentage of the pool's
    /// nodes (`10%`, rounded up). Nodes being deleted count against it.
    #[serde(default = "default_budget_nodes")]
    #[schemars(extend("pattern" = BUDGET_NODES_PATTERN))]
    pub nodes: String,
    /// When the budget becomes active, in cron syntax evaluated in UTC (five fields or a macro
    /// such as `@daily`). Requires `duration`; unset means always active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = BUDGET_SCHEDULE_PATTERN))]
    pub schedule: Option<String>,
    /// How long the budget stays active after each schedule hit, in hours and/or minutes
    /// (e.g. `8h`, `1h30m`). Requires `schedule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"))]
    pub duration: Option<GoDuration>,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            reasons: None,
            nodes: default_budget_nodes(),
            schedule: None,
            duration: None,
        }
    }
}

/// A budget's `nodes` that is neither a count nor a percentage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid budget nodes {0:?}: expected a count like 5 or a percentage like 10%")]
pub struct InvalidBudgetNodes(pub String);

impl Budget {
    /// Whether this budget limits `reason` (no reasons means every reason).
    pub fn applies_to(&self, reason: DisruptionReason) -> bool {
        self.reasons.as_ref().is_none_or(|r| r.contains(&reason))
    }

    /// How many of `num_nodes` nodes this budget allows to be disrupting while it is active:
    /// the count, or the percentage of `num_nodes` rounded up (upstream
    /// `GetScaledValueFromIntOrPercent(..., roundUp=true)`). Whether the schedule window is
    /// active is the caller's business.
    pub fn allowed_disruptions(&self, num_nodes: usize) -> Result<usize, InvalidBudgetNodes> {
        let invalid = || InvalidBudgetNodes(self.nodes.clone());
        match self.nodes.strip_suffix('%') {
            Some(pct) => {
                let pct: usize = pct.parse().map_err(|_| invalid())?;
                Ok((pct * num_nodes).div_ceil(100))
            }
            None => self.nodes.parse().map_err(|_| invalid()),
        }
    }
}

/// Observed state of a NodePool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// Total capacity of the pool's nodes, by resource name, including `nodes`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::quantity_map")]
    pub resources: BTreeMap<String, Quantity>,
    /// Number of nodes owned by the pool (the scale subresource's replicas).
    #[serde(default)]
    pub nodes: i64,
    /// Generation of the node class last seen; when the class changes, NodeRegistrationHealthy
    /// is reset.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub node_class_observed_generation: i64,
    /// Health and readiness signals; `Ready` means ValidationSucceeded and NodeClassReady.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions_map_list")]
    pub conditions: Vec<Condition>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

impl HasConditions for NodePoolStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

impl StatusConditions for NodePool {
    fn condition_types(&self) -> ConditionTypes {
        conditions::NODEPOOL_CONDITIONS
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

impl NodePool {
    /// Whether this is a static pool (`spec.replicas` set).
    pub fn is_static(&self) -> bool {
        self.spec.replicas.is_some()
    }

    /// The scheduling weight; unset counts as 0.
    pub fn weight(&self) -> i32 {
        self.spec.weight.unwrap_or(0)
    }

    /// Fewest disruptions allowed for `reason` among the given budgets that are active and
    /// apply to it (`GetAllowedDisruptionsByReason`), or `usize::MAX` when none limits it.
    /// `is_active` reports whether a budget's schedule window is open now. A malformed budget
    /// allows 0 (fail closed).
    pub fn allowed_disruptions(
        &self,
        num_nodes: usize,
        reason: DisruptionReason,
        is_active: impl Fn(&Budget) -> bool,
    ) -> usize {
        self.spec
            .disruption
            .budgets
            .iter()
            .filter(|b| b.applies_to(reason))
            .map(|b| {
                if !is_active(b) {
                    usize::MAX
                } else {
                    b.allowed_disruptions(num_nodes).unwrap_or(0)
                }
            })
            .min()
            .unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_upstream() {
        let yaml = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      requirements: []
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"#;
        let np: NodePool = serde_saphyr::from_str(yaml).expect("parse");
        let d = &np.spec.disruption;
        assert_eq!(
            d.consolidation_policy,
            ConsolidationPolicy::WhenEmptyOrUnderutilized
        );
        assert_eq!(
            d.consolidate_after.duration(),
            Some(std::time::Duration::ZERO)
        );
        assert_eq!(d.budgets, vec![Budget::default()]);
        assert_eq!(np.spec.template.spec.expire_after.to_string(), "720h");
        let json = serde_json::to_value(&np).expect("ser");
        assert_eq!(
            json["spec"]["disruption"],
            serde_json::json!({"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized", "budgets": [{"nodes": "10%"}]})
        );
        assert!(json["spec"].get("limits").is_none());
        assert!(json["spec"]["template"].get("metadata").is_none());
    }

    #[test]
    fn budget_math() {
        let cases: &[(&str, usize, Result<usize, ()>)] = &[
            ("10%", 10, Ok(1)),
            ("10%", 11, Ok(2)),
            ("10%", 0, Ok(0)),
            ("100%", 7, Ok(7)),
            ("0", 7, Ok(0)),
            ("3", 7, Ok(3)),
            ("x%", 7, Err(())),
        ];
        for (nodes, n, want) in cases {
            let b = Budget {
                nodes: (*nodes).into(),
                ..Budget::default()
            };
            assert_eq!(
                b.allowed_disruptions(*n).map_err(|_| ()),
                *want,
                "{nodes} of {n}"
            );
        }
    }

    #[test]
    fn allowed_disruptions_takes_min_of_applicable() {
        let mut np = NodePool::new(
            "p",
            NodePoolSpec {
                template: NodeClaimTemplate {
                    metadata: TemplateMetadata::default(),
                    spec: NodeClaimTemplateSpec {
                        taints: vec![],
                        startup_taints: vec![],
                        requirements: vec![],
                        node_class_ref: NodeClassReference::default(),
                        termination_grace_period: None,
                        expire_after: default_expire_after(),
                    },
                },
                disruption: Disruption::default(),
                limits: BTreeMap::new(),
                weight: None,
                replicas: None,
            },
        );
        np.spec.disruption.budgets.push(Budget {
            reasons: Some(vec![DisruptionReason::Drifted]),
            nodes: "0".into(),
            ..Budget::default()
        });
        assert_eq!(
            np.allowed_disruptions(20, DisruptionReason::Empty, |_| true),
            2
        );
        assert_eq!(
            np.allowed_disruptions(20, DisruptionReason::Drifted, |_| true),
            0
        );
        assert_eq!(
            np.allowed_disruptions(20, DisruptionReason::Drifted, |_| false),
            usize::MAX
        );
        // Explicitly empty reasons apply to nothing, as upstream.
        np.spec.disruption.budgets = vec![Budget {
            reasons: Some(vec![]),
            nodes: "0".into(),
            ..Budget::default()
        }];
        assert_eq!(
            np.allowed_disruptions(20, DisruptionReason::Empty, |_| true),
            usize::MAX
        );
    }
}
