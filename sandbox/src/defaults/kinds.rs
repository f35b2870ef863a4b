//! Defaults of the other built-in kinds: core/v1 Services (with the cluster IP, IP families and
//! node ports their REST storage allocates), volumes and claims, Nodes, Namespaces, Endpoints;
//! rbac/v1 bindings; apiextensions/v1 CustomResourceDefinitions.

use rand::Rng;
use serde_json::{Value, json};

use super::{Write, ensure, items, resource_list, set_default};

fn str_of<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get(field).and_then(Value::as_str)
}

/// `SetDefaults_Service` plus the allocations of the Service REST storage: a cluster IP (kept
/// across updates), single-stack IPv4, and node ports for `NodePort` and `LoadBalancer`.
pub fn service(obj: &mut Value, write: Write<'_>) {
    let Some(spec) = ensure(obj, "spec") else {
        return;
    };
    set_default(spec, "sessionAffinity", json!("None"));
    let affinity = str_of(spec, "sessionAffinity").map(String::from);
    match affinity.as_deref() {
        Some("None") => {
            if let Some(m) = spec.as_object_mut() {
                m.remove("sessionAffinityConfig");
            }
        }
        Some("ClientIP") => {
            if let Some(client_ip) =
                ensure(spec, "sessionAffinityConfig").and_then(|c| ensure(c, "clientIP"))
            {
                set_default(client_ip, "timeoutSeconds", json!(10800));
            }
        }
        _ => {}
    }
    set_default(spec, "type", json!("ClusterIP"));
    let kind = str_of(spec, "type").unwrap_or("ClusterIP").to_string();
    for p in items(spec, "ports") {
        set_default(p, "protocol", json!("TCP"));
        let target = p.get("targetPort");
        if target.is_none_or(|t| t.is_null() || *t == json!(0) || *t == json!("")) {
            let port = p.get("port").cloned().unwrap_or(json!(0));
            p["targetPort"] = port;
        }
    }
    let external_ips = spec
        .get("externalIPs")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    let node_ports = kind == "NodePort" || kind == "LoadBalancer";
    if node_ports || (kind == "ClusterIP" && external_ips) {
        set_default(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if node_ports || kind == "ClusterIP" {
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    if let Write::Update(old) = write
        && let Some(old_spec) = old.get("spec")
    {
        carry_allocations(spec, old_spec);
    }
    if kind != "ExternalName" {
        if spec.get("clusterIP").is_none_or(Value::is_null) {
            spec["clusterIP"] = json!(cluster_ip());
        }
        let ip = spec["clusterIP"].clone();
        set_default(spec, "clusterIPs", json!([ip]));
        set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
        set_default(spec, "ipFamilies", json!(["IPv4"]));
    }
    let allocate = node_ports
        && !(kind == "LoadBalancer"
            && spec
                .get("allocateLoadBalancerNodePorts")
                .and_then(Value::as_bool)
                == Some(false));
    if allocate {
        let mut taken: Vec<i64> = items(spec, "ports")
            .filter_map(|p| p.get("nodePort").and_then(Value::as_i64))
            .collect();
        for p in items(spec, "ports") {
            if p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) == 0 {
                let port = node_port(&taken);
                taken.push(port);
                p["nodePort"] = json!(port);
            }
        }
    }
    set_default(obj, "status", json!({"loadBalancer": {}}));
}

/// An update that leaves out what the server allocated keeps the allocation (kube-apiserver's
/// `patchAllocatedValues`).
fn carry_allocations(spec: &mut Value, old: &Value) {
    for field in [
        "clusterIP",
        "clusterIPs",
        "ipFamilies",
        "ipFamilyPolicy",
        "healthCheckNodePort",
    ] {
        if spec.get(field).is_none_or(Value::is_null)
            && let Some(v) = old.get(field)
        {
            spec[field] = v.clone();
        }
    }
    let old_ports = old
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for p in items(spec, "ports") {
        if p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0 {
            continue;
        }
        let same = old_ports
            .iter()
            .find(|o| o.get("port") == p.get("port") && o.get("protocol") == p.get("protocol"));
        if let Some(n) = same
            .and_then(|o| o.get("nodePort"))
            .filter(|n| !n.is_null())
        {
            p["nodePort"] = n.clone();
        }
    }
}

fn cluster_ip() -> String {
    let mut rng = rand::rng();
    format!(
        "10.96.{}.{}",
        rng.random_range(0..=255u8),
        rng.random_range(1..=254u8)
    )
}

fn node_port(taken: &[i64]) -> i64 {
    let mut rng = rand::rng();
    loop {
        let port = rng.random_range(30000..=32767);
        if !taken.contains(&port) {
            return port;
        }
    }
}

/// `SetDefaults_PersistentVolumeClaimSpec`: a filesystem volume; requests rounded to milli.
pub fn claim_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    set_default(spec, "volumeMode", json!("Filesystem"));
    if let Some(resources) = spec.get_mut("resources") {
        resource_list(resources.get_mut("limits"));
        resource_list(resources.get_mut("requests"));
    }
}

/// A claim, standalone or a StatefulSet's template: its spec, and a `Pending` phase.
pub fn claim(obj: &mut Value) {
    if let Some(spec) = ensure(obj, "spec") {
        claim_spec(spec);
    }
    if let Some(status) = ensure(obj, "status") {
        set_default(status, "phase", json!("Pending"));
        resource_list(status.get_mut("capacity"));
    }
}

/// `SetDefaults_PersistentVolumeClaim`.
pub fn persistent_volume_claim(obj: &mut Value) {
    claim(obj);
}

/// `SetDefaults_PersistentVolume`: retained when released, a filesystem, `Pending` at first.
pub fn persistent_volume(obj: &mut Value) {
    if let Some(spec) = ensure(obj, "spec") {
        set_default(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
        set_default(spec, "volumeMode", json!("Filesystem"));
        resource_list(spec.get_mut("capacity"));
        if let Some(host_path) = spec.get_mut("hostPath").filter(|h| h.is_object()) {
            set_default(host_path, "type", json!(""));
        }
    }
    if let Some(status) = ensure(obj, "status") {
        set_default(status, "phase", json!("Pending"));
    }
}

/// `SetDefaults_NodeStatus`: allocatable defaults to capacity; both rounded to milli.
pub fn node(obj: &mut Value) {
    let Some(status) = obj.get_mut("status").filter(|s| s.is_object()) else {
        return;
    };
    resource_list(status.get_mut("capacity"));
    resource_list(status.get_mut("allocatable"));
    if status.get("allocatable").is_none_or(Value::is_null)
        && let Some(capacity) = status.get("capacity").filter(|c| c.is_object()).cloned()
    {
        status["allocatable"] = capacity;
    }
}

/// `SetDefaults_Namespace`: the `kubernetes.io/metadata.name` label; the `kubernetes`
/// finalizer and the `Active` phase a new namespace starts with.
pub fn namespace(obj: &mut Value) {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if !name.is_empty()
        && let Some(labels) = ensure(obj, "metadata")
            .and_then(|m| ensure(m, "labels"))
            .and_then(Value::as_object_mut)
    {
        labels.insert("kubernetes.io/metadata.name".into(), json!(name));
    }
    if let Some(spec) = ensure(obj, "spec") {
        set_default(spec, "finalizers", json!(["kubernetes"]));
    }
    if let Some(status) = ensure(obj, "status") {
        set_default(status, "phase", json!("Active"));
    }
}

/// `SetDefaults_Secret` (`Opaque` unless told) and the conversion every Secret goes through:
/// `stringData` is write-only, merged into `data` (base64) and never stored.
pub fn secret(obj: &mut Value) {
    use base64::Engine;
    set_default(obj, "type", json!("Opaque"));
    let string_data = obj.as_object_mut().and_then(|m| m.remove("stringData"));
    let Some(Value::Object(strings)) = string_data else {
        return;
    };
    if let Some(data) = ensure(obj, "data").and_then(Value::as_object_mut) {
        for (k, v) in strings {
            let text = v.as_str().unwrap_or_default();
            let encoded = base64::engine::general_purpose::STANDARD.encode(text);
            data.insert(k, json!(encoded));
        }
    }
}

/// `SetDefaults_Endpoints`: ports are TCP unless told.
pub fn endpoints(obj: &mut Value) {
    for subset in items(obj, "subsets") {
        for p in items(subset, "ports") {
            set_default(p, "protocol", json!("TCP"));
        }
    }
}

/// rbac/v1 `SetDefaults_RoleBinding` and `SetDefaults_Subject`: the role and users or groups are
/// RBAC's, service accounts the core group's. The core group is the empty string, which Go's
/// `omitempty` leaves out of the stored object, so a service account subject has no `apiGroup`
/// (else `kubectl apply` would find every binding changed on each apply).
pub fn role_binding(obj: &mut Value) {
    const RBAC: &str = "rbac.authorization.k8s.io";
    if let Some(role_ref) = ensure(obj, "roleRef")
        && str_of(role_ref, "apiGroup").is_none_or(str::is_empty)
    {
        role_ref["apiGroup"] = json!(RBAC);
    }
    for s in items(obj, "subjects") {
        if str_of(s, "apiGroup").is_some_and(|g| !g.is_empty()) {
            continue;
        }
        let kind = str_of(s, "kind").map(String::from);
        match kind.as_deref() {
            Some("ServiceAccount") => {
                if let Some(subject) = s.as_object_mut() {
                    subject.remove("apiGroup");
                }
            }
            Some("User" | "Group") => s["apiGroup"] = json!(RBAC),
            _ => {}
        }
    }
}

/// apiextensions/v1 `SetDefaults_CustomResourceDefinitionSpec`: the singular and list names,
/// no conversion.
pub fn crd(obj: &mut Value) {
    let Some(spec) = ensure(obj, "spec") else {
        return;
    };
    if let Some(names) = spec.get_mut("names").filter(|n| n.is_object()) {
        let kind = str_of(names, "kind").unwrap_or_default().to_string();
        if str_of(names, "singular").is_none_or(str::is_empty) {
            names["singular"] = json!(kind.to_lowercase());
        }
        if str_of(names, "listKind").is_none_or(str::is_empty) && !kind.is_empty() {
            names["listKind"] = json!(format!("{kind}List"));
        }
    }
    set_default(spec, "conversion", json!({"strategy": "None"}));
}
