//! End-to-end tests of `kubectl karpenter status` against the in-process sandbox API server:
//! the built binary run directly and as a real kubectl plugin (kubectl must be on PATH), the
//! kubeconfig rules (`--kubeconfig`, `--context`, `KUBECONFIG` merging) and exit codes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Output;

use controller::cloudprovider::sim::catalog::{Catalog, spot_price};
use sandbox::Sandbox;
use sandbox::store::{DeleteOptions, Subresource};
use serde_json::{Value, json};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_kubectl-karpenter");

/// A sandbox with Karpenter's CRDs and a kubeconfig for it in a temporary directory that also
/// serves as HOME, so no real kubeconfig is ever read.
struct Cluster {
    sandbox: Sandbox,
    dir: tempfile::TempDir,
}

impl Cluster {
    async fn start(install_crds: bool) -> Cluster {
        let sandbox = Sandbox::start(0).await.expect("start sandbox");
        if install_crds {
            let store = sandbox.store();
            let rt = store
                .resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
                .expect("CRDs are served");
            for crd in crds::generate::crds() {
                let value = serde_json::to_value(&crd).expect("CRD to JSON");
                store.create(&rt, "", value).expect("install CRD");
            }
        }
        let dir = tempfile::tempdir().expect("tempdir");
        sandbox
            .write_kubeconfig(&dir.path().join("kubeconfig"))
            .expect("write kubeconfig");
        Cluster { sandbox, dir }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    fn nodeclaim_type(&self) -> sandbox::registry::ResourceType {
        self.sandbox
            .store()
            .resource("karpenter.sh", "v1", "nodeclaims")
            .expect("NodeClaims are served once the CRD is installed")
    }

    /// Creates a NodeClaim of `pool`; with an offering, it carries the labels a launched one has.
    fn create(&self, name: &str, pool: &str, offering: Option<(&str, &str, &str)>) {
        let mut labels = json!({"karpenter.sh/nodepool": pool});
        if let Some((instance_type, capacity_type, zone)) = offering {
            labels["node.kubernetes.io/instance-type"] = json!(instance_type);
            labels["karpenter.sh/capacity-type"] = json!(capacity_type);
            labels["topology.kubernetes.io/zone"] = json!(zone);
        }
        let claim = json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": name,
                "labels": labels,
                "finalizers": ["karpenter.sh/termination"],
            },
            "spec": {
                "requirements": [{
                    "key": "karpenter.sh/capacity-type",
                    "operator": "In",
                    "values": ["on-demand", "spot"],
                }],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            },
        });
        self.sandbox
            .store()
            .create(&self.nodeclaim_type(), "", claim)
            .expect("create NodeClaim");
    }

    /// Sets the conditions in `true_types` to True, and the provider id and node name.
    fn set_status(&self, name: &str, true_types: &[&str], node: Option<&str>) {
        let conditions: Vec<Value> = true_types
            .iter()
            .map(|t| {
                json!({"type": t, "status": "True", "reason": t, "message": "",
                       "lastTransitionTime": "2025-06-01T00:00:00Z"})
            })
            .collect();
        let provider_id = format!("aws:///us-east-1a/i-{name}");
        self.sandbox
            .store()
            .modify(&self.nodeclaim_type(), "", name, Subresource::Status, |obj| {
                let mut status = json!({"conditions": conditions, "providerID": provider_id});
                if let Some(node) = node {
                    status["nodeName"] = json!(node);
                }
                obj["status"] = status;
                Ok(())
            })
            .expect("set status");
    }

    fn delete(&self, name: &str) {
        self.sandbox
            .store()
            .delete(&self.nodeclaim_type(), "", name, &DeleteOptions::default())
            .expect("delete NodeClaim");
    }

    /// Five NodeClaims, one in each state.
    fn populate(&self) {
        let all = ["Launched", "Registered", "Initialized", "Ready"];
        self.create("default-ready", "default", Some(("m5.large", "on-demand", "us-east-1a")));
        self.set_status("default-ready", &all, Some("ip-10-0-1-1.ec2.internal"));
        self.create("default-launching", "default", None);
        self.create("default-registering", "default", Some(("c5.xlarge", "spot", "us-east-1b")));
        self.set_status("default-registering", &["Launched"], None);
        self.create("gpu-initializing", "gpu", Some(("g5.xlarge", "on-demand", "us-east-1c")));
        self.set_status("gpu-initializing", &["Launched", "Registered"], Some("ip-10-0-3-3.ec2.internal"));
        self.create("gpu-terminating", "gpu", Some(("m5.large", "spot", "us-east-1a")));
        self.set_status("gpu-terminating", &all, Some("ip-10-0-1-9.ec2.internal"));
        self.delete("gpu-terminating");
    }

    /// Runs `program args…` with HOME in the temporary directory and no KUBECONFIG.
    async fn run(&self, program: &Path, args: &[&str], path: Option<OsString>) -> Output {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("HOME", self.dir.path())
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST");
        if let Some(path) = path {
            cmd.env("PATH", path);
        }
        cmd.output().await.expect("run command")
    }

    async fn plugin(&self, args: &[&str]) -> Output {
        self.run(Path::new(BIN), args, None).await
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The table's cells, split on runs of spaces, with the AGE column (8th) replaced by `*`
/// because it ticks between runs.
fn cells(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .take_while(|l| !l.is_empty())
        .map(|l| {
            l.split_whitespace()
                .enumerate()
                .map(|(i, c)| if i == 7 { "*".to_owned() } else { c.to_owned() })
                .collect()
        })
        .collect()
}

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| (*c).to_owned()).collect()
}

