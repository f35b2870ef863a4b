//! Table and scenario tests of CSI attach limits in scheduling: existing nodes limited by their
//! CSINode, in-flight and new NodeClaims by their instance types' EBS limit, and the reason
//! why-pending gives.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::pod_view::PodView;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use serde_json::json;

use super::attach::{EBS_CSI_DRIVER, Volumes};
use super::explain::{self, PoolCandidate, Reason, Verdict};
use super::pod::PodInfo;
use super::solver::{Input, Rejection, solve};
use super::testing::*;
use super::volumes::VolumeIndex;
use crate::capacity::InstanceType;
use crate::capacity::index::TypeIndex;
use crate::snapshot::Snapshot;

/// A claim `db/<name>` of the `gp3` class (provisioner `ebs.csi.aws.com`), bound to a CSI
/// PersistentVolume `pv-<name>` when `bound`.
fn claim(name: &str, bound: bool) -> Arc<PersistentVolumeClaim> {
    let mut spec = json!({"storageClassName": "gp3"});
    if bound {
        spec["volumeName"] = json!(format!("pv-{name}"));
    }
    Arc::new(
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "db"}, "spec": spec}),
        )
        .expect("pvc"),
    )
}

fn csi_volume(claim: &str) -> Arc<PersistentVolume> {
    Arc::new(
        serde_json::from_value(json!({"metadata": {"name": format!("pv-{claim}")},
            "spec": {"csi": {"driver": EBS_CSI_DRIVER, "volumeHandle": format!("vol-{claim}")}}}))
        .expect("pv"),
    )
}

fn gp3() -> Arc<StorageClass> {
    Arc::new(
        serde_json::from_value(json!({"metadata": {"name": "gp3"}, "provisioner": EBS_CSI_DRIVER}))
            .expect("sc"),
    )
}

fn csinode(node: &str, count: i32) -> Arc<CSINode> {
    Arc::new(
        serde_json::from_value(json!({"metadata": {"name": node}, "spec": {"drivers": [
            {"name": EBS_CSI_DRIVER, "nodeID": "i-1", "allocatable": {"count": count}}]}}))
        .expect("csinode"),
    )
}

/// A pod in `db` asking 100m, mounting `claims`; running on `node` when given.
fn db_pod(name: &str, claims: &[&str], node: Option<&str>) -> Arc<PodView> {
    let volumes: Vec<_> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    let p = testutil::pod(name)
        .namespace("db")
        .cpu("100m")
        .merge(json!({"spec": {"volumes": volumes}}));
    match node {
        Some(n) => p.on_node(n).phase("Running"),
        None => p.phase("Pending"),
    }
    .arc()
}

fn node(name: &str) -> Arc<k8s_openapi::api::core::v1::Node> {
    Arc::new(
        testutil::node(name)
            .allocatable("cpu", "16")
            .allocatable("memory", "64Gi")
            .allocatable("pods", "110")
            .ready("True")
            .build(),
    )
}

/// The pod compiled as the provisioner compiles it, with its volumes.
fn compiled(snap: &Snapshot, pod: &PodView) -> PodInfo {
    let index = VolumeIndex::new(&snap.pvcs, &snap.pvs, &snap.storage_classes);
    let mut info = PodInfo::from_pod(pod).expect("pod compiles");
    info.volumes = index.attachments(pod);
    info
}

/// Where the solver puts each pod against the snapshot's existing capacity alone (no
/// NodePool): `Some(node)` or `None` for a pod that fits nowhere.
fn placed(snap: &Snapshot, pending: &[Arc<PodView>]) -> BTreeMap<String, Option<String>> {
    let existing = snap.existing_capacity(&HashMap::new(), &TypeIndex::default());
    let names = existing.iter().map(|e| e.name.clone()).collect();
    let input = Input {
        pods: pending.iter().map(|p| compiled(snap, p)).collect(),
        bound_pods: snap.bound_pods(&names),
        existing,
        well_known_labels: well_known(),
        ..Input::default()
    };
    let out = solve(&input);
    let mut at: BTreeMap<String, Option<String>> = pending
        .iter()
        .map(|p| (p.metadata.name.clone().unwrap_or_default(), None))
        .collect();
    for (node, pods) in out.existing {
        for k in pods {
            at.insert(k.name, Some(node.clone()));
        }
    }
    at
}

