//! Tests of consolidation candidates: one verdict per Karpenter NodeClaim, with the reason a
//! node is left alone.

use std::collections::HashMap;
use std::sync::Arc;

use crate::pod_view::PodView;
use crds::labels::{
    CAPACITY_TYPE_LABEL, DO_NOT_DISRUPT_ANNOTATION, HOSTNAME_LABEL, INSTANCE_TYPE_LABEL,
    NODEPOOL_LABEL, TOPOLOGY_ZONE_LABEL,
};
use crds::{NodeClaim, NodePool};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use testutil::{T0, node, nodeclaim, nodepool, pdb, pod};

use super::*;
use crate::capacity::index::TypeIndex;
use crate::scheduling::testing::small_medium_large;

/// A ready Karpenter node `name` of `gp.xlarge` (4 vCPU, 16 GiB) in test-zone-a, initialized at
/// [`T0`], with its NodeClaim `default-<name>`.
pub(crate) fn karpenter_node(
    name: &str,
    instance_type: &str,
    capacity_type: &str,
) -> (Arc<NodeClaim>, Arc<Node>) {
    let pid = format!("aws:///test-zone-a/i-{name}");
    let claim = nodeclaim(format!("default-{name}"))
        .nodepool("default")
        .label(INSTANCE_TYPE_LABEL, instance_type)
        .label(TOPOLOGY_ZONE_LABEL, "test-zone-a")
        .label(CAPACITY_TYPE_LABEL, capacity_type)
        .provider_id(&pid)
        .node_name(name)
        .created(T0)
        .condition("Launched", "True")
        .condition("Registered", "True")
        .condition("Initialized", "True")
        .arc();
    let (cpu, memory) = match instance_type {
        "gp.large" => ("2", "8Gi"),
        "gp.xlarge" => ("4", "16Gi"),
        _ => ("16", "64Gi"),
    };
    let node = node(name)
        .provider_id(&pid)
        .label(NODEPOOL_LABEL, "default")
        .label(INSTANCE_TYPE_LABEL, instance_type)
        .label(TOPOLOGY_ZONE_LABEL, "test-zone-a")
        .label(CAPACITY_TYPE_LABEL, capacity_type)
        .label(HOSTNAME_LABEL, name)
        .label("kubernetes.io/arch", "amd64")
        .label("kubernetes.io/os", "linux")
        .ready("True")
        .allocatable("cpu", cpu)
        .allocatable("memory", memory)
        .allocatable("pods", "110")
        .arc();
    (claim, node)
}

/// A running pod of a ReplicaSet on `node` asking `cpu`.
pub(crate) fn running(name: &str, node: &str, cpu: &str) -> Arc<PodView> {
    pod(name)
        .cpu(cpu)
        .memory("256Mi")
        .on_node(node)
        .phase("Running")
        .label("app", "web")
        .owner("apps/v1", "ReplicaSet", "web-abc", "rs-uid")
        .arc()
}

/// The default NodePool, Ready, `consolidateAfter: 0s` unless `extra` says otherwise.
pub(crate) fn pool(extra: serde_json::Value) -> Arc<NodePool> {
    nodepool("default")
        .condition("Ready", "True")
        .merge(serde_json::json!({"spec": {"disruption": extra}}))
        .arc()
}

pub(crate) fn types() -> TypeIndex {
    let mut index = TypeIndex::default();
    index.add_listed(&small_medium_large());
    index
}

fn at(t: &str) -> Timestamp {
    t.parse().expect("time")
}

fn standing(snap: &Snapshot, now: &str) -> Vec<(String, Result<usize, String>)> {
    verdicts(snap, &types(), at(now))
        .into_iter()
        .map(|v| {
            (
                v.nodeclaim,
                v.standing.map(|c| c.pods.len()).map_err(|e| e.to_string()),
            )
        })
        .collect()
}

