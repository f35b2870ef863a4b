//! Capacity reservations end to end on the simulated cloud: an EC2NodeClass selects a
//! reservation of 3 m5.large in us-east-1a; 5 pods that each need an m5.large get 3 `reserved`
//! NodeClaims labelled with the reservation and 2 on-demand ones; a reserved node deleted makes
//! room, and the next launch uses the reservation again.

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
