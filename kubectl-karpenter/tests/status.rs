//! End-to-end tests of `kubectl karpenter status` against the in-process sandbox API server:
//! the built binary run directly and as a real kubectl plugin (kubectl must be on PATH), the
//! kubeconfig rules (`--kubeconfig`, `--context`, `KUBECONFIG` merging) and exit codes.

mod support;

use serde_json::Value;
use tokio::process::Command;

use support::{
    BIN, Cluster, cells, expected_table, expected_totals, kubectl, plugin_path, row, stderr,
    stdout, two_contexts,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_directly_and_as_a_kubectl_plugin() {
    let cluster = Cluster::start(true).await;
    cluster.populate();
    let kubeconfig = cluster.kubeconfig();
    let kubeconfig = kubeconfig.to_str().expect("utf-8 path");

    let direct = cluster
        .plugin(&["status", "--kubeconfig", kubeconfig])
        .await;
    assert!(direct.status.success(), "stderr: {}", stderr(&direct));
    let table = stdout(&direct);
    assert_eq!(cells(&table), expected_table(), "\n{table}");
    assert_eq!(
        table.lines().last(),
        Some(expected_totals().as_str()),
        "\n{table}"
    );
    assert!(
        table.starts_with("NAME                  NODEPOOL   INSTANCE-TYPE   "),
        "\n{table}"
    );

    let kubectl = kubectl();
    let via_kubectl = cluster
        .run(
            &kubectl,
            &["karpenter", "status", "--kubeconfig", kubeconfig],
            Some(plugin_path()),
        )
        .await;
    assert!(
        via_kubectl.status.success(),
        "stderr: {}",
        stderr(&via_kubectl)
    );
    let plugin_table = stdout(&via_kubectl);
    assert_eq!(cells(&plugin_table), expected_table(), "\n{plugin_table}");
    assert_eq!(plugin_table.lines().last(), table.lines().last());

    let help = cluster
        .run(
            &kubectl,
            &["karpenter", "status", "--help"],
            Some(plugin_path()),
        )
        .await;
    assert!(help.status.success(), "stderr: {}", stderr(&help));
    assert!(
        stdout(&help).contains("Usage: kubectl karpenter status [OPTIONS]"),
        "{}",
        stdout(&help)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wide_json_and_nodepool_filter() {
    let cluster = Cluster::start(true).await;
    cluster.populate();
    let kc = cluster.kubeconfig();
    let kc = kc.to_str().expect("utf-8 path");

    let wide = cluster
        .plugin(&[
            "status",
            "--kubeconfig",
            kc,
            "-o",
            "wide",
            "--nodepool",
            "gpu",
        ])
        .await;
    assert!(wide.status.success(), "stderr: {}", stderr(&wide));
    let text = stdout(&wide);
    let rows = cells(&text);
    assert_eq!(rows.len(), 3, "\n{text}");
    assert_eq!(
        rows[0][8..],
        row(&["PRICE/HOUR", "NODECLASS", "PROVIDER-ID"])[..]
    );
    assert_eq!(rows[1][0], "gpu-initializing");
    assert_eq!(rows[1][10], "aws:///us-east-1a/i-gpu-initializing");
    assert!(rows[1][8].starts_with('$'), "\n{text}");
    assert!(
        text.lines()
            .last()
            .unwrap_or_default()
            .starts_with("2 nodeclaims: 0 ready, 1 in flight"),
        "\n{text}"
    );

    let json_out = cluster
        .plugin(&["status", "--kubeconfig", kc, "-o", "json"])
        .await;
    assert!(json_out.status.success(), "stderr: {}", stderr(&json_out));
    let list: Value = serde_json::from_slice(&json_out.stdout).expect("valid JSON");
    assert_eq!(list["kind"], "List");
    assert_eq!(list["apiVersion"], "v1");
    let names: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "default-launching",
            "default-ready",
            "default-registering",
            "gpu-initializing",
            "gpu-terminating"
        ]
    );
    assert_eq!(list["items"][0]["kind"], "NodeClaim");

    let none = cluster
        .plugin(&["status", "--kubeconfig", kc, "--nodepool", "absent"])
        .await;
    assert!(none.status.success(), "stderr: {}", stderr(&none));
    assert_eq!(stdout(&none), "");
    assert_eq!(stderr(&none), "No resources found\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_flag_and_errors() {
    let cluster = Cluster::start(true).await;
    cluster.populate();
    let path = two_contexts(&cluster, "dead");
    let kc = path.to_str().expect("utf-8 path");

    let dead = cluster.plugin(&["status", "--kubeconfig", kc]).await;
    assert_eq!(dead.status.code(), Some(2), "stdout: {}", stdout(&dead));
    let err = stderr(&dead);
    assert!(
        err.starts_with("error: listing NodeClaims from http://127.0.0.1:"),
        "{err}"
    );
    assert!(err.contains("(context \"dead\")"), "{err}");

    let live = cluster
        .plugin(&["status", "--kubeconfig", kc, "--context", "live"])
        .await;
    assert!(live.status.success(), "stderr: {}", stderr(&live));
    assert_eq!(cells(&stdout(&live)), expected_table());

    let missing = cluster
        .plugin(&["status", "--kubeconfig", kc, "--context", "prod"])
        .await;
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(
        stderr(&missing),
        format!(
            "error: context \"prod\" not found in --kubeconfig {kc}; available contexts: live, dead; \
             pass one of them with --context\n"
        )
    );
    assert_eq!(stdout(&missing), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_env_merges_and_first_current_context_wins() {
    let cluster = Cluster::start(true).await;
    cluster.populate();
    let live_first = two_contexts(&cluster, "live");
    let dead_first = two_contexts(&cluster, "dead");
    let missing = cluster.dir.path().join("does-not-exist");
    let list = std::env::join_paths([&missing, &live_first, &dead_first]).expect("join");
    let out = Command::new(BIN)
        .args(["status", "-o", "name"])
        .env("HOME", cluster.dir.path())
        .env("KUBECONFIG", &list)
        .output()
        .await
        .expect("run");
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 5, "{}", stdout(&out));

    // No flag, no KUBECONFIG, and a HOME without .kube/config: say where to look.
    let none = cluster.plugin(&["status"]).await;
    assert_eq!(none.status.code(), Some(2));
    assert!(
        stderr(&none).contains("no kubeconfig found"),
        "{}",
        stderr(&none)
    );
    assert!(
        stderr(&none).contains("pass --kubeconfig PATH"),
        "{}",
        stderr(&none)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_crds_and_usage_errors_exit_2() {
    let cluster = Cluster::start(false).await;
    let kc = cluster.kubeconfig();
    let kc = kc.to_str().expect("utf-8 path");
    let out = cluster.plugin(&["status", "--kubeconfig", kc]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("does not serve nodeclaims.karpenter.sh/v1"),
        "{}",
        stderr(&out)
    );

    let bad = cluster.plugin(&["status", "-o", "xml"]).await;
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("invalid value 'xml' for '--output"),
        "{}",
        stderr(&bad)
    );
    let unknown = cluster.plugin(&["bogus"]).await;
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown).contains("Usage: kubectl karpenter [OPTIONS] <COMMAND>"),
        "{}",
        stderr(&unknown)
    );

    let version = cluster.plugin(&["version"]).await;
    assert!(version.status.success());
    assert_eq!(
        stdout(&version),
        format!("kubectl-karpenter {}\n", env!("CARGO_PKG_VERSION"))
    );
}
