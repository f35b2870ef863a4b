//! Nominations from the provisioner's plan: which pods to nominate when a planned NodeClaim's
//! node registers, which records are settled, which nominations are stale, and the room
//! reserved for planned and nominated pods in the snapshot's capacity.

use std::collections::HashMap;
use std::sync::Arc;

use crate::pod_view::PodView;
use crds::NodeClaim;
use k8s_openapi::api::core::v1::Node;
use serde_json::json;
use testutil::{node, nodeclaim, pod};

use crate::capacity::index::TypeIndex;

use super::*;

fn waiting(name: &str, cpu: &str) -> Arc<PodView> {
    pod(name).uid(name).cpu(cpu).unschedulable().arc()
}

fn nominated(name: &str, cpu: &str, node: &str) -> Arc<PodView> {
    pod(name)
        .uid(name)
        .cpu(cpu)
        .unschedulable()
        .merge(json!({"status": {"nominatedNodeName": node}}))
        .arc()
}

fn now() -> Timestamp {
    "2026-01-01T00:10:00Z".parse().expect("a timestamp")
}

fn key(name: &str) -> PodKey {
    PodKey {
        namespace: "default".into(),
        name: name.into(),
    }
}

/// A Karpenter node of NodePool `default`, 4 CPUs allocatable, initialized or not.
fn karpenter_node(name: &str, initialized: bool) -> Arc<Node> {
    let mut b = node(name)
        .provider_id(format!("sim:///{name}"))
        .label(NODEPOOL_LABEL, "default")
        .allocatable("cpu", "4")
        .allocatable("memory", "16Gi")
        .allocatable("pods", "110")
        .ready("True");
    if initialized {
        b = b.label(NODE_INITIALIZED_LABEL, "true");
    }
    b.arc()
}

fn launched_claim(name: &str, node: Option<&str>) -> Arc<NodeClaim> {
    let mut b = nodeclaim(name)
        .nodepool("default")
        .condition("Launched", "True")
        .allocatable("cpu", "4")
        .allocatable("memory", "16Gi")
        .allocatable("pods", "110");
    if let Some(n) = node {
        b = b.provider_id(format!("sim:///{n}")).node_name(n);
    }
    b.arc()
}

fn planned(pairs: &[(&str, &str)]) -> HashMap<PodKey, String> {
    pairs.iter().map(|(p, c)| (key(p), c.to_string())).collect()
}

#[test]
fn pods_planned_onto_a_registered_nodeclaim_are_nominated_to_its_node() {
    let snap = Snapshot {
        pods: vec![
            waiting("gpu-a", "1"),
            waiting("gpu-b", "1"),
            waiting("cpu-only", "1"),
            nominated("already", "1", "n1"),
        ],
        nodes: vec![karpenter_node("n1", false)],
        nodeclaims: vec![
            launched_claim("gpu-claim", Some("n1")),
            launched_claim("other", None),
        ],
        planned: planned(&[
            ("gpu-a", "gpu-claim"),
            ("gpu-b", "gpu-claim"),
            ("cpu-only", "other"),
            ("already", "gpu-claim"),
        ]),
        ..Snapshot::default()
    };
    let node = "n1".to_string();
    assert_eq!(
        to_nominate(&snap),
        vec![
            Nominate {
                pod: key("gpu-a"),
                node: node.clone()
            },
            Nominate {
                pod: key("gpu-b"),
                node
            },
        ],
        "only pods of the NodeClaim whose node registered, and not ones nominated already"
    );
    assert_eq!(
        planned_onto(&snap, "gpu-claim"),
        vec![key("gpu-a"), key("gpu-b")]
    );
    assert_eq!(planned_onto(&snap, "other"), vec![key("cpu-only")]);
}

