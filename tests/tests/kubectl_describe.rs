//! `kubectl describe` works for every kind the sandbox serves, against Online Boutique: kubectl's
//! printers dereference what kube-apiserver's defaulting always sets (a gRPC probe's `service`,
//! a Deployment's replicas and rolling-update percentages, a PriorityClass's preemption policy),
//! so a sandbox that stored objects as written made `kubectl describe pod` panic for most of the
//! Boutique's services. The kinds come from discovery (`kubectl api-resources`), the objects from
//! the running Boutique plus one user-written object of each kind it lacks.

use std::collections::BTreeSet;
use std::time::Duration;

use karpenter::workload::ONLINE_BOUTIQUE;
use serde_json::Value;
use tests::{Options, TestCluster};

/// One object of each built-in kind Online Boutique does not bring.
const EVERY_KIND: &str = include_str!("../fixtures/every-kind.yaml");

/// Launches, registrations and scheduling of the Boutique.
const SETTLE: Duration = Duration::from_secs(90);

/// What kubectl prints when one of its printers dereferences nil.
const PANICS: &[&str] = &[
    "panic:",
    "invalid memory address",
    "nil pointer dereference",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_describe_works_for_every_kind_the_sandbox_serves() {
    let c = TestCluster::start(ONLINE_BOUTIQUE, Options::default()).await;
    c.wait_for("Online Boutique bound to registered nodes", SETTLE, |o| {
        o.pods_total > 0 && o.pods_bound == o.pods_total && o.claims_registered > 0
    })
    .await;
    let created = c.kubectl(&["create", "-f", "-"], Some(EVERY_KIND)).await;
    assert!(
        created.status.success(),
        "the user-written objects are accepted: {}",
        String::from_utf8_lossy(&created.stderr)
    );

    let resources = c
        .kubectl_ok(&["api-resources", "--verbs=get", "-o", "name"])
        .await;
    let resources: BTreeSet<&str> = resources.lines().map(str::trim).collect();
    for expected in [
        "pods",
        "deployments.apps",
        "nodeclaims.karpenter.sh",
        "leases.coordination.k8s.io",
    ] {
        assert!(
            resources.contains(expected),
            "{expected} is served: {resources:?}"
        );
    }

    let mut failures = Vec::new();
    for resource in &resources {
        let listed = c.kubectl_ok(&["get", resource, "-A", "-o", "json"]).await;
        let listed: Value = serde_json::from_str(&listed).expect("a list as JSON");
        let names: Vec<String> = listed["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| o.pointer("/metadata/name").and_then(Value::as_str))
            .map(String::from)
            .collect();
        if names.is_empty() {
            failures.push(format!("{resource}: no object to describe"));
            continue;
        }
        // Every object of the kind, in one invocation: a panic on any of them fails it.
        let out = c.kubectl(&["describe", resource, "-A"], None).await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success()
            || PANICS
                .iter()
                .any(|p| stderr.contains(p) || stdout.contains(p))
        {
            let head: String = stderr.lines().take(12).collect::<Vec<_>>().join("\n");
            failures.push(format!("{resource}: exit {:?}\n{head}", out.status.code()));
            continue;
        }
        for name in &names {
            let shown = stdout
                .lines()
                .any(|l| l.starts_with("Name:") && l.split_whitespace().nth(1) == Some(name));
            if !shown {
                failures.push(format!("{resource}: {name} is not described"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "kubectl describe failed for {} of {} kinds:\n{}",
        failures.len(),
        resources.len(),
        failures.join("\n")
    );
}

/// The probe lines kubectl prints from the defaulted gRPC and HTTP probes of Online Boutique.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn described_boutique_probes_show_the_defaults() {
    let c = TestCluster::start(
        ONLINE_BOUTIQUE,
        Options {
            controller: false,
            ..Options::default()
        },
    )
    .await;
    let deployment = c.kubectl_ok(&["describe", "deployment", "adservice"]).await;
    for needle in [
        "1 desired | ",
        "25% max unavailable, 25% max surge",
        "grpc <pod>:9555  delay=20s timeout=1s period=15s #success=1 #failure=3",
    ] {
        assert!(
            deployment.contains(needle),
            "missing {needle:?}:\n{deployment}"
        );
    }
    let frontend = c.kubectl_ok(&["describe", "deployment", "frontend"]).await;
    assert!(
        frontend.contains(
            "http-get http://:8080/_healthz delay=10s timeout=1s period=10s #success=1 #failure=3"
        ),
        "{frontend}"
    );
}
