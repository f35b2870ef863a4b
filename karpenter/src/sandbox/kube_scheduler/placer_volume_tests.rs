//! Table tests of the simulated kube-scheduler's NodeVolumeLimits filter, after the Kubernetes
//! scheduler's own cases (kubernetes/kubernetes
//! `pkg/scheduler/framework/plugins/nodevolumelimits/csi_test.go`, `TestCSILimits`; each test
//! names the cases it follows, or says it has none). One node `n`; claims `c1`..`c4` are bound
//! to EBS volumes `pv1`..`pv4`, `u1` and `u2` are unbound claims of an EBS class, `o1` is bound
//! to a volume of another driver, `m1` to a volume that does not exist, and `n1` has neither
//! volume nor class.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use serde_json::{Value, json};

use super::placer::KubeScheduler;
use super::view::{ClusterView, PodPlacer};
use super::volume_limits::MAX_VOLUME_COUNT;

const EBS: &str = "ebs.csi.aws.com";
const EFS: &str = "efs.csi.aws.com";

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("valid object"))
}

fn pvcs() -> Vec<Arc<PersistentVolumeClaim>> {
    let bound = |name: &str, pv: &str| {
        typed(json!({"metadata": {"name": name, "namespace": "default"},
            "spec": {"volumeName": pv, "storageClassName": "ebs"}}))
    };
    let unbound = |name: &str| {
        typed(json!({"metadata": {"name": name, "namespace": "default"},
            "spec": {"storageClassName": "ebs"}}))
    };
    vec![
        bound("c1", "pv1"),
        bound("c2", "pv2"),
        bound("c3", "pv3"),
        bound("c4", "pv4"),
        bound("o1", "pv-o1"),
        bound("m1", "pv-missing"),
        typed(json!({"metadata": {"name": "n1", "namespace": "default"}, "spec": {}})),
        unbound("u1"),
        unbound("u2"),
    ]
}

fn pvs() -> Vec<Arc<PersistentVolume>> {
    let pv = |name: &str, driver: &str| {
        typed(json!({"metadata": {"name": name},
            "spec": {"csi": {"driver": driver, "volumeHandle": format!("vol-{name}")}}}))
    };
    vec![
        pv("pv1", EBS),
        pv("pv2", EBS),
        pv("pv3", EBS),
        pv("pv4", EBS),
        pv("pv-o1", EFS),
    ]
}

fn node() -> Arc<Node> {
    Arc::new(
        testutil::node("n")
            .allocatable("cpu", "16")
            .allocatable("memory", "64Gi")
            .allocatable("pods", "110")
            .ready("True")
            .build(),
    )
}

/// A pod mounting `claims`, bound to `n` when `bound`.
fn pod(name: &str, claims: &[&str], bound: bool) -> Arc<Pod> {
    let volumes: Vec<Value> = claims
        .iter()
        .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    let mut b = testutil::pod(name)
        .uid(format!("uid-{name}"))
        .cpu("100m")
        .merge(json!({"spec": {"volumes": volumes}}));
    if bound {
        b = b.on_node("n");
    }
    Arc::new(b.build())
}

/// The node's EBS limit (`None`: the driver reports none; no CSINode at all with `csinode`
/// false), the pods already on it, the volumes attached to it, and the pods to place.
struct Case {
    limit: Option<i32>,
    csinode: bool,
    bound: Vec<Arc<Pod>>,
    attached: Vec<&'static str>,
    pending: Vec<Arc<Pod>>,
}

fn place(c: Case) -> Vec<Result<String, String>> {
    let mut driver = json!({"name": EBS, "nodeID": "i-1"});
    if let Some(n) = c.limit {
        driver["allocatable"] = json!({"count": n});
    }
    let csinodes: Vec<Arc<CSINode>> = if c.csinode {
        vec![typed(
            json!({"metadata": {"name": "n"}, "spec": {"drivers": [driver]}}),
        )]
    } else {
        vec![]
    };
    let attachments: Vec<Arc<VolumeAttachment>> = c
        .attached
        .iter()
        .map(|pv| {
            typed(json!({"metadata": {"name": format!("va-{pv}")},
                "spec": {"attacher": EBS, "nodeName": "n", "source": {"persistentVolumeName": pv}}}))
        })
        .collect();
    let classes: Vec<Arc<StorageClass>> = vec![typed(
        json!({"metadata": {"name": "ebs"}, "provisioner": EBS, "volumeBindingMode": "WaitForFirstConsumer"}),
    )];
    let (pvcs, pvs, nodes) = (pvcs(), pvs(), vec![node()]);
    let view = ClusterView {
        pending: &c.pending,
        nominated: &[],
        nodes: &nodes,
        bound: &c.bound,
        namespaces: &BTreeMap::new(),
        pvcs: &pvcs,
        pvs: &pvs,
        storage_classes: &classes,
        csinodes: &csinodes,
        volume_attachments: &attachments,
    };
    KubeScheduler::new()
        .place(&view)
        .into_iter()
        .map(|r| r.map_err(|u| u.message()))
        .collect()
}

