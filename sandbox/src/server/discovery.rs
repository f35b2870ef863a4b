//! Discovery and OpenAPI v3 documents: what kubectl asks before any command (`/version`, `/api`,
//! `/apis`, `APIResourceList`s) and what `kubectl apply` needs to use server-side field
//! validation (a `patch` operation per kind carrying `x-kubernetes-group-version-kind`).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Reason};
use crate::registry::ResourceType;
use crate::store::Store;

/// The Kubernetes version the sandbox reports (kubectl v1.32 is within its skew policy).
pub const KUBERNETES_VERSION: &str = "v1.32.0";

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `GET /version`.
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "32", "gitVersion": format!("{KUBERNETES_VERSION}-karpenter-sandbox"),
        "gitCommit": "", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "none (Rust sandbox)", "compiler": "rustc", "platform": "linux/amd64",
    })
}

/// `GET /api`.
pub fn core_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
}

fn api_group(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

fn versions_by_group(store: &Store) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for (g, v) in store.registry().group_versions() {
        if g.is_empty() {
            continue;
        }
        match groups.iter_mut().find(|(name, _)| *name == g) {
            Some((_, vs)) => vs.push(v),
            None => groups.push((g, vec![v])),
        }
    }
    groups
}

/// `GET /apis`: every non-core group.
pub fn groups(store: &Store) -> Value {
    let groups: Vec<Value> = versions_by_group(store)
        .iter()
        .map(|(g, vs)| api_group(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/<group>`. Errors: 404 for an unknown group.
pub fn group(store: &Store, name: &str) -> ApiResult<Value> {
    let groups = versions_by_group(store);
    let (g, vs) = groups.iter().find(|(g, _)| g == name).ok_or_else(|| {
        ApiError::new(
            Reason::NotFound,
            "the server could not find the requested resource",
        )
    })?;
    let mut doc = api_group(g, vs);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Ok(doc)
}

fn served(store: &Store, group: &str, version: &str) -> Vec<ResourceType> {
    store
        .registry()
        .all()
        .filter(|rt| rt.group == group && rt.version == version)
        .cloned()
        .collect()
}

/// `GET /api/v1` or `/apis/<group>/<version>`: an `APIResourceList` including subresources.
pub fn resource_list(store: &Store, group: &str, version: &str) -> ApiResult<Value> {
    let types = served(store, group, version);
    if types.is_empty() {
        return Err(ApiError::new(
            Reason::NotFound,
            "the server could not find the requested resource",
        ));
    }
    let mut resources = Vec::new();
    for rt in &types {
        let mut r = json!({
            "name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced,
            "kind": rt.kind, "verbs": VERBS,
        });
        if !rt.short_names.is_empty() {
            r["shortNames"] = json!(rt.short_names);
        }
        if !rt.categories.is_empty() {
            r["categories"] = json!(rt.categories);
        }
        resources.push(r);
        for sub in rt.subresources() {
            let (kind, grp, ver, verbs): (&str, &str, &str, &[&str]) = match sub {
                "scale" => ("Scale", "autoscaling", "v1", &["get", "patch", "update"]),
                "binding" => ("Binding", "", "v1", &["create"]),
                "eviction" => ("Eviction", "policy", "v1", &["create"]),
                _ => (&rt.kind, "", "", &["get", "patch", "update"]),
            };
            let mut r = json!({"name": format!("{}/{sub}", rt.plural), "singularName": "",
                "namespaced": rt.namespaced, "kind": kind, "verbs": verbs});
            if !grp.is_empty() || sub == "scale" {
                r["group"] = json!(grp);
                r["version"] = json!(ver);
            }
            resources.push(r);
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Ok(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// The OpenAPI v3 document of one group version: one path per kind whose `patch` operation
/// declares its group-version-kind and the `fieldValidation` parameter.
/// Errors: 404 for an unknown group version.
pub fn openapi_group_version(store: &Store, group: &str, version: &str) -> ApiResult<Value> {
    let types = served(store, group, version);
    if types.is_empty() {
        return Err(ApiError::new(
            Reason::NotFound,
            "the server could not find the requested resource",
        ));
    }
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for rt in &types {
        for (name, schema) in super::schemas::for_kind(rt).iter() {
            schemas.insert(name.clone(), schema.clone());
        }
        let path = if rt.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", rt.plural)
        } else {
            format!("{prefix}/{}/{{name}}", rt.plural)
        };
        let gvk = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
        let params = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}},
        ]);
        // No `requestBody`: kubectl builds strategic merge patches from the OpenAPI v3 schema
        // only when the patch operation lists that content type, and these schemas lack the
        // patch-merge-key extensions it would need; it uses its compiled-in types instead.
        let op = |id: &str| {
            json!({
                "operationId": format!("{id}{}", rt.kind),
                "x-kubernetes-action": id,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "responses": {"200": {"description": "OK"}},
            })
        };
        paths.insert(
            path,
            json!({"get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete")}),
        );
    }
    Ok(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// `GET /openapi/v3`: the group versions with a content hash in each URL, so kubectl's cache
/// notices when a CRD changes a document.
pub fn openapi_root(store: &Arc<Store>) -> Value {
    let mut paths = serde_json::Map::new();
    for (group, version) in store.registry().group_versions() {
        let (key, url) = if group.is_empty() {
            (
                format!("api/{version}"),
                format!("/openapi/v3/api/{version}"),
            )
        } else {
            (
                format!("apis/{group}/{version}"),
                format!("/openapi/v3/apis/{group}/{version}"),
            )
        };
        // The document is a function of this binary and the served kinds (with their CRD
        // schemas): hash those rather than building every document on each request.
        let mut h = DefaultHasher::new();
        env!("CARGO_PKG_VERSION").hash(&mut h);
        for rt in served(store, &group, &version) {
            (&rt.kind, &rt.plural, rt.namespaced).hash(&mut h);
            if let Some(schema) = &rt.schema {
                schema.to_string().hash(&mut h);
            }
        }
        paths.insert(
            key,
            json!({"serverRelativeURL": format!("{url}?hash={:016X}", h.finish())}),
        );
    }
    json!({"paths": paths})
}
