//! An audit log of what clients do over HTTP, so tests can prove who did what: every write
//! (method, path, user agent, status) in order, e.g. that the controller never creates a Node;
//! and, per user agent, the distinct requests as kube-apiserver's authorizer sees them (verb, API
//! group, resource and subresource, namespace, name), so a test can check a client's calls
//! against RBAC rules. In-process actors write to the store directly and do not appear here, as
//! kubelets are not API clients of the controller either.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::Mutex;

/// How many write entries are kept.
const CAPACITY: usize = 200_000;

/// How many distinct requests (with object names) are kept per log; past this, new requests are
/// recorded without their object name, so the verbs and resources a client uses stay complete
/// while memory stays bounded on a long-running sandbox.
const ACCESS_CAPACITY: usize = 100_000;

/// One write request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    /// `POST`, `PUT`, `PATCH` or `DELETE`.
    pub method: String,
    /// Request path, e.g. `/api/v1/nodes`.
    pub path: String,
    /// The client's User-Agent header.
    pub user_agent: String,
    /// HTTP status of the response.
    pub status: u16,
    /// The request as RBAC sees it (verb, resource, subresource, namespace, name), with the
    /// name of the object a create made (from the response) when the path names none.
    pub attributes: RequestAttributes,
}

/// Put on a create's response by the API server: the name of the object created, which the
/// audit log records (the request path of a create names no object). Not sent to the client.
#[derive(Clone, Debug)]
pub struct CreatedName(pub String);

/// A request to a resource, as kube-apiserver's request-info resolver
/// (`k8s.io/apiserver/pkg/endpoints/request.RequestInfoFactory`) describes it to RBAC.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceRequest {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete` or `deletecollection`.
    pub verb: String,
    /// API group; empty for the core group.
    pub group: String,
    /// Plural resource name, e.g. `pods`.
    pub resource: String,
    /// Subresource, e.g. `eviction` or `status`.
    pub subresource: Option<String>,
    /// Namespace of a namespaced request; `None` for cluster-wide requests (including a list or
    /// watch of a namespaced resource across all namespaces). A request for a Namespace object
    /// (`/api/v1/namespaces/NAME`) carries its own name here, as in kube-apiserver.
    pub namespace: Option<String>,
    /// Object name, when the path names one (or a list/watch selects one by
    /// `fieldSelector=metadata.name=NAME`); used by RBAC `resourceNames`.
    pub name: Option<String>,
}

impl ResourceRequest {
    /// `resource` or `resource/subresource`, as RBAC rules name them.
    pub fn qualified_resource(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        }
    }
}

/// What a client asked for, in the terms RBAC authorizes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RequestAttributes {
    /// A request to an API resource.
    Resource(ResourceRequest),
    /// Any other path (`/version`, `/healthz`, discovery such as `/apis`), authorized by
    /// `nonResourceURLs` rules; the verb is the lower-case HTTP method.
    NonResource {
        /// `get`, `post`, `put`, ... (lower-case HTTP method).
        verb: String,
        /// The request path, e.g. `/version` or `/apis`.
        path: String,
    },
}

impl fmt::Display for RequestAttributes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestAttributes::Resource(r) => {
                let group = if r.group.is_empty() { "core" } else { &r.group };
                write!(f, "{} {group} {}", r.verb, r.qualified_resource())?;
                if let Some(ns) = &r.namespace {
                    write!(f, " -n {ns}")?;
                }
                if let Some(name) = &r.name {
                    write!(f, " {name}")?;
                }
                Ok(())
            }
            RequestAttributes::NonResource { verb, path } => write!(f, "{verb} {path}"),
        }
    }
}

