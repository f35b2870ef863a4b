//! End-to-end tests of `kubectl karpenter status` against the in-process sandbox API server:
//! the built binary run directly and as a real kubectl plugin (kubectl must be on PATH), the
//! NodePool section, the kubeconfig rules (`--kubeconfig`, `--context`, `KUBECONFIG` merging),
//! exit codes, and, with the controller and simulated cloud running, a scale-up seen in flight
//! and `--watch -o json` streaming one JSON document per line on a pipe.

use crate::support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use controller::cloudprovider::build::CloudOptions;
use controller::runtime::Settings;
use karpenter::sandbox::{ClusterConfig, start_cluster, with_defaults};
use karpenter::workload::parse_yaml;
use karpenter_core::capacity::catalog::{Catalog, spot_price};
use sandbox::store::{DeleteOptions, Subresource};
use serde_json::{Value, json};
use testutil::nodepool;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use support::{
    BIN, Cluster, assert_fails_with, kubectl, plugin_path, row, stderr, stdout, two_contexts,
};

/// The lines of the section whose header starts with `first_header`, up to the next blank
/// line, split into cells on runs of two or more spaces (columns are padded by at least three,
/// and a cell such as `1.1/1.93 (56%)` holds single spaces), with the `age_column` (when given)
/// masked as `*`.
fn section(text: &str, first_header: &str, age_column: Option<usize>) -> Vec<Vec<String>> {
    text.lines()
        .skip_while(|l| !l.starts_with(&format!("{first_header} ")))
        .take_while(|l| !l.is_empty())
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .enumerate()
                .map(|(i, c)| {
                    if Some(i) == age_column {
                        "*".to_owned()
                    } else {
                        c.to_owned()
                    }
                })
                .collect()
        })
        .collect()
}

/// The NodeClaims table, AGE (7th column) masked.
fn claims(text: &str) -> Vec<Vec<String>> {
    section(text, "NAME", Some(6))
}

/// The NodePool section.
fn pools(text: &str) -> Vec<Vec<String>> {
    section(text, "NODEPOOL", None)
}

fn price(p: f64) -> String {
    format!("${p:.4}")
}

fn catalog_price(instance_type: &str, capacity_type: &str, zone: &str) -> f64 {
    let catalog = Catalog::embedded().expect("catalog");
    let od = catalog
        .get(instance_type)
        .expect("type in catalog")
        .on_demand_price;
    match capacity_type {
        "spot" => spot_price(od, instance_type, zone),
        _ => od,
    }
}

/// The NodeClaims table [`Cluster::populate`] and [`add_nodes_and_pods`] should produce, AGE
/// masked, in table order.
fn expected_claims() -> Vec<Vec<String>> {
    vec![
        row(&[
            "NAME",
            "STATE",
            "INSTANCE-TYPE",
            "PODS",
            "REQ-CPU",
            "REQ-MEMORY",
            "*",
        ]),
        row(&[
            "default-launching",
            "Launching",
            "<none>",
            "0",
            "<none>",
            "<none>",
            "*",
        ]),
        // Two web pods (500m, 1Gi each) and the DaemonSet's (100m, 128Mi); the finished and
        // the pending pod do not count.
        row(&[
            "default-ready",
            "Ready",
            "m5.large",
            "3",
            "1.1/1.93 (56%)",
            "2.1/7.1Gi (29%)",
            "*",
        ]),
        // No Node yet: the NodeClaim's own allocatable.
        row(&[
            "default-registering",
            "Registering",
            "c5.xlarge",
            "0",
            "0/3.92 (0%)",
            "0/6.7Gi (0%)",
            "*",
        ]),
        row(&[
            "gpu-initializing",
            "Initializing",
            "g5.xlarge",
            "0",
            "0/3.92 (0%)",
            "0/14.5Gi (0%)",
            "*",
        ]),
        row(&[
            "gpu-terminating",
            "Terminating",
            "m5.large",
            "1",
            "0.1/1.93 (5%)",
            "128Mi/7.1Gi (1%)",
            "*",
        ]),
    ]
}

