//! Reports built from hand-made cluster objects.

use std::collections::BTreeSet;

use crds::Operator;
use crds::labels::INSTANCE_TYPE_LABEL;
use karpenter_core::capacity::catalog::Catalog;
use serde_json::{Value, json};
use testutil::{condition, ec2nodeclass, nodeclaim};

use super::*;

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("valid object")
}

/// A pod `shop/name` (uid `uid-<name>`) asking for 500m and 512Mi that kube-scheduler marked
/// unschedulable, with `spec` merged into its spec.
fn pod(name: &str, spec: Value) -> Pod {
    testutil::pod(name)
        .namespace("shop")
        .uid(format!("uid-{name}"))
        .cpu("500m")
        .memory("512Mi")
        .unschedulable()
        .merge(json!({"spec": spec}))
        .build()
}

/// A Ready NodePool `name` of `weight` with `taints` (a JSON array) in its template.
fn nodepool(name: &str, weight: i32, taints: Value) -> Arc<crds::NodePool> {
    testutil::nodepool(name)
        .weight(weight)
        .merge(json!({"spec": {"template": {"spec": {"taints": taints}}}}))
        .with_condition(condition("Ready", "True").at("2025-01-01T00:00:00Z"))
        .arc()
}

fn world(pods: Vec<Pod>) -> World {
    World {
        pods,
        events: Vec::new(),
        snapshot: Snapshot {
            nodepools: vec![
                nodepool(
                    "infra",
                    10,
                    json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]),
                ),
                nodepool("default", 0, json!([])),
            ],
            nodeclasses: vec![
                ec2nodeclass("default")
                    .subnet_ids(["s"])
                    .security_group_ids(["g"])
                    .arc(),
            ],
            ..Snapshot::default()
        },
    }
}

fn types(_: &EC2NodeClass) -> Result<Vec<Arc<InstanceType>>, String> {
    let catalog = Catalog::embedded().map_err(|e| e.to_string())?;
    let zones = BTreeSet::from(["us-east-1a".to_string()]);
    Ok(catalog.instance_types(
        &zones,
        &karpenter_core::capacity::node_class::CapacityConfig::default(),
        |_, _, _| false,
    ))
}

#[test]
fn every_nodepool_is_judged_heaviest_first() {
    let w = world(vec![pod("web", json!({}))]);
    let reports = build(&w, false, types);
    assert_eq!(reports.len(), 1);
    let r = &reports[0];
    assert_eq!(r.state, PodState::Provisionable);
    assert!(
        r.message.starts_with("NodePool default can launch "),
        "{}",
        r.message
    );
    let lines: Vec<(&str, &str)> = r
        .nodepools
        .iter()
        .map(|l| (l.verdict.nodepool.as_str(), l.message.as_str()))
        .collect();
    assert_eq!(
        lines[0],
        ("infra", "taint not tolerated: dedicated=infra:NoSchedule")
    );
    assert_eq!(lines[1].0, "default");
    assert!(
        lines[1].1.starts_with("compatible: would launch "),
        "{lines:?}"
    );
}

#[test]
fn a_pod_no_nodepool_takes_is_a_problem() {
    let w = world(vec![pod(
        "mars",
        json!({"nodeSelector": {"topology.kubernetes.io/zone": "mars-1a"}}),
    )]);
    let reports = build(&w, false, types);
    let r = &reports[0];
    assert_eq!(r.state, PodState::Unschedulable);
    assert!(r.state.is_problem());
    assert_eq!(r.message, "no NodePool can launch capacity for it");
    assert_eq!(
        r.nodepools[1].message,
        "requirement conflict on topology.kubernetes.io/zone: pod requires \
         topology.kubernetes.io/zone In [mars-1a], NodePool allows topology.kubernetes.io/zone In [us-east-1a]"
    );
    let json = serde_json::to_value(&reports).expect("json");
    assert_eq!(json[0]["state"], "Unschedulable");
    assert_eq!(json[0]["nodepools"][0]["verdict"], "Rejected");
    assert_eq!(json[0]["nodepools"][0]["reason"], "Taint");
    assert_eq!(json[0]["nodepools"][1]["reason"], "RequirementConflict");
    assert_eq!(
        json[0]["nodepools"][1]["key"],
        "topology.kubernetes.io/zone"
    );
    // Reason fields never shadow the verdict's own keys.
    assert_eq!(json[0]["nodepools"][1]["nodepool"], "default");
    assert_eq!(
        json[0]["nodepools"][1]["required"],
        "topology.kubernetes.io/zone In [mars-1a]"
    );
    assert_eq!(
        json[0]["nodepools"][1]["message"],
        r.nodepools[1].message.as_str()
    );
}

