//! What a workload gets when it brings no NodePool: upstream's getting-started NodePool and
//! EC2NodeClass (discovering this cluster's subnets and security groups), and the NVIDIA GPU
//! NodePool when it requests `nvidia.com/gpu`.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::manifest::{Manifest, WorkloadError};
use super::parse::parse_yaml;

/// The NodePool and EC2NodeClass created when a workload brings none (upstream's
/// getting-started NodePool: c, m and r types of generation 3 or later).
pub const DEFAULT_NODEPOOL: &str = include_str!("../../../examples/nodepools/default.yaml");
/// The NodePool of NVIDIA GPU types added next to [`DEFAULT_NODEPOOL`] when a workload that
/// brings no NodePool requests `nvidia.com/gpu`.
pub const GPU_NODEPOOL: &str = include_str!("../../../examples/nodepools/gpu.yaml");

/// Resource name NVIDIA GPUs register as.
const NVIDIA_GPU: &str = "nvidia.com/gpu";

/// Add the default NodePool and EC2NodeClass when the manifests bring none (the node class's
/// discovery tags and role point at `cluster_name`), plus the bundled GPU NodePool when they
/// bring no NodePool and request `nvidia.com/gpu` (the default NodePool, upstream's
/// getting-started one, has no GPU types); and order Namespaces first as kubectl apply does.
///
/// Errors: [`WorkloadError::Bundled`] when the bundled defaults are missing (a build defect).
pub fn with_defaults(
    mut manifests: Vec<Manifest>,
    cluster_name: &str,
) -> Result<Vec<Manifest>, WorkloadError> {
    let source = PathBuf::from("<default nodepool>");
    let defaults = parse_yaml(&source, DEFAULT_NODEPOOL)?;
    let gpu = !manifests.iter().any(|m| m.kind() == "NodePool")
        && manifests.iter().any(|m| mentions(&m.object, NVIDIA_GPU));
    for kind in ["NodePool", "EC2NodeClass"] {
        if !manifests.iter().any(|m| m.kind() == kind) {
            let mut m = defaults
                .iter()
                .find(|d| d.kind() == kind)
                .cloned()
                .ok_or_else(|| WorkloadError::Bundled(format!("default {kind} missing")))?;
            retag_discovery(&mut m.object, cluster_name);
            manifests.push(m);
        }
    }
    if gpu {
        let source = PathBuf::from("<gpu nodepool>");
        manifests.extend(parse_yaml(&source, GPU_NODEPOOL)?);
    }
    manifests.sort_by_key(|m| m.kind() != "Namespace");
    Ok(manifests)
}

