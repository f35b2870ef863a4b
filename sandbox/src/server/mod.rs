//! The HTTP face of the sandbox: kube-apiserver's REST paths on 127.0.0.1, answered from the
//! in-memory store (discovery, OpenAPI v3, CRUD, watch, Tables, subresources), over TLS, to
//! clients that present the sandbox's bearer token. A request is authenticated from its
//! headers before its body is read; connections and bodies are held to [`Limits`].

mod authn;
mod conn;
mod discovery;
mod params;
mod protobuf;
mod resources;
pub(crate) mod schemas;
mod subresources;
pub mod tls;
mod watch;

pub use authn::BearerToken;
pub use conn::Limits;
pub use discovery::KUBERNETES_VERSION;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;
use tokio::net::TcpListener;

use crate::audit::{AuditEntry, AuditLog, RequestAttributes};
use crate::error::{ApiError, ApiResult, Reason};
use crate::faults::{Fault, Faults, RequestInfo};
use crate::registry::ResourceType;
use crate::store::Store;
use authn::Identity;
use conn::Connection;

/// A parsed API request.
pub(crate) struct Request {
    pub method: Method,
    pub query: HashMap<String, String>,
    pub accept: String,
    pub content_type: String,
    pub body: Bytes,
    /// A watch on this request breaks off after this long (an injected fault).
    pub drop_watch_after: Option<Duration>,
    /// How long a read at a resourceVersion the store has not reached waits for it
    /// ([`Limits::resource_version_wait`]).
    pub resource_version_wait: Duration,
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

