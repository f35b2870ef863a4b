//! Capacity reservations end to end on the simulated cloud: an EC2NodeClass selects a
//! reservation of 3 m5.large in us-east-1a; 5 pods that each need an m5.large get 3 `reserved`
//! NodeClaims labelled with the reservation and 2 on-demand ones, and the node class shows 0
//! available; a reserved node deleted makes room, and the next launch uses the reservation
//! again. When a reservation ends its nodes run on as on-demand and are relabelled so; a
//! Capacity Block's nodes are drained and replaced 40 minutes before it ends, before EC2
//! reclaims them.

use std::time::Duration;

use karpenter_core::capacity::reservation;
use serde_json::Value;
use tests::{Options, TestCluster, deployment};

const SETTLE: Duration = Duration::from_secs(60);
const ID: &str = "cr-0123456789abcdef0";

const RESERVATIONS: &str = r#"
- CapacityReservationId: cr-0123456789abcdef0
  InstanceType: m5.large
  AvailabilityZone: us-east-1a
  TotalInstanceCount: 3
  AvailableInstanceCount: 3
  InstanceMatchCriteria: targeted
  ReservationType: default
  OwnerId: "123456789012"
"#;

const RESERVED_POOL: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-sandbox
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
  capacityReservationSelectorTerms: [{id: cr-0123456789abcdef0}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: reserved}
spec:
  template:
    spec:
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [reserved, on-demand]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  disruption: {consolidateAfter: Never}
"#;

fn capacity_type(claim: &Value) -> &str {
    claim["metadata"]["labels"]["karpenter.sh/capacity-type"]
        .as_str()
        .unwrap_or("")
}