#[test]
fn an_initialized_node_past_consolidate_after_is_a_priced_candidate() {
    let (claim, n) = karpenter_node("a", "gp.xlarge", "on-demand");
    let snap = Snapshot {
        nodeclaims: vec![claim],
        nodes: vec![n],
        nodepools: vec![pool(serde_json::json!({}))],
        pods: vec![
            running("web-1", "a", "500m"),
            pod("ds")
                .on_node("a")
                .owner("apps/v1", "DaemonSet", "logs", "ds-uid")
                .arc(),
            pod("done").on_node("a").phase("Succeeded").arc(),
        ],
        ..Snapshot::default()
    };
    let v = verdicts(&snap, &types(), at("2026-01-01T00:00:01Z"));
    let c = v[0].standing.as_ref().expect("a candidate");
    assert_eq!(c.instance_type, "gp.xlarge");
    assert_eq!(c.price, Some(0.20), "its on-demand offering in test-zone-a");
    let names: Vec<&str> = c
        .pods
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    assert_eq!(names, ["web-1"], "DaemonSet and finished pods do not move");
    // One pod of cost 1, times the share of expireAfter (720h by default) still ahead.
    assert!(
        c.disruption_cost < 1.0 && c.disruption_cost > 0.999,
        "{}",
        c.disruption_cost
    );
}

#[test]
fn every_reason_to_leave_a_node_alone_is_named() {
    let now = "2026-01-01T00:05:00Z";
    let node_pair = |name: &str| karpenter_node(name, "gp.xlarge", "on-demand");
    let (a, na) = node_pair("a");
    let (b, nb) = node_pair("b");
    let (c, nc) = node_pair("c");
    let (d, nd) = node_pair("d");
    let (e, ne) = node_pair("e");
    let mut nb = (*nb).clone();
    nb.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(DO_NOT_DISRUPT_ANNOTATION.into(), "true".into());
    let mut d = (*d).clone();
    d.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            crds::upgrade::REPLACEMENT_ANNOTATION.into(),
            "default-x".into(),
        );
    let mut e = (*e).clone();
    e.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(
        "2026-01-01T00:04:00Z",
    )));
    let unready = nodeclaim("default-f")
        .nodepool("default")
        .condition("Launched", "True")
        .arc();
    let snap = Snapshot {
        nodeclaims: vec![a, b, c, Arc::new(d), Arc::new(e), unready],
        nodes: vec![na, Arc::new(nb), nc, nd, ne],
        nodepools: vec![pool(serde_json::json!({}))],
        pods: vec![
            pod("pinned")
                .on_node("a")
                .phase("Running")
                .do_not_disrupt()
                .arc(),
            running("guarded", "c", "100m"),
        ],
        pdbs: vec![
            pdb("web")
                .selecting("app", "web")
                .disruptions_allowed(0)
                .arc(),
        ],
        ..Snapshot::default()
    };
    let got = standing(&snap, now);
    let expect = [
        (
            "default-a",
            "pod default/pinned has karpenter.sh/do-not-disrupt",
        ),
        ("default-b", "the node has karpenter.sh/do-not-disrupt"),
        (
            "default-c",
            "PodDisruptionBudget default/web allows no disruption (pod default/guarded)",
        ),
        (
            "default-d",
            "already being disrupted: upgrade step (replacement default-x)",
        ),
        ("default-e", "being deleted"),
        ("default-f", "not initialized"),
    ];
    for ((name, got), (want_name, want)) in got.iter().zip(expect) {
        assert_eq!(name, want_name);
        assert_eq!(got.as_ref().err().map(String::as_str), Some(want), "{name}");
    }
}

