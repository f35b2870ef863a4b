//! The provisioning plan over small snapshots: NodeClaims for pods nothing holds, nominations to
//! nodes and in-flight NodeClaims, failures and skipped NodePools with their reasons, and the
//! limit re-check.

use std::collections::HashMap;
use std::sync::Arc;

use crate::pod_view::PodView;
use crds::labels::INSTANCE_TYPE_LABEL;
use crds::{EC2NodeClass, NodeClaim, Operator};
use testutil::{NodePoolBuilder, condition, ec2nodeclass, node, nodeclaim, nodepool, pod};

use super::*;
use crate::scheduling::testing::small_medium_large;

/// The NodePool `default` with condition `Ready` = `status`.
fn nodepool_ready(status: &str) -> NodePoolBuilder {
    nodepool("default").condition("Ready", status)
}

/// The EC2NodeClass `default`, selecting subnet-1 and sg-1 by id.
fn nodeclass() -> Arc<EC2NodeClass> {
    ec2nodeclass("default")
        .subnet_ids(["subnet-1"])
        .security_group_ids(["sg-1"])
        .arc()
}

/// A pod kube-scheduler marked unschedulable, asking `cpu` and `memory`.
fn pending(name: &str, cpu: &str, memory: &str) -> Arc<PodView> {
    pod(name)
        .uid(name)
        .cpu(cpu)
        .memory(memory)
        .unschedulable()
        .arc()
}

fn listings() -> HashMap<String, Listing> {
    HashMap::from([("default".to_string(), Ok(Arc::new(small_medium_large())))])
}

fn snapshot(pods: Vec<Arc<PodView>>) -> Snapshot {
    Snapshot {
        pods,
        nodepools: vec![nodepool_ready("True").arc()],
        nodeclasses: vec![nodeclass()],
        ..Snapshot::default()
    }
}

#[test]
fn pending_pods_get_a_nodeclaim_of_their_nodepool() {
    let snap = snapshot(vec![
        pending("a", "500m", "512Mi"),
        pending("b", "500m", "512Mi"),
    ]);
    let out = plan(&snap, &listings(), &Settings::default());
    assert_eq!(out.pods, 2);
    assert!(out.failures.is_empty(), "{:?}", out.failures);
    assert!(out.nominations.is_empty());
    assert_eq!(out.nodeclaims.len(), 1);
    let planned = &out.nodeclaims[0];
    let claim: &NodeClaim = &planned.nodeclaim;
    assert_eq!(claim.metadata.generate_name.as_deref(), Some("default-"));
    assert_eq!(
        claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("karpenter.sh/nodepool"))
            .map(String::as_str),
        Some("default")
    );
    let types: Vec<&str> = claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == "node.kubernetes.io/instance-type")
        .map(|r| r.values.iter().map(String::as_str).collect())
        .unwrap_or_default();
    assert_eq!(
        types[0], "gp.large",
        "cheapest fitting type first: {types:?}"
    );
    let mut pods: Vec<String> = planned
        .decision
        .pods
        .iter()
        .map(|k| k.name.clone())
        .collect();
    pods.sort();
    assert_eq!(pods, ["a", "b"]);
    assert_eq!(planned.nodepool.metadata.name.as_deref(), Some("default"));
    assert_eq!(
        planned.largest_capacity().get("cpu"),
        2_000,
        "gp.large, the only option listed: the larger types cost more as spot than it does on demand"
    );
}

