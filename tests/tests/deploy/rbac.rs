//! Kubernetes RBAC evaluation for the deploy test: which requests a ServiceAccount may make
//! under the ClusterRoles, Roles and bindings stored in the cluster, by the rules of
//! kube-apiserver's RBAC authorizer (`plugin/pkg/auth/authorizer/rbac` and
//! `pkg/apis/rbac/v1/evaluation_helpers.go`): a rule allows a request when its verbs, API groups,
//! resources (`resource`, `resource/subresource`, `*/subresource` or `*`) and, if set, resource
//! names all match; a RoleBinding grants its rules only inside its own namespace; non-resource
//! paths need `nonResourceURLs` (exact, or a prefix ending in `*`). The default discovery roles
//! every authenticated client is bound to (`system:discovery`, `system:public-info-viewer`) are
//! included, as a real cluster has them.

use std::fmt;

use sandbox::audit::{RequestAttributes, ResourceRequest};
use serde_json::Value;

/// One rule of a Role or ClusterRole (`rbac.authorization.k8s.io/v1` PolicyRule).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyRule {
    /// `verbs`.
    pub verbs: Vec<String>,
    /// `apiGroups` (`""` is the core group).
    pub api_groups: Vec<String>,
    /// `resources`.
    pub resources: Vec<String>,
    /// `resourceNames`; empty allows every name.
    pub resource_names: Vec<String>,
    /// `nonResourceURLs`.
    pub non_resource_urls: Vec<String>,
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn matches_any(list: &[String], wanted: &str) -> bool {
    list.iter().any(|x| x == "*" || x == wanted)
}

impl PolicyRule {
    fn from_json(v: &Value) -> PolicyRule {
        PolicyRule {
            verbs: strings(v, "verbs"),
            api_groups: strings(v, "apiGroups"),
            resources: strings(v, "resources"),
            resource_names: strings(v, "resourceNames"),
            non_resource_urls: strings(v, "nonResourceURLs"),
        }
    }

    fn resource_matches(&self, r: &ResourceRequest) -> bool {
        let combined = r.qualified_resource();
        self.resources.iter().any(|rule| {
            rule == "*"
                || *rule == combined
                || r.subresource
                    .as_deref()
                    .is_some_and(|sub| rule.strip_prefix("*/") == Some(sub))
        })
    }

    fn name_matches(&self, r: &ResourceRequest) -> bool {
        self.resource_names.is_empty()
            || r.name
                .as_deref()
                .is_some_and(|n| self.resource_names.iter().any(|x| x == n))
    }

    fn url_matches(&self, path: &str) -> bool {
        self.non_resource_urls.iter().any(|rule| {
            rule == "*"
                || rule == path
                || rule
                    .strip_suffix('*')
                    .is_some_and(|prefix| path.starts_with(prefix))
        })
    }

    /// Whether this rule allows the request (namespaces are the binding's concern).
    pub fn allows(&self, attrs: &RequestAttributes) -> bool {
        match attrs {
            RequestAttributes::Resource(r) => {
                matches_any(&self.verbs, &r.verb)
                    && matches_any(&self.api_groups, &r.group)
                    && self.resource_matches(r)
                    && self.name_matches(r)
            }
            RequestAttributes::NonResource { verb, path } => {
                matches_any(&self.verbs, verb) && self.url_matches(path)
            }
        }
    }

    /// Every (verb, group, resource) this rule grants, for reporting the unused ones.
    pub fn permissions(&self) -> Vec<String> {
        let mut out = Vec::new();
        for verb in &self.verbs {
            for url in &self.non_resource_urls {
                out.push(format!("{verb} {url}"));
            }
            for group in &self.api_groups {
                let group = if group.is_empty() { "core" } else { group };
                for resource in &self.resources {
                    let names = if self.resource_names.is_empty() {
                        String::new()
                    } else {
                        format!(" {}", self.resource_names.join(","))
                    };
                    out.push(format!("{verb} {group} {resource}{names}"));
                }
            }
        }
        out
    }

