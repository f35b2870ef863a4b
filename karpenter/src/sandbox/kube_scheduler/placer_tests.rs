//! Table tests of the simulated kube-scheduler (`KubeScheduler::place`), translated from the
//! Kubernetes scheduler's own plugin tests. Each case cites its source (file in
//! kubernetes/kubernetes, test function, case name) and keeps Kubernetes' expectation: a case
//! passes in Kubernetes iff `place` returns `Ok` for the incoming pod on that node.
//!
//! Kubernetes' Filter tests run PreFilter over every node of the case and then judge one node at
//! a time. [`feasible`] does the same with `place`: for each node it reruns the pass with every
//! other node full (`allocatable.pods: 0`), so the others still define topology domains and hold
//! their pods but cannot take the incoming pod. Where a Kubernetes case notes that another plugin
//! would reject a node "in real case", the expectation here is that real outcome, since `place`
//! runs every filter.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use sandbox::actors::NodeEligibility;
use serde_json::{Value, json};

use super::placer::KubeScheduler;
use super::unschedulable::Unschedulable;
use super::view::{ClusterView, PodPlacer};

const HOSTNAME: &str = "kubernetes.io/hostname";

/// Shallow-merge the fields of `extra` (an object) into `base` (an object).
fn merge(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
    base
}

/// A Ready node with exactly `labels`, room for 110 pods and plenty of cpu and memory.
fn node(name: &str, labels: Value) -> Node {
    testutil::node(name)
        .merge(json!({"metadata": {"labels": labels}}))
        .allocatable("cpu", "16")
        .allocatable("memory", "64Gi")
        .allocatable("pods", "110")
        .ready("True")
        .build()
}

/// `node` with taints.
fn tainted(mut n: Node, taints: Value) -> Node {
    n.spec = Some(serde_json::from_value(json!({ "taints": taints })).expect("taints are valid"));
    n
}

/// A pod in namespace `default` with `labels` and extra spec fields (one container by default).
fn pod(name: &str, labels: Value, spec: Value) -> Pod {
    pod_in("default", name, labels, spec)
}

/// A pod in `namespace` (uid `uid-<namespace>-<name>`) with `labels` and extra spec fields.
fn pod_in(namespace: &str, name: &str, labels: Value, spec: Value) -> Pod {
    testutil::pod(name)
        .namespace(namespace)
        .uid(format!("uid-{namespace}-{name}"))
        .merge(json!({"metadata": {"labels": labels}, "spec": spec}))
        .build()
}

/// The pod bound to `node_name`.
fn on(node_name: &str, mut p: Pod) -> Pod {
    if let Some(spec) = p.spec.as_mut() {
        spec.node_name = Some(node_name.to_string());
    }
    p
}

/// The pod with a deletion timestamp (terminating).
fn terminating(mut p: Pod) -> Pod {
    p.metadata.deletion_timestamp =
        serde_json::from_value(json!("2024-01-01T00:00:00Z")).expect("timestamp");
    p
}

/// `{"matchExpressions": [{key, Exists}]}`.
fn exists(key: &str) -> Value {
    json!({"matchExpressions": [{"key": key, "operator": "Exists"}]})
}

/// `{"matchExpressions": [{key, op, values}]}`.
fn sel(key: &str, op: &str, values: &[&str]) -> Value {
    json!({"matchExpressions": [{"key": key, "operator": op, "values": values}]})
}

/// A required pod (anti-)affinity term.
fn term(key: &str, selector: Value) -> Value {
    json!({"topologyKey": key, "labelSelector": selector})
}

/// Spec fields for required pod affinity and anti-affinity terms.
fn pod_affinity(affinity: Vec<Value>, anti: Vec<Value>) -> Value {
    json!({"affinity": {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": affinity},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": anti},
    }})
}

/// Spec fields for required node affinity with these node selector terms.
fn node_affinity(terms: Value) -> Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": terms}}}})
}

/// A `DoNotSchedule` topology spread constraint, with extra fields merged in.
fn spread(max_skew: i32, key: &str, selector: Value, extra: Value) -> Value {
    merge(
        json!({"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": selector}),
        extra,
    )
}

/// Spec fields with these topology spread constraints.
fn spreads(constraints: Vec<Value>) -> Value {
    json!({ "topologySpreadConstraints": constraints })
}

struct Case {
    /// The Kubernetes case name.
    name: &'static str,
    nodes: Vec<Node>,
    bound: Vec<Pod>,
    pod: Pod,
    /// Nodes the incoming pod may be placed on; every other node must reject it.
    fits: Vec<String>,
}

fn case(name: &'static str, nodes: Vec<Node>, bound: Vec<Pod>, pod: Pod, fits: &[&str]) -> Case {
    Case {
        name,
        nodes,
        bound,
        pod,
        fits: fits.iter().map(|s| s.to_string()).collect(),
    }
}

/// The namespaces (and labels) of `interpodaffinity/filtering_test.go`.
fn namespaces() -> BTreeMap<String, BTreeMap<String, String>> {
    let team = |t: &str| BTreeMap::from([("team".to_string(), t.to_string())]);
    BTreeMap::from([
        ("default".to_string(), BTreeMap::new()),
        ("ns1".to_string(), BTreeMap::new()),
        ("ns2".to_string(), BTreeMap::new()),
        ("NS1".to_string(), BTreeMap::new()),
        ("NS2".to_string(), BTreeMap::new()),
        ("subteam1.team1".to_string(), team("team1")),
        ("subteam2.team1".to_string(), team("team1")),
        ("subteam1.team2".to_string(), team("team2")),
        ("subteam2.team2".to_string(), team("team2")),
    ])
}

/// The nodes `place` puts the incoming pod on when judged one node at a time (see the module
/// docs).
fn feasible(c: &Case) -> Result<Vec<String>, String> {
    let bound: Vec<Arc<Pod>> = c.bound.iter().cloned().map(Arc::new).collect();
    let pending = vec![Arc::new(c.pod.clone())];
    let namespaces = namespaces();
    let mut fits = Vec::new();
    for target in &c.nodes {
        let target_name = target.metadata.name.clone().unwrap_or_default();
        let nodes: Vec<Arc<Node>> = c
            .nodes
            .iter()
            .map(|n| {
                let mut n = n.clone();
                if n.metadata.name.as_deref() != Some(target_name.as_str())
                    && let Some(a) = n.status.as_mut().and_then(|s| s.allocatable.as_mut())
                {
                    a.insert("pods".into(), Quantity("0".into()));
                }
                Arc::new(n)
            })
            .collect();
        let view = ClusterView {
            pending: &pending,
            nominated: &[],
            nodes: &nodes,
            bound: &bound,
            namespaces: &namespaces,
            pvcs: &[],
            pvs: &[],
            storage_classes: &[],
            csinodes: &[],
            volume_attachments: &[],
        };
        match KubeScheduler::new().place(&view).as_slice() {
            [Ok(chosen)] if *chosen == target_name => fits.push(target_name),
            [Ok(chosen)] => return Err(format!("placed on full node {chosen}")),
            [Err(_)] => {}
            other => return Err(format!("one result per pending pod expected: {other:?}")),
        }
    }
    Ok(fits)
}

