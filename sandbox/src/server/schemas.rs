//! The schemas the OpenAPI v3 documents publish, named as kube-apiserver names them
//! (`io.k8s.api.core.v1.Pod`, `sh.karpenter.v1.NodePool`) and marked with
//! `x-kubernetes-group-version-kind`, which is how `kubectl explain` finds a kind. Built-in
//! kinds' schemas come from k8s-openapi's generated `JsonSchema` (the Kubernetes API's own field
//! descriptions); custom kinds' from their CRD version's `openAPIV3Schema`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api::apps::v1::{
    ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Event, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod,
    Secret, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde_json::{Map, Value, json};

use crate::registry::ResourceType;

/// Schemas by name: a kind's own and every definition it refers to.
pub type Schemas = Map<String, Value>;

/// The schema name kube-apiserver gives `ObjectMeta`, which every kind's `metadata` refers to.
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// The schemas one served kind contributes to its group version's document; empty for a kind
/// without a known schema (a built-in the sandbox has no type for).
pub fn for_kind(rt: &ResourceType) -> Arc<Schemas> {
    match &rt.schema {
        Some(schema) => Arc::new(custom(rt, schema)),
        None => builtin(&rt.group, &rt.version, &rt.kind),
    }
}

/// The name the API server gives a custom kind's schema: the group reversed, then version and
/// kind, e.g. `sh.karpenter.v1.NodePool`.
fn custom_name(rt: &ResourceType) -> String {
    let mut parts: Vec<&str> = rt.group.split('.').filter(|p| !p.is_empty()).collect();
    parts.reverse();
    parts.push(&rt.version);
    parts.push(&rt.kind);
    parts.join(".")
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!([{"group": group, "version": version, "kind": kind}])
}

/// A custom kind: its CRD version's `openAPIV3Schema` marked with the group-version-kind, with
/// `metadata` referring to `ObjectMeta` as the API server publishes it.
fn custom(rt: &ResourceType, schema: &Value) -> Schemas {
    static OBJECT_META_SCHEMAS: OnceLock<Arc<Schemas>> = OnceLock::new();
    let mut own = schema.clone();
    let mut out = (**OBJECT_META_SCHEMAS.get_or_init(builtin_schemas::<ObjectMeta>)).clone();
    if let Some(obj) = own.as_object_mut() {
        obj.insert(
            "x-kubernetes-group-version-kind".into(),
            gvk(&rt.group, &rt.version, &rt.kind),
        );
        if let Some(properties) = obj.get_mut("properties").and_then(Value::as_object_mut) {
            properties.insert(
                "metadata".into(),
                json!({
                    "allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}],
                    "description": "The object's standard metadata (ObjectMeta): name, namespace, labels, annotations, owner references, finalizers.",
                }),
            );
        }
    }
    out.insert(custom_name(rt), own);
    out
}

/// A built-in kind's schemas and the name of its own among them (`io.k8s.api.apps.v1.Deployment`),
/// for decoding its objects; `None` for custom kinds and built-ins without a schema.
pub(crate) fn builtin_root(rt: &ResourceType) -> Option<(Arc<Schemas>, String)> {
    static ROOTS: OnceLock<Mutex<HashMap<String, Option<String>>>> = OnceLock::new();
    if rt.schema.is_some() {
        return None;
    }
    let schemas = builtin(&rt.group, &rt.version, &rt.kind);
    let key = format!("{}/{}", rt.group, rt.kind);
    let roots = ROOTS.get_or_init(Default::default);
    let cached = roots
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned();
    let root = match cached {
        Some(root) => root,
        None => {
            let root = schemas
                .iter()
                .find(|(_, s)| {
                    s.pointer("/x-kubernetes-group-version-kind/0/kind")
                        .and_then(Value::as_str)
                        == Some(rt.kind.as_str())
                })
                .map(|(name, _)| name.clone());
            roots
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key, root.clone());
            root
        }
    };
    Some((schemas, root?))
}

