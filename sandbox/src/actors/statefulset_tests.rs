use serde_json::{Value, json};

use super::*;
use crate::pods::set_pod_condition;
use crate::registry::str_ref_at;

fn store_with_set(replicas: i32, policy: &str) -> Arc<Store> {
    let store = Store::new();
    let sets = store
        .resource("apps", "v1", "statefulsets")
        .expect("served");
    let set = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {"replicas": replicas, "serviceName": "db", "podManagementPolicy": policy,
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "c", "image": "pause"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "ebs",
                    "resources": {"requests": {"storage": "4Gi"}}}}]},
    });
    store.create(&sets, "default", set).expect("create set");
    store
}

fn names(store: &Store, group: &str, plural: &str) -> Vec<String> {
    let mut out: Vec<String> = store
        .objects(&key(group, plural))
        .iter()
        .filter_map(|o| str_ref_at(o, &["metadata", "name"]).map(str::to_owned))
        .collect();
    out.sort();
    out
}

fn pod(store: &Store, name: &str) -> Arc<Value> {
    let rt = store.resource("", "v1", "pods").expect("served");
    store.get(&rt, "default", name).expect("pod exists")
}

fn make_ready(store: &Store, name: &str) {
    let rt = store.resource("", "v1", "pods").expect("served");
    let now = store.now_rfc3339();
    store
        .modify(&rt, "default", name, Subresource::Status, |p| {
            p["status"]["phase"] = json!("Running");
            set_pod_condition(p, &now, "Ready", "True", None, None);
            Ok(())
        })
        .expect("pod status");
}

fn set_status(store: &Store) -> Value {
    let rt = store
        .resource("apps", "v1", "statefulsets")
        .expect("served");
    store.get(&rt, "default", "db").expect("set")["status"].clone()
}

#[test]
fn ordered_ready_creates_one_ordinal_at_a_time_with_its_claim_first() {
    let store = store_with_set(3, "OrderedReady");
    let mut c = Controller::default();
    c.pass(&store);
    assert_eq!(names(&store, "", "pods"), ["db-0"]);
    assert_eq!(names(&store, "", "persistentvolumeclaims"), ["data-db-0"]);
    let p = pod(&store, "db-0");
    let labels = &p["metadata"]["labels"];
    assert_eq!(labels[POD_NAME_LABEL], "db-0");
    assert_eq!(labels[POD_INDEX_LABEL], "0");
    assert!(
        labels[REVISION_LABEL]
            .as_str()
            .is_some_and(|r| r.starts_with("db-"))
    );
    assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "StatefulSet");
    assert_eq!(p["spec"]["hostname"], "db-0");
    assert_eq!(p["spec"]["subdomain"], "db");
    assert_eq!(
        p["spec"]["volumes"],
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}])
    );
    assert_eq!(
        names(&store, "apps", "controllerrevisions"),
        [labels[REVISION_LABEL].as_str().unwrap_or_default()]
    );

    // db-1 waits until db-0 is Running and Ready.
    c.pass(&store);
    assert_eq!(names(&store, "", "pods"), ["db-0"]);
    make_ready(&store, "db-0");
    c.pass(&store);
    assert_eq!(names(&store, "", "pods"), ["db-0", "db-1"]);
    make_ready(&store, "db-1");
    c.pass(&store);
    make_ready(&store, "db-2");
    c.pass(&store);
    assert_eq!(
        names(&store, "", "persistentvolumeclaims"),
        ["data-db-0", "data-db-1", "data-db-2"]
    );
    let status = set_status(&store);
    for field in [
        "replicas",
        "readyReplicas",
        "availableReplicas",
        "currentReplicas",
        "updatedReplicas",
    ] {
        assert_eq!(status[field], 3, "{field} in {status}");
    }
    assert_eq!(status["observedGeneration"], 1);
    let claim = store
        .get(
            &store
                .resource("", "v1", "persistentvolumeclaims")
                .expect("served"),
            "default",
            "data-db-1",
        )
        .expect("claim");
    assert_eq!(claim["metadata"]["labels"]["app"], "db");
    assert_eq!(claim["spec"]["storageClassName"], "ebs");
    assert!(claim["metadata"]["ownerReferences"].is_null(), "retained");
}