#[test]
fn nominated_pods_wait_for_their_nodeclaim_while_it_exists() {
    let mut w = world(vec![pod("web", json!({}))]);
    w.events = vec![from(json!({
        "metadata": {"name": "web.1", "namespace": "shop"},
        "involvedObject": {"kind": "Pod", "namespace": "shop", "name": "web", "uid": "uid-web"},
        "reason": "Nominated",
        "message": "Pod should schedule on: nodeclaim/default-abcde",
    }))];
    // The NodeClaim is gone: the NodePools are asked.
    assert_eq!(build(&w, false, types)[0].state, PodState::Provisionable);
    let claim = nodeclaim("default-abcde")
        .nodepool("default")
        .with_condition(condition("Launched", "True").at("2025-01-01T00:00:00Z"))
        .build();
    w.snapshot.nodeclaims = vec![Arc::new(claim)];
    let r = &build(&w, false, types)[0];
    assert_eq!(r.state, PodState::WaitingForNodeClaim);
    assert_eq!(
        r.message,
        "waiting for NodeClaim default-abcde (Registering)"
    );
    assert_eq!(r.nodeclaim.as_deref(), Some("default-abcde"));
    assert!(r.nodepools.is_empty());
    assert!(!r.state.is_problem());
}

#[test]
fn bound_finished_and_daemonset_pods() {
    let mut bound = pod("bound", json!({"nodeName": "ip-1"}));
    let mut done = pod("done", json!({}));
    if let Some(s) = done.status.as_mut() {
        s.phase = Some("Succeeded".into());
    }
    let mut ds = pod("ds", json!({}));
    ds.metadata.owner_references = Some(vec![from(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "u", "controller": true
    }))]);
    let w = world(vec![bound.clone(), done, ds]);
    let reports = build(&w, false, types);
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].state, PodState::Ignored);
    // Named, a bound pod is reported as such.
    bound.metadata.name = Some("bound".into());
    let reports = build(&world(vec![bound]), true, types);
    assert_eq!(reports[0].state, PodState::Bound);
    assert_eq!(reports[0].message, "not pending: bound to node ip-1");
}

#[test]
fn pods_that_fit_an_in_flight_nodeclaim_wait_for_it_without_an_event() {
    let mut w = world(vec![pod("web", json!({}))]);
    let claim = nodeclaim("default-fghij")
        .nodepool("default")
        .requirement(INSTANCE_TYPE_LABEL, Operator::In, ["m5.large"])
        .build();
    w.snapshot.nodeclaims = vec![Arc::new(claim)];
    let r = &build(&w, false, types)[0];
    assert_eq!(r.state, PodState::WaitingForNodeClaim);
    assert_eq!(
        r.message,
        "waiting for NodeClaim default-fghij (Launching): it fits that in-flight capacity"
    );
    // A pod too large for an m5.large is judged by the NodePools instead.
    let mut big = pod("big", json!({}));
    if let Some(spec) = big.spec.as_mut() {
        spec.containers[0].resources = Some(from(json!({"requests": {"cpu": "4"}})));
    }
    w.pods = vec![big];
    assert_eq!(build(&w, false, types)[0].state, PodState::Provisionable);
}

#[test]
fn pods_karpenter_does_not_consider_get_their_own_state() {
    let mut fresh = pod("fresh", json!({}));
    if let Some(s) = fresh.status.as_mut() {
        s.conditions = None;
    }
    let mut gated = pod(
        "gated",
        json!({"schedulingGates": [{"name": "example.com/quota"}]}),
    );
    if let Some(s) = gated.status.as_mut() {
        s.conditions = Some(vec![from(json!({
            "type": "PodScheduled", "status": "False", "reason": "SchedulingGated"
        }))]);
    }
    let mut other = pod("other", json!({"schedulerName": "volcano"}));
    if let Some(s) = other.status.as_mut() {
        s.conditions = None;
    }
    let w = world(vec![fresh, gated, other, pod("web", json!({}))]);
    let reports = build(&w, false, types);
    let got: Vec<(&str, PodState, &str)> = reports
        .iter()
        .map(|r| (r.name.as_str(), r.state, r.message.as_str()))
        .collect();
    assert_eq!(
        got[..3],
        [
            (
                "fresh",
                PodState::NotYetUnschedulable,
                "not yet marked unschedulable by kube-scheduler (no PodScheduled=False/\
                 Unschedulable condition): Karpenter waits for that"
            ),
            (
                "gated",
                PodState::Gated,
                "gated by schedulingGates: example.com/quota; nothing schedules it until they \
                 are removed"
            ),
            (
                "other",
                PodState::OtherScheduler,
                "uses scheduler volcano: Karpenter only provisions for pods default-scheduler \
                 marked unschedulable"
            ),
        ]
    );
    assert_eq!(got[3].1, PodState::Provisionable);
    for r in &reports {
        assert!(!r.state.is_problem(), "{r:?}");
        if r.name != "web" {
            assert!(r.nodepools.is_empty(), "{r:?}");
        }
    }
    assert_eq!(
        crate::why_pending::render::summary(&reports),
        "4 pending pods: 1 provisionable, 1 gated by schedulingGates, 1 for another scheduler, \
         1 not yet marked unschedulable"
    );
}