    /// The body as JSON (YAML is accepted too, as for server-side apply, and Kubernetes'
    /// protobuf for the kinds [`protobuf::decode`] reads).
    pub fn json_body(&self) -> ApiResult<Value> {
        if self.body.is_empty() {
            return Ok(Value::Null);
        }
        if protobuf::is_protobuf(&self.content_type) {
            return protobuf::decode(&self.body);
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
    faults: Arc<Faults>,
    token: BearerToken,
    limits: Arc<Limits>,
}

/// Bind to `addr` (use port 0 for any free port) and serve https with `cert` until the task is
/// dropped, to requests carrying `token` (see [`BearerToken`]; anonymous ones reach only
/// `/healthz`, `/livez`, `/readyz` and `/version`); writes are recorded in `audit`. Returns the
/// bound address and the serving task.
///
/// Errors: `addr` cannot be bound, or rustls refuses `cert`.
pub async fn serve(
    store: Arc<Store>,
    audit: Arc<AuditLog>,
    token: BearerToken,
    cert: &tls::ServingCert,
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    serve_with_faults(store, audit, Arc::new(Faults::default()), token, cert, addr).await
}

/// [`serve`] with a fault injector the caller keeps, to turn API faults on and off while the
/// server runs (see [`crate::faults`]).
///
/// Errors: as [`serve`].
pub async fn serve_with_faults(
    store: Arc<Store>,
    audit: Arc<AuditLog>,
    faults: Arc<Faults>,
    token: BearerToken,
    cert: &tls::ServingCert,
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    serve_with_limits(store, audit, faults, token, cert, addr, Limits::default()).await
}

/// [`serve_with_faults`] holding clients to `limits` instead of [`Limits::default`] (tests
/// shorten the timeouts). Aborting the returned task closes every connection.
///
/// Errors: as [`serve`].
pub async fn serve_with_limits(
    store: Arc<Store>,
    audit: Arc<AuditLog>,
    faults: Arc<Faults>,
    token: BearerToken,
    cert: &tls::ServingCert,
    addr: SocketAddr,
    limits: Limits,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let acceptor = cert.acceptor().map_err(std::io::Error::other)?;
    let tcp = TcpListener::bind(addr).await?;
    let local = tcp.local_addr()?;
    let app = Router::new().fallback(dispatch).with_state(ServerState {
        store,
        audit,
        faults,
        token,
        limits: Arc::new(limits.clone()),
    });
    let task = tokio::spawn(conn::accept_loop(tcp, acceptor, app, limits));
    Ok((local, task))
}

/// A response after which the connection is closed (`Connection: close`): the answers to
/// requests that did not authenticate, and to requests whose body was not read to its end.
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// An authenticated request's body, read only now: at most [`Limits::max_body_bytes`] (a
/// longer one, by its `Content-Length` or as it arrives, is refused without reading the rest)
/// within [`Limits::body_read_timeout`].
///
/// Errors: 413 `RequestEntityTooLarge`, 504 `Timeout`, or 400 when the client broke the body
/// off (a malformed chunked encoding, a connection closed early).
async fn read_body(headers: &HeaderMap, body: Body, limits: &Limits) -> ApiResult<Bytes> {
    let max = limits.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(ApiError::request_entity_too_large(max));
    }
    let read = async {
        let mut chunks = body.into_data_stream();
        let mut buf = bytes::BytesMut::new();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk
                .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?;
            if buf.len() + chunk.len() > max {
                return Err(ApiError::request_entity_too_large(max));
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf.freeze())
    };
    tokio::time::timeout(limits.body_read_timeout, read)
        .await
        .unwrap_or_else(|_| {
            Err(ApiError::new(
                Reason::Timeout,
                format!(
                    "Timeout: request did not complete within the allotted timeout: its body \
                     did not arrive within {}s",
                    limits.body_read_timeout.as_secs_f64()
                ),
            ))
        })
}

async fn dispatch(
    State(ServerState {
        store,
        audit,
        faults,
        token,
        limits,
    }): State<ServerState>,
    request: axum::extract::Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let (method, uri, headers) = (parts.method, parts.uri, parts.headers);
    let path = uri.path().trim_end_matches('/');
    // Authentication reads the headers only: the body of a request that does not carry the
    // token is never read, and its connection is closed after the answer.
    let identity = Identity::of(
        headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()),
        &token,
    );
    if !identity.may_access(path) {
        if identity == Identity::InvalidToken {
            // kube-apiserver logs these too ("Unable to authenticate the request").
            tracing::warn!(%method, path, "refused a request with an invalid bearer token");
        }
        return closing(error_response(&ApiError::new(
            Reason::Unauthorized,
            "Unauthorized",
        )));
    }
    let authenticated = identity == Identity::Authenticated;
    if authenticated && let Some(connection) = parts.extensions.get::<Arc<Connection>>() {
        connection.authenticated();
    }
    // Anonymous requests reach only health and version, which take no body.
    let body = if authenticated {
        match read_body(&headers, body, &limits).await {
            Ok(body) => body,
            Err(e) => return closing(error_response(&e)),
        }
    } else {
        Bytes::new()
    };
    let header = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let mut req = Request {
        method,
        query: uri
            .query()
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default(),
        accept: header(header::ACCEPT),
        content_type: header(header::CONTENT_TYPE),
        body,
        drop_watch_after: None,
        resource_version_wait: limits.resource_version_wait,
    };
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    tracing::trace!(method = %req.method, path, "request");
    let fault = faults.decide(&RequestInfo {
        method: req.method.as_str(),
        path,
        watch: req.flag("watch"),
        resource_version: req.param("resourceVersion").filter(|rv| !rv.is_empty()),
        user_agent: &header(header::USER_AGENT),
    });
    let response = respond(&store, &segments, &mut req, fault).await;
    let user_agent = header(header::USER_AGENT);
    let attributes = RequestAttributes::from_request(req.method.as_str(), path, &req.query);
    audit.record_access(&user_agent, attributes.clone());
    if !matches!(req.method, Method::GET | Method::HEAD | Method::OPTIONS) {
        let mut attributes = attributes;
        if let (RequestAttributes::Resource(r), Some(created)) = (
            &mut attributes,
            response.extensions().get::<crate::audit::CreatedName>(),
        ) && r.name.is_none()
        {
            r.name = Some(created.0.clone());
        }
        audit.record(AuditEntry {
            method: req.method.to_string(),
            path: path.to_string(),
            user_agent,
            status: response.status().as_u16(),
            attributes,
        });
    }
    if authenticated {
        response
    } else {
        closing(response)
    }
}

/// Answer a request: route it, unless an injected fault answers instead (see [`crate::faults`]).
async fn respond(
    store: &Arc<Store>,
    seg: &[&str],
    req: &mut Request,
    fault: Option<Fault>,
) -> Response {
    if let Some(fault) = &fault {
        tracing::debug!(method = %req.method, path = %seg.join("/"), fault = ?fault, "injecting API fault");
        if let Some(resp) = inject(fault, req, seg).await {
            return resp;
        }
    }
    let response = match route(store, seg, req).await {
        Ok(resp) => resp,
        Err(e) => error_response(&e),
    };
    if fault == Some(Fault::LostResponse) && response.status().is_success() {
        // kube-apiserver's answer when storage did not confirm in time (the write may stand).
        return json_response(
            StatusCode::GATEWAY_TIMEOUT,
            &serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Timeout: request did not complete within requested timeout - context deadline exceeded (injected fault)",
                "reason": "Timeout", "details": {}, "code": 504,
            }),
        );
    }
    response
}

