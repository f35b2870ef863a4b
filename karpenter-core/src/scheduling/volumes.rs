//! Volume topology (upstream `provisioning/scheduling/volumetopology.go`): a pod's
//! PersistentVolumeClaims confine it to the zones their volumes live in — a bound
//! PersistentVolume's node affinity, or an unbound claim's StorageClass `allowedTopologies`.
//! Each volume gives requirement alternatives; alternatives of several volumes are combined,
//! keeping only compatible combinations when any exist. The same index names the CSI driver
//! each volume attaches through ([`VolumeIndex::attachments`], for [`super::attach`]).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSelectorTerm, PersistentVolume, PersistentVolumeClaim};

use crate::pod_view::PodView;
use k8s_openapi::api::storage::v1::StorageClass;

use super::attach::Volumes;
use super::requirements::{Requirement, Requirements};

/// PVCs, PVs and StorageClasses indexed for lookups.
#[derive(Clone, Debug, Default)]
pub struct VolumeIndex {
    claims: HashMap<(String, String), (Option<String>, Option<String>)>,
    volumes: HashMap<String, Vec<Requirements>>,
    classes: HashMap<String, Vec<Requirements>>,
    /// PersistentVolume name → its `spec.csi.driver`.
    drivers: HashMap<String, String>,
    /// StorageClass name → its `provisioner`.
    provisioners: HashMap<String, String>,
}

fn term_requirements(term: &NodeSelectorTerm) -> Requirements {
    let mut r = Requirements::new();
    for e in term.match_expressions.iter().flatten() {
        if let Ok(req) = Requirement::from_node_selector(e) {
            r.add(req);
        }
    }
    r
}

impl VolumeIndex {
    /// Index the cluster's claims, volumes and classes.
    pub fn new(
        claims: &[Arc<PersistentVolumeClaim>],
        volumes: &[Arc<PersistentVolume>],
        classes: &[Arc<StorageClass>],
    ) -> VolumeIndex {
        let claims = claims
            .iter()
            .filter_map(|c| {
                let key = (c.metadata.namespace.clone()?, c.metadata.name.clone()?);
                let spec = c.spec.as_ref();
                let volume = spec
                    .and_then(|s| s.volume_name.clone())
                    .filter(|v| !v.is_empty());
                let class = spec
                    .and_then(|s| s.storage_class_name.clone())
                    .filter(|v| !v.is_empty());
                Some((key, (volume, class)))
            })
            .collect();
        let drivers = volumes
            .iter()
            .filter_map(|v| {
                let csi = v.spec.as_ref()?.csi.as_ref()?;
                Some((v.metadata.name.clone()?, csi.driver.clone()))
            })
            .collect();
        let provisioners = classes
            .iter()
            .filter_map(|c| Some((c.metadata.name.clone()?, c.provisioner.clone())))
            .collect();
        let volumes = volumes
            .iter()
            .filter_map(|v| {
                let terms = v
                    .spec
                    .as_ref()?
                    .node_affinity
                    .as_ref()?
                    .required
                    .as_ref()?
                    .node_selector_terms
                    .iter()
                    .map(term_requirements)
                    .collect();
                Some((v.metadata.name.clone()?, terms))
            })
            .collect();
        let classes = classes
            .iter()
            .filter_map(|c| {
                let alts: Vec<Requirements> = c
                    .allowed_topologies
                    .iter()
                    .flatten()
                    .map(|t| {
                        let mut r = Requirements::new();
                        for e in t.match_label_expressions.iter().flatten() {
                            r.add(Requirement::is_in(&e.key, e.values.iter().cloned()));
                        }
                        r
                    })
                    .filter(|r| !r.is_empty())
                    .collect();
                Some((c.metadata.name.clone()?, alts))
            })
            .collect();
        VolumeIndex {
            claims,
            volumes,
            classes,
            drivers,
            provisioners,
        }
    }

    /// The volumes the pod attaches, per CSI driver (upstream `VolumeUsage.validate`): each
    /// PersistentVolumeClaim, named `namespace/claim`, and each generic ephemeral volume, named
    /// as the claim Kubernetes creates for it (`namespace/<pod>-<volume>`). The driver is the
    /// bound PersistentVolume's `spec.csi.driver`, else the claim's StorageClass
    /// `provisioner`; a volume with neither (not CSI, or not known yet) is not counted.
    pub fn attachments(&self, pod: &PodView) -> Volumes {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        let mut out = Volumes::default();
        for vol in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            let (claim, template_class) = if let Some(c) = vol.persistent_volume_claim.as_ref() {
                (c.claim_name.clone(), None)
            } else if let Some(e) = vol.ephemeral.as_ref() {
                let class = e
                    .volume_claim_template
                    .as_ref()
                    .and_then(|t| t.spec.storage_class_name.clone());
                (format!("{pod_name}-{}", vol.name), class)
            } else {
                continue;
            };
            let (volume, class) = match self.claims.get(&(ns.to_string(), claim.clone())) {
                Some((v, c)) => (v.clone(), c.clone()),
                None => (None, template_class),
            };
            let driver = volume
                .and_then(|v| self.drivers.get(&v))
                .or_else(|| class.and_then(|c| self.provisioners.get(&c)))
                .filter(|d| !d.is_empty());
            if let Some(driver) = driver {
                out.insert(driver, format!("{ns}/{claim}"));
            }
        }
        out
    }

    /// Requirement alternatives the pod's volumes impose (empty when they impose none).
    pub fn requirements(&self, pod: &PodView) -> Vec<Requirements> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let mut alternatives: Vec<Requirements> = vec![Requirements::new()];
        let mut constrained = false;
        for vol in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            let Some(claim) = vol.persistent_volume_claim.as_ref() else {
                continue;
            };
            let Some((volume, class)) = self.claims.get(&(ns.clone(), claim.claim_name.clone()))
            else {
                continue;
            };
            let alts = match (volume, class) {
                (Some(v), _) => self.volumes.get(v).cloned().unwrap_or_default(),
                (None, Some(c)) => self.classes.get(c).cloned().unwrap_or_default(),
                (None, None) => Vec::new(),
            };
            if alts.is_empty() {
                continue;
            }
            constrained = true;
            alternatives = merge(&alternatives, &alts);
        }
        if constrained {
            alternatives
        } else {
            Vec::new()
        }
    }
}

