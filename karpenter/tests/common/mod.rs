//! Helpers shared by the CLI tests: run the `karpenter` binary and read its JSON report.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Run `karpenter` with `args` (warnings-only logs) and capture its output.
pub fn karpenter(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(args)
        .env("LOG_LEVEL", "warn")
        .output()
        .expect("karpenter runs")
}

/// A path in the repository.
pub fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// The one JSON document on stdout of a successful run.
pub fn report(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is one JSON document ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A client for the cluster `kubeconfig` names (a running `karpenter sandbox`'s, with its CA
/// and token).
pub async fn client(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}
