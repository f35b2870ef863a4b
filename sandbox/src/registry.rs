//! The resource types the sandbox API server serves: built-in kinds plus those registered by
//! applying a CustomResourceDefinition.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::table::PrinterColumn;

/// Where the scale subresource reads and writes replicas (JSON paths without the leading `.`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    /// Path of the desired replica count, e.g. `spec.replicas`.
    pub spec_replicas: String,
    /// Path of the observed replica count, e.g. `status.replicas`.
    pub status_replicas: String,
    /// Path of the label selector string, if any.
    pub label_selector: Option<String>,
}

/// One served resource type, e.g. `apps/v1 deployments`.
#[derive(Clone, Debug)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: String,
    /// Served version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
    /// Plural resource name used in URLs, e.g. `deployments`.
    pub plural: String,
    /// Singular name, e.g. `deployment`.
    pub singular: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Short names accepted by kubectl, e.g. `deploy`.
    pub short_names: Vec<String>,
    /// Categories such as `all`.
    pub categories: Vec<String>,
    /// Whether `/status` is a separate subresource (the main resource then ignores status writes).
    pub status_subresource: bool,
    /// The scale subresource, when served.
    pub scale: Option<ScalePaths>,
    /// Printer columns declared by a CRD; `None` for built-in kinds (server-side printers).
    pub printer_columns: Option<Vec<PrinterColumn>>,
    /// Name of the CustomResourceDefinition that registered this type.
    pub crd: Option<String>,
    /// The CRD version's `openAPIV3Schema`, applied on every write.
    pub schema: Option<std::sync::Arc<Value>>,
}

/// The storage identity of a resource type: group and plural (one stored version per type).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TypeKey {
    /// API group; empty for core.
    pub group: String,
    /// Plural resource name, e.g. `nodeclaims`.
    pub plural: String,
}

impl ResourceType {
    /// `apiVersion` string: `v1` for core, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The storage key of this type.
    pub fn key(&self) -> TypeKey {
        TypeKey {
            group: self.group.clone(),
            plural: self.plural.clone(),
        }
    }

    /// Group-qualified resource name as used in error messages, e.g. `deployments.apps`.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Subresources served for this type, as discovery lists them (`pods/status`, ...).
    pub fn subresources(&self) -> Vec<&'static str> {
        let mut subs = Vec::new();
        if self.status_subresource {
            subs.push("status");
        }
        if self.scale.is_some() {
            subs.push("scale");
        }
        if self.group.is_empty() && self.plural == "pods" {
            subs.extend(["binding", "eviction"]);
        }
        subs
    }
}

struct BuiltIn {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    status: bool,
    scale: bool,
}

const fn builtin(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
) -> BuiltIn {
    BuiltIn {
        group,
        version,
        kind,
        plural,
        namespaced,
        short_names,
        categories: &[],
        status: false,
        scale: false,
    }
}

const fn with_status(mut b: BuiltIn) -> BuiltIn {
    b.status = true;
    b
}

const fn with_scale(mut b: BuiltIn) -> BuiltIn {
    b.scale = true;
    b
}

const fn in_all(mut b: BuiltIn) -> BuiltIn {
    b.categories = &["all"];
    b
}

/// The RBAC API group (served for storage only: the sandbox authorizes every request).
const RBAC: &str = "rbac.authorization.k8s.io";

