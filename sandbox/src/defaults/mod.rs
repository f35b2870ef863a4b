//! kube-apiserver's defaulting of built-in kinds, applied to every object written, on create and
//! on update: the rules of Kubernetes' `pkg/apis/*/v1/defaults.go` and the declarative defaults of
//! their generated defaulters (a gRPC probe's `service`, a port's `protocol`), plus what the kinds'
//! REST storage fills in on create (a Service's cluster IP and IP families, a Job's selector).
//! Clients such as `kubectl describe` rely on these fields being set: its probe printer
//! dereferences `grpc.service`, its Deployment printer `spec.replicas` and the rolling-update
//! percentages. Admission plugins that only touch Pods (service account, priority, default
//! tolerations) are in [`crate::admission`].

mod kinds;
mod pod;
mod workloads;

use serde_json::{Value, json};

use crate::registry::ResourceType;

/// Whether the write creates the object or replaces an existing one (`old`).
#[derive(Clone, Copy, Debug)]
pub enum Write<'a> {
    /// A new object.
    Create,
    /// An update of `old`, whose server-allocated values (cluster IPs, node ports) carry over.
    Update(&'a Value),
}

/// Apply the defaults of the object's kind, in place. Custom resources are defaulted from their
/// schema elsewhere; kinds without defaults are left as they are.
pub fn apply(rt: &ResourceType, obj: &mut Value, write: Write<'_>) {
    if rt.crd.is_some() || !obj.is_object() {
        return;
    }
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => {
            if let Some(spec) = obj.get_mut("spec") {
                pod::pod_spec(spec);
                pod::pod_only(spec);
            }
        }
        ("", "Service") => kinds::service(obj, write),
        ("", "PersistentVolume") => kinds::persistent_volume(obj),
        ("", "PersistentVolumeClaim") => kinds::persistent_volume_claim(obj),
        ("", "Node") => kinds::node(obj),
        ("", "Namespace") => kinds::namespace(obj),
        ("", "Secret") => kinds::secret(obj),
        ("", "Endpoints") => kinds::endpoints(obj),
        ("apps", "Deployment") => workloads::deployment(obj),
        ("apps", "ReplicaSet") => workloads::replica_set(obj),
        ("apps", "StatefulSet") => workloads::stateful_set(obj),
        ("apps", "DaemonSet") => workloads::daemon_set(obj),
        ("batch", "Job") => workloads::job(obj, write),
        ("scheduling.k8s.io", "PriorityClass") => {
            set_default(obj, "preemptionPolicy", json!("PreemptLowerPriority"))
        }
        ("storage.k8s.io", "StorageClass") => {
            set_default(obj, "reclaimPolicy", json!("Delete"));
            set_default(obj, "volumeBindingMode", json!("Immediate"));
        }
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            kinds::role_binding(obj)
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => kinds::crd(obj),
        _ => {}
    }
}

/// Set `field` unless present (an explicit `null` counts as absent, as in Go).
pub(crate) fn set_default(v: &mut Value, field: &str, default: Value) {
    if let Some(m) = v.as_object_mut() {
        match m.get(field) {
            Some(existing) if !existing.is_null() => {}
            _ => {
                m.insert(field.to_string(), default);
            }
        }
    }
}

/// The object at `field`, created empty when absent or null; `None` when `v` is not an object
/// or the field holds something else.
pub(crate) fn ensure<'a>(v: &'a mut Value, field: &str) -> Option<&'a mut Value> {
    let m = v.as_object_mut()?;
    let slot = m.entry(field.to_string()).or_insert(Value::Null);
    if slot.is_null() {
        *slot = json!({});
    }
    slot.is_object().then_some(slot)
}

/// The elements of the array at `field`, if it is one.
pub(crate) fn items<'a>(v: &'a mut Value, field: &str) -> impl Iterator<Item = &'a mut Value> {
    v.get_mut(field)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

/// Round every quantity of a resource list up to milli (`SetDefaults_ResourceList`), so `0.0001`
/// CPU is stored as `1m`.
pub(crate) fn resource_list(list: Option<&mut Value>) {
    let Some(map) = list.and_then(Value::as_object_mut) else {
        return;
    };
    for v in map.values_mut() {
        if let Some(mut q) = v
            .as_str()
            .and_then(|s| crate::quantity::Quantity::parse(s).ok())
        {
            q.round_up_to(-3);
            *v = Value::String(q.canonical());
        }
    }
}

#[cfg(test)]
mod tests;
