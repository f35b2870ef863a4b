//! The simulated EBS CSI driver (`ebs.csi.aws.com`) and the Kubernetes machinery around it: the
//! node plugin's registration (a `CSINode` per Node, with the instance's volume attachment limit),
//! dynamic provisioning and claim binding ([`provisioner`]), and attach/detach
//! ([`attacher`]). This module holds what they share — the driver's names, how a pod's claims
//! resolve to CSI volumes — and runs the three in one loop, in the order a volume moves through
//! them.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttachment};

use super::{TypedCache, key, run_passes};
use crate::store::Store;

pub mod attacher;
#[cfg(any(test, feature = "testing"))]
pub mod fixtures;
pub mod provisioner;

/// The driver's name, as StorageClasses (`provisioner`), PersistentVolumes (`spec.csi.driver`),
/// VolumeAttachments (`spec.attacher`) and CSINodes name it.
pub const DRIVER: &str = "ebs.csi.aws.com";
/// The topology key the driver reports and puts in its volumes' node affinity.
pub const ZONE_KEY: &str = "topology.kubernetes.io/zone";
/// The finalizer the CSI external-attacher puts on the VolumeAttachments it handles
/// (`external-attacher/<driver with dots as dashes>`).
pub const ATTACHER_FINALIZER: &str = "external-attacher/ebs-csi-aws-com";
/// The annotation kube-scheduler's VolumeBinding plugin sets on a `WaitForFirstConsumer` claim:
/// the node chosen for its first pod, in whose zone the volume is provisioned.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// The name kubelet and the attach/detach controller give a CSI volume's VolumeAttachment:
/// `csi-` and the hex SHA-256 of volume handle, driver and node name concatenated (Kubernetes'
/// `csi_attacher.go` `getAttachmentName`).
pub fn attachment_name(volume_handle: &str, driver: &str, node: &str) -> String {
    let digest = Sha256::digest(format!("{volume_handle}{driver}{node}").as_bytes());
    let mut out = String::with_capacity(4 + 64);
    out.push_str("csi-");
    for b in digest.iter() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The name a node reports for an attached CSI volume in `status.volumesAttached` and
/// `status.volumesInUse`: `kubernetes.io/csi/<driver>^<volume handle>`.
pub fn unique_volume_name(driver: &str, volume_handle: &str) -> String {
    format!("kubernetes.io/csi/{driver}^{volume_handle}")
}

/// A CSI PersistentVolume as the attach side needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct CsiVolume {
    /// The PersistentVolume's name.
    pub pv: String,
    /// `spec.csi.driver`.
    pub driver: String,
    /// `spec.csi.volumeHandle` (for EBS, the volume id `vol-...`).
    pub handle: String,
    /// Whether the volume may be attached to several nodes at once (`ReadWriteMany` or
    /// `ReadOnlyMany`); EBS volumes are `ReadWriteOnce`.
    pub multi_attach: bool,
}

/// What stands between a pod and one of its claim volumes being usable.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimVolume {
    /// The claim is bound to a CSI volume.
    Csi(CsiVolume),
    /// The claim is bound to a volume of another kind (nothing to attach).
    Other,
    /// The claim does not exist or is not bound yet.
    Unbound,
}

/// Claims and volumes indexed for resolving pods' volumes.
#[derive(Debug, Default)]
pub struct Claims {
    /// `(namespace, claim)` → the bound volume's name, if bound.
    bound: HashMap<(String, String), Option<String>>,
    /// PersistentVolume name → its CSI source, if any.
    volumes: HashMap<String, Option<CsiVolume>>,
}

impl Claims {
    /// Index the cluster's claims and volumes.
    pub fn new(claims: &[Arc<PersistentVolumeClaim>], volumes: &[Arc<PersistentVolume>]) -> Self {
        let bound = claims
            .iter()
            .filter_map(|c| {
                let key = (c.metadata.namespace.clone()?, c.metadata.name.clone()?);
                let volume = c
                    .spec
                    .as_ref()
                    .and_then(|s| s.volume_name.clone())
                    .filter(|v| !v.is_empty());
                Some((key, volume))
            })
            .collect();
        let volumes = volumes
            .iter()
            .filter_map(|v| {
                let name = v.metadata.name.clone()?;
                let spec = v.spec.as_ref();
                let csi = spec.and_then(|s| s.csi.as_ref()).map(|c| CsiVolume {
                    pv: name.clone(),
                    driver: c.driver.clone(),
                    handle: c.volume_handle.clone(),
                    multi_attach: spec.and_then(|s| s.access_modes.as_ref()).is_some_and(|m| {
                        m.iter()
                            .any(|m| m == "ReadWriteMany" || m == "ReadOnlyMany")
                    }),
                });
                Some((name, csi))
            })
            .collect();
        Claims { bound, volumes }
    }

