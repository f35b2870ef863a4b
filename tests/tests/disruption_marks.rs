//! The marks a disruption command leaves (issue 33): the `karpenter.sh/disrupted:NoSchedule`
//! taint on its candidates' nodes and the command annotations on their NodeClaims. A taint
//! nothing holds any more (a command whose start failed, a removal that failed) is swept by the
//! orchestrator instead of freezing consolidation for good; a command the cluster shows only
//! half-started (its annotation written, its node never tainted: a start whose answer was lost)
//! is abandoned, never carried out.

use std::time::Duration;

use crds::disruption::{
    COMMAND_ANNOTATION, REASON_ANNOTATION, REPLACEMENT_ANNOTATION, REPLACES_ANNOTATION,
    STARTED_ANNOTATION,
};
use crds::history::CANDIDATES_ANNOTATION;
use crds::labels::DISRUPTED_TAINT_KEY;
use karpenter_core::clock::Clock;
use serde_json::{Value, json};
use tests::{Options, TestCluster, deployment};

const SETTLE: Duration = Duration::from_secs(60);

/// A NodePool that never consolidates (so every command in these tests is one the test
/// staged) of 2-vCPU on-demand nodes, and a Deployment of two 1.1-CPU pods: a node each.
async fn cluster() -> TestCluster {
    let pool = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: default\nspec:\n  disruption: {consolidateAfter: Never}\n  template:\n    spec:\n      requirements:\n      - {key: karpenter.k8s.aws/instance-cpu, operator: In, values: [\"2\"]}\n      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n---\n";
    let yaml = format!("{pool}{}", deployment("web", 2, "1100m", "256Mi"));
    let c = TestCluster::start(&yaml, Options::default()).await;
    c.wait_for(
        "both pods bound, both NodeClaims initialized",
        SETTLE,
        |o| o.settled() && o.pods_total == 2 && o.pods_bound == 2,
    )
    .await;
    c
}

/// The first NodeClaim's name and its node's name.
fn first_claim(c: &TestCluster) -> (String, String) {
    let claim = c.nodeclaims().into_iter().next().expect("a NodeClaim");
    let node = claim["status"]["nodeName"]
        .as_str()
        .expect("registered")
        .to_string();
    (
        claim["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .into(),
        node,
    )
}

fn node(c: &TestCluster, name: &str) -> Option<Value> {
    c.objects("", "nodes")
        .into_iter()
        .find(|n| n["metadata"]["name"] == name)
}

fn tainted(n: &Value) -> bool {
    n["spec"]["taints"]
        .as_array()
        .is_some_and(|ts| ts.iter().any(|t| t["key"] == DISRUPTED_TAINT_KEY))
}

/// Issue 33, defect 2: a disrupted taint left on a node that no command holds (here put there
/// by hand, as a failed rollback left it) is removed by the orchestrator's sweep, and the node
/// and its NodeClaim stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leaked_disrupted_taint_is_swept() {
    let c = cluster().await;
    let (claim, name) = first_claim(&c);
    c.kubectl_ok(&[
        "taint",
        "node",
        &name,
        &format!("{DISRUPTED_TAINT_KEY}:NoSchedule"),
    ])
    .await;
    assert!(node(&c, &name).is_some_and(|n| tainted(&n)));
    c.eventually("the leaked taint swept", SETTLE, |c| {
        node(c, &name).is_some_and(|n| !tainted(&n))
    })
    .await;
    assert!(
        c.nodeclaims()
            .iter()
            .any(|x| x["metadata"]["name"] == claim.as_str()),
        "the NodeClaim stays"
    );
}

/// Issue 33, defect 3: a command whose start wrote the candidate's annotation but never
/// tainted its node (the answer to the annotation was lost, so the start gave up) is abandoned
/// on the next pass: its annotations are cleared, and its node, which still runs a pod, is not
/// deleted as `Empty`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_half_started_command_is_abandoned_not_carried_out() {
    let c = cluster().await;
    let (claim, name) = first_claim(&c);
    let started = c.clock.now().to_string();
    let patch = json!({"metadata": {"annotations": {
        COMMAND_ANNOTATION: "empty-bcdfg", REASON_ANNOTATION: "Empty",
        REPLACEMENT_ANNOTATION: "", STARTED_ANNOTATION: started,
        CANDIDATES_ANNOTATION: "1"}}});
    c.merge_patch("nodeclaim", &claim, &patch.to_string()).await;
    let annotated = |c: &TestCluster| {
        c.nodeclaims()
            .into_iter()
            .find(|x| x["metadata"]["name"] == claim.as_str())
            .map(|x| x["metadata"]["annotations"][COMMAND_ANNOTATION].is_string())
    };
    c.eventually("the half-started command abandoned", SETTLE, |c| {
        annotated(c) == Some(false)
    })
    .await;
    // A few more passes: it is not started again, nothing is deleted or tainted.
    c.advance_through(
        jiff::SignedDuration::from_secs(30),
        jiff::SignedDuration::from_secs(10),
        |c| {
            assert_eq!(annotated(c), Some(false), "{claim} kept or lost");
            let n = node(c, &name).expect("the node stays");
            assert!(
                n["metadata"]["deletionTimestamp"].is_null(),
                "{name} deleted"
            );
            assert!(!tainted(&n), "{name} tainted");
        },
    )
    .await;
    assert_eq!(c.disruption_history(), Vec::<Value>::new());
}

/// Every node's history as the store recorded it: the versions in order, from the store's
/// change feed (a task the test starts before anything moves). Then, per node: whether it was
/// deleted (got a `deletionTimestamp`) and whether it carried the disrupted taint by then.
struct NodeRecorder {
    seen: std::sync::Arc<std::sync::Mutex<NodeRecord>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct NodeRecord {
    /// Nodes that got a deletionTimestamp: whether the taint came first (or with it).
    deleted: std::collections::BTreeMap<String, bool>,
    /// Nodes seen tainted so far.
    tainted: std::collections::BTreeSet<String>,
    /// NodeClaims that went away.
    claims_gone: std::collections::BTreeSet<String>,
    /// Nodes of replacements, while they are (a rolled-back replacement is deleted untainted:
    /// it held no pod).
    replacement_nodes: std::collections::BTreeSet<String>,
    /// Whether the feed fell behind (events were lost: the record is incomplete).
    lagged: bool,
}

impl NodeRecorder {
    fn start(c: &TestCluster) -> NodeRecorder {
        let mut feed = c.cluster.sandbox.store().subscribe();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(NodeRecord::default()));
        let record = std::sync::Arc::clone(&seen);
        let task = tokio::spawn(async move {
            loop {
                let event = match feed.recv().await {
                    Ok(e) => e,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        record.lock().expect("record").lagged = true;
                        continue;
                    }
                    Err(_) => return,
                };
                let object = event.decoded();
                let name = object["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let mut r = record.lock().expect("record");
                match (event.key.plural.as_str(), event.event_type) {
                    ("nodes", _) => {
                        if tainted(&object) {
                            r.tainted.insert(name.clone());
                        }
                        let deleting = object["metadata"]["deletionTimestamp"].is_string()
                            || event.event_type == sandbox::store::EventType::Deleted;
                        if deleting && !r.deleted.contains_key(&name) {
                            let first = r.tainted.contains(&name);
                            r.deleted.insert(name, first);
                        }
                    }
                    ("nodeclaims", kind) => {
                        // A replacement while it is one (a command's replacement becomes an
                        // ordinary node once the command is done).
                        if let Some(node) = object["status"]["nodeName"].as_str() {
                            if object["metadata"]["annotations"][REPLACES_ANNOTATION].is_string() {
                                r.replacement_nodes.insert(node.to_string());
                            } else if !r.deleted.contains_key(node) {
                                r.replacement_nodes.remove(node);
                            }
                        }
                        if kind == sandbox::store::EventType::Deleted {
                            r.claims_gone.insert(name);
                        }
                    }
                    _ => {}
                }
            }
        });
        NodeRecorder { seen, task }
    }
}

impl Drop for NodeRecorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Issue 33's chaos scenario: three consolidation cycles (scale up, settle, scale down, settle)
/// of a Deployment guarded by a PodDisruptionBudget, under API faults on the controller's
/// requests only: conflicts, 500s, writes that take effect but answer 504, and watches that
/// break off. At the end: no disrupted taint or command mark is left, every deleted node was
/// tainted first, the disruption history names exactly the NodeClaims that went, and
/// NodeClaims, Nodes and instances are the same set.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consolidation_cycles_under_api_faults_leave_no_marks() {
    use sandbox::faults::{FaultConfig, FaultKind, UserAgentFilter};
    let pool = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: default\nspec:\n  disruption: {consolidateAfter: 0s, budgets: [{nodes: \"100%\"}]}\n  template:\n    spec:\n      requirements:\n      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n      - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}\n      - {key: karpenter.k8s.aws/instance-cpu, operator: In, values: [\"2\", \"4\"]}\n      - {key: kubernetes.io/arch, operator: In, values: [amd64]}\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n---\n";
    let pdb = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: web\nspec:\n  maxUnavailable: 1\n  selector:\n    matchLabels: {app: web}\n---\n";
    // 1.1-CPU pods: a 2-vCPU node holds one, a 4-vCPU node three, so scaling down leaves both
    // empty nodes (deleted) and underutilized ones (their pods moved, or replaced).
    let yaml = format!("{pool}{pdb}{}", deployment("web", 2, "1100m", "1Gi"));
    // The controller starts once the faults are on, so its watches are made (and broken off)
    // under them too.
    let mut c = TestCluster::start(
        &yaml,
        Options {
            settings: controller::runtime::Settings {
                disruption_poll: Duration::from_millis(500),
                consolidation_validation_delay: Duration::from_secs(2),
                ..controller::runtime::Settings::default()
            },
            controller: false,
            ..Options::default()
        },
    )
    .await;
    let recorder = NodeRecorder::start(&c);
    let faults = std::sync::Arc::clone(c.cluster.sandbox.faults());
    let mut config = FaultConfig::default()
        .with_rate(FaultKind::Conflict, 60)
        .with_rate(FaultKind::InternalError, 40)
        .with_rate(FaultKind::LostResponse, 40)
        .with_rate(FaultKind::DropWatch, 200);
    config.drop_watch_max = Duration::from_secs(3);
    config.budget = Some(600);
    config.user_agent = UserAgentFilter::Except("kubectl".into());
    config.seed = 33;
    faults.configure(config);
    faults.enable();
    let provider = std::sync::Arc::clone(&c.cluster.cloud);
    c.cluster.start_controller(provider);
    let settled = |c: &TestCluster, pods: usize| {
        let o_claims = c.nodeclaims();
        let live: Vec<&Value> = o_claims
            .iter()
            .filter(|x| x["metadata"]["deletionTimestamp"].is_null())
            .collect();
        let running = c
            .objects("", "pods")
            .iter()
            .filter(|p| p["metadata"]["labels"]["app"] == "web")
            .filter(|p| {
                p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null()
            })
            .count();
        running == pods
            && live.len() == o_claims.len()
            && live
                .iter()
                .all(|x| tests::condition(x, "Initialized").as_deref() == Some("True"))
    };
    c.eventually("2 pods running", Duration::from_secs(90), |c| settled(c, 2))
        .await;
    for cycle in 1..=3 {
        c.kubectl_ok(&["scale", "deployment/web", "--replicas=8"])
            .await;
        c.eventually(
            &format!("cycle {cycle}: 8 pods running"),
            Duration::from_secs(120),
            |c| settled(c, 8),
        )
        .await;
        c.kubectl_ok(&["scale", "deployment/web", "--replicas=2"])
            .await;
        // The fleet follows the load down: at most two nodes hold the two pods.
        c.eventually(
            &format!("cycle {cycle}: consolidated"),
            Duration::from_secs(150),
            |c| settled(c, 2) && c.nodeclaims().len() <= 2,
        )
        .await;
    }
    let injected = faults.counts();
    faults.disable();
    for kind in [
        FaultKind::Conflict,
        FaultKind::InternalError,
        FaultKind::LostResponse,
        FaultKind::DropWatch,
    ] {
        assert!(
            injected.of(kind) > 0,
            "no {} fault was injected: {injected}",
            kind.as_str()
        );
    }
    // Faults off: what the controller still had to finish (a retried sweep, a rollback)
    // finishes, and then nothing is marked.
    c.eventually("no disruption mark left", Duration::from_secs(60), |c| {
        c.objects("", "nodes").iter().all(|n| !tainted(n))
            && c.nodeclaims().iter().all(|x| {
                x["metadata"]["annotations"][COMMAND_ANNOTATION].is_null()
                    && x["metadata"]["deletionTimestamp"].is_null()
            })
    })
    .await;
    let claims = c.nodeclaims();
    let claimed = tests::provider_ids(&claims);
    let node_ids: std::collections::BTreeSet<String> = c
        .objects("", "nodes")
        .iter()
        .filter_map(|n| n["spec"]["providerID"].as_str().map(String::from))
        .collect();
    let instances: std::collections::BTreeSet<String> = c
        .sim()
        .instances()
        .iter()
        .map(|i| i.provider_id.clone())
        .collect();
    assert_eq!(claimed, node_ids, "NodeClaims and Nodes");
    assert_eq!(claimed, instances, "NodeClaims and instances");
    let seen = recorder.seen.lock().expect("record");
    assert!(
        !seen.lagged,
        "the change feed fell behind: the record is incomplete"
    );
    assert!(!seen.deleted.is_empty(), "consolidation deleted no node");
    let untainted: Vec<&String> = seen
        .deleted
        .iter()
        .filter(|(n, tainted_first)| !**tainted_first && !seen.replacement_nodes.contains(*n))
        .map(|(n, _)| n)
        .collect();
    assert!(
        untainted.is_empty(),
        "deleted without the disrupted taint first: {untainted:?}"
    );
    // The history names exactly the NodeClaims that went: removals by their own name, and a
    // replacement deleted by a rollback in its rollback's record.
    let history = c.disruption_history();
    let mut recorded = std::collections::BTreeSet::new();
    for r in &history {
        match r["outcome"].as_str() {
            Some("Succeeded") => {
                assert!(
                    recorded.insert(r["nodeclaim"].as_str().unwrap_or_default().to_string()),
                    "recorded twice: {r:#}"
                );
            }
            Some("RolledBack") => {
                if let Some(replacement) = r["replacement"]["nodeclaim"].as_str() {
                    recorded.insert(replacement.to_string());
                }
            }
            other => panic!("unknown outcome {other:?}: {r:#}"),
        }
    }
    assert_eq!(
        recorded, seen.claims_gone,
        "history against the NodeClaims that went"
    );
}
