//! The interruption controller against the simulated cloud's queue (the same EventBridge
//! bodies SQS carries): every message is deleted once handled, whether it is a spot
//! interruption (replacement launched at once on another offering, the interrupted NodeClaim
//! deleted within the two-minute warning, the offering marked unavailable), a duplicate of
//! one, a rebalance recommendation (an Event only), a message for an instance Karpenter does
//! not know, an unreadable body, or an instance stopping (drained at once, with a
//! replacement). Metrics and the disruption history record them.

use std::collections::BTreeSet;
use std::time::Duration;

use controller::runtime::metrics::parse_samples;
use crds::disruption::REPLACES_ANNOTATION;
use jiff::Timestamp;
use karpenter_core::interruption::event;
use serde_json::Value;
use tests::{Options, TestCluster, deployment};

const SETTLE: Duration = Duration::from_secs(90);

/// A spot NodePool of c/m generation-5+ amd64 instances and its EC2NodeClass.
fn spot_pool() -> String {
    "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: default\nspec:\n  disruption: {consolidateAfter: Never}\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      expireAfter: 720h\n      requirements:\n      - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}\n      - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}\n      - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: [\"4\"]}\n      - {key: kubernetes.io/arch, operator: In, values: [amd64]}\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata:\n  name: default\nspec:\n  role: KarpenterNodeRole-sandbox\n  amiSelectorTerms: [{alias: al2023@latest}]\n  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]\n  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]\n".to_string()
}