/// The built-in kinds the sandbox serves.
const BUILT_INS: &[BuiltIn] = &[
    in_all(with_status(builtin("", "v1", "Pod", "pods", true, &["po"]))),
    with_status(builtin("", "v1", "Node", "nodes", false, &["no"])),
    with_status(builtin("", "v1", "Namespace", "namespaces", false, &["ns"])),
    builtin("", "v1", "Event", "events", true, &["ev"]),
    in_all(with_status(builtin(
        "",
        "v1",
        "Service",
        "services",
        true,
        &["svc"],
    ))),
    builtin("", "v1", "ServiceAccount", "serviceaccounts", true, &["sa"]),
    builtin("", "v1", "ConfigMap", "configmaps", true, &["cm"]),
    builtin("", "v1", "Secret", "secrets", true, &[]),
    builtin("", "v1", "Endpoints", "endpoints", true, &["ep"]),
    with_status(builtin(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true,
        &["pvc"],
    )),
    with_status(builtin(
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        false,
        &["pv"],
    )),
    in_all(with_scale(with_status(builtin(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        true,
        &["deploy"],
    )))),
    in_all(with_scale(with_status(builtin(
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        true,
        &["rs"],
    )))),
    in_all(with_status(builtin(
        "apps",
        "v1",
        "DaemonSet",
        "daemonsets",
        true,
        &["ds"],
    ))),
    in_all(with_scale(with_status(builtin(
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        true,
        &["sts"],
    )))),
    builtin(
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        true,
        &[],
    ),
    in_all(with_status(builtin(
        "batch",
        "v1",
        "Job",
        "jobs",
        true,
        &[],
    ))),
    with_status(builtin(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
        &["pdb"],
    )),
    builtin("coordination.k8s.io", "v1", "Lease", "leases", true, &[]),
    builtin(RBAC, "v1", "ClusterRole", "clusterroles", false, &[]),
    builtin(
        RBAC,
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
        &[],
    ),
    builtin(RBAC, "v1", "Role", "roles", true, &[]),
    builtin(RBAC, "v1", "RoleBinding", "rolebindings", true, &[]),
    builtin(
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        false,
        &["pc"],
    ),
    builtin(
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        false,
        &["sc"],
    ),
    builtin("storage.k8s.io", "v1", "CSINode", "csinodes", false, &[]),
    with_status(builtin(
        "storage.k8s.io",
        "v1",
        "VolumeAttachment",
        "volumeattachments",
        false,
        &[],
    )),
    with_status(builtin(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
        &["crd", "crds"],
    )),
];

fn built_in_type(b: &BuiltIn) -> ResourceType {
    let scale = b.scale.then(|| ScalePaths {
        spec_replicas: "spec.replicas".into(),
        status_replicas: "status.replicas".into(),
        label_selector: Some("status.selector".into()),
    });
    ResourceType {
        group: b.group.into(),
        version: b.version.into(),
        kind: b.kind.into(),
        plural: b.plural.into(),
        singular: b.kind.to_ascii_lowercase(),
        namespaced: b.namespaced,
        short_names: b.short_names.iter().map(|s| s.to_string()).collect(),
        categories: b.categories.iter().map(|s| s.to_string()).collect(),
        status_subresource: b.status,
        scale,
        printer_columns: None,
        crd: None,
        schema: None,
    }
}

/// All served resource types, keyed by (group, version, plural).
#[derive(Clone, Debug)]
pub struct Registry {
    types: BTreeMap<(String, String, String), ResourceType>,
}

impl Default for Registry {
    fn default() -> Self {
        let mut types = BTreeMap::new();
        for b in BUILT_INS {
            let rt = built_in_type(b);
            types.insert(
                (rt.group.clone(), rt.version.clone(), rt.plural.clone()),
                rt,
            );
        }
        Registry { types }
    }
}

/// Why a CustomResourceDefinition cannot be registered.
#[derive(Debug, thiserror::Error)]
#[error("invalid CustomResourceDefinition: {0}")]
pub struct CrdError(pub String);

