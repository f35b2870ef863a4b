//! `kubectl karpenter orphans` against a bare API server (no simulated cloud): NodeClaim orphans
//! are listed, the cloud is reported as not checked, and `orphans delete` previews, refuses
//! without a terminal, and leaves Karpenter's finalizers alone without a cloud view. The full
//! scenario with the simulated cloud is in the workspace's `tests/tests/orphans.rs`.

use crate::support;

use serde_json::Value;
use support::{Cluster, stderr, stdout};

/// Thresholds that make every staged NodeClaim old enough.
const NOW: [&str; 6] = [
    "--launch-timeout",
    "0s",
    "--registration-ttl",
    "0s",
    "--stuck-after",
    "0s",
];

async fn orphans(cluster: &Cluster, extra: &[&str]) -> std::process::Output {
    let kc = cluster.kubeconfig();
    let mut args = vec!["orphans", "--kubeconfig", kc.to_str().expect("utf-8 path")];
    args.extend(NOW);
    args.extend(extra);
    cluster.plugin(&args).await
}

fn rows(table: &str) -> Vec<(String, String)> {
    table
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| {
            let mut cells = l.split_whitespace();
            Some((cells.next()?.to_owned(), cells.next()?.to_owned()))
        })
        .collect()
}

fn claim(cluster: &Cluster, name: &str) -> Option<Value> {
    cluster
        .sandbox
        .store()
        .get(&cluster.nodeclaim_type(), "", name)
        .ok()
        .map(|v| (*v).clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodeclaim_orphans_without_a_cloud() {
    let cluster = Cluster::start(true).await;
    cluster.populate();

    let listed = orphans(&cluster, &["--no-cloud"]).await;
    assert_eq!(listed.status.code(), Some(1), "stderr: {}", stderr(&listed));
    assert_eq!(stderr(&listed), "");
    let table = stdout(&listed);
    assert_eq!(
        rows(&table),
        [
            ("NotLaunched".into(), "default-launching".into()),
            ("NotRegistered".into(), "default-registering".into()),
            ("StuckTerminating".into(), "gpu-terminating".into()),
        ],
        "\n{table}"
    );
    assert!(
        table.trim_end().ends_with("cloud not checked (--no-cloud)"),
        "\n{table}"
    );

    // Default thresholds: the staged NodeClaims are too young, except the one launched long ago.
    let kc = cluster.kubeconfig();
    let kc = kc.to_str().expect("utf-8 path");
    let defaults = cluster
        .plugin(&[
            "orphans",
            "list",
            "--kubeconfig",
            kc,
            "--no-cloud",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(defaults.status.code(), Some(1), "{}", stderr(&defaults));
    assert_eq!(
        stdout(&defaults),
        "nodeclaim.karpenter.sh/default-registering\n"
    );

    let json = orphans(&cluster, &["--no-cloud", "-o", "json"]).await;
    let doc: Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(doc["kind"], "OrphanList");
    assert_eq!(doc["cloud"]["checked"], false);
    assert_eq!(
        doc["items"][2]["detail"][1],
        "waiting on: instance not checked, finalizers karpenter.sh/termination",
        "{doc:#}"
    );
    assert_eq!(doc["items"][2]["instance"]["state"], "unchecked");

    // No terminal and no --yes: refuse, change nothing.
    let kc_args = ["--kubeconfig", kc];
    let mut args = vec!["orphans", "delete", "--all"];
    args.extend(kc_args);
    args.extend(NOW);
    args.push("--no-cloud");
    let refused = cluster.plugin(&args).await;
    assert_eq!(refused.status.code(), Some(2), "{}", stdout(&refused));
    assert!(
        stderr(&refused).contains("error: refusing to change the cluster without confirmation: not running on a terminal; pass --yes"),
        "{}",
        stderr(&refused)
    );
    assert!(stdout(&refused).contains("StuckTerminating nodeclaim.karpenter.sh/gpu-terminating:"));
    assert!(
        claim(&cluster, "default-launching")
            .is_some_and(|c| c.pointer("/metadata/deletionTimestamp").is_none())
    );

    // Without a cloud view, deleting leaves Karpenter's finalizer for the controller.
    let mut args = vec!["orphans", "delete", "default-launching", "--yes"];
    args.extend(kc_args);
    args.extend(NOW);
    args.push("--no-cloud");
    let deleted = cluster.plugin(&args).await;
    assert_eq!(deleted.status.code(), Some(0), "{}", stderr(&deleted));
    let out = stdout(&deleted);
    assert!(
        out.contains("  - delete nodeclaim default-launching\n"),
        "{out}"
    );
    assert!(
        out.contains("  note: finalizers are left for the controller"),
        "{out}"
    );
    assert!(
        out.ends_with("nodeclaim.karpenter.sh/default-launching deleted\n"),
        "{out}"
    );
    let after = claim(&cluster, "default-launching").expect("kept by its finalizer");
    assert!(after.pointer("/metadata/deletionTimestamp").is_some());
    assert_eq!(
        after["metadata"]["finalizers"][0],
        "karpenter.sh/termination"
    );

    let unknown = cluster
        .plugin(&[
            "orphans",
            "delete",
            "nope",
            "--yes",
            "--no-cloud",
            "--kubeconfig",
            kc,
        ])
        .await;
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown).starts_with("error: not an orphan: nope;"),
        "{}",
        stderr(&unknown)
    );
}

/// Without the `aws` feature, a cluster that is not a sandbox gets one warning line.
#[cfg(not(feature = "aws"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_warning_when_the_cloud_cannot_be_checked() {
    let cluster = Cluster::start(true).await;
    let out = orphans(&cluster, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(
        err.starts_with(
            "warning: cloud instances were not checked: the server is not a sandbox, and this \
             kubectl-karpenter was built without EC2 support;"
        ),
        "{err}"
    );
    assert!(err.ends_with("\nNo orphans found\n"), "{err}");
}