#[test]
fn records_settle_when_the_pod_binds_or_is_nominated_or_its_nodeclaim_goes() {
    let deleting = nodeclaim("deleting")
        .nodepool("default")
        .deleting("2026-01-01T00:00:00Z")
        .arc();
    let snap = Snapshot {
        pods: vec![
            waiting("waits", "1"),
            pod("bound").uid("bound").cpu("1").on_node("n1").arc(),
            nominated("nominated", "1", "n1"),
            waiting("claim-deleting", "1"),
            waiting("claim-gone", "1"),
        ],
        nodeclaims: vec![launched_claim("c", None), deleting],
        planned: planned(&[
            ("waits", "c"),
            ("bound", "c"),
            ("nominated", "c"),
            ("claim-deleting", "deleting"),
            ("claim-gone", "gone"),
            ("pod-gone", "c"),
        ]),
        ..Snapshot::default()
    };
    assert_eq!(
        settled(&snap, now()),
        vec![
            key("bound"),
            key("claim-deleting"),
            key("claim-gone"),
            key("nominated"),
            key("pod-gone"),
        ]
    );
}

#[test]
fn nominations_to_gone_or_leaving_nodes_are_stale() {
    let cordoned = node("cordoned")
        .label(NODEPOOL_LABEL, "default")
        .merge(json!({"spec": {"unschedulable": true}}))
        .arc();
    let disrupted = node("disrupted")
        .label(NODEPOOL_LABEL, "default")
        .taint("karpenter.sh/disrupted:NoSchedule")
        .arc();
    let foreign_cordoned = node("foreign")
        .merge(json!({"spec": {"unschedulable": true}}))
        .arc();
    let snap = Snapshot {
        pods: vec![
            nominated("a", "1", "gone"),
            nominated("b", "1", "cordoned"),
            nominated("c", "1", "disrupted"),
            nominated("d", "1", "foreign"),
            pod("e")
                .uid("e")
                .cpu("1")
                .on_node("disrupted")
                .merge(json!({"status": {"nominatedNodeName": "gone"}}))
                .arc(),
        ],
        nodes: vec![cordoned, disrupted, foreign_cordoned],
        ..Snapshot::default()
    };
    let found: Vec<(String, String, StaleReason)> = stale(&snap, now())
        .into_iter()
        .map(|s| (s.pod.name, s.node, s.reason))
        .collect();
    assert_eq!(
        found,
        vec![
            ("a".into(), "gone".into(), StaleReason::NodeGone),
            ("b".into(), "cordoned".into(), StaleReason::NodeLeaving),
            ("c".into(), "disrupted".into(), StaleReason::NodeLeaving),
        ],
        "a node Karpenter does not manage keeps its nominations (kube-scheduler's preemption); \
         a bound pod's leftover nomination is not Karpenter's to clear"
    );
}

#[test]
fn an_initialized_node_keeps_the_nominations_it_can_hold_in_queue_order() {
    // 4 CPUs: 1 bound (and 1 terminating, whose room is about to be freed), then the
    // high-priority pod (2), then the older of the two 1-CPU pods; the newer one is stale.
    let snap = Snapshot {
        pods: vec![
            pod("bound").uid("bound").cpu("1").on_node("n1").arc(),
            pod("leaving")
                .uid("leaving")
                .cpu("2")
                .on_node("n1")
                .deleting("2026-01-01T00:00:00Z")
                .arc(),
            pod("older")
                .uid("older")
                .cpu("1")
                .created("2026-01-01T00:00:00Z")
                .merge(json!({"status": {"nominatedNodeName": "n1"}}))
                .arc(),
            pod("newer")
                .uid("newer")
                .cpu("1")
                .created("2026-01-01T00:01:00Z")
                .merge(json!({"status": {"nominatedNodeName": "n1"}}))
                .arc(),
            pod("important")
                .uid("important")
                .cpu("2")
                .created("2026-01-01T00:02:00Z")
                .merge(json!({"spec": {"priority": 1000}, "status": {"nominatedNodeName": "n1"}}))
                .arc(),
            nominated("uninitialized", "8", "n2"),
        ],
        nodes: vec![karpenter_node("n1", true), karpenter_node("n2", false)],
        ..Snapshot::default()
    };
    let found: Vec<(String, StaleReason)> = stale(&snap, now())
        .into_iter()
        .map(|s| (s.pod.name, s.reason))
        .collect();
    assert_eq!(
        found,
        vec![("newer".into(), StaleReason::DoesNotFit)],
        "an uninitialized node may not report its resources yet, so it is not judged"
    );
}