fn check(cases: Vec<Case>) {
    let mut failures = Vec::new();
    for c in &cases {
        match feasible(c) {
            Ok(fits) if fits == c.fits => {}
            Ok(fits) => failures.push(format!(
                "{:?}: feasible {fits:?}, Kubernetes {:?}",
                c.name, c.fits
            )),
            Err(e) => failures.push(format!("{:?}: {e}", c.name)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from Kubernetes:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// One node judged alone: the pod fits it or not.
fn single(name: &'static str, n: Node, bound: Vec<Pod>, pod: Pod, fits: bool) -> Case {
    let node_name = n.metadata.name.clone().unwrap_or_default();
    Case {
        name,
        nodes: vec![n],
        bound,
        pod,
        fits: if fits { vec![node_name] } else { vec![] },
    }
}

#[test]
fn node_affinity_matches_kubernetes() {
    // The incoming pod of a TestNodeAffinity case, judged against `node1` with `labels`.
    let na = |name: &'static str, spec: Value, labels: Value, fits: bool| {
        single(
            name,
            node("node1", labels),
            vec![],
            pod("p", json!({}), spec),
            fits,
        )
    };
    let on_node = |name: &'static str, node_name: &str, spec: Value, labels: Value, fits: bool| {
        single(
            name,
            node(node_name, labels),
            vec![],
            pod("p", json!({}), spec),
            fits,
        )
    };
    let name_is = |n: &str| json!({"key": "metadata.name", "operator": "In", "values": [n]});
    let foo_bar = json!({"key": "foo", "operator": "In", "values": ["bar"]});
    check(vec![
        // k8s pkg/scheduler/framework/plugins/nodeaffinity/node_affinity_test.go TestNodeAffinity "missing labels"
        na(
            "missing labels",
            json!({"nodeSelector": {"foo": "bar"}}),
            json!({}),
            false,
        ),
        // k8s .../nodeaffinity/node_affinity_test.go TestNodeAffinity "node labels are superset"
        na(
            "node labels are superset",
            json!({"nodeSelector": {"foo": "bar"}}),
            json!({"foo": "bar", "baz": "blah"}),
            true,
        ),
        // k8s .../nodeaffinity/node_affinity_test.go TestNodeAffinity "node labels are subset"
        na(
            "node labels are subset",
            json!({"nodeSelector": {"foo": "bar", "baz": "blah"}}),
            json!({"foo": "bar"}),
            false,
        ),
        // k8s .../nodeaffinity/node_affinity_test.go TestNodeAffinity "Pod with matchExpressions using In operator that matches the existing node"
        na(
            "Pod with matchExpressions using In operator that matches the existing node",
            node_affinity(json!([sel("foo", "In", &["bar", "value2"])])),
            json!({"foo": "bar"}),
            true,
        ),
        // k8s .../nodeaffinity/node_affinity_test.go TestNodeAffinity "Pod with matchExpressions using Gt operator that matches the existing node"
        na(
            "Pod with matchExpressions using Gt operator that matches the existing node",
            node_affinity(json!([sel("kernel-version", "Gt", &["0204"])])),
            json!({"kernel-version": "0206"}),
            true,
        ),
        // k8s .../nodeaffinity/node_affinity_test.go TestNodeAffinity "Pod with matchExpressions using NotIn operator that matches the existing node"
        na(
            "Pod with matchExpressions using NotIn operator that matches the existing node",
            node_affinity(json!([sel("mem-type", "NotIn", &["DDR", "DDR2"])])),
            json!({"mem-type": "DDR3"}),
            true,
        ),
        // k8s .../nodeaffinity/node_affinity_test.go TestNodeAffinity "Pod with matchExpressions using Exists operator that matches the existing node"
        na(
            "Pod with matchExpressions using Exists operator that matches the existing node",
            node_affinity(json!([exists("GPU")])),
            json!({"GPU": "NVIDIA-GRID-K1"}),
            true,
        ),
        // k8s .../nodeaffinity/node_affinity_test.go TestNodeAffinity "Pod with affinity that don't match node's labels won't schedule onto the node"
        na(
            "Pod with affinity that don't match node's labels won't schedule onto the node",
            node_affinity(json!([sel("foo", "In", &["value1", "value2"])])),
            json!({"foo": "bar"}),
            false,
        ),
        // k8s .../nodeaffinity/node_affinity_test.go TestNodeAffinity "Pod with empty MatchExpressions is not a valid value will match no objects and won't schedule onto the node"
        na(
            "Pod with empty MatchExpressions is not a valid value will match no objects and won't schedule onto the node",
            node_affinity(json!([{"matchExpressions": []}])),
            json!({"foo": "bar"}),
            false,
        ),
        // k8s .../nodeaffinity/node_affinity_test.go TestNodeAffinity "Pod with multiple matchExpressions ANDed that doesn't match the existing node"
        na(
            "Pod with multiple matchExpressions ANDed that doesn't match the existing node",
            node_affinity(json!([{"matchExpressions": [
                {"key": "GPU", "operator": "Exists"},
                {"key": "GPU", "operator": "In", "values": ["AMD", "INTER"]}]}])),
            json!({"GPU": "NVIDIA-GRID-K1"}),
            false,
        ),
        // k8s .../nodeaffinity/node_affinity_test.go TestNodeAffinity "Pod with multiple NodeSelectorTerms ORed in affinity, matches the node's labels and will schedule onto the node"
        na(
            "Pod with multiple NodeSelectorTerms ORed in affinity, matches the node's labels and will schedule onto the node",
            node_affinity(json!([
                sel("foo", "In", &["bar", "value2"]),
                sel("diffkey", "In", &["wrong", "value2"])
            ])),
            json!({"foo": "bar"}),
            true,
        ),
        // k8s .../nodeaffinity/node_affinity_test.go TestNodeAffinity "Pod with an Affinity matches node's labels but the PodSpec.NodeSelector(the old thing that we are deprecating) is not satisfied, won't schedule onto the node"
        na(
            "Pod with an Affinity matches node's labels but the PodSpec.NodeSelector(the old thing that we are deprecating) is not satisfied, won't schedule onto the node",
            merge(
                node_affinity(json!([exists("foo")])),
                json!({"nodeSelector": {"foo": "bar"}}),
            ),
            json!({"foo": "barrrrrr"}),
            false,
        ),
        // k8s .../nodeaffinity/node_affinity_test.go TestNodeAffinity "Pod with an invalid value in Affinity term won't be scheduled onto the node"
        na(
            "Pod with an invalid value in Affinity term won't be scheduled onto the node",
            node_affinity(json!([sel("foo", "NotIn", &["invalid value: ___@#$%^"])])),
            json!({"foo": "bar"}),
            false,
        ),
        // k8s .../nodeaffinity/node_affinity_test.go TestNodeAffinity "Pod with two terms: matchFields does not match, but matchExpressions matches"
        on_node(
            "Pod with two terms: matchFields does not match, but matchExpressions matches",
            "node2",
            node_affinity(json!([
                {"matchFields": [name_is("node1")]},
                {"matchExpressions": [foo_bar.clone()]}])),
            json!({"foo": "bar"}),
            true,
        ),
        // k8s .../nodeaffinity/node_affinity_test.go TestNodeAffinity "Pod with one term: matchFields does not match, but matchExpressions matches"
        on_node(
            "Pod with one term: matchFields does not match, but matchExpressions matches",
            "node2",
            node_affinity(
                json!([{"matchFields": [name_is("node1")], "matchExpressions": [foo_bar.clone()]}]),
            ),
            json!({"foo": "bar"}),
            false,
        ),
        // k8s .../nodeaffinity/node_affinity_test.go TestNodeAffinity "Pod with one term: both matchFields and matchExpressions match"
        on_node(
            "Pod with one term: both matchFields and matchExpressions match",
            "node1",
            node_affinity(
                json!([{"matchFields": [name_is("node1")], "matchExpressions": [foo_bar]}]),
            ),
            json!({"foo": "bar"}),
            true,
        ),
        // k8s .../nodeaffinity/node_affinity_test.go TestNodeAffinity "Pod with two conflicting mach field requirements"
        on_node(
            "Pod with two conflicting mach field requirements",
            "node2",
            node_affinity(json!([{"matchFields": [name_is("node1"), name_is("node2")]}])),
            json!({"foo": "bar"}),
            false,
        ),
        // k8s staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity_test.go TestPodMatchesNodeSelectorAndAffinityTerms "Pod with an empty []NodeSelectorTerm in affinity, can't match the node's labels and won't schedule onto the node"
        na(
            "Pod with an empty []NodeSelectorTerm in affinity, can't match the node's labels and won't schedule onto the node",
            node_affinity(json!([])),
            json!({"foo": "bar"}),
            false,
        ),
        // Not a Kubernetes test case (no Filter test uses Lt or DoesNotExist): the operators as
        // documented on core/v1 NodeSelectorRequirement ("Gt, and Lt ... interpreted as an
        // integer"; DoesNotExist: the label is absent).
        na(
            "Lt compares integers",
            node_affinity(json!([sel("kernel-version", "Lt", &["0204"])])),
            json!({"kernel-version": "0206"}),
            false,
        ),
        na(
            "DoesNotExist rejects a node with the label",
            node_affinity(
                json!([{"matchExpressions": [{"key": "GPU", "operator": "DoesNotExist"}]}]),
            ),
            json!({"GPU": "NVIDIA-GRID-K1"}),
            false,
        ),
    ]);
}

#[test]
fn taint_toleration_matches_kubernetes() {
    let tc = |name: &'static str, tolerations: Value, taints: Value, fits: bool| {
        single(
            name,
            tainted(node("nodeA", json!({})), taints),
            vec![],
            pod("pod1", json!({}), json!({ "tolerations": tolerations })),
            fits,
        )
    };
    let user1 = json!([{"key": "dedicated", "value": "user1", "effect": "NoSchedule"}]);
    let foo_bar = json!([{"key": "foo", "value": "bar", "effect": "NoSchedule"}]);
    check(vec![
        // k8s pkg/scheduler/framework/plugins/tainttoleration/taint_toleration_test.go TestTaintTolerationFilter "A pod having no tolerations can't be scheduled onto a node with nonempty taints"
        tc(
            "A pod having no tolerations can't be scheduled onto a node with nonempty taints",
            json!([]),
            user1.clone(),
            false,
        ),
        // k8s .../tainttoleration/taint_toleration_test.go TestTaintTolerationFilter "A pod which can be scheduled on a dedicated node assigned to user1 with effect NoSchedule"
        tc(
            "A pod which can be scheduled on a dedicated node assigned to user1 with effect NoSchedule",
            json!([{"key": "dedicated", "value": "user1", "effect": "NoSchedule"}]),
            user1.clone(),
            true,
        ),
        // k8s .../tainttoleration/taint_toleration_test.go TestTaintTolerationFilter "A pod which can't be scheduled on a dedicated node assigned to user2 with effect NoSchedule"
        tc(
            "A pod which can't be scheduled on a dedicated node assigned to user2 with effect NoSchedule",
            json!([{"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"}]),
            user1,
            false,
        ),
        // k8s .../tainttoleration/taint_toleration_test.go TestTaintTolerationFilter "A pod can be scheduled onto the node, with a toleration uses operator Exists that tolerates the taints on the node"
        tc(
            "A pod can be scheduled onto the node, with a toleration uses operator Exists that tolerates the taints on the node",
            json!([{"key": "foo", "operator": "Exists", "effect": "NoSchedule"}]),
            foo_bar.clone(),
            true,
        ),
        // k8s .../tainttoleration/taint_toleration_test.go TestTaintTolerationFilter "A pod has a toleration that keys and values match the taint on the node, but (non-empty) effect doesn't match, can't be scheduled onto the node"
        tc(
            "A pod has a toleration that keys and values match the taint on the node, but (non-empty) effect doesn't match, can't be scheduled onto the node",
            json!([{"key": "foo", "operator": "Equal", "value": "bar", "effect": "PreferNoSchedule"}]),
            foo_bar.clone(),
            false,
        ),
        // k8s .../tainttoleration/taint_toleration_test.go TestTaintTolerationFilter "The pod has a toleration that keys and values match the taint on the node, the effect of toleration is empty, and the effect of taint is NoSchedule. Pod can be scheduled onto the node"
        tc(
            "The pod has a toleration that keys and values match the taint on the node, the effect of toleration is empty, and the effect of taint is NoSchedule. Pod can be scheduled onto the node",
            json!([{"key": "foo", "operator": "Equal", "value": "bar"}]),
            foo_bar,
            true,
        ),
        // k8s .../tainttoleration/taint_toleration_test.go TestTaintTolerationFilter "The pod has no toleration, but the effect of taint on node is PreferNoSchedule. Pod can be scheduled onto the node"
        tc(
            "The pod has no toleration, but the effect of taint on node is PreferNoSchedule. Pod can be scheduled onto the node",
            json!([]),
            json!([{"key": "dedicated", "value": "user1", "effect": "PreferNoSchedule"}]),
            true,
        ),
    ]);
}

/// Container ports from Kubernetes' `"PROTOCOL/hostIP/hostPort"` notation (`newPod` in
/// `node_ports_test.go`).
fn ports(specs: &[&str]) -> Value {
    let list: Vec<Value> = specs
        .iter()
        .map(|s| {
            let parts: Vec<&str> = s.split('/').collect();
            let port: i32 = parts[2].parse().expect("port number");
            json!({"containerPort": port, "hostPort": port, "hostIP": parts[1], "protocol": parts[0]})
        })
        .collect();
    json!({"containers": [{"name": "c", "ports": list}]})
}

#[test]
fn node_ports_match_kubernetes() {
    let np = |name: &'static str, incoming: Value, existing: &[&str], fits: bool| {
        single(
            name,
            node("m1", json!({})),
            vec![on("m1", pod("existing", json!({}), ports(existing)))],
            pod("incoming", json!({}), incoming),
            fits,
        )
    };
    let sidecar = |restart: Option<&str>| {
        let mut init = json!({"name": "init", "ports": [
            {"containerPort": 8001, "hostPort": 8001, "protocol": "TCP"}]});
        if let Some(r) = restart {
            init["restartPolicy"] = json!(r);
        }
        json!({ "initContainers": [init] })
    };
    check(vec![
        // k8s pkg/scheduler/framework/plugins/nodeports/node_ports_test.go TestNodePorts "other port"
        np(
            "other port",
            ports(&["UDP/127.0.0.1/8080"]),
            &["UDP/127.0.0.1/9090"],
            true,
        ),
        // k8s .../nodeports/node_ports_test.go TestNodePorts "same udp port"
        np(
            "same udp port",
            ports(&["UDP/127.0.0.1/8080"]),
            &["UDP/127.0.0.1/8080"],
            false,
        ),
        // k8s .../nodeports/node_ports_test.go TestNodePorts "different host ip"
        np(
            "different host ip",
            ports(&["TCP/127.0.0.1/8080"]),
            &["TCP/127.0.0.2/8080"],
            true,
        ),
        // k8s .../nodeports/node_ports_test.go TestNodePorts "different protocol"
        np(
            "different protocol",
            ports(&["UDP/127.0.0.1/8080"]),
            &["TCP/127.0.0.1/8080"],
            true,
        ),
        // k8s .../nodeports/node_ports_test.go TestNodePorts "second udp port conflict"
        np(
            "second udp port conflict",
            ports(&["UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"]),
            &["UDP/127.0.0.1/8080"],
            false,
        ),
        // k8s .../nodeports/node_ports_test.go TestNodePorts "first tcp port conflict due to 0.0.0.0 hostIP"
        np(
            "first tcp port conflict due to 0.0.0.0 hostIP",
            ports(&["TCP/0.0.0.0/8001"]),
            &["TCP/127.0.0.1/8001"],
            false,
        ),
        // k8s .../nodeports/node_ports_test.go TestNodePorts "second tcp port conflict to 0.0.0.0 hostIP"
        np(
            "second tcp port conflict to 0.0.0.0 hostIP",
            ports(&["TCP/127.0.0.1/8001"]),
            &["TCP/0.0.0.0/8001"],
            false,
        ),
        // k8s .../nodeports/node_ports_test.go TestNodePorts "second different protocol"
        np(
            "second different protocol",
            ports(&["UDP/127.0.0.1/8001"]),
            &["TCP/0.0.0.0/8001"],
            true,
        ),
        // k8s .../nodeports/node_ports_test.go TestNodePorts "non-sidecar initContainer using hostPort"
        np(
            "non-sidecar initContainer using hostPort",
            sidecar(None),
            &["TCP/0.0.0.0/8001"],
            true,
        ),
        // k8s .../nodeports/node_ports_test.go TestNodePorts "TCP hostPort conflict from sidecar initContainer"
        np(
            "TCP hostPort conflict from sidecar initContainer",
            sidecar(Some("Always")),
            &["TCP/0.0.0.0/8001"],
            false,
        ),
    ]);
}