fn expected_table() -> Vec<Vec<String>> {
    vec![
        row(&["NAME", "NODEPOOL", "INSTANCE-TYPE", "CAPACITY-TYPE", "ZONE", "STATE", "NODE", "*"]),
        row(&["default-launching", "default", "<none>", "<none>", "<none>", "Launching", "<none>", "*"]),
        row(&["default-ready", "default", "m5.large", "on-demand", "us-east-1a", "Ready", "ip-10-0-1-1.ec2.internal", "*"]),
        row(&["default-registering", "default", "c5.xlarge", "spot", "us-east-1b", "Registering", "<none>", "*"]),
        row(&["gpu-initializing", "gpu", "g5.xlarge", "on-demand", "us-east-1c", "Initializing", "ip-10-0-3-3.ec2.internal", "*"]),
        row(&["gpu-terminating", "gpu", "m5.large", "spot", "us-east-1a", "Terminating", "ip-10-0-1-9.ec2.internal", "*"]),
    ]
}

fn expected_totals() -> String {
    let catalog = Catalog::embedded().expect("catalog");
    let od = |t: &str| catalog.get(t).expect("type in catalog").on_demand_price;
    let total = od("m5.large")
        + spot_price(od("c5.xlarge"), "c5.xlarge", "us-east-1b")
        + od("g5.xlarge")
        + spot_price(od("m5.large"), "m5.large", "us-east-1a");
    format!(
        "5 nodeclaims: 1 ready, 3 in flight (1 launching, 1 registering, 1 initializing), \
         1 terminating; ${total:.4}/hour (1 without a known price)"
    )
}

/// kubectl from PATH; the fidelity tests fail (never skip) without it.
fn kubectl() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|p| p.is_file())
        .expect("kubectl must be on PATH for the plugin tests (e.g. /usr/bin/kubectl v1.32)")
}

