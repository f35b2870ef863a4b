//! End-to-end test of the durable disruption history and `kubectl karpenter history` in a
//! running sandbox (API server, simulated scheduler, kubelets and cloud, and the controller, all
//! in-process), driven and read with real kubectl: a NodeClaim deleted by hand is recorded as
//! `Deleted` with the pods its drain moved, an empty node consolidated away as `Empty` with its
//! price and cost change; the records are in the ConfigMap `karpenter-disruption-history` (plain
//! `kubectl get configmap`), in every output format of `kubectl karpenter history`, and kept
//! by a restarted controller, which appends the next removal to them. The orchestrator's poll and validation
//! delays are shortened to keep it quick.

use crate::support;

use std::ffi::OsString;
use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant};

use controller::cloudprovider::build::CloudOptions;
use controller::runtime::Settings;
use karpenter::sandbox::{ClusterConfig, LocalCluster, start_cluster, with_defaults};
use karpenter::workload::parse_yaml;
use serde_json::Value;

use support::{kubectl, plugin_path, run_isolated, stderr, stdout};

/// A NodePool that consolidates only empty nodes, at once, and a Deployment of two 1-cpu pods.
const WORLD: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 0s, budgets: [{nodes: "100%"}]}
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      expireAfter: 720h
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}
      - {key: kubernetes.io/arch, operator: In, values: [amd64]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        image: app
        resources: {requests: {cpu: "1", memory: 1Gi}}
"#;

const SETTLE: Duration = Duration::from_secs(90);

struct Live {
    cluster: LocalCluster,
    dir: tempfile::TempDir,
}

impl Live {
    async fn start() -> Live {
        let dir = tempfile::tempdir().expect("tempdir");
        let manifests = parse_yaml(Path::new("history.yaml"), WORLD).expect("world parses");
        let manifests = with_defaults(manifests, "sandbox").expect("default EC2NodeClass");
        let cfg = ClusterConfig {
            port: 0,
            registration_delay: Duration::from_millis(500),
            settings: Settings {
                cluster_name: "sandbox".into(),
                batch_idle: Duration::from_millis(300),
                batch_max: Duration::from_secs(3),
                disruption_poll: Duration::from_millis(500),
                consolidation_validation_delay: Duration::from_secs(2),
                ..Settings::default()
            },
            kubeconfig: Some(dir.path().join("kubeconfig")),
            cloud: CloudOptions::default_sim(),
            clock: std::sync::Arc::new(karpenter_core::clock::SystemClock),
            controller: true,
        };
        let cluster = start_cluster(&cfg, &manifests)
            .await
            .expect("cluster starts");
        Live { cluster, dir }
    }

    fn kubeconfig(&self) -> String {
        self.cluster.kubeconfig.to_string_lossy().into_owned()
    }

    /// Real kubectl against the sandbox, with the plugin on PATH.
    async fn kubectl(&self, args: &[&str]) -> Output {
        // After the arguments: kubectl refuses flags before a plugin's name.
        let kc = self.kubeconfig();
        let mut all = args.to_vec();
        all.extend_from_slice(&["--kubeconfig", kc.as_str()]);
        let path: OsString = plugin_path();
        run_isolated(self.dir.path(), &kubectl(), &all, Some(path)).await
    }

    async fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args).await;
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        stdout(&out)
    }

    /// `kubectl karpenter history ARGS` (through kubectl's plugin discovery): exit code, stdout.
    async fn history(&self, args: &[&str]) -> (Option<i32>, String) {
        let mut all = vec!["karpenter", "history"];
        all.extend_from_slice(args);
        let out = self.kubectl(&all).await;
        (out.status.code(), stdout(&out) + &stderr(&out))
    }

    fn objects(&self, group: &str, plural: &str) -> Vec<Value> {
        let key = sandbox::registry::TypeKey {
            group: group.into(),
            plural: plural.into(),
        };
        self.cluster
            .sandbox
            .store()
            .objects(&key)
            .iter()
            .map(|v| (**v).clone())
            .collect()
    }

    fn initialized_claims(&self) -> Vec<Value> {
        self.objects("karpenter.sh", "nodeclaims")
            .into_iter()
            .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
            .filter(|c| {
                c["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|x| x["type"] == "Initialized" && x["status"] == "True")
                })
            })
            .collect()
    }

    fn running_web_pods(&self) -> usize {
        self.objects("", "pods")
            .iter()
            .filter(|p| p["metadata"]["labels"]["app"] == "web")
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .filter(|p| p["status"]["phase"] == "Running")
            .count()
    }

    /// The records of `kubectl karpenter history -o json` once `done` holds for them.
    async fn records_when(&self, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + SETTLE;
        loop {
            let (code, out) = self.history(&["-o", "json"]).await;
            assert_eq!(code, Some(0), "{out}");
            let records: Vec<Value> = serde_json::from_str(&out).unwrap_or_default();
            if done(&records) {
                return records;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; history:\n{out}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    async fn until(&self, what: &str, cond: impl Fn(&Live) -> bool) {
        let deadline = Instant::now() + SETTLE;
        while !cond(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn with_reason<'a>(records: &'a [Value], reason: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["reason"] == reason).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn removals_are_recorded_durably_and_shown_in_every_format() {
    let mut live = Live::start().await;
    live.until("both web pods running on a Karpenter node", |l| {
        l.running_web_pods() == 2 && !l.initialized_claims().is_empty()
    })
    .await;
    let (code, out) = live.history(&[]).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("No resources found"), "{out}");

    // A user deletes the NodeClaim that runs the pods: recorded as Deleted, pods moved.
    let first = live.initialized_claims()[0]["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    live.kubectl_ok(&["delete", "nodeclaim", &first, "--wait=false"])
        .await;
    let records = live
        .records_when("the deleted NodeClaim recorded", |r| {
            !with_reason(r, "Deleted").is_empty()
        })
        .await;
    let deleted = with_reason(&records, "Deleted")[0];
    assert_eq!(deleted["nodeclaim"], first.as_str());
    assert_eq!(deleted["nodepool"], "default");
    assert_eq!(deleted["outcome"], "Succeeded");
    assert_eq!(deleted["podsMoved"], 2, "{deleted:#}");
    let pods: Vec<&str> = deleted["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        pods.iter().all(|p| p.starts_with("default/web-")),
        "{pods:?}"
    );
    let price = deleted["price"].as_f64().expect("a price");
    assert!(price > 0.0);
    assert_eq!(deleted["costChange"].as_f64(), Some(-price));
    assert!(deleted["instanceType"].is_string() && deleted["zone"].is_string());

    // The pods land on a new node; scaled to zero it is empty and consolidated away.
    live.until("the pods running again", |l| {
        l.running_web_pods() == 2 && !l.initialized_claims().is_empty()
    })
    .await;
    let second = live.initialized_claims()[0]["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    live.kubectl_ok(&["scale", "deployment/web", "--replicas=0", "-n", "default"])
        .await;
    let records = live
        .records_when("the empty node recorded", |r| {
            !with_reason(r, "Empty").is_empty()
        })
        .await;
    let empty = with_reason(&records, "Empty")[0];
    assert_eq!(empty["nodeclaim"], second.as_str());
    assert_eq!(empty["podsMoved"], 0);
    assert!(
        empty["costChange"].as_f64().is_some_and(|c| c < 0.0),
        "{empty:#}"
    );
    let decided: jiff::Timestamp = empty["decided"]
        .as_str()
        .expect("decided")
        .parse()
        .expect("RFC 3339");
    let finished: jiff::Timestamp = empty["finished"]
        .as_str()
        .expect("finished")
        .parse()
        .expect("RFC 3339");
    assert!(decided <= finished);
    let ids: std::collections::BTreeSet<&str> =
        records.iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(ids.len(), records.len(), "each removal once: {records:#?}");
    let position = |name: &str| records.iter().position(|r| r["nodeclaim"] == name);
    assert!(
        position(&first) < position(&second),
        "oldest first: {records:#?}"
    );

    // Plain kubectl reads the ConfigMap.
    let yaml = live
        .kubectl_ok(&[
            "get",
            "configmap",
            "karpenter-disruption-history",
            "-n",
            "kube-system",
            "-o",
            "yaml",
        ])
        .await;
    assert!(yaml.contains("records.jsonl"), "{yaml}");
    assert!(yaml.contains(&first) && yaml.contains(&second), "{yaml}");

    // Every output format.
    let (code, table) = live.history(&[]).await;
    assert_eq!(code, Some(0), "{table}");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "AGE",
            "NODECLAIM",
            "NODEPOOL",
            "INSTANCE-TYPE",
            "REASON",
            "OUTCOME",
            "PODS",
            "COST-CHANGE"
        ]
    );
    let row = |name: &str| -> Vec<String> {
        lines
            .iter()
            .find(|l| l.contains(name))
            .map(|l| l.split_whitespace().map(String::from).collect())
            .unwrap_or_default()
    };
    let deleted_row = row(&first);
    assert_eq!(deleted_row[2..3], ["default"]);
    assert_eq!(deleted_row[4..7], ["Deleted", "Removed", "2"], "{table}");
    assert!(
        deleted_row[7].starts_with("-$") && deleted_row[7].ends_with("/h"),
        "{table}"
    );
    assert_eq!(row(&second)[4..7], ["Empty", "Removed", "0"], "{table}");
    let line_of = |name: &str| lines.iter().position(|l| l.contains(name));
    assert!(line_of(&first) < line_of(&second), "oldest first:\n{table}");

    let (code, wide) = live.history(&["-o", "wide"]).await;
    assert_eq!(code, Some(0), "{wide}");
    let header: Vec<&str> = wide
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header[8..],
        [
            "NODE",
            "ZONE",
            "CAPACITY-TYPE",
            "PRICE/HOUR",
            "REPLACEMENT",
            "DECIDED",
            "MESSAGE"
        ]
    );
    assert!(
        wide.contains("on-demand") && wide.contains(&format!("${price:.4}")),
        "{wide}"
    );

    let (code, yaml) = live.history(&["-o", "yaml"]).await;
    assert_eq!(code, Some(0), "{yaml}");
    assert!(yaml.starts_with("- id: "), "{yaml}");
    assert!(
        yaml.contains("podsMoved: 2") && yaml.contains("reason: Empty"),
        "{yaml}"
    );

    let (code, json) = live.history(&["-o", "json", "--nodepool", "other"]).await;
    assert_eq!((code, json.trim()), (Some(0), "[]"));
    let (_, json) = live
        .history(&["-o", "json", "--since", "24h", "--nodepool", "default"])
        .await;
    let recent: Vec<Value> = serde_json::from_str(&json).expect("JSON list");
    assert_eq!(recent, records);

    // A restarted controller keeps the history (it lives in the API server) and appends to it.
    let cloud = Arc::clone(&live.cluster.cloud);
    live.cluster.stop_controller();
    live.cluster.start_controller(cloud);
    live.kubectl_ok(&["scale", "deployment/web", "--replicas=1", "-n", "default"])
        .await;
    live.until("one web pod running", |l| l.running_web_pods() == 1)
        .await;
    live.kubectl_ok(&["scale", "deployment/web", "--replicas=0", "-n", "default"])
        .await;
    let n = records.len();
    let after = live
        .records_when("another removal after the restart", |r| {
            r.len() > n && r[n..].iter().any(|x| x["reason"] == "Empty")
        })
        .await;
    assert_eq!(
        after[..n],
        records[..],
        "the earlier records kept as they were"
    );
}