/// (CSINode count, claims of the pods running there, claims of the pending pod, fits?)
type ExistingRow<'a> = (Option<i32>, &'a [&'a str], &'a [&'a str], bool);

#[test]
fn an_existing_node_takes_new_volumes_only_below_its_csinode_limit() {
    let table: &[ExistingRow] = &[
        (Some(2), &["a", "b"], &["c"], false),
        (Some(2), &["a", "b"], &["a"], true),
        (Some(2), &["a"], &["b"], true),
        (Some(2), &["a"], &["b", "c"], false),
        (Some(3), &["a", "b"], &["c"], true),
        (Some(0), &[], &["c"], false),
        // No CSINode: unlimited, as upstream.
        (None, &["a", "b"], &["c"], true),
    ];
    for (i, (count, running, wanted, fits)) in table.iter().enumerate() {
        let mut pods: Vec<Arc<PodView>> = running
            .iter()
            .enumerate()
            .map(|(k, c)| db_pod(&format!("run-{k}"), &[c], Some("n1")))
            .collect();
        let pending = db_pod("new", wanted, None);
        pods.push(Arc::clone(&pending));
        let claims = ["a", "b", "c"];
        let snap = Snapshot {
            pods,
            nodes: vec![node("n1")],
            pvcs: claims.iter().map(|c| claim(c, *c != "c")).collect(),
            pvs: claims.iter().map(|c| csi_volume(c)).collect(),
            storage_classes: vec![gp3()],
            csinodes: count.iter().map(|n| csinode("n1", *n)).collect(),
            ..Snapshot::default()
        };
        let at = placed(&snap, &[pending]);
        assert_eq!(
            at["new"].is_some(),
            *fits,
            "row {i}: limit {count:?}, running {running:?}, pending {wanted:?}: {at:?}"
        );
    }
}

#[test]
fn pods_placed_in_one_pass_count_against_the_limit_together() {
    let pending: Vec<Arc<PodView>> = ["a", "b", "c"]
        .iter()
        .map(|c| db_pod(&format!("p-{c}"), &[c], None))
        .collect();
    let snap = Snapshot {
        pods: pending.clone(),
        nodes: vec![node("n1")],
        pvcs: ["a", "b", "c"].iter().map(|c| claim(c, false)).collect(),
        storage_classes: vec![gp3()],
        csinodes: vec![csinode("n1", 2)],
        ..Snapshot::default()
    };
    let at = placed(&snap, &pending);
    let on_n1 = at.values().filter(|n| n.as_deref() == Some("n1")).count();
    assert_eq!(on_n1, 2, "{at:?}");
}

fn limited(name: &str, ebs: i64) -> Arc<InstanceType> {
    let it = instance_type(name, 16, 64, 0.5);
    Arc::new((*it).clone().with_ebs_attach_limit(Some(ebs)))
}

/// A pending pod of 100m with one new volume per entry of `claims` (as volume ids).
fn pod_with_volumes(name: &str, claims: &[&str]) -> PodInfo {
    let mut p = pod(name, 100, 128, json!({}));
    let mut v = Volumes::default();
    for c in claims {
        v.insert(EBS_CSI_DRIVER, format!("default/{c}"));
    }
    p.volumes = v;
    p
}

#[test]
fn a_new_nodeclaim_packs_at_most_its_attach_limit() {
    // (attach limit, pods with one volume each, pods without, expected pods per claim)
    let table: &[(i64, usize, usize, &[usize])] = &[
        (3, 7, 0, &[3, 3, 1]),
        (3, 3, 0, &[3]),
        (3, 3, 4, &[7]),
        (1, 2, 0, &[1, 1]),
    ];
    for (limit, with, without, expected) in table {
        let mut pods: Vec<PodInfo> = (0..*with)
            .map(|i| pod_with_volumes(&format!("v{i}"), &[&format!("c{i}")]))
            .collect();
        pods.extend((0..*without).map(|i| pod(&format!("plain{i}"), 100, 128, json!({}))));
        for repack in [false, true] {
            let input = Input {
                pods: pods.clone(),
                nodepools: vec![pool("default", vec![limited("big", *limit)])],
                well_known_labels: well_known(),
                repack,
                ..Input::default()
            };
            let out = solve(&input);
            assert!(out.errors.is_empty(), "{:?}", out.errors);
            let mut sizes: Vec<usize> = out.new_claims.iter().map(|c| c.pods.len()).collect();
            sizes.sort_unstable_by(|a, b| b.cmp(a));
            assert_eq!(
                sizes, *expected,
                "limit {limit}, {with} with a volume, {without} without, repack {repack}"
            );
        }
    }
}

#[test]
fn a_shared_claim_takes_one_slot_on_a_new_nodeclaim() {
    let pods: Vec<PodInfo> = (0..4)
        .map(|i| pod_with_volumes(&format!("p{i}"), &["shared"]))
        .collect();
    let out = solve(&Input {
        pods,
        nodepools: vec![pool("default", vec![limited("big", 1)])],
        well_known_labels: well_known(),
        ..Input::default()
    });
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.new_claims.len(), 1);
}

#[test]
fn types_that_cannot_attach_the_volumes_are_dropped_from_a_new_nodeclaim() {
    let types = vec![limited("cheap", 1), {
        let it = instance_type("roomy", 16, 64, 0.9);
        Arc::new((*it).clone().with_ebs_attach_limit(Some(4)))
    }];
    let out = solve(&Input {
        pods: vec![pod_with_volumes("p", &["a", "b"])],
        nodepools: vec![pool("default", types.clone())],
        well_known_labels: well_known(),
        ..Input::default()
    });
    let names: Vec<&str> = out.new_claims[0]
        .fitting
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(names, ["roomy"]);

    // Five volumes: no type attaches them; the largest limit is named.
    let out = solve(&Input {
        pods: vec![pod_with_volumes("p", &["a", "b", "c", "d", "e"])],
        nodepools: vec![pool("default", types)],
        well_known_labels: well_known(),
        ..Input::default()
    });
    let rejection = &out.errors[0].rejections[0].1;
    assert!(
        matches!(rejection, Rejection::AttachLimit(l) if l.limit == 4 && l.driver == EBS_CSI_DRIVER),
        "{rejection:?}"
    );
}

#[test]
fn an_in_flight_nodeclaim_is_limited_by_its_instance_types() {
    let types: HashMap<String, Arc<InstanceType>> = [limited("small", 1), limited("big", 3)]
        .into_iter()
        .map(|t| (t.name.clone(), t))
        .collect();
    let in_flight = testutil::nodeclaim("default-abc")
        .nodepool("default")
        .requirement(
            crds::labels::INSTANCE_TYPE_LABEL,
            crds::Operator::In,
            ["small", "big"],
        )
        .build();
    let launched = testutil::nodeclaim("default-def")
        .nodepool("default")
        .label(crds::labels::INSTANCE_TYPE_LABEL, "big")
        .requirement(
            crds::labels::INSTANCE_TYPE_LABEL,
            crds::Operator::In,
            ["small", "big"],
        )
        .build();
    let snap = Snapshot {
        nodeclaims: vec![Arc::new(in_flight), Arc::new(launched)],
        ..Snapshot::default()
    };
    let existing = snap.existing_capacity(&HashMap::new(), &types.into());
    let limit = |name: &str| {
        existing
            .iter()
            .find(|e| e.name == name)
            .and_then(|e| e.attach_limits.get(EBS_CSI_DRIVER).copied())
    };
    // It may launch as either type: the smaller limit holds until it has launched.
    assert_eq!(limit("default-abc"), Some(1));
    assert_eq!(limit("default-def"), Some(3));
}

#[test]
fn why_pending_names_the_attach_limit() {
    let pool_candidate = PoolCandidate {
        name: "default".into(),
        weight: 0,
        state: Ok(pool("default", vec![limited("big", 25)])),
        limits: BTreeMap::new(),
    };
    let claims: Vec<String> = (0..26).map(|i| format!("c{i}")).collect();
    let claims: Vec<&str> = claims.iter().map(String::as_str).collect();
    let verdicts = explain::explain(
        &pod_with_volumes("p", &claims),
        &[pool_candidate],
        &BTreeMap::new(),
    );
    let Verdict::Rejected(reason) = &verdicts[0].verdict else {
        panic!("expected a rejection: {verdicts:?}");
    };
    assert_eq!(
        reason,
        &Reason::AttachLimit {
            driver: EBS_CSI_DRIVER.into(),
            limit: 25
        }
    );
    assert_eq!(
        reason.to_string(),
        "ebs.csi.aws.com attach limit 25 reached"
    );
}
