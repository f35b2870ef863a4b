use serde_json::json;

use super::super::fixtures::{claim, cluster, object, objects, select};
use super::super::{Caches, DRIVER, ZONE_KEY};
use super::*;

fn run(store: &Store) -> usize {
    let nodes: Vec<Arc<Node>> = objects(store, "", "nodes")
        .iter()
        .map(|n| Arc::new(serde_json::from_value((**n).clone()).expect("node")))
        .collect();
    pass(store, &nodes, &mut Caches::default())
}

#[test]
fn sizes_are_whole_gib_rounded_up() {
    for (request, size) in [
        (Some("4Gi"), "4Gi"),
        (Some("500Mi"), "1Gi"),
        (Some("1.5Gi"), "2Gi"),
        (Some("10G"), "10Gi"),
        (Some("1073741825"), "2Gi"),
        (Some("lots"), "1Gi"),
        (None, "1Gi"),
    ] {
        assert_eq!(volume_size(request), size, "{request:?}");
    }
    assert!(volume_id("uid-1").starts_with("vol-"));
    assert_eq!(volume_id("uid-1").len(), 4 + 17);
    assert_ne!(volume_id("uid-1"), volume_id("uid-2"));
}

#[test]
fn wait_for_first_consumer_provisions_in_the_selected_nodes_zone() {
    let store = cluster();
    let c = claim(&store, "data", Some("wait"), "4Gi");
    assert_eq!(run(&store), 0, "no consumer yet");
    assert!(objects(&store, "", "persistentvolumes").is_empty());

    select(&store, "data", "n3");
    assert_eq!(run(&store), 1);
    let uid = c["metadata"]["uid"].as_str().expect("uid");
    let pv = object(&store, "", "persistentvolumes", "", &format!("pvc-{uid}"));
    assert_eq!(pv["spec"]["csi"]["driver"], DRIVER);
    assert_eq!(pv["spec"]["csi"]["volumeHandle"], json!(volume_id(uid)));
    assert_eq!(pv["spec"]["capacity"]["storage"], "4Gi");
    assert_eq!(pv["spec"]["storageClassName"], "wait");
    assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Delete");
    assert_eq!(
        pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"],
        json!([{"matchExpressions": [{"key": ZONE_KEY, "operator": "In", "values": ["us-east-1b"]}]}])
    );
    assert_eq!(pv["spec"]["claimRef"]["name"], "data");
    assert_eq!(pv["spec"]["claimRef"]["uid"], uid);
    assert_eq!(pv["status"]["phase"], "Bound");
    assert_eq!(pv["metadata"]["annotations"][PROVISIONED_BY], DRIVER);
    let bound = object(&store, "", "persistentvolumeclaims", "default", "data");
    assert_eq!(bound["spec"]["volumeName"], pv["metadata"]["name"]);
    assert_eq!(bound["status"]["phase"], "Bound");
    assert_eq!(bound["status"]["capacity"]["storage"], "4Gi");
    assert_eq!(
        bound["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"],
        "yes"
    );
    assert_eq!(run(&store), 0, "a bound claim is left alone");
    assert_eq!(objects(&store, "", "persistentvolumes").len(), 1);
}

#[test]
fn immediate_claims_and_the_default_class() {
    let store = cluster();
    claim(&store, "fast", Some("now"), "500Mi");
    claim(&store, "other", Some("gp2-in-tree"), "1Gi");
    claim(&store, "static", Some(""), "1Gi");
    claim(&store, "plain", None, "1Gi");
    assert_eq!(
        run(&store),
        1,
        "only the Immediate EBS claim: no default class yet"
    );
    let pv = &objects(&store, "", "persistentvolumes")[0];
    assert_eq!(pv["spec"]["capacity"]["storage"], "1Gi");
    assert_eq!(
        pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"],
        json!(["us-east-1a"]),
        "the first zone with nodes"
    );

    let classes = store
        .resource("storage.k8s.io", "v1", "storageclasses")
        .expect("served");
    store
        .modify(&classes, "", "now", Subresource::Main, |c| {
            c["metadata"]["annotations"][DEFAULT_CLASS] = json!("true");
            Ok(())
        })
        .expect("make default");
    assert_eq!(run(&store), 1, "the classless claim gets the default class");
    let plain = object(&store, "", "persistentvolumeclaims", "default", "plain");
    assert_eq!(plain["spec"]["storageClassName"], "now");
    assert_eq!(plain["status"]["phase"], "Bound");
    let static_claim = object(&store, "", "persistentvolumeclaims", "default", "static");
    assert!(static_claim["spec"]["volumeName"].is_null());
}

#[test]
fn a_deleted_claims_volume_is_deleted_or_released() {
    let store = cluster();
    claim(&store, "gone", Some("now"), "1Gi");
    claim(&store, "kept", Some("now"), "1Gi");
    run(&store);
    let pvs = store
        .resource("", "v1", "persistentvolumes")
        .expect("served");
    let kept = object(&store, "", "persistentvolumeclaims", "default", "kept");
    let kept_pv = kept["spec"]["volumeName"]
        .as_str()
        .expect("bound")
        .to_string();
    store
        .modify(&pvs, "", &kept_pv, Subresource::Main, |v| {
            v["spec"]["persistentVolumeReclaimPolicy"] = json!("Retain");
            Ok(())
        })
        .expect("retain");
    let pvcs = store
        .resource("", "v1", "persistentvolumeclaims")
        .expect("served");
    for name in ["gone", "kept"] {
        store
            .delete(&pvcs, "default", name, &DeleteOptions::default())
            .expect("delete claim");
    }
    run(&store);
    let left = objects(&store, "", "persistentvolumes");
    assert_eq!(left.len(), 1, "the Delete volume is gone");
    assert_eq!(left[0]["metadata"]["name"], kept_pv.as_str());
    assert_eq!(left[0]["status"]["phase"], "Released");
}