fn one(
    limit: Option<i32>,
    bound: &[&[&str]],
    attached: &[&'static str],
    new: &[&str],
) -> Result<String, String> {
    let bound = bound
        .iter()
        .enumerate()
        .map(|(i, claims)| pod(&format!("old-{i}"), claims, true))
        .collect();
    let mut out = place(Case {
        limit,
        csinode: true,
        bound,
        attached: attached.to_vec(),
        pending: vec![pod("new", new, false)],
    });
    out.pop().expect("one result")
}

fn at_limit(result: Result<String, String>) -> bool {
    matches!(&result, Err(m) if m.contains(&format!("1 {MAX_VOLUME_COUNT}")))
}

/// "fits when node volume limit >= new pods CSI volume".
#[test]
fn new_volumes_within_the_limit_fit() {
    assert_eq!(
        one(Some(4), &[&["c1", "c2"]], &[], &["c3", "c4"]),
        Ok("n".into())
    );
}

/// "doesn't when node volume limit <= pods CSI volume", with kube-scheduler's whole message.
#[test]
fn new_volumes_past_the_limit_do_not_fit() {
    assert_eq!(
        one(Some(2), &[&["c1", "c2"]], &[], &["c3", "c4"]),
        Err(format!(
            "0/1 nodes are available: 1 {MAX_VOLUME_COUNT}. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        ))
    );
    assert!(at_limit(one(Some(3), &[&["c1", "c2"]], &[], &["c3", "c4"])));
}

/// "should when driver does not support volume limits" and "nil csi node".
#[test]
fn no_reported_limit_means_no_limit() {
    assert_eq!(
        one(None, &[&["c1", "c2"]], &[], &["c3", "c4"]),
        Ok("n".into())
    );
    let out = place(Case {
        limit: Some(0),
        csinode: false,
        bound: vec![pod("old", &["c1", "c2"], true)],
        attached: vec![],
        pending: vec![pod("new", &["c3"], false)],
    });
    assert_eq!(out, [Ok("n".to_string())]);
}

/// No Kubernetes case of its own (the filter's `newVolumes` minus the node's): a volume already
/// on the node, or named twice, is not new.
#[test]
fn volumes_already_on_the_node_are_not_counted_again() {
    assert_eq!(
        one(Some(2), &[&["c1", "c2"]], &[], &["c1", "c2"]),
        Ok("n".into())
    );
    assert_eq!(
        one(Some(2), &[&["c1", "c1"]], &[], &["c2", "c2"]),
        Ok("n".into())
    );
}

/// "count pending PVCs towards volume limit <= pods CSI volume", "count multiple pending pvcs
/// towards volume limit >= pods CSI volume", "should count PVCs with invalid PV name but valid
/// SC" and "don't count pvcs with missing SC towards volume limit": an unbound claim counts by
/// its class's provisioner, once however many pods use it.
#[test]
fn unbound_claims_count_by_their_class_provisioner() {
    assert!(at_limit(one(Some(2), &[&["c1", "u1"]], &[], &["c2"])));
    assert!(at_limit(one(Some(2), &[&["c1", "c2"]], &[], &["u2"])));
    assert_eq!(
        one(Some(3), &[&["u1"], &["u1"], &["c1"]], &[], &["c2"]),
        Ok("n".into())
    );
    assert!(at_limit(one(Some(2), &[&["m1", "c1"]], &[], &["c2"])));
    assert_eq!(one(Some(2), &[&["n1", "c1"]], &[], &["c2"]), Ok("n".into()));
}

/// "don't count pvcs with different type towards volume limit" and "count pvcs with the same
/// type towards volume limit": each driver has its own limit.
#[test]
fn other_drivers_volumes_do_not_count() {
    assert_eq!(one(Some(2), &[&["c1", "c2"]], &[], &["o1"]), Ok("n".into()));
    assert!(at_limit(one(Some(2), &[&["o1", "c1", "c2"]], &[], &["c3"])));
}

/// "should count VolumeAttachments towards volume limit when no pods exist" and "should
/// schedule pod when VolumeAttachments count does not exceed limit": a volume attached to the
/// node counts although no pod there uses it (it may still be detaching).
#[test]
fn attached_volumes_count_against_the_limit() {
    assert!(at_limit(one(Some(2), &[], &["pv1", "pv2"], &["c3"])));
    assert_eq!(one(Some(2), &[], &["pv1"], &["c3"]), Ok("n".into()));
    assert_eq!(one(Some(2), &[], &["pv1", "pv2"], &["c1"]), Ok("n".into()));
}

/// No Kubernetes case (kube-scheduler places one pod at a time): pods placed earlier in the
/// same pass hold their volumes.
#[test]
fn earlier_placements_in_a_pass_count() {
    let out = place(Case {
        limit: Some(1),
        csinode: true,
        bound: vec![],
        attached: vec![],
        pending: vec![pod("a", &["c1"], false), pod("b", &["c2"], false)],
    });
    assert_eq!(out[0], Ok("n".to_string()));
    assert!(at_limit(out[1].clone()), "{:?}", out[1]);
}