/// The NodePools of `manifests` whose `nodeClassRef` names an EC2NodeClass that `manifests`
/// do not define, as `(nodepool, node class)` names. Such a NodePool's `NodeClassReady` is
/// `False` until the class is applied, and it launches nothing: `sandbox` warns of each at
/// start, `simulate` refuses the workload.
pub fn missing_node_classes(manifests: &[Manifest]) -> Vec<(String, String)> {
    let name = |m: &Manifest| {
        m.object["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let classes: Vec<String> = manifests
        .iter()
        .filter(|m| m.kind() == "EC2NodeClass")
        .map(name)
        .collect();
    manifests
        .iter()
        .filter(|m| m.kind() == "NodePool")
        .filter_map(|m| {
            let class_ref = &m.object["spec"]["template"]["spec"]["nodeClassRef"];
            let class = class_ref["name"].as_str()?;
            let ours = class_ref["kind"].as_str() == Some("EC2NodeClass");
            (ours && !classes.iter().any(|c| c == class)).then(|| (name(m), class.to_string()))
        })
        .collect()
}

/// Whether `key` is a key of some object inside `value` (e.g. a container's requests or limits).
fn mentions(value: &Value, key: &str) -> bool {
    match value {
        Value::Object(map) => map.contains_key(key) || map.values().any(|v| mentions(v, key)),
        Value::Array(items) => items.iter().any(|v| mentions(v, key)),
        _ => false,
    }
}

/// Point the default EC2NodeClass's discovery selectors and role at this cluster's name.
fn retag_discovery(obj: &mut Value, cluster: &str) {
    for terms in ["subnetSelectorTerms", "securityGroupSelectorTerms"] {
        if let Some(list) = obj
            .pointer_mut(&format!("/spec/{terms}"))
            .and_then(Value::as_array_mut)
        {
            for t in list {
                if t.pointer("/tags/karpenter.sh~1discovery").is_some() {
                    t["tags"]["karpenter.sh/discovery"] = json!(cluster);
                }
            }
        }
    }
    if obj.pointer("/spec/role").is_some() {
        obj["spec"]["role"] = json!(format!("KarpenterNodeRole-{cluster}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{ONLINE_BOUTIQUE, parse_trace};
    use std::path::Path;

    #[test]
    fn bundled_workloads_parse() {
        let ob = parse_yaml(&PathBuf::from("<bundled>"), ONLINE_BOUTIQUE).expect("boutique");
        assert_eq!(ob.iter().filter(|m| m.kind() == "Deployment").count(), 12);
        let np = parse_yaml(&PathBuf::from("<bundled>"), DEFAULT_NODEPOOL).expect("default");
        assert_eq!(
            np.iter().map(Manifest::kind).collect::<Vec<_>>(),
            vec!["NodePool", "EC2NodeClass"]
        );
        let gpu = parse_yaml(&PathBuf::from("<bundled>"), GPU_NODEPOOL).expect("gpu");
        assert_eq!(
            gpu.iter().map(Manifest::kind).collect::<Vec<_>>(),
            vec!["NodePool"]
        );
    }

    fn pools(manifests: &[Manifest]) -> Vec<&str> {
        manifests
            .iter()
            .filter(|m| m.kind() == "NodePool")
            .map(Manifest::name)
            .collect()
    }

    #[test]
    fn gpu_workloads_without_a_nodepool_also_get_the_gpu_nodepool() {
        let boutique = parse_yaml(&PathBuf::from("ob"), ONLINE_BOUTIQUE).expect("ob");
        let out = with_defaults(boutique, "c").expect("defaults");
        assert_eq!(pools(&out), ["default"]);
        let default = out.iter().find(|m| m.kind() == "NodePool").expect("pool");
        let reqs = default.object["spec"]["template"]["spec"]["requirements"].to_string();
        assert!(reqs.contains(r#"["c","m","r"]"#), "{reqs}");
        let class = out
            .iter()
            .find(|m| m.kind() == "EC2NodeClass")
            .expect("class");
        assert_eq!(class.object["spec"]["role"], "KarpenterNodeRole-c");

        let trace = parse_trace(
            &PathBuf::from("t.csv"),
            "name,cpu_milli,memory_mib,num_gpu,pod_phase\nt,1000,1024,1,Running\n",
        )
        .expect("trace");
        assert_eq!(
            pools(&with_defaults(trace.clone(), "c").expect("defaults")),
            ["default", "gpu"]
        );

        let own = parse_yaml(&PathBuf::from("g"), GPU_NODEPOOL).expect("pool");
        let out = with_defaults(trace.into_iter().chain(own).collect(), "c").expect("defaults");
        assert_eq!(
            pools(&out),
            ["gpu"],
            "a workload that brings a NodePool keeps its own"
        );
    }

    #[test]
    fn a_nodepool_naming_a_node_class_the_workload_lacks_is_found() {
        let yaml = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: mine}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: mine}\n      requirements: []\n";
        let manifests = with_defaults(parse_yaml(Path::new("w.yaml"), yaml).expect("parses"), "c")
            .expect("defaults");
        // The default EC2NodeClass is added (the workload brings none), but it is `default`.
        assert_eq!(
            missing_node_classes(&manifests),
            vec![("mine".to_string(), "mine".to_string())]
        );
        let bundled = with_defaults(Vec::new(), "c").expect("defaults");
        assert!(missing_node_classes(&bundled).is_empty());
    }
}