    /// The single-verb, single-group, single-resource rules this rule is made of.
    fn split(&self) -> Vec<PolicyRule> {
        let mut out = Vec::new();
        for verb in &self.verbs {
            for url in &self.non_resource_urls {
                out.push(PolicyRule {
                    verbs: vec![verb.clone()],
                    non_resource_urls: vec![url.clone()],
                    ..PolicyRule::default()
                });
            }
            for group in &self.api_groups {
                for resource in &self.resources {
                    out.push(PolicyRule {
                        verbs: vec![verb.clone()],
                        api_groups: vec![group.clone()],
                        resources: vec![resource.clone()],
                        resource_names: self.resource_names.clone(),
                        non_resource_urls: vec![],
                    });
                }
            }
        }
        out
    }
}

/// A rule granted to the subject, and where it applies.
#[derive(Clone, Debug)]
pub struct Grant {
    /// `ClusterRole/NAME` or `Role/NAMESPACE/NAME` (or a default role).
    pub source: String,
    /// The namespace it is limited to (a RoleBinding's); `None` for cluster-wide.
    pub namespace: Option<String>,
    /// The rule.
    pub rule: PolicyRule,
}

impl Grant {
    /// Whether this grant allows the request.
    pub fn allows(&self, attrs: &RequestAttributes) -> bool {
        let in_scope = match (&self.namespace, attrs) {
            (None, _) => true,
            (Some(ns), RequestAttributes::Resource(r)) => r.namespace.as_deref() == Some(ns),
            (Some(_), RequestAttributes::NonResource { .. }) => false,
        };
        in_scope && self.rule.allows(attrs)
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.source, self.rule.permissions().join("; "))?;
        if let Some(ns) = &self.namespace {
            write!(f, " (in namespace {ns})")?;
        }
        Ok(())
    }
}

/// What a ServiceAccount may do.
#[derive(Clone, Debug, Default)]
pub struct Authorizer {
    /// The grants from the subject's own bindings, one per single verb/group/resource rule.
    pub grants: Vec<Grant>,
    /// The default discovery grants every authenticated client has.
    pub defaults: Vec<Grant>,
}

