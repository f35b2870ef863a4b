//! Nodes: what kubelets register for NodeClaims, and what the scheduler places pods on.

use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};

use crate::meta::{ConditionBuilder, at, push, taint};

/// A Node `name` with no labels, spec or status (not even a Ready condition); e.g.
/// `node("n1").label("karpenter.sh/nodepool", "default").ready("True").allocatable("cpu", "4")`.
pub fn node(name: impl AsRef<str>) -> NodeBuilder {
    NodeBuilder(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name.as_ref()}}))
}

/// A Node being built (see [`node`]).
#[derive(Clone, Debug)]
pub struct NodeBuilder(Value);

builder_common!(NodeBuilder, Node, "Node");

impl NodeBuilder {
    /// Sets `spec.providerID`, e.g. `aws:///us-east-1a/i-1`.
    pub fn provider_id(mut self, provider_id: impl AsRef<str>) -> Self {
        at(&mut self.0, &["spec"])["providerID"] = json!(provider_id.as_ref());
        self
    }

    /// Appends a taint in kubectl's `key[=value]:effect` spelling to `spec.taints`.
    pub fn taint(mut self, spec: impl AsRef<str>) -> Self {
        push(&mut self.0, &["spec", "taints"], taint(spec.as_ref()));
        self
    }

    /// Appends the node condition `type_` = `status` (no reason) to `status.conditions`.
    pub fn condition(mut self, type_: impl AsRef<str>, status: impl AsRef<str>) -> Self {
        push(
            &mut self.0,
            &["status", "conditions"],
            json!({"type": type_.as_ref(), "status": status.as_ref()}),
        );
        self
    }

    /// Appends `condition` (with its reason, message and `lastTransitionTime`) to
    /// `status.conditions`, e.g. `condition("Ready", "False").at("2026-01-01T00:00:00Z")`.
    pub fn with_condition(mut self, condition: ConditionBuilder) -> Self {
        push(&mut self.0, &["status", "conditions"], condition.json());
        self
    }

    /// Appends the `Ready` condition with `status` (`"True"`, `"False"`, `"Unknown"`).
    pub fn ready(self, status: impl AsRef<str>) -> Self {
        self.condition("Ready", status)
    }

    /// Sets `status.allocatable` of `resource` to `quantity` (e.g. `("cpu", "1930m")`).
    pub fn allocatable(mut self, resource: impl AsRef<str>, quantity: impl AsRef<str>) -> Self {
        at(&mut self.0, &["status", "allocatable"])[resource.as_ref()] = json!(quantity.as_ref());
        self
    }

    /// Sets `status.capacity` of `resource` to `quantity`.
    pub fn capacity(mut self, resource: impl AsRef<str>, quantity: impl AsRef<str>) -> Self {
        at(&mut self.0, &["status", "capacity"])[resource.as_ref()] = json!(quantity.as_ref());
        self
    }
}
