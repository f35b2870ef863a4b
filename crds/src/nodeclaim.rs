//! The NodeClaim kind (`karpenter.sh/v1`): Karpenter's request for one node, created from a
//! NodePool template and tracked through launch, registration, initialization and termination
//! (`pkg/apis/v1/nodeclaim.go`, `nodeclaim_status.go`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::{
    self, Condition, ConditionTypes, HasConditions, ObjectInfo, StatusConditions,
};
use crate::duration::{GoDuration, NillableDuration};
use crate::requirements::NodeSelectorRequirementWithMinValues;
use crate::schema;

/// Default `expireAfter`: 30 days.
pub const DEFAULT_EXPIRE_AFTER: &str = "720h";

pub(crate) fn default_expire_after() -> NillableDuration {
    // The literal is a valid duration; fall back to the same value built directly.
    NillableDuration::parse(DEFAULT_EXPIRE_AFTER)
        .unwrap_or_else(|_| NillableDuration::new(std::time::Duration::from_secs(720 * 3600)))
}

/// The desired state of a NodeClaim. The whole spec is immutable once created.
// kube's repeated `printcolumn(...)` entries look like duplicated attributes to clippy.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    plural = "nodeclaims",
    status = "NodeClaimStatus",
    derive = "PartialEq",
    category = "karpenter",
    doc = "A NodeClaim is Karpenter's request for a single node: the requirements and taints it must satisfy, the node class that configures it, and, in status, the instance and Node that fulfil it.",
    printcolumn(
        name = "Type",
        type_ = "string",
        json_path = r".metadata.labels.node\.kubernetes\.io/instance-type"
    ),
    printcolumn(
        name = "Capacity",
        type_ = "string",
        json_path = r".metadata.labels.karpenter\.sh/capacity-type"
    ),
    printcolumn(
        name = "Zone",
        type_ = "string",
        json_path = r".metadata.labels.topology\.kubernetes\.io/zone"
    ),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.nodeName"),
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
        name = "ImageID",
        type_ = "string",
        json_path = ".status.imageID",
        priority = 1
    ),
    printcolumn(
        name = "ID",
        type_ = "string",
        json_path = ".status.providerID",
        priority = 1
    ),
    printcolumn(
        name = "NodePool",
        type_ = "string",
        json_path = r".metadata.labels.karpenter\.sh/nodepool",
        priority = 1
    ),
    printcolumn(
        name = "NodeClass",
        type_ = "string",
        json_path = ".spec.nodeClassRef.name",
        priority = 1
    ),
    printcolumn(
        name = "Drifted",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Drifted")].status"#,
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "spec is immutable"}]))]
pub struct NodeClaimSpec {
    /// Taints applied to the node; pods must tolerate them to schedule there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::taints")]
    pub taints: Vec<Taint>,
    /// Taints the node starts with that something on the node (usually a DaemonSet) removes
    /// once it is ready. Pods need not tolerate them for Karpenter to launch a node, and the
    /// NodeClaim is not initialized until they are gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::taints")]
    pub startup_taints: Vec<Taint>,
    /// Label requirements the node must satisfy; single-valued ones also become node labels.
    #[schemars(transform = schema::requirements)]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// Resources the scheduler packed onto this NodeClaim (pods plus daemons).
    #[serde(default, skip_serializing_if = "ResourceRequirements::is_empty")]
    pub resources: ResourceRequirements,
    /// The provider-specific node class (e.g. an EC2NodeClass) that configures the instance.
    pub node_class_ref: NodeClassReference,
    /// Longest time a deleting node may spend draining, measured from deletion; after it, pods
    /// are deleted regardless of PodDisruptionBudgets and `karpenter.sh/do-not-disrupt`, each
    /// early enough to get its own terminationGracePeriodSeconds. Unset: wait for the drain
    /// forever. Go duration in s/m/h, e.g. `24h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = r"^([0-9]+(s|m|h))+$"))]
    pub termination_grace_period: Option<GoDuration>,
    /// How long after creation the node is replaced, e.g. `720h`, or `Never`. Expiry ignores
    /// disruption budgets.
    #[serde(default = "default_expire_after")]
    pub expire_after: NillableDuration,
}

/// Resources a NodeClaim needs (upstream `ResourceRequirements`; only requests today).
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq)]
pub struct ResourceRequirements {
    /// Minimum resources the node must provide, by resource name (e.g. `cpu: "4"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::quantity_map")]
    pub requests: BTreeMap<String, Quantity>,
}

