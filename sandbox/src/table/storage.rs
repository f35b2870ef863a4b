//! Server-side printer rows of the storage kinds, with kube-apiserver's columns: what
//! `kubectl get pv,pvc,sc,csinodes,volumeattachments` shows.

use jiff::Timestamp;
use serde_json::Value;

use super::{age, get, name, text};

/// `kubectl get pv` columns.
pub(super) const PERSISTENT_VOLUME: &str = "Name,Capacity,Access Modes,Reclaim Policy,Status,\
    Claim,StorageClass,VolumeAttributesClass,Reason,Age,+VolumeMode";
/// `kubectl get pvc` columns.
pub(super) const PERSISTENT_VOLUME_CLAIM: &str = "Name,Status,Volume,Capacity,Access Modes,\
    StorageClass,VolumeAttributesClass,Age,+VolumeMode";
/// `kubectl get storageclass` columns.
pub(super) const STORAGE_CLASS: &str =
    "Name,Provisioner,ReclaimPolicy,VolumeBindingMode,AllowVolumeExpansion,Age";
/// `kubectl get csinodes` columns.
pub(super) const CSI_NODE: &str = "Name,#Drivers,Age";
/// `kubectl get volumeattachments` columns.
pub(super) const VOLUME_ATTACHMENT: &str = "Name,Attacher,PV,Node,Attached,Age";

/// Access modes abbreviated as kubectl does (`RWO,ROX,RWX,RWOP`), in that order.
fn access_modes(object: &Value, path: &str) -> String {
    let modes: Vec<&str> = get(object, path)
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| modes.contains(mode))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// `<unset>` for a missing volume attributes class, as kubectl prints it.
fn attributes_class<'a>(object: &'a Value, path: &str) -> &'a str {
    match text(object, path) {
        "" => "<unset>",
        class => class,
    }
}

fn volume_mode(object: &Value) -> &str {
    match text(object, "spec.volumeMode") {
        "" => "Filesystem",
        mode => mode,
    }
}

/// A PersistentVolume's row.
pub(super) fn persistent_volume(pv: &Value, now: Timestamp) -> Vec<Value> {
    let claim = match (
        text(pv, "spec.claimRef.namespace"),
        text(pv, "spec.claimRef.name"),
    ) {
        (_, "") => String::new(),
        (ns, claim) => format!("{ns}/{claim}"),
    };
    let status = if get(pv, "metadata.deletionTimestamp").is_string() {
        "Terminating"
    } else {
        text(pv, "status.phase")
    };
    cells![
        name(pv),
        text(pv, "spec.capacity.storage"),
        access_modes(pv, "spec.accessModes"),
        text(pv, "spec.persistentVolumeReclaimPolicy"),
        status,
        claim,
        text(pv, "spec.storageClassName"),
        attributes_class(pv, "spec.volumeAttributesClassName"),
        text(pv, "status.reason"),
        age(pv, now),
        volume_mode(pv),
    ]
}

/// A PersistentVolumeClaim's row (capacity and access modes as bound, from its status).
pub(super) fn persistent_volume_claim(pvc: &Value, now: Timestamp) -> Vec<Value> {
    let status = if get(pvc, "metadata.deletionTimestamp").is_string() {
        "Terminating"
    } else {
        text(pvc, "status.phase")
    };
    cells![
        name(pvc),
        status,
        text(pvc, "spec.volumeName"),
        text(pvc, "status.capacity.storage"),
        access_modes(pvc, "status.accessModes"),
        text(pvc, "spec.storageClassName"),
        attributes_class(pvc, "status.currentVolumeAttributesClassName"),
        age(pvc, now),
        volume_mode(pvc),
    ]
}

/// A StorageClass's row (`(default)` after the default class's name).
pub(super) fn storage_class(sc: &Value, now: Timestamp) -> Vec<Value> {
    let default = sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"]
        .as_str()
        == Some("true");
    let shown = if default {
        format!("{} (default)", name(sc))
    } else {
        name(sc).to_string()
    };
    let or_default = |path: &str, fallback: &'static str| -> String {
        match text(sc, path) {
            "" => fallback.to_string(),
            v => v.to_string(),
        }
    };
    cells![
        shown,
        text(sc, "provisioner"),
        or_default("reclaimPolicy", "Delete"),
        or_default("volumeBindingMode", "Immediate"),
        get(sc, "allowVolumeExpansion").as_bool() == Some(true),
        age(sc, now),
    ]
}

/// A CSINode's row: how many drivers registered on the node.
pub(super) fn csi_node(c: &Value, now: Timestamp) -> Vec<Value> {
    let drivers = get(c, "spec.drivers").as_array().map_or(0, Vec::len);
    cells![name(c), drivers, age(c, now)]
}

/// A VolumeAttachment's row.
pub(super) fn volume_attachment(va: &Value, now: Timestamp) -> Vec<Value> {
    cells![
        name(va),
        text(va, "spec.attacher"),
        text(va, "spec.source.persistentVolumeName"),
        text(va, "spec.nodeName"),
        get(va, "status.attached").as_bool() == Some(true),
        age(va, now),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2026-01-01T00:00:00Z".parse().expect("time")
    }

    #[test]
    fn storage_rows_read_as_kubectl_prints_them() {
        let pv = json!({"metadata": {"name": "pvc-1"}, "spec": {"capacity": {"storage": "4Gi"},
            "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Delete",
            "claimRef": {"namespace": "default", "name": "data-db-0"}, "storageClassName": "ebs"},
            "status": {"phase": "Bound"}});
        assert_eq!(
            persistent_volume(&pv, now()),
            cells![
                "pvc-1",
                "4Gi",
                "RWO",
                "Delete",
                "Bound",
                "default/data-db-0",
                "ebs",
                "<unset>",
                "",
                "<unknown>",
                "Filesystem"
            ]
        );
        let pvc = json!({"metadata": {"name": "data-db-0"}, "spec": {"volumeName": "pvc-1",
            "storageClassName": "ebs"}, "status": {"phase": "Bound", "capacity": {"storage": "4Gi"},
            "accessModes": ["ReadWriteMany", "ReadWriteOnce"]}});
        assert_eq!(
            persistent_volume_claim(&pvc, now()),
            cells![
                "data-db-0",
                "Bound",
                "pvc-1",
                "4Gi",
                "RWO,RWX",
                "ebs",
                "<unset>",
                "<unknown>",
                "Filesystem"
            ]
        );
        let sc = json!({"metadata": {"name": "gp3",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer"});
        assert_eq!(
            storage_class(&sc, now()),
            cells![
                "gp3 (default)",
                "ebs.csi.aws.com",
                "Delete",
                "WaitForFirstConsumer",
                false,
                "<unknown>"
            ]
        );
        let csinode =
            json!({"metadata": {"name": "n1"}, "spec": {"drivers": [{"name": "ebs.csi.aws.com"}]}});
        assert_eq!(csi_node(&csinode, now()), cells!["n1", 1, "<unknown>"]);
        let va = json!({"metadata": {"name": "csi-ab"}, "spec": {"attacher": "ebs.csi.aws.com",
            "nodeName": "n1", "source": {"persistentVolumeName": "pvc-1"}},
            "status": {"attached": true}});
        assert_eq!(
            volume_attachment(&va, now()),
            cells![
                "csi-ab",
                "ebs.csi.aws.com",
                "pvc-1",
                "n1",
                true,
                "<unknown>"
            ]
        );
    }
}
