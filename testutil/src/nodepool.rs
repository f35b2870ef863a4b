//! NodePools: the templates Karpenter launches NodeClaims from, with their limits, disruption
//! budgets and status.

use crds::{NodePool, Operator};
use serde_json::{Value, json};

use crate::default_node_class_ref;
use crate::meta::{ConditionBuilder, at, condition, push, strings, taint};

/// A NodePool `name` whose template references the EC2NodeClass `default` and has no
/// requirements, labels or taints; no limits, weight, disruption settings, annotations or
/// status. E.g. `nodepool("default").requirement("karpenter.sh/capacity-type", Operator::In,
/// ["spot"])`.
pub fn nodepool(name: impl AsRef<str>) -> NodePoolBuilder {
    NodePoolBuilder(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name.as_ref()},
        "spec": {"template": {"spec": {"nodeClassRef": default_node_class_ref(), "requirements": []}}},
    }))
}

/// A NodePool being built (see [`nodepool`]).
#[derive(Clone, Debug)]
pub struct NodePoolBuilder(Value);

builder_common!(NodePoolBuilder, NodePool, "NodePool");

impl NodePoolBuilder {
    /// Appends the template requirement `key operator values`.
    pub fn requirement<S: AsRef<str>>(
        mut self,
        key: impl AsRef<str>,
        operator: Operator,
        values: impl IntoIterator<Item = S>,
    ) -> Self {
        push(
            &mut self.0,
            &["spec", "template", "spec", "requirements"],
            json!({"key": key.as_ref(), "operator": operator.as_str(), "values": strings(values)}),
        );
        self
    }

    /// Adds `key` = `value` to the template's labels (`spec.template.metadata.labels`), which
    /// every NodeClaim of the pool carries.
    pub fn template_label(mut self, key: impl AsRef<str>, value: impl AsRef<str>) -> Self {
        at(&mut self.0, &["spec", "template", "metadata", "labels"])[key.as_ref()] =
            json!(value.as_ref());
        self
    }

    /// Appends a template taint in kubectl's `key[=value]:effect` spelling.
    pub fn taint(mut self, spec: impl AsRef<str>) -> Self {
        push(
            &mut self.0,
            &["spec", "template", "spec", "taints"],
            taint(spec.as_ref()),
        );
        self
    }

    /// Appends a template startup taint in kubectl's `key[=value]:effect` spelling.
    pub fn startup_taint(mut self, spec: impl AsRef<str>) -> Self {
        push(
            &mut self.0,
            &["spec", "template", "spec", "startupTaints"],
            taint(spec.as_ref()),
        );
        self
    }

    /// References the EC2NodeClass `name` instead of `default`.
    pub fn node_class(mut self, name: impl AsRef<str>) -> Self {
        self.0["spec"]["template"]["spec"]["nodeClassRef"]["name"] = json!(name.as_ref());
        self
    }

    /// Sets the template's `expireAfter` (a Go duration such as `720h`, or `Never`).
    pub fn expire_after(mut self, duration: impl AsRef<str>) -> Self {
        self.0["spec"]["template"]["spec"]["expireAfter"] = json!(duration.as_ref());
        self
    }

    /// Sets the limit of `resource` (`cpu`, `memory`, `nodes`, ...) to `quantity`.
    pub fn limit(mut self, resource: impl AsRef<str>, quantity: impl AsRef<str>) -> Self {
        at(&mut self.0, &["spec", "limits"])[resource.as_ref()] = json!(quantity.as_ref());
        self
    }

    /// Sets `spec.replicas`: a static NodePool of that many nodes.
    pub fn replicas(mut self, replicas: i64) -> Self {
        self.0["spec"]["replicas"] = json!(replicas);
        self
    }

    /// Sets `spec.weight` (higher is tried first).
    pub fn weight(mut self, weight: i32) -> Self {
        self.0["spec"]["weight"] = json!(weight);
        self
    }

    /// Sets `spec.disruption.consolidationPolicy` (`WhenEmpty` or `WhenEmptyOrUnderutilized`).
    pub fn consolidation_policy(mut self, policy: impl AsRef<str>) -> Self {
        at(&mut self.0, &["spec", "disruption"])["consolidationPolicy"] = json!(policy.as_ref());
        self
    }

    /// Appends a disruption budget (e.g. `json!({"nodes": "0", "reasons": ["Drifted"]})`).
    pub fn budget(mut self, budget: Value) -> Self {
        push(&mut self.0, &["spec", "disruption", "budgets"], budget);
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