    /// Each of the pod's claim volumes (`spec.volumes[].persistentVolumeClaim`), resolved.
    pub fn of_pod(&self, pod: &Pod) -> Vec<ClaimVolume> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        pod.spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .map(|c| {
                match self
                    .bound
                    .get(&(ns.clone(), c.claim_name.clone()))
                    .cloned()
                    .flatten()
                {
                    None => ClaimVolume::Unbound,
                    Some(pv) => match self.volumes.get(&pv) {
                        Some(Some(csi)) => ClaimVolume::Csi(csi.clone()),
                        Some(None) => ClaimVolume::Other,
                        None => ClaimVolume::Unbound,
                    },
                }
            })
            .collect()
    }
}

/// The instance id in a providerID `aws:///<zone>/<instance-id>`.
fn instance_id(provider_id: &str) -> Option<&str> {
    provider_id
        .rsplit('/')
        .next()
        .filter(|id| !id.is_empty() && provider_id.starts_with("aws://"))
}

fn node_ready(node: &Node) -> bool {
    node.metadata.deletion_timestamp.is_none()
        && node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The CSINode the driver's node plugin registers for `node` (via kubelet's plugin
/// registration): owned by the Node (so it goes with it), with the driver's node id (the
/// instance id), its topology key, and `allocatable.count` from `attach_limit` of the node's
/// `node.kubernetes.io/instance-type` (omitted when unknown: kube-scheduler then enforces no
/// limit). `None` for a node whose providerID is not an AWS one.
pub fn csinode_for(node: &Node, attach_limit: fn(&str) -> Option<i32>) -> Option<Value> {
    let name = node.metadata.name.as_deref()?;
    let uid = node.metadata.uid.as_deref().unwrap_or_default();
    let id = instance_id(node.spec.as_ref()?.provider_id.as_deref()?)?;
    let mut driver = json!({"name": DRIVER, "nodeID": id, "topologyKeys": [ZONE_KEY]});
    let instance_type = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("node.kubernetes.io/instance-type"));
    if let Some(count) = instance_type.and_then(|t| attach_limit(t)) {
        driver["allocatable"] = json!({"count": count});
    }
    Some(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": name,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}]},
        "spec": {"drivers": [driver]},
    }))
}

/// Register the driver on every Ready node that has no CSINode entry for it yet. Returns how
/// many CSINodes were created or updated.
pub fn register_nodes(
    store: &Store,
    nodes: &[Arc<Node>],
    attach_limit: fn(&str) -> Option<i32>,
) -> usize {
    let Some(rt) = store.resource("storage.k8s.io", "v1", "csinodes") else {
        return 0;
    };
    let mut written = 0;
    for node in nodes.iter().filter(|n| node_ready(n)) {
        let Some(csinode) = csinode_for(node, attach_limit) else {
            continue;
        };
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let driver = csinode["spec"]["drivers"][0].clone();
        let result = match store.get(&rt, "", name) {
            Err(_) => store.create(&rt, "", csinode).map(|_| ()),
            Ok(existing) if has_driver(&existing) => continue,
            Ok(_) => store
                .modify(&rt, "", name, crate::store::Subresource::Main, |o| {
                    if !o["spec"]["drivers"].is_array() {
                        o["spec"]["drivers"] = json!([]);
                    }
                    if let Some(ds) = o["spec"]["drivers"].as_array_mut() {
                        ds.push(driver);
                    }
                    Ok(())
                })
                .map(|_| ()),
        };
        match result {
            Ok(()) => written += 1,
            Err(e) => {
                tracing::debug!(node = %name, error = %e, "registering the CSI driver failed")
            }
        }
    }
    written
}

