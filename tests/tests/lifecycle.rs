//! NodeClaim lifecycle scenarios in the sandbox: termination through the finalizers (drain in
//! priority groups, PodDisruptionBudgets, do-not-disrupt, terminationGracePeriod), liveness,
//! expiration, ownership by the NodePool, and garbage collection in both directions.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use controller::cloudprovider::CloudProvider;
use controller::runtime::Settings;
use crds::{EC2NodeClass, NodeClaim};
use karpenter_core::capacity::InstanceType;
use karpenter_core::cloud::CloudError;
use karpenter_core::cloud::Instance;
use karpenter_core::cloud::Launched;
use karpenter_core::cloud::NodeClassResolution;
use serde_json::Value;
use tests::{Options, TestCluster, condition, deployment};

const SETTLE: Duration = Duration::from_secs(60);

fn name(o: &Value) -> String {
    o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn claim_named(c: &TestCluster, n: &str) -> Option<Value> {
    c.nodeclaims().into_iter().find(|x| name(x) == n)
}

fn pods(c: &TestCluster, app: &str) -> Vec<Value> {
    c.objects("", "pods")
        .into_iter()
        .filter(|p| p.pointer("/metadata/labels/app").and_then(Value::as_str) == Some(app))
        .collect()
}

fn running(c: &TestCluster, app: &str) -> usize {
    pods(c, app)
        .iter()
        .filter(|p| p.pointer("/status/phase").and_then(Value::as_str) == Some("Running"))
        .count()
}

fn events_mentioning(c: &TestCluster, object: &str, reason: &str, text: &str) -> Vec<String> {
    c.events(object, reason)
        .iter()
        .filter_map(|e| e["message"].as_str().map(String::from))
        .filter(|m| m.contains(text))
        .collect()
}

/// Wait until one NodeClaim is initialized and `replicas` pods of `app` run; return it.
async fn one_ready_claim(c: &TestCluster, app: &str, replicas: usize) -> Value {
    c.eventually("one initialized NodeClaim", SETTLE, |c| {
        let claims = c.nodeclaims();
        claims.len() == 1
            && condition(&claims[0], "Initialized").as_deref() == Some("True")
            && running(c, app) == replicas
    })
    .await;
    c.nodeclaims().remove(0)
}

/// Wait until the NodeClaim, its node and its instance are all gone.
async fn gone(c: &TestCluster, claim: &Value, within: Duration) {
    let n = name(claim);
    let node = claim["status"]["nodeName"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let pid = claim["status"]["providerID"]
        .as_str()
        .unwrap_or("")
        .to_string();
    c.eventually(
        &format!("{n}, node {node} and instance {pid} gone"),
        within,
        |c| {
            claim_named(c, &n).is_none()
                && !c.objects("", "nodes").iter().any(|x| name(x) == node)
                && !c.sim().instances().iter().any(|i| i.provider_id == pid)
        },
    )
    .await;
}

async fn apply(c: &TestCluster, yaml: &str) {
    let out = c.kubectl(&["apply", "-f", "-"], Some(yaml)).await;
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `workload` on a cluster whose default NodePool template has `template_spec` merged in
/// before the controller starts.
async fn start_with_template(workload: &str, template_spec: &str) -> TestCluster {
    let mut c = TestCluster::start(
        workload,
        Options {
            controller: false,
            ..Options::default()
        },
    )
    .await;
    let patch = format!(r#"{{"spec":{{"template":{{"spec":{template_spec}}}}}}}"#);
    c.kubectl_ok(&["patch", "nodepool", "default", "--type=merge", "-p", &patch])
        .await;
    let cloud = Arc::clone(&c.cluster.cloud);
    c.cluster.start_controller(cloud);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pdb_blocks_the_drain_until_it_allows_evictions() {
    let c = TestCluster::start(&deployment("web", 2, "500m", "256Mi"), Options::default()).await;
    let claim = one_ready_claim(&c, "web", 2).await;
    let node = claim["status"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    apply(
        &c,
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: web\nspec:\n  minAvailable: 2\n  selector:\n    matchLabels: {app: web}\n",
    )
    .await;
    c.kubectl_ok(&["delete", "nodeclaim", &name(&claim), "--wait=false"])
        .await;
    // The node is tainted and waits; the NodeClaim says it is draining, and Events say why.
    c.eventually(
        "a FailedDraining event naming the PDB refusal",
        SETTLE,
        |c| !events_mentioning(c, &node, "FailedDraining", "evicting pod default/web-").is_empty(),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waiting = claim_named(&c, &name(&claim)).expect("the NodeClaim waits for its drain");
    assert_eq!(condition(&waiting, "Drained").as_deref(), Some("Unknown"));
    assert_eq!(running(&c, "web"), 2, "no pod was evicted past the PDB");
    let n = c
        .objects("", "nodes")
        .into_iter()
        .find(|x| name(x) == node)
        .expect("the node waits");
    assert!(
        n["spec"]["taints"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["key"] == "karpenter.sh/disrupted")),
        "the node is tainted karpenter.sh/disrupted"
    );
    assert!(
        !events_mentioning(&c, &name(&claim), "FailedDraining", "web-").is_empty(),
        "the NodeClaim's own events say what blocks it"
    );
    // Once the PDB allows it, the pods move to a replacement and the old node goes away.
    c.merge_patch("pdb", "web", r#"{"spec":{"minAvailable":1}}"#)
        .await;
    gone(&c, &claim, SETTLE).await;
    c.eventually("both pods running on the replacement", SETTLE, |c| {
        running(c, "web") == 2
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_do_not_disrupt_pod_holds_the_node_until_it_leaves() {
    let c = TestCluster::start(&deployment("web", 1, "500m", "256Mi"), Options::default()).await;
    let claim = one_ready_claim(&c, "web", 1).await;
    let node = claim["status"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let pod = name(&pods(&c, "web")[0]);
    c.kubectl_ok(&["annotate", "pod", &pod, "karpenter.sh/do-not-disrupt=true"])
        .await;
    c.kubectl_ok(&["delete", "nodeclaim", &name(&claim), "--wait=false"])
        .await;
    c.eventually(
        "a FailedDraining event naming the annotation",
        SETTLE,
        |c| {
            !events_mentioning(c, &node, "FailedDraining", "karpenter.sh/do-not-disrupt").is_empty()
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        c.objects("", "pods").iter().any(|p| name(p) == pod),
        "the do-not-disrupt pod was not evicted"
    );
    // `kubectl describe nodeclaim` tells the story so far: launch, registration,
    // initialization, and the drain that waits.
    let described = c
        .kubectl_ok(&["describe", "nodeclaim", &name(&claim)])
        .await;
    for expected in [
        "Launched",
        "Registered",
        "Initialized",
        "Draining",
        "karpenter.sh/do-not-disrupt",
        "Drained",
    ] {
        assert!(
            described.contains(expected),
            "describe lacks {expected:?}:\n{described}"
        );
    }
    c.kubectl_ok(&["annotate", "pod", &pod, "karpenter.sh/do-not-disrupt-"])
        .await;
    gone(&c, &claim, SETTLE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_termination_grace_period_deletes_what_will_not_leave() {
    // A pod with a 5s grace period on a NodePool with a 12s terminationGracePeriod: the pod
    // must be deleted 12s - 5s = 7s after the NodeClaim, with the seconds that remain.
    let workload = deployment("web", 1, "500m", "256Mi").replace(
        "    spec:\n      containers:",
        "    spec:\n      terminationGracePeriodSeconds: 5\n      containers:",
    );
    let c = start_with_template(&workload, r#"{"terminationGracePeriod":"12s"}"#).await;
    let claim = one_ready_claim(&c, "web", 1).await;
    assert_eq!(claim["spec"]["terminationGracePeriod"], "12s");
    let pod = name(&pods(&c, "web")[0]);
    assert_eq!(
        pods(&c, "web")[0]["spec"]["terminationGracePeriodSeconds"],
        5
    );
    c.kubectl_ok(&["annotate", "pod", &pod, "karpenter.sh/do-not-disrupt=true"])
        .await;
    c.kubectl_ok(&["delete", "nodeclaim", &name(&claim), "--wait=false"])
        .await;
    c.eventually("the termination timestamp annotation", SETTLE, |c| {
        claim_named(c, &name(&claim)).is_some_and(|x| {
            x.pointer("/metadata/annotations/karpenter.sh~1nodeclaim-termination-timestamp")
                .is_some()
        })
    })
    .await;
    let stamped = claim_named(&c, &name(&claim)).expect("deleting");
    let deleted: jiff::Timestamp = stamped["metadata"]["deletionTimestamp"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("deletionTimestamp");
    let end: jiff::Timestamp =
        stamped["metadata"]["annotations"]["karpenter.sh/nodeclaim-termination-timestamp"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .expect("RFC 3339 termination timestamp");
    assert_eq!(
        end.duration_since(deleted),
        jiff::SignedDuration::from_secs(12)
    );
    c.eventually("a TerminationGracePeriodExpiring event", SETTLE, |c| {
        c.events(&name(&claim), "TerminationGracePeriodExpiring")
            .len()
            == 1
    })
    .await;
    // Until 7s after deletion the do-not-disrupt pod stays.
    let wait =
        (deleted + jiff::SignedDuration::from_secs(5)).duration_since(jiff::Timestamp::now());
    if let Ok(wait) = Duration::try_from(wait) {
        tokio::time::sleep(wait).await;
    }
    assert!(
        c.objects("", "pods").iter().any(|p| name(p) == pod),
        "deleted before the termination time minus its grace period"
    );
    c.eventually("the do-not-disrupt pod deleted", SETTLE, |c| {
        !c.objects("", "pods").iter().any(|p| name(p) == pod)
    })
    .await;
    c.eventually("a Disrupted event on the pod", SETTLE, |c| {
        !c.events(&pod, "Disrupted").is_empty()
    })
    .await;
    let disrupted = c.events(&pod, "Disrupted");
    let message = disrupted
        .first()
        .and_then(|e| e["message"].as_str())
        .expect("a Disrupted event on the pod");
    let grace: i64 = message
        .rsplit("grace period ")
        .next()
        .and_then(|g| g.trim_end_matches("s)").parse().ok())
        .expect("the event names the grace period");
    assert!((1..=5).contains(&grace), "{message}");
    gone(&c, &claim, SETTLE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drained_nodes_lose_workloads_before_daemonsets_and_critical_pods() {
    let c = TestCluster::start(
        &format!(
            "{}---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: logs\nspec:\n  selector:\n    matchLabels: {{app: logs}}\n  template:\n    metadata:\n      labels: {{app: logs}}\n    spec:\n      containers:\n      - name: c\n        image: busybox\n        resources:\n          requests: {{cpu: 50m, memory: 32Mi}}\n",
            deployment("web", 2, "500m", "256Mi")
        ),
        Options::default(),
    )
    .await;
    let claim = one_ready_claim(&c, "web", 2).await;
    c.eventually("the DaemonSet pod runs", SETTLE, |c| {
        running(c, "logs") == 1
    })
    .await;
    c.kubectl_ok(&["delete", "nodeclaim", &name(&claim), "--wait=false"])
        .await;
    gone(&c, &claim, SETTLE).await;
    // Eviction order from the API server's audit log: every web pod before the DaemonSet pod.
    let evictions: Vec<String> = c
        .cluster
        .sandbox
        .audit()
        .iter()
        .filter(|e| e.method == "POST" && e.path.ends_with("/eviction"))
        .map(|e| e.path.clone())
        .collect();
    let last_web = evictions.iter().rposition(|p| p.contains("/pods/web-"));
    let first_logs = evictions.iter().position(|p| p.contains("/pods/logs-"));
    assert!(last_web.is_some() && first_logs.is_some(), "{evictions:?}");
    assert!(last_web < first_logs, "eviction order: {evictions:?}");
}

/// A cloud whose launches all fail with a retryable error.
struct NeverLaunches(Arc<dyn CloudProvider>);

#[async_trait]
impl CloudProvider for NeverLaunches {
    fn name(&self) -> &str {
        self.0.name()
    }
    async fn create(&self, _: &NodeClaim, _: &EC2NodeClass) -> Result<Launched, CloudError> {
        Err(CloudError::Create {
            reason: "RequestLimitExceeded".into(),
            message: "throttled".into(),
        })
    }
    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudError> {
        self.0.delete(claim).await
    }
    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        self.0.get(provider_id).await
    }
    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        self.0.list().await
    }
    async fn instance_types(
        &self,
        nc: &EC2NodeClass,
    ) -> Result<Arc<Vec<Arc<InstanceType>>>, CloudError> {
        self.0.instance_types(nc).await
    }
    async fn resolve_node_class(&self, nc: &EC2NodeClass) -> NodeClassResolution {
        self.0.resolve_node_class(nc).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nodeclaim_that_never_launches_is_deleted_after_the_launch_timeout() {
    let mut c = TestCluster::start(
        &deployment("web", 1, "500m", "256Mi"),
        Options {
            controller: false,
            settings: Settings {
                launch_timeout: Duration::from_secs(3),
                ..Settings::default()
            },
            ..Options::default()
        },
    )
    .await;
    let cloud: Arc<dyn CloudProvider> = Arc::new(NeverLaunches(Arc::clone(&c.cluster.cloud)));
    c.cluster.start_controller(cloud);
    c.eventually("a LaunchTimeout event", SETTLE, |c| {
        c.objects("", "events").iter().any(|e| {
            e["reason"] == "LaunchTimeout"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("not launched within 3s"))
        })
    })
    .await;
    let first = c
        .objects("", "events")
        .into_iter()
        .find(|e| e["reason"] == "LaunchTimeout")
        .and_then(|e| e["involvedObject"]["name"].as_str().map(String::from))
        .expect("event names its NodeClaim");
    c.eventually("the timed-out NodeClaim deleted", SETTLE, |c| {
        claim_named(c, &first).is_none()
    })
    .await;
    assert!(c.sim().instances().is_empty(), "nothing was launched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_that_never_registers_is_deleted_after_the_registration_ttl() {
    let c = TestCluster::start(
        &deployment("web", 1, "500m", "256Mi"),
        Options::never_registering(Duration::from_secs(3)),
    )
    .await;
    c.eventually("a RegistrationTimeout event", SETTLE, |c| {
        !c.events_with_reason("RegistrationTimeout").is_empty()
    })
    .await;
    let first = c
        .events_with_reason("RegistrationTimeout")
        .into_iter()
        .next()
        .and_then(|e| e["involvedObject"]["name"].as_str().map(String::from))
        .expect("event names its NodeClaim");
    c.eventually(
        "the NodeClaim deleted and its instance terminated",
        SETTLE,
        |c| {
            claim_named(c, &first).is_none()
                && !c
                    .sim()
                    .instances()
                    .iter()
                    .any(|i| i.tags.get("karpenter.sh/nodeclaim") == Some(&first))
        },
    )
    .await;
}

/// The `default` NodePool's `NodeRegistrationHealthy` condition: (status, reason).
fn registration_healthy(c: &TestCluster) -> Option<(String, String)> {
    let pool = c
        .objects("karpenter.sh", "nodepools")
        .into_iter()
        .find(|p| p["metadata"]["name"] == "default")?;
    let cond = pool["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "NodeRegistrationHealthy")?
        .clone();
    Some((
        cond["status"].as_str()?.to_string(),
        cond["reason"].as_str().unwrap_or_default().to_string(),
    ))
}

/// `replicas` pods of app `name`, each on a node of its own (required anti-affinity on the
/// hostname).
fn one_per_node(name: &str, replicas: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {{matchLabels: {{app: {name}}}}}
            topologyKey: kubernetes.io/hostname
      containers:
      - name: app
        image: public.ecr.aws/eks-distro/kubernetes/pause:3.2
        resources: {{requests: {{cpu: 250m, memory: 128Mi}}}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_registration_health_follows_whether_nodes_join() {
    let opts = Options {
        settings: Settings {
            registration_ttl: Duration::from_secs(3),
            ..Settings::default()
        },
        ..Options::default()
    };
    let c = TestCluster::start(&one_per_node("web", 1), opts).await;
    c.eventually(
        "NodeRegistrationHealthy True after a node joined",
        SETTLE,
        |c| registration_healthy(c).is_some_and(|(s, _)| s == "True"),
    )
    .await;
    // A broken release: the nodes of new NodeClaims never join; two timeouts of four turn it
    // False, and the NodePool still provisions (it is not a prerequisite of Ready).
    c.publish_broken_ami("al2023", None);
    c.kubectl_ok(&["scale", "deployment", "web", "--replicas=2"])
        .await;
    c.eventually("NodeRegistrationHealthy False", SETTLE, |c| {
        registration_healthy(c) == Some(("False".into(), "RegistrationFailed".into()))
    })
    .await;
    let pool = c.objects("karpenter.sh", "nodepools").remove(0);
    assert_eq!(condition(&pool, "Ready").as_deref(), Some("True"), "{pool}");
    // A good release: nodes join again, and enough of them turn it back True.
    c.publish_ami("al2023", None);
    c.kubectl_ok(&["scale", "deployment", "web", "--replicas=5"])
        .await;
    c.eventually(
        "NodeRegistrationHealthy True again, 5 pods running",
        SETTLE,
        |c| registration_healthy(c).is_some_and(|(s, _)| s == "True") && running(c, "web") == 5,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expired_nodeclaim_is_replaced() {
    let c = start_with_template(
        &deployment("web", 1, "500m", "256Mi"),
        r#"{"expireAfter":"8s"}"#,
    )
    .await;
    let claim = one_ready_claim(&c, "web", 1).await;
    // Relax expiry for the replacement so the test sees it settle. That change drifts the
    // NodeClaim (expireAfter is hashed): pause upgrades so that expiry, not a drift
    // replacement, ends it.
    c.merge_patch(
        "nodepool",
        "default",
        r#"{"metadata":{"annotations":{"upgrades.karpenter.sh/paused":"true"}},"spec":{"template":{"spec":{"expireAfter":"720h"}}}}"#,
    )
    .await;
    c.eventually("an Expired event", SETTLE, |c| {
        !c.events(&name(&claim), "Expired").is_empty()
    })
    .await;
    gone(&c, &claim, SETTLE).await;
    one_ready_claim(&c, "web", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_nodepool_terminates_its_nodeclaims_gracefully() {
    let c = TestCluster::start(&deployment("web", 2, "500m", "256Mi"), Options::default()).await;
    let claim = one_ready_claim(&c, "web", 2).await;
    let owner = &claim["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "NodePool");
    assert_eq!(owner["name"], "default");
    assert_eq!(owner["blockOwnerDeletion"], true);
    c.kubectl_ok(&["delete", "nodepool", "default", "--wait=false"])
        .await;
    gone(&c, &claim, SETTLE).await;
    assert!(
        c.cluster
            .sandbox
            .audit()
            .iter()
            .any(|e| e.method == "POST" && e.path.ends_with("/eviction")),
        "the pods were evicted, not dropped"
    );
    assert!(c.nodeclaims().is_empty(), "no NodePool, no new NodeClaims");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn garbage_collection_both_ways_and_orphaned_nodes() {
    let mut c = TestCluster::start(
        &deployment("web", 1, "500m", "256Mi"),
        Options {
            settings: Settings {
                orphaned_node_grace: Duration::from_secs(1),
                ..Settings::default()
            },
            ..Options::default()
        },
    )
    .await;
    let claim = one_ready_claim(&c, "web", 1).await;
    // Stage the orphans with the controller stopped, as if they happened while it was down.
    c.cluster.stop_controller();
    // 1. A launched NodeClaim whose instance no longer exists (and never registered a node).
    let api: kube::Api<NodeClaim> = kube::Api::all(c.cluster.client());
    let mut lost: NodeClaim = serde_json::from_value(claim.clone()).expect("nodeclaim");
    lost.metadata = kube::api::ObjectMeta {
        name: Some("lost".into()),
        labels: claim["metadata"]["labels"].as_object().map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        }),
        ..Default::default()
    };
    lost.status = None;
    api.create(&kube::api::PostParams::default(), &lost)
        .await
        .expect("create");
    let launched_at = (jiff::Timestamp::now() - jiff::SignedDuration::from_secs(120)).to_string();
    api.patch_status(
        "lost",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"status": {
            "providerID": "aws:///us-east-1a/i-0000000000000dead",
            "conditions": [{"type": "Launched", "status": "True", "reason": "Launched",
                "message": "", "lastTransitionTime": launched_at}]}})),
    )
    .await
    .expect("status");
    // 2. An instance tagged for this cluster whose NodeClaim never existed; the kubelet
    //    registers a node for it, which then has a NodePool label and no NodeClaim.
    let mut stray: NodeClaim = serde_json::from_value(claim.clone()).expect("nodeclaim");
    stray.metadata.name = Some("never-existed".into());
    stray.status = None;
    let nc: EC2NodeClass =
        serde_json::from_value(c.objects("karpenter.k8s.aws", "ec2nodeclasses")[0].clone())
            .expect("node class");
    let stray = c.cluster.cloud.create(&stray, &nc).await.expect("launch");
    let stray_node = c
        .sim()
        .instances()
        .into_iter()
        .find(|i| i.provider_id == stray.provider_id)
        .map(|i| i.hostname)
        .expect("stray instance");
    let cloud = Arc::clone(&c.cluster.cloud);
    c.cluster.start_controller(cloud);
    c.eventually(
        "the NodeClaim whose instance is gone deleted",
        SETTLE,
        |c| claim_named(c, "lost").is_none(),
    )
    .await;
    c.eventually("an InstanceTerminated event", SETTLE, |c| {
        !c.events("lost", "InstanceTerminated").is_empty()
    })
    .await;
    c.eventually("an OrphanedNode event", SETTLE, |c| {
        !c.events(&stray_node, "OrphanedNode").is_empty()
    })
    .await;
    // The controller deletes the orphaned node after its grace period, while the instance is
    // still younger than the 30s instance garbage collection waits for: the node cleanup did it.
    let delete = format!("/api/v1/nodes/{stray_node}");
    c.eventually("the controller deletes the orphaned node", SETTLE, |c| {
        c.cluster
            .sandbox
            .audit()
            .iter()
            .any(|e| e.method == "DELETE" && e.path == delete)
    })
    .await;
    let stray_instance = c
        .sim()
        .instances()
        .into_iter()
        .find(|i| i.provider_id == stray.provider_id)
        .expect("the stray instance still runs when its node is deleted");
    assert!(
        jiff::Timestamp::now().duration_since(stray_instance.launched_at)
            < jiff::SignedDuration::from_secs(30)
    );
    // Instances younger than 30s are never collected; this one goes within a pass after that.
    c.eventually(
        "the stray instance terminated and its node gone",
        Duration::from_secs(75),
        |c| {
            !c.sim()
                .instances()
                .iter()
                .any(|i| i.provider_id == stray.provider_id)
                && !c.objects("", "nodes").iter().any(|n| name(n) == stray_node)
        },
    )
    .await;
    assert_eq!(c.nodeclaims().len(), 1, "the real NodeClaim is untouched");
    assert_eq!(running(&c, "web"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_the_node_terminates_its_nodeclaim() {
    let c = TestCluster::start(&deployment("web", 2, "500m", "256Mi"), Options::default()).await;
    let claim = one_ready_claim(&c, "web", 2).await;
    let node = claim["status"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    c.kubectl_ok(&["delete", "node", &node, "--wait=false"])
        .await;
    gone(&c, &claim, SETTLE).await;
    let evictions = c
        .cluster
        .sandbox
        .audit()
        .iter()
        .filter(|e| e.method == "POST" && e.path.ends_with("/eviction"))
        .count();
    assert_eq!(evictions, 2, "both pods left the node by eviction");
    c.eventually("the pods run on a replacement", SETTLE, |c| {
        running(c, "web") == 2
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_empty_node_terminates_after_the_minimum_drain_time() {
    let c = TestCluster::start(&deployment("web", 1, "500m", "256Mi"), Options::default()).await;
    let claim = one_ready_claim(&c, "web", 1).await;
    c.kubectl_ok(&["scale", "deployment", "web", "--replicas=0"])
        .await;
    c.eventually("the pod gone", SETTLE, |c| pods(c, "web").is_empty())
        .await;
    c.kubectl_ok(&["delete", "nodeclaim", &name(&claim), "--wait=false"])
        .await;
    gone(&c, &claim, SETTLE).await;
    c.eventually("a Drained event", SETTLE, |c| {
        !c.events(&name(&claim), "Drained").is_empty()
    })
    .await;
}
