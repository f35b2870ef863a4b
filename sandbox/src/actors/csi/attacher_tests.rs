use serde_json::{Value, json};

use super::super::fixtures::{claim, cluster, delete_pod, object, objects, pod, select};
use super::super::{Storage, unique_volume_name};
use super::*;

/// The attachments now: (volume, node, attached).
fn attachments(store: &Store) -> Vec<(String, String, bool)> {
    objects(store, "storage.k8s.io", "volumeattachments")
        .iter()
        .map(|a| {
            (
                a["spec"]["source"]["persistentVolumeName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                a["spec"]["nodeName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                a["status"]["attached"] == true,
            )
        })
        .collect()
}

fn volume_of(store: &Store, claim: &str) -> (String, String) {
    let c = object(store, "", "persistentvolumeclaims", "default", claim);
    let pv = c["spec"]["volumeName"].as_str().expect("bound").to_string();
    let handle = object(store, "", "persistentvolumes", "", &pv)["spec"]["csi"]["volumeHandle"]
        .as_str()
        .expect("handle")
        .to_string();
    (pv, handle)
}

fn node_volumes(store: &Store, node: &str) -> (Value, Value) {
    let n = object(store, "", "nodes", "", node);
    (
        n["status"]["volumesAttached"].clone(),
        n["status"]["volumesInUse"].clone(),
    )
}

#[test]
fn a_bound_pods_volume_is_attached_to_its_node() {
    let store = cluster();
    claim(&store, "data", Some("wait"), "4Gi");
    select(&store, "data", "n1");
    pod(&store, "db-0", "data", Some("n1"));
    let mut storage = Storage::new(|_| Some(26));
    storage.pass(&store);
    let (pv, handle) = volume_of(&store, "data");
    assert_eq!(attachments(&store), [(pv.clone(), "n1".into(), true)]);
    let va = &objects(&store, "storage.k8s.io", "volumeattachments")[0];
    assert_eq!(
        va["metadata"]["name"],
        json!(attachment_name(&handle, DRIVER, "n1"))
    );
    assert_eq!(va["spec"]["attacher"], DRIVER);
    assert_eq!(va["metadata"]["finalizers"], json!([ATTACHER_FINALIZER]));
    assert_eq!(
        va["status"]["attachmentMetadata"]["devicePath"],
        "/dev/xvdaa"
    );
    let unique = unique_volume_name(DRIVER, &handle);
    assert_eq!(
        node_volumes(&store, "n1"),
        (json!([{"name": unique, "devicePath": ""}]), json!([unique]))
    );
    // Every Ready node registered the driver with the limit.
    let csinodes = objects(&store, "storage.k8s.io", "csinodes");
    assert_eq!(csinodes.len(), 3);
    assert_eq!(
        csinodes[0]["spec"]["drivers"][0]["allocatable"]["count"],
        26
    );
    assert_eq!(csinodes[0]["spec"]["drivers"][0]["nodeID"], "i-01");

    // Deleting the pod detaches the volume in the next pass; the node reports nothing.
    delete_pod(&store, "db-0");
    storage.pass(&store);
    assert!(attachments(&store).is_empty());
    assert_eq!(node_volumes(&store, "n1"), (json!([]), json!([])));
}

#[test]
fn a_single_node_volume_is_detached_before_it_is_attached_elsewhere() {
    let store = cluster();
    claim(&store, "data", Some("wait"), "4Gi");
    select(&store, "data", "n1");
    pod(&store, "db-0", "data", Some("n1"));
    let mut storage = Storage::new(|_| None);
    storage.pass(&store);
    let (pv, _) = volume_of(&store, "data");
    // The pod moves: it is replaced on n2 before the controller looks again.
    delete_pod(&store, "db-0");
    pod(&store, "db-0", "data", Some("n2"));
    storage.pass(&store);
    assert!(
        attachments(&store).is_empty(),
        "detached from n1, not yet attached to n2: {:?}",
        attachments(&store)
    );
    storage.pass(&store);
    assert_eq!(attachments(&store), [(pv, "n2".into(), true)]);
}

#[test]
fn finished_and_unbound_pods_hold_no_attachment() {
    let store = cluster();
    claim(&store, "a", Some("now"), "1Gi");
    claim(&store, "b", Some("now"), "1Gi");
    pod(&store, "pending", "a", None);
    pod(&store, "done", "b", Some("n1"));
    let pods = store.resource("", "v1", "pods").expect("served");
    store
        .modify(&pods, "default", "done", Subresource::Status, |p| {
            p["status"]["phase"] = json!("Succeeded");
            Ok(())
        })
        .expect("finish");
    Storage::new(|_| None).pass(&store);
    assert_eq!(
        objects(&store, "", "persistentvolumes").len(),
        2,
        "Immediate claims are provisioned without consumers"
    );
    assert!(attachments(&store).is_empty());
}