/// A built-in kind's schemas, generated once per kind (every built-in kind the sandbox serves is
/// `v1`).
fn builtin(group: &str, version: &str, kind: &str) -> Arc<Schemas> {
    if version != "v1" {
        return Arc::new(Schemas::new());
    }
    let generate: fn() -> Arc<Schemas> = match (group, kind) {
        ("", "Pod") => builtin_kind::<Pod>,
        ("", "Node") => builtin_kind::<Node>,
        ("", "Namespace") => builtin_kind::<Namespace>,
        ("", "Event") => builtin_kind::<Event>,
        ("", "Service") => builtin_kind::<Service>,
        ("", "ServiceAccount") => builtin_kind::<ServiceAccount>,
        ("", "ConfigMap") => builtin_kind::<ConfigMap>,
        ("", "Secret") => builtin_kind::<Secret>,
        ("", "Endpoints") => builtin_kind::<Endpoints>,
        ("", "PersistentVolumeClaim") => builtin_kind::<PersistentVolumeClaim>,
        ("", "PersistentVolume") => builtin_kind::<PersistentVolume>,
        ("apps", "Deployment") => builtin_kind::<Deployment>,
        ("apps", "ReplicaSet") => builtin_kind::<ReplicaSet>,
        ("apps", "DaemonSet") => builtin_kind::<DaemonSet>,
        ("apps", "StatefulSet") => builtin_kind::<StatefulSet>,
        ("apps", "ControllerRevision") => builtin_kind::<ControllerRevision>,
        ("batch", "Job") => builtin_kind::<Job>,
        ("policy", "PodDisruptionBudget") => builtin_kind::<PodDisruptionBudget>,
        ("coordination.k8s.io", "Lease") => builtin_kind::<Lease>,
        ("rbac.authorization.k8s.io", "ClusterRole") => builtin_kind::<ClusterRole>,
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => builtin_kind::<ClusterRoleBinding>,
        ("rbac.authorization.k8s.io", "Role") => builtin_kind::<Role>,
        ("rbac.authorization.k8s.io", "RoleBinding") => builtin_kind::<RoleBinding>,
        ("scheduling.k8s.io", "PriorityClass") => builtin_kind::<PriorityClass>,
        ("storage.k8s.io", "StorageClass") => builtin_kind::<StorageClass>,
        ("storage.k8s.io", "CSINode") => builtin_kind::<CSINode>,
        ("storage.k8s.io", "VolumeAttachment") => builtin_kind::<VolumeAttachment>,
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            builtin_kind::<CustomResourceDefinition>
        }
        _ => return Arc::new(Schemas::new()),
    };
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Schemas>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = format!("{group}/{kind}");
    if let Some(found) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Arc::clone(found);
    }
    let schemas = generate();
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, Arc::clone(&schemas));
    schemas
}

/// A built-in kind's schemas, its own marked with its group-version-kind.
fn builtin_kind<K: k8s_openapi::Resource + JsonSchema>() -> Arc<Schemas> {
    let mut out = (*builtin_schemas::<K>()).clone();
    if let Some(own) = out
        .get_mut(K::schema_name().as_ref())
        .and_then(Value::as_object_mut)
    {
        own.insert(
            "x-kubernetes-group-version-kind".into(),
            gvk(K::GROUP, K::VERSION, K::KIND),
        );
    }
    Arc::new(out)
}

/// A type's schema under its own name plus every definition it refers to, generated with
/// OpenAPI 3 settings (references as `#/components/schemas/<name>`).
fn builtin_schemas<T: JsonSchema>() -> Arc<Schemas> {
    let root = schemars::generate::SchemaSettings::openapi3()
        .into_generator()
        .into_root_schema_for::<T>();
    let mut own = match serde_json::to_value(root) {
        Ok(Value::Object(own)) => own,
        _ => return Arc::new(Schemas::new()),
    };
    let mut out = match own.remove("components") {
        Some(Value::Object(mut components)) => match components.remove("schemas") {
            Some(Value::Object(schemas)) => schemas,
            _ => Schemas::new(),
        },
        _ => Schemas::new(),
    };
    own.remove("$schema");
    own.remove("title");
    out.insert(T::schema_name().into_owned(), Value::Object(own));
    Arc::new(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_in_kind_is_named_and_marked_as_the_api_server_does() {
        let schemas = builtin("", "v1", "Pod");
        let pod = &schemas["io.k8s.api.core.v1.Pod"];
        assert_eq!(
            pod["x-kubernetes-group-version-kind"],
            json!([{"group": "", "version": "v1", "kind": "Pod"}])
        );
        assert_eq!(
            pod["properties"]["spec"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.PodSpec"
        );
        // Every reference resolves inside the same set of schemas.
        let text = Value::Object((*schemas).clone()).to_string();
        for reference in text.split("\"#/components/schemas/").skip(1) {
            let name = &reference[..reference.find('"').expect("closing quote")];
            assert!(
                schemas.contains_key(name),
                "{name} is referred to but missing"
            );
        }
        assert!(builtin("", "v1", "Gadget").is_empty());
        assert!(schemas.contains_key(OBJECT_META));
        assert!(
            Arc::ptr_eq(&builtin("", "v1", "Pod"), &schemas),
            "generated once"
        );
    }
}
