//! Issue 21's split brain: a `karpenter run` pointed at a running `karpenter sandbox` fought the
//! sandbox's embedded controller, which took no Lease (20 NodeClaims for 10 pods, NodeClaims
//! without instances). The embedded controller now takes part in the leader election, so the
//! second process stands by. Also the helpers `failover_moto` shares: processes killed on drop,
//! `karpenter run` with short election timings, the Lease's holder.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::ListParams;
use serde_json::Value;

use crate::common::client;
use controller::runtime::leader::{DEFAULT_LEASE_NAME, DEFAULT_LEASE_NAMESPACE};
use crds::NodeClaim;

/// A child process killed (SIGKILL, as `kill -9`) and reaped when dropped.
pub struct Process {
    child: Child,
    /// Where its stderr goes.
    pub log: PathBuf,
}

impl Process {
    /// Start `karpenter` with `args` and `envs`, its stdout dropped and its stderr written to
    /// `log`.
    pub fn karpenter(args: &[&str], envs: &[(&str, &str)], log: PathBuf) -> Process {
        let file = std::fs::File::create(&log).expect("create the log file");
        let child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
            .args(args)
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("karpenter starts");
        Process { child, log }
    }

    /// Kill it now (SIGKILL): nothing it holds is released, as when a node dies.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The `holderIdentity` this `karpenter run` elects with, from its `starting leader
    /// election` log line (JSON logs), once it has printed it.
    pub fn identity(&self) -> Option<String> {
        self.stderr()
            .lines()
            .filter(|l| l.contains("starting leader election"))
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find_map(|v| {
                v.pointer("/fields/identity")
                    .or(v.get("identity"))
                    .and_then(Value::as_str)
                    .map(String::from)
            })
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Wait until `kubeconfig` exists (the sandbox writes it once its workload is applied).
pub async fn wait_for_kubeconfig(kubeconfig: &Path, sandbox: &Process) {
    let start = Instant::now();
    while !kubeconfig.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no kubeconfig after 60 s; the sandbox said:\n{}",
            sandbox.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Who holds Karpenter's leader Lease, if anyone.
pub async fn holder(client: &kube::Client) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), DEFAULT_LEASE_NAMESPACE);
    leases
        .get_opt(DEFAULT_LEASE_NAME)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
}

