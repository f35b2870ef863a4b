//! Pod spec rules (`ValidatePodSpec`), shared by pods and the pod templates of workloads:
//! containers (names, ports), restart and DNS policies, and resource requirements (known
//! resource names, non-negative quantities, whole numbers where required, requests within
//! limits, limits for resources that cannot be overcommitted).

use std::collections::BTreeSet;
use std::sync::OnceLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::meta::{dns_subdomain_errors, qualified_name_errors};
use super::{FieldError, child, index};
use crate::quantity::Quantity;

const LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";

/// Why a string is not a DNS label (`IsDNS1123Label`), e.g. a container name.
pub fn dns_label_errors(value: &str) -> Vec<String> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(&format!("^{LABEL_FMT}$")).unwrap_or_else(|e| panic!("label pattern: {e}"))
    });
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !re.is_match(value) {
        if dns_subdomain_errors(value).is_empty() {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(format!(
                "{LABEL_MSG} (e.g. 'my-name',  or '123-abc', regex used for validation is '{LABEL_FMT}')"
            ));
        }
    }
    errs
}

/// A pod spec at `path` (`spec` of a pod, `spec.template.spec` of a workload).
pub fn pod_spec(spec: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let mut names = BTreeSet::new();
    let containers = spec.get("containers").and_then(Value::as_array);
    if containers.is_none_or(Vec::is_empty) {
        errors.push(FieldError::required(child(path, "containers"), ""));
    }
    for list in ["containers", "initContainers"] {
        let items = spec.get(list).and_then(Value::as_array);
        for (i, c) in items.into_iter().flatten().enumerate() {
            container(c, &index(&child(path, list), i), &mut names, errors);
        }
    }
    if let Some(policy) = spec.get("restartPolicy").and_then(Value::as_str)
        && !matches!(policy, "Always" | "OnFailure" | "Never")
    {
        errors.push(FieldError::not_supported(
            child(path, "restartPolicy"),
            policy,
            &["Always", "OnFailure", "Never"],
        ));
    }
    if let Some(policy) = spec.get("dnsPolicy").and_then(Value::as_str)
        && !matches!(
            policy,
            "ClusterFirstWithHostNet" | "ClusterFirst" | "Default" | "None"
        )
    {
        errors.push(FieldError::not_supported(
            child(path, "dnsPolicy"),
            policy,
            &["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"],
        ));
    }
}

fn container(c: &Value, path: &str, names: &mut BTreeSet<String>, errors: &mut Vec<FieldError>) {
    let name_path = child(path, "name");
    let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
    if name.is_empty() {
        errors.push(FieldError::required(&name_path, ""));
    } else {
        for msg in dns_label_errors(name) {
            errors.push(FieldError::invalid(&name_path, name, msg));
        }
    }
    if !name.is_empty() && !names.insert(name.to_string()) {
        errors.push(FieldError::duplicate(&name_path, name));
    }
    let ports = c.get("ports").and_then(Value::as_array);
    for (i, port) in ports.into_iter().flatten().enumerate() {
        container_port(port, &index(&child(path, "ports"), i), errors);
    }
    if let Some(resources) = c.get("resources") {
        resource_requirements(resources, &child(path, "resources"), errors);
    }
}

fn container_port(port: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let number = port
        .get("containerPort")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if number == 0 {
        errors.push(FieldError::required(child(path, "containerPort"), ""));
    } else if !(1..=65535).contains(&number) {
        errors.push(FieldError::invalid(
            child(path, "containerPort"),
            number,
            "must be between 1 and 65535, inclusive",
        ));
    }
    if let Some(protocol) = port.get("protocol").and_then(Value::as_str)
        && !matches!(protocol, "TCP" | "UDP" | "SCTP")
    {
        errors.push(FieldError::not_supported(
            child(path, "protocol"),
            protocol,
            &["SCTP", "TCP", "UDP"],
        ));
    }
}

/// Resource names every container may request (`IsStandardContainerResourceName`).
fn is_standard_container_resource(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage") || name.starts_with("hugepages-")
}

/// Unprefixed resource names the API knows at all (`IsStandardResourceName`).
fn is_standard_resource(name: &str) -> bool {
    const STANDARD: &[&str] = &[
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "storage",
        "requests.storage",
        "services.nodeports",
        "services.loadbalancers",
    ];
    STANDARD.contains(&name)
        || name.starts_with("hugepages-")
        || name.starts_with("requests.hugepages-")
}

/// Resources of the `kubernetes.io` domain or without a domain (`IsNativeResource`).
fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// Vendor resources such as `nvidia.com/gpu` (`IsExtendedResourceName`).
fn is_extended(name: &str) -> bool {
    !is_native(name)
        && !name.starts_with("requests.")
        && qualified_name_errors(&format!("requests.{name}")).is_empty()
}

/// Whether a request may be lower than its limit (`IsOvercommitAllowed`).
fn overcommit_allowed(name: &str) -> bool {
    is_native(name) && !name.starts_with("hugepages-")
}

fn is_integer_resource(name: &str) -> bool {
    const INTEGER: &[&str] = &[
        "pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "services.nodeports",
        "services.loadbalancers",
    ];
    INTEGER.contains(&name) || is_extended(name)
}

