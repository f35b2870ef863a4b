//! Attach and detach: kube-controller-manager's attach/detach controller and the CSI
//! external-attacher with the EBS driver's ControllerPublish/Unpublish. Every CSI volume of the
//! driver used by a pod bound to a node (and not terminated) gets a VolumeAttachment
//! `csi-<sha256(handle, driver, node)>` (`spec.attacher`, `spec.nodeName`,
//! `spec.source.persistentVolumeName`); the attacher puts its finalizer on it and reports it
//! `attached` with a device path. A ReadWriteOnce volume still attached to another node is not
//! attached to a second one (the controller's Multi-Attach rule) until that attachment is gone.
//! When no such pod on the node uses the volume any more, the controller deletes the attachment
//! and the attacher detaches (removes its finalizer) in the same pass — a deterministic detach
//! step. Nodes report `status.volumesAttached` and `status.volumesInUse`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use serde_json::json;

use super::{
    ATTACHER_FINALIZER, Caches, ClaimVolume, Claims, CsiVolume, DRIVER, attachment_name,
    unique_volume_name,
};
use crate::store::{DeleteOptions, Store, Subresource};

/// A pod that holds its volumes: bound to a node and not Succeeded or Failed.
fn holds_volumes(pod: &Pod) -> Option<&str> {
    let node = pod
        .spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())?;
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    (!matches!(phase, Some("Succeeded" | "Failed"))).then_some(node)
}

/// The attachments the cluster needs now: by attachment name, the volume and the node.
pub fn desired(pods: &[Arc<Pod>], claims: &Claims) -> BTreeMap<String, (CsiVolume, String)> {
    let mut out = BTreeMap::new();
    for pod in pods {
        let Some(node) = holds_volumes(pod) else {
            continue;
        };
        for v in claims.of_pod(pod) {
            if let ClaimVolume::Csi(csi) = v
                && csi.driver == DRIVER
            {
                let name = attachment_name(&csi.handle, &csi.driver, node);
                out.insert(name, (csi, node.to_string()));
            }
        }
    }
    out
}

/// The EBS device name for the `n`th attachment on a node: `/dev/xvdaa`, `/dev/xvdab`, ...
fn device_path(n: usize) -> String {
    let letters = b"abcdefghijklmnopqrstuvwxyz";
    format!(
        "/dev/xvd{}{}",
        letters[(n / 26) % 26] as char,
        letters[n % 26] as char
    )
}

/// One pass: create the attachments that are needed, delete the others, complete attach and
/// detach, and report attached volumes on the nodes. Returns (attached, detached) counts.
pub fn pass(store: &Store, caches: &mut Caches) -> (usize, usize) {
    let Some(rt) = store.resource("storage.k8s.io", "v1", "volumeattachments") else {
        return (0, 0);
    };
    let pods = caches.pods.refresh(store);
    let claims = Claims::new(
        &caches.claims.refresh(store),
        &caches.volumes.refresh(store),
    );
    let want = desired(&pods, &claims);
    let existing = caches.attachments.refresh(store);
    let ours: Vec<&Arc<VolumeAttachment>> = existing
        .iter()
        .filter(|a| a.spec.attacher == DRIVER)
        .collect();
    let names: BTreeSet<&str> = ours
        .iter()
        .filter_map(|a| a.metadata.name.as_deref())
        .collect();
    // Attach/detach controller: delete what is no longer needed ...
    for a in &ours {
        let Some(name) = a.metadata.name.as_deref() else {
            continue;
        };
        if !want.contains_key(name) && a.metadata.deletion_timestamp.is_none() {
            let _ = store.delete(&rt, "", name, &DeleteOptions::default());
        }
    }
    // ... and create what is, unless a single-node volume is still attached elsewhere.
    for (name, (volume, node)) in &want {
        if names.contains(name.as_str()) {
            continue;
        }
        let elsewhere = ours.iter().any(|a| {
            a.spec.source.persistent_volume_name.as_deref() == Some(volume.pv.as_str())
                && a.spec.node_name != *node
        });
        if elsewhere && !volume.multi_attach {
            tracing::debug!(volume = %volume.pv, node = %node, "Multi-Attach: volume is still attached to another node");
            continue;
        }
        let va = json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
            "metadata": {"name": name},
            "spec": {"attacher": DRIVER, "nodeName": node,
                "source": {"persistentVolumeName": volume.pv}},
        });
        if let Err(e) = store.create(&rt, "", va) {
            tracing::debug!(attachment = %name, error = %e, "creating volumeattachment failed");
        }
    }
    let (attached, detached) = external_attacher(store, caches);
    report_on_nodes(store, caches, &want);
    (attached, detached)
}

