//! Dynamic provisioning for the EBS driver: the CSI external-provisioner calling the driver's
//! CreateVolume, and the PV controller binding claim and volume. A claim of a StorageClass whose
//! provisioner is `ebs.csi.aws.com` gets a PersistentVolume `pvc-<claim uid>` in one zone —
//! with `WaitForFirstConsumer`, the zone of the node kube-scheduler chose for its first pod (the
//! claim's `volume.kubernetes.io/selected-node`); with `Immediate`, at once, in the class's first
//! allowed zone or else the first zone that has nodes. A claim without a class gets the default
//! class (retroactive default assignment). When a provisioned volume's claim is gone, a `Delete`
//! volume is deleted (once no VolumeAttachment holds it) and a `Retain` one is `Released`.
//! Simplifications: no `pv-protection` or provisioner finalizers, no Events.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{Caches, DRIVER, SELECTED_NODE, ZONE_KEY};
use crate::store::{DeleteOptions, Store, Subresource};

/// The annotation naming a volume's provisioner.
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// The annotation marking the default StorageClass.
pub const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
/// The identity the external-provisioner stamps on the volumes it creates
/// (`<start time ms>-<random>-<driver>`; fixed here).
const PROVISIONER_IDENTITY: &str = "1700000000000-8081-ebs.csi.aws.com";
const GIB: u128 = 1 << 30;

/// The EBS volume id for a claim: `vol-` and 17 hex digits, derived from the claim's uid so a
/// retried provisioning names the same volume.
pub fn volume_id(claim_uid: &str) -> String {
    let digest = Sha256::digest(claim_uid.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("vol-{}", &hex[..17])
}

/// A storage request in bytes (`4Gi`, `500Mi`, `10G`, `1073741824`); `None` when malformed.
fn bytes(quantity: &str) -> Option<u128> {
    let q = quantity.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let factor: u128 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => return None,
    };
    let value: f64 = number.parse().ok()?;
    (value >= 0.0).then(|| (value * factor as f64).ceil() as u128)
}

/// The size the driver creates for a request: EBS sizes are whole GiB, rounded up, at least 1.
pub fn volume_size(request: Option<&str>) -> String {
    let gib = request
        .and_then(bytes)
        .map_or(1, |b| b.div_ceil(GIB).max(1));
    format!("{gib}Gi")
}

/// The PersistentVolume provisioned for `claim` of `class` in `zone`.
pub fn volume_for(claim: &PersistentVolumeClaim, class: &StorageClass, zone: &str) -> Value {
    let meta = &claim.metadata;
    let uid = meta.uid.as_deref().unwrap_or_default();
    let spec = claim.spec.clone().unwrap_or_default();
    let request = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.as_str());
    let fs_type = class
        .parameters
        .as_ref()
        .and_then(|p| p.get("csi.storage.k8s.io/fstype"))
        .cloned()
        .unwrap_or_else(|| "ext4".into());
    json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": format!("pvc-{uid}"),
            "annotations": {PROVISIONED_BY: DRIVER,
                "volume.kubernetes.io/provisioner-deletion-secret-name": "",
                "volume.kubernetes.io/provisioner-deletion-secret-namespace": ""}},
        "spec": {
            "accessModes": spec.access_modes.unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
            "capacity": {"storage": volume_size(request)},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "name": meta.name, "namespace": meta.namespace, "uid": uid,
                "resourceVersion": meta.resource_version},
            "csi": {"driver": DRIVER, "volumeHandle": volume_id(uid), "fsType": fs_type,
                "volumeAttributes": {"storage.kubernetes.io/csiProvisionerIdentity": PROVISIONER_IDENTITY}},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": ZONE_KEY, "operator": "In", "values": [zone]}]}]}},
            "persistentVolumeReclaimPolicy": class.reclaim_policy.as_deref().unwrap_or("Delete"),
            "storageClassName": class.metadata.name,
            "volumeMode": spec.volume_mode.as_deref().unwrap_or("Filesystem"),
        },
    })
}

/// The default StorageClass: the newest of those annotated as default.
fn default_class(classes: &[Arc<StorageClass>]) -> Option<&Arc<StorageClass>> {
    classes
        .iter()
        .filter(|c| {
            c.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_CLASS))
                .is_some_and(|v| v == "true")
        })
        .max_by_key(|c| c.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// Where a claim's volume goes: `Err` with why it must wait.
fn zone_for(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    zones: &HashMap<&str, &str>,
) -> Result<String, &'static str> {
    if class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer") {
        let node = claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SELECTED_NODE))
            .ok_or("waiting for first consumer to be created before binding")?;
        return zones
            .get(node.as_str())
            .map(|z| z.to_string())
            .ok_or("the selected node is gone or has no zone");
    }
    let allowed = class
        .allowed_topologies
        .iter()
        .flatten()
        .flat_map(|t| t.match_label_expressions.iter().flatten())
        .filter(|e| e.key == ZONE_KEY)
        .flat_map(|e| e.values.iter())
        .next();
    if let Some(zone) = allowed {
        return Ok(zone.clone());
    }
    let known: BTreeSet<&str> = zones.values().copied().collect();
    known
        .into_iter()
        .next()
        .map(str::to_string)
        .ok_or("no node reports a zone yet")
}