impl RequestAttributes {
    /// Derive the attributes of a request from its HTTP method, path and query parameters, the
    /// way kube-apiserver does: `/api/v1/...` and `/apis/GROUP/VERSION/...` are resource
    /// requests (with the legacy `/watch/` prefix), everything else is a non-resource request.
    /// A GET is `get` with a name, else `list`, or `watch` with `watch=true`; POST is `create`,
    /// PUT `update`, PATCH `patch`, DELETE `delete` with a name, else `deletecollection`.
    pub fn from_request(method: &str, path: &str, query: &HashMap<String, String>) -> Self {
        let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let non_resource = || RequestAttributes::NonResource {
            verb: method.to_ascii_lowercase(),
            path: path.to_string(),
        };
        let (group, mut rest) = match parts.as_slice() {
            ["api", _version, rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => return non_resource(),
        };
        let mut watch_prefix = false;
        if rest.first() == Some(&"watch") {
            watch_prefix = true;
            rest = &rest[1..];
        }
        if rest.is_empty() {
            // API discovery of a group version, e.g. GET /apis/apps/v1.
            return non_resource();
        }
        let mut namespace = None;
        if rest[0] == "namespaces" && rest.len() >= 2 {
            namespace = Some(rest[1].to_string());
            // `/namespaces/NAME/status` and `/namespaces/NAME/finalize` are subresources of
            // the Namespace itself, not a namespaced resource called `status`.
            if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
                rest = &rest[2..];
            }
        }
        let resource = rest[0].to_string();
        let mut name = rest.get(1).map(|s| s.to_string());
        let subresource = rest.get(2).map(|s| s.to_string());
        let collection = name.is_none();
        let verb = match method {
            "GET" | "HEAD" if watch_prefix => "watch",
            "GET" | "HEAD" if collection => {
                if matches!(query.get("watch").map(String::as_str), Some("true" | "1")) {
                    "watch"
                } else {
                    "list"
                }
            }
            "GET" | "HEAD" => "get",
            "POST" => "create",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" if collection => "deletecollection",
            "DELETE" => "delete",
            _ => return non_resource(),
        };
        if collection && matches!(verb, "list" | "watch" | "deletecollection") {
            name = query
                .get("fieldSelector")
                .and_then(|s| s.strip_prefix("metadata.name="))
                .filter(|n| !n.is_empty() && !n.contains(','))
                .map(String::from);
        }
        RequestAttributes::Resource(ResourceRequest {
            verb: verb.to_string(),
            group: group.to_string(),
            resource,
            subresource,
            namespace,
            name,
        })
    }

    /// The same request without its object name (what is kept once the log is full).
    fn without_name(mut self) -> Self {
        if let RequestAttributes::Resource(r) = &mut self {
            r.name = None;
        }
        self
    }
}

#[derive(Debug, Default)]
struct Inner {
    writes: VecDeque<AuditEntry>,
    accesses: HashSet<(String, RequestAttributes)>,
}

/// A bounded in-memory audit log.
#[derive(Debug, Default)]
pub struct AuditLog(Mutex<Inner>);

