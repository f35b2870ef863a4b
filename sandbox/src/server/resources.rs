//! The verbs on a resource path: get, list (or a server-side Table), watch, create, update,
//! patch, delete and deletecollection.

use std::str::FromStr;
use std::sync::Arc;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::params::{self, ReadOptions, VersionMatch, selectors};
use super::{Request, Target, json_response, watch};
use crate::error::{ApiError, ApiResult, Reason};
use crate::patch::PatchType;
use crate::registry::ResourceType;
use crate::store::{DeleteOptions, PageRequest, Store, Subresource};
use crate::table::{Columns, IncludeObject, render};

pub(crate) async fn handle(store: &Arc<Store>, t: &Target, req: &Request) -> ApiResult<Response> {
    if req.param("dryRun").is_some_and(|d| !d.is_empty()) {
        return Err(ApiError::bad_request(
            "the sandbox does not support dryRun=All; use --dry-run=client",
        ));
    }
    let ns = t.namespace.as_deref().unwrap_or("");
    match (&req.method, t.name.as_deref()) {
        (&Method::GET, Some(name)) => {
            // GetOptions carry only a resourceVersion: "not older than" it.
            let rv = params::parse_resource_version(req.param("resourceVersion").unwrap_or(""))?;
            if rv > 0 {
                params::wait_for(store, rv, req.resource_version_wait).await?;
            }
            let obj = store.get(&t.rt, ns, name)?;
            if req.wants_table() {
                return table(
                    &t.rt,
                    &[obj],
                    req,
                    json!({"resourceVersion": ""}),
                    store.now(),
                );
            }
            Ok(json_response(StatusCode::OK, &obj))
        }
        (&Method::GET, None) if req.flag("watch") => watch::handle(store, t, req).await,
        (&Method::GET, None) => list(store, t, req).await,
        (&Method::POST, None) => {
            let body = req.json_body()?;
            let created = store.create_with(&t.rt, ns, body, req.strict())?;
            let mut response = json_response(StatusCode::CREATED, &created);
            if let Some(name) = created["metadata"]["name"].as_str() {
                response
                    .extensions_mut()
                    .insert(crate::audit::CreatedName(name.to_owned()));
            }
            Ok(response)
        }
        (&Method::PUT, Some(name)) => {
            let body = req.json_body()?;
            let updated =
                store.update_with(&t.rt, ns, name, body, Subresource::Main, req.strict())?;
            Ok(json_response(StatusCode::OK, &updated))
        }
        (&Method::PATCH, Some(name)) => {
            let patched = patch(store, &t.rt, ns, name, req, Subresource::Main)?;
            Ok(json_response(StatusCode::OK, &patched))
        }
        (&Method::DELETE, Some(name)) => {
            let opts = delete_options(req)?;
            let last = store.delete(&t.rt, ns, name, &opts)?;
            Ok(json_response(StatusCode::OK, &deleted_body(&t.rt, &last)))
        }
        (&Method::DELETE, None) => {
            let opts = delete_options(req)?;
            let (labels, fields) = selectors(&t.rt, req)?;
            let listed = store.list(&t.rt, t.namespace.as_deref(), &labels, &fields);
            let mut items = Vec::new();
            for obj in listed.items {
                let ns = obj["metadata"]["namespace"].as_str().unwrap_or("");
                let name = obj["metadata"]["name"].as_str().unwrap_or("");
                match store.delete(&t.rt, ns, name, &opts) {
                    Ok(last) => items.push((*last).clone()),
                    Err(e) if e.reason == Reason::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(json_response(
                StatusCode::OK,
                &list_body(&t.rt, items, store.resource_version()),
            ))
        }
        _ => Err(ApiError::new(
            Reason::MethodNotAllowed,
            format!(
                "the server does not allow this method on the requested resource ({})",
                t.rt.qualified()
            ),
        )),
    }
}

/// Apply a PATCH request (Content-Type chooses the flavour) to the main resource or `/status`.
pub(crate) fn patch(
    store: &Store,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    req: &Request,
    sub: Subresource,
) -> ApiResult<Arc<Value>> {
    let patch_type = PatchType::from_content_type(&req.content_type).ok_or_else(|| {
        ApiError::new(
            Reason::UnsupportedMediaType,
            format!(
                "the body of the request was in an unknown format: {}",
                req.content_type
            ),
        )
    })?;
    let body = req.json_body()?;
    store.patch_with(rt, ns, name, patch_type, &body, sub, req.strict())
}

/// Where a paged list goes on: the resourceVersion of its first page and the last object
/// returned (namespace, name). Sent to the client as the opaque `metadata.continue` token
/// (base64url of this as JSON), as kube-apiserver's token carries its revision and start key.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Continue {
    rv: u64,
    ns: String,
    name: String,
}

impl Continue {
    fn encode(&self) -> String {
        use base64::Engine as _;
        let json = serde_json::to_vec(self).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    /// Errors: 400, worded as kube-apiserver words an unreadable token.
    fn decode(token: &str) -> ApiResult<Continue> {
        use base64::Engine as _;
        let invalid =
            |why: String| ApiError::bad_request(format!("continue key is not valid: {why}"));
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|e| invalid(e.to_string()))?;
        serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))
    }
}