/// The totals line for [`Cluster::populate`], priced from the embedded catalog.
fn expected_totals() -> String {
    let total = catalog_price("m5.large", "on-demand", "us-east-1a")
        + catalog_price("c5.xlarge", "spot", "us-east-1b")
        + catalog_price("g5.xlarge", "on-demand", "us-east-1c")
        + catalog_price("m5.large", "spot", "us-east-1a");
    format!(
        "5 nodeclaims: 1 ready, 0 drifted, 3 in flight (1 launching, 1 registering, \
         1 initializing), 1 terminating; ${total:.4}/hour (1 without a known price)"
    )
}

/// Creates the `default` NodePool with a cpu limit of 100, 2 cpus and 8Gi in use, and its
/// rollout paused.
fn create_default_pool(cluster: &Cluster) {
    let store = cluster.sandbox.store();
    let rt = store
        .resource("karpenter.sh", "v1", "nodepools")
        .expect("NodePools are served");
    let pool = nodepool("default")
        .annotation("upgrades.karpenter.sh/paused", "true")
        .limit("cpu", "100")
        .json();
    store.create(&rt, "", pool).expect("create NodePool");
    store
        .modify(&rt, "", "default", Subresource::Status, |obj| {
            obj["status"] = json!({"resources": {"cpu": "2", "memory": "8Gi", "nodes": "1"}});
            Ok(())
        })
        .expect("set NodePool status");
}

/// The sandbox's resource type for `plural` of the core API group (`pods`, `nodes`).
fn core_type(cluster: &Cluster, plural: &str) -> sandbox::registry::ResourceType {
    cluster
        .sandbox
        .store()
        .resource("", "v1", plural)
        .expect("core type is served")
}

