//! End-to-end test of `kubectl karpenter disruption` and `disruption explain`, run through real
//! kubectl against a running sandbox (API server, simulated kube-scheduler, kubelets and cloud,
//! and the controller). Two `web` replicas and a `pinned` pod each get a node of their own
//! (hostname anti-affinity); `pinned` carries `karpenter.sh/do-not-disrupt` and web's
//! PodDisruptionBudget allows nothing while both replicas must stay, so every node is blocked
//! and the report names each blocker; scaled to 0, the two web nodes become empty and
//! consolidatable. The controller's consolidation validation delay is an hour, so it decides
//! but never acts while the test reads its verdicts.

use crate::support;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use controller::cloudprovider::build::CloudOptions;
use controller::runtime::Settings;
use karpenter::sandbox::{ClusterConfig, LocalCluster, start_cluster, with_defaults};
use karpenter::workload::parse_yaml;
use serde_json::Value;

use support::{BIN, assert_fails_with, kubectl, plugin_path, run_isolated, stderr, stdout};

const MANIFESTS: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  disruption: {budgets: [{nodes: "100%"}]}
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
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
    metadata: {labels: {app: web, spread: one-per-node}}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - labelSelector: {matchLabels: {spread: one-per-node}}
              topologyKey: kubernetes.io/hostname
      containers: [{name: c, image: nginx, resources: {requests: {cpu: 500m, memory: 256Mi}}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: web}}
---
apiVersion: v1
kind: Pod
metadata:
  name: pinned
  namespace: default
  labels: {spread: one-per-node}
  annotations: {karpenter.sh/do-not-disrupt: "true"}
spec:
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector: {matchLabels: {spread: one-per-node}}
          topologyKey: kubernetes.io/hostname
  containers: [{name: c, image: nginx, resources: {requests: {cpu: 500m, memory: 256Mi}}}]
"#;

struct Live {
    cluster: LocalCluster,
    dir: tempfile::TempDir,
}