#[test]
fn a_pod_whose_own_requirements_conflict_blames_no_nodepool() {
    let arch = |op: &str, values: &[&str]| json!({"key": "kubernetes.io/arch", "operator": op, "values": values});
    let affinity = |exprs: Value| {
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": exprs}]}}})
    };
    let w = world(vec![
        pod(
            "in-and-not-in",
            json!({"affinity": affinity(json!([arch("In", &["amd64"]), arch("NotIn", &["amd64"])]))}),
        ),
        pod(
            "selector-vs-affinity",
            json!({
                "nodeSelector": {"kubernetes.io/arch": "amd64"},
                "affinity": affinity(json!([arch("In", &["arm64"])])),
            }),
        ),
    ]);
    let reports = build(&w, false, types);
    let by_name = |name: &str| {
        reports
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("{name} reported"))
    };
    let both = by_name("in-and-not-in");
    assert_eq!(both.state, PodState::ConflictingRequirements);
    assert!(both.state.is_problem());
    assert!(both.nodepools.is_empty(), "{:?}", both.nodepools);
    assert!(
        both.message.contains(
            "kubernetes.io/arch In [amd64] (required node affinity) and kubernetes.io/arch NotIn \
             [amd64] (required node affinity)"
        ),
        "{}",
        both.message
    );
    assert!(!both.message.contains("DoesNotExist"), "{}", both.message);
    let selector = by_name("selector-vs-affinity");
    assert_eq!(selector.state, PodState::ConflictingRequirements);
    assert!(
        selector.message.contains(
            "kubernetes.io/arch In [amd64] (nodeSelector) and kubernetes.io/arch In [arm64] \
             (required node affinity)"
        ),
        "{}",
        selector.message
    );
}

#[test]
fn a_nodeclaim_created_with_relaxed_min_values_says_so() {
    let mut w = world(vec![pod("web", json!({}))]);
    let mut claim = nodeclaim("default-relax")
        .nodepool("default")
        .requirement(INSTANCE_TYPE_LABEL, Operator::In, ["m5.large", "m5.xlarge"])
        .annotation("karpenter.sh/nodeclaim-min-values-relaxed", "true")
        .build();
    claim.spec.requirements[0].min_values = Some(2);
    w.snapshot.nodeclaims = vec![Arc::new(claim)];
    let r = &build(&w, false, types)[0];
    assert_eq!(r.state, PodState::WaitingForNodeClaim);
    assert_eq!(
        r.message,
        "waiting for NodeClaim default-relax (Launching): it fits that in-flight capacity; \
         minValues relaxed (MIN_VALUES_POLICY=BestEffort): node.kubernetes.io/instance-type>=2"
    );
}

/// A NodeOverlay giving every m5.large an FPGA, as listed from the cluster; with a
/// `ValidationSucceeded` condition when `evaluated` (the controller runs with the gate on).
fn fpga_overlay(evaluated: bool) -> crds::NodeOverlay {
    let mut overlay = json!({
        "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
        "metadata": {"name": "fpga"},
        "spec": {
            "requirements": [{"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": ["m5.large"]}],
            "capacity": {"example.com/fpga": "1"},
        },
    });
    if evaluated {
        overlay["status"] = json!({"conditions": [{
            "type": "ValidationSucceeded", "status": "True", "reason": "ValidationSucceeded",
            "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z",
        }]});
    }
    from(overlay)
}

#[test]
fn overlays_the_controller_applies_are_applied_here_too() {
    assert!(overlays_in_effect(vec![fpga_overlay(false)]).is_empty());
    let fpga = pod(
        "fpga",
        json!({"containers": [{"name": "c", "resources": {
            "requests": {"cpu": "500m", "example.com/fpga": "1"},
            "limits": {"example.com/fpga": "1"}}}]}),
    );
    let mut w = world(vec![fpga]);
    let state = |w: &World| build(w, false, types)[0].state;
    assert_eq!(state(&w), PodState::Unschedulable);
    w.snapshot.nodeoverlays = overlays_in_effect(vec![fpga_overlay(true)]);
    assert_eq!(w.snapshot.nodeoverlays.len(), 1);
    let reports = build(&w, false, types);
    assert_eq!(
        reports[0].state,
        PodState::Provisionable,
        "{}",
        reports[0].message
    );
    assert!(
        reports[0].message.contains("m5.large"),
        "{}",
        reports[0].message
    );
}
