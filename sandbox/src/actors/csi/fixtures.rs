//! Shared builders for the storage actors' tests: a store with nodes in zones, EBS
//! StorageClasses, claims and pods that use them.

use std::sync::Arc;

use serde_json::{Value, json};

use super::DRIVER;
use crate::registry::str_ref_at;
use crate::store::{DeleteOptions, Store, Subresource};

/// A store with Ready nodes `n1` (us-east-1a, i-01), `n2` (us-east-1a, i-02) and `n3`
/// (us-east-1b, i-03), and StorageClasses `wait` (WaitForFirstConsumer) and `now` (Immediate)
/// of the EBS driver.
pub fn cluster() -> Arc<Store> {
    let store = Store::new();
    let nodes = store.resource("", "v1", "nodes").expect("served");
    for (name, zone, id) in [
        ("n1", "us-east-1a", "i-01"),
        ("n2", "us-east-1a", "i-02"),
        ("n3", "us-east-1b", "i-03"),
    ] {
        let node = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone,
                "node.kubernetes.io/instance-type": "m5.large"}},
            "spec": {"providerID": format!("aws:///{zone}/{id}")}});
        store.create(&nodes, "", node).expect("node");
        store
            .modify(&nodes, "", name, Subresource::Status, |n| {
                n["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
                Ok(())
            })
            .expect("node status");
    }
    let classes = store
        .resource("storage.k8s.io", "v1", "storageclasses")
        .expect("served");
    for (name, mode) in [("wait", "WaitForFirstConsumer"), ("now", "Immediate")] {
        let class = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name}, "provisioner": DRIVER, "volumeBindingMode": mode,
            "reclaimPolicy": "Delete", "parameters": {"type": "gp3"}});
        store.create(&classes, "", class).expect("class");
    }
    store
}

/// Create claim `name` in `default` requesting `size` of class `class` (`None`: no class).
pub fn claim(store: &Store, name: &str, class: Option<&str>, size: &str) -> Arc<Value> {
    let rt = store
        .resource("", "v1", "persistentvolumeclaims")
        .expect("served");
    let mut c = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}});
    if let Some(class) = class {
        c["spec"]["storageClassName"] = json!(class);
    }
    store.create(&rt, "default", c).expect("claim")
}

/// Create pod `name` in `default` mounting claim `claim`, bound to `node` when given.
pub fn pod(store: &Store, name: &str, claim: &str, node: Option<&str>) {
    let rt = store.resource("", "v1", "pods").expect("served");
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "pause"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    store.create(&rt, "default", p).expect("pod");
}

/// Delete pod `name` in `default`.
pub fn delete_pod(store: &Store, name: &str) {
    let rt = store.resource("", "v1", "pods").expect("served");
    store
        .delete(&rt, "default", name, &DeleteOptions::default())
        .expect("delete pod");
}

/// Annotate claim `name` with kube-scheduler's selected node.
pub fn select(store: &Store, name: &str, node: &str) {
    let rt = store
        .resource("", "v1", "persistentvolumeclaims")
        .expect("served");
    store
        .modify(&rt, "default", name, Subresource::Main, |c| {
            c["metadata"]["annotations"][super::SELECTED_NODE] = json!(node);
            Ok(())
        })
        .expect("annotate claim");
}

/// Every object of a built-in type, by name.
pub fn objects(store: &Store, group: &str, plural: &str) -> Vec<Arc<Value>> {
    let mut out = store.objects(&super::key(group, plural));
    out.sort_by(|a, b| {
        str_ref_at(a, &["metadata", "name"]).cmp(&str_ref_at(b, &["metadata", "name"]))
    });
    out
}

/// One object of a built-in type.
pub fn object(store: &Store, group: &str, plural: &str, ns: &str, name: &str) -> Arc<Value> {
    let rt = store.resource(group, "v1", plural).expect("type served");
    store.get(&rt, ns, name).expect("object exists")
}
