//! Shared harness for the plugin's end-to-end tests: a sandbox API server with Karpenter's CRDs,
//! NodeClaims in every lifecycle state, kubeconfigs, and runners for the binary and for kubectl.

// Each test binary uses a different part of the harness.
#![allow(dead_code)]

pub mod snapshot;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use crds::Operator;
use crds::labels::{
    CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, TERMINATION_FINALIZER, TOPOLOGY_ZONE_LABEL,
};
use sandbox::Sandbox;
use sandbox::store::{DeleteOptions, Subresource};
use serde_json::{Value, json};
use testutil::{condition, nodeclaim};
use tokio::process::Command;

/// When the staged NodeClaims' conditions last changed.
pub const STAGED: &str = "2025-06-01T00:00:00Z";

/// The plugin binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_kubectl-karpenter");

/// A sandbox with Karpenter's CRDs and a kubeconfig for it in a temporary directory that also
/// serves as HOME, so no real kubeconfig is ever read.
pub struct Cluster {
    /// The API server.
    pub sandbox: Sandbox,
    /// Kubeconfigs; also HOME for every command run.
    pub dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts the API server, with Karpenter's CRDs when `install_crds`, and writes its kubeconfig.
    pub async fn start(install_crds: bool) -> Cluster {
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

    /// The kubeconfig whose current context is the sandbox.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// The sandbox's resource type for NodeClaims.
    pub fn nodeclaim_type(&self) -> sandbox::registry::ResourceType {
        self.sandbox
            .store()
            .resource("karpenter.sh", "v1", "nodeclaims")
            .expect("NodeClaims are served once the CRD is installed")
    }

    /// Creates a NodeClaim of `pool`; with an offering, it carries the labels a launched one has.
    pub fn create(&self, name: &str, pool: &str, offering: Option<(&str, &str, &str)>) {
        let mut claim = nodeclaim(name)
            .nodepool(pool)
            .finalizer(TERMINATION_FINALIZER)
            .requirement(CAPACITY_TYPE_LABEL, Operator::In, ["on-demand", "spot"]);
        if let Some((instance_type, capacity_type, zone)) = offering {
            claim = claim
                .label(INSTANCE_TYPE_LABEL, instance_type)
                .label(CAPACITY_TYPE_LABEL, capacity_type)
                .label(TOPOLOGY_ZONE_LABEL, zone);
        }
        let claim = claim.json();
        self.sandbox
            .store()
            .create(&self.nodeclaim_type(), "", claim)
            .expect("create NodeClaim");
    }

    /// Sets the conditions in `true_types` to True, and the provider id and node name.
    pub fn set_status(&self, name: &str, true_types: &[&str], node: Option<&str>) {
        let conditions: Vec<Value> = true_types
            .iter()
            .map(|t| condition(t, "True").at(STAGED).json())
            .collect();
        let provider_id = format!("aws:///us-east-1a/i-{name}");
        self.sandbox
            .store()
            .modify(
                &self.nodeclaim_type(),
                "",
                name,
                Subresource::Status,
                |obj| {
                    let mut status = json!({"conditions": conditions, "providerID": provider_id});
                    if let Some(node) = node {
                        status["nodeName"] = json!(node);
                    }
                    obj["status"] = status;
                    Ok(())
                },
            )
            .expect("set status");
    }

    /// Deletes a NodeClaim; its finalizer keeps it, Terminating, with a deletionTimestamp.
    pub fn delete(&self, name: &str) {
        self.sandbox
            .store()
            .delete(&self.nodeclaim_type(), "", name, &DeleteOptions::default())
            .expect("delete NodeClaim");
    }

    /// Five NodeClaims, one in each state.
    pub fn populate(&self) {
        let all = ["Launched", "Registered", "Initialized", "Ready"];
        self.create(
            "default-ready",
            "default",
            Some(("m5.large", "on-demand", "us-east-1a")),
        );
        self.set_status("default-ready", &all, Some("ip-10-0-1-1.ec2.internal"));
        self.create("default-launching", "default", None);
        self.create(
            "default-registering",
            "default",
            Some(("c5.xlarge", "spot", "us-east-1b")),
        );
        self.set_status("default-registering", &["Launched"], None);
        self.create(
            "gpu-initializing",
            "gpu",
            Some(("g5.xlarge", "on-demand", "us-east-1c")),
        );
        self.set_status(
            "gpu-initializing",
            &["Launched", "Registered"],
            Some("ip-10-0-3-3.ec2.internal"),
        );
        self.create(
            "gpu-terminating",
            "gpu",
            Some(("m5.large", "spot", "us-east-1a")),
        );
        self.set_status("gpu-terminating", &all, Some("ip-10-0-1-9.ec2.internal"));
        self.delete("gpu-terminating");
    }

    /// Runs `program args…` with HOME in the temporary directory, no KUBECONFIG and stdin
    /// from /dev/null (never a terminal).
    pub async fn run(&self, program: &Path, args: &[&str], path: Option<OsString>) -> Output {
        run_isolated(self.dir.path(), program, args, path).await
    }

    /// Runs the plugin binary directly.
    pub async fn plugin(&self, args: &[&str]) -> Output {
        self.run(Path::new(BIN), args, None).await
    }
}

/// Runs `program args…` with HOME at `home`, no KUBECONFIG, not in-cluster, stdin from
/// /dev/null (never a terminal) and, when given, this PATH.
pub async fn run_isolated(
    home: &Path,
    program: &Path,
    args: &[&str],
    path: Option<OsString>,
) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST");
    if let Some(path) = path {
        cmd.env("PATH", path);
    }
    cmd.output().await.expect("run command")
}

/// Asserts that a command exited with `code` and its stderr contains `needle`.
pub fn assert_fails_with(out: &Output, code: i32, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert!(err.contains(needle), "no {needle:?} in {err}");
}

/// A command's stdout as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A command's stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// An owned row of cells.
pub fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| (*c).to_owned()).collect()
}

/// kubectl from PATH; the fidelity tests fail (never skip) without it.
pub fn kubectl() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|p| p.is_file())
        .expect("kubectl must be on PATH for the plugin tests (e.g. /usr/bin/kubectl v1.32)")
}

/// PATH with the plugin binary's directory first, so kubectl discovers `kubectl-karpenter`.
pub fn plugin_path() -> OsString {
    let bin_dir = Path::new(BIN)
        .parent()
        .expect("binary directory")
        .to_path_buf();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::iter::once(bin_dir).chain(std::env::split_paths(&rest));
    std::env::join_paths(dirs).expect("join PATH")
}

/// A kubeconfig with a live context and one whose server port has nothing listening. The dead
/// one is plain http, so its user has no credentials (the plugin refuses to send them over http).
pub fn two_contexts(cluster: &Cluster, current: &str) -> PathBuf {
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: live\n  cluster: {{server: '{live}', certificate-authority-data: {ca}}}\n\
         - name: dead\n  cluster: {{server: 'http://127.0.0.1:{dead_port}'}}\nusers:\n- name: me\n  user: {{token: '{token}'}}\n\
         - name: anonymous\n  user: {{}}\n\
         contexts:\n- name: live\n  context: {{cluster: live, user: me}}\n- name: dead\n  context: {{cluster: dead, user: anonymous}}\n\
         current-context: {current}\n",
        live = cluster.sandbox.url(),
        ca = cluster.sandbox.certificate_authority_data(),
        token = cluster.sandbox.token(),
    );
    let path = cluster.dir.path().join(format!("two-{current}"));
    std::fs::write(&path, text).expect("write kubeconfig");
    path
}