/// Creates pod `pod` in its namespace with `status.phase` set to `phase`.
fn create_pod(cluster: &Cluster, pod: testutil::PodBuilder, phase: &str) {
    let store = cluster.sandbox.store();
    let rt = core_type(cluster, "pods");
    let value = pod.json();
    let namespace = value["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_owned();
    let name = value["metadata"]["name"]
        .as_str()
        .expect("pod name")
        .to_owned();
    store.create(&rt, &namespace, value).expect("create pod");
    store
        .modify(&rt, &namespace, &name, Subresource::Status, |obj| {
            obj["status"] = json!({"phase": phase});
            Ok(())
        })
        .expect("set pod phase");
}

/// What a real cluster has around the NodeClaims of [`Cluster::populate`]: the Nodes of the
/// ready and terminating NodeClaims (m5.large: 1930m, 7291Mi allocatable) and of the
/// initializing one (g5.xlarge: 3920m, 14879Mi); the registering NodeClaim's own allocatable
/// (c5.xlarge: 3920m, 6903Mi; no Node yet); pods: two web pods and a DaemonSet's on the ready
/// node, the DaemonSet's on the terminating node, plus a finished pod on the ready node and a
/// pending one, which do not count.
fn add_nodes_and_pods(cluster: &Cluster) {
    let store = cluster.sandbox.store();
    let nodes = core_type(cluster, "nodes");
    for (name, pool, cpu, memory) in [
        ("ip-10-0-1-1.ec2.internal", "default", "1930m", "7291Mi"),
        ("ip-10-0-3-3.ec2.internal", "gpu", "3920m", "14879Mi"),
        ("ip-10-0-1-9.ec2.internal", "gpu", "1930m", "7291Mi"),
    ] {
        let node = testutil::node(name).label("karpenter.sh/nodepool", pool);
        store.create(&nodes, "", node.json()).expect("create Node");
        // The kubelet reports the allocatable through the status subresource.
        store
            .modify(&nodes, "", name, Subresource::Status, |obj| {
                obj["status"] =
                    json!({"allocatable": {"cpu": cpu, "memory": memory, "pods": "29"}});
                Ok(())
            })
            .expect("set Node allocatable");
    }
    store
        .modify(
            &cluster.nodeclaim_type(),
            "",
            "default-registering",
            Subresource::Status,
            |obj| {
                obj["status"]["allocatable"] = json!({"cpu": "3920m", "memory": "6903Mi"});
                Ok(())
            },
        )
        .expect("set NodeClaim allocatable");
    let ready = "ip-10-0-1-1.ec2.internal";
    for name in ["web-1", "web-2"] {
        let web = testutil::pod(name)
            .cpu("500m")
            .memory("1Gi")
            .owner("apps/v1", "ReplicaSet", "web-5d8f", "uid-web")
            .on_node(ready);
        create_pod(cluster, web, "Running");
    }
    for node in [ready, "ip-10-0-1-9.ec2.internal"] {
        let agent = testutil::pod(format!("agent-{node}"))
            .namespace("kube-system")
            .cpu("100m")
            .memory("128Mi")
            .owner("apps/v1", "DaemonSet", "agent", "uid-agent")
            .on_node(node);
        create_pod(cluster, agent, "Running");
    }
    create_pod(
        cluster,
        testutil::pod("job-done").cpu("1").on_node(ready),
        "Succeeded",
    );
    create_pod(cluster, testutil::pod("pending").cpu("4"), "Pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_directly_and_as_a_kubectl_plugin() {
    let cluster = Cluster::start(true).await;
    cluster.populate();
    add_nodes_and_pods(&cluster);
    create_default_pool(&cluster);
    let kubeconfig = cluster.kubeconfig();
    let kubeconfig = kubeconfig.to_str().expect("utf-8 path");

    let direct = cluster
        .plugin(&["status", "--kubeconfig", kubeconfig])
        .await;
    assert!(direct.status.success(), "stderr: {}", stderr(&direct));
    let table = stdout(&direct);
    assert_eq!(
        pools(&table),
        [
            row(&[
                "NODEPOOL",
                "CAP/LIMIT-CPU",
                "CAP/LIMIT-MEMORY",
                "READY",
                "IN-FLIGHT",
                "DRIFTED",
                "UNHEALTHY",
                "TERMINATING",
                "UPGRADE"
            ]),
            row(&[
                "default", "2/100", "8Gi/-", "1", "2", "0", "0", "0", "Paused"
            ]),
        ],
        "\n{table}"
    );
    assert_eq!(claims(&table), expected_claims(), "\n{table}");
    assert_eq!(
        table.lines().last(),
        Some(expected_totals().as_str()),
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
    assert_eq!(claims(&plugin_table), expected_claims(), "\n{plugin_table}");
    assert_eq!(pools(&plugin_table), pools(&table));
    assert_eq!(plugin_table.lines().last(), table.lines().last());

    let help = cluster
        .run(
            &kubectl,
            &["karpenter", "status", "--help"],
            Some(plugin_path()),
        )
        .await;
    assert!(help.status.success(), "stderr: {}", stderr(&help));
    let help = stdout(&help);
    assert!(
        help.contains("Usage: kubectl karpenter status [OPTIONS]"),
        "{help}"
    );
    assert!(help.contains("--sort-by <KEY>"), "{help}");
    assert!(
        help.contains("DaemonSet and static pods included"),
        "{help}"
    );

    // The web pods go: the ready node runs only the DaemonSet's pod, and shows as empty.
    let pods = core_type(&cluster, "pods");
    for name in ["web-1", "web-2"] {
        cluster
            .sandbox
            .store()
            .delete(&pods, "default", name, &DeleteOptions::default())
            .expect("delete pod");
    }
    let after = cluster
        .plugin(&["status", "--kubeconfig", kubeconfig])
        .await;
    assert!(after.status.success(), "stderr: {}", stderr(&after));
    let table = stdout(&after);
    let ready = claims(&table)
        .into_iter()
        .find(|r| r[0] == "default-ready")
        .expect("the ready NodeClaim's row");
    assert_eq!(
        ready[3..6],
        row(&["1 (empty)", "0.1/1.93 (5%)", "128Mi/7.1Gi (1%)"])[..],
        "\n{table}"
    );
}

/// `kubectl karpenter status | head`: a reader that goes away early ends the command quietly
/// with exit 0, as kubectl does, in every output format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pipe_ends_quietly() {
    let cluster = Cluster::start(true).await;
    cluster.populate();
    add_nodes_and_pods(&cluster);
    create_default_pool(&cluster);
    let kubeconfig = cluster.kubeconfig();
    let kubeconfig = kubeconfig.to_str().expect("utf-8 path");
    for output in ["table", "wide", "json", "yaml"] {
        let mut child = Command::new(support::BIN)
            .args(["status", "--kubeconfig", kubeconfig, "-o", output])
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the plugin");
        // The reader closes before the plugin has listed anything, so every write fails.
        drop(child.stdout.take());
        let out = child.wait_with_output().await.expect("wait");
        assert_eq!(out.status.code(), Some(0), "-o {output}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "-o {output}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wide_json_sort_nodepool_and_label_filters() {
    let cluster = Cluster::start(true).await;
    cluster.populate();
    add_nodes_and_pods(&cluster);
    create_default_pool(&cluster);
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
    // No NodePool named gpu exists: no NodePool section, only its NodeClaims.
    assert!(pools(&text).is_empty(), "\n{text}");
    let rows = claims(&text);
    assert_eq!(rows.len(), 3, "\n{text}");
    assert_eq!(
        rows[0][7..],
        row(&[
            "NODEPOOL",
            "CAPACITY-TYPE",
            "ZONE",
            "NODE",
            "PRICE/HOUR",
            "NODECLASS",
            "PROVIDER-ID",
            "LIMITED-BY",
            "DISRUPTION-REASON",
            "DRAIN-BY"
        ])[..]
    );
    assert_eq!(rows[1][0], "gpu-initializing");
    assert_eq!(
        rows[1][7..11],
        row(&["gpu", "on-demand", "us-east-1c", "ip-10-0-3-3.ec2.internal"])[..]
    );
    assert_eq!(
        rows[1][11],
        price(catalog_price("g5.xlarge", "on-demand", "us-east-1c")),
        "\n{text}"
    );
    assert_eq!(rows[1][13], "aws:///us-east-1a/i-gpu-initializing");
    // --nodepool lists only that NodePool's Nodes; the terminating NodeClaim's is one.
    assert_eq!(rows[2][0], "gpu-terminating");
    assert_eq!(
        rows[2][3..6],
        row(&["1", "0.1/1.93 (5%)", "128Mi/7.1Gi (1%)"])[..]
    );
    // No EC2NodeClass in this cluster: what limits the node, unexplained.
    assert_eq!(rows[2][14], "cpu 5%", "\n{text}");
    assert_eq!(rows[1][14], "pods 0/29", "\n{text}");
    assert!(
        text.lines()
            .last()
            .unwrap_or_default()
            .starts_with("2 nodeclaims: 0 ready, 0 drifted, 1 in flight"),
        "\n{text}"
    );

    let json_out = cluster
        .plugin(&[
            "status",
            "--kubeconfig",
            kc,
            "-o",
            "json",
            "--sort-by",
            "state",
        ])
        .await;
    assert!(json_out.status.success(), "stderr: {}", stderr(&json_out));
    let doc: Value = serde_json::from_slice(&json_out.stdout).expect("valid JSON");
    let keys: Vec<&String> = doc.as_object().expect("an object").keys().collect();
    assert_eq!(
        keys,
        ["fleet", "nodeClaims", "nodePools", "otherNodes", "totals"]
    );
    let names: Vec<(&str, &str)> = doc["nodeClaims"]
        .as_array()
        .expect("nodeClaims")
        .iter()
        .filter_map(|c| Some((c["name"].as_str()?, c["state"].as_str()?)))
        .collect();
    assert_eq!(
        names,
        [
            ("default-launching", "Launching"),
            ("default-registering", "Registering"),
            ("gpu-initializing", "Initializing"),
            ("default-ready", "Ready"),
            ("gpu-terminating", "Terminating"),
        ]
    );
    // Per node: pod counts, requests and allocatable in millicores and bytes.
    let ready = doc["nodeClaims"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "default-ready"))
        .expect("default-ready in the document");
    assert_eq!(ready["pods"], 3);
    assert_eq!(ready["reschedulablePods"], 2);
    assert_eq!(
        ready["requests"],
        json!({"cpu": 1100, "memory": (2u64 << 30) + (128u64 << 20)})
    );
    assert_eq!(
        ready["allocatable"],
        json!({"cpu": 1930, "memory": 7291u64 << 20, "pods": 29})
    );
    assert_eq!(
        ready["limitedBy"],
        json!({"resource": "cpu", "used": 1100, "allocatable": 1930, "percent": 56,
            "explanation": null})
    );
    let launching = &doc["nodeClaims"][0];
    assert_eq!(launching["name"], "default-launching");
    assert_eq!(launching["pods"], 0);
    assert_eq!(launching["allocatable"], Value::Null);
    assert_eq!(launching["limitedBy"], Value::Null);
    let pool = &doc["nodePools"][0];
    assert_eq!(pool["name"], "default");
    assert_eq!(pool["limits"], json!({"cpu": "100"}));
    assert_eq!(pool["nodeClaims"]["inFlight"], 2);
    assert_eq!(pool["upgrade"]["state"], "paused");
    assert_eq!(doc["totals"]["nodeClaims"], 5);
    assert_eq!(doc["totals"]["unpriced"], 1);

    let none = cluster
        .plugin(&["status", "--kubeconfig", kc, "--nodepool", "absent"])
        .await;
    assert_eq!(none.status.code(), Some(2), "stdout: {}", stdout(&none));
    assert_eq!(stdout(&none), "");
    assert_eq!(
        stderr(&none),
        "error: no NodePool named \"absent\" (context \"karpenter-sandbox\"); NodePools: default\n"
    );

    // -l selects NodeClaims (and Nodes) by label, with --nodepool too.
    let names = |args: &'static [&'static str]| {
        let cluster = &cluster;
        async move {
            let mut all = vec!["status", "--kubeconfig", kc, "-o", "name"];
            all.extend_from_slice(args);
            let out = cluster.plugin(&all).await;
            assert!(out.status.success(), "stderr: {}", stderr(&out));
            stdout(&out)
        }
    };
    assert_eq!(
        names(&["-l", "karpenter.sh/capacity-type=spot"]).await,
        "nodeclaim.karpenter.sh/default-registering\nnodeclaim.karpenter.sh/gpu-terminating\n"
    );
    assert_eq!(
        names(&["-l", "karpenter.sh/capacity-type=spot", "--nodepool", "gpu"]).await,
        "nodeclaim.karpenter.sh/gpu-terminating\n"
    );
    let interval = cluster
        .plugin(&["status", "--kubeconfig", kc, "--watch", "--interval", "0"])
        .await;
    assert_eq!(interval.status.code(), Some(2));
    assert!(
        stderr(&interval).contains("invalid interval \"0\": it is shorter than 100ms"),
        "{}",
        stderr(&interval)
    );

    let bad = cluster
        .plugin(&["status", "--kubeconfig", kc, "--sort-by", "colour"])
        .await;
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("invalid value 'colour' for '--sort-by <KEY>'"),
        "{}",
        stderr(&bad)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_flag_and_errors() {
    let cluster = Cluster::start(true).await;
    cluster.populate();
    add_nodes_and_pods(&cluster);
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
    assert_eq!(claims(&stdout(&live)), expected_claims());

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
    assert_fails_with(
        &out,
        2,
        "does not serve nodepools.karpenter.sh/v1 and nodeclaims.karpenter.sh/v1: Karpenter's \
         CRDs are not installed there",
    );
    // The first read of --watch fails the same way, before anything is printed.
    let watch = cluster
        .plugin(&["status", "--kubeconfig", kc, "--watch"])
        .await;
    assert_eq!(watch.status.code(), Some(2));
    assert_eq!(stdout(&watch), "");

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
}

/// A Deployment of `replicas` pods asking for `cpu` each.
fn deployment(name: &str, replicas: u32, cpu: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: {replicas}\n  \
         selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    \
         spec:\n      containers:\n      - name: app\n        image: public.ecr.aws/eks-distro/kubernetes/pause:3.2\n        \
         resources:\n          requests: {{cpu: \"{cpu}\", memory: 512Mi}}\n"
    )
}

/// Runs `kubectl karpenter <args>` with the plugin on PATH and HOME in `home`.
async fn kubectl_karpenter(home: &Path, kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    Command::new(kubectl())
        .arg("karpenter")
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stdin(Stdio::null())
        .env("HOME", home)
        .env("PATH", plugin_path())
        .env("NO_COLOR", "1")
        .env_remove("KUBECONFIG")
        .output()
        .await
        .expect("run kubectl")
}

const IN_FLIGHT: [&str; 3] = ["Launching", "Registering", "Initializing"];
/// Still waiting for a slow kubelet: a change must follow.
const BEFORE_REGISTRATION: [&str; 2] = ["Launching", "Registering"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_up_in_flight_and_watch_json_on_a_pipe() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifests =
        parse_yaml(Path::new("test.yaml"), &deployment("web", 4, "1")).expect("workload parses");
    let manifests = with_defaults(manifests, "sandbox").expect("defaults");
    let kubeconfig = dir.path().join("kubeconfig");
    let cfg = ClusterConfig {
        port: 0,
        // Slow kubelets keep the new NodeClaims in flight long enough to be seen.
        registration_delay: Duration::from_secs(6),
        settings: Settings {
            cluster_name: "sandbox".into(),
            batch_idle: Duration::from_millis(300),
            batch_max: Duration::from_secs(3),
            ..Settings::default()
        },
        kubeconfig: Some(kubeconfig.clone()),
        cloud: CloudOptions::default_sim(),
        clock: std::sync::Arc::new(karpenter_core::clock::SystemClock),
        controller: true,
    };
    let _cluster = start_cluster(&cfg, &manifests)
        .await
        .expect("cluster starts");

    // Poll real `kubectl karpenter status` until a NodeClaim shows in flight, before its
    // node registers.
    let mut table = String::new();
    for _ in 0..300 {
        let out = kubectl_karpenter(dir.path(), &kubeconfig, &["status"]).await;
        assert!(out.status.success(), "stderr: {}", stderr(&out));
        table = stdout(&out);
        if claims(&table)
            .iter()
            .skip(1)
            .any(|r| BEFORE_REGISTRATION.contains(&r[1].as_str()))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rows = claims(&table);
    let in_flight: Vec<&Vec<String>> = rows
        .iter()
        .skip(1)
        .filter(|r| IN_FLIGHT.contains(&r[1].as_str()))
        .collect();
    assert!(!in_flight.is_empty(), "no NodeClaim in flight:\n{table}");
    for r in &in_flight {
        assert!(r[0].starts_with("default-"), "\n{table}");
    }
    // The NodePool section counts them.
    let pool = pools(&table);
    assert_eq!(pool.len(), 2, "\n{table}");
    assert_eq!(pool[1][0], "default");
    let counted: usize = pool[1][4].parse().expect("IN-FLIGHT is a number");
    assert_eq!(counted, in_flight.len(), "\n{table}");
    assert!(
        table
            .lines()
            .last()
            .unwrap_or_default()
            .contains(" in flight (")
    );

    // `--watch -o json` on a pipe: the current state at once, then a line per change (the
    // NodeClaims register and initialize); every line is one JSON document.
    let mut watch = Command::new(kubectl())
        .args([
            "karpenter",
            "status",
            "--watch",
            "-o",
            "json",
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .env("HOME", dir.path())
        .env("PATH", plugin_path())
        .env_remove("KUBECONFIG")
        .kill_on_drop(true)
        .spawn()
        .expect("start kubectl karpenter status --watch");
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    let mut docs: Vec<Value> = Vec::new();
    while docs.len() < 2 {
        // A guard against hanging forever, not an assertion on timing.
        let line = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
            .await
            .expect("a new line within 2 minutes")
            .expect("read stdout")
            .expect("the watch keeps running");
        let doc: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("line {} is not JSON ({e}): {line}", docs.len() + 1));
        assert!(doc["nodeClaims"].is_array(), "{line}");
        assert!(doc["totals"]["nodeClaims"].is_u64(), "{line}");
        docs.push(doc);
    }
    watch.kill().await.expect("stop the watch");
    // Each line differs from the one before in more than the ages.
    for pair in docs.windows(2) {
        let strip = |d: &Value| {
            let mut d = d.clone();
            for c in d["nodeClaims"].as_array_mut().into_iter().flatten() {
                c["age"] = Value::Null;
            }
            d
        };
        assert_ne!(strip(&pair[0]), strip(&pair[1]));
    }
}

/// `text` with the AGE cell of every NodeClaims row replaced by `*` (padded to the column's
/// width, which stays that of the header while ages are under 100s).
fn mask_age_column(text: &str) -> String {
    let mut out = Vec::new();
    let mut span: Option<(usize, Option<usize>)> = None;
    for line in text.lines() {
        if line.starts_with("NAME ") {
            let start = line.find(" AGE").map(|i| i + 1);
            span = start.map(|a| {
                let end = line[a + 3..]
                    .find(|c: char| c != ' ')
                    .map(|off| a + 3 + off);
                (a, end)
            });
            out.push(line.to_owned());
            continue;
        }
        match span {
            Some((a, end)) if !line.is_empty() && line.len() > a => {
                let rest = end.and_then(|e| line.get(e..)).unwrap_or("");
                let width = end.map_or(1, |e| e - a);
                out.push(format!("{}{:<width$}{rest}", &line[..a], "*"));
            }
            _ => {
                if line.is_empty() {
                    span = None;
                }
                out.push(line.to_owned());
            }
        }
    }
    out.join("\n") + "\n"
}

/// `text` (JSON or YAML as the plugin prints it) with the value of every `created` and `age`
/// key replaced by `*`, keeping everything else byte for byte.
fn mask_times(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let masked = ["created", "age"].iter().find_map(|key| {
            if body.starts_with(&format!("\"{key}\": ")) {
                let comma = if body.ends_with(',') { "," } else { "" };
                Some(format!("{indent}\"{key}\": \"*\"{comma}"))
            } else if body.starts_with(&format!("{key}: ")) {
                Some(format!("{indent}{key}: '*'"))
            } else {
                None
            }
        });
        out.push_str(masked.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// Compares `got` with `tests/snapshots/status/NAME`, or writes it with `UPDATE_SNAPSHOTS=1`.
fn check_snapshot(name: &str, got: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/status");
    support::snapshot::check_snapshot(&dir, name, got);
}

/// Creates the `default` EC2NodeClass (AL2023, no kubelet settings), which every NodeClaim of
/// [`Cluster::populate`] names: m5.large ENI-limited to 29 pods, reserving 70m of its 2 vCPUs.
fn create_default_node_class(cluster: &Cluster) {
    let store = cluster.sandbox.store();
    let rt = store
        .resource("karpenter.k8s.aws", "v1", "ec2nodeclasses")
        .expect("EC2NodeClasses are served");
    store
        .create(&rt, "", testutil::ec2nodeclass("default").json())
        .expect("create EC2NodeClass");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_of_every_view_of_a_sandbox() {
    let cluster = Cluster::start(true).await;
    cluster.populate();
    add_nodes_and_pods(&cluster);
    create_default_pool(&cluster);
    // LIMITED-BY explained by the node class: the ready node by cpu (`2 vCPUs, reserved 70m`);
    // the g5.xlarge node registered 29 pods where the node class gives 58, so not explained.
    create_default_node_class(&cluster);
    let kubeconfig = cluster.kubeconfig();
    let kc = kubeconfig.to_str().expect("utf-8 path");
    let run = |output: &'static str| {
        let cluster = &cluster;
        async move {
            let out = cluster
                .plugin(&["status", "--kubeconfig", kc, "-o", output])
                .await;
            assert!(out.status.success(), "stderr: {}", stderr(&out));
            assert_eq!(stderr(&out), "");
            stdout(&out)
        }
    };
    check_snapshot("sandbox-table.txt", &mask_age_column(&run("table").await));
    check_snapshot("sandbox-wide.txt", &mask_age_column(&run("wide").await));
    let json = run("json").await;
    serde_json::from_str::<Value>(&json).expect("JSON");
    check_snapshot("sandbox.json", &mask_times(&json));
    let yaml = run("yaml").await;
    serde_saphyr::from_str::<Value>(&yaml).expect("YAML");
    check_snapshot("sandbox.yaml", &mask_times(&yaml));
}

/// Where `--watch` on a terminal starts each frame: the cursor to the first line.
const FRAME_START: &str = "\u{1b}[1;1H";

/// The lines of one frame as the terminal shows them: each is drawn after moving the cursor to
/// its row and ends by clearing the rest of the row (`ESC [ K`); the frame ends by clearing the
/// rest of the screen (`ESC [ J`).
fn screen_lines(frame: &str) -> Vec<String> {
    let mut pieces: Vec<&str> = frame.split("\u{1b}[K").collect();
    // What follows the last line: the clearing of the rest of the screen.
    pieces.pop();
    pieces
        .into_iter()
        .map(|piece| {
            // The cursor move to this row (ESC [ row ; 1 H); the first row's is the frame start.
            match piece.strip_prefix("\u{1b}[") {
                Some(rest) => rest.split_once(";1H").map_or(piece, |(_, line)| line),
                None => piece,
            }
            .to_owned()
        })
        .collect()
}

/// Reads `out` until it holds `frames` complete frames (each followed by the start of the next),
/// or panics when the program ends first. The timeout only guards against hanging forever.
async fn read_frames(out: &mut tokio::process::ChildStdout, frames: usize) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let text = String::from_utf8_lossy(&seen).into_owned();
        let parts: Vec<&str> = text.split(FRAME_START).skip(1).collect();
        // The last part may still be arriving.
        if parts.len() > frames {
            return parts[..frames].iter().map(|f| (*f).to_owned()).collect();
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(120), out.read(&mut chunk))
            .await
            .expect("a frame within 2 minutes")
            .expect("read the terminal");
        assert!(n > 0, "the watch ended early:\n{text}");
        seen.extend_from_slice(&chunk[..n]);
    }
}

/// `status --watch` on a real pseudo-terminal (util-linux `script`), 80 columns by 30 lines,
/// with `NO_COLOR`: the cockpit is drawn within 80 columns (summary with the pending pod, the
/// NodePool's capacity against its limit, every NodeClaim with its requests), without colour,
/// and a pod created while it runs shows in a later frame, the pods being followed by a watch
/// (the sandbox's audit log records the plugin's `watch` on pods); `q` ends it, leaving the
/// last frame in the scrollback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_on_a_terminal_draws_the_cockpit_within_its_width() {
    let cluster = Cluster::start(true).await;
    cluster.populate();
    add_nodes_and_pods(&cluster);
    create_default_pool(&cluster);
    let kubeconfig = cluster.kubeconfig();
    let command = format!(
        "stty cols 80 rows 30; exec '{BIN}' status --watch --interval 200ms --kubeconfig '{}'",
        kubeconfig.display()
    );
    let mut child = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .env("HOME", cluster.dir.path())
        .env("NO_COLOR", "1")
        .env("TERM", "xterm-256color")
        .env_remove("KUBECONFIG")
        .kill_on_drop(true)
        .spawn()
        .expect("util-linux `script` must be on PATH to give the plugin a terminal");
    let mut out = child.stdout.take().expect("stdout");
    let first = read_frames(&mut out, 1).await.remove(0);
    let lines = screen_lines(&first);
    assert!(lines.len() > 5, "{first:?}");
    for line in &lines {
        assert!(
            line.chars().count() <= 80,
            "{line:?} is wider than 80:\n{first}"
        );
    }
    assert!(
        lines[0].starts_with("Every 200ms: kubectl karpenter status (Ctrl-C to quit)"),
        "{first}"
    );
    assert!(
        lines[1].starts_with("5 NodeClaims  1 pending pod  $"),
        "{first}"
    );
    assert!(lines.iter().any(|l| l.starts_with("NODEPOOL ")), "{first}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("default ") && l.contains(" 2/100 ")),
        "the NodePool's cpu capacity against its limit:\n{first}"
    );
    assert!(lines.iter().any(|l| l.starts_with("NODECLAIM ")), "{first}");
    assert!(
        !first.contains("\u{1b}[38;5;"),
        "coloured despite NO_COLOR:\n{first}"
    );
    // One more pending pod: a later frame counts it.
    create_pod(&cluster, testutil::pod("pending-2").cpu("1"), "Pending");
    let mut counted = false;
    for _ in 0..100 {
        let frame = read_frames(&mut out, 1).await.remove(0);
        if frame.contains("2 pending pods") {
            counted = true;
            break;
        }
    }
    assert!(counted, "the new pending pod never showed");
    // `q` ends the watch: the terminal is restored and the last frame stays in the scrollback.
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"q").await.expect("press q");
    stdin.flush().await.expect("press q");
    // A guard against hanging forever, not an assertion on timing.
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("the watch ends after q")
        .expect("wait for the watch");
    assert!(status.success(), "{status}");
    let mut rest = Vec::new();
    out.read_to_end(&mut rest).await.expect("read the terminal");
    let rest = String::from_utf8_lossy(&rest);
    let (_, after) = rest
        .split_once("\u{1b}[?1049l")
        .expect("the alternate screen is left");
    assert!(after.contains("NODECLAIM "), "{after:?}");
    // The pods came from a watch: the plugin asked the API server to watch them.
    let requests: Vec<String> = cluster
        .sandbox
        .audit_log()
        .accesses_by("kubectl-karpenter/")
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        requests.iter().any(|r| r == "watch core pods"),
        "{requests:#?}"
    );
}
