//! Serial upgrade scenarios in the sandbox: Online Boutique (two replicas of every service, a
//! PodDisruptionBudget each) on several nodes; a new AMI makes every node drifted and the
//! orchestrator replaces them one at a time, replacement first, while the test checks
//! continuously that no PDB minimum is broken and never more than one old node is in a step.
//! Pause, step and resume through the plugin; a replacement that never initializes is rolled
//! back and pauses the rollout; a controller killed mid-step resumes that one step.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use controller::runtime::Settings;
use karpenter::workload::ONLINE_BOUTIQUE;
use serde_json::{Value, json};
use tests::{Options, TestCluster, condition, workspace_binary};

const ROLLOUT: Duration = Duration::from_secs(240);

/// Online Boutique's Deployments (each pod labelled `app: <name>`).
const SERVICES: &[&str] = &[
    "frontend",
    "adservice",
    "currencyservice",
    "cartservice",
    "redis-cart",
    "loadgenerator",
    "recommendationservice",
    "checkoutservice",
    "emailservice",
    "paymentservice",
    "shippingservice",
    "productcatalogservice",
];

fn pdbs() -> String {
    SERVICES
        .iter()
        .map(|s| {
            format!(
                "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: {s}\nspec:\n  minAvailable: 1\n  selector:\n    matchLabels: {{app: {s}}}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
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

fn image(o: &Value) -> String {
    o["status"]["imageID"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Online Boutique at two replicas with a PDB per service, on m5.large nodes only (so it needs
/// several), with `settings`; returns once every pod runs on initialized nodes.
async fn boutique(settings: Settings) -> TestCluster {
    let workload = format!("{ONLINE_BOUTIQUE}\n---\n{}", pdbs());
    let mut c = TestCluster::start(
        &workload,
        Options {
            controller: false,
            settings,
            ..Options::default()
        },
    )
    .await;
    c.kubectl_ok(&["scale", "deployment", "--all", "--replicas=2"])
        .await;
    let small = json!({"spec": {"template": {"spec": {"requirements": [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
    ]}}}});
    c.merge_patch("nodepool", "default", &small.to_string())
        .await;
    let cloud = Arc::clone(&c.cluster.cloud);
    c.cluster.start_controller(cloud);
    c.eventually(
        "Online Boutique running on initialized nodes",
        ROLLOUT,
        |c| {
            let claims = c.nodeclaims();
            claims.len() >= 2
                && claims
                    .iter()
                    .all(|x| condition(x, "Initialized").as_deref() == Some("True"))
                && running_per_app(c).values().all(|n| *n == 2)
                && running_per_app(c).len() == SERVICES.len()
        },
    )
    .await;
    c
}

/// Running pods that are not being deleted, by `app` label.
fn running_per_app(c: &TestCluster) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for p in c.objects("", "pods") {
        let app = p
            .pointer("/metadata/labels/app")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if !SERVICES.contains(&app.as_str()) {
            continue;
        }
        let running = p.pointer("/status/phase") == Some(&json!("Running"))
            && p.pointer("/metadata/deletionTimestamp").is_none();
        *out.entry(app).or_insert(0) += usize::from(running);
    }
    out
}

/// NodeClaims in a step: marked with a replacement (deleting or not).
fn in_step(c: &TestCluster) -> Vec<String> {
    c.nodeclaims()
        .iter()
        .filter(|x| annotation(x, "upgrades.karpenter.sh/replacement").is_some())
        .map(name)
        .collect()
}

/// The invariants checked while a rollout runs: every service keeps its PDB minimum (one
/// running pod), and at most one old NodeClaim is in a step.
fn check_invariants(c: &TestCluster, max_steps: usize) {
    for (app, n) in running_per_app(c) {
        assert!(n >= 1, "{app} fell below its PodDisruptionBudget minimum");
    }
    let steps = in_step(c);
    assert!(
        steps.len() <= max_steps,
        "more than {max_steps} step(s) at once: {steps:?}"
    );
    // Replacement first: an old node is only drained once its replacement is initialized.
    let claims = c.nodeclaims();
    for old in &claims {
        let replacement = annotation(old, "upgrades.karpenter.sh/replacement").unwrap_or_default();
        if old.pointer("/metadata/deletionTimestamp").is_none() || replacement.is_empty() {
            continue;
        }
        let ready = claims.iter().any(|x| {
            name(x) == replacement && condition(x, "Initialized").as_deref() == Some("True")
        });
        assert!(
            ready,
            "{} draining before {replacement} initialized",
            name(old)
        );
    }
}

/// The NodePool's upgrade steps: the `Drifted` records of `default` in the disruption history.
fn history(c: &TestCluster) -> Vec<Value> {
    c.disruption_history()
        .into_iter()
        .filter(|r| r["nodepool"] == "default" && r["reason"] == "Drifted")
        .collect()
}

/// Publish a new al2023 release; return the new image per architecture.
fn publish(c: &TestCluster) -> BTreeMap<String, String> {
    c.publish_ami("al2023", None)
        .into_iter()
        .map(|a| (a.arch, a.id))
        .collect()
}

fn arch(o: &Value) -> String {
    o.pointer("/metadata/labels/kubernetes.io~1arch")
        .and_then(Value::as_str)
        .unwrap_or("amd64")
        .to_string()
}

/// Every NodeClaim runs the new image of its architecture and none is drifted or in a step (nor
/// a replacement whose step is still to be recorded).
fn all_upgraded(c: &TestCluster, new: &BTreeMap<String, String>) -> bool {
    let claims = c.nodeclaims();
    !claims.is_empty()
        && claims.iter().all(|x| {
            new.get(&arch(x)) == Some(&image(x))
                && condition(x, "Initialized").as_deref() == Some("True")
                && condition(x, "Drifted").as_deref() != Some("True")
                && x.pointer("/metadata/deletionTimestamp").is_none()
        })
        && in_step(c).is_empty()
        && claims
            .iter()
            .all(|x| annotation(x, "upgrades.karpenter.sh/replaces").is_none())
        && running_per_app(c).values().all(|n| *n == 2)
}

/// `kubectl karpenter upgrade ARGS`: exit code and output.
async fn upgrade(c: &TestCluster, args: &[&str]) -> (i32, String) {
    let mut cmd = Command::new(workspace_binary("kubectl-karpenter"));
    cmd.arg("upgrade")
        .args(args)
        .arg("--kubeconfig")
        .arg(c.kubeconfig())
        .env("NO_COLOR", "1");
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("plugin runs"))
        .await
        .expect("plugin thread");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// NodeClaims replaced so far: old names no longer present.
fn gone(c: &TestCluster, before: &BTreeSet<String>) -> usize {
    let now: BTreeSet<String> = c.nodeclaims().iter().map(name).collect();
    before.difference(&now).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_ami_rolls_out_one_node_at_a_time_within_every_pdb() {
    let c = boutique(Settings::default()).await;
    let before: BTreeSet<String> = c.nodeclaims().iter().map(name).collect();
    assert!(before.len() >= 2, "several nodes: {before:?}");
    let new = publish(&c);
    let start = Instant::now();
    let mut steps_seen = BTreeSet::new();
    while !all_upgraded(&c, &new) {
        check_invariants(&c, 1);
        steps_seen.extend(in_step(&c));
        assert!(
            start.elapsed() < ROLLOUT,
            "rollout did not finish; claims: {:#?}",
            c.nodeclaims()
                .iter()
                .map(|x| (name(x), image(x), condition(x, "Drifted")))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(gone(&c, &before), before.len(), "every old node replaced");
    assert!(
        steps_seen.is_superset(&before.iter().cloned().collect()),
        "each old NodeClaim went through a step: {steps_seen:?}"
    );
    let steps = history(&c);
    for old in &before {
        let records: Vec<&Value> = steps
            .iter()
            .filter(|r| r["nodeclaim"] == json!(old))
            .collect();
        assert_eq!(records.len(), 1, "one record for {old}: {steps:#?}");
        assert_eq!(records[0]["outcome"], "Succeeded");
    }
    assert!(
        !c.events("default", "Upgrade").is_empty(),
        "Events on the NodePool"
    );
    // `upgrade status` reports each step with its start and duration (issue 20: steps with a
    // replacement showed `"started": ""` and 0 seconds, so the estimate said "about 0s").
    let (code, out) = upgrade(&c, &["status", "--nodepool", "default", "-o", "json"]).await;
    assert_eq!(code, 0, "{out}");
    let status: Value = serde_json::from_str(&out).expect("status JSON");
    let records = status[0]["history"].as_array().cloned().unwrap_or_default();
    assert!(!records.is_empty(), "steps in upgrade status: {out}");
    for r in &records {
        let started = r["started"].as_str().unwrap_or_default();
        assert!(
            started.parse::<jiff::Timestamp>().is_ok(),
            "a step's start is a time: {r}"
        );
        if r["replacement"].is_string() {
            assert!(
                r["seconds"].as_u64() > Some(0),
                "a replacement takes time: {r}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pause_stops_after_the_current_step_step_replaces_one_resume_finishes() {
    let c = boutique(Settings::default()).await;
    let before: BTreeSet<String> = c.nodeclaims().iter().map(name).collect();
    let new = publish(&c);
    c.eventually("a step in progress", ROLLOUT, |c| !in_step(c).is_empty())
        .await;
    let (code, out) = upgrade(&c, &["pause", "--nodepool", "default"]).await;
    assert_eq!(code, 0, "{out}");
    // The step in progress finishes; no other starts.
    c.eventually("the current step done", ROLLOUT, |c| in_step(c).is_empty())
        .await;
    let replaced = gone(&c, &before);
    let hold = Instant::now();
    while hold.elapsed() < Duration::from_secs(4) {
        check_invariants(&c, 0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(gone(&c, &before), replaced, "paused: nothing more replaced");
    let (code, out) = upgrade(&c, &["status", "--nodepool", "default"]).await;
    assert_eq!(code, 1, "drifted nodes wait: {out}");
    assert!(out.contains("Paused"), "{out}");

    if replaced < before.len() {
        let (code, out) = upgrade(&c, &["step", "--nodepool", "default"]).await;
        assert_eq!(code, 0, "{out}");
        c.eventually("exactly one more replaced", ROLLOUT, |c| {
            gone(c, &before) == replaced + 1 && in_step(c).is_empty()
        })
        .await;
        let hold = Instant::now();
        while hold.elapsed() < Duration::from_secs(3) {
            check_invariants(&c, 0);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(gone(&c, &before), replaced + 1, "one step, not more");
    }
    let (code, out) = upgrade(&c, &["resume", "--nodepool", "default"]).await;
    assert_eq!(code, 0, "{out}");
    let start = Instant::now();
    while !all_upgraded(&c, &new) {
        check_invariants(&c, 1);
        assert!(
            start.elapsed() < ROLLOUT,
            "resume did not finish the rollout"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replacement_that_never_initializes_is_rolled_back_and_the_rollout_stops() {
    let c = boutique(Settings {
        upgrade_initialization_timeout: Duration::from_secs(5),
        ..Settings::default()
    })
    .await;
    let before: BTreeSet<String> = c.nodeclaims().iter().map(name).collect();
    c.publish_broken_ami("al2023", None);
    let start = Instant::now();
    let paused = |c: &TestCluster| {
        c.objects("karpenter.sh", "nodepools")
            .into_iter()
            .find(|p| name(p) == "default")
            .and_then(|p| annotation(&p, "upgrades.karpenter.sh/paused-reason"))
    };
    while paused(&c).is_none() {
        check_invariants(&c, 1);
        assert!(start.elapsed() < ROLLOUT, "no rollback");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reason = paused(&c).unwrap_or_default();
    assert!(reason.contains("did not initialize"), "{reason}");
    c.eventually("the replacement deleted", ROLLOUT, |c| {
        let now: BTreeSet<String> = c.nodeclaims().iter().map(name).collect();
        now == before && in_step(c).is_empty()
    })
    .await;
    let (code, out) = upgrade(&c, &["status", "--nodepool", "default"]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("did not initialize"),
        "the reason is shown: {out}"
    );
    let steps = history(&c);
    assert_eq!(steps.len(), 1, "{steps:#?}");
    assert_eq!(steps[0]["outcome"], "RolledBack");
    assert!(
        c.nodeclaims()
            .iter()
            .all(|x| x.pointer("/metadata/deletionTimestamp").is_none()),
        "no old node was drained"
    );
    let hold = Instant::now();
    while hold.elapsed() < Duration::from_secs(3) {
        check_invariants(&c, 0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_controller_killed_mid_step_resumes_that_step_only() {
    let mut c = boutique(Settings::default()).await;
    let new = publish(&c);
    c.eventually("a step launching its replacement", ROLLOUT, |c| {
        !in_step(c).is_empty()
    })
    .await;
    c.cluster.stop_controller();
    let in_flight = in_step(&c);
    assert_eq!(in_flight.len(), 1, "{in_flight:?}");
    let cloud = Arc::clone(&c.cluster.cloud);
    c.cluster.start_controller(cloud);
    let start = Instant::now();
    let mut first_done = false;
    while !all_upgraded(&c, &new) {
        check_invariants(&c, 1);
        let steps = in_step(&c);
        if !first_done && !steps.is_empty() && steps != in_flight {
            // The interrupted step must have finished before another began.
            assert!(
                !c.nodeclaims().iter().any(|x| name(x) == in_flight[0]),
                "a second step started while {} was still in its step",
                in_flight[0]
            );
            first_done = true;
        }
        assert!(
            start.elapsed() < ROLLOUT,
            "rollout did not finish after restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let steps = history(&c);
    assert!(
        steps
            .iter()
            .any(|r| r["nodeclaim"] == json!(in_flight[0]) && r["outcome"] == "Succeeded"),
        "the interrupted step was finished and recorded: {steps:#?}"
    );
}

/// A drifted node whose pod needs a zone gets its replacement in that zone: the replacement is
/// computed by the solver from the node's pods, not sized from the old NodeClaim's requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drift_replacement_keeps_the_zone_its_pods_need() {
    let zonal = tests::deployment("zonal", 1, "500m", "256Mi").replace(
        "    spec:\n      containers:\n",
        "    spec:\n      nodeSelector: {topology.kubernetes.io/zone: us-east-1b}\n      containers:\n",
    );
    let c = TestCluster::start(&zonal, Options::default()).await;
    c.eventually("the zonal pod runs", ROLLOUT, |c| {
        c.nodeclaims().len() == 1
            && condition(&c.nodeclaims()[0], "Initialized").as_deref() == Some("True")
    })
    .await;
    let old = name(&c.nodeclaims()[0]);
    c.publish_ami("al2023", None);
    c.eventually("the drifted node replaced", ROLLOUT, |c| {
        let claims = c.nodeclaims();
        !claims.iter().any(|x| name(x) == old)
            && claims.len() == 1
            && condition(&claims[0], "Initialized").as_deref() == Some("True")
    })
    .await;
    let replacement = &c.nodeclaims()[0];
    let zones: Vec<&str> = replacement["spec"]["requirements"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["key"] == "topology.kubernetes.io/zone")
        .flat_map(|r| r["values"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        zones,
        ["us-east-1b"],
        "the replacement asks for the pod's zone"
    );
    assert_eq!(
        replacement["metadata"]["labels"]["topology.kubernetes.io/zone"],
        "us-east-1b"
    );
    assert_eq!(
        c.sim().launches(),
        2,
        "one replacement, and no extra node for a pod stranded in another zone"
    );
}