#[test]
fn parallel_creates_every_ordinal_at_once() {
    let store = store_with_set(3, "Parallel");
    Controller::default().pass(&store);
    assert_eq!(names(&store, "", "pods"), ["db-0", "db-1", "db-2"]);
    assert_eq!(names(&store, "", "persistentvolumeclaims").len(), 3);
}

#[test]
fn a_deleted_pod_comes_back_under_its_name_with_its_claim() {
    let store = store_with_set(2, "Parallel");
    let mut c = Controller::default();
    c.pass(&store);
    let pods = store.resource("", "v1", "pods").expect("served");
    let pvcs = store
        .resource("", "v1", "persistentvolumeclaims")
        .expect("served");
    let claim_uid =
        store.get(&pvcs, "default", "data-db-1").expect("claim")["metadata"]["uid"].clone();
    let old_uid = pod(&store, "db-1")["metadata"]["uid"].clone();
    store
        .delete(&pods, "default", "db-1", &DeleteOptions::default())
        .expect("delete");
    c.pass(&store);
    let again = pod(&store, "db-1");
    assert_ne!(again["metadata"]["uid"], old_uid);
    assert_eq!(
        store.get(&pvcs, "default", "data-db-1").expect("claim")["metadata"]["uid"],
        claim_uid,
        "the claim is reused, not recreated"
    );
    // A failed pod is deleted, then recreated.
    store
        .modify(&pods, "default", "db-0", Subresource::Status, |p| {
            p["status"]["phase"] = json!("Failed");
            Ok(())
        })
        .expect("fail pod");
    let failed_uid = pod(&store, "db-0")["metadata"]["uid"].clone();
    c.pass(&store);
    c.pass(&store);
    assert_ne!(pod(&store, "db-0")["metadata"]["uid"], failed_uid);
}

#[test]
fn scale_down_removes_the_highest_ordinal_first_and_keeps_claims() {
    let store = store_with_set(3, "OrderedReady");
    let mut c = Controller::default();
    for p in ["db-0", "db-1", "db-2"] {
        c.pass(&store);
        make_ready(&store, p);
    }
    let sets = store
        .resource("apps", "v1", "statefulsets")
        .expect("served");
    store
        .modify(&sets, "default", "db", Subresource::Main, |s| {
            s["spec"]["replicas"] = json!(1);
            Ok(())
        })
        .expect("scale");
    c.pass(&store);
    assert_eq!(names(&store, "", "pods"), ["db-0", "db-1"], "one at a time");
    c.pass(&store);
    assert_eq!(names(&store, "", "pods"), ["db-0"]);
    assert_eq!(names(&store, "", "persistentvolumeclaims").len(), 3);
    assert_eq!(set_status(&store)["replicas"], 1);
}

#[test]
fn a_template_change_rolls_from_the_highest_ordinal() {
    let store = store_with_set(2, "Parallel");
    let mut c = Controller::default();
    c.pass(&store);
    make_ready(&store, "db-0");
    make_ready(&store, "db-1");
    let old = pod(&store, "db-1")["metadata"]["labels"][REVISION_LABEL].clone();
    let sets = store
        .resource("apps", "v1", "statefulsets")
        .expect("served");
    store
        .modify(&sets, "default", "db", Subresource::Main, |s| {
            s["spec"]["template"]["spec"]["containers"][0]["image"] = json!("pause:2");
            Ok(())
        })
        .expect("update");
    c.pass(&store);
    assert_eq!(names(&store, "", "pods"), ["db-0"], "db-1 replaced first");
    c.pass(&store);
    let new = pod(&store, "db-1")["metadata"]["labels"][REVISION_LABEL].clone();
    assert_ne!(new, old);
    assert_eq!(names(&store, "apps", "controllerrevisions").len(), 2);
    let status = set_status(&store);
    assert_eq!(status["updatedReplicas"], 1);
    assert_eq!(status["updateRevision"], new);
}