fn resource_name(name: &str, path: &str, errors: &mut Vec<FieldError>) {
    let qualified = qualified_name_errors(name);
    let unprefixed = !name.contains('/');
    if !qualified.is_empty() {
        errors.extend(
            qualified
                .into_iter()
                .map(|m| FieldError::invalid(path, name, m)),
        );
    } else if unprefixed && !is_standard_resource(name) {
        errors.push(FieldError::invalid(
            path,
            name,
            "must be a standard resource type or fully qualified",
        ));
    }
    if unprefixed {
        if !is_standard_container_resource(name) {
            errors.push(FieldError::invalid(
                path,
                name,
                "must be a standard resource for containers",
            ));
        }
    } else if !is_native(name) && !is_extended(name) {
        errors.push(FieldError::invalid(
            path,
            name,
            "doesn't follow extended resource name standard",
        ));
    }
}

/// Quantities of a resource list, parsed (decoding has already refused malformed ones).
fn quantities(list: Option<&Value>) -> Vec<(&str, Quantity)> {
    list.and_then(Value::as_object)
        .map(Map::iter)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str(), Quantity::parse(v.as_str()?).ok()?)))
        .collect()
}

fn quantity_value(name: &str, q: &Quantity, path: &str, errors: &mut Vec<FieldError>) {
    if q.is_negative() {
        errors.push(FieldError::invalid(
            path,
            q.canonical(),
            "must be greater than or equal to 0",
        ));
    }
    if is_integer_resource(name) && !q.is_integer() {
        errors.push(FieldError::invalid(
            path,
            q.canonical(),
            "must be an integer",
        ));
    }
}

/// A container's `resources` (`ValidateResourceRequirements`).
pub fn resource_requirements(resources: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let lim_path = child(path, "limits");
    let req_path = child(path, "requests");
    let limits = quantities(resources.get("limits"));
    let requests = quantities(resources.get("requests"));
    let mut compute = false;
    let mut hugepages = false;
    for (name, q) in &limits {
        let at = format!("{lim_path}[{name}]");
        resource_name(name, &at, errors);
        quantity_value(name, q, &at, errors);
        compute |= matches!(*name, "cpu" | "memory");
        hugepages |= name.starts_with("hugepages-");
    }
    for (name, q) in &requests {
        let at = format!("{req_path}[{name}]");
        resource_name(name, &at, errors);
        quantity_value(name, q, &at, errors);
        compute |= matches!(*name, "cpu" | "memory");
        hugepages |= name.starts_with("hugepages-");
        match limits.iter().find(|(n, _)| n == name) {
            Some((_, limit)) if q != limit && !overcommit_allowed(name) => {
                errors.push(FieldError::invalid(
                    &req_path,
                    q.canonical(),
                    format!("must be equal to {name} limit of {}", limit.canonical()),
                ));
            }
            Some((_, limit)) if q > limit => {
                errors.push(FieldError::invalid(
                    &req_path,
                    q.canonical(),
                    format!(
                        "must be less than or equal to {name} limit of {}",
                        limit.canonical()
                    ),
                ));
            }
            Some(_) => {}
            None if !overcommit_allowed(name) => errors.push(FieldError::required(
                &lim_path,
                "Limit must be set for non overcommitable resources",
            )),
            None => {}
        }
    }
    if hugepages && !compute {
        errors.push(FieldError::forbidden(
            path,
            "HugePages require cpu or memory",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors_of(spec: Value) -> Vec<String> {
        let mut errors = Vec::new();
        pod_spec(&spec, "spec", &mut errors);
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn negative_and_excessive_requests_are_refused() {
        let errors = errors_of(json!({"containers": [{"name": "c", "resources": {
            "limits": {"cpu": "-1", "memory": "1Gi"},
            "requests": {"cpu": "-1", "memory": "2Gi"}}}]}));
        assert_eq!(
            errors,
            vec![
                "spec.containers[0].resources.limits[cpu]: Invalid value: \"-1\": must be greater than or equal to 0",
                "spec.containers[0].resources.requests[cpu]: Invalid value: \"-1\": must be greater than or equal to 0",
                "spec.containers[0].resources.requests: Invalid value: \"2Gi\": must be less than or equal to memory limit of 1Gi",
            ]
        );
    }

    #[test]
    fn extended_resources_need_equal_whole_limits() {
        let errors = errors_of(json!({"containers": [{"name": "c", "resources": {
            "requests": {"nvidia.com/gpu": "500m", "example.com/dongle": "1"},
            "limits": {"nvidia.com/gpu": "1"}}}]}));
        assert_eq!(
            errors,
            vec![
                "spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources",
                "spec.containers[0].resources.requests[nvidia.com/gpu]: Invalid value: \"500m\": must be an integer",
                "spec.containers[0].resources.requests: Invalid value: \"500m\": must be equal to nvidia.com/gpu limit of 1",
            ]
        );
    }

    #[test]
    fn containers_names_ports_and_policies() {
        let errors = errors_of(json!({"restartPolicy": "Sometimes", "containers": [
            {"name": "Web", "ports": [{"containerPort": 70000, "protocol": "TCP"}]},
            {"name": "a", "resources": {"requests": {"pods": "1"}}},
            {"name": "a"}]}));
        assert_eq!(errors.len(), 5, "{errors:#?}");
        assert!(errors[0].starts_with(
            "spec.containers[0].name: Invalid value: \"Web\": a lowercase RFC 1123 label"
        ));
        assert_eq!(
            errors[1],
            "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive"
        );
        assert_eq!(
            errors[2],
            "spec.containers[1].resources.requests[pods]: Invalid value: \"pods\": must be a standard resource for containers"
        );
        assert_eq!(errors[3], "spec.containers[2].name: Duplicate value: \"a\"");
        assert!(errors[4].starts_with("spec.restartPolicy: Unsupported value: \"Sometimes\""));
        assert_eq!(
            errors_of(json!({})),
            vec!["spec.containers: Required value"]
        );
    }
}
