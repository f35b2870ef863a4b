//! Defaulting and admission on write, as kube-apiserver's built-in defaulters and admission
//! plugins do it for the kinds the sandbox simulates (pods, workloads, services, namespaces,
//! CustomResourceDefinitions).

use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult};
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

/// Apply defaults to a new object. Errors: 422 for an invalid object the sandbox can detect.
pub fn on_create(rt: &ResourceType, obj: &mut Value) -> ApiResult<()> {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => {
            if let Some(spec) = obj.get_mut("spec") {
                default_pod_spec(spec);
                admit_pod_spec(spec);
            } else {
                return Err(ApiError::invalid(
                    "Pod",
                    name_of(obj),
                    "spec.containers",
                    "Required value",
                ));
            }
            let qos = qos_class(&obj["spec"]);
            obj["status"] = json!({"phase": "Pending", "qosClass": qos});
        }
        ("", "Namespace") => {
            let name = name_of(obj).to_string();
            obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
            if obj.pointer("/spec/finalizers").is_none() {
                obj["spec"]["finalizers"] = json!(["kubernetes"]);
            }
            obj["status"] = json!({"phase": "Active"});
        }
        ("", "Service") => default_service(obj),
        ("apps", "Deployment") => {
            default_replicas(obj);
            let spec = &mut obj["spec"];
            if spec.get("strategy").is_none() {
                spec["strategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}});
            }
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "progressDeadlineSeconds", json!(600));
            default_template(obj);
        }
        ("apps", "ReplicaSet") | ("apps", "StatefulSet") => {
            default_replicas(obj);
            default_template(obj);
        }
        ("apps", "DaemonSet") => {
            if obj.pointer("/spec/updateStrategy").is_none() {
                obj["spec"]["updateStrategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}});
            }
            default_template(obj);
        }
        ("batch", "Job") => default_template(obj),
        _ => {}
    }
    Ok(())
}

/// Checks on update beyond the store's generic rules.
///
/// Errors: 422 when a pod's `spec.nodeName` would change once set (pods are bound once).
pub fn on_update(rt: &ResourceType, old: &Value, new: &mut Value) -> ApiResult<()> {
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
    Ok(())
}

/// Mark a CRD's names accepted and the CRD established, as the apiextensions controllers do.
pub fn crd_established(obj: &mut Value, registered: &[ResourceType]) {
    let now = crate::store::now_rfc3339();
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

fn set_default(v: &mut Value, field: &str, default: Value) {
    if let Some(m) = v.as_object_mut() {
        m.entry(field).or_insert(default);
    }
}

fn default_replicas(obj: &mut Value) {
    if obj.get("spec").is_none() {
        obj["spec"] = json!({});
    }
    set_default(&mut obj["spec"], "replicas", json!(1));
}

fn default_template(obj: &mut Value) {
    let template_spec = obj
        .get_mut("spec")
        .and_then(|s| s.get_mut("template"))
        .and_then(|t| t.get_mut("spec"));
    if let Some(spec) = template_spec {
        default_pod_spec(spec);
    }
}

/// Pod spec defaults that matter to scheduling and to kubectl's views: the API defaulting that
/// applies to pods and to the pod templates of workloads alike.
fn default_pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "securityContext", json!({}));
    for list in ["containers", "initContainers"] {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in containers {
                default_container(c);
            }
        }
    }
    // Pod-level resources (PodLevelResources, on since 1.34): cpu and memory requests default
    // to their limits.
    default_requests_to_limits(spec, |k| k == "cpu" || k == "memory");
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

/// Copy `resources.limits` into `resources.requests` for the resources `wanted` accepts that
/// have no request yet (core/v1 `SetDefaults_Pod` and `SetDefaults_Container`).
fn default_requests_to_limits(owner: &mut Value, wanted: impl Fn(&str) -> bool) {
    let limits = owner
        .pointer("/resources/limits")
        .and_then(Value::as_object)
        .cloned();
    if let Some(limits) = limits {
        let requests = owner["resources"]
            .as_object_mut()
            .map(|r| r.entry("requests").or_insert_with(|| json!({})));
        if let Some(Value::Object(req)) = requests {
            for (k, v) in limits {
                if wanted(&k) {
                    req.entry(k).or_insert(v);
                }
            }
        }
    }
}

fn default_container(c: &mut Value) {
    let image = c.get("image").and_then(Value::as_str).unwrap_or("");
    let tag_latest = !image.contains(':') || image.ends_with(":latest");
    set_default(
        c,
        "imagePullPolicy",
        json!(if tag_latest { "Always" } else { "IfNotPresent" }),
    );
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    // Requests default to limits when only limits are given (core/v1 defaults).
    default_requests_to_limits(c, |_| true);
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            set_default(p, "protocol", json!("TCP"));
        }
    }
}

/// The pod's QoS class from its containers' requests and limits.
fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|l| spec.get(*l).and_then(Value::as_array))
        .flatten()
        .collect();
    let empty = Map::new();
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        let req = c
            .pointer("/resources/requests")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let lim = c
            .pointer("/resources/limits")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        if !req.is_empty() || !lim.is_empty() {
            any = true;
        }
        for r in ["cpu", "memory"] {
            match (req.get(r), lim.get(r)) {
                (Some(a), Some(b)) if a == b => {}
                _ => guaranteed = false,
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn default_service(obj: &mut Value) {
    if obj.get("spec").is_none() {
        obj["spec"] = json!({});
    }
    let spec = &mut obj["spec"];
    set_default(spec, "type", json!("ClusterIP"));
    set_default(spec, "sessionAffinity", json!("None"));
    if spec.get("clusterIP").is_none() {
        let ip = cluster_ip();
        spec["clusterIP"] = json!(ip);
        spec["clusterIPs"] = json!([ip]);
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            set_default(p, "protocol", json!("TCP"));
            if p.get("targetPort").is_none() {
                let port = p.get("port").cloned().unwrap_or(json!(0));
                p["targetPort"] = port;
            }
        }
    }
    obj["status"] = json!({"loadBalancer": {}});
}

fn cluster_ip() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    format!(
        "10.96.{}.{}",
        rng.random_range(0..=255u8),
        rng.random_range(1..=254u8)
    )
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
        let mut d = json!({"metadata": {"name": "d"}, "spec": {"template": {"spec": {
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