#[test]
fn consolidate_after_and_the_policy_decide_when_and_what() {
    let (claim, n) = karpenter_node("a", "gp.xlarge", "on-demand");
    let with = |disruption: serde_json::Value, pods: Vec<Arc<PodView>>| Snapshot {
        nodeclaims: vec![Arc::clone(&claim)],
        nodes: vec![Arc::clone(&n)],
        nodepools: vec![pool(disruption)],
        pods,
        ..Snapshot::default()
    };
    let ten_minutes = with(serde_json::json!({"consolidateAfter": "10m"}), vec![]);
    assert_eq!(
        standing(&ten_minutes, "2026-01-01T00:05:00Z")[0].1,
        Err("consolidateAfter has not elapsed (at 2026-01-01T00:10:00Z)".into())
    );
    assert_eq!(standing(&ten_minutes, "2026-01-01T00:10:00Z")[0].1, Ok(0));
    let never = with(serde_json::json!({"consolidateAfter": "Never"}), vec![]);
    assert_eq!(
        standing(&never, "2030-01-01T00:00:00Z")[0].1,
        Err("consolidation disabled (consolidateAfter: Never)".into())
    );
    let when_empty = |pods| {
        with(
            serde_json::json!({"consolidationPolicy": "WhenEmpty"}),
            pods,
        )
    };
    assert_eq!(
        standing(
            &when_empty(vec![running("w", "a", "1")]),
            "2026-01-01T00:01:00Z"
        )[0]
        .1,
        Err("consolidationPolicy WhenEmpty and 1 pod(s) would have to move".into())
    );
    assert_eq!(
        standing(&when_empty(vec![]), "2026-01-01T00:01:00Z")[0].1,
        Ok(0)
    );
}

#[test]
fn the_last_pod_event_restarts_consolidate_after() {
    let (claim, n) = karpenter_node("a", "gp.xlarge", "on-demand");
    let mut claim = (*claim).clone();
    claim
        .status
        .get_or_insert_with(Default::default)
        .last_pod_event_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(
        "2026-01-01T01:00:00Z",
    )));
    let p = pool(serde_json::json!({"consolidateAfter": "30m"}));
    assert_eq!(
        consolidatable_at(&claim, &p),
        Some(at("2026-01-01T01:30:00Z"))
    );
    let snap = Snapshot {
        nodeclaims: vec![Arc::new(claim)],
        nodes: vec![n],
        nodepools: vec![p],
        ..Snapshot::default()
    };
    assert!(standing(&snap, "2026-01-01T01:29:59Z")[0].1.is_err());
    assert_eq!(standing(&snap, "2026-01-01T01:30:00Z")[0].1, Ok(0));
}

/// Upstream leaves a node alone while pending pods are nominated to it ("state node is
/// nominated for a pending pod"); here also while pods planned onto its NodeClaim wait for it.
#[test]
fn a_node_pending_pods_wait_for_is_not_a_candidate() {
    let (a, na) = karpenter_node("a", "gp.xlarge", "on-demand");
    let (b, nb) = karpenter_node("b", "gp.xlarge", "on-demand");
    let nominated = pod("nominated")
        .cpu("1")
        .unschedulable()
        .merge(serde_json::json!({"status": {"nominatedNodeName": "a"}}))
        .arc();
    let planned = pod("planned").cpu("1").unschedulable().arc();
    let snap = Snapshot {
        nodeclaims: vec![a, b],
        nodes: vec![na, nb],
        nodepools: vec![pool(serde_json::json!({}))],
        pods: vec![nominated, planned],
        planned: HashMap::from([(
            crate::scheduling::pod::PodKey::of(&pod("planned").decode()),
            "default-b".to_string(),
        )]),
        ..Snapshot::default()
    };
    let v = verdicts(&snap, &types(), at("2026-01-01T00:00:01Z"));
    let standing: Vec<String> = v
        .iter()
        .map(|v| match &v.standing {
            Ok(_) => "candidate".to_string(),
            Err(e) => e.to_string(),
        })
        .collect();
    assert_eq!(
        standing,
        [
            "nominated for 1 pending pod(s)",
            "nominated for 1 pending pod(s)"
        ]
    );
}