#[test]
fn pods_that_fit_existing_capacity_are_nominated_there() {
    let node = node("ip-10-0-0-1.ec2.internal")
        .provider_id("aws:///us-east-1a/i-1")
        .allocatable("cpu", "4")
        .allocatable("memory", "8Gi")
        .allocatable("pods", "110")
        .ready("True")
        .build();
    let in_flight = nodeclaim("default-abcde")
        .nodepool("default")
        .requirement(INSTANCE_TYPE_LABEL, Operator::In, ["gp.large"])
        .build();
    let mut snap = snapshot(vec![pending("small", "500m", "512Mi")]);
    snap.nodes = vec![Arc::new(node)];
    let out = plan(&snap, &listings(), &Settings::default());
    assert!(out.nodeclaims.is_empty());
    assert_eq!(
        out.nominations,
        vec![Nomination {
            pod: PodKey {
                namespace: "default".into(),
                name: "small".into()
            },
            target: Target::Node("ip-10-0-0-1.ec2.internal".into()),
        }]
    );
    assert_eq!(
        out.nominations[0].target.to_string(),
        "node/ip-10-0-0-1.ec2.internal"
    );
    let mut snap = snapshot(vec![pending("small", "500m", "512Mi")]);
    snap.nodeclaims = vec![Arc::new(in_flight)];
    let out = plan(&snap, &listings(), &Settings::default());
    assert!(out.nodeclaims.is_empty());
    assert_eq!(
        out.nominations[0].target,
        Target::NodeClaim("default-abcde".into())
    );
}

#[test]
fn nodepools_left_out_say_why_and_their_pods_fail() {
    let mut snap = snapshot(vec![pending("a", "500m", "512Mi")]);
    snap.nodepools = vec![
        nodepool("default")
            .with_condition(
                condition("Ready", "False")
                    .reason("UnhealthyDependents")
                    .message("NodeClassReady=False"),
            )
            .with_condition(
                condition("NodeClassReady", "False")
                    .reason("NodeClassNotFound")
                    .message("EC2NodeClass \"missing\" not found"),
            )
            .arc(),
    ];
    let out = plan(&snap, &listings(), &Settings::default());
    assert!(out.nodeclaims.is_empty());
    assert!(matches!(
        out.skipped.as_slice(),
        [(name, SkipReason::NotReady(Some(_)))] if name == "default"
    ));
    assert_eq!(out.failures.len(), 1);
    // The pod's message names the pool and the node class to create, not only "no ready".
    assert_eq!(
        out.failures[0].reason,
        format!(
            "{} (nodepool \"default\": Ready=False UnhealthyDependents: NodeClassReady=False \
             (EC2NodeClass \"missing\" not found))",
            solver::NO_READY_NODEPOOL
        )
    );

    let snap = snapshot(vec![pending("a", "500m", "512Mi")]);
    let broken = HashMap::from([(
        "default".to_string(),
        Err("DescribeInstanceTypes: throttled".to_string()),
    )]);
    let out = plan(&snap, &broken, &Settings::default());
    assert_eq!(
        out.skipped,
        vec![(
            "default".to_string(),
            SkipReason::InstanceTypes("DescribeInstanceTypes: throttled".into())
        )]
    );
}

#[test]
fn a_pod_too_large_for_every_type_fails_with_the_rejection() {
    let snap = snapshot(vec![pending("huge", "64", "1Gi")]);
    let out = plan(&snap, &listings(), &Settings::default());
    assert!(out.nodeclaims.is_empty());
    assert_eq!(out.failures.len(), 1);
    assert!(
        out.failures[0]
            .reason
            .starts_with("incompatible with nodepool \"default\""),
        "{}",
        out.failures[0].reason
    );
}

#[test]
fn limits_name_what_a_new_nodeclaim_would_exceed() {
    let pool = nodepool_ready("True")
        .limit("cpu", "10")
        .limit("nodes", "3")
        .arc();
    let mut largest = Resources::default();
    largest.set("cpu", 4000);
    let mut used = Resources::default();
    used.set("cpu", 4000);
    assert!(exceeded_limits(&pool, &largest, &used, 1).is_empty());
    used.set("cpu", 7000);
    assert_eq!(exceeded_limits(&pool, &largest, &used, 1), ["cpu"]);
    used.set("cpu", 0);
    assert_eq!(exceeded_limits(&pool, &largest, &used, 3), ["nodes"]);
    let unlimited = nodepool_ready("True").arc();
    used.set("cpu", 1_000_000);
    assert!(exceeded_limits(&unlimited, &largest, &used, 99).is_empty());
}
