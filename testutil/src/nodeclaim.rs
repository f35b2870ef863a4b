//! NodeClaims: Karpenter's request for one node, and what it learns launching and registering it.

use crds::{NodeClaim, Operator};
use serde_json::{Value, json};

use crate::default_node_class_ref;
use crate::meta::{ConditionBuilder, at, condition, push, strings, taint};

/// A NodeClaim `name` referencing the EC2NodeClass `default`, with no requirements, labels
/// (not even its NodePool's: see [`NodeClaimBuilder::nodepool`]) or status. E.g.
/// `nodeclaim("default-abc").nodepool("default").provider_id("aws:///us-east-1a/i-1")
/// .condition("Launched", "True")`.
pub fn nodeclaim(name: impl AsRef<str>) -> NodeClaimBuilder {
    NodeClaimBuilder(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name.as_ref()},
        "spec": {"nodeClassRef": default_node_class_ref(), "requirements": []},
    }))
}

/// A NodeClaim being built (see [`nodeclaim`]).
#[derive(Clone, Debug)]
pub struct NodeClaimBuilder(Value);

builder_common!(NodeClaimBuilder, NodeClaim, "NodeClaim");

impl NodeClaimBuilder {
    /// Labels the NodeClaim as its NodePool's (`karpenter.sh/nodepool`).
    pub fn nodepool(self, nodepool: impl AsRef<str>) -> Self {
        self.label(crds::labels::NODEPOOL_LABEL, nodepool)
    }

    /// Appends the requirement `key operator values` to `spec.requirements`.
    pub fn requirement<S: AsRef<str>>(
        mut self,
        key: impl AsRef<str>,
        operator: Operator,
        values: impl IntoIterator<Item = S>,
    ) -> Self {
        push(
            &mut self.0,
            &["spec", "requirements"],
            json!({"key": key.as_ref(), "operator": operator.as_str(), "values": strings(values)}),
        );
        self
    }

    /// Sets the request of `resource` in `spec.resources.requests` (e.g. `("cpu", "1")`).
    pub fn request(mut self, resource: impl AsRef<str>, quantity: impl AsRef<str>) -> Self {
        at(&mut self.0, &["spec", "resources", "requests"])[resource.as_ref()] =
            json!(quantity.as_ref());
        self
    }

    /// Appends a taint in kubectl's `key[=value]:effect` spelling to `spec.taints`.
    pub fn taint(mut self, spec: impl AsRef<str>) -> Self {
        push(&mut self.0, &["spec", "taints"], taint(spec.as_ref()));
        self
    }

    /// Appends a startup taint in kubectl's `key[=value]:effect` spelling.
    pub fn startup_taint(mut self, spec: impl AsRef<str>) -> Self {
        push(
            &mut self.0,
            &["spec", "startupTaints"],
            taint(spec.as_ref()),
        );
        self
    }

    /// Sets `spec.expireAfter` (a Go duration such as `720h`, or `Never`).
    pub fn expire_after(mut self, duration: impl AsRef<str>) -> Self {
        self.0["spec"]["expireAfter"] = json!(duration.as_ref());
        self
    }

    /// Sets `spec.terminationGracePeriod` (a Go duration such as `1h30m`).
    pub fn termination_grace_period(mut self, duration: impl AsRef<str>) -> Self {
        self.0["spec"]["terminationGracePeriod"] = json!(duration.as_ref());
        self
    }

    /// Sets `status.providerID`, e.g. `aws:///us-east-1a/i-1`.
    pub fn provider_id(mut self, provider_id: impl AsRef<str>) -> Self {
        at(&mut self.0, &["status"])["providerID"] = json!(provider_id.as_ref());
        self
    }

    /// Sets `status.nodeName`, the Node that registered for the NodeClaim.
    pub fn node_name(mut self, node: impl AsRef<str>) -> Self {
        at(&mut self.0, &["status"])["nodeName"] = json!(node.as_ref());
        self
    }

    /// Sets `status.imageID`, e.g. an AMI id.
    pub fn image_id(mut self, image: impl AsRef<str>) -> Self {
        at(&mut self.0, &["status"])["imageID"] = json!(image.as_ref());
        self
    }

    /// Sets `status.capacity` of `resource` to `quantity` (what the launched instance has).
    pub fn capacity(mut self, resource: impl AsRef<str>, quantity: impl AsRef<str>) -> Self {
        at(&mut self.0, &["status", "capacity"])[resource.as_ref()] = json!(quantity.as_ref());
        self
    }

    /// Sets `status.allocatable` of `resource` to `quantity` (what pods may use of it).
    pub fn allocatable(mut self, resource: impl AsRef<str>, quantity: impl AsRef<str>) -> Self {
        at(&mut self.0, &["status", "allocatable"])[resource.as_ref()] = json!(quantity.as_ref());
        self
    }

    /// Appends the status condition `type_` = `status` with reason `type_` (see
    /// [`crate::condition`]).
    pub fn condition(self, type_: impl AsRef<str>, status: impl AsRef<str>) -> Self {
        self.with_condition(condition(type_, status))
    }

    /// Appends `condition` to `status.conditions`.
    pub fn with_condition(mut self, condition: ConditionBuilder) -> Self {
        push(&mut self.0, &["status", "conditions"], condition.json());
        self
    }
}