/// Poll `check` every 200 ms until it holds, or panic after `timeout` with `what` and the
/// logs of `processes`.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, processes: &[&Process], check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        if start.elapsed() >= timeout {
            let logs: Vec<String> = processes
                .iter()
                .map(|p| {
                    let s = p.stderr();
                    let tail: Vec<&str> = s.lines().rev().take(40).collect();
                    format!(
                        "--- {} (last lines):\n{}",
                        p.log.display(),
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    )
                })
                .collect();
            panic!(
                "timed out after {timeout:?} waiting for {what}\n{}",
                logs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The cluster's pods of `app` and how many of them are bound.
pub async fn bound(client: &kube::Client, app: &str) -> (usize, usize) {
    let pods: Api<Pod> = Api::all(client.clone());
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let on_node = list
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .count();
    (list.len(), on_node)
}

/// Every NodeClaim in the cluster.
pub async fn nodeclaims(client: &kube::Client) -> Vec<NodeClaim> {
    let api: Api<NodeClaim> = Api::all(client.clone());
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// Every Node in the cluster.
pub async fn nodes(client: &kube::Client) -> Vec<Node> {
    let api: Api<Node> = Api::all(client.clone());
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// Two free loopback ports (bound, then released) for a `karpenter run`'s metrics and probes.
pub fn free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let b = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    (
        a.local_addr().expect("addr").port(),
        b.local_addr().expect("addr").port(),
    )
}

/// `karpenter run` against `kubeconfig` with `cloud` (its cloud flags: provider, endpoint,
/// cluster name) and `env`, on free metrics and probe ports, electing with short timings (a
/// standby takes over at most 6 s after the leader's last renewal) and logging JSON at `info`,
/// so [`Process::identity`] finds its Lease identity.
pub fn karpenter_run(
    kubeconfig: &Path,
    cloud: &[&str],
    env: &[(&str, &str)],
    log: PathBuf,
) -> Process {
    let (metrics, health) = free_ports();
    let (metrics, health) = (metrics.to_string(), health.to_string());
    let mut args = vec!["run"];
    args.extend_from_slice(cloud);
    args.extend([
        "--metrics-port",
        &metrics,
        "--health-probe-port",
        &health,
        "--leader-election-lease-duration",
        "6s",
        "--leader-election-renew-deadline",
        "4s",
        "--leader-election-retry-period",
        "1s",
    ]);
    let mut envs = env.to_vec();
    envs.extend([
        ("KUBECONFIG", kubeconfig.to_str().expect("UTF-8 path")),
        ("LOG_LEVEL", "info"),
        ("LOG_FORMAT", "json"),
    ]);
    Process::karpenter(&args, &envs, log)
}

fn deployment(name: &str, replicas: u32, cpu: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      containers:\n      - {{name: app, image: public.ecr.aws/eks-distro/kubernetes/pause:3.2, resources: {{requests: {{cpu: {cpu}, memory: 512Mi}}}}}}\n"
    )
}

/// The sandbox's controller holds the Lease; a `karpenter run` started beside it (its own
/// simulated cloud, where NodeClaims it launched would never get a Node) stands by through a
/// second scale-up: every NodeClaim gets a Node and the holder does not change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karpenter_run_beside_a_sandbox_stands_by_while_the_sandbox_leads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let workload = dir.path().join("web.yaml");
    std::fs::write(&workload, deployment("web", 10, "1")).expect("write workload");
    let kubeconfig = dir.path().join("kubeconfig");
    let sandbox = Process::karpenter(
        &[
            "sandbox",
            "--workload",
            workload.to_str().expect("UTF-8 path"),
            "--kubeconfig-out",
            kubeconfig.to_str().expect("UTF-8 path"),
            "--registration-delay",
            "1s",
        ],
        &[("LOG_LEVEL", "warn")],
        dir.path().join("sandbox.log"),
    );
    wait_for_kubeconfig(&kubeconfig, &sandbox).await;
    let c = client(&kubeconfig).await;
    eventually(
        "the sandbox's controller to take the Lease",
        Duration::from_secs(60),
        &[&sandbox],
        || async { holder(&c).await.is_some_and(|h| h.starts_with("sandbox_")) },
    )
    .await;
    let leader = holder(&c).await.expect("a holder");
    eventually(
        "10 web pods bound",
        Duration::from_secs(120),
        &[&sandbox],
        || async { bound(&c, "web").await == (10, 10) },
    )
    .await;

    let run = karpenter_run(
        &kubeconfig,
        &["--cloud-provider", "sim", "--cluster-name", "sandbox"],
        &[],
        dir.path().join("run.log"),
    );
    eventually(
        "karpenter run to start electing",
        Duration::from_secs(60),
        &[&sandbox, &run],
        || async { run.identity().is_some() },
    )
    .await;
    let standby = run.identity().expect("identity");
    // Both controllers see the new pods; only the leader may act on them.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(c.clone(), "default");
    deployments
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"replicas": 20}})),
        )
        .await
        .expect("scale web to 20");
    eventually(
        "20 web pods bound",
        Duration::from_secs(120),
        &[&sandbox, &run],
        || async { bound(&c, "web").await == (20, 20) },
    )
    .await;
    eventually(
        "every NodeClaim to have a Node",
        Duration::from_secs(60),
        &[&sandbox, &run],
        || async {
            let claims = nodeclaims(&c).await;
            let nodes = nodes(&c).await;
            claims.iter().all(|claim| {
                claim
                    .status
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some_and(|n| {
                        nodes
                            .iter()
                            .any(|node| node.metadata.name.as_ref() == Some(n))
                    })
            })
        },
    )
    .await;
    assert_eq!(
        holder(&c).await.as_deref(),
        Some(leader.as_str()),
        "the sandbox keeps the Lease"
    );
    assert!(
        run.stderr()
            .lines()
            .any(|l| l.contains("waiting for the leader's lease to expire") && l.contains(&leader)),
        "karpenter run ({standby}) saw the sandbox's Lease and waited:\n{}",
        run.stderr()
    );
}