#[test]
fn planned_and_nominated_pods_hold_their_room_and_are_not_provisioned_again() {
    let snap = Snapshot {
        pods: vec![
            waiting("planned", "3"),
            waiting("free", "1"),
            nominated("on-node", "3", "n1"),
            waiting("claim-gone", "1"),
        ],
        nodes: vec![karpenter_node("n1", false)],
        nodeclaims: vec![launched_claim("c", None), launched_claim("c1", Some("n1"))],
        planned: planned(&[("planned", "c"), ("claim-gone", "gone")]),
        ..Snapshot::default()
    };
    let provisionable: Vec<String> = snap
        .provisionable_pods()
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(provisionable, vec!["free", "claim-gone"]);
    let capacity = snap.existing_capacity(&HashMap::new(), &TypeIndex::default());
    let available: HashMap<String, i64> = capacity
        .iter()
        .map(|e| (e.name.clone(), e.available.cpu))
        .collect();
    assert_eq!(available["c"], 1000, "4 CPUs less the 3 planned onto it");
    assert_eq!(available["n1"], 1000, "4 CPUs less the 3 nominated to it");
    let names = capacity.iter().map(|e| e.name.clone()).collect();
    let mut held: Vec<(String, String)> = snap
        .bound_pods(&names)
        .into_iter()
        .map(|b| (b.pod.key.name, b.node))
        .collect();
    held.sort();
    assert_eq!(
        held,
        vec![
            ("on-node".into(), "n1".into()),
            ("planned".into(), "c".into())
        ],
        "reserved pods count for topology where they are expected"
    );
}

#[test]
fn a_nomination_kube_scheduler_did_not_honour_within_the_window_is_stale() {
    let claim = |name: &str, node: &str, initialized_at: &str| {
        nodeclaim(name)
            .nodepool("default")
            .provider_id(format!("sim:///{node}"))
            .node_name(node)
            .with_condition(testutil::condition("Initialized", "True").at(initialized_at))
            .arc()
    };
    let snap = Snapshot {
        pods: vec![nominated("old", "1", "n1"), nominated("fresh", "1", "n2")],
        nodes: vec![karpenter_node("n1", true), karpenter_node("n2", true)],
        nodeclaims: vec![
            claim("c1", "n1", "2026-01-01T00:08:59Z"),
            claim("c2", "n2", "2026-01-01T00:09:01Z"),
        ],
        ..Snapshot::default()
    };
    let found: Vec<(String, StaleReason)> = stale(&snap, now())
        .into_iter()
        .map(|s| (s.pod.name, s.reason))
        .collect();
    assert_eq!(
        found,
        vec![("old".into(), StaleReason::NotBound)],
        "61 s and 59 s after initialization"
    );
}

#[test]
fn a_plan_whose_nomination_never_came_is_forgotten_after_the_window() {
    let claim = nodeclaim("c")
        .nodepool("default")
        .provider_id("sim:///n1")
        .node_name("n1")
        .with_condition(testutil::condition("Initialized", "True").at("2026-01-01T00:08:30Z"))
        .arc();
    let snap = Snapshot {
        pods: vec![waiting("planned", "1")],
        nodes: vec![karpenter_node("n1", true)],
        nodeclaims: vec![claim],
        planned: planned(&[("planned", "c")]),
        ..Snapshot::default()
    };
    assert_eq!(settled(&snap, now()), vec![key("planned")]);
    let earlier = "2026-01-01T00:09:10Z".parse().expect("a timestamp");
    assert!(
        settled(&snap, earlier).is_empty(),
        "40 s after initialization it still holds"
    );
}