fn name_of(v: &Value) -> &str {
    v.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn namespace_of(v: &Value) -> &str {
    v.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn binds(binding: &Value, namespace: &str, name: &str) -> bool {
    binding["subjects"].as_array().is_some_and(|subjects| {
        subjects.iter().any(|s| {
            s["kind"] == "ServiceAccount" && s["name"] == name && s["namespace"] == namespace
        })
    })
}

fn rules_of(role: &Value) -> Vec<PolicyRule> {
    role["rules"]
        .as_array()
        .map(|rules| rules.iter().map(PolicyRule::from_json).collect())
        .unwrap_or_default()
}

/// `system:discovery` and `system:public-info-viewer`, bound to all authenticated users.
fn default_grants() -> Vec<Grant> {
    let urls = [
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/openapi",
        "/openapi/*",
        "/version",
        "/version/",
        "/healthz",
        "/livez",
        "/readyz",
    ];
    vec![Grant {
        source: "ClusterRole/system:discovery".into(),
        namespace: None,
        rule: PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: urls.iter().map(|u| u.to_string()).collect(),
            ..PolicyRule::default()
        },
    }]
}

impl Authorizer {
    /// The grants of ServiceAccount `namespace/name` from the stored RBAC objects.
    ///
    /// Errors: a binding refers to a role that does not exist.
    pub fn for_service_account(
        cluster_roles: &[Value],
        cluster_role_bindings: &[Value],
        roles: &[Value],
        role_bindings: &[Value],
        namespace: &str,
        name: &str,
    ) -> Result<Authorizer, String> {
        let cluster_role = |role: &str| {
            cluster_roles
                .iter()
                .find(|r| name_of(r) == role)
                .ok_or_else(|| format!("ClusterRole {role} does not exist"))
        };
        let mut grants = Vec::new();
        let mut add = |source: String, namespace: Option<String>, rules: Vec<PolicyRule>| {
            for rule in rules.iter().flat_map(PolicyRule::split) {
                grants.push(Grant {
                    source: source.clone(),
                    namespace: namespace.clone(),
                    rule,
                });
            }
        };
        for b in cluster_role_bindings
            .iter()
            .filter(|b| binds(b, namespace, name))
        {
            let role = b["roleRef"]["name"].as_str().unwrap_or("");
            if b["roleRef"]["kind"] != "ClusterRole" {
                return Err(format!(
                    "ClusterRoleBinding {} refers to a {}",
                    name_of(b),
                    b["roleRef"]["kind"]
                ));
            }
            add(
                format!("ClusterRole/{role}"),
                None,
                rules_of(cluster_role(role)?),
            );
        }
        for b in role_bindings.iter().filter(|b| binds(b, namespace, name)) {
            let ns = namespace_of(b).to_string();
            let role = b["roleRef"]["name"].as_str().unwrap_or("");
            let (source, rules) = match b["roleRef"]["kind"].as_str() {
                Some("ClusterRole") => {
                    (format!("ClusterRole/{role}"), rules_of(cluster_role(role)?))
                }
                Some("Role") => {
                    let r = roles
                        .iter()
                        .find(|r| name_of(r) == role && namespace_of(r) == ns)
                        .ok_or_else(|| format!("Role {ns}/{role} does not exist"))?;
                    (format!("Role/{ns}/{role}"), rules_of(r))
                }
                other => return Err(format!("RoleBinding {ns}/{role}: roleRef kind {other:?}")),
            };
            add(source, Some(ns), rules);
        }
        Ok(Authorizer {
            grants,
            defaults: default_grants(),
        })
    }

    /// The first grant that allows the request, if any.
    pub fn allowing(&self, attrs: &RequestAttributes) -> Option<&Grant> {
        self.grants
            .iter()
            .chain(&self.defaults)
            .find(|g| g.allows(attrs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashMap;

    fn req(method: &str, path: &str) -> RequestAttributes {
        RequestAttributes::from_request(method, path, &HashMap::new())
    }

    fn authorizer() -> Authorizer {
        let cluster_roles = [json!({"metadata": {"name": "c"}, "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
            {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
            {"apiGroups": ["karpenter.sh"], "resources": ["*/status"], "verbs": ["patch"]},
        ]})];
        let crbs = [json!({"metadata": {"name": "c"},
            "roleRef": {"kind": "ClusterRole", "name": "c"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "k"}]})];
        let roles = [
            json!({"metadata": {"name": "r", "namespace": "k"}, "rules": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "resourceNames": ["lock"], "verbs": ["get", "update"]},
            ]}),
        ];
        let rbs = [json!({"metadata": {"name": "r", "namespace": "k"},
            "roleRef": {"kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "k"}]})];
        Authorizer::for_service_account(&cluster_roles, &crbs, &roles, &rbs, "k", "sa")
            .expect("roles exist")
    }

    #[test]
    fn rules_match_like_kubernetes_rbac() {
        let a = authorizer();
        let cases = [
            ("GET", "/api/v1/pods", true),
            ("GET", "/api/v1/namespaces/x/pods", true),
            ("GET", "/api/v1/namespaces/x/pods/p", false),
            ("POST", "/api/v1/namespaces/x/pods/p/eviction", true),
            ("DELETE", "/api/v1/namespaces/x/pods/p", false),
            ("PATCH", "/apis/karpenter.sh/v1/nodeclaims/c/status", true),
            ("PATCH", "/apis/karpenter.sh/v1/nodeclaims/c", false),
            (
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/k/leases/lock",
                true,
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/k/leases/lock",
                true,
            ),
            (
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/k/leases/other",
                false,
            ),
            (
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/lock",
                false,
            ),
            (
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/k/leases",
                false,
            ),
            ("GET", "/version", true),
            ("GET", "/apis/karpenter.sh/v1", true),
            ("GET", "/metrics", false),
        ];
        for (method, path, allowed) in cases {
            assert_eq!(
                a.allowing(&req(method, path)).is_some(),
                allowed,
                "{method} {path}"
            );
        }
    }

    #[test]
    fn other_subjects_get_nothing_and_missing_roles_are_errors() {
        let crbs = [json!({"metadata": {"name": "c"},
            "roleRef": {"kind": "ClusterRole", "name": "missing"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "k"}]})];
        let other = Authorizer::for_service_account(&[], &crbs, &[], &[], "k", "someone-else")
            .expect("no binding applies");
        assert!(other.grants.is_empty());
        let err = Authorizer::for_service_account(&[], &crbs, &[], &[], "k", "sa")
            .expect_err("dangling roleRef");
        assert!(err.contains("missing"), "{err}");
    }
}
