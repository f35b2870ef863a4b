//! Subresource paths: `/status`, `/scale` (autoscaling/v1 Scale over the object's replica
//! paths), `pods/binding` and `pods/eviction`.

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::Selector;
use serde_json::{Value, json};

use super::{Request, Target, json_response, resources};
use crate::error::{ApiError, ApiResult, Reason};
use crate::patch::{PatchType, apply_patch};
use crate::pods;
use crate::registry::{ResourceType, ScalePaths};
use crate::store::{DeleteOptions, Store, Subresource};

pub(crate) fn handle(
    store: &Arc<Store>,
    t: &Target,
    sub: &str,
    req: &Request,
) -> ApiResult<Response> {
    let ns = t.namespace.as_deref().unwrap_or("");
    let name = t.name.as_deref().ok_or_else(|| {
        ApiError::new(
            Reason::NotFound,
            "the server could not find the requested resource",
        )
    })?;
    let not_allowed = || {
        ApiError::new(
            Reason::MethodNotAllowed,
            format!(
                "the server does not allow this method on the requested resource ({}/{sub})",
                t.rt.qualified()
            ),
        )
    };
    let is_pods = t.rt.group.is_empty() && t.rt.plural == "pods";
    match sub {
        "status" if t.rt.status_subresource => match req.method {
            Method::GET => Ok(json_response(StatusCode::OK, &*store.get(&t.rt, ns, name)?)),
            Method::PUT => {
                let updated =
                    store.update(&t.rt, ns, name, req.json_body()?, Subresource::Status)?;
                Ok(json_response(StatusCode::OK, &updated))
            }
            Method::PATCH => {
                let patched = resources::patch(store, &t.rt, ns, name, req, Subresource::Status)?;
                Ok(json_response(StatusCode::OK, &patched))
            }
            _ => Err(not_allowed()),
        },
        "scale" => {
            let paths = t.rt.scale.as_ref().ok_or_else(not_allowed)?;
            scale(store, &t.rt, paths, ns, name, req)
        }
        "binding" if is_pods && req.method == Method::POST => {
            let body = req.json_body()?;
            let node = body
                .pointer("/target/name")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ApiError::invalid("Binding", name, "target.name", "Required value")
                })?;
            pods::bind(store, ns, name, node)?;
            Ok(json_response(StatusCode::CREATED, &success()))
        }
        "eviction" if is_pods && req.method == Method::POST => {
            let body = req.json_body()?;
            let opts = DeleteOptions {
                uid: body
                    .pointer("/deleteOptions/preconditions/uid")
                    .and_then(Value::as_str)
                    .map(String::from),
                resource_version: body
                    .pointer("/deleteOptions/preconditions/resourceVersion")
                    .and_then(Value::as_str)
                    .map(String::from),
                orphan: false,
            };
            pods::evict(store, ns, name, &opts)?;
            Ok(json_response(StatusCode::CREATED, &success()))
        }
        _ => Err(not_allowed()),
    }
}

fn success() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

fn read_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(obj, |cur, seg| cur.get(seg))
}

/// The `autoscaling/v1 Scale` view of an object.
fn scale_view(rt: &ResourceType, paths: &ScalePaths, obj: &Value) -> Value {
    let replicas = |p: &str| read_path(obj, p).and_then(Value::as_i64).unwrap_or(0);
    let selector = if rt.crd.is_some() {
        paths
            .label_selector
            .as_deref()
            .and_then(|p| read_path(obj, p))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    } else {
        obj.pointer("/spec/selector")
            .and_then(|s| serde_json::from_value::<LabelSelector>(s.clone()).ok())
            .and_then(|ls| Selector::try_from(ls).ok())
            .map(|s| s.to_string())
            .unwrap_or_default()
    };
    let meta = &obj["metadata"];
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"]},
        "spec": {"replicas": replicas(&paths.spec_replicas)},
        "status": {"replicas": replicas(&paths.status_replicas), "selector": selector},
    })
}

fn scale(
    store: &Store,
    rt: &ResourceType,
    paths: &ScalePaths,
    ns: &str,
    name: &str,
    req: &Request,
) -> ApiResult<Response> {
    let current = store.get(rt, ns, name)?;
    let view = scale_view(rt, paths, &current);
    let desired = match req.method {
        Method::GET => return Ok(json_response(StatusCode::OK, &view)),
        Method::PUT => req.json_body()?,
        Method::PATCH => {
            let patch_type = PatchType::from_content_type(&req.content_type).ok_or_else(|| {
                ApiError::new(Reason::UnsupportedMediaType, "unsupported patch type")
            })?;
            apply_patch(patch_type, "autoscaling", "Scale", &view, &req.json_body()?)
                .map_err(|e| ApiError::new(Reason::Invalid, e.to_string()))?
        }
        _ => {
            return Err(ApiError::new(
                Reason::MethodNotAllowed,
                "method not allowed on scale",
            ));
        }
    };
    let replicas = desired
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .filter(|r| *r >= 0)
        .ok_or_else(|| {
            ApiError::invalid(
                "Scale",
                name,
                "spec.replicas",
                "must be a non-negative integer",
            )
        })?;
    let updated = store.modify(rt, ns, name, Subresource::Main, |obj| {
        let mut cur = obj;
        let segs: Vec<&str> = paths.spec_replicas.split('.').collect();
        for (i, seg) in segs.iter().enumerate() {
            if i + 1 == segs.len() {
                cur[*seg] = json!(replicas);
            } else {
                cur = &mut cur[*seg];
            }
        }
        Ok(())
    })?;
    Ok(json_response(
        StatusCode::OK,
        &scale_view(rt, paths, &updated),
    ))
}