/// `limit` as kube-apiserver reads it: absent, empty, zero or negative is no limit.
///
/// Errors: 400 when it is not an integer.
fn limit(req: &Request) -> ApiResult<Option<usize>> {
    match req.param("limit").filter(|l| !l.is_empty()) {
        None => Ok(None),
        Some(l) => {
            let n: i64 = l.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid value for limit: {l:?}: not an integer"))
            })?;
            Ok(usize::try_from(n).ok().filter(|n| *n > 0))
        }
    }
}

/// A list, paged when the client asks (`limit`, then `continue` with the token the previous
/// page returned: kubectl asks for 500 at a time, kube-rs reflectors too). The items are
/// serialized from the store's objects without copying them.
///
/// The state listed is the newest: with a `resourceVersion` (and `resourceVersionMatch`
/// unset or `NotOlderThan`) once the store has reached that version, which is waited for
/// ([`params::wait_for`]); with `resourceVersionMatch=Exact` only when the store is at exactly
/// that version. The store keeps no older states to list, as an etcd that compacted them.
///
/// Errors: 400 for bad parameters or selectors, 422 for forbidden combinations
/// ([`ReadOptions::of`]), 504 for a version not reached in time, 410 for an exact version the
/// store has passed or an expired `continue` token.
async fn list(store: &Arc<Store>, t: &Target, req: &Request) -> ApiResult<Response> {
    let opts = ReadOptions::of(req, false)?;
    let (labels, fields) = selectors(&t.rt, req)?;
    let token = req
        .param("continue")
        .filter(|c| !c.is_empty())
        .map(Continue::decode)
        .transpose()?;
    if token.is_some() && opts.minimum().is_some() {
        // k8s.io/apiserver `storage.ValidateListOptions`.
        return Err(ApiError::bad_request(
            "specifying resource version is not allowed when using continue",
        ));
    }
    if let Some(rv) = opts.minimum() {
        params::wait_for(store, rv, req.resource_version_wait).await?;
    }
    let page = store.list_page(
        &t.rt,
        t.namespace.as_deref(),
        &labels,
        &fields,
        &PageRequest {
            after: token.as_ref().map(|c| (c.ns.as_str(), c.name.as_str())),
            limit: limit(req)?,
            first_rv: token.as_ref().map(|c| c.rv),
        },
    )?;
    let rv = page.resource_version;
    if let (VersionMatch::Exact, Some(exact)) = (opts.version_match, opts.minimum())
        && rv != exact
    {
        // etcd3's answer for a compacted revision (k8s.io/apiserver `storage/etcd3`).
        return Err(ApiError::new(
            Reason::Expired,
            format!(
                "The resourceVersion for the provided list is too old: the sandbox lists only \
                 its current state (resourceVersion {rv}), not {exact}"
            ),
        ));
    }
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some((ns, name)) = page.next.clone() {
        meta["continue"] = json!(Continue { rv, ns, name }.encode());
        // kube-apiserver counts the rest only when no selector filters it.
        if req.param("labelSelector").unwrap_or("").is_empty()
            && req.param("fieldSelector").unwrap_or("").is_empty()
        {
            meta["remainingItemCount"] = json!(page.remaining);
        }
    }
    if req.wants_table() {
        return table(&t.rt, &page.decoded(), req, meta, store.now());
    }
    Ok(super::bytes_response(
        StatusCode::OK,
        spliced_list(&t.rt, &meta, &page.items),
    ))
}