fn name(o: &Value) -> String {
    o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn label(o: &Value, key: &str) -> String {
    o["metadata"]["labels"][key]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `(instance type, zone, capacity type)` of a launched NodeClaim.
fn offering(o: &Value) -> (String, String, String) {
    (
        label(o, "node.kubernetes.io/instance-type"),
        label(o, "topology.kubernetes.io/zone"),
        label(o, "karpenter.sh/capacity-type"),
    )
}

fn instance_id(o: &Value) -> String {
    o["status"]["providerID"]
        .as_str()
        .and_then(|p| p.rsplit('/').next())
        .unwrap_or_default()
        .to_string()
}

fn live(c: &TestCluster) -> Vec<Value> {
    c.nodeclaims()
        .into_iter()
        .filter(|n| n["metadata"]["deletionTimestamp"].is_null())
        .collect()
}

fn replacements_of(c: &TestCluster, old: &str) -> Vec<Value> {
    c.nodeclaims()
        .into_iter()
        .filter(|n| n["metadata"]["annotations"][REPLACES_ANNOTATION] == old)
        .collect()
}

/// The counter `name{labels}` in the controller's metrics (0 when absent).
fn counter(c: &TestCluster, name: &str, labels: &[(&str, &str)]) -> f64 {
    let text = c.cluster.ctx.metrics.encode(&c.cluster.ctx.state, true);
    parse_samples(&text)
        .expect("metrics parse")
        .iter()
        .filter(|s| s.matches(name, labels))
        .map(|s| s.value)
        .sum()
}

fn all_running(c: &TestCluster) -> bool {
    let pods = c.objects("", "pods");
    !pods.is_empty()
        && pods
            .iter()
            .all(|p| p["status"]["phase"] == "Running" && p["spec"]["nodeName"].is_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn interruption_messages_are_handled_once_and_deleted() {
    let yaml = format!(
        "{}---\n{}",
        spot_pool(),
        deployment("web", 12, "900m", "512Mi")
    );
    let c = TestCluster::start(&yaml, Options::default()).await;
    c.wait_for("the workload settles", SETTLE, |o| {
        o.settled() && o.pods_total == 12 && o.pods_bound == 12
    })
    .await;
    let queue = c
        .sim()
        .interruption_queue()
        .expect("test clusters have an interruption queue")
        .clone();
    let claims = live(&c);
    assert!(claims.len() >= 2, "several nodes: {}", claims.len());
    // The busiest node is interrupted; another one is stopped later.
    let pods = c.objects("", "pods");
    let pods_on = |n: &Value| {
        let node = n["status"]["nodeName"].as_str().unwrap_or_default();
        pods.iter()
            .filter(|p| p["spec"]["nodeName"] == node)
            .count()
    };
    let mut by_load = claims.clone();
    by_load.sort_by_key(|n| std::cmp::Reverse(pods_on(n)));
    let victim = by_load[0].clone();
    let stopped = by_load[1].clone();
    let (vname, vid, voffering) = (name(&victim), instance_id(&victim), offering(&victim));
    assert_eq!(voffering.2, "spot");
    let (account, region) = ("123456789012", "us-east-1");

    let warned = Timestamp::now();
    queue.send("{this is not an event", warned);
    queue.send(
        &event::spot_interruption("e-unknown", account, region, "i-00000000000000000", warned),
        warned,
    );
    queue.send(
        &event::rebalance_recommendation("e-rebalance", account, region, &vid, warned),
        warned,
    );
    queue.send(
        &event::spot_interruption("e-spot", account, region, &vid, warned),
        warned,
    );
    queue.send(
        &event::spot_interruption("e-spot-again", account, region, &vid, warned),
        warned,
    );

    c.eventually(
        "every message is handled and deleted",
        Duration::from_secs(20),
        |_| queue.is_empty() && queue.totals() == (5, 5),
    )
    .await;
    c.eventually(
        "a replacement is launched at the warning",
        Duration::from_secs(20),
        |c| !replacements_of(c, &vname).is_empty(),
    )
    .await;
    assert_eq!(
        replacements_of(&c, &vname).len(),
        1,
        "the duplicate message launches nothing more"
    );
    assert!(!c.events(&vname, "SpotInterrupted").is_empty());
    assert!(!c.events(&vname, "SpotRebalanceRecommendation").is_empty());
    // The interrupted offering is out of the capacity-error cache's offerings for 3 minutes.
    let class = c
        .cluster
        .ctx
        .state
        .nodeclasses
        .state()
        .into_iter()
        .next()
        .expect("a node class");
    let types = c
        .cluster
        .cloud
        .instance_types(&class)
        .await
        .expect("instance types");
    let interrupted_offering = types
        .iter()
        .find(|t| t.name == voffering.0)
        .and_then(|t| {
            t.offerings
                .iter()
                .find(|o| o.zone == voffering.1 && o.capacity_type == "spot")
        })
        .expect("the offering is listed");
    assert!(!interrupted_offering.available);

    c.eventually(
        "the interrupted NodeClaim is gone within the two-minute warning",
        Duration::from_secs(110),
        |c| c.nodeclaims().iter().all(|n| name(n) != vname),
    )
    .await;
    let replacement = replacements_of(&c, &vname)
        .into_iter()
        .next()
        .or_else(|| {
            // Once its candidate is gone, the replacement's command annotations are cleared.
            live(&c)
                .into_iter()
                .find(|n| !claims.iter().any(|o| name(o) == name(n)))
        })
        .expect("the replacement");
    assert_ne!(
        offering(&replacement),
        voffering,
        "the replacement is on another offering"
    );
    assert!(Timestamp::now().duration_since(warned).as_secs() < 120);

    // An instance stopping: drained at once, with a replacement launched for its pods.
    let (sname, sid) = (name(&stopped), instance_id(&stopped));
    let now = Timestamp::now();
    queue.send(
        &event::state_change("e-stop", account, region, &sid, "stopping", now),
        now,
    );
    c.eventually(
        "the stopping instance's NodeClaim is deleted",
        Duration::from_secs(60),
        |c| c.nodeclaims().iter().all(|n| name(n) != sname),
    )
    .await;
    c.eventually("every pod runs again", SETTLE, all_running)
        .await;

    let reasons: BTreeSet<(String, String)> = c
        .disruption_history()
        .iter()
        .map(|r| {
            (
                r["nodeclaim"].as_str().unwrap_or_default().to_string(),
                r["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert!(
        reasons.contains(&(vname.clone(), "SpotInterrupted".into())),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&(sname.clone(), "InstanceStopped".into())),
        "{reasons:?}"
    );
    let received = |t: &str| {
        counter(
            &c,
            "karpenter_interruption_received_messages_total",
            &[("message_type", t)],
        )
    };
    assert_eq!(received("spot_interrupted"), 3.0);
    assert_eq!(received("rebalance_recommendation"), 1.0);
    assert_eq!(received("instance_stopped"), 1.0);
    assert_eq!(
        counter(&c, "karpenter_interruption_deleted_messages_total", &[]),
        6.0
    );
    assert_eq!(
        counter(
            &c,
            "karpenter_nodeclaims_disrupted_total",
            &[("reason", "spot_interrupted")]
        ),
        1.0
    );
}