/// Bind `claim` to volume `pv` (PV controller): the claim's `spec.volumeName` and binding
/// annotations, then both objects' `Bound` phase.
fn bind(store: &Store, claim: &PersistentVolumeClaim, pv: &Value) {
    let (Some(pvcs), Some(pvs)) = (
        store.resource("", "v1", "persistentvolumeclaims"),
        store.resource("", "v1", "persistentvolumes"),
    ) else {
        return;
    };
    let ns = claim.metadata.namespace.as_deref().unwrap_or("default");
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let pv_name = pv["metadata"]["name"].as_str().unwrap_or_default();
    let bound = store.modify(&pvcs, ns, name, Subresource::Main, |c| {
        c["spec"]["volumeName"] = json!(pv_name);
        for (k, v) in [
            ("pv.kubernetes.io/bind-completed", "yes"),
            ("pv.kubernetes.io/bound-by-controller", "yes"),
            ("volume.kubernetes.io/storage-provisioner", DRIVER),
            ("volume.beta.kubernetes.io/storage-provisioner", DRIVER),
        ] {
            c["metadata"]["annotations"][k] = json!(v);
        }
        Ok(())
    });
    if let Err(e) = bound {
        tracing::debug!(claim = %name, error = %e, "binding claim failed");
        return;
    }
    let _ = store.modify(&pvcs, ns, name, Subresource::Status, |c| {
        c["status"] = json!({"phase": "Bound", "accessModes": pv["spec"]["accessModes"],
            "capacity": pv["spec"]["capacity"]});
        Ok(())
    });
    let _ = store.modify(&pvs, "", pv_name, Subresource::Status, |v| {
        v["status"] = json!({"phase": "Bound"});
        Ok(())
    });
}

/// One pass: provision and bind the driver's unbound claims, reclaim volumes whose claims are
/// gone. Returns how many claims were bound.
pub fn pass(store: &Store, nodes: &[Arc<Node>], caches: &mut Caches) -> usize {
    let (Some(pvcs), Some(pvs)) = (
        store.resource("", "v1", "persistentvolumeclaims"),
        store.resource("", "v1", "persistentvolumes"),
    ) else {
        return 0;
    };
    let claims = caches.claims.refresh(store);
    let volumes = caches.volumes.refresh(store);
    let classes = caches.classes.refresh(store);
    let by_name: HashMap<&str, &Arc<StorageClass>> = classes
        .iter()
        .filter_map(|c| Some((c.metadata.name.as_deref()?, c)))
        .collect();
    let zones: HashMap<&str, &str> = nodes
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter_map(|n| {
            let zone = n.metadata.labels.as_ref()?.get(ZONE_KEY)?;
            Some((n.metadata.name.as_deref()?, zone.as_str()))
        })
        .collect();
    let existing: HashMap<&str, &Arc<PersistentVolume>> = volumes
        .iter()
        .filter_map(|v| Some((v.metadata.name.as_deref()?, v)))
        .collect();
    let mut bound = 0;
    for claim in &claims {
        let spec = claim.spec.as_ref();
        let unbound = spec
            .and_then(|s| s.volume_name.as_deref())
            .is_none_or(str::is_empty);
        if !unbound || claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ns = claim.metadata.namespace.as_deref().unwrap_or("default");
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        let class = match spec.and_then(|s| s.storage_class_name.as_deref()) {
            Some("") => continue,
            Some(c) => by_name.get(c).copied(),
            None => {
                let Some(default) = default_class(&classes) else {
                    continue;
                };
                let class_name = default.metadata.name.clone();
                let _ = store.modify(&pvcs, ns, name, Subresource::Main, |c| {
                    c["spec"]["storageClassName"] = json!(class_name);
                    Ok(())
                });
                Some(default)
            }
        };
        let Some(class) = class.filter(|c| c.provisioner == DRIVER) else {
            continue;
        };
        let zone = match zone_for(claim, class, &zones) {
            Ok(z) => z,
            Err(why) => {
                tracing::trace!(claim = %name, why, "not provisioning yet");
                continue;
            }
        };
        let pv = volume_for(claim, class, &zone);
        let pv_name = pv["metadata"]["name"].as_str().unwrap_or_default();
        if !existing.contains_key(pv_name)
            && let Err(e) = store.create(&pvs, "", pv.clone())
        {
            tracing::debug!(claim = %name, error = %e, "provisioning failed");
            continue;
        }
        bind(store, claim, &pv);
        bound += 1;
    }
    reclaim(store, &claims, &volumes, caches);
    bound
}

/// Volumes this driver provisioned whose claim is gone: `Delete` ones are deleted once no
/// VolumeAttachment refers to them; `Retain` ones are marked `Released`.
fn reclaim(
    store: &Store,
    claims: &[Arc<PersistentVolumeClaim>],
    volumes: &[Arc<PersistentVolume>],
    caches: &mut Caches,
) {
    let Some(pvs) = store.resource("", "v1", "persistentvolumes") else {
        return;
    };
    let live: HashSet<&str> = claims
        .iter()
        .filter_map(|c| c.metadata.uid.as_deref())
        .collect();
    let attached: HashSet<String> = caches
        .attachments
        .refresh(store)
        .iter()
        .filter_map(|a| a.spec.source.persistent_volume_name.clone())
        .collect();
    for v in volumes {
        let ours = v
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PROVISIONED_BY))
            .is_some_and(|p| p == DRIVER);
        let spec = v.spec.as_ref();
        let claim_uid = spec
            .and_then(|s| s.claim_ref.as_ref())
            .and_then(|r| r.uid.as_deref());
        let Some(name) = v.metadata.name.as_deref() else {
            continue;
        };
        if !ours
            || claim_uid.is_none_or(|u| live.contains(u))
            || v.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let policy = spec
            .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
            .unwrap_or("Delete");
        if policy == "Delete" {
            if !attached.contains(name) {
                let _ = store.delete(&pvs, "", name, &DeleteOptions::default());
            }
        } else if v.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Released") {
            let _ = store.modify(&pvs, "", name, Subresource::Status, |o| {
                o["status"] = json!({"phase": "Released"});
                Ok(())
            });
        }
    }
}

#[cfg(test)]
#[path = "provisioner_tests.rs"]
mod tests;