/// PATH with the plugin binary's directory first, so kubectl discovers `kubectl-karpenter`.
fn plugin_path() -> OsString {
    let bin_dir = Path::new(BIN).parent().expect("binary directory").to_path_buf();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::iter::once(bin_dir).chain(std::env::split_paths(&rest));
    std::env::join_paths(dirs).expect("join PATH")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_directly_and_as_a_kubectl_plugin() {
    let cluster = Cluster::start(true).await;
    cluster.populate();
    let kubeconfig = cluster.kubeconfig();
    let kubeconfig = kubeconfig.to_str().expect("utf-8 path");

    let direct = cluster.plugin(&["status", "--kubeconfig", kubeconfig]).await;
    assert!(direct.status.success(), "stderr: {}", stderr(&direct));
    let table = stdout(&direct);
    assert_eq!(cells(&table), expected_table(), "\n{table}");
    assert_eq!(table.lines().last(), Some(expected_totals().as_str()), "\n{table}");
    assert!(table.starts_with("NAME                  NODEPOOL   INSTANCE-TYPE   "), "\n{table}");

    let kubectl = kubectl();
    let via_kubectl = cluster
        .run(&kubectl, &["karpenter", "status", "--kubeconfig", kubeconfig], Some(plugin_path()))
        .await;
    assert!(via_kubectl.status.success(), "stderr: {}", stderr(&via_kubectl));
    let plugin_table = stdout(&via_kubectl);
    assert_eq!(cells(&plugin_table), expected_table(), "\n{plugin_table}");
    assert_eq!(plugin_table.lines().last(), table.lines().last());

    let help = cluster.run(&kubectl, &["karpenter", "status", "--help"], Some(plugin_path())).await;
    assert!(help.status.success(), "stderr: {}", stderr(&help));
    assert!(stdout(&help).contains("Usage: kubectl karpenter status [OPTIONS]"), "{}", stdout(&help));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wide_json_and_nodepool_filter() {
    let cluster = Cluster::start(true).await;
    cluster.populate();
    let kc = cluster.kubeconfig();
    let kc = kc.to_str().expect("utf-8 path");

    let wide = cluster.plugin(&["status", "--kubeconfig", kc, "-o", "wide", "--nodepool", "gpu"]).await;
    assert!(wide.status.success(), "stderr: {}", stderr(&wide));
    let text = stdout(&wide);
    let rows = cells(&text);
    assert_eq!(rows.len(), 3, "\n{text}");
    assert_eq!(rows[0][8..], row(&["PRICE/HOUR", "NODECLASS", "PROVIDER-ID"])[..]);
    assert_eq!(rows[1][0], "gpu-initializing");
    assert_eq!(rows[1][10], "aws:///us-east-1a/i-gpu-initializing");
    assert!(rows[1][8].starts_with('$'), "\n{text}");
    assert!(text.lines().last().unwrap_or_default().starts_with("2 nodeclaims: 0 ready, 1 in flight"), "\n{text}");

    let json_out = cluster.plugin(&["status", "--kubeconfig", kc, "-o", "json"]).await;
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
        ["default-launching", "default-ready", "default-registering", "gpu-initializing", "gpu-terminating"]
    );
    assert_eq!(list["items"][0]["kind"], "NodeClaim");

    let none = cluster.plugin(&["status", "--kubeconfig", kc, "--nodepool", "absent"]).await;
    assert!(none.status.success(), "stderr: {}", stderr(&none));
    assert_eq!(stdout(&none), "");
    assert_eq!(stderr(&none), "No resources found\n");
}

/// A kubeconfig with a live context and one whose server port has nothing listening.
fn two_contexts(cluster: &Cluster, current: &str) -> PathBuf {
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: live\n  cluster: {{server: '{live}'}}\n\
         - name: dead\n  cluster: {{server: 'http://127.0.0.1:{dead_port}'}}\nusers:\n- name: me\n  user: {{}}\n\
         contexts:\n- name: live\n  context: {{cluster: live, user: me}}\n- name: dead\n  context: {{cluster: dead, user: me}}\n\
         current-context: {current}\n",
        live = cluster.sandbox.url(),
    );
    let path = cluster.dir.path().join(format!("two-{current}"));
    std::fs::write(&path, text).expect("write kubeconfig");
    path
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
    assert!(err.starts_with("error: listing NodeClaims from http://127.0.0.1:"), "{err}");
    assert!(err.contains("(context \"dead\")"), "{err}");

    let live = cluster.plugin(&["status", "--kubeconfig", kc, "--context", "live"]).await;
    assert!(live.status.success(), "stderr: {}", stderr(&live));
    assert_eq!(cells(&stdout(&live)), expected_table());

    let missing = cluster.plugin(&["status", "--kubeconfig", kc, "--context", "prod"]).await;
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
    assert!(stderr(&none).contains("no kubeconfig found"), "{}", stderr(&none));
    assert!(stderr(&none).contains("pass --kubeconfig PATH"), "{}", stderr(&none));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_crds_and_usage_errors_exit_2() {
    let cluster = Cluster::start(false).await;
    let kc = cluster.kubeconfig();
    let kc = kc.to_str().expect("utf-8 path");
    let out = cluster.plugin(&["status", "--kubeconfig", kc]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("does not serve nodeclaims.karpenter.sh/v1"), "{}", stderr(&out));

    let bad = cluster.plugin(&["status", "-o", "xml"]).await;
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("kubectl karpenter status"), "{}", stderr(&bad));

    let version = cluster.plugin(&["version"]).await;
    assert!(version.status.success());
    assert_eq!(stdout(&version), format!("kubectl-karpenter {}\n", env!("CARGO_PKG_VERSION")));
}