impl Live {
    async fn start() -> Live {
        let dir = tempfile::tempdir().expect("tempdir");
        let manifests = parse_yaml(Path::new("disruption.yaml"), MANIFESTS).expect("parses");
        let manifests = with_defaults(manifests, "sandbox").expect("default EC2NodeClass");
        let cfg = ClusterConfig {
            port: 0,
            registration_delay: Duration::from_millis(300),
            settings: Settings {
                cluster_name: "sandbox".into(),
                batch_idle: Duration::from_millis(300),
                batch_max: Duration::from_secs(3),
                disruption_poll: Duration::from_millis(500),
                // Decided, never carried out during the test.
                consolidation_validation_delay: Duration::from_secs(3600),
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

    /// `kubectl karpenter ARGS --kubeconfig K` through real kubectl's plugin discovery.
    async fn kubectl_karpenter(&self, args: &[&str]) -> Output {
        let kc = self.kubeconfig();
        let mut all = vec!["karpenter"];
        all.extend_from_slice(args);
        all.extend(["--kubeconfig", kc.as_str()]);
        run_isolated(self.dir.path(), &kubectl(), &all, Some(plugin_path())).await
    }

    /// The plugin binary itself.
    async fn plugin(&self, args: &[&str]) -> Output {
        let kc = self.kubeconfig();
        let mut all = args.to_vec();
        all.extend(["--kubeconfig", kc.as_str()]);
        run_isolated(self.dir.path(), Path::new(BIN), &all, None).await
    }

    async fn kubectl(&self, args: &[&str]) -> Output {
        let kc = self.kubeconfig();
        let mut all = vec!["--kubeconfig", kc.as_str()];
        all.extend_from_slice(args);
        run_isolated(self.dir.path(), &kubectl(), &all, None).await
    }

    /// The JSON report once `ready` holds for it; panics after two minutes.
    async fn report_when(&self, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let out = self.plugin(&["disruption", "-o", "json"]).await;
            assert!(out.status.success(), "{}", stderr(&out));
            let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
            if ready(&report) {
                return report;
            }
            assert!(
                Instant::now() < deadline,
                "never {what}; last report:\n{report:#}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

fn nodes(report: &Value) -> Vec<Value> {
    report["nodes"].as_array().cloned().unwrap_or_default()
}

fn message(node: &Value) -> &str {
    node["verdict"]["message"].as_str().unwrap_or_default()
}

/// The node hosting pod `default/pinned`, from `kubectl get pod`.
async fn node_of_pinned(live: &Live) -> String {
    let out = live
        .kubectl(&["get", "pod", "pinned", "-o", "jsonpath={.spec.nodeName}"])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_every_blocker_then_finds_the_empty_nodes() {
    let live = Live::start().await;

    // Three nodes, each blocked: pinned's by its annotation, web's by the PodDisruptionBudget.
    // (A node can be blocked for a while before its pod is bound, for another reason: the
    // report is taken once every blocker is the one expected.)
    let report = live
        .report_when("three blocked nodes", |r| {
            let n = nodes(r);
            n.len() == 3
                && n.iter().all(|n| n["verdict"]["status"] == "Blocked")
                && n.iter()
                    .filter(|n| message(n).contains("PodDisruptionBudget"))
                    .count()
                    == 2
                && n.iter()
                    .any(|n| message(n).starts_with("pod default/pinned has"))
        })
        .await;
    let pinned_node = node_of_pinned(&live).await;
    let pinned = nodes(&report)
        .into_iter()
        .find(|n| n["node"] == pinned_node.as_str())
        .expect("pinned's node is reported");
    assert_eq!(
        message(&pinned),
        "pod default/pinned has karpenter.sh/do-not-disrupt"
    );
    assert_eq!(pinned["verdict"]["cause"]["kind"], "podOptsOut");
    for n in nodes(&report)
        .iter()
        .filter(|n| n["node"] != pinned_node.as_str())
    {
        assert!(
            message(n).starts_with(
                "PodDisruptionBudget default/web allows no disruption (pod default/web-"
            ),
            "{n:#}"
        );
        assert_eq!(n["pods"], 1);
    }
    let pool = &report["nodepools"][0];
    assert_eq!(pool["nodepool"], "default");
    assert_eq!(pool["consolidationPolicy"], "WhenEmptyOrUnderutilized");
    assert_eq!(pool["budgets"][2]["reason"], "Underutilized");
    assert_eq!(pool["budgets"][2]["allowed"], 3);

    // The text report through kubectl: both tables and the summary.
    let out = live.kubectl_karpenter(&["disruption"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("NODEPOOL   POLICY                     CONSOLIDATE-AFTER"),
        "{text}"
    );
    assert!(text.contains("\nNODE "), "{text}");
    assert!(
        text.contains("pod default/pinned has karpenter.sh/do-not-disrupt"),
        "{text}"
    );
    assert!(
        text.trim_end().ends_with(
            "3 nodes: 0 consolidatable (saving up to $0.0000/h), 3 blocked, 0 disrupting"
        ),
        "{text}"
    );

    // YAML is the same document.
    let out = live.plugin(&["disruption", "-o", "yaml"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let yaml: Value = serde_saphyr::from_str(&stdout(&out)).expect("YAML report");
    assert_eq!(nodes(&yaml).len(), 3);

    // The what-if of pinned's node: its blocker, and where its pod would go.
    let out = live
        .kubectl_karpenter(&["disruption", "explain", &format!("node/{pinned_node}")])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("Node:            {pinned_node}\n")),
        "{text}"
    );
    assert!(
        text.contains("Blockers:\n  pod default/pinned has karpenter.sh/do-not-disrupt\n"),
        "{text}"
    );
    assert!(text.contains("Placements:\n  POD "), "{text}");
    assert!(text.contains("  default/pinned "), "{text}");
    for format in ["json", "yaml"] {
        let out = live
            .plugin(&["disruption", "explain", &pinned_node, "-o", format])
            .await;
        assert!(out.status.success(), "{}", stderr(&out));
        let doc: Value = if format == "json" {
            serde_json::from_slice(&out.stdout).expect("JSON")
        } else {
            serde_saphyr::from_str(&stdout(&out)).expect("YAML")
        };
        assert_eq!(doc["node"]["node"], pinned_node.as_str(), "{format}");
        assert_eq!(doc["placements"][0]["pod"], "default/pinned", "{format}");
        // pinned's anti-affinity keeps it off the web nodes: it needs a node of its own.
        assert_eq!(
            doc["placements"][0]["to"]["kind"], "newNodeClaim",
            "{doc:#}"
        );
    }

    // Errors: an unknown node, an unknown NodePool.
    let out = live
        .plugin(&["disruption", "explain", "no-such-node"])
        .await;
    assert_fails_with(
        &out,
        2,
        "no Karpenter NodeClaim or node named \"no-such-node\"",
    );
    let out = live.plugin(&["disruption", "--nodepool", "nope"]).await;
    assert_fails_with(&out, 2, "no NodePool named \"nope\"");

    // Scaled to 0, the web nodes are empty and consolidatable; pinned's node stays blocked.
    let scaled = live
        .kubectl(&["scale", "deployment/web", "--replicas=0"])
        .await;
    assert!(scaled.status.success(), "{}", stderr(&scaled));
    let report = live
        .report_when("two empty nodes", |r| {
            nodes(r)
                .iter()
                .filter(|n| n["verdict"]["status"] == "Consolidatable")
                .count()
                == 2
        })
        .await;
    for n in nodes(&report) {
        if n["node"] == pinned_node.as_str() {
            assert_eq!(n["verdict"]["status"], "Blocked", "{n:#}");
        } else {
            assert!(message(&n).starts_with("delete: empty (saves $"), "{n:#}");
            assert_eq!(n["verdict"]["action"]["kind"], "delete");
            assert_eq!(n["verdict"]["action"]["reason"], "Empty");
        }
    }
    let out = live
        .kubectl_karpenter(&["disruption", "--nodepool", "default"])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("3 nodes: 2 consolidatable"),
        "{}",
        stdout(&out)
    );
}
