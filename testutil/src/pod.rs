//! Pods: what provisioning schedules, drains evict and PodDisruptionBudgets guard.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::meta::{at, push};

/// A Pod `name` in namespace `default` with one container `c` that requests nothing, no node,
/// no uid and no status; e.g. `pod("web-1").cpu("100m").memory("128Mi").on_node("n1")`.
pub fn pod(name: impl AsRef<str>) -> PodBuilder {
    PodBuilder(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name.as_ref(), "namespace": "default"},
        "spec": {"containers": [{"name": "c"}]},
    }))
}

/// A Pod being built (see [`pod`]). Resource setters act on the first container.
#[derive(Clone, Debug)]
pub struct PodBuilder(Value);

builder_common!(PodBuilder, Pod, "Pod", decoded_arc);

impl PodBuilder {
    /// Sets `metadata.namespace` (`default` unless told).
    pub fn namespace(mut self, namespace: impl AsRef<str>) -> Self {
        self.0["metadata"]["namespace"] = json!(namespace.as_ref());
        self
    }

    /// The first container's request of `resource` (a quantity such as `"2"`, `"1Gi"`).
    pub fn request(mut self, resource: impl AsRef<str>, quantity: impl AsRef<str>) -> Self {
        self.first_container()["resources"]["requests"][resource.as_ref()] =
            json!(quantity.as_ref());
        self
    }

    /// The first container's cpu request, a quantity: cores (`"2"`) or millicores (`"100m"`).
    pub fn cpu(self, quantity: impl AsRef<str>) -> Self {
        self.request("cpu", quantity)
    }

    /// The first container's memory request, a quantity in bytes (`"128Mi"`, `"1Gi"`).
    pub fn memory(self, quantity: impl AsRef<str>) -> Self {
        self.request("memory", quantity)
    }

    /// Replaces the first container's `resources.requests` with `requests` (an object of
    /// quantities, possibly empty).
    pub fn requests(mut self, requests: Value) -> Self {
        self.first_container()["resources"]["requests"] = requests;
        self
    }

    /// The first container's image (none unless told).
    pub fn image(mut self, image: impl AsRef<str>) -> Self {
        self.first_container()["image"] = json!(image.as_ref());
        self
    }

    /// Binds the pod to node `node` (`spec.nodeName`).
    pub fn on_node(mut self, node: impl AsRef<str>) -> Self {
        self.0["spec"]["nodeName"] = json!(node.as_ref());
        self
    }

    /// Sets `spec.terminationGracePeriodSeconds`.
    pub fn grace_period(mut self, seconds: i64) -> Self {
        self.0["spec"]["terminationGracePeriodSeconds"] = json!(seconds);
        self
    }

    /// Adds `key` = `value` to `spec.nodeSelector`.
    pub fn node_selector(mut self, key: impl AsRef<str>, value: impl AsRef<str>) -> Self {
        at(&mut self.0, &["spec", "nodeSelector"])[key.as_ref()] = json!(value.as_ref());
        self
    }

    /// Replaces the whole `spec` (containers included) with `spec`.
    pub fn spec(mut self, spec: Value) -> Self {
        self.0["spec"] = spec;
        self
    }

    /// Annotates the pod `karpenter.sh/do-not-disrupt: "true"`.
    pub fn do_not_disrupt(self) -> Self {
        self.annotation(crds::labels::DO_NOT_DISRUPT_ANNOTATION, "true")
    }

    /// Sets `status.phase` (`Pending`, `Running`, `Succeeded`, `Failed`).
    pub fn phase(mut self, phase: impl AsRef<str>) -> Self {
        at(&mut self.0, &["status"])["phase"] = json!(phase.as_ref());
        self
    }

    /// Appends the pod condition `type_` = `status` (no reason) to `status.conditions`.
    pub fn condition(mut self, type_: impl AsRef<str>, status: impl AsRef<str>) -> Self {
        push(
            &mut self.0,
            &["status", "conditions"],
            json!({"type": type_.as_ref(), "status": status.as_ref()}),
        );
        self
    }

    /// What kube-scheduler leaves on a pod it cannot place: phase `Pending` and condition
    /// `PodScheduled=False` with reason `Unschedulable`.
    pub fn unschedulable(mut self) -> Self {
        self = self.phase("Pending");
        push(
            &mut self.0,
            &["status", "conditions"],
            json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}),
        );
        self
    }

    fn first_container(&mut self) -> &mut Value {
        let containers = at(&mut self.0, &["spec", "containers"]);
        if containers.as_array().is_none_or(|c| c.is_empty()) {
            *containers = json!([{"name": "c"}]);
        }
        &mut containers[0]
    }
}
