//! `karpenter sandbox publish-ami` against a running `karpenter sandbox` in another process:
//! the release goes through the API server, and the EC2NodeClass's `status.amis` move to the
//! printed images well before the node class controller's one-minute resync.

// Shared with the other CLI tests; this one only runs `karpenter`.
use crate::common;
#[allow(dead_code)]
use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{client, karpenter};
use crds::EC2NodeClass;
use kube::Api;

/// A `karpenter sandbox` child process, killed when dropped.
struct RunningSandbox(Child);

impl Drop for RunningSandbox {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn node_class_amis(api: &Api<EC2NodeClass>) -> BTreeSet<String> {
    api.get_opt("default")
        .await
        .ok()
        .flatten()
        .and_then(|nc| nc.status)
        .map(|s| s.amis.into_iter().map(|a| a.id).collect())
        .unwrap_or_default()
}

async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !cond().await {
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_ami_moves_a_running_sandbox_s_node_class() {
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    let workload = dir.path().join("empty.yaml");
    std::fs::write(
        &workload,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: demo}\n",
    )
    .expect("write workload");
    let child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .arg("sandbox")
        .arg("--workload")
        .arg(&workload)
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .env("LOG_LEVEL", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("karpenter sandbox starts");
    let _sandbox = RunningSandbox(child);
    wait_until("the kubeconfig", Duration::from_secs(30), || async {
        kubeconfig.exists()
    })
    .await;
    let api: Api<EC2NodeClass> = Api::all(client(&kubeconfig).await);
    wait_until(
        "the default EC2NodeClass resolves",
        Duration::from_secs(30),
        || async { node_class_amis(&api).await.len() == 2 },
    )
    .await;
    let before = node_class_amis(&api).await;

    let path = kubeconfig.to_str().expect("utf-8 path");
    let out = karpenter(&[
        "sandbox",
        "publish-ami",
        "--kubeconfig",
        path,
        "--family",
        "al2023",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("published v20260302:"), "{stdout}");
    let printed: BTreeSet<String> = stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.starts_with("ami-"))
        .map(String::from)
        .collect();
    assert_eq!(printed.len(), 2, "one image per architecture: {stdout}");
    assert!(printed.is_disjoint(&before));
    wait_until(
        "status.amis moves to the printed images",
        Duration::from_secs(10),
        || async { node_class_amis(&api).await == printed },
    )
    .await;

    // The same release again is refused with the sandbox's reason (exit 1); a bad family is
    // a usage error (exit 2).
    let again = karpenter(&[
        "sandbox",
        "publish-ami",
        "--kubeconfig",
        path,
        "--family",
        "al2023",
        "--version",
        "v20260302",
        "--arch",
        "arm64",
    ]);
    assert_eq!(again.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains("AlreadyPublished"), "{stderr}");
    let bad = karpenter(&[
        "sandbox",
        "publish-ami",
        "--kubeconfig",
        path,
        "--family",
        "ubuntu",
    ]);
    assert_eq!(bad.status.code(), Some(2));
}