/// A `<Kind>List` body with `items` spliced in as the store keeps them (each object's JSON as
/// encoded when it was written, `metadata.resourceVersion` included): the same bytes
/// serializing the decoded objects would give, without decoding or re-encoding them. At 20,400
/// pods (157 MB) decoding and re-encoding took most of a full list's time on the server.
fn spliced_list(rt: &ResourceType, meta: &Value, items: &[bytes::Bytes]) -> Vec<u8> {
    let head = json!({
        "kind": format!("{}List", rt.kind),
        "apiVersion": rt.api_version(),
        "metadata": meta,
    });
    let head = serde_json::to_vec(&head).unwrap_or_default();
    let size: usize = items.iter().map(|o| o.len() + 1).sum();
    let mut body = Vec::with_capacity(head.len() + size + 16);
    // `{...,"metadata":{...}}` becomes `{...,"metadata":{...},"items":[...]}`.
    body.extend_from_slice(head.strip_suffix(b"}").unwrap_or(b"{"));
    body.extend_from_slice(if head.len() > 2 {
        b",\"items\":["
    } else {
        b"\"items\":["
    });
    for (i, o) in items.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(o);
    }
    body.extend_from_slice(b"]}");
    body
}

/// A `<Kind>List` body.
pub(crate) fn list_body(rt: &ResourceType, items: Vec<Value>, rv: u64) -> Value {
    json!({
        "kind": format!("{}List", rt.kind),
        "apiVersion": rt.api_version(),
        "metadata": {"resourceVersion": rv.to_string()},
        "items": items,
    })
}

/// Render objects as a `meta.k8s.io/v1 Table` for kubectl, with ages as of `now` (the store's
/// clock).
pub(crate) fn table(
    rt: &ResourceType,
    objects: &[Arc<Value>],
    req: &Request,
    meta: Value,
    now: jiff::Timestamp,
) -> ApiResult<Response> {
    let body = table_value(rt, objects, req, meta, now)?;
    Ok(json_response(StatusCode::OK, &body))
}

/// The Table value for `objects`, with ages as of `now`.
pub(crate) fn table_value(
    rt: &ResourceType,
    objects: &[Arc<Value>],
    req: &Request,
    meta: Value,
    now: jiff::Timestamp,
) -> ApiResult<Value> {
    let include = IncludeObject::from_str(req.param("includeObject").unwrap_or(""))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let refs: Vec<&Value> = objects.iter().map(|o| o.as_ref()).collect();
    let columns = match &rt.printer_columns {
        Some(cols) => Columns::Custom(cols),
        None => Columns::BuiltIn {
            group: &rt.group,
            kind: &rt.kind,
        },
    };
    Ok(render(&columns, &refs, include, meta, now))
}

fn delete_options(req: &Request) -> ApiResult<DeleteOptions> {
    let body = req.json_body()?;
    let mut opts = DeleteOptions {
        uid: body
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(String::from),
        resource_version: body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(String::from),
        orphan: body.get("propagationPolicy").and_then(Value::as_str) == Some("Orphan")
            || body.get("orphanDependents").and_then(Value::as_bool) == Some(true),
    };
    if req.param("propagationPolicy") == Some("Orphan") {
        opts.orphan = true;
    }
    Ok(opts)
}

/// What DELETE answers: the object while it still exists (finalizers pending) or for pods;
/// otherwise a Success Status naming it, as kube-apiserver does.
fn deleted_body(rt: &ResourceType, last: &Value) -> Value {
    let still_there = last.pointer("/metadata/deletionTimestamp").is_some()
        && last
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
    if still_there || (rt.group.is_empty() && rt.kind == "Pod") {
        return last.clone();
    }
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": {"name": last["metadata"]["name"], "group": rt.group, "kind": rt.plural, "uid": last["metadata"]["uid"]},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    /// The spliced list is the JSON of the list with the decoded objects in it: same kind,
    /// apiVersion, metadata and items, in order; an empty list has `items: []`.
    #[test]
    fn a_spliced_list_is_the_list_of_its_objects() {
        let registry = Registry::default();
        let rt = registry.get("", "v1", "pods").expect("pods").clone();
        let objects = [
            json!({"metadata": {"name": "a", "resourceVersion": "7"}, "spec": {"x": [1, 2.5]}}),
            json!({"metadata": {"name": "b", "resourceVersion": "9"}}),
        ];
        let encoded: Vec<bytes::Bytes> = objects.iter().map(crate::store::encode).collect();
        let meta = json!({"resourceVersion": "9", "continue": "tok"});
        let body: Value =
            serde_json::from_slice(&spliced_list(&rt, &meta, &encoded)).expect("JSON");
        assert_eq!(
            body,
            json!({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": objects})
        );
        let empty: Value = serde_json::from_slice(&spliced_list(&rt, &meta, &[])).expect("JSON");
        assert_eq!(empty["items"], json!([]));
    }
}
