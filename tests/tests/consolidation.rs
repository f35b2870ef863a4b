//! Consolidation scenarios in the sandbox, the fleet following the load down: a Deployment
//! scaled up and then down leaves nodes the orchestrator deletes (empty) or replaces with a
//! cheaper one (underutilized), one node or several in one command, with every remaining pod
//! kept Running and every PodDisruptionBudget honoured (watched every 100 ms); a
//! `karpenter.sh/do-not-disrupt` pod pins its node (a duration-valued one until it runs out); a
//! PDB that allows nothing blocks with an Event naming it; a budget of `nodes: "0"` (also
//! inside a schedule window) stops consolidation but not drift's own budget; drift and
//! consolidation together never take the same node nor more than the budget;
//! `consolidateAfter` delays and `Never` disables it; `WhenEmpty` waits for empty nodes; spot
//! nodes are replaced with spot only behind `SpotToSpotConsolidation`. The orchestrator's poll
//! and validation delays are shortened from upstream's 10 s and 15 s to keep the scenarios
//! quick.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use controller::runtime::Settings;
use controller::runtime::feature_gates::FeatureGate;
use crds::disruption::{COMMAND_ANNOTATION, REPLACES_ANNOTATION, STARTED_ANNOTATION};
use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use tests::{Options, TestCluster, condition, deployment};

const SETTLE: Duration = Duration::from_secs(90);

/// The scenarios run one at a time: each sandbox gets the machine to itself, so a scenario's
/// timings (validation delays, drains, 100 ms samples) do not depend on how many others run.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Requirements of on-demand c/m instances of generation 5 and later, amd64 (YAML list items).
const ON_DEMAND_CM: &str = "      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n      - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}\n      - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: [\"4\"]}\n      - {key: kubernetes.io/arch, operator: In, values: [amd64]}\n";

/// Requirements of spot c/m instances of generation 5 and later, amd64.
const SPOT_CM: &str = "      - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}\n      - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}\n      - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: [\"4\"]}\n      - {key: kubernetes.io/arch, operator: In, values: [amd64]}\n";

/// Requirements of on-demand m5.large only (2 vCPU: 1930 millicores allocatable), so the
/// layout of a packed workload is known.
const M5_LARGE: &str = "      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n      - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}\n";

/// A NodePool of on-demand c/m instances with the given `disruption` block (YAML flow map).
fn nodepool(disruption: &str) -> String {
    nodepool_with(disruption, ON_DEMAND_CM)
}

/// The NodePool `default` with the given `disruption` block and `requirements` (YAML list
/// items), and its EC2NodeClass.
fn nodepool_with(disruption: &str, requirements: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: default\nspec:\n  disruption: {disruption}\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      expireAfter: 720h\n      requirements:\n{requirements}---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata:\n  name: default\nspec:\n  role: KarpenterNodeRole-sandbox\n  amiSelectorTerms: [{{alias: al2023@latest}}]\n  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: sandbox}}}}]\n  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: sandbox}}}}]\n"
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
    cluster_with(&nodepool(disruption), workload, fast()).await
}