/// `kubectl karpenter status ARGS` against the cluster: its stdout (fails on a non-zero exit).
async fn plugin_status(c: &TestCluster, args: &[&str]) -> String {
    let mut cmd = std::process::Command::new(tests::workspace_binary("kubectl-karpenter"));
    cmd.arg("status")
        .args(args)
        .arg("--kubeconfig")
        .arg(c.kubeconfig())
        .env("NO_COLOR", "1");
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("plugin runs"))
        .await
        .expect("plugin thread");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn launched(c: &TestCluster) -> Vec<Value> {
    c.nodeclaims()
        .into_iter()
        .filter(|n| n["metadata"]["deletionTimestamp"].is_null())
        .filter(|n| n["status"]["providerID"].is_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reserved_capacity_is_used_first_and_again_when_freed() {
    let yaml = format!(
        "{RESERVED_POOL}---\n{}",
        deployment("trainer", 5, "1500m", "1Gi")
    );
    let opts = Options {
        defaults: false,
        capacity_reservations: reservation::parse(RESERVATIONS).expect("reservations"),
        ..Options::default()
    };
    let c = TestCluster::start(&yaml, opts).await;
    c.eventually("5 NodeClaims launched", SETTLE, |c| launched(c).len() == 5)
        .await;
    let claims = launched(&c);
    let reserved: Vec<&Value> = claims
        .iter()
        .filter(|n| capacity_type(n) == "reserved")
        .collect();
    assert_eq!(reserved.len(), 3, "{claims:#?}");
    for n in &reserved {
        let labels = &n["metadata"]["labels"];
        assert_eq!(labels["karpenter.k8s.aws/capacity-reservation-id"], ID);
        assert_eq!(
            labels["karpenter.k8s.aws/capacity-reservation-type"],
            "default"
        );
        assert_eq!(labels["topology.kubernetes.io/zone"], "us-east-1a");
    }
    let on_demand = claims
        .iter()
        .filter(|n| capacity_type(n) == "on-demand")
        .count();
    assert_eq!(on_demand, 2, "{claims:#?}");
    // The node class says which reservations it selected.
    let class = c.objects("karpenter.k8s.aws", "ec2nodeclasses").remove(0);
    assert_eq!(
        class["status"]["capacityReservations"][0]["id"], ID,
        "{class}"
    );
    assert_eq!(
        class["status"]["capacityReservations"][0]["instanceType"],
        "m5.large"
    );
    c.eventually("the node class shows 0 available", SETTLE, |c| {
        let class = c.objects("karpenter.k8s.aws", "ec2nodeclasses").remove(0);
        let r = &class["status"]["capacityReservations"][0];
        r["availableInstanceCount"] == 0 && r["totalInstanceCount"] == 3
    })
    .await;
    // `kubectl karpenter status -o wide` names the reservation of each reserved NodeClaim and
    // shows the NodePool's reservations used of total.
    let wide = plugin_status(&c, &["-o", "wide"]).await;
    assert!(wide.contains("reserved (reserved: 3/3)"), "{wide}");
    assert_eq!(
        wide.matches(&format!("reserved ({ID})")).count(),
        3,
        "{wide}"
    );
    // A reserved node goes (its pod's replacement launches while the reservation is still
    // full, so on demand, as upstream's would); once its instance is gone, the next launch
    // uses the room it left.
    let gone = reserved[0]["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    c.kubectl_ok(&["delete", "nodeclaim", &gone]).await;
    c.eventually("the pod's replacement launched", SETTLE, |c| {
        let now = launched(c);
        now.len() == 5 && !now.iter().any(|n| n["metadata"]["name"] == gone.as_str())
    })
    .await;
    c.kubectl_ok(&["scale", "deployment", "trainer", "--replicas=6"])
        .await;
    c.eventually("a sixth NodeClaim, reserved", SETTLE, |c| {
        let now = launched(c);
        now.len() == 6
            && now
                .iter()
                .filter(|n| capacity_type(n) == "reserved")
                .count()
                == 3
    })
    .await;
    let in_reservation = c
        .sim()
        .instances()
        .iter()
        .filter(|i| i.reservation_id.as_deref() == Some(ID))
        .count();
    assert!(
        (3..=4).contains(&in_reservation),
        "3 running in the reservation, and at most the one terminated: {in_reservation}"
    );
}

/// An ODCR of one m5.large and a Capacity Block of one c5.large ending two hours after the
/// test starts; a pod for each.
fn ending_reservations() -> String {
    let end = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(2);
    format!(
        r#"
- CapacityReservationId: cr-0000000000000odcr
  InstanceType: m5.large
  AvailabilityZone: us-east-1a
  TotalInstanceCount: 1
  AvailableInstanceCount: 1
  OwnerId: "123456789012"
- CapacityReservationId: cr-000000000000block
  InstanceType: c5.large
  AvailabilityZone: us-east-1a
  TotalInstanceCount: 1
  AvailableInstanceCount: 1
  ReservationType: capacity-block
  EndDate: "{end}"
  OwnerId: "123456789012"
"#
    )
}

const ENDING_POOL: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-sandbox
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
  capacityReservationSelectorTerms: [{id: cr-0000000000000odcr}, {id: cr-000000000000block}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: reserved}
spec:
  template:
    spec:
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, c5.large]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [reserved, on-demand]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  disruption: {consolidateAfter: Never}
"#;

/// A Deployment of one pod that must run on `instance_type`.
fn pinned(name: &str, instance_type: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      nodeSelector: {{node.kubernetes.io/instance-type: {instance_type}}}
      containers:
      - name: app
        image: public.ecr.aws/eks-distro/kubernetes/pause:3.2
        resources: {{requests: {{cpu: 500m, memory: 512Mi}}}}
"#
    )
}

fn of_type<'a>(claims: &'a [Value], instance_type: &str) -> Vec<&'a Value> {
    claims
        .iter()
        .filter(|n| n["metadata"]["labels"]["node.kubernetes.io/instance-type"] == instance_type)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ended_reservations_demote_and_capacity_blocks_drain_before_they_end() {
    let yaml = format!(
        "{ENDING_POOL}---\n{}---\n{}",
        pinned("web", "m5.large"),
        pinned("trainer", "c5.large")
    );
    let opts = Options {
        defaults: false,
        capacity_reservations: reservation::parse(&ending_reservations()).expect("reservations"),
        ..Options::default()
    };
    let c = TestCluster::start(&yaml, opts).await;
    c.eventually("2 reserved NodeClaims with Nodes", SETTLE, |c| {
        let claims = launched(c);
        claims.len() == 2
            && claims.iter().all(|n| capacity_type(n) == "reserved")
            && c.objects("", "nodes").len() == 2
    })
    .await;
    let block_claim = of_type(&launched(&c), "c5.large")[0]["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();

    // The ODCR is cancelled: EC2 keeps the instance as on-demand; the NodeClaim and its Node
    // say so within a pass of the controller (every minute).
    c.sim().with_network(|n| {
        n.reservations
            .iter_mut()
            .filter(|r| r.capacity_reservation_id == "cr-0000000000000odcr")
            .for_each(|r| r.state = "cancelled".into());
    });
    c.advance(jiff::SignedDuration::from_secs(61)).await;
    c.eventually("the m5.large NodeClaim and Node demoted", SETTLE, |c| {
        let claims = launched(c);
        let web = of_type(&claims, "m5.large");
        let nodes = c.objects("", "nodes");
        let node = of_type(&nodes, "m5.large");
        web.len() == 1
            && capacity_type(web[0]) == "on-demand"
            && web[0]["metadata"]["labels"]["karpenter.k8s.aws/capacity-reservation-id"].is_null()
            && node.len() == 1
            && capacity_type(node[0]) == "on-demand"
    })
    .await;
    assert!(
        !c.events_with_reason("CapacityReservationEnded").is_empty(),
        "a CapacityReservationEnded Event"
    );

    // The block ends 2h after the start: 40 minutes before, its node drains and the pod moves
    // to an on-demand c5.large, while EC2 (30 minutes before) has not reclaimed it yet.
    let mut reclaimed_early = false;
    c.advance_through(
        jiff::SignedDuration::from_mins(81),
        jiff::SignedDuration::from_mins(10),
        |c| {
            let running = c
                .sim()
                .instances()
                .iter()
                .any(|i| i.reservation_id.as_deref() == Some("cr-000000000000block"));
            let claimed = c
                .nodeclaims()
                .iter()
                .any(|n| n["metadata"]["name"] == block_claim.as_str());
            reclaimed_early |= claimed && !running;
        },
    )
    .await;
    assert!(
        !reclaimed_early,
        "EC2 reclaimed the block's instance before Karpenter drained it"
    );
    c.eventually("the trainer pod on an on-demand c5.large", SETTLE, |c| {
        let claims = launched(c);
        let trainer = of_type(&claims, "c5.large");
        let pods = c.objects("", "pods");
        let running = pods.iter().any(|p| {
            p["metadata"]["labels"]["app"] == "trainer"
                && p["status"]["phase"] == "Running"
                && p["metadata"]["deletionTimestamp"].is_null()
        });
        trainer.len() == 1
            && trainer[0]["metadata"]["name"] != block_claim.as_str()
            && capacity_type(trainer[0]) == "on-demand"
            && running
    })
    .await;
    assert!(
        !c.events(&block_claim, "CapacityBlockExpiring").is_empty(),
        "a CapacityBlockExpiring Event on {block_claim}"
    );
    let class = c.objects("karpenter.k8s.aws", "ec2nodeclasses").remove(0);
    let block = class["status"]["capacityReservations"]
        .as_array()
        .expect("reservations")
        .iter()
        .find(|r| r["id"] == "cr-000000000000block")
        .cloned();
    assert!(
        block.is_none_or(|b| b["state"] == "expiring"),
        "an expiring block is shown expiring: {class}"
    );
}
