//! `karpenter sandbox fail-node` and `karpenter sandbox interrupt` against a running `karpenter
//! sandbox` in another process: a node failed with `Ready=Unknown` reports it until healed, an
//! unknown node is refused (exit 1); the sandbox has its interruption queue without being told,
//! a spot node's interruption warning is sent and printed (exit 0), an unknown node is refused
//! (exit 1) and an unreachable sandbox is an error (exit 2); a kubeconfig token is never sent to a
//! plain-http server (exit 2 before any connection).

// Shared with the other CLI tests; this one only runs `karpenter`.
use crate::common;
#[allow(dead_code)]
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{client, karpenter};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;

/// A `karpenter sandbox` child process, killed when dropped.
struct RunningSandbox(Child);

impl Drop for RunningSandbox {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The first Node with a providerID, once one has joined.
async fn a_node(api: &Api<Node>, timeout: Duration) -> String {
    let start = Instant::now();
    loop {
        let nodes = api.list(&ListParams::default()).await.ok();
        let named = nodes.into_iter().flat_map(|l| l.items).find_map(|n| {
            n.spec.as_ref()?.provider_id.as_ref()?;
            n.metadata.name
        });
        if let Some(name) = named {
            return name;
        }
        assert!(
            start.elapsed() < timeout,
            "no node joined within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_sends_a_warning_for_a_running_sandbox_s_node() {
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    let workload = dir.path().join("one.yaml");
    std::fs::write(
        &workload,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: one}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: one}}\n  template:\n    metadata: {labels: {app: one}}\n    spec:\n      containers:\n      - {name: app, image: public.ecr.aws/eks-distro/kubernetes/pause:3.2, resources: {requests: {cpu: 500m, memory: 512Mi}}}\n      nodeSelector: {karpenter.sh/capacity-type: spot}\n",
    )
    .expect("write workload");
    let child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .arg("sandbox")
        .arg("--workload")
        .arg(&workload)
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .arg("--registration-delay")
        .arg("500ms")
        .env("LOG_LEVEL", "warn")
        .env_remove("INTERRUPTION_QUEUE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("karpenter sandbox starts");
    let _sandbox = RunningSandbox(child);
    let start = Instant::now();
    while !kubeconfig.exists() {
        assert!(start.elapsed() < Duration::from_secs(30), "no kubeconfig");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let nodes: Api<Node> = Api::all(client(&kubeconfig).await);
    let node = a_node(&nodes, Duration::from_secs(60)).await;
    let path = kubeconfig.to_str().expect("utf-8 path");

    // fail-node: the node's kubelet reports the condition until healed.
    let ready = |n: &Node| {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone())
    };
    let failed = karpenter(&[
        "sandbox",
        "fail-node",
        &node,
        "--condition",
        "Ready=Unknown",
        "--kubeconfig",
        path,
    ]);
    assert!(
        failed.status.success(),
        "exit {:?}: {}",
        failed.status.code(),
        String::from_utf8_lossy(&failed.stderr)
    );
    let got = nodes.get(&node).await.expect("the node");
    assert_eq!(ready(&got).as_deref(), Some("Unknown"));
    let healed = karpenter(&[
        "sandbox",
        "fail-node",
        &node,
        "--heal",
        "--kubeconfig",
        path,
    ]);
    assert!(
        healed.status.success(),
        "{}",
        String::from_utf8_lossy(&healed.stderr)
    );
    let got = nodes.get(&node).await.expect("the node");
    assert_eq!(ready(&got).as_deref(), Some("True"));
    let missing = karpenter(&["sandbox", "fail-node", "ghost", "--kubeconfig", path]);
    assert_eq!(missing.status.code(), Some(1));

    let out = karpenter(&[
        "sandbox",
        "interrupt",
        &node,
        "--kind",
        "spot-interruption",
        "--kubeconfig",
        path,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with(&format!("interruption/{node}-")),
        "{stdout}"
    );
    for want in [
        "spot-interruption of node",
        "sent to queue karpenter-sandbox:",
        "EC2 Spot Instance Interruption Warning",
        "EC2 reclaims the instance at",
        "kubectl karpenter status",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in\n{stdout}");
    }
    assert!(stdout.contains("(spot "), "a spot instance: {stdout}");

    // Refused: no such node (exit 1). The sandbox unreachable (exit 2).
    let ghost = karpenter(&[
        "sandbox",
        "interrupt",
        "ghost",
        "--kind",
        "terminating",
        "--kubeconfig",
        path,
    ]);
    assert_eq!(ghost.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&ghost.stderr);
    assert!(
        stderr.contains("no node or nodeclaim named ghost (NodeNotFound)"),
        "{stderr}"
    );
    let dead = dir.path().join("dead.kubeconfig");
    std::fs::write(
        &dead,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"http://127.0.0.1:9\"}}]\nusers: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .expect("write kubeconfig");
    let unreachable = karpenter(&[
        "sandbox",
        "interrupt",
        &node,
        "--kind",
        "rebalance",
        "--kubeconfig",
        dead.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(
        unreachable.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&unreachable.stderr)
    );
}

#[test]
fn interrupt_refuses_to_send_a_token_to_a_plain_http_server() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // A server that closes every connection at once, counting them.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let server = format!("http://{}", listener.local_addr().expect("addr"));
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&connections);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            counter.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        }
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("plain.kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{server}\"}}}}]\nusers: [{{name: u, user: {{token: s3cr3t}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
        ),
    )
    .expect("write kubeconfig");
    let path = path.to_str().expect("utf-8 path");
    let out = karpenter(&[
        "sandbox",
        "interrupt",
        "ip-10-0-16-2.ec2.internal",
        "--kind",
        "stopping",
        "--kubeconfig",
        path,
        "--timeout",
        "2s",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "using context \"x\" from --kubeconfig {path}: its user has a bearer token (token), \
             and the server {server} is plain http: credentials are sent only over https"
        )),
        "{stderr}"
    );
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "the token went to {server}"
    );
}