/// A cluster with `pool` (NodePool and EC2NodeClass YAML), `workload` and `settings`.
async fn cluster_with(pool: &str, workload: &str, settings: Settings) -> TestCluster {
    let yaml = format!("{pool}---\n{workload}");
    TestCluster::start(
        &yaml,
        Options {
            settings,
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

/// Every pod bound (at least one exists: before the workload controllers create pods, an empty
/// cluster counts as settled) and every NodeClaim initialized.
async fn settled(c: &TestCluster, what: &str) {
    c.wait_for(what, SETTLE, |o| {
        o.settled() && o.pods_total > 0 && o.pods_bound == o.pods_total
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scaling_down_deletes_empty_nodes_and_replaces_underutilized_ones() {
    let _one_at_a_time = SERIAL.lock().await;
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
        // The cost re-pack may plan the 24 pods onto several sizes; the fleet has followed the
        // load down once one node, sized for the two pods left, holds them.
        if live(&c).len() == 1 && cost < before / 2.0 && all_running(&c, "web") {
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
    let _one_at_a_time = SERIAL.lock().await;
    // Three 1-cpu pods that opt out of disruption (one 4-vCPU node; four would be planned as
    // 3 + 1), then two of them go: the node left holding the third is oversized (a cheaper one
    // would do), and only do-not-disrupt keeps it.
    let pinned = deployment("pinned", 3, "1", "1Gi").replace(
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
    c.eventually("two pinned pods gone", SETTLE, |c| {
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
    // The pod the ReplicaSet keeps may be one still being scheduled (it deletes pending pods
    // first): pin the node it lands on.
    c.eventually("the pinned pod runs", SETTLE, |c| holder(c).is_some())
        .await;
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
    let _one_at_a_time = SERIAL.lock().await;
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

fn name(o: &Value) -> String {
    o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn annotation(o: &Value, key: &str) -> Option<String> {
    o.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .map(String::from)
}

fn timestamp(v: &Value) -> Option<Timestamp> {
    v.as_str().and_then(|t| t.parse().ok())
}

/// An Event's text (`note` for events.k8s.io, `message` for core Events).
fn text(e: &Value) -> &str {
    e["note"]
        .as_str()
        .or(e["message"].as_str())
        .unwrap_or_default()
}

/// When a NodeClaim was first disrupted: its consolidation command's start, else its deletion.
fn disrupted_at(x: &Value) -> Option<Timestamp> {
    annotation(x, STARTED_ANNOTATION)
        .and_then(|t| t.parse::<Timestamp>().ok())
        .or_else(|| timestamp(&x["metadata"]["deletionTimestamp"]))
}

/// Sample the cluster every 100 ms until `step` (which asserts the invariants of the scenario)
/// says done, or panic after `timeout`.
async fn watch(
    c: &TestCluster,
    what: &str,
    timeout: Duration,
    mut step: impl FnMut(&TestCluster) -> bool,
) {
    let start = Instant::now();
    while !step(c) {
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sample the cluster every 100 ms for `period`, asserting `check` each time: several
/// consolidation passes (0.5 s apart, 2 s validation) go by without it failing.
async fn hold(c: &TestCluster, period: Duration, check: impl Fn(&TestCluster)) {
    let start = Instant::now();
    while start.elapsed() < period {
        check(c);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A Deployment with a PodDisruptionBudget of `minAvailable`.
fn guarded(name: &str, replicas: u32, cpu: &str, min_available: u32) -> String {
    format!(
        "{}---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: {name}\nspec:\n  minAvailable: {min_available}\n  selector:\n    matchLabels: {{app: {name}}}\n",
        deployment(name, replicas, cpu, "64Mi")
    )
}

/// The Deployments of [`packed`] that have a PodDisruptionBudget.
const GUARDED: [&str; 4] = ["a", "b", "c", "d"];

/// On m5.large nodes (1930 millicores): four 1700m `filler` pods, one per node, and four
/// Deployments of two 100m pods with a PDB of minAvailable 1, two pods in each node's gap. With
/// the filler gone, four nodes each hold 200m: underutilized, and nothing is empty.
fn packed() -> String {
    let mut yaml = deployment("filler", 4, "1700m", "256Mi");
    for app in GUARDED {
        yaml.push_str("---\n");
        yaml.push_str(&guarded(app, 2, "100m", 1));
    }
    yaml
}

/// Running pods of `app` that are not being deleted.
fn running(c: &TestCluster, app: &str) -> usize {
    c.objects("", "pods")
        .iter()
        .filter(|p| p["metadata"]["labels"]["app"] == app)
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter(|p| p["status"]["phase"] == "Running")
        .count()
}

/// Every guarded Deployment keeps a Running pod (its PDB's minimum).
fn check_pdbs(c: &TestCluster) {
    for app in GUARDED {
        assert!(
            running(c, app) >= 1,
            "{app} fell below its PodDisruptionBudget minimum"
        );
    }
}

/// Whether a NodeClaim is a candidate of a consolidation command (its replacement carries the
/// command too, with `replaces`).
fn in_command(x: &Value) -> bool {
    annotation(x, COMMAND_ANNOTATION).is_some() && annotation(x, REPLACES_ANNOTATION).is_none()
}

/// Whether a NodeClaim is being replaced by an upgrade step.
fn in_step(x: &Value) -> bool {
    annotation(x, crds::upgrade::REPLACEMENT_ANNOTATION).is_some()
}

/// The candidates of the consolidation commands in progress, by command.
fn commands(c: &TestCluster) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for x in c.nodeclaims().iter().filter(|x| in_command(x)) {
        if let Some(id) = annotation(x, COMMAND_ANNOTATION) {
            out.entry(id).or_default().insert(name(x));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_underutilized_nodes_go_in_one_command_within_every_pdb() {
    let _one_at_a_time = SERIAL.lock().await;
    let pool = nodepool_with(
        "{consolidateAfter: 0s, budgets: [{nodes: \"100%\"}]}",
        M5_LARGE,
    );
    let c = cluster_with(&pool, &packed(), fast()).await;
    settled(&c, "the packed workload provisioned").await;
    c.eventually("one m5.large per filler pod", SETTLE, |c| {
        live(c).len() == 4 && all_running(c, "filler") && running(c, "filler") == 4
    })
    .await;
    let before: BTreeSet<String> = live(&c).iter().map(name).collect();
    assert_eq!(before.len(), 4, "one m5.large per filler pod: {before:?}");
    scale(&c, "filler", 0).await;
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    watch(
        &c,
        "the guarded pods consolidated onto one node",
        SETTLE,
        |c| {
            check_pdbs(c);
            for (id, names) in commands(c) {
                seen.entry(id).or_default().extend(names);
            }
            let claims = c.nodeclaims();
            claims.len() == 1
                && claims.iter().all(|x| {
                    !before.contains(&name(x))
                        && x["metadata"]["deletionTimestamp"].is_null()
                        && annotation(x, COMMAND_ANNOTATION).is_none()
                })
                && GUARDED.iter().all(|app| running(c, app) == 2)
        },
    )
    .await;
    assert!(
        seen.values().any(|names| names.len() >= 2),
        "one command took several NodeClaims: {seen:?}"
    );
    let launching: Vec<String> = c
        .events_with_reason("DisruptionLaunching")
        .iter()
        .map(|e| text(e).to_string())
        .collect();
    assert!(
        launching
            .iter()
            .any(|m| before.iter().filter(|n| m.contains(n.as_str())).count() >= 2),
        "the replacement names the NodeClaims it replaces: {launching:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_do_not_disrupt_duration_pins_its_node_until_it_runs_out() {
    let _one_at_a_time = SERIAL.lock().await;
    // Three pods of 1 CPU fill one 4-vCPU node; four would be planned as 3 + 1 (cheaper than
    // one 8-vCPU node), and the one left after the scale-down could be the lone pod on its
    // cheapest node, with nothing to consolidate.
    let c = cluster(
        "{consolidateAfter: 0s, budgets: [{nodes: \"100%\"}]}",
        &deployment("web", 3, "1", "1Gi"),
    )
    .await;
    settled(&c, "3 pods provisioned").await;
    let hosts: BTreeSet<String> = c
        .objects("", "pods")
        .iter()
        .filter(|p| p["metadata"]["labels"]["app"] == "web")
        .filter_map(|p| p["spec"]["nodeName"].as_str().map(String::from))
        .collect();
    assert_eq!(
        hosts.len(),
        1,
        "the three web pods share one node: {hosts:?}"
    );
    // Bound is not started: the kubelet reports the start a moment later.
    c.eventually("the web pods started", SETTLE, |c| {
        c.objects("", "pods")
            .iter()
            .filter(|p| p["metadata"]["labels"]["app"] == "web")
            .all(|p| p["status"]["startTime"].is_string())
    })
    .await;
    let started = |p: &Value| timestamp(&p["status"]["startTime"]);
    let web: Vec<Value> = c
        .objects("", "pods")
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["app"] == "web")
        .collect();
    let oldest = web
        .iter()
        .filter_map(started)
        .min()
        .expect("the web pods started");
    // Every pod's window (from its start) ends at least 8 s from now.
    let window = Timestamp::now().duration_since(oldest).as_secs() + 8;
    c.kubectl_ok(&[
        "annotate",
        "pods",
        "-l",
        "app=web",
        &format!("karpenter.sh/do-not-disrupt={window}s"),
    ])
    .await;
    scale(&c, "web", 1).await;
    c.eventually("two web pods gone", SETTLE, |c| {
        c.objects("", "pods")
            .iter()
            .filter(|p| p["metadata"]["labels"]["app"] == "web")
            .count()
            == 1
    })
    .await;
    let pod = c
        .objects("", "pods")
        .into_iter()
        .find(|p| p["metadata"]["labels"]["app"] == "web")
        .expect("the pinned pod");
    let end = started(&pod).expect("started") + SignedDuration::from_secs(window);
    let node = pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let claim = c
        .nodeclaims()
        .into_iter()
        .find(|x| x["status"]["nodeName"] == node.as_str())
        .map(|x| name(&x))
        .expect("the pinned node's NodeClaim");
    let pod_name = name(&pod);
    c.eventually("consolidation names the window", SETTLE, |c| {
        c.events(&claim, "DisruptionBlocked").iter().any(|e| {
            text(e).contains(&format!(
                "pod default/{pod_name} has karpenter.sh/do-not-disrupt until"
            ))
        })
    })
    .await;
    let mut disrupted: Option<Timestamp> = None;
    watch(
        &c,
        "the pinned node consolidated once its window ran out",
        SETTLE,
        |c| {
            let Some(x) = c.nodeclaims().into_iter().find(|x| name(x) == claim) else {
                return true;
            };
            if disrupted.is_none() {
                disrupted = disrupted_at(&x);
            }
            false
        },
    )
    .await;
    let disrupted = disrupted.expect("the pinned node was seen being disrupted");
    assert!(
        disrupted >= end,
        "disrupted at {disrupted}, before the do-not-disrupt window ended at {end}"
    );
    c.eventually("the pod runs on the cheaper node", SETTLE, |c| {
        live(c).len() == 1 && all_running(c, "web")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pdb_that_allows_nothing_blocks_with_an_event_naming_it() {
    let _one_at_a_time = SERIAL.lock().await;
    // Scaled to one pod, the PDB's minimum of one allows no eviction: the oversized node stays.
    // Three pods of 1 CPU share one 4-vCPU node (four would be planned as 3 + 1, and the pod
    // left could be the lone one on its cheapest node, which nothing would replace).
    let c = cluster(
        "{consolidateAfter: 0s, budgets: [{nodes: \"100%\"}]}",
        &guarded("web", 3, "1", 1),
    )
    .await;
    settled(&c, "3 pods provisioned").await;
    scale(&c, "web", 1).await;
    c.eventually("DisruptionBlocked names the PDB", SETTLE, |c| {
        c.events_with_reason("DisruptionBlocked")
            .iter()
            .any(|e| text(e).contains("PodDisruptionBudget default/web allows no disruption"))
    })
    .await;
    let holder = c
        .objects("", "pods")
        .into_iter()
        .find(|p| p["metadata"]["labels"]["app"] == "web")
        .and_then(|p| p["spec"]["nodeName"].as_str().map(String::from))
        .expect("the web pod runs");
    hold(&c, Duration::from_secs(3), |c| {
        let claim = c
            .nodeclaims()
            .into_iter()
            .find(|x| x["status"]["nodeName"] == holder.as_str())
            .expect("the blocked node's NodeClaim stays");
        assert!(
            !in_command(&claim) && claim["metadata"]["deletionTimestamp"].is_null(),
            "the blocked node is disrupted"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scheduled_zero_budget_stops_consolidation_but_not_drift() {
    let _one_at_a_time = SERIAL.lock().await;
    // Consolidation's budget is zero inside a window that is always open (every minute, for an
    // hour); drift has its own budget of one.
    let c = cluster(
        "{consolidateAfter: 0s, budgets: [{nodes: \"0\", reasons: [Empty, Underutilized], schedule: \"* * * * *\", duration: 1h}, {nodes: \"1\", reasons: [Drifted]}]}",
        &deployment("web", 6, "1", "1Gi"),
    )
    .await;
    settled(&c, "6 pods provisioned").await;
    let before: BTreeSet<String> = live(&c).iter().map(name).collect();
    scale(&c, "web", 1).await;
    hold(&c, Duration::from_secs(4), |c| {
        assert!(commands(c).is_empty(), "consolidation inside a zero budget");
    })
    .await;
    assert_eq!(
        live(&c).len(),
        before.len(),
        "the zero budget keeps every node"
    );
    let new = c.publish_ami("al2023", None);
    let images: BTreeSet<String> = new.into_iter().map(|a| a.id).collect();
    watch(&c, "drift replaced every node", SETTLE, |c| {
        assert!(commands(c).is_empty(), "consolidation inside a zero budget");
        let claims = c.nodeclaims();
        !claims.is_empty()
            && claims.iter().all(|x| {
                !before.contains(&name(x))
                    && x["status"]["imageID"]
                        .as_str()
                        .is_some_and(|i| images.contains(i))
                    && condition(x, "Initialized").as_deref() == Some("True")
                    && x["metadata"]["deletionTimestamp"].is_null()
            })
            && all_running(c, "web")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consolidate_after_delays_disruption_since_the_last_pod_event() {
    let _one_at_a_time = SERIAL.lock().await;
    let c = cluster(
        "{consolidateAfter: 5s, budgets: [{nodes: \"100%\"}]}",
        &deployment("web", 4, "1", "1Gi"),
    )
    .await;
    settled(&c, "4 pods provisioned").await;
    let before: BTreeSet<String> = live(&c).iter().map(name).collect();
    scale(&c, "web", 0).await;
    let mut last_event: BTreeMap<String, Timestamp> = BTreeMap::new();
    let mut disrupted: BTreeMap<String, Timestamp> = BTreeMap::new();
    watch(&c, "the emptied nodes deleted", SETTLE, |c| {
        let claims = c.nodeclaims();
        for x in &claims {
            if let Some(t) = timestamp(&x["status"]["lastPodEventTime"]) {
                last_event.insert(name(x), t);
            }
            if let Some(at) = disrupted_at(x) {
                disrupted.entry(name(x)).or_insert(at);
            }
        }
        claims.is_empty()
    })
    .await;
    for n in &before {
        let event = last_event
            .get(n)
            .unwrap_or_else(|| panic!("{n}: the pods leaving were never recorded as a pod event"));
        let at = disrupted
            .get(n)
            .unwrap_or_else(|| panic!("{n}: never seen being disrupted"));
        assert!(
            *at >= *event + SignedDuration::from_secs(5),
            "{n} disrupted at {at}, within consolidateAfter of its last pod event at {event}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spot_nodes_are_replaced_with_spot_only_behind_the_feature_gate() {
    let _one_at_a_time = SERIAL.lock().await;
    let pool = nodepool_with(
        "{consolidateAfter: 0s, budgets: [{nodes: \"100%\"}]}",
        SPOT_CM,
    );
    let workload = deployment("web", 4, "1", "1Gi");
    // First fit puts the four pods on one node, which is then too large for the one pod left:
    // the scenario needs a node with cheaper spot types below it. The cost re-pack may already
    // launch the cheapest node for each pod, leaving nothing to replace.
    let first_fit = || Settings {
        cost_repack: false,
        ..fast()
    };

    // Without the gate the node holding the one pod left stays, and says why.
    let off = cluster_with(&pool, &workload, first_fit()).await;
    settled(&off, "4 spot pods provisioned").await;
    scale(&off, "web", 1).await;
    // Nodes left empty go first (the plan may have spread the four pods).
    off.eventually("one NodeClaim left, the empty ones gone", SETTLE, |c| {
        c.nodeclaims().len() == 1
    })
    .await;
    off.eventually("Unconsolidatable says spot-to-spot is off", SETTLE, |c| {
        c.events_with_reason("Unconsolidatable")
            .iter()
            .any(|e| text(e).contains("spot-to-spot consolidation is disabled"))
    })
    .await;
    hold(&off, Duration::from_secs(3), |c| {
        assert!(commands(c).is_empty(), "a command without the gate");
        assert!(
            c.nodeclaims()
                .iter()
                .all(|x| annotation(x, REPLACES_ANNOTATION).is_none()),
            "a replacement without the gate"
        );
    })
    .await;
    assert!(all_running(&off, "web"));
    drop(off);

    // With it, the node is replaced by a cheaper spot node.
    let mut settings = first_fit();
    settings
        .feature_gates
        .set(FeatureGate::SpotToSpotConsolidation, true);
    let on = cluster_with(&pool, &workload, settings).await;
    settled(&on, "4 spot pods provisioned").await;
    let before: BTreeSet<String> = live(&on).iter().map(name).collect();
    let price = fleet_cost(&on);
    scale(&on, "web", 1).await;
    watch(
        &on,
        "the spot node replaced by a cheaper spot node",
        SETTLE,
        |c| {
            let claims = c.nodeclaims();
            claims.len() == 1
                && claims.iter().all(|x| {
                    !before.contains(&name(x))
                        && x["metadata"]["labels"]["karpenter.sh/capacity-type"] == "spot"
                        && condition(x, "Initialized").as_deref() == Some("True")
                })
                && all_running(c, "web")
        },
    )
    .await;
    // The replaced instance may still be shutting down when its NodeClaim is gone.
    on.eventually("the fleet costs less", SETTLE, |c| fleet_cost(c) < price)
        .await;
    assert!(
        on.sim()
            .instances()
            .iter()
            .all(|i| i.capacity_type == "spot"),
        "spot replaced by spot"
    );
    assert!(
        !on.events_with_reason("DisruptionLaunching").is_empty(),
        "a replacement was launched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drift_and_consolidation_together_share_one_budget_and_never_one_node() {
    let _one_at_a_time = SERIAL.lock().await;
    let pool = nodepool_with(
        "{consolidateAfter: 0s, budgets: [{nodes: \"1\"}]}",
        M5_LARGE,
    );
    let c = cluster_with(&pool, &packed(), fast()).await;
    settled(&c, "the packed workload provisioned").await;
    let before: BTreeSet<String> = live(&c).iter().map(name).collect();
    let mut kinds = BTreeSet::new();
    // Every 100 ms: at most one NodeClaim of the pool disrupted (a candidate of a command, in
    // an upgrade step, or deleting), and none held by both methods.
    let mut check = |c: &TestCluster| {
        check_pdbs(c);
        let claims = c.nodeclaims();
        let disrupting: Vec<String> = claims
            .iter()
            .filter(|x| {
                in_command(x) || in_step(x) || !x["metadata"]["deletionTimestamp"].is_null()
            })
            .map(name)
            .collect();
        assert!(
            disrupting.len() <= 1,
            "the budget of one is exceeded: {disrupting:?}"
        );
        for x in &claims {
            assert!(
                !(in_command(x) && in_step(x)),
                "{} is both in a consolidation command and an upgrade step",
                name(x)
            );
            if in_command(x) {
                kinds.insert("consolidation");
            }
            if in_step(x) {
                kinds.insert("upgrade");
            }
        }
        claims
    };
    scale(&c, "filler", 0).await;
    // Drift starts while consolidation is at work.
    watch(&c, "a consolidation command", SETTLE, |c| {
        check(c);
        !commands(c).is_empty()
    })
    .await;
    let images: BTreeSet<String> = c
        .publish_ami("al2023", None)
        .into_iter()
        .map(|a| a.id)
        .collect();
    watch(
        &c,
        "every old node drifted away or consolidated",
        SETTLE,
        |c| {
            let claims = check(c);
            !claims.is_empty()
                && claims.iter().all(|x| {
                    !before.contains(&name(x))
                        && x["status"]["imageID"]
                            .as_str()
                            .is_some_and(|i| images.contains(i))
                        && x["metadata"]["deletionTimestamp"].is_null()
                        && !in_step(x)
                })
                && GUARDED.iter().all(|app| running(c, app) == 2)
        },
    )
    .await;
    assert_eq!(
        kinds,
        BTreeSet::from(["consolidation", "upgrade"]),
        "both methods disrupted nodes"
    );
}

/// The cluster's shifted clock: `consolidateAfter: 5m` is waited on the clock, so five minutes
/// of controller time pass in one call. Emptied nodes stay through four minutes of it (and a
/// few seconds of real time, several passes) and go once the fifth has passed, each disrupted
/// at least five minutes of cluster time after its last pod event.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_minutes_of_consolidate_after_pass_in_seconds_on_the_cluster_clock() {
    let _one_at_a_time = SERIAL.lock().await;
    let c = cluster(
        "{consolidateAfter: 5m, budgets: [{nodes: \"100%\"}]}",
        &deployment("web", 4, "1", "1Gi"),
    )
    .await;
    settled(&c, "4 pods provisioned").await;
    let before: BTreeSet<String> = live(&c).iter().map(name).collect();
    scale(&c, "web", 0).await;
    c.eventually("the pods gone", SETTLE, |c| running(c, "web") == 0)
        .await;
    let kept = |c: &TestCluster| {
        let now: BTreeSet<String> = live(c).iter().map(name).collect();
        assert_eq!(now, before, "disrupted before consolidateAfter ran out");
        assert!(commands(c).is_empty(), "a command started early");
    };
    hold(&c, Duration::from_secs(3), kept).await;
    c.advance_through(
        SignedDuration::from_mins(4),
        SignedDuration::from_secs(30),
        kept,
    )
    .await;
    hold(&c, Duration::from_secs(2), kept).await;
    c.advance(SignedDuration::from_mins(1)).await;
    let mut last_event: BTreeMap<String, Timestamp> = BTreeMap::new();
    let mut disrupted: BTreeMap<String, Timestamp> = BTreeMap::new();
    watch(&c, "the emptied nodes deleted", SETTLE, |c| {
        let claims = c.nodeclaims();
        for x in &claims {
            if let Some(t) = timestamp(&x["status"]["lastPodEventTime"]) {
                last_event.insert(name(x), t);
            }
            if let Some(at) = disrupted_at(x) {
                disrupted.entry(name(x)).or_insert(at);
            }
        }
        claims.is_empty()
    })
    .await;
    for n in &before {
        let (Some(event), Some(at)) = (last_event.get(n), disrupted.get(n)) else {
            panic!("{n}: pod event {last_event:?}, disrupted {disrupted:?}");
        };
        assert!(
            *at >= *event + SignedDuration::from_mins(5),
            "{n} disrupted at {at}, within consolidateAfter of its last pod event at {event}"
        );
    }
}

/// Requirements of on-demand m5.large (1930 millicores allocatable, $0.096/h) and m5.xlarge
/// (3860, $0.192/h).
const M5_LARGE_XLARGE: &str = "      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n      - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m5.xlarge]}\n";

/// Build the Balanced scenario under `policy` and return the cluster once its fleet is an
/// m5.xlarge holding ten 150m pods (1.5 CPU, half of it idle) beside an m5.large held by one
/// 1800m pod, the fleet as it stood before anything could be consolidated:
/// - "small" (10 x 150m) and "filler" (1 x 2000m) together need an m5.xlarge;
/// - "big" (1 x 1800m) then needs an m5.large of its own;
/// - "filler" goes, and the m5.xlarge could be replaced by an m5.large.
///
/// "big" keeps away from "small" (pod anti-affinity), so the m5.large stays as it is.
/// Replacing the m5.xlarge saves $0.096/h, a third of the pool's $0.288/h, and disrupts 11 of
/// the pool's 13 disruption cost (85%): a score of 0.39, below Balanced's 0.5.
async fn balanced_scenario(policy: &str) -> TestCluster {
    let c = cluster_with(
        &nodepool_with(
            &format!("{{consolidationPolicy: {policy}, consolidateAfter: 0s, budgets: [{{nodes: \"100%\"}}]}}"),
            M5_LARGE_XLARGE,
        ),
        &format!(
            "{}---\n{}",
            deployment("small", 10, "150m", "64Mi"),
            deployment("filler", 1, "2000m", "64Mi")
        ),
        fast(),
    )
    .await;
    settled(&c, "small and filler on one m5.xlarge").await;
    let types: Vec<String> = live(&c)
        .iter()
        .filter_map(|x| {
            x["metadata"]["labels"]["node.kubernetes.io/instance-type"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert_eq!(types, ["m5.xlarge"], "the first layout");
    // Never beside a "small" pod: it cannot move onto the m5.xlarge once "filler" is gone,
    // nor the two nodes fold into one.
    let big = deployment("big", 1, "1800m", "64Mi").replace(
        "    spec:\n      containers:",
        "    spec:\n      affinity:\n        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n          - labelSelector: {matchLabels: {app: small}}\n            topologyKey: kubernetes.io/hostname\n      containers:",
    );
    assert!(big.contains("podAntiAffinity"));
    let applied = c.kubectl(&["apply", "-f", "-"], Some(&big)).await;
    assert!(applied.status.success(), "{applied:?}");
    c.eventually("big running on a node of its own", SETTLE, |c| {
        running(c, "big") == 1 && live(c).len() == 2
    })
    .await;
    c.kubectl_ok(&["delete", "deployment", "filler"]).await;
    c.eventually("filler gone", SETTLE, |c| {
        c.objects("", "pods")
            .iter()
            .all(|p| p["metadata"]["labels"]["app"] != "filler")
    })
    .await;
    c
}

/// `kubectl karpenter disruption explain NODE` against `c`: its stdout and stderr.
async fn disruption_explain(c: &TestCluster, node: &str) -> String {
    let mut cmd = std::process::Command::new(tests::workspace_binary("kubectl-karpenter"));
    cmd.args(["disruption", "explain", node, "--kubeconfig"])
        .arg(c.kubeconfig())
        .env("NO_COLOR", "1");
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("plugin runs"))
        .await
        .expect("plugin thread");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn balanced_keeps_a_node_whose_move_saves_too_little_where_the_default_policy_moves_it() {
    let _one_at_a_time = SERIAL.lock().await;
    let c = balanced_scenario("Balanced").await;
    let xlarge = live(&c)
        .into_iter()
        .find(|x| x["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "m5.xlarge")
        .expect("the m5.xlarge");
    let node = xlarge["status"]["nodeName"]
        .as_str()
        .expect("registered")
        .to_string();
    // The orchestrator scores the move and rejects it, pass after pass: the counter says so.
    let rejected = |c: &TestCluster| {
        let ctx = &c.cluster.ctx;
        ctx.metrics.encode(&ctx.state, true).lines().any(|l| {
            l.starts_with("karpenter_consolidation_moves_total{")
                && l.contains("decision=\"rejected\"")
                && l.contains("policy=\"Balanced\"")
        })
    };
    c.eventually("a Balanced rejection counted", SETTLE, rejected)
        .await;
    let before = live(&c).len();
    hold(&c, Duration::from_secs(6), |c| {
        assert_eq!(live(c).len(), before, "Balanced keeps both nodes");
        assert!(
            c.nodeclaims()
                .iter()
                .all(|x| x["metadata"]["deletionTimestamp"].is_null()),
            "nothing is disrupted"
        );
    })
    .await;
    let explain = disruption_explain(&c, &node).await;
    assert!(
        explain.contains("Balanced Score:") && explain.contains("< threshold 0.50"),
        "{explain}"
    );
    assert!(
        explain.contains("is Balanced and the move saves too little"),
        "{explain}"
    );

    // The same cluster under WhenEmptyOrUnderutilized: the m5.xlarge is replaced by an
    // m5.large, and the fleet comes down to $0.192/h.
    let c = balanced_scenario("WhenEmptyOrUnderutilized").await;
    c.eventually("the default policy consolidates", SETTLE, |c| {
        (fleet_cost(c) - 0.192).abs() < 1e-6 && all_running(c, "small") && all_running(c, "big")
    })
    .await;
}

/// Requirements of on-demand c5 instances of 2 to 8 vCPUs ($0.085/h per 2 vCPUs, Linux).
const C5: &str = "      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n      - {key: node.kubernetes.io/instance-type, operator: In, values: [c5.large, c5.xlarge, c5.2xlarge]}\n";

/// Load oscillating every `consolidateAfter` under `policy`: "base" (4 pods of 3.5 CPUs) stays,
/// "web" (pods of 100m) goes from 40 to 20 replicas and back, `cycles` times, 8 s at each
/// level (consolidateAfter 5 s). Returns the nodes consolidation moved pods off
/// (`Underutilized` records in the disruption history) and the NodeClaims created in all.
async fn churn(policy: &str, cycles: usize) -> (usize, usize) {
    let c = cluster_with(
        &nodepool_with(
            &format!("{{consolidationPolicy: {policy}, consolidateAfter: 5s, budgets: [{{nodes: \"100%\"}}]}}"),
            C5,
        ),
        &format!(
            "{}---\n{}",
            deployment("base", 4, "3500m", "256Mi"),
            deployment("web", 40, "100m", "64Mi")
        ),
        fast(),
    )
    .await;
    settled(&c, "base and web provisioned").await;
    for _ in 0..cycles {
        scale(&c, "web", 20).await;
        tokio::time::sleep(Duration::from_secs(8)).await;
        scale(&c, "web", 40).await;
        tokio::time::sleep(Duration::from_secs(8)).await;
    }
    settled(&c, "the last scale-up provisioned").await;
    let moved = c
        .disruption_history()
        .iter()
        .filter(|r| r["reason"] == "Underutilized")
        .count();
    (moved, c.nodeclaims().len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_oscillating_load_balanced_moves_fewer_nodes_than_the_default_policy() {
    let _one_at_a_time = SERIAL.lock().await;
    // Both at once, on the same machine and clock: neither gets an easier run.
    let ((balanced, balanced_claims), (default, default_claims)) =
        tokio::join!(churn("Balanced", 3), churn("WhenEmptyOrUnderutilized", 3));
    println!(
        "churn, 3 cycles of web 40 -> 20 -> 40: Balanced moved {balanced} node(s) ({balanced_claims} NodeClaims in all), \
         WhenEmptyOrUnderutilized moved {default} ({default_claims} NodeClaims in all)"
    );
    assert!(
        default > 0,
        "the default policy consolidates the scale-downs"
    );
    assert!(
        balanced < default,
        "Balanced moved {balanced} node(s), WhenEmptyOrUnderutilized {default}"
    );
}
