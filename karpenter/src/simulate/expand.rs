//! Workload manifests (as the workload reader admitted them) turned into what a simulation
//! needs, without a cluster: pods (bare pods,
//! and the replicas of Deployments, ReplicaSets, StatefulSets and Jobs, with the API server's
//! defaults applied), DaemonSets (per-node overhead), NodePools, EC2NodeClasses, NodeOverlays,
//! Namespaces and the volume objects (PersistentVolumeClaims, PersistentVolumes, StorageClasses) that confine a
//! pod's zone.

use std::collections::BTreeMap;
use std::sync::Arc;

use crds::{EC2NodeClass, NodeOverlay, NodePool};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use sandbox::admission;
use sandbox::registry::Registry;
use serde_json::{Value, json};

use crate::workload::Manifest;

/// A manifest that cannot be expanded: where it is (file and document) and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ManifestError(pub String);

/// The simulation's view of a workload.
#[derive(Clone, Debug, Default)]
pub struct Expanded {
    /// Pods to schedule.
    pub pods: Vec<Pod>,
    /// DaemonSets (their pods run on every compatible node).
    pub daemonsets: Vec<Arc<DaemonSet>>,
    /// The workload's NodePools (the bundled default when it brings none).
    pub nodepools: Vec<Arc<NodePool>>,
    /// The workload's EC2NodeClasses (the bundled default when it brings none); their subnets
    /// choose the zones offered.
    pub nodeclasses: Vec<Arc<EC2NodeClass>>,
    /// The workload's NodeOverlays (applied only with the `NodeOverlay` feature gate).
    pub nodeoverlays: Vec<Arc<NodeOverlay>>,
    /// Namespaces (with labels) the workload defines, plus `default`.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// The workload's PersistentVolumeClaims: with PVs and StorageClasses, their pods' zones.
    pub pvcs: Vec<Arc<PersistentVolumeClaim>>,
    /// The workload's PersistentVolumes (a bound volume's node affinity confines its pods).
    pub pvs: Vec<Arc<PersistentVolume>>,
    /// The workload's StorageClasses (`allowedTopologies` confine an unbound claim's pods).
    pub storage_classes: Vec<Arc<StorageClass>>,
}

fn typed<T: serde::de::DeserializeOwned>(m: &Manifest) -> Result<T, ManifestError> {
    serde_json::from_value(m.object.clone())
        .map_err(|e| ManifestError(format!("{}: {e}", m.location())))
}

/// A pod from a template, named `<owner>-<i>`, with the API server's defaults.
fn pod_from(
    template: &Value,
    namespace: &str,
    name: &str,
    uid: &str,
    registry: &Registry,
) -> Result<Pod, ManifestError> {
    let mut obj = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid,
            "labels": template.pointer("/metadata/labels").cloned().unwrap_or(json!({}))},
        "spec": template.get("spec").cloned().unwrap_or(json!({})),
    });
    if let Some(rt) = registry.get("", "v1", "pods") {
        admission::on_create(rt, &mut obj)
            .map_err(|e| ManifestError(format!("pod {name}: {e}")))?;
    }
    serde_json::from_value(obj).map_err(|e| ManifestError(format!("pod {name}: {e}")))
}

/// Expand manifests.
///
/// Errors: a NodePool, EC2NodeClass, NodeOverlay, DaemonSet, pod or volume object that does not
/// deserialize.
pub fn expand(manifests: &[Manifest]) -> Result<Expanded, ManifestError> {
    let registry = Registry::default();
    let mut x = Expanded::default();
    x.namespaces.insert(
        "default".into(),
        [(
            "kubernetes.io/metadata.name".to_string(),
            "default".to_string(),
        )]
        .into(),
    );
    for m in manifests {
        let ns = m
            .object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        let name = m
            .object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        match (m.api_version(), m.kind()) {
            ("v1", "Pod") => {
                let template = json!({"metadata": m.object["metadata"], "spec": m.object["spec"]});
                let uid = format!("{}-{}", m.source.display(), m.index);
                x.pods
                    .push(pod_from(&template, &ns, &name, &uid, &registry)?);
            }
            ("apps/v1", "Deployment" | "ReplicaSet" | "StatefulSet") | ("batch/v1", "Job") => {
                let count = m
                    .object
                    .pointer("/spec/replicas")
                    .or_else(|| m.object.pointer("/spec/parallelism"))
                    .and_then(Value::as_i64)
                    .unwrap_or(1);
                let template = m
                    .object
                    .pointer("/spec/template")
                    .cloned()
                    .unwrap_or(json!({}));
                for i in 0..count.max(0) {
                    let pod_name = format!("{name}-{i}");
                    let uid = format!("{ns}/{pod_name}");
                    x.pods
                        .push(pod_from(&template, &ns, &pod_name, &uid, &registry)?);
                }
            }
            ("apps/v1", "DaemonSet") => x.daemonsets.push(Arc::new(typed(m)?)),
            ("karpenter.sh/v1", "NodePool") => x.nodepools.push(Arc::new(typed(m)?)),
            ("karpenter.k8s.aws/v1", "EC2NodeClass") => x.nodeclasses.push(Arc::new(typed(m)?)),
            ("karpenter.sh/v1alpha1", "NodeOverlay") => x.nodeoverlays.push(Arc::new(typed(m)?)),
            ("v1", "PersistentVolumeClaim") => {
                let mut pvc: PersistentVolumeClaim = typed(m)?;
                pvc.metadata.namespace = Some(ns.clone());
                x.pvcs.push(Arc::new(pvc));
            }
            ("v1", "PersistentVolume") => x.pvs.push(Arc::new(typed(m)?)),
            ("storage.k8s.io/v1", "StorageClass") => x.storage_classes.push(Arc::new(typed(m)?)),
            ("v1", "Namespace") => {
                let mut labels: BTreeMap<String, String> = serde_json::from_value(
                    m.object
                        .pointer("/metadata/labels")
                        .cloned()
                        .unwrap_or(json!({})),
                )
                .unwrap_or_default();
                labels.insert("kubernetes.io/metadata.name".into(), name.clone());
                x.namespaces.insert(name, labels);
            }
            _ => {}
        }
    }
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{ONLINE_BOUTIQUE, parse_yaml};
    use std::path::Path;

    #[test]
    fn deployments_expand_to_defaulted_replicas() {
        let ms = parse_yaml(Path::new("ob.yaml"), ONLINE_BOUTIQUE).expect("parses");
        let x = expand(&ms).expect("expands");
        assert_eq!(x.pods.len(), 12);
        let frontend = x
            .pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some("frontend-0"))
            .expect("frontend");
        assert_eq!(
            frontend
                .spec
                .as_ref()
                .and_then(|s| s.scheduler_name.as_deref()),
            Some("default-scheduler")
        );
        assert_eq!(
            frontend
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .map(String::as_str),
            Some("frontend")
        );
    }
}
