//! Lists page as kube-apiserver pages them, seen through real kubectl: `kubectl get
//! --chunk-size` (kubectl's default is 500 per request) returns every object, in tables and as
//! JSON; a raw `limit` returns that many with a `continue` token and `remainingItemCount`, and
//! following the tokens gives the whole list once, all pages at the first page's
//! resourceVersion; a token that is not one of ours is a 400.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Output};

use sandbox::Sandbox;
use serde_json::{Value, json};

/// A sandbox with `n` ConfigMaps in `default` and `n` in `kube-system`, and its kubeconfig.
struct Cluster {
    _sandbox: Sandbox,
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Cluster {
    async fn start(n: usize) -> Cluster {
        let sandbox = Sandbox::start(0).await.expect("sandbox starts");
        let store = sandbox.store();
        let rt = store
            .resource("", "v1", "configmaps")
            .expect("configmaps are served");
        for ns in ["default", "kube-system"] {
            for i in 0..n {
                let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("cm-{i:02}"), "labels": {"parity": (i % 2).to_string()}},
                    "data": {"i": i.to_string()}});
                store.create(&rt, ns, cm).expect("ConfigMap created");
            }
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        sandbox
            .write_kubeconfig(&kubeconfig)
            .expect("kubeconfig written");
        Cluster {
            _sandbox: sandbox,
            _dir: dir,
            kubeconfig,
        }
    }

    /// kubectl (`$KUBECTL`, else `kubectl` on PATH), off the runtime.
    async fn kubectl(&self, args: &[&str]) -> Output {
        let kubectl = std::env::var_os("KUBECTL").unwrap_or_else(|| "kubectl".into());
        let mut cmd = Command::new(kubectl);
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        tokio::task::spawn_blocking(move || cmd.output().expect("kubectl runs"))
            .await
            .expect("kubectl thread")
    }

    /// kubectl's stdout, which must have succeeded.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args).await;
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    async fn raw(&self, path: &str) -> Value {
        serde_json::from_str(&self.ok(&["get", "--raw", path]).await).expect("JSON")
    }
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["metadata"]["namespace"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_page_with_limit_and_continue() {
    let c = Cluster::start(7).await;
    let whole = c.raw("/api/v1/configmaps").await;
    let all = names(&whole);
    assert!(all.len() >= 14, "{all:?}");
    assert!(whole["metadata"].get("continue").is_none());

    // kubectl pages with --chunk-size, in tables and in JSON, and misses nothing.
    let table = c
        .ok(&["get", "configmaps", "-A", "--chunk-size=3", "--no-headers"])
        .await;
    assert_eq!(table.lines().count(), all.len(), "{table}");
    let json: Value = serde_json::from_str(
        &c.ok(&["get", "configmaps", "-A", "--chunk-size=4", "-o", "json"])
            .await,
    )
    .expect("JSON");
    assert_eq!(names(&json), all);

    // By hand: a page of 5, then the rest by following the tokens.
    let mut seen = Vec::new();
    let mut path = "/api/v1/configmaps?limit=5".to_string();
    let mut rvs = BTreeSet::new();
    loop {
        let page = c.raw(&path).await;
        let got = names(&page);
        assert!(got.len() <= 5, "{got:?}");
        seen.extend(got);
        rvs.insert(page["metadata"]["resourceVersion"].to_string());
        match page["metadata"]["continue"].as_str() {
            Some(token) => {
                assert_eq!(
                    page["metadata"]["remainingItemCount"],
                    json!(all.len() - seen.len())
                );
                path = format!("/api/v1/configmaps?limit=5&continue={token}");
            }
            None => break,
        }
    }
    assert_eq!(seen, all, "every object once, in order");
    assert_eq!(
        rvs.len(),
        1,
        "one resourceVersion for the whole list: {rvs:?}"
    );

    // A selector: paged, but without a remaining count (as kube-apiserver).
    let odd = c
        .raw("/api/v1/namespaces/default/configmaps?limit=2&labelSelector=parity%3D1")
        .await;
    assert_eq!(names(&odd), ["default/cm-01", "default/cm-03"]);
    assert!(odd["metadata"]["continue"].is_string());
    assert!(odd["metadata"].get("remainingItemCount").is_none());

    // A token that is not one of ours, and a limit that is not a number.
    let bad = c
        .kubectl(&["get", "--raw", "/api/v1/configmaps?limit=5&continue=bogus!"])
        .await;
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("BadRequest") || stderr.contains("400"),
        "{stderr}"
    );
    let status: Value = serde_json::from_str(&format!(
        "{{{}",
        stderr.split_once('{').map(|(_, s)| s).unwrap_or_default()
    ))
    .unwrap_or_default();
    assert!(
        status["message"]
            .as_str()
            .unwrap_or(&stderr)
            .contains("continue key is not valid"),
        "{stderr}"
    );
    let nan = c
        .kubectl(&["get", "--raw", "/api/v1/configmaps?limit=many"])
        .await;
    assert!(!nan.status.success());
}