/// A node `name` tainted `karpenter.sh/disrupted` and its NodeClaim `default-<name>`, changed by
/// `on_claim` and `on_node`.
fn tainted(
    name: &str,
    on_claim: impl FnOnce(testutil::NodeClaimBuilder) -> testutil::NodeClaimBuilder,
    on_node: impl FnOnce(testutil::NodeBuilder) -> testutil::NodeBuilder,
) -> (Arc<NodeClaim>, Arc<Node>) {
    let pid = format!("aws:///test-zone-a/i-{name}");
    let claim = nodeclaim(format!("default-{name}"))
        .nodepool("default")
        .provider_id(&pid)
        .node_name(name);
    let tainted = node(name)
        .provider_id(&pid)
        .taint("karpenter.sh/disrupted:NoSchedule");
    (on_claim(claim).arc(), on_node(tainted).arc())
}

#[test]
fn a_disrupted_taint_nothing_holds_is_stale() {
    fn same<B>(b: B) -> B {
        b
    }
    let nodes = [
        // Leaked: nothing holds the NodeClaim.
        tainted("leaked", same, same),
        // A command holds it.
        tainted(
            "command",
            |c| c.annotation(COMMAND_ANNOTATION, "underutilized-bcdfg"),
            same,
        ),
        // An upgrade step holds it.
        tainted(
            "upgrade",
            |c| c.annotation(REPLACEMENT_ANNOTATION, ""),
            same,
        ),
        // Its NodeClaim is deleting: termination tainted it.
        tainted("deleting-claim", |c| c.deleting(T0), same),
        // A disruption reason is set before the delete.
        tainted("reason", |c| c.condition("DisruptionReason", "True"), same),
        // The node itself is deleting.
        tainted("deleting-node", same, |n| n.deleting(T0)),
    ];
    let (untainted_claim, untainted) = karpenter_node("clean", "gp.xlarge", "on-demand");
    let orphan = node("orphan")
        .provider_id("aws:///test-zone-a/i-orphan")
        .taint("karpenter.sh/disrupted:NoSchedule")
        .arc();
    let mut snap = Snapshot::default();
    for (c, n) in nodes {
        snap.nodeclaims.push(c);
        snap.nodes.push(n);
    }
    snap.nodeclaims.push(untainted_claim);
    snap.nodes.push(untainted);
    snap.nodes.push(orphan);
    assert_eq!(
        stale_disrupted_taints(&snap),
        [("leaked".to_string(), "default-leaked".to_string())]
    );
}

/// A node is priced as its NodePool lists its type: with a NodeOverlay's price when one
/// applies to that pool, as the replacement it is compared with.
#[test]
fn a_candidate_is_priced_with_its_nodepools_overlaid_types() {
    use crate::provisioning::listing::{Listing, pool_types};
    let (claim, n) = karpenter_node("a", "gp.xlarge", "on-demand");
    let overlay: crds::NodeOverlay = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
        "metadata": {"name": "discount"},
        "spec": {"requirements": [{"key": "karpenter.sh/nodepool", "operator": "In",
                                   "values": ["default"]}],
                 "priceAdjustment": "-50%"},
    }))
    .expect("overlay");
    let snap = Snapshot {
        nodeclaims: vec![claim],
        nodes: vec![n],
        nodepools: vec![pool(serde_json::json!({}))],
        nodeclasses: vec![
            testutil::ec2nodeclass("default")
                .subnet_ids(["subnet-1"])
                .security_group_ids(["sg-1"])
                .arc(),
        ],
        nodeoverlays: vec![Arc::new(overlay)],
        ..Snapshot::default()
    };
    let listings: HashMap<String, Listing> =
        HashMap::from([("default".to_string(), Ok(Arc::new(small_medium_large())))]);
    let index = pool_types(&snap, &listings).index;
    let v = verdicts(&snap, &index, at("2026-01-01T00:00:01Z"));
    let c = v[0].standing.as_ref().expect("a candidate");
    assert_eq!(c.price, Some(0.10), "half of gp.xlarge's 0.20 on demand");
}