impl ResourceRequirements {
    /// Whether no requests are set.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }
}

/// A reference to a node class object (e.g. `karpenter.k8s.aws` / `EC2NodeClass` / `default`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq, Eq, Hash)]
pub struct NodeClassReference {
    /// API group of the node class, without a version, e.g. `karpenter.k8s.aws`.
    #[schemars(extend(
        "pattern" = "^[^/]*$",
        "x-kubernetes-validations" = [{"rule": "self != ''", "message": "group may not be empty"}]
    ))]
    pub group: String,
    /// Kind of the node class, e.g. `EC2NodeClass`.
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "kind may not be empty"}]))]
    pub kind: String,
    /// Name of the node class object.
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "name may not be empty"}]))]
    pub name: String,
}

/// The kind of node class this Karpenter serves, in the API group [`crate::labels::AWS_GROUP`].
pub const NODE_CLASS_KIND: &str = "EC2NodeClass";

impl NodeClassReference {
    /// Why this Karpenter does not serve the referenced node class (a group or kind other than
    /// `karpenter.k8s.aws` `EC2NodeClass`), or `None` when it does. Upstream leaves a NodePool
    /// or NodeClaim whose reference its cloud provider does not support alone; here such a
    /// NodePool is not Ready and such a NodeClaim is not launched, with this as the reason.
    pub fn unsupported(&self) -> Option<String> {
        (self.group != crate::labels::AWS_GROUP || self.kind != NODE_CLASS_KIND).then(|| {
            format!(
                "nodeClassRef {}/{} {:?} is not a node class this Karpenter serves (only {}/{})",
                self.group,
                self.kind,
                self.name,
                crate::labels::AWS_GROUP,
                NODE_CLASS_KIND
            )
        })
    }
}

/// Observed state of a NodeClaim.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    /// Name of the Node that registered for this NodeClaim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Cloud provider id of the instance, e.g. `aws:///us-west-2a/i-0123456789abcdef0`.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// Identifier of the image the node runs, e.g. an AMI id.
    #[serde(rename = "imageID", default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// Expected total resources of the node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::quantity_map")]
    pub capacity: BTreeMap<String, Quantity>,
    /// Expected resources available to pods (capacity minus reserved and eviction thresholds).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::quantity_map")]
    pub allocatable: BTreeMap<String, Quantity>,
    /// Lifecycle and health signals; `Ready` means Launched, Registered and Initialized.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions_map_list")]
    pub conditions: Vec<Condition>,
    /// Last time a pod was bound to the node or left it (terminal or terminating); the start of
    /// the `consolidateAfter` wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<Time>,
}

impl HasConditions for NodeClaimStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

impl StatusConditions for NodeClaim {
    fn condition_types(&self) -> ConditionTypes {
        conditions::NODECLAIM_CONDITIONS
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requirements::Operator;

    #[test]
    fn defaults_and_round_trip() {
        let yaml = r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-abcde
spec:
  requirements:
    - key: node.kubernetes.io/instance-type
      operator: In
      values: ["m5.large"]
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  resources:
    requests: {cpu: 1500m, pods: 3}
status:
  providerID: aws:///us-west-2a/i-0123
  conditions:
    - type: Launched
      status: "True"
      reason: Launched
      message: ""
      lastTransitionTime: "2024-07-01T00:00:00Z"
"#;
        let nc: NodeClaim = serde_saphyr::from_str(yaml).expect("parse");
        assert_eq!(
            nc.spec.expire_after.duration(),
            Some(std::time::Duration::from_secs(720 * 3600))
        );
        assert_eq!(nc.spec.requirements[0].operator, Operator::In);
        assert_eq!(nc.spec.resources.requests["pods"], Quantity("3".into()));
        let status = nc.status.as_ref().expect("status");
        assert_eq!(
            status.provider_id.as_deref(),
            Some("aws:///us-west-2a/i-0123")
        );
        assert!(conditions::is_true(
            &status.conditions,
            conditions::LAUNCHED
        ));
        let json = serde_json::to_value(&nc).expect("ser");
        assert_eq!(json["spec"]["expireAfter"], "720h");
        assert_eq!(json["status"]["providerID"], "aws:///us-west-2a/i-0123");
        assert!(json["spec"].get("taints").is_none());
        let back: NodeClaim = serde_json::from_value(json).expect("re-parse");
        assert_eq!(back, nc);
    }
}