impl Registry {
    /// Find a type by group, version and plural.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.types
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
    }

    /// Find the type of an `apiVersion` + `kind` pair.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<&ResourceType> {
        self.types
            .values()
            .find(|rt| rt.api_version() == api_version && rt.kind == kind)
    }

    /// Find any served version of a storage key.
    pub fn by_key(&self, key: &TypeKey) -> Option<&ResourceType> {
        self.types
            .values()
            .find(|rt| rt.group == key.group && rt.plural == key.plural)
    }

    /// All types, sorted by group, version, plural.
    pub fn all(&self) -> impl Iterator<Item = &ResourceType> {
        self.types.values()
    }

    /// Group versions served, core (`""`, `v1`) first.
    pub fn group_versions(&self) -> Vec<(String, String)> {
        let mut gvs: Vec<(String, String)> = Vec::new();
        for rt in self.types.values() {
            let gv = (rt.group.clone(), rt.version.clone());
            if !gvs.contains(&gv) {
                gvs.push(gv);
            }
        }
        gvs
    }

    /// Register (or re-register) the types a CustomResourceDefinition declares; returns them.
    pub fn register_crd(&mut self, crd: &Value) -> Result<Vec<ResourceType>, CrdError> {
        let name = str_at(crd, &["metadata", "name"]).unwrap_or_default();
        let spec = crd
            .get("spec")
            .ok_or_else(|| CrdError("spec is required".into()))?;
        let group =
            str_at(spec, &["group"]).ok_or_else(|| CrdError("spec.group is required".into()))?;
        let names = spec
            .get("names")
            .ok_or_else(|| CrdError("spec.names is required".into()))?;
        let plural = str_at(names, &["plural"])
            .ok_or_else(|| CrdError("spec.names.plural is required".into()))?;
        let kind = str_at(names, &["kind"])
            .ok_or_else(|| CrdError("spec.names.kind is required".into()))?;
        if name != format!("{plural}.{group}") {
            return Err(CrdError(format!(
                "metadata.name must be spec.names.plural+\".\"+spec.group ({plural}.{group})"
            )));
        }
        let singular = str_at(names, &["singular"]).unwrap_or_else(|| kind.to_ascii_lowercase());
        let namespaced = str_at(spec, &["scope"]).as_deref() != Some("Cluster");
        let strings = |v: Option<&Value>| -> Vec<String> {
            v.and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        let versions = spec
            .get("versions")
            .and_then(Value::as_array)
            .ok_or_else(|| CrdError("spec.versions is required".into()))?;
        self.unregister_crd(&name);
        let mut registered = Vec::new();
        for v in versions {
            if v.get("served").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            let version = str_at(v, &["name"])
                .ok_or_else(|| CrdError("spec.versions[].name is required".into()))?;
            let subresources = v.get("subresources");
            let scale = subresources
                .and_then(|s| s.get("scale"))
                .map(|s| ScalePaths {
                    spec_replicas: path_of(s, "specReplicasPath"),
                    status_replicas: path_of(s, "statusReplicasPath"),
                    label_selector: str_at(s, &["labelSelectorPath"])
                        .map(|p| p.trim_start_matches('.').to_string()),
                });
            let printer_columns = v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .map(|cols| cols.iter().map(PrinterColumn::from_crd).collect())
                .unwrap_or_default();
            let rt = ResourceType {
                group: group.clone(),
                version,
                kind: kind.clone(),
                plural: plural.clone(),
                singular: singular.clone(),
                namespaced,
                short_names: strings(names.get("shortNames")),
                categories: strings(names.get("categories")),
                status_subresource: subresources.and_then(|s| s.get("status")).is_some(),
                scale,
                printer_columns: Some(printer_columns),
                crd: Some(name.clone()),
                schema: v
                    .pointer("/schema/openAPIV3Schema")
                    .cloned()
                    .map(std::sync::Arc::new),
            };
            self.types.insert(
                (rt.group.clone(), rt.version.clone(), rt.plural.clone()),
                rt.clone(),
            );
            registered.push(rt);
        }
        Ok(registered)
    }

    /// Remove the types a CRD registered.
    pub fn unregister_crd(&mut self, crd_name: &str) {
        self.types
            .retain(|_, rt| rt.crd.as_deref() != Some(crd_name));
    }
}

fn path_of(v: &Value, field: &str) -> String {
    str_at(v, &[field])
        .unwrap_or_default()
        .trim_start_matches('.')
        .to_string()
}

/// The string at a path of object keys, if present.
pub fn str_at(v: &Value, path: &[&str]) -> Option<String> {
    at(v, path)?.as_str().map(String::from)
}

/// The value at a path of object keys (`["metadata", "uid"]`), if present. Unlike
/// `Value::pointer` it allocates nothing, which matters in the actors' passes over every object.
pub fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, p| cur.get(p))
}

/// The string at a path of object keys, borrowed (see [`at`]).
pub fn str_ref_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path)?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn built_ins_include_pods_with_subresources() {
        let r = Registry::default();
        let pods = r.get("", "v1", "pods").expect("pods served");
        assert_eq!(pods.subresources(), vec!["status", "binding", "eviction"]);
        assert_eq!(
            r.by_kind("apps/v1", "Deployment")
                .map(|d| d.plural.as_str()),
            Some("deployments")
        );
    }

    #[test]
    fn crd_registers_and_unregisters() {
        let mut r = Registry::default();
        let crd = json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Cluster",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"}},
                    "additionalPrinterColumns": [{"name": "Size", "type": "string", "jsonPath": ".spec.size"}]}]}
        });
        let types = r.register_crd(&crd).expect("valid CRD");
        assert_eq!(types.len(), 1);
        let w = r.get("example.com", "v1", "widgets").expect("registered");
        assert!(!w.namespaced && w.status_subresource);
        assert_eq!(
            w.scale.as_ref().map(|s| s.status_replicas.as_str()),
            Some("status.nodes")
        );
        r.unregister_crd("widgets.example.com");
        assert!(r.get("example.com", "v1", "widgets").is_none());
    }

    #[test]
    fn crd_name_must_match_plural_and_group() {
        let mut r = Registry::default();
        let crd = json!({"metadata": {"name": "wrong"}, "spec": {"group": "example.com",
            "names": {"plural": "widgets", "kind": "Widget"}, "versions": []}});
        assert!(r.register_crd(&crd).is_err());
    }
}
