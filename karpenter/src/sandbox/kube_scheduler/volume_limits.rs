//! kube-scheduler's NodeVolumeLimits filter for CSI volumes (`nodevolumelimits/csi.go`), for the
//! sandbox's simulated scheduler: a node takes a pod only if, for each CSI driver, the unique
//! volumes already on the node plus the pod's volumes not yet there stay within the driver's
//! `allocatable.count` in the node's CSINode. Volumes on a node are those of the pods bound to
//! it (and placed on it earlier in the pass) and those of its VolumeAttachments. A bound claim
//! counts as its PersistentVolume's `driver`/`volumeHandle`; an unbound claim (or one whose
//! volume is missing) as its StorageClass's provisioner with the claim itself as a placeholder
//! volume; a claim with neither is not counted. A node without a
//! CSINode, or a driver without `allocatable.count`, has no limit. Simplifications: inline
//! (ephemeral) CSI volumes and pods nominated to a node are not counted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::view::ClusterView;
use k8s_openapi::api::core::v1::Pod;

/// kube-scheduler's reason for a node at its volume limit.
pub const MAX_VOLUME_COUNT: &str = "node(s) exceed max volume count";

/// A CSI volume as the filter counts it: driver and a name unique within the driver.
pub type Volume = (String, String);

/// Volumes and limits per node for one scheduling pass.
#[derive(Debug, Default)]
pub struct VolumeLimits {
    /// Node → driver → allocatable count.
    limits: HashMap<String, HashMap<String, i64>>,
    /// Node → volumes on it.
    used: HashMap<String, BTreeSet<Volume>>,
    /// `(namespace, claim)` → the claim's volume, when it resolves to a CSI driver.
    claims: HashMap<(String, String), Volume>,
}

impl VolumeLimits {
    /// Index the view: limits from CSINodes, volumes from bound pods and VolumeAttachments.
    pub fn new(view: &ClusterView) -> VolumeLimits {
        let mut limits: HashMap<String, HashMap<String, i64>> = HashMap::new();
        for c in view.csinodes {
            let Some(node) = c.metadata.name.clone() else {
                continue;
            };
            let drivers = limits.entry(node).or_default();
            for d in &c.spec.drivers {
                if let Some(count) = d.allocatable.as_ref().and_then(|a| a.count) {
                    drivers.insert(d.name.clone(), i64::from(count));
                }
            }
        }
        let handles: HashMap<&str, Volume> = view
            .pvs
            .iter()
            .filter_map(|pv| {
                let csi = pv.spec.as_ref()?.csi.as_ref()?;
                Some((
                    pv.metadata.name.as_deref()?,
                    (csi.driver.clone(), csi.volume_handle.clone()),
                ))
            })
            .collect();
        let provisioners: HashMap<&str, &str> = view
            .storage_classes
            .iter()
            .filter_map(|c| Some((c.metadata.name.as_deref()?, c.provisioner.as_str())))
            .collect();
        let mut claims = HashMap::new();
        for c in view.pvcs {
            let (Some(ns), Some(name)) = (&c.metadata.namespace, &c.metadata.name) else {
                continue;
            };
            let spec = c.spec.as_ref();
            // A bound claim counts as its volume; an unbound one, or one whose volume is
            // missing, as a placeholder of its class's provisioner.
            let volume = spec
                .and_then(|s| s.volume_name.as_deref())
                .filter(|pv| !pv.is_empty())
                .and_then(|pv| handles.get(pv).cloned())
                .or_else(|| {
                    spec.and_then(|s| s.storage_class_name.as_deref())
                        .and_then(|class| provisioners.get(class))
                        .map(|driver| (driver.to_string(), format!("{ns}/{name}")))
                });
            if let Some(v) = volume {
                claims.insert((ns.clone(), name.clone()), v);
            }
        }
        let mut out = VolumeLimits {
            limits,
            used: HashMap::new(),
            claims,
        };
        for pod in view.bound {
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                let volumes = out.of_pod(pod);
                out.used.entry(node).or_default().extend(volumes);
            }
        }
        for a in view.volume_attachments {
            let Some(volume) = a
                .spec
                .source
                .persistent_volume_name
                .as_deref()
                .and_then(|pv| handles.get(pv))
            else {
                continue;
            };
            out.used
                .entry(a.spec.node_name.clone())
                .or_default()
                .insert(volume.clone());
        }
        out
    }

    /// The pod's CSI volumes (from its claims), deduplicated.
    pub fn of_pod(&self, pod: &Pod) -> BTreeSet<Volume> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        pod.spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .filter_map(|c| {
                self.claims
                    .get(&(ns.clone(), c.claim_name.clone()))
                    .cloned()
            })
            .collect()
    }

    /// Whether `node` can take `volumes` within its drivers' limits.
    pub fn fits(&self, node: &str, volumes: &BTreeSet<Volume>) -> bool {
        let empty = BTreeSet::new();
        let used = self.used.get(node).unwrap_or(&empty);
        let mut new: BTreeMap<&str, i64> = BTreeMap::new();
        for v in volumes.iter().filter(|v| !used.contains(*v)) {
            *new.entry(v.0.as_str()).or_default() += 1;
        }
        let Some(limits) = self.limits.get(node) else {
            return true;
        };
        new.iter().all(|(driver, n)| {
            limits.get(*driver).is_none_or(|limit| {
                let attached = used.iter().filter(|v| v.0 == *driver).count() as i64;
                attached + n <= *limit
            })
        })
    }

    /// Record `volumes` on `node` (a pod placed there this pass).
    pub fn add(&mut self, node: &str, volumes: BTreeSet<Volume>) {
        self.used
            .entry(node.to_string())
            .or_default()
            .extend(volumes);
    }
}

/// The pods' volumes, computed once per pending pod.
pub fn pending_volumes(limits: &VolumeLimits, pending: &[Arc<Pod>]) -> Vec<BTreeSet<Volume>> {
    pending.iter().map(|p| limits.of_pod(p)).collect()
}
