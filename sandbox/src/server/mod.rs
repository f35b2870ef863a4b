//! The HTTP face of the sandbox: kube-apiserver's REST paths on 127.0.0.1, answered from the
//! in-memory store (discovery, OpenAPI v3, CRUD, watch, Tables, subresources).

mod discovery;
mod resources;
mod subresources;
mod watch;

pub use discovery::KUBERNETES_VERSION;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::net::TcpListener;

use crate::audit::{AuditEntry, AuditLog};
use crate::error::{ApiError, ApiResult, Reason};
use crate::registry::ResourceType;
use crate::store::Store;

/// A parsed API request.
pub(crate) struct Request {
    pub method: Method,
    pub query: HashMap<String, String>,
    pub accept: String,
    pub content_type: String,
    pub body: Bytes,
}

impl Request {
    /// A query parameter, if present.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.get(name).map(String::as_str)
    }

    /// A boolean query parameter (`true` or `1`).
    pub fn flag(&self, name: &str) -> bool {
        matches!(self.param(name), Some("true" | "1"))
    }

    /// Whether the client asked for strict field validation (`fieldValidation=Strict`, kubectl's
    /// default), which turns unknown fields of custom resources into errors.
    pub fn strict(&self) -> bool {
        self.param("fieldValidation") == Some("Strict")
    }

    /// Whether the client asked for a server-side Table.
    pub fn wants_table(&self) -> bool {
        self.accept.contains("as=Table")
    }

    /// The body as JSON (YAML is accepted too, as for server-side apply).
    pub fn json_body(&self) -> ApiResult<Value> {
        if self.body.is_empty() {
            return Ok(Value::Null);
        }
        match serde_json::from_slice(&self.body) {
            Ok(v) => Ok(v),
            Err(json_err) if self.content_type.contains("yaml") => {
                let text = std::str::from_utf8(&self.body)
                    .map_err(|e| ApiError::bad_request(format!("body is not UTF-8: {e}")))?;
                serde_saphyr::from_str(text).map_err(|e| {
                    ApiError::bad_request(format!("invalid YAML body: {e} ({json_err})"))
                })
            }
            Err(e) => Err(ApiError::bad_request(format!("invalid JSON body: {e}"))),
        }
    }
}

/// Where a resource request points.
pub(crate) struct Target {
    pub rt: ResourceType,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

#[derive(Clone)]
struct ServerState {
    store: Arc<Store>,
    audit: Arc<AuditLog>,
}

/// Bind to `addr` (use port 0 for any free port) and serve until the task is dropped; writes are
/// recorded in `audit`. Returns the bound address and the serving task.
pub async fn serve(
    store: Arc<Store>,
    audit: Arc<AuditLog>,
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let app = Router::new()
        .fallback(dispatch)
        .with_state(ServerState { store, audit });
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "sandbox API server stopped");
        }
    });
    Ok((local, task))
}

async fn dispatch(
    State(ServerState { store, audit }): State<ServerState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let req = Request {
        method,
        query: uri
            .query()
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default(),
        accept: header(header::ACCEPT),
        content_type: header(header::CONTENT_TYPE),
        body,
    };
    let path = uri.path().trim_end_matches('/');
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    tracing::trace!(method = %req.method, path, "request");
    let response = match route(&store, &segments, &req).await {
        Ok(resp) => resp,
        Err(e) => error_response(&e),
    };
    if !matches!(req.method, Method::GET | Method::HEAD | Method::OPTIONS) {
        audit.record(AuditEntry {
            method: req.method.to_string(),
            path: path.to_string(),
            user_agent: header(header::USER_AGENT),
            status: response.status().as_u16(),
        });
    }
    response
}

async fn route(store: &Arc<Store>, seg: &[&str], req: &Request) -> ApiResult<Response> {
    match seg {
        ["version"] => Ok(json_response(StatusCode::OK, &discovery::version())),
        ["healthz" | "readyz" | "livez", ..] => Ok((StatusCode::OK, "ok").into_response()),
        ["api"] => Ok(json_response(StatusCode::OK, &discovery::core_versions())),
        ["apis"] => Ok(json_response(StatusCode::OK, &discovery::groups(store))),
        ["openapi", "v3"] => Ok(json_response(
            StatusCode::OK,
            &discovery::openapi_root(store),
        )),
        ["openapi", "v3", "api", version] => discovery::openapi_group_version(store, "", version)
            .map(|v| json_response(StatusCode::OK, &v)),
        ["openapi", "v3", "apis", group, version] => {
            discovery::openapi_group_version(store, group, version)
                .map(|v| json_response(StatusCode::OK, &v))
        }
        ["openapi", ..] => Err(ApiError::new(
            Reason::NotFound,
            "the server could not find the requested resource",
        )),
        ["api", version, rest @ ..] => resource_request(store, "", version, rest, req).await,
        ["apis", group] => {
            discovery::group(store, group).map(|v| json_response(StatusCode::OK, &v))
        }
        ["apis", group, version, rest @ ..] => {
            resource_request(store, group, version, rest, req).await
        }
        _ => Err(ApiError::new(
            Reason::NotFound,
            "the server could not find the requested resource",
        )),
    }
}

async fn resource_request(
    store: &Arc<Store>,
    group: &str,
    version: &str,
    rest: &[&str],
    req: &Request,
) -> ApiResult<Response> {
    if rest.is_empty() {
        return discovery::resource_list(store, group, version)
            .map(|v| json_response(StatusCode::OK, &v));
    }
    let not_found = || {
        ApiError::new(
            Reason::NotFound,
            "the server could not find the requested resource",
        )
    };
    let namespaced_path = rest[0] == "namespaces"
        && rest.len() >= 3
        && !(group.is_empty() && matches!(rest[2], "status" | "finalize"));
    let (namespace, plural, name, sub) = if namespaced_path {
        (
            Some(rest[1]),
            rest[2],
            rest.get(3).copied(),
            rest.get(4).copied(),
        )
    } else {
        (None, rest[0], rest.get(1).copied(), rest.get(2).copied())
    };
    if rest.len() > if namespaced_path { 5 } else { 3 } {
        return Err(not_found());
    }
    let rt = store
        .resource(group, version, plural)
        .ok_or_else(not_found)?;
    if namespace.is_some() && !rt.namespaced {
        return Err(not_found());
    }
    let target = Target {
        rt,
        namespace: namespace.map(String::from),
        name: name.map(String::from),
        subresource: sub.map(String::from),
    };
    match target.subresource.as_deref() {
        None => resources::handle(store, &target, req).await,
        Some(s) => subresources::handle(store, &target, s, req),
    }
}

/// A JSON response with the given status.
pub(crate) fn json_response(code: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(bytes))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// A failed request as a Status body.
pub(crate) fn error_response(e: &ApiError) -> Response {
    let code = StatusCode::from_u16(e.reason.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(code, &e.status())
}