/// The four nodes of `podtopologyspread/filtering_test.go`: node-a, node-b in zone1 and node-x,
/// node-y in zone2, each labelled with its own name under `node_key`.
fn four_nodes(node_key: &str) -> Vec<Node> {
    [
        ("node-a", "zone1"),
        ("node-b", "zone1"),
        ("node-x", "zone2"),
        ("node-y", "zone2"),
    ]
    .iter()
    .map(|(n, z)| node(n, json!({"zone": z, node_key: n})))
    .collect()
}

/// Bound pods `name@node` labelled `labels`.
fn bound(specs: &[&str], labels: Value) -> Vec<Pod> {
    specs
        .iter()
        .map(|s| {
            let (name, node_name) = s.split_once('@').expect("name@node");
            on(node_name, pod(name, labels.clone(), json!({})))
        })
        .collect()
}

/// `podtopologyspread` Filter cases. `nk` is the key Kubernetes' cases call `node` (a label
/// unique per node); the cases run once with that literal key and once with
/// `kubernetes.io/hostname`, which kube-scheduler treats the same way.
fn spread_cases(nk: &str) -> Vec<Case> {
    let foo = || json!({"foo": ""});
    let foo_pod = |spec: Value| pod("p", foo(), spec);
    let zone1 = |extra: Value| spreads(vec![spread(1, "zone", exists("foo"), extra)]);
    let by_node = |skew: i32, extra: Value| spreads(vec![spread(skew, nk, exists("foo"), extra)]);
    // p-a1, p-a2 on node-a, p-b1 on node-b, p-y1..3 on node-y: spread 2/1/0/3.
    let two_one_zero_three = || {
        bound(
            &[
                "p-a1@node-a",
                "p-a2@node-a",
                "p-b1@node-b",
                "p-y1@node-y",
                "p-y2@node-y",
                "p-y3@node-y",
            ],
            foo(),
        )
    };
    let nodes_abc = || {
        ["node-a", "node-b", "node-c"]
            .iter()
            .map(|n| node(n, json!({ nk: n })))
            .collect::<Vec<_>>()
    };
    let unschedulable_taint =
        json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]);
    let mut no_node_label_on_x = four_nodes(nk);
    no_node_label_on_x[2] = node("node-x", json!({"zone": "zone2"}));
    // node-a, node-b, node-x labelled foo; node-y not, and tainted unschedulable if `taint_y`.
    let foo_nodes = |taint_y: bool| {
        let mut nodes: Vec<Node> = ["node-a", "node-b", "node-x"]
            .iter()
            .map(|n| node(n, json!({ nk: n, "foo": "" })))
            .collect();
        let y = node("node-y", json!({ nk: "node-y" }));
        nodes.push(if taint_y {
            tainted(y, unschedulable_taint.clone())
        } else {
            y
        });
        nodes
    };
    let inclusion_nodes = |b_has_foo: bool, y_has_foo: bool| {
        let labels = |n: &str, z: &str, f: bool| {
            let mut l = json!({"zone": z, nk: n});
            if f {
                l["foo"] = json!("");
            }
            l
        };
        vec![
            node("node-a", labels("node-a", "zone1", true)),
            node("node-b", labels("node-b", "zone1", b_has_foo)),
            node("node-x", labels("node-x", "zone2", true)),
            tainted(
                node("node-y", labels("node-y", "zone2", y_has_foo)),
                unschedulable_taint.clone(),
            ),
        ]
    };
    let foo_bar = || json!({"foo": "", "bar": ""});
    vec![
        // k8s pkg/scheduler/framework/plugins/podtopologyspread/filtering_test.go TestSingleConstraint "no existing pods, incoming pod doesn't match itself"
        case(
            "no existing pods, incoming pod doesn't match itself",
            four_nodes(nk),
            vec![],
            foo_pod(spreads(vec![spread(1, "zone", exists("bar"), json!({}))])),
            &["node-a", "node-b", "node-x", "node-y"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestSingleConstraint "existing pods in a different namespace do not count"
        case(
            "existing pods in a different namespace do not count",
            four_nodes(nk),
            vec![
                on("node-a", pod_in("ns1", "p-a1", foo(), json!({}))),
                on("node-a", pod_in("ns2", "p-b1", foo(), json!({}))),
                on("node-x", pod("p-x1", foo(), json!({}))),
                on("node-y", pod("p-y1", foo(), json!({}))),
            ],
            foo_pod(zone1(json!({}))),
            &["node-a", "node-b"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestSingleConstraint "existing pods do not match null selector"
        case(
            "existing pods do not match null selector",
            four_nodes(nk),
            bound(&["p-x1@node-x", "p-y1@node-y"], foo()),
            foo_pod(spreads(vec![spread(1, "zone", Value::Null, json!({}))])),
            &["node-a", "node-b", "node-x", "node-y"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestSingleConstraint "pods spread across zones as 3/3, all nodes fit"
        case(
            "pods spread across zones as 3/3, all nodes fit",
            four_nodes(nk),
            two_one_zero_three(),
            foo_pod(zone1(json!({}))),
            &["node-a", "node-b", "node-x", "node-y"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestSingleConstraint "pods spread across zones as 1/2 due to absence of label 'zone' on node-b"
        case(
            "pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
            {
                let mut n = four_nodes(nk);
                n[1] = node("node-b", json!({"zon": "zone1", nk: "node-b"}));
                n
            },
            bound(
                &["p-a1@node-a", "p-b1@node-b", "p-x1@node-x", "p-y1@node-y"],
                foo(),
            ),
            foo_pod(zone1(json!({}))),
            &["node-a"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestSingleConstraint "pod cannot be scheduled as all nodes don't have label 'rack'"
        case(
            "pod cannot be scheduled as all nodes don't have label 'rack'",
            vec![
                node("node-a", json!({"zone": "zone1", nk: "node-a"})),
                node("node-x", json!({"zone": "zone2", nk: "node-x"})),
            ],
            vec![],
            foo_pod(spreads(vec![spread(1, "rack", exists("foo"), json!({}))])),
            &[],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestSingleConstraint "pods spread across nodes as 2/1/0/3, only node-x fits"
        case(
            "pods spread across nodes as 2/1/0/3, only node-x fits",
            four_nodes(nk),
            two_one_zero_three(),
            foo_pod(by_node(1, json!({}))),
            &["node-x"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestSingleConstraint "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit"
        case(
            "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
            four_nodes(nk),
            two_one_zero_three(),
            foo_pod(by_node(2, json!({}))),
            &["node-b", "node-x"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestSingleConstraint "pods spread across nodes as 2/1/0/3, but pod doesn't match itself"
        case(
            "pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
            four_nodes(nk),
            two_one_zero_three(),
            pod("p", json!({"bar": ""}), by_node(1, json!({}))),
            &["node-b", "node-x"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestSingleConstraint "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits"
        // (node-b and node-x pass the spread filter but fail NodeAffinity "in real case").
        case(
            "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
            four_nodes(nk),
            two_one_zero_three(),
            foo_pod(merge(
                by_node(1, json!({})),
                node_affinity(json!([sel(nk, "In", &["node-a", "node-y"])])),
            )),
            &["node-a"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestSingleConstraint "terminating Pods should be excluded"
        case(
            "terminating Pods should be excluded",
            vec![
                node("node-a", json!({ nk: "node-a" })),
                node("node-b", json!({ nk: "node-b" })),
            ],
            vec![
                terminating(on("node-a", pod("p-a", foo(), json!({})))),
                on("node-b", pod("p-b", foo(), json!({}))),
            ],
            foo_pod(by_node(1, json!({}))),
            &["node-a"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestSingleConstraint "incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits"
        // (node-b passes the spread filter but fails NodeAffinity "in real case").
        case(
            "incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits",
            four_nodes(nk),
            bound(&["p-b1@node-b", "p-b2@node-b", "p-y1@node-y"], foo()),
            foo_pod(merge(
                zone1(json!({})),
                node_affinity(json!([sel(nk, "NotIn", &["node-b"])])),
            )),
            &["node-a"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestSingleConstraint "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains < minDomains, then the third node fits"
        case(
            "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains < minDomains, then the third node fits",
            nodes_abc(),
            bound(
                &[
                    "p-a1@node-a",
                    "p-a2@node-a",
                    "p-b1@node-b",
                    "p-b2@node-b",
                    "p-c1@node-c",
                ],
                foo(),
            ),
            foo_pod(by_node(2, json!({"minDomains": 4}))),
            &["node-c"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestSingleConstraint "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains > minDomains, then the all nodes fit"
        case(
            "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains > minDomains, then the all nodes fit",
            nodes_abc(),
            bound(
                &[
                    "p-a1@node-a",
                    "p-a2@node-a",
                    "p-b1@node-b",
                    "p-b2@node-b",
                    "p-c1@node-c",
                ],
                foo(),
            ),
            foo_pod(by_node(2, json!({"minDomains": 2}))),
            &["node-a", "node-b", "node-c"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestSingleConstraint "pods spread across zone as 2/1, maxSkew is 2 and the number of domains < minDomains, then the third and fourth nodes fit"
        case(
            "pods spread across zone as 2/1, maxSkew is 2 and the number of domains < minDomains, then the third and fourth nodes fit",
            four_nodes(nk),
            bound(&["p-b1@node-a", "p-b2@node-b", "p-y1@node-y"], foo()),
            foo_pod(spreads(vec![spread(
                2,
                "zone",
                exists("foo"),
                json!({"minDomains": 3}),
            )])),
            &["node-x", "node-y"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestSingleConstraint "NodeAffinityPolicy ignored with labelSelectors"
        case(
            "NodeAffinityPolicy ignored with labelSelectors",
            foo_nodes(false),
            bound(&["p-b1@node-a", "p-b2@node-b", "p-y1@node-y"], foo()),
            foo_pod(merge(
                by_node(1, json!({"nodeAffinityPolicy": "Ignore"})),
                json!({"nodeSelector": {"foo": ""}}),
            )),
            &["node-x"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestSingleConstraint "NodeTaintsPolicy honored"
        // (node-y passes the spread filter but fails TaintToleration "in real case").
        case(
            "NodeTaintsPolicy honored",
            foo_nodes(true),
            bound(&["p-b1@node-a", "p-b2@node-b", "p-y1@node-y"], foo()),
            foo_pod(by_node(1, json!({"nodeTaintsPolicy": "Honor"}))),
            &["node-x"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestMultipleConstraints "two Constraints on zone and node, spreads = [3/3, 2/1/0/3]"
        case(
            "two Constraints on zone and node, spreads = [3/3, 2/1/0/3]",
            four_nodes(nk),
            two_one_zero_three(),
            foo_pod(spreads(vec![
                spread(1, "zone", exists("foo"), json!({})),
                spread(1, nk, exists("foo"), json!({})),
            ])),
            &["node-x"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestMultipleConstraints "two Constraints on zone and node, spreads = [3/4, 2/1/0/4]"
        case(
            "two Constraints on zone and node, spreads = [3/4, 2/1/0/4]",
            four_nodes(nk),
            {
                let mut b = two_one_zero_three();
                b.extend(bound(&["p-y4@node-y"], foo()));
                b
            },
            foo_pod(spreads(vec![
                spread(1, "zone", exists("foo"), json!({})),
                spread(1, nk, exists("foo"), json!({})),
            ])),
            &[],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestMultipleConstraints "Constraints hold different labelSelectors, spreads = [2/3, 1/0/0/1]"
        case(
            "Constraints hold different labelSelectors, spreads = [2/3, 1/0/0/1]",
            four_nodes(nk),
            {
                let mut b = bound(&["p-a1@node-a", "p-y1@node-y", "p-y3@node-y"], foo());
                b.extend(bound(&["p-a2@node-a", "p-y2@node-y"], foo_bar()));
                b
            },
            pod(
                "p",
                foo_bar(),
                spreads(vec![
                    spread(1, "zone", exists("foo"), json!({})),
                    spread(1, nk, exists("bar"), json!({})),
                ]),
            ),
            &["node-b"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestMultipleConstraints "Constraints hold different labelSelectors but pod doesn't match itself on 'zone' constraint"
        case(
            "Constraints hold different labelSelectors but pod doesn't match itself on 'zone' constraint",
            four_nodes(nk),
            {
                let mut b = bound(&["p-a1@node-a"], foo());
                b.extend(bound(&["p-x1@node-x", "p-y1@node-y"], json!({"bar": ""})));
                b
            },
            pod(
                "p",
                json!({"bar": ""}),
                spreads(vec![
                    spread(1, "zone", exists("foo"), json!({})),
                    spread(1, nk, exists("bar"), json!({})),
                ]),
            ),
            &["node-a", "node-b"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestMultipleConstraints "two Constraints on zone and node, absence of label 'node' on node-x, spreads = [1/1, 1/0/0/1]"
        case(
            "two Constraints on zone and node, absence of label 'node' on node-x, spreads = [1/1, 1/0/0/1]",
            no_node_label_on_x,
            bound(&["p-a1@node-a", "p-y3@node-y"], foo()),
            foo_pod(spreads(vec![
                spread(1, "zone", exists("foo"), json!({})),
                spread(1, nk, exists("foo"), json!({})),
            ])),
            &["node-b"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestMultipleConstraints "two node inclusion Constraints, zone: honor/honor, node: honor/ignore"
        case(
            "two node inclusion Constraints, zone: honor/honor, node: honor/ignore",
            inclusion_nodes(true, false),
            bound(&["p-a1@node-a", "p-b1@node-b", "p-y1@node-y"], foo()),
            foo_pod(spreads(vec![
                spread(
                    1,
                    "zone",
                    exists("foo"),
                    json!({"nodeTaintsPolicy": "Honor"}),
                ),
                spread(1, nk, exists("foo"), json!({})),
            ])),
            &["node-x"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestMultipleConstraints "two node inclusion Constraints, zone: honor/ignore, node: honor/ignore"
        // (node-b passes the spread filter but fails NodeAffinity "in real case").
        case(
            "two node inclusion Constraints, zone: honor/ignore, node: honor/ignore",
            inclusion_nodes(false, true),
            bound(&["p-a1@node-a", "p-b1@node-b", "p-y1@node-y"], foo()),
            foo_pod(merge(
                spreads(vec![
                    spread(1, "zone", exists("foo"), json!({})),
                    spread(1, nk, exists("foo"), json!({})),
                ]),
                json!({"nodeSelector": {"foo": ""}}),
            )),
            &["node-x"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestMultipleConstraints "two Constraints on zone, spreads = [3/3, 2/1]"
        case(
            "two Constraints on zone, spreads = [3/3, 2/1]",
            four_nodes(nk),
            {
                let mut b = bound(&["p-a2@node-a", "p-y1@node-y", "p-y3@node-y"], foo());
                b.extend(bound(
                    &["p-a1@node-a", "p-b1@node-b", "p-y2@node-y"],
                    foo_bar(),
                ));
                b
            },
            pod(
                "p",
                foo_bar(),
                spreads(vec![
                    spread(1, "zone", exists("bar"), json!({})),
                    spread(1, "zone", exists("foo"), json!({})),
                ]),
            ),
            &["node-x", "node-y"],
        ),
        // k8s .../podtopologyspread/filtering_test.go TestMultipleConstraints "two Constraints on zone, spreads = [3/4, 2/1]"
        case(
            "two Constraints on zone, spreads = [3/4, 2/1]",
            four_nodes(nk),
            {
                let mut b = bound(
                    &["p-a2@node-a", "p-y1@node-y", "p-y3@node-y", "p-y4@node-y"],
                    foo(),
                );
                b.extend(bound(
                    &["p-a1@node-a", "p-b1@node-b", "p-y2@node-y"],
                    foo_bar(),
                ));
                b
            },
            pod(
                "p",
                foo_bar(),
                spreads(vec![
                    spread(1, "zone", exists("bar"), json!({})),
                    spread(1, "zone", exists("foo"), json!({})),
                ]),
            ),
            &[],
        ),
    ]
}

#[test]
fn pod_topology_spread_matches_kubernetes() {
    check(spread_cases("node"));
}

#[test]
fn pod_topology_spread_on_hostname_matches_kubernetes() {
    check(spread_cases(HOSTNAME));
}

#[test]
fn inter_pod_affinity_matches_kubernetes() {
    let security_scan = || json!({"service": "securityscan"});
    let s1 = || json!({"security": "S1"});
    let node1 = || node("node1", json!({"region": "r1", "zone": "z11"}));
    // The existing pod of most TestRequiredAffinitySingleNode cases: service=securityscan on node1.
    let scan_on_node1 = || on("node1", pod("existing", security_scan(), json!({})));
    let in_scan = || sel("service", "In", &["securityscan", "value2"]);
    let one = |name: &'static str, bound: Vec<Pod>, incoming: Pod, fits: bool| {
        single(name, node1(), bound, incoming, fits)
    };
    let regions = || {
        vec![
            node("nodeA", json!({"region": "China"})),
            node("nodeB", json!({"region": "China", "az": "az1"})),
            node("nodeC", json!({"region": "India"})),
        ]
    };
    let rz = |n: &str, z: &str| node(n, json!({"region": "r1", "zone": z, "hostname": n}));
    check(vec![
        // k8s pkg/scheduler/framework/plugins/interpodaffinity/filtering_test.go TestRequiredAffinitySingleNode "satisfies with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using In operator that matches the existing pod"
        one(
            "satisfies with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using In operator that matches the existing pod",
            vec![scan_on_node1()],
            pod(
                "p",
                s1(),
                pod_affinity(vec![term("region", in_scan())], vec![]),
            ),
            true,
        ),
        // k8s .../interpodaffinity/filtering_test.go TestRequiredAffinitySingleNode "satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using not in operator in labelSelector that matches the existing pod"
        one(
            "satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using not in operator in labelSelector that matches the existing pod",
            vec![scan_on_node1()],
            pod(
                "p",
                s1(),
                pod_affinity(
                    vec![term(
                        "region",
                        sel("service", "NotIn", &["securityscan3", "value3"]),
                    )],
                    vec![],
                ),
            ),
            true,
        ),
        // k8s .../interpodaffinity/filtering_test.go TestRequiredAffinitySingleNode "The labelSelector requirements(items of matchExpressions) are ANDed, the pod cannot schedule onto the node because one of the matchExpression item don't match."
        one(
            "The labelSelector requirements(items of matchExpressions) are ANDed, the pod cannot schedule onto the node because one of the matchExpression item don't match.",
            vec![scan_on_node1()],
            pod(
                "p",
                s1(),
                pod_affinity(
                    vec![
                        term(
                            "region",
                            json!({"matchExpressions": [
                            {"key": "service", "operator": "Exists"},
                            {"key": "wrongkey", "operator": "DoesNotExist"}]}),
                        ),
                        term(
                            "region",
                            json!({"matchExpressions": [
                            {"key": "service", "operator": "In", "values": ["securityscan2"]},
                            {"key": "service", "operator": "NotIn", "values": ["WrongValue"]}]}),
                        ),
                    ],
                    vec![],
                ),
            ),
            false,
        ),
        // k8s .../interpodaffinity/filtering_test.go TestRequiredAffinitySingleNode "satisfies the PodAffinity and PodAntiAffinity with the existing pod"
        one(
            "satisfies the PodAffinity and PodAntiAffinity with the existing pod",
            vec![scan_on_node1()],
            pod(
                "p",
                s1(),
                pod_affinity(
                    vec![term("region", in_scan())],
                    vec![term(
                        "node",
                        sel("service", "In", &["antivirusscan", "value2"]),
                    )],
                ),
            ),
            true,
        ),
        // k8s .../interpodaffinity/filtering_test.go TestRequiredAffinitySingleNode "satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the existing pod"
        one(
            "satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the existing pod",
            vec![scan_on_node1()],
            pod(
                "p",
                s1(),
                pod_affinity(
                    vec![term("region", in_scan())],
                    vec![term("zone", in_scan())],
                ),
            ),
            false,
        ),
        // k8s .../interpodaffinity/filtering_test.go TestRequiredAffinitySingleNode "satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy PodAntiAffinity symmetry with the existing pod"
        one(
            "satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy PodAntiAffinity symmetry with the existing pod",
            vec![on(
                "node1",
                pod(
                    "existing",
                    security_scan(),
                    pod_affinity(vec![], vec![term("zone", in_scan())]),
                ),
            )],
            pod(
                "p",
                security_scan(),
                pod_affinity(
                    vec![term("region", in_scan())],
                    vec![term(
                        "node",
                        sel("service", "In", &["antivirusscan", "value2"]),
                    )],
                ),
            ),
            false,
        ),
        // k8s .../interpodaffinity/filtering_test.go TestRequiredAffinitySingleNode "pod matches its own Label in PodAffinity and that matches the existing pod Labels"
        one(
            "pod matches its own Label in PodAffinity and that matches the existing pod Labels",
            vec![on("node2", pod("existing", security_scan(), json!({})))],
            pod(
                "p",
                security_scan(),
                pod_affinity(
                    vec![term(
                        "region",
                        sel("service", "NotIn", &["securityscan", "value2"]),
                    )],
                    vec![],
                ),
            ),
            false,
        ),
        // k8s .../interpodaffinity/filtering_test.go TestRequiredAffinitySingleNode "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. satisfy PodAntiAffinity symmetry with the existing pod"
        one(
            "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. satisfy PodAntiAffinity symmetry with the existing pod",
            vec![on(
                "node1",
                pod(
                    "existing",
                    security_scan(),
                    pod_affinity(
                        vec![],
                        vec![term(
                            "zone",
                            sel("service", "NotIn", &["securityscan", "value2"]),
                        )],
                    ),
                ),
            )],
            pod("p", security_scan(), json!({})),
            true,
        ),
        // k8s .../interpodaffinity/filtering_test.go TestRequiredAffinitySingleNode "PodAntiAffinity symmetry check a2: incoming pod and existing pod partially match each other on AffinityTerms"
        one(
            "PodAntiAffinity symmetry check a2: incoming pod and existing pod partially match each other on AffinityTerms",
            vec![on(
                "node1",
                pod(
                    "existing",
                    security_scan(),
                    pod_affinity(
                        vec![],
                        vec![
                            term("zone", exists("service")),
                            term("zone", exists("security")),
                        ],
                    ),
                ),
            )],
            pod(
                "p",
                s1(),
                pod_affinity(vec![], vec![term("zone", exists("security"))]),
            ),
            false,
        ),
        // k8s .../interpodaffinity/filtering_test.go TestRequiredAffinitySingleNode "affinity with non-matching NamespaceSelector"
        one(
            "affinity with non-matching NamespaceSelector",
            vec![on(
                "node1",
                pod_in("subteam1.team2", "existing", security_scan(), json!({})),
            )],
            pod(
                "p",
                s1(),
                pod_affinity(
                    vec![merge(
                        term("region", in_scan()),
                        json!({"namespaceSelector": sel("team", "In", &["team1"])}),
                    )],
                    vec![],
                ),
            ),
            false,
        ),
        // k8s .../interpodaffinity/filtering_test.go TestRequiredAffinitySingleNode "anti-affinity with matching all NamespaceSelector"
        one(
            "anti-affinity with matching all NamespaceSelector",
            vec![on(
                "node1",
                pod_in("subteam2.team1", "existing", security_scan(), json!({})),
            )],
            pod_in(
                "subteam1.team1",
                "p",
                s1(),
                pod_affinity(
                    vec![],
                    vec![merge(
                        term("zone", in_scan()),
                        json!({"namespaceSelector": {}}),
                    )],
                ),
            ),
            false,
        ),
        // k8s .../interpodaffinity/filtering_test.go TestRequiredAffinitySingleNode "anti-affinity with non-matching NamespaceSelector"
        one(
            "anti-affinity with non-matching NamespaceSelector",
            vec![on(
                "node1",
                pod_in("subteam1.team2", "existing", security_scan(), json!({})),
            )],
            pod_in(
                "subteam1.team1",
                "p",
                s1(),
                pod_affinity(
                    vec![],
                    vec![merge(
                        term("zone", in_scan()),
                        json!({"namespaceSelector": sel("team", "In", &["team1"])}),
                    )],
                ),
            ),
            true,
        ),
        // k8s .../interpodaffinity/filtering_test.go TestRequiredAffinityMultipleNodes "A pod can be scheduled onto all the nodes that have the same topology key & label value with one of them has an existing pod that matches the affinity rules"
        case(
            "A pod can be scheduled onto all the nodes that have the same topology key & label value with one of them has an existing pod that matches the affinity rules",
            regions(),
            vec![on("nodeA", pod("p1", json!({"foo": "bar"}), json!({})))],
            pod(
                "p",
                json!({}),
                pod_affinity(vec![term("region", sel("foo", "In", &["bar"]))], vec![]),
            ),
            &["nodeA", "nodeB"],
        ),
        // k8s .../interpodaffinity/filtering_test.go TestRequiredAffinityMultipleNodes "The affinity rule is to schedule all of the pods of this collection to the same zone. The first pod of the collection should not be blocked from being scheduled onto any node, even there's no existing pod that matches the rule anywhere."
        case(
            "The affinity rule is to schedule all of the pods of this collection to the same zone. The first pod of the collection should not be blocked from being scheduled onto any node, even there's no existing pod that matches the rule anywhere.",
            vec![
                node("nodeA", json!({"zone": "az1", "hostname": "h1"})),
                node("nodeB", json!({"zone": "az2", "hostname": "h2"})),
            ],
            vec![on("nodeA", pod("p1", json!({"foo": "bar"}), json!({})))],
            pod(
                "p",
                json!({"foo": "bar", "service": "securityscan"}),
                pod_affinity(
                    vec![
                        term("zone", sel("foo", "In", &["bar"])),
                        term("zone", sel("service", "In", &["securityscan"])),
                    ],
                    vec![],
                ),
            ),
            &["nodeA", "nodeB"],
        ),
        // k8s .../interpodaffinity/filtering_test.go TestRequiredAffinityMultipleNodes "The first pod of the collection can only be scheduled on nodes labelled with the requested topology keys"
        case(
            "The first pod of the collection can only be scheduled on nodes labelled with the requested topology keys",
            vec![
                node("nodeA", json!({"zoneLabel": "az1", "hostname": "h1"})),
                node("nodeB", json!({"zoneLabel": "az2", "hostname": "h2"})),
            ],
            vec![on("nodeA", pod("p1", json!({"foo": "bar"}), json!({})))],
            pod(
                "p",
                json!({"foo": "bar", "service": "securityscan"}),
                pod_affinity(
                    vec![
                        term("zone", sel("foo", "In", &["bar"])),
                        term("zone", sel("service", "In", &["securityscan"])),
                    ],
                    vec![],
                ),
            ),
            &[],
        ),
        // k8s .../interpodaffinity/filtering_test.go TestRequiredAffinityMultipleNodes "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA, nodeB, but can be scheduled onto nodeC (NodeC has an existing pod that match the inter pod affinity rule but in different namespace)"
        case(
            "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA, nodeB, but can be scheduled onto nodeC (NodeC has an existing pod that match the inter pod affinity rule but in different namespace)",
            regions(),
            vec![
                on(
                    "nodeA",
                    pod_in("NS1", "p1", json!({"foo": "bar"}), json!({})),
                ),
                on(
                    "nodeC",
                    pod_in(
                        "NS2",
                        "p2",
                        json!({}),
                        pod_affinity(vec![], vec![term("region", sel("foo", "In", &["123"]))]),
                    ),
                ),
            ],
            pod_in(
                "NS1",
                "p",
                json!({"foo": "123"}),
                pod_affinity(vec![], vec![term("region", sel("foo", "In", &["bar"]))]),
            ),
            &["nodeC"],
        ),
        // k8s .../interpodaffinity/filtering_test.go TestRequiredAffinityMultipleNodes "Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when one term has invalid topologyKey"
        case(
            "Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when one term has invalid topologyKey",
            vec![rz("nodeA", "z1"), rz("nodeB", "z2")],
            vec![on(
                "nodeA",
                pod(
                    "p1",
                    json!({}),
                    pod_affinity(
                        vec![],
                        vec![
                            term("invalid-node-label", exists("foo")),
                            term("zone", exists("bar")),
                        ],
                    ),
                ),
            )],
            pod("p", json!({"foo": "", "bar": ""}), json!({})),
            &["nodeB"],
        ),
        // k8s .../interpodaffinity/filtering_test.go TestRequiredAffinityMultipleNodes "Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all topologyKeys match, and the match logic should be satisfied on the same pod"
        case(
            "Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all topologyKeys match, and the match logic should be satisfied on the same pod",
            vec![rz("nodeA", "z1"), rz("nodeB", "z2")],
            vec![
                on("nodeA", pod("pod1", json!({"foo": ""}), json!({}))),
                on("nodeB", pod("pod2", json!({"bar": ""}), json!({}))),
            ],
            pod(
                "p",
                json!({}),
                pod_affinity(
                    vec![term("region", exists("foo")), term("zone", exists("bar"))],
                    vec![],
                ),
            ),
            &[],
        ),
    ]);
}

#[test]
fn daemonset_probe_is_judged_by_labels_and_taints() {
    // Not a Kubernetes case: the sandbox's DaemonSet controller (sandbox/src/actors/workloads.rs
    // `daemon_pod`) asks `eligible` with the template pinned by `matchFields metadata.name In
    // [""]`, so the name filter must not decide there.
    let probe = pod(
        "probe",
        json!({}),
        merge(
            node_affinity(json!([{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [""]}]}])),
            json!({"nodeSelector": {"disk": "ssd"}}),
        ),
    );
    let scheduler = KubeScheduler::new();
    let ssd = node("ssd", json!({"disk": "ssd"}));
    assert!(scheduler.eligible(&probe, &ssd));
    assert!(!scheduler.eligible(&probe, &node("hdd", json!({"disk": "hdd"}))));
    let taint = json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]);
    assert!(!scheduler.eligible(&probe, &tainted(ssd, taint)));
}

/// A Ready node with `cpu` CPUs, 64Gi of memory and room for 110 pods.
fn sized(name: &str, cpu: &str) -> Node {
    testutil::node(name)
        .label(HOSTNAME, name)
        .allocatable("cpu", cpu)
        .allocatable("memory", "64Gi")
        .allocatable("pods", "110")
        .ready("True")
        .build()
}

/// A pod asking `cpu`, with priority `priority` and, if given, nominated to `nominated`.
fn asking(name: &str, cpu: &str, priority: i32, nominated: Option<&str>) -> Pod {
    let mut p = testutil::pod(name)
        .uid(format!("uid-{name}"))
        .cpu(cpu)
        .merge(json!({"spec": {"priority": priority}}))
        .build();
    if let Some(n) = nominated {
        p.status
            .get_or_insert_with(Default::default)
            .nominated_node_name = Some(n.to_string());
    }
    p
}

/// Each result with a failure rendered as its message.
fn messages(results: Vec<Result<String, Unschedulable>>) -> Vec<Result<String, String>> {
    results
        .into_iter()
        .map(|r| r.map_err(|u| u.message()))
        .collect()
}

/// One pass of `place` over `pending`, in that (queue) order.
fn pass(nodes: Vec<Node>, bound: Vec<Pod>, pending: Vec<Pod>) -> Vec<Result<String, String>> {
    let nodes: Vec<Arc<Node>> = nodes.into_iter().map(Arc::new).collect();
    let bound: Vec<Arc<Pod>> = bound.into_iter().map(Arc::new).collect();
    let pending: Vec<Arc<Pod>> = pending.into_iter().map(Arc::new).collect();
    let namespaces = namespaces();
    let view = ClusterView {
        pending: &pending,
        nominated: &[],
        nodes: &nodes,
        bound: &bound,
        namespaces: &namespaces,
        pvcs: &[],
        pvs: &[],
        storage_classes: &[],
        csinodes: &[],
        volume_attachments: &[],
    };
    messages(KubeScheduler::new().place(&view))
}

/// kube-scheduler `schedule_one.go` `findNodesThatFitPod`: a pod's nominated node is evaluated
/// first (`evaluateNominatedNode`) and, when it passes the filters, is the only feasible node,
/// taken without scoring (`schedule_one_test.go` `TestPreferNominatedNodeFilterCallCounts`,
/// "pod has the nominated node set, filter is called only once"). LeastAllocated alone would
/// pick the empty `big`.
#[test]
fn a_nominated_node_that_fits_is_chosen_without_scoring() {
    let out = pass(
        vec![sized("big", "16"), sized("small", "4")],
        vec![on("small", asking("running", "2", 0, None))],
        vec![asking("planned", "1", 0, Some("small"))],
    );
    assert_eq!(out, vec![Ok("small".to_string())]);
}

/// Same source, "nominated pod cannot pass the filter, filter is called for each node": the pod
/// then goes through normal filtering and scoring over every node.
#[test]
fn a_nominated_node_that_does_not_fit_falls_back_to_filtering_and_scoring() {
    let out = pass(
        vec![sized("big", "16"), sized("mid", "8"), sized("small", "4")],
        vec![on("small", asking("running", "2", 0, None))],
        vec![asking("planned", "3", 0, Some("small"))],
    );
    assert_eq!(
        out,
        vec![Ok("big".to_string())],
        "LeastAllocated among big and mid"
    );
    let out = pass(
        vec![sized("small", "4")],
        vec![on("small", asking("running", "2", 0, None))],
        vec![asking("planned", "3", 0, Some("small"))],
    );
    assert_eq!(
        out,
        vec![Err("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.".to_string())]
    );
}

/// kube-scheduler `framework/runtime/framework.go` `RunFilterPluginsWithNominatedPods` /
/// `addGENominatedPods`: a node is filtered as if the pods nominated to it with equal or higher
/// priority were there, so an older pod of the same priority cannot take the room a nominated
/// pod waits for (KEP-5278 integration test: "once the nodes appear, the pod with NNN set is
/// scheduled there, even if there are other equal-priority pending pods"). Scoring ignores them.
#[test]
fn nominated_pods_hold_their_room_against_equal_and_lower_priority_pods() {
    let out = pass(
        vec![sized("gpu", "4")],
        vec![],
        vec![
            asking("cpu-only", "3", 0, None),
            asking("low", "1", -10, None),
            asking("gpu-pod", "3", 0, Some("gpu")),
        ],
    );
    assert_eq!(
        out,
        vec![
            Err("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.".to_string()),
            Ok("gpu".to_string()),
            Ok("gpu".to_string()),
        ],
        "the 1-CPU pod fits beside the held 3 CPUs; the 3-CPU one does not"
    );
}

/// Same source: only nominated pods of at least the incoming pod's priority are added, so a
/// higher-priority pod takes the room; the nominated pod then does not fit its node and stays
/// pending with its nomination (KEP-5278: the scheduler never clears it).
#[test]
fn higher_priority_pods_ignore_lower_priority_nominations() {
    let out = pass(
        vec![sized("gpu", "4")],
        vec![],
        vec![
            asking("urgent", "3", 1000, None),
            asking("gpu-pod", "3", 0, Some("gpu")),
        ],
    );
    assert_eq!(out[0], Ok("gpu".to_string()));
    assert!(out[1].is_err(), "{:?}", out[1]);
}

/// KEP-5278 "External components put NominatedNodeName", and `schedule_one_test.go`
/// `TestEvaluateNominatedNode` ("When NNN is not present in snapshot, returns error", after which
/// every node is filtered): a nomination to a node that does not exist (yet) holds nothing and
/// does not stop normal scheduling.
#[test]
fn a_nomination_to_an_absent_node_schedules_normally() {
    let out = pass(
        vec![sized("a", "4"), sized("b", "8")],
        vec![],
        vec![
            asking("nominated-away", "1", 0, Some("not-yet")),
            asking("other", "7", 0, None),
        ],
    );
    assert_eq!(out, vec![Ok("b".to_string()), Ok("b".to_string())]);
}

/// `place` over `pending` with `waiting` nominated pods still in the queue, failures as they
/// come (plugins and reasons).
fn place_with_waiting(
    nodes: Vec<Node>,
    pending: Vec<Pod>,
    waiting: Vec<Pod>,
) -> Vec<Result<String, Unschedulable>> {
    let nodes: Vec<Arc<Node>> = nodes.into_iter().map(Arc::new).collect();
    let pending: Vec<Arc<Pod>> = pending.into_iter().map(Arc::new).collect();
    let waiting: Vec<Arc<Pod>> = waiting.into_iter().map(Arc::new).collect();
    let namespaces = namespaces();
    let view = ClusterView {
        pending: &pending,
        nominated: &waiting,
        nodes: &nodes,
        bound: &[],
        namespaces: &namespaces,
        pvcs: &[],
        pvs: &[],
        storage_classes: &[],
        csinodes: &[],
        volume_attachments: &[],
    };
    KubeScheduler::new().place(&view)
}

/// kube-scheduler's nominator (`backend/queue/nominator.go`) holds every nominated pod,
/// wherever it waits in the queue: a nominated pod in the unschedulable pool still keeps its
/// room from an equal-priority pod popped before it (`RunFilterPluginsWithNominatedPods`).
#[test]
fn nominated_pods_waiting_in_the_queue_hold_their_room() {
    let out = place_with_waiting(
        vec![sized("gpu", "4")],
        vec![
            asking("cpu-only", "3", 0, None),
            asking("small", "1", 0, None),
        ],
        vec![asking("gpu-pod", "3", 0, Some("gpu"))],
    );
    assert!(out[0].is_err(), "{:?}", out[0]);
    assert_eq!(out[1], Ok("gpu".to_string()));
    assert_eq!(out.len(), 2, "waiting pods are not placed");
}

/// The failure names the plugins that rejected the pod (upstream `Diagnosis.UnschedulablePlugins`,
/// `schedule_one.go` `findNodesThatFitPod`), which decide the events that requeue it.
#[test]
fn a_failure_names_the_rejecting_plugins() {
    use super::unschedulable::Plugin;
    let out = place_with_waiting(
        vec![
            sized("small", "1"),
            tainted(
                sized("tainted", "16"),
                json!([{"key": "k", "value": "v", "effect": "NoSchedule"}]),
            ),
        ],
        vec![asking("big", "3", 0, None)],
        vec![],
    );
    let Err(why) = &out[0] else {
        panic!("big fits nowhere: {out:?}")
    };
    assert_eq!(
        why.plugins.iter().copied().collect::<Vec<_>>(),
        vec![Plugin::TaintToleration, Plugin::NodeResourcesFit]
    );
    assert_eq!(
        why.message(),
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {k: v}. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    let none = place_with_waiting(vec![], vec![asking("any", "1", 0, None)], vec![]);
    assert!(matches!(&none[0], Err(u) if u.plugins.is_empty()));
}