impl AuditLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record a write request, dropping the oldest entry when full.
    pub fn record(&self, entry: AuditEntry) {
        let mut log = self.lock();
        if log.writes.len() >= CAPACITY {
            log.writes.pop_front();
        }
        log.writes.push_back(entry);
    }

    /// Record that `user_agent` made a request (read or write) with these attributes. Only
    /// distinct requests are kept; once 100,000 of them are (`ACCESS_CAPACITY`), further ones
    /// are kept without their object name.
    pub fn record_access(&self, user_agent: &str, attributes: RequestAttributes) {
        let mut log = self.lock();
        let attributes = if log.accesses.len() >= ACCESS_CAPACITY {
            attributes.without_name()
        } else {
            attributes
        };
        log.accesses.insert((user_agent.to_string(), attributes));
    }

    /// Every recorded write, oldest first.
    pub fn entries(&self) -> Vec<AuditEntry> {
        self.lock().writes.iter().cloned().collect()
    }

    /// The distinct requests (reads and writes) each user agent made, sorted.
    pub fn accesses(&self) -> BTreeMap<String, BTreeSet<RequestAttributes>> {
        let mut out: BTreeMap<String, BTreeSet<RequestAttributes>> = BTreeMap::new();
        for (agent, attrs) in &self.lock().accesses {
            out.entry(agent.clone()).or_default().insert(attrs.clone());
        }
        out
    }

    /// The distinct requests of the user agents that start with `prefix` (e.g. `kubectl/`), with
    /// object names dropped: one entry per verb, group, resource/subresource and namespace.
    pub fn accesses_by(&self, prefix: &str) -> BTreeSet<RequestAttributes> {
        self.lock()
            .accesses
            .iter()
            .filter(|(agent, _)| agent.starts_with(prefix))
            .map(|(_, attrs)| attrs.clone().without_name())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: &str, uri: &str) -> String {
        let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
        let query = form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        RequestAttributes::from_request(method, path, &query).to_string()
    }

    #[test]
    fn requests_resolve_like_kube_apiserver() {
        let cases = [
            ("GET", "/api/v1/pods", "list core pods"),
            ("GET", "/api/v1/pods?watch=true", "watch core pods"),
            ("GET", "/api/v1/watch/pods", "watch core pods"),
            ("GET", "/api/v1/namespaces/a/pods/p", "get core pods -n a p"),
            (
                "POST",
                "/api/v1/namespaces/a/pods/p/eviction",
                "create core pods/eviction -n a p",
            ),
            (
                "POST",
                "/api/v1/namespaces/a/events",
                "create core events -n a",
            ),
            ("PATCH", "/api/v1/nodes/n1", "patch core nodes n1"),
            ("DELETE", "/api/v1/nodes/n1", "delete core nodes n1"),
            ("DELETE", "/api/v1/nodes", "deletecollection core nodes"),
            ("GET", "/api/v1/namespaces", "list core namespaces"),
            (
                "GET",
                "/api/v1/namespaces/kube-system",
                "get core namespaces -n kube-system kube-system",
            ),
            (
                "PUT",
                "/api/v1/namespaces/x/finalize",
                "update core namespaces/finalize -n x x",
            ),
            (
                "PATCH",
                "/apis/karpenter.sh/v1/nodeclaims/c1/status",
                "patch karpenter.sh nodeclaims/status c1",
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/karpenter/leases/l",
                "update coordination.k8s.io leases -n karpenter l",
            ),
            (
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/k/leases?fieldSelector=metadata.name%3Dl&watch=1",
                "watch coordination.k8s.io leases -n k l",
            ),
            ("GET", "/apis/apps/v1", "get /apis/apps/v1"),
            ("GET", "/version", "get /version"),
            ("GET", "/openapi/v3", "get /openapi/v3"),
        ];
        for (method, uri, want) in cases {
            assert_eq!(attrs(method, uri), want, "{method} {uri}");
        }
    }

    #[test]
    fn accesses_are_distinct_per_agent_and_names_can_be_dropped() {
        let log = AuditLog::default();
        let none = HashMap::new();
        for pod in ["a", "b", "a"] {
            let path = format!("/api/v1/namespaces/ns/pods/{pod}/eviction");
            log.record_access(
                "karpenter-rs/0.1.0",
                RequestAttributes::from_request("POST", &path, &none),
            );
        }
        log.record_access(
            "kubectl/v1.32.4",
            RequestAttributes::from_request("GET", "/api/v1/pods", &none),
        );
        let all = log.accesses();
        assert_eq!(all["karpenter-rs/0.1.0"].len(), 2, "{all:?}");
        assert_eq!(all["kubectl/v1.32.4"].len(), 1);
        let controller: Vec<String> = log
            .accesses_by("karpenter-rs/")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(controller, ["create core pods/eviction -n ns"]);
        assert!(log.entries().is_empty(), "accesses are not writes");
    }
}
