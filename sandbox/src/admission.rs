//! What kube-apiserver does to an object between the request and storage, in its order:
//! decoding into the kind's types ([`crate::decode`], 400 on a type error), the kind's defaults
//! ([`crate::defaults`]), the admission plugins that mutate Pods (ServiceAccount, Priority,
//! DefaultTolerationSeconds) and what a Pod's create strategy sets (its initial status), then
//! validation ([`crate::validation`], 422 with one cause per field); and the update rules beyond
//! the store's generic ones (a bound pod cannot move).

use serde_json::{Map, Value, json};

use crate::defaults::{self, Write, set_default};
use crate::error::{ApiError, ApiResult};
use crate::quantity::Quantity;
use crate::registry::ResourceType;

/// Priority of the two built-in PriorityClasses (kubernetes `pkg/apis/scheduling`).
const SYSTEM_PRIORITIES: &[(&str, i64)] = &[
    ("system-node-critical", 2_000_001_000),
    ("system-cluster-critical", 2_000_000_000),
];

/// Whether the type is `customresourcedefinitions.apiextensions.k8s.io`.
pub fn is_crd(rt: &ResourceType) -> bool {
    rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions"
}

/// Admit a new object: decode, default, mutate (pods), validate.
///
/// Errors: 400 for a value of the wrong type, 422 for an object that fails validation.
pub fn on_create(rt: &ResourceType, obj: &mut Value) -> ApiResult<()> {
    crate::decode::decode(rt, obj)?;
    defaults::apply(rt, obj, Write::Create);
    if rt.group.is_empty() && rt.kind == "Pod" {
        if let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) {
            admit_pod_spec(spec);
        }
        let qos = obj.get("spec").map_or("BestEffort", qos_class);
        obj["status"] = json!({"phase": "Pending", "qosClass": qos});
    }
    crate::validation::validate(rt, obj)
}

/// Admit a replacement of `old` through the main resource: decode, default, the update rules,
/// validate.
///
/// Errors: 400 for a value of the wrong type; 422 when a pod's `spec.nodeName` would change once
/// set (pods are bound once) or the object fails validation.
pub fn on_update(rt: &ResourceType, old: &Value, new: &mut Value) -> ApiResult<()> {
    crate::decode::decode(rt, new)?;
    defaults::apply(rt, new, Write::Update(old));
    if rt.group.is_empty() && rt.kind == "Pod" {
        let old_node = old
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("");
        let new_node = new
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !old_node.is_empty() && old_node != new_node {
            return Err(ApiError::invalid(
                "Pod",
                name_of(new),
                "spec.nodeName",
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations) or `spec.terminationGracePeriodSeconds`",
            ));
        }
    }
    crate::validation::validate(rt, new)
}

/// Admit a write of the status subresource: the object is decoded and defaulted as every write
/// is (status rules beyond that are not checked).
///
/// Errors: 400 for a value of the wrong type.
pub fn on_status_update(rt: &ResourceType, old: &Value, new: &mut Value) -> ApiResult<()> {
    crate::decode::decode(rt, new)?;
    defaults::apply(rt, new, Write::Update(old));
    Ok(())
}

/// Mark a CRD's names accepted and the CRD established at `now` (RFC 3339), as the
/// apiextensions controllers do.
pub fn crd_established(obj: &mut Value, registered: &[ResourceType], now: &str) {
    let names = obj
        .pointer("/spec/names")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let stored: Vec<String> = registered.iter().map(|r| r.version.clone()).collect();
    obj["status"] = json!({
        "acceptedNames": names,
        "storedVersions": stored,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
    });
}

fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// What kube-apiserver's admission plugins add to a Pod, and only to Pods (never to the
/// templates of workloads, so re-applying a Deployment finds its template as it was written):
/// ServiceAccount (`serviceAccountName: default`), Priority (`priority` from the class) and
/// DefaultTolerationSeconds (not-ready and unreachable tolerations for 300s).
fn admit_pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    set_default(spec, "serviceAccountName", json!("default"));
    if spec.get("priority").is_none() {
        let class = spec.get("priorityClassName").and_then(Value::as_str);
        let priority = SYSTEM_PRIORITIES
            .iter()
            .find(|(n, _)| Some(*n) == class)
            .map_or(0, |(_, p)| *p);
        spec["priority"] = json!(priority);
    }
    // Every built-in class, and the default, preempts lower priorities.
    set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    // The DefaultTolerationSeconds admission plugin.
    let tolerations = spec
        .as_object_mut()
        .map(|m| m.entry("tolerations").or_insert_with(|| json!([])));
    if let Some(Value::Array(t)) = tolerations {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            let present = t.iter().any(|x| {
                x.get("key").and_then(Value::as_str) == Some(key)
                    || (x.get("operator").and_then(Value::as_str) == Some("Exists")
                        && x.get("key").is_none())
            });
            if !present {
                t.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
}

/// The pod's QoS class (`ComputePodQOS`): from the positive cpu and memory requests and limits
/// of all its containers, summed; Guaranteed when every container limits both and the sums of
/// requests and limits agree.
fn qos_class(spec: &Value) -> &'static str {
    let mut requests: Map<String, Value> = Map::new();
    let mut limits: Map<String, Value> = Map::new();
    let mut guaranteed = true;
    let containers = ["containers", "initContainers"]
        .iter()
        .filter_map(|l| spec.get(*l).and_then(Value::as_array))
        .flatten();
    let positive = |list: Option<&Value>| -> Vec<(String, Quantity)> {
        list.and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter(|(k, _)| *k == "cpu" || *k == "memory")
            .filter_map(|(k, v)| Some((k.clone(), Quantity::parse(v.as_str()?).ok()?)))
            .filter(|(_, q)| !q.is_zero() && !q.is_negative())
            .collect()
    };
    let add = |sums: &mut Map<String, Value>, name: &str, q: Quantity| {
        let total = match sums
            .get(name)
            .and_then(Value::as_str)
            .and_then(|s| Quantity::parse(s).ok())
        {
            Some(prev) => prev.saturating_add(&q),
            None => q,
        };
        sums.insert(name.to_string(), json!(total.canonical()));
    };
    for c in containers {
        for (name, q) in positive(c.pointer("/resources/requests")) {
            add(&mut requests, &name, q);
        }
        let found = positive(c.pointer("/resources/limits"));
        if !(found.iter().any(|(n, _)| n == "cpu") && found.iter().any(|(n, _)| n == "memory")) {
            guaranteed = false;
        }
        for (name, q) in found {
            add(&mut limits, &name, q);
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    let same = |a: &Value, b: &Value| {
        let q = |v: &Value| v.as_str().and_then(|s| Quantity::parse(s).ok());
        matches!((q(a), q(b)), (Some(x), Some(y)) if x == y)
    };
    guaranteed &= requests
        .iter()
        .all(|(name, req)| limits.get(name).is_some_and(|lim| same(lim, req)));
    if guaranteed && requests.len() == limits.len() {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    #[test]
    fn pod_requests_default_to_limits_and_qos_is_set() {
        let r = Registry::default();
        let rt = r.get("", "v1", "pods").expect("pods");
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "c", "image": "nginx:1.27", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}});
        on_create(rt, &mut pod).expect("valid");
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "1"
        );
        assert_eq!(pod["status"]["qosClass"], "Guaranteed");
        assert_eq!(pod["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(pod["spec"]["tolerations"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn pod_level_requests_default_to_pod_level_limits() {
        let r = Registry::default();
        let rt = r.get("", "v1", "pods").expect("pods");
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "resources": {"limits": {"cpu": "2500m", "memory": "1Gi"}},
            "containers": [{"name": "c", "image": "nginx:1.27"}]}});
        on_create(rt, &mut pod).expect("valid");
        assert_eq!(pod["spec"]["resources"]["requests"]["cpu"], "2500m");
        assert_eq!(pod["spec"]["resources"]["requests"]["memory"], "1Gi");
    }

    #[test]
    fn templates_get_api_defaults_but_not_pod_admission() {
        let r = Registry::default();
        let rt = r.get("apps", "v1", "deployments").expect("deployments");
        let mut d = json!({"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {
            "priorityClassName": "system-cluster-critical",
            "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
            "containers": [{"name": "c", "image": "x:1"}]}}}});
        on_create(rt, &mut d).expect("valid");
        let spec = &d["spec"]["template"]["spec"];
        assert_eq!(spec["schedulerName"], "default-scheduler");
        assert_eq!(spec["containers"][0]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(
            spec["tolerations"],
            json!([{"key": "CriticalAddonsOnly", "operator": "Exists"}]),
            "as written: re-applying the manifest must find no difference"
        );
        assert!(spec.get("priority").is_none());
        assert!(spec.get("serviceAccountName").is_none());
        let pods = r.get("", "v1", "pods").expect("pods");
        let mut pod = json!({"metadata": {"name": "p"}, "spec": spec.clone()});
        on_create(pods, &mut pod).expect("valid");
        assert_eq!(pod["spec"]["priority"], 2_000_000_000);
        assert_eq!(pod["spec"]["tolerations"].as_array().map(Vec::len), Some(3));
    }

    #[test]
    fn bound_pod_cannot_move() {
        let r = Registry::default();
        let rt = r.get("", "v1", "pods").expect("pods");
        let old = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "a"}});
        let mut new = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "b"}});
        assert!(on_update(rt, &old, &mut new).is_err());
    }
}
