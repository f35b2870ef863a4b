//! Consolidation scenarios in the sandbox, the fleet following the load down: a Deployment
//! scaled up and then down leaves nodes the orchestrator deletes (empty) or replaces with a
//! cheaper one (underutilized), with every remaining pod kept Running (watched every 100 ms);
//! a `karpenter.sh/do-not-disrupt` pod pins its node; a budget of `nodes: "0"` for consolidation
//! stops it; `consolidateAfter: Never` disables it. The orchestrator's poll and validation
//! delays are shortened from upstream's 10 s and 15 s to keep the scenarios quick.

use std::time::Duration;

use controller::runtime::Settings;
use serde_json::Value;
use tests::{Options, TestCluster, deployment};

const SETTLE: Duration = Duration::from_secs(90);

/// A NodePool of on-demand c/m instances with the given `disruption` block (YAML flow map).
fn nodepool(disruption: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: default\nspec:\n  disruption: {disruption}\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      expireAfter: 720h\n      requirements:\n      - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n      - {{key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}}\n      - {{key: karpenter.k8s.aws/instance-generation, operator: Gt, values: [\"4\"]}}\n      - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata:\n  name: default\nspec:\n  role: KarpenterNodeRole-sandbox\n  amiSelectorTerms: [{{alias: al2023@latest}}]\n  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: sandbox}}}}]\n  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: sandbox}}}}]\n"
    )
}

fn fast() -> Settings {
    Settings {
        disruption_poll: Duration::from_millis(500),
        consolidation_validation_delay: Duration::from_secs(2),
        ..Settings::default()
    }
}

async fn cluster(disruption: &str, workload: &str) -> TestCluster {
    let yaml = format!("{}---\n{workload}", nodepool(disruption));
    TestCluster::start(
        &yaml,
        Options {
            settings: fast(),
            ..Options::default()
        },
    )
    .await
}

/// Live (not deleting) NodeClaims.
fn live(c: &TestCluster) -> Vec<Value> {
    c.nodeclaims()
        .into_iter()
        .filter(|n| n["metadata"]["deletionTimestamp"].is_null())
        .collect()
}

/// The hourly price the simulated cloud charges for the running instances, USD.
fn fleet_cost(c: &TestCluster) -> f64 {
    c.sim().instances().iter().map(|i| i.price).sum()
}

async fn scale(c: &TestCluster, name: &str, replicas: u32) {
    c.kubectl_ok(&[
        "scale",
        &format!("deployment/{name}"),
        &format!("--replicas={replicas}"),
    ])
    .await;
}

/// Every pod of `app` that exists is Running on a node.
fn all_running(c: &TestCluster, app: &str) -> bool {
    c.objects("", "pods")
        .iter()
        .filter(|p| p["metadata"]["labels"]["app"] == app)
        .all(|p| p["status"]["phase"] == "Running" && p["spec"]["nodeName"].is_string())
}

async fn settled(c: &TestCluster, what: &str) {
    c.wait_for(what, SETTLE, |o| o.settled()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scaling_down_deletes_empty_nodes_and_replaces_underutilized_ones() {
    let c = cluster(
        "{consolidateAfter: 0s, budgets: [{nodes: \"100%\"}]}",
        &deployment("web", 24, "1", "1Gi"),
    )
    .await;
    settled(&c, "24 pods of 1 cpu provisioned").await;
    let before = fleet_cost(&c);
    let nodes_before = live(&c).len();
    scale(&c, "web", 2).await;
    // Every remaining pod keeps running while nodes go (watched every 100 ms).
    let deadline = std::time::Instant::now() + SETTLE;
    loop {
        let running = c
            .objects("", "pods")
            .iter()
            .filter(|p| p["metadata"]["labels"]["app"] == "web")
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .filter(|p| p["status"]["phase"] == "Running")
            .count();
        let cost = fleet_cost(&c);
        if live(&c).len() == 1 && cost < before && all_running(&c, "web") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the fleet did not follow the load down: {} NodeClaims (was {nodes_before}), ${cost:.3}/h (was ${before:.3}/h), {running} web pods running",
            live(&c).len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let terminating = c.events_with_reason("DisruptionTerminating");
    assert!(
        !terminating.is_empty(),
        "consolidation says what it removes"
    );
    let why: Vec<&str> = terminating
        .iter()
        .filter_map(|e| e["note"].as_str().or(e["message"].as_str()))
        .collect();
    assert!(
        why.iter()
            .any(|m| m.contains("Empty") || m.contains("Underutilized")),
        "{why:?}"
    );
    // The node left is no dearer than one that holds two 1-cpu pods needs to be.
    assert!(
        fleet_cost(&c) < before / 2.0,
        "{} vs {before}",
        fleet_cost(&c)
    );
    // Each removal is in the disruption history with its reason once the NodeClaim is gone,
    // and the cost changes it records add up to what the fleet's cost did.
    let accounted = |c: &TestCluster| {
        let saved: f64 = c
            .disruption_history()
            .iter()
            .filter_map(|r| r["costChange"].as_f64())
            .sum();
        (before + saved - fleet_cost(c)).abs() < 1e-6
    };
    c.eventually(
        "every removal recorded with its cost change",
        SETTLE,
        accounted,
    )
    .await;
    let history = c.disruption_history();
    assert!(!history.is_empty());
    for r in &history {
        assert!(
            r["reason"] == "Empty" || r["reason"] == "Underutilized",
            "{r:#}"
        );
        assert_eq!(r["nodepool"], "default");
        assert_eq!(r["outcome"], "Succeeded");
        match r.get("replacement") {
            Some(replacement) => {
                assert_eq!(r["reason"], "Underutilized", "{r:#}");
                assert!(replacement["instanceType"].is_string(), "{r:#}");
                assert!(replacement["price"].as_f64().is_some(), "{r:#}");
            }
            None => assert_eq!(r["costChange"].as_f64(), r["price"].as_f64().map(|p| -p)),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_do_not_disrupt_pod_pins_its_node_and_a_zero_budget_stops_consolidation() {
    // Four 1-cpu pods that opt out of disruption, then three of them go: the node left holding
    // the fourth is oversized (a cheaper one would do), and only do-not-disrupt keeps it.
    let pinned = deployment("pinned", 4, "1", "1Gi").replace(
        "    metadata:\n      labels: {app: pinned}\n",
        "    metadata:\n      labels: {app: pinned}\n      annotations: {karpenter.sh/do-not-disrupt: \"true\"}\n",
    );
    let c = cluster(
        "{consolidateAfter: 0s, budgets: [{nodes: \"100%\"}]}",
        &pinned,
    )
    .await;
    settled(&c, "the pinned pods provisioned").await;
    scale(&c, "pinned", 1).await;
    c.eventually("three pinned pods gone", SETTLE, |c| {
        c.objects("", "pods")
            .iter()
            .filter(|p| p["metadata"]["labels"]["app"] == "pinned")
            .count()
            == 1
    })
    .await;
    let holder = |c: &TestCluster| -> Option<String> {
        c.objects("", "pods")
            .iter()
            .find(|p| p["metadata"]["labels"]["app"] == "pinned")
            .and_then(|p| p["spec"]["nodeName"].as_str().map(String::from))
    };
    let node = holder(&c).expect("the pinned pod runs");
    c.eventually("consolidation names the blocker", SETTLE, |c| {
        c.events_with_reason("DisruptionBlocked").iter().any(|e| {
            e["note"]
                .as_str()
                .or(e["message"].as_str())
                .is_some_and(|m| m.contains("has karpenter.sh/do-not-disrupt"))
        })
    })
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        holder(&c),
        Some(node.clone()),
        "a do-not-disrupt pod pins its node"
    );
    assert!(
        c.objects("", "nodes")
            .iter()
            .any(|n| n["metadata"]["name"] == node.as_str()
                && n["metadata"]["deletionTimestamp"].is_null()),
        "the pinned node is not deleted"
    );

    let frozen = cluster(
        "{consolidateAfter: 0s, budgets: [{nodes: \"0\", reasons: [Empty, Underutilized]}]}",
        &deployment("web", 6, "1", "1Gi"),
    )
    .await;
    settled(&frozen, "6 pods provisioned").await;
    let n = live(&frozen).len();
    scale(&frozen, "web", 0).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(live(&frozen).len(), n, "a zero budget keeps empty nodes");
    assert!(
        frozen
            .events_with_reason("DisruptionTerminating")
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consolidate_after_never_disables_it_and_when_empty_waits_for_empty_nodes() {
    let never = cluster(
        "{consolidateAfter: Never}",
        &deployment("web", 4, "1", "1Gi"),
    )
    .await;
    settled(&never, "4 pods provisioned").await;
    let n = live(&never).len();
    scale(&never, "web", 0).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        live(&never).len(),
        n,
        "consolidateAfter: Never keeps every node"
    );

    let when_empty = cluster(
        "{consolidationPolicy: WhenEmpty, consolidateAfter: 0s, budgets: [{nodes: \"100%\"}]}",
        &deployment("web", 8, "1", "1Gi"),
    )
    .await;
    settled(&when_empty, "8 pods provisioned").await;
    scale(&when_empty, "web", 0).await;
    when_empty
        .eventually("empty nodes deleted", SETTLE, |c| live(c).is_empty())
        .await;
}
