//! Pod spec defaults (core/v1 `SetDefaults_PodSpec`, `SetDefaults_Container`,
//! `SetDefaults_Probe`, `SetDefaults_Volume` and the generated per-field defaults), applied to
//! pods and to the pod templates of workloads alike; and the few that only a Pod gets
//! (`SetDefaults_Pod`: requests from limits, service links, host-network ports), never a
//! template, so re-applying a workload finds its template as it was written.

use serde_json::{Value, json};

use super::{ensure, items, resource_list, set_default};

/// Defaults of every pod spec: a pod's `spec` or a workload's `spec.template.spec`.
pub fn pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in items(spec, list) {
            container(c);
        }
    }
    for v in items(spec, "volumes") {
        volume(v);
    }
    resource_list(spec.get_mut("overhead"));
}

/// What only a Pod gets: container requests default to their limits (and pod-level requests to
/// pod-level limits), `enableServiceLinks: true`, and with `hostNetwork` each container port's
/// `hostPort` defaults to the container port.
pub fn pod_only(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    for list in ["initContainers", "containers"] {
        for c in items(spec, list) {
            requests_from_limits(c, |_| true);
        }
    }
    // Pod-level resources: cpu and memory requests default to their limits.
    requests_from_limits(spec, |k| k == "cpu" || k == "memory");
    set_default(spec, "enableServiceLinks", json!(true));
    if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
        for list in ["initContainers", "containers"] {
            for c in items(spec, list) {
                for p in items(c, "ports") {
                    let port = p.get("containerPort").cloned().unwrap_or(json!(0));
                    if p.get("hostPort").and_then(Value::as_i64).unwrap_or(0) == 0 {
                        p["hostPort"] = port;
                    }
                }
            }
        }
    }
}

/// Copy `resources.limits` into `resources.requests` for the resources `wanted` accepts that
/// have no request yet.
fn requests_from_limits(owner: &mut Value, wanted: impl Fn(&str) -> bool) {
    let limits = owner
        .pointer("/resources/limits")
        .and_then(Value::as_object)
        .cloned();
    let Some(limits) = limits.filter(|l| !l.is_empty()) else {
        return;
    };
    let Some(requests) = ensure(&mut owner["resources"], "requests").and_then(Value::as_object_mut)
    else {
        return;
    };
    for (k, v) in limits {
        if wanted(&k) {
            requests.entry(k).or_insert(v);
        }
    }
}

/// `Always` for an image whose tag is `latest` (or that names none, which means `latest`),
/// `IfNotPresent` otherwise, including a digest reference or no image at all.
fn pull_policy(image: &str) -> &'static str {
    if image.is_empty() {
        return "IfNotPresent";
    }
    let (name, digest) = match image.split_once('@') {
        Some((name, _)) => (name, true),
        None => (image, false),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.rsplit_once(':') {
        Some((_, "latest")) => "Always",
        Some(_) => "IfNotPresent",
        None if digest => "IfNotPresent",
        None => "Always",
    }
}

fn container(c: &mut Value) {
    if !c.is_object() {
        return;
    }
    let policy = pull_policy(c.get("image").and_then(Value::as_str).unwrap_or(""));
    set_default(c, "imagePullPolicy", json!(policy));
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    for p in items(c, "ports") {
        set_default(p, "protocol", json!("TCP"));
    }
    for e in items(c, "env") {
        if let Some(field_ref) = e.pointer_mut("/valueFrom/fieldRef") {
            set_default(field_ref, "apiVersion", json!("v1"));
        }
    }
    if let Some(resources) = c.get_mut("resources") {
        resource_list(resources.get_mut("limits"));
        resource_list(resources.get_mut("requests"));
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).filter(|p| p.is_object()) {
            set_default(p, "timeoutSeconds", json!(1));
            set_default(p, "periodSeconds", json!(10));
            set_default(p, "successThreshold", json!(1));
            set_default(p, "failureThreshold", json!(3));
            handler(p);
        }
    }
    for hook in ["postStart", "preStop"] {
        if let Some(h) = c.pointer_mut(&format!("/lifecycle/{hook}")) {
            handler(h);
        }
    }
}

/// A probe's or lifecycle hook's action: `httpGet` path `/` and scheme `HTTP`, a gRPC probe's
/// `service` the empty string (kubectl's printer dereferences it).
fn handler(h: &mut Value) {
    if let Some(get) = h.get_mut("httpGet").filter(|g| g.is_object()) {
        set_default(get, "path", json!("/"));
        set_default(get, "scheme", json!("HTTP"));
    }
    if let Some(grpc) = h.get_mut("grpc").filter(|g| g.is_object()) {
        set_default(grpc, "service", json!(""));
    }
}

/// A volume's source defaults; a volume naming no source is an `emptyDir`.
fn volume(v: &mut Value) {
    let Some(m) = v.as_object_mut() else {
        return;
    };
    if m.iter().all(|(k, val)| k == "name" || val.is_null()) {
        m.insert("emptyDir".into(), json!({}));
    }
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = v.get_mut(source).filter(|s| s.is_object()) {
            set_default(s, "defaultMode", json!(420));
        }
    }
    if let Some(host_path) = v.get_mut("hostPath").filter(|s| s.is_object()) {
        set_default(host_path, "type", json!(""));
    }
    if let Some(d) = v.get_mut("downwardAPI") {
        field_refs(d);
    }
    if let Some(p) = v.get_mut("projected") {
        for source in items(p, "sources") {
            if let Some(d) = source.get_mut("downwardAPI") {
                field_refs(d);
            }
            if let Some(t) = source
                .get_mut("serviceAccountToken")
                .filter(|t| t.is_object())
            {
                set_default(t, "expirationSeconds", json!(3600));
            }
        }
    }
    if let Some(disk) = v.get_mut("azureDisk").filter(|d| d.is_object()) {
        set_default(disk, "cachingMode", json!("ReadWrite"));
        set_default(disk, "fsType", json!("ext4"));
        set_default(disk, "readOnly", json!(false));
        set_default(disk, "kind", json!("Shared"));
    }
    if let Some(iscsi) = v.get_mut("iscsi").filter(|d| d.is_object()) {
        set_default(iscsi, "iscsiInterface", json!("default"));
    }
    if let Some(spec) = v.pointer_mut("/ephemeral/volumeClaimTemplate/spec") {
        super::kinds::claim_spec(spec);
    }
}

fn field_refs(downward: &mut Value) {
    for item in items(downward, "items") {
        if let Some(f) = item.get_mut("fieldRef").filter(|f| f.is_object()) {
            set_default(f, "apiVersion", json!("v1"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_pull_policy_follows_the_tag() {
        for (image, want) in [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1.27", "IfNotPresent"),
            ("localhost:5000/nginx", "Always"),
            ("localhost:5000/nginx:1.0", "IfNotPresent"),
            ("nginx@sha256:abc", "IfNotPresent"),
            ("nginx:latest@sha256:abc", "Always"),
            ("", "IfNotPresent"),
        ] {
            assert_eq!(pull_policy(image), want, "{image}");
        }
    }
}