fn merge(existing: &[Requirements], volume: &[Requirements]) -> Vec<Requirements> {
    let combine = |only_compatible: bool| -> Vec<Requirements> {
        let mut out = Vec::new();
        for e in existing {
            for v in volume {
                if only_compatible && e.intersects(v).is_err() {
                    continue;
                }
                let mut m = e.clone();
                m.add_all(v);
                out.push(m);
            }
        }
        out
    };
    let compatible = combine(true);
    if compatible.is_empty() {
        combine(false)
    } else {
        compatible
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bound_volumes_and_storage_classes_pin_zones() {
        let pvc = |name: &str, spec: serde_json::Value| -> Arc<PersistentVolumeClaim> {
            Arc::new(
                serde_json::from_value(
                    json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
                )
                .expect("pvc"),
            )
        };
        let claims = vec![
            pvc("bound", json!({"volumeName": "pv-a"})),
            pvc("pending", json!({"storageClassName": "zonal"})),
        ];
        let volumes: Vec<Arc<PersistentVolume>> = vec![Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "pv-a"}, "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}]}]}}}}))
            .expect("pv"),
        )];
        let classes: Vec<Arc<StorageClass>> = vec![Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "zonal"}, "provisioner": "ebs.csi.aws.com", "allowedTopologies": [
                {"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["us-east-1a", "us-east-1b"]}]}]}))
            .expect("sc"),
        )];
        let index = VolumeIndex::new(&claims, &volumes, &classes);
        let pod = |claim: &str| -> PodView {
            testutil::pod("p")
                .spec(json!({"containers": [],
                    "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]}))
                .decode()
        };
        let bound = index.requirements(&pod("bound"));
        assert_eq!(bound.len(), 1);
        assert_eq!(
            bound[0]
                .get("topology.kubernetes.io/zone")
                .and_then(|r| r.single_value()),
            Some("us-east-1a")
        );
        let pending = index.requirements(&pod("pending"));
        assert!(
            pending[0]
                .get("topology.kubernetes.io/zone")
                .is_some_and(|r| r.has("us-east-1b"))
        );
        assert!(index.requirements(&pod("unknown")).is_empty());
    }

    #[test]
    fn attachments_name_each_claim_once_under_its_csi_driver() {
        let claims: Vec<Arc<PersistentVolumeClaim>> = [
            json!({"metadata": {"name": "bound", "namespace": "db"}, "spec": {"volumeName": "pv-csi"}}),
            json!({"metadata": {"name": "intree", "namespace": "db"}, "spec": {"volumeName": "pv-intree"}}),
            json!({"metadata": {"name": "pending", "namespace": "db"}, "spec": {"storageClassName": "gp3"}}),
            json!({"metadata": {"name": "nfs", "namespace": "db"}, "spec": {"storageClassName": "nfs"}}),
        ]
        .into_iter()
        .map(|c| Arc::new(serde_json::from_value(c).expect("pvc")))
        .collect();
        let volumes: Vec<Arc<PersistentVolume>> = [
            json!({"metadata": {"name": "pv-csi"}, "spec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}}}),
            json!({"metadata": {"name": "pv-intree"}, "spec": {"hostPath": {"path": "/x"}}}),
        ]
        .into_iter()
        .map(|v| Arc::new(serde_json::from_value(v).expect("pv")))
        .collect();
        let classes: Vec<Arc<StorageClass>> = [
            json!({"metadata": {"name": "gp3"}, "provisioner": "ebs.csi.aws.com"}),
            json!({"metadata": {"name": "nfs"}, "provisioner": "example.com/nfs"}),
        ]
        .into_iter()
        .map(|c| Arc::new(serde_json::from_value(c).expect("sc")))
        .collect();
        let index = VolumeIndex::new(&claims, &volumes, &classes);
        let pod = testutil::pod("db-0")
            .namespace("db")
            .spec(json!({"containers": [], "volumes": [
                {"name": "a", "persistentVolumeClaim": {"claimName": "bound"}},
                {"name": "b", "persistentVolumeClaim": {"claimName": "bound"}},
                {"name": "c", "persistentVolumeClaim": {"claimName": "intree"}},
                {"name": "d", "persistentVolumeClaim": {"claimName": "pending"}},
                {"name": "e", "persistentVolumeClaim": {"claimName": "nfs"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "gp3"}}}},
                {"name": "tmp", "emptyDir": {}}
            ]}))
            .decode();
        let v = index.attachments(&pod);
        assert_eq!(
            v.count("ebs.csi.aws.com"),
            3,
            "bound, pending, scratch: {v:?}"
        );
        assert_eq!(v.count("example.com/nfs"), 1);
        let mut expected = Volumes::default();
        for id in ["db/bound", "db/pending", "db/db-0-scratch"] {
            expected.insert("ebs.csi.aws.com", id.to_string());
        }
        expected.insert("example.com/nfs", "db/nfs".to_string());
        assert_eq!(v, expected);
    }
}