fn has_driver(csinode: &Value) -> bool {
    csinode["spec"]["drivers"]
        .as_array()
        .is_some_and(|ds| ds.iter().any(|d| d["name"] == DRIVER))
}

/// The storage actors' informer caches.
pub struct Caches {
    /// Nodes (zones, registration).
    pub nodes: TypedCache<Node>,
    /// Pods (who uses which claim where).
    pub pods: TypedCache<Pod>,
    /// PersistentVolumeClaims.
    pub claims: TypedCache<PersistentVolumeClaim>,
    /// PersistentVolumes.
    pub volumes: TypedCache<PersistentVolume>,
    /// StorageClasses.
    pub classes: TypedCache<StorageClass>,
    /// VolumeAttachments.
    pub attachments: TypedCache<VolumeAttachment>,
}

impl Default for Caches {
    fn default() -> Self {
        Caches {
            nodes: TypedCache::new(key("", "nodes")),
            pods: TypedCache::new(key("", "pods")),
            claims: TypedCache::new(key("", "persistentvolumeclaims")),
            volumes: TypedCache::new(key("", "persistentvolumes")),
            classes: TypedCache::new(key("storage.k8s.io", "storageclasses")),
            attachments: TypedCache::new(key("storage.k8s.io", "volumeattachments")),
        }
    }
}

/// The storage actors: the driver's node registration, provisioner and attacher.
pub struct Storage {
    attach_limit: fn(&str) -> Option<i32>,
    caches: Caches,
}

impl Storage {
    /// Storage actors reporting `attach_limit(instance type)` as each node's attachable count.
    pub fn new(attach_limit: fn(&str) -> Option<i32>) -> Self {
        Storage {
            attach_limit,
            caches: Caches::default(),
        }
    }

    /// One pass: register nodes, provision and bind claims, then attach and detach.
    pub fn pass(&mut self, store: &Store) {
        let nodes = self.caches.nodes.refresh(store);
        register_nodes(store, &nodes, self.attach_limit);
        provisioner::pass(store, &nodes, &mut self.caches);
        attacher::pass(store, &mut self.caches);
    }
}

/// Run the storage actors until the store goes away.
pub async fn run(store: Arc<Store>, attach_limit: fn(&str) -> Option<i32>) {
    let s = Storage::new(attach_limit);
    let interest = [
        key("", "nodes"),
        key("", "pods"),
        key("", "persistentvolumeclaims"),
        key("", "persistentvolumes"),
        key("storage.k8s.io", "storageclasses"),
        key("storage.k8s.io", "volumeattachments"),
    ];
    run_passes(store, "storage actors", &interest, s, |c, s| c.pass(s)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachment_names_are_kubernetes_sha256_names() {
        let name = attachment_name("vol-0abc", DRIVER, "ip-10-0-0-1.ec2.internal");
        assert_eq!(name.len(), 4 + 64);
        assert!(name.starts_with("csi-"));
        assert_ne!(
            name,
            attachment_name("vol-0abc", DRIVER, "ip-10-0-0-2.ec2.internal")
        );
        // sha256("") is well known; an empty triple hashes to it.
        assert_eq!(
            attachment_name("", "", ""),
            "csi-e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn csinode_carries_instance_id_zone_key_and_the_limit() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "uid": "u1",
                "labels": {"node.kubernetes.io/instance-type": "m5.large"}},
            "spec": {"providerID": "aws:///us-east-1a/i-0123"},
        }))
        .expect("node");
        let c = csinode_for(&node, |t| (t == "m5.large").then_some(26)).expect("csinode");
        assert_eq!(
            c["spec"]["drivers"],
            json!([{"name": DRIVER, "nodeID": "i-0123", "topologyKeys": [ZONE_KEY],
                "allocatable": {"count": 26}}])
        );
        assert_eq!(c["metadata"]["ownerReferences"][0]["uid"], "u1");
        let unknown = csinode_for(&node, |_| None).expect("csinode");
        assert!(unknown["spec"]["drivers"][0]["allocatable"].is_null());
        let mut kind_node = node.clone();
        kind_node.spec = Some(Default::default());
        assert!(csinode_for(&kind_node, |_| None).is_none());
    }
}