/// The external-attacher: attach new attachments (finalizer, then `status.attached` and the
/// device path) and finish detaching deleted ones (remove the finalizer).
fn external_attacher(store: &Store, caches: &mut Caches) -> (usize, usize) {
    let Some(rt) = store.resource("storage.k8s.io", "v1", "volumeattachments") else {
        return (0, 0);
    };
    let all = caches.attachments.refresh(store);
    let ours: Vec<&Arc<VolumeAttachment>> =
        all.iter().filter(|a| a.spec.attacher == DRIVER).collect();
    let mut per_node: HashMap<&str, usize> = HashMap::new();
    let (mut attached, mut detached) = (0, 0);
    for a in ours {
        let Some(name) = a.metadata.name.as_deref() else {
            continue;
        };
        let slot = per_node.entry(a.spec.node_name.as_str()).or_default();
        let device = device_path(*slot);
        *slot += 1;
        if a.metadata.deletion_timestamp.is_some() {
            let _ = store.modify(&rt, "", name, Subresource::Main, |o| {
                if let Some(fs) = o["metadata"]["finalizers"].as_array_mut() {
                    fs.retain(|f| f != ATTACHER_FINALIZER);
                }
                Ok(())
            });
            detached += 1;
            continue;
        }
        if a.status.as_ref().is_some_and(|s| s.attached) {
            continue;
        }
        let finalized = store.modify(&rt, "", name, Subresource::Main, |o| {
            if !o["metadata"]["finalizers"].is_array() {
                o["metadata"]["finalizers"] = json!([]);
            }
            if let Some(fs) = o["metadata"]["finalizers"].as_array_mut()
                && !fs.iter().any(|f| f == ATTACHER_FINALIZER)
            {
                fs.push(json!(ATTACHER_FINALIZER));
            }
            Ok(())
        });
        if finalized.is_err() {
            continue;
        }
        let _ = store.modify(&rt, "", name, Subresource::Status, |o| {
            o["status"] = json!({"attached": true, "attachmentMetadata": {"devicePath": device}});
            Ok(())
        });
        attached += 1;
    }
    (attached, detached)
}

/// Each node's `status.volumesAttached` (the controller's view: attached VolumeAttachments) and
/// `status.volumesInUse` (the kubelet's: those its pods use), written when they change.
fn report_on_nodes(
    store: &Store,
    caches: &mut Caches,
    want: &BTreeMap<String, (CsiVolume, String)>,
) {
    let Some(nodes_rt) = store.resource("", "v1", "nodes") else {
        return;
    };
    let handles: HashMap<&str, &str> = want
        .values()
        .map(|(v, _)| (v.pv.as_str(), v.handle.as_str()))
        .collect();
    let pvs = caches.volumes.refresh(store);
    let handle_of = |pv: &str| -> Option<String> {
        if let Some(h) = handles.get(pv) {
            return Some(h.to_string());
        }
        pvs.iter()
            .find(|v| v.metadata.name.as_deref() == Some(pv))
            .and_then(|v| v.spec.as_ref()?.csi.as_ref())
            .map(|c| c.volume_handle.clone())
    };
    let mut attached: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for a in caches.attachments.refresh(store).iter() {
        let done = a.status.as_ref().is_some_and(|s| s.attached);
        if a.spec.attacher != DRIVER || !done || a.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Some(h) = a
            .spec
            .source
            .persistent_volume_name
            .as_deref()
            .and_then(handle_of)
        {
            attached
                .entry(a.spec.node_name.clone())
                .or_default()
                .insert(unique_volume_name(DRIVER, &h));
        }
    }
    let mut in_use: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (v, node) in want.values() {
        let unique = unique_volume_name(DRIVER, &v.handle);
        if attached.get(node).is_some_and(|a| a.contains(&unique)) {
            in_use.entry(node.as_str()).or_default().insert(unique);
        }
    }
    for node in caches.nodes.refresh(store).iter() {
        let Some(name) = node.metadata.name.as_deref() else {
            continue;
        };
        let empty = BTreeSet::new();
        let att = attached.get(name).unwrap_or(&empty);
        let used = in_use.get(name).unwrap_or(&empty);
        let status = node.status.as_ref();
        let old_att: BTreeSet<String> = status
            .and_then(|s| s.volumes_attached.as_ref())
            .map(|v| v.iter().map(|a| a.name.clone()).collect())
            .unwrap_or_default();
        let old_used: BTreeSet<String> = status
            .and_then(|s| s.volumes_in_use.clone())
            .map(|v| v.into_iter().collect())
            .unwrap_or_default();
        if old_att == *att && old_used == *used {
            continue;
        }
        let _ = store.modify(&nodes_rt, "", name, Subresource::Status, |n| {
            let attached: Vec<_> = att
                .iter()
                .map(|v| json!({"name": v, "devicePath": ""}))
                .collect();
            n["status"]["volumesAttached"] = json!(attached);
            n["status"]["volumesInUse"] = json!(used);
            Ok(())
        });
    }
}

#[cfg(test)]
#[path = "attacher_tests.rs"]
mod tests;