/// Carry out an injected fault before routing: the response that replaces the real one, or
/// `None` to handle the request (after a delay, with its watch set to break off, or to be
/// answered with a timeout afterwards).
async fn inject(fault: &Fault, req: &mut Request, seg: &[&str]) -> Option<Response> {
    let error = match fault {
        Fault::LostResponse => return None,
        Fault::Slow(delay) => {
            tokio::time::sleep(*delay).await;
            return None;
        }
        Fault::DropWatch(after) => {
            req.drop_watch_after = Some(*after);
            return None;
        }
        Fault::Conflict => {
            let (resource, name) = resource_and_name(seg);
            ApiError::conflict(&resource, &name)
        }
        Fault::TooManyRequests => ApiError {
            reason: Reason::TooManyRequests,
            message:
                "the server has received too many requests and has asked us to try again later"
                    .into(),
            details: Some(serde_json::json!({"retryAfterSeconds": 1})),
        },
        Fault::InternalError => ApiError::new(
            Reason::InternalError,
            "Internal error occurred: injected fault",
        ),
        Fault::Expired(rv) => {
            let e = ApiError::new(
                Reason::Expired,
                format!("too old resource version: {rv} (injected fault)"),
            );
            // A watch reports it as an ERROR event on a 200 stream, a list as a 410 response.
            return Some(if req.flag("watch") {
                watch::error_event(&e)
            } else {
                error_response(&e)
            });
        }
    };
    Some(error_response(&error))
}

/// The qualified resource (`nodeclaims.karpenter.sh`) and object name a path names, for error
/// messages.
fn resource_and_name(seg: &[&str]) -> (String, String) {
    let (group, rest) = match seg {
        ["api", _, rest @ ..] => ("", rest),
        ["apis", group, _, rest @ ..] => (*group, rest),
        _ => ("", seg),
    };
    let rest = match rest {
        // `/api/v1/namespaces/NAME/status` names a Namespace, not a namespaced resource.
        ["namespaces", _, sub] if group.is_empty() && matches!(*sub, "status" | "finalize") => {
            rest[..2].to_vec()
        }
        ["namespaces", _, plural, more @ ..] => {
            let mut v = vec![*plural];
            v.extend_from_slice(more);
            v
        }
        other => other.to_vec(),
    };
    let plural = rest.first().copied().unwrap_or_default();
    let name = rest.get(1).copied().unwrap_or_default().to_string();
    let resource = if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    };
    (resource, name)
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
    bytes_response(code, serde_json::to_vec(body).unwrap_or_default())
}

/// A response whose body is JSON already serialized.
pub(crate) fn bytes_response(code: StatusCode, bytes: Vec<u8>) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(bytes))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// A failed request as a Status body, with a `Retry-After` header when the Status says when
/// to retry (`details.retryAfterSeconds`), as k8s.io/apiserver's `ErrorNegotiated` sets it.
pub(crate) fn error_response(e: &ApiError) -> Response {
    let code = StatusCode::from_u16(e.reason.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json_response(code, &e.status());
    if let Some(seconds) = e
        .details
        .as_ref()
        .and_then(|d| d.get("retryAfterSeconds"))
        .and_then(serde_json::Value::as_u64)
        .filter(|s| *s > 0)
    {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::{ApiError, error_response, header, resource_and_name};

    #[test]
    fn errors_that_say_when_to_retry_carry_retry_after() {
        let too_large = error_response(&ApiError::too_large_resource_version(9, 3, 1));
        assert_eq!(too_large.status().as_u16(), 504);
        assert_eq!(
            too_large.headers().get(header::RETRY_AFTER),
            Some(&header::HeaderValue::from_static("1"))
        );
        let entity = error_response(&ApiError::request_entity_too_large(10));
        assert_eq!(entity.status().as_u16(), 413);
        assert_eq!(entity.headers().get(header::RETRY_AFTER), None);
        assert_eq!(
            entity.headers().get(header::CONTENT_TYPE),
            Some(&header::HeaderValue::from_static("application/json"))
        );
    }

    #[test]
    fn injected_conflicts_name_the_resource_and_object_of_the_path() {
        let split = |p: &'static str| p.split('/').filter(|s| !s.is_empty()).collect::<Vec<_>>();
        let cases = [
            ("/api/v1/namespaces/default/pods/a", ("pods", "a")),
            ("/api/v1/nodes/n1/status", ("nodes", "n1")),
            (
                "/api/v1/namespaces/kube-system/status",
                ("namespaces", "kube-system"),
            ),
            (
                "/apis/karpenter.sh/v1/nodeclaims/c1/status",
                ("nodeclaims.karpenter.sh", "c1"),
            ),
            (
                "/apis/apps/v1/namespaces/default/deployments/web/scale",
                ("deployments.apps", "web"),
            ),
        ];
        for (path, (resource, name)) in cases {
            assert_eq!(
                resource_and_name(&split(path)),
                (resource.to_string(), name.to_string()),
                "{path}"
            );
        }
    }
}
