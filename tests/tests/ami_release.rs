//! New AMI releases in the sandbox move `@latest` aliases: published in-process through the
//! harness or by `kubectl create` of an AMIRelease, the EC2NodeClass's `status.amis` follow
//! well before the node class controller's one-minute resync. A release published broken
//! launches instances whose nodes never register, while the rest of the cluster keeps working.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use tests::{Options, TestCluster, condition};

/// Far below the 60s resync: the change signal, not the resync, re-resolves.
const PROMPTLY: Duration = Duration::from_secs(10);

/// Launches, registrations and scale-ups.
const SETTLE: Duration = Duration::from_secs(60);

fn ami_ids(c: &TestCluster) -> BTreeSet<String> {
    c.objects("karpenter.k8s.aws", "ec2nodeclasses")
        .iter()
        .find(|n| n["metadata"]["name"] == "default")
        .and_then(|n| n.pointer("/status/amis").and_then(Value::as_array).cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|a| a["id"].as_str().map(String::from))
        .collect()
}

async fn resolved(c: &TestCluster) -> BTreeSet<String> {
    c.eventually(
        "the default EC2NodeClass resolves its AMIs",
        PROMPTLY,
        |c| ami_ids(c).len() == 2,
    )
    .await;
    ami_ids(c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_published_release_becomes_the_node_class_s_amis() {
    let c = TestCluster::start("", Options::default()).await;
    let before = resolved(&c).await;
    let amis = c.publish_ami("al2023", None);
    assert_eq!(amis.len(), 2, "one image per architecture");
    assert!(amis.iter().all(|a| a.version == "v20260302"));
    let want: BTreeSet<String> = amis.iter().map(|a| a.id.clone()).collect();
    assert!(want.is_disjoint(&before));
    c.eventually("status.amis moves to the new release", PROMPTLY, |c| {
        ami_ids(c) == want
    })
    .await;
    // A release of another family leaves an al2023 node class alone.
    c.publish_ami("bottlerocket", "v20260401");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(ami_ids(&c), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_create_of_an_ami_release_publishes_it() {
    let c = TestCluster::start("", Options::default()).await;
    let before = resolved(&c).await;
    let manifest = "apiVersion: sandbox.karpenter.sh/v1\nkind: AMIRelease\nmetadata:\n  name: al2023-april\nspec:\n  family: al2023\n  version: v20260401\n  architectures: [arm64]\n";
    let out = c.kubectl(&["create", "-f", "-"], Some(manifest)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.eventually("the release is published", PROMPTLY, |c| {
        c.objects("sandbox.karpenter.sh", "amireleases")
            .iter()
            .any(|r| condition(r, "Published").as_deref() == Some("True"))
    })
    .await;
    let release = c.objects("sandbox.karpenter.sh", "amireleases").remove(0);
    let new_id = release["status"]["amis"][0]["id"]
        .as_str()
        .expect("published image")
        .to_string();
    assert_eq!(release["status"]["amis"][0]["architecture"], "arm64");
    c.eventually("status.amis picks up the arm64 image", PROMPTLY, |c| {
        ami_ids(c).contains(&new_id)
    })
    .await;
    let after = ami_ids(&c);
    assert_eq!(after.len(), 2);
    assert_eq!(
        after.intersection(&before).count(),
        1,
        "amd64 stays on the previous release"
    );
    let table = c.kubectl_ok(&["get", "amireleases"]).await;
    assert!(
        table.contains("al2023-april") && table.contains("v20260401") && table.contains(&new_id),
        "{table}"
    );
    // The schema refuses what the simulated cloud does not publish.
    let bad = manifest
        .replace("al2023-april", "bad")
        .replace("family: al2023", "family: ubuntu");
    let out = c.kubectl(&["create", "-f", "-"], Some(&bad)).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("spec.family"), "{stderr}");
    // Windows images are amd64 only: a release of all architectures is one image, an arm64
    // one is refused with the reason.
    let windows = "apiVersion: sandbox.karpenter.sh/v1\nkind: AMIRelease\nmetadata:\n  name: windows\nspec:\n  family: windows2022\n---\napiVersion: sandbox.karpenter.sh/v1\nkind: AMIRelease\nmetadata:\n  name: windows-arm\nspec:\n  family: windows2025\n  architectures: [arm64]\n";
    let out = c.kubectl(&["create", "-f", "-"], Some(windows)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let release = |c: &TestCluster, name: &str| {
        c.objects("sandbox.karpenter.sh", "amireleases")
            .into_iter()
            .find(|r| r["metadata"]["name"] == name)
            .unwrap_or_default()
    };
    c.eventually("both Windows releases are answered", PROMPTLY, |c| {
        ["windows", "windows-arm"]
            .iter()
            .all(|n| condition(&release(c, n), "Published").is_some())
    })
    .await;
    let published = release(&c, "windows");
    assert_eq!(condition(&published, "Published").as_deref(), Some("True"));
    let archs: Vec<&str> = published["status"]["amis"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["architecture"].as_str())
        .collect();
    assert_eq!(archs, ["amd64"]);
    let refused = release(&c, "windows-arm");
    assert_eq!(
        refused.pointer("/status/conditions/0/reason"),
        Some(&Value::from("UnsupportedArchitecture")),
        "{refused}"
    );
}

/// `replicas` pods of `web` (1 CPU each), never two on one node, on the default NodePool.
fn spread_web(replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      affinity:\n        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n          - labelSelector:\n              matchLabels: {{app: web}}\n            topologyKey: kubernetes.io/hostname\n      containers:\n      - name: app\n        image: public.ecr.aws/eks-distro/kubernetes/pause:3.2\n        resources:\n          requests: {{cpu: \"1\", memory: 1Gi}}\n"
    )
}

/// A tainted `canary` NodePool on a `canary` EC2NodeClass that follows `bottlerocket@latest`,
/// and one pod that only it can take.
const CANARY: &str = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata:\n  name: canary\nspec:\n  role: KarpenterNodeRole-sandbox\n  amiSelectorTerms:\n  - alias: bottlerocket@latest\n  subnetSelectorTerms:\n  - tags: {karpenter.sh/discovery: sandbox}\n  securityGroupSelectorTerms:\n  - tags: {karpenter.sh/discovery: sandbox}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: canary\nspec:\n  template:\n    spec:\n      taints:\n      - {key: example.com/canary, effect: NoSchedule}\n      requirements:\n      - {key: kubernetes.io/arch, operator: In, values: [amd64]}\n      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand, spot]}\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: canary}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: canary\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: canary}\n  template:\n    metadata:\n      labels: {app: canary}\n    spec:\n      nodeSelector: {karpenter.sh/nodepool: canary}\n      tolerations:\n      - {key: example.com/canary, operator: Exists, effect: NoSchedule}\n      containers:\n      - name: app\n        image: public.ecr.aws/eks-distro/kubernetes/pause:3.2\n        resources:\n          requests: {cpu: 500m, memory: 512Mi}\n";

fn pool_of(claim: &Value) -> &str {
    claim
        .pointer("/metadata/labels/karpenter.sh~1nodepool")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn claims_in(c: &TestCluster, pool: &str) -> Vec<Value> {
    c.nodeclaims()
        .into_iter()
        .filter(|x| pool_of(x) == pool)
        .collect()
}

/// Pods of `app` bound to a node.
fn bound(c: &TestCluster, app: &str) -> usize {
    c.objects("", "pods")
        .iter()
        .filter(|p| p.pointer("/metadata/labels/app").and_then(Value::as_str) == Some(app))
        .filter(|p| p.pointer("/spec/nodeName").is_some_and(|n| n != ""))
        .count()
}

fn is_true(claim: &Value, type_: &str) -> bool {
    condition(claim, type_).as_deref() == Some("True")
}

/// Whether every default-pool NodeClaim is initialized and there are `n` of them.
fn default_pool_ready(c: &TestCluster, n: usize) -> bool {
    let claims = claims_in(c, "default");
    claims.len() == n && claims.iter().all(|x| is_true(x, "Initialized"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broken_release_launches_nodeclaims_that_never_register() {
    let c = TestCluster::start(&spread_web(1), Options::default()).await;
    c.eventually("web runs on one initialized NodeClaim", SETTLE, |c| {
        default_pool_ready(c, 1) && bound(c, "web") == 1
    })
    .await;
    let broken: BTreeSet<String> = c
        .publish_broken_ami("bottlerocket", None)
        .into_iter()
        .map(|a| a.id)
        .collect();
    assert_eq!(c.sim().broken_images(), broken.iter().cloned().collect());
    let out = c.kubectl(&["apply", "-f", "-"], Some(CANARY)).await;
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The canary pod gets a NodeClaim launched from the broken image...
    c.eventually("the canary NodeClaim launches", SETTLE, |c| {
        claims_in(c, "canary")
            .iter()
            .any(|x| is_true(x, "Launched"))
    })
    .await;
    let claim = claims_in(&c, "canary").remove(0);
    let image = claim["status"]["imageID"].as_str().unwrap_or_default();
    assert!(broken.contains(image), "launched from {image:?}: {claim:#}");
    let provider_id = claim["status"]["providerID"]
        .as_str()
        .expect("launched NodeClaims have a providerID")
        .to_string();
    assert!(
        c.sim()
            .instances()
            .iter()
            .any(|i| i.provider_id == provider_id),
        "the instance runs"
    );
    // ... whose node never registers: six registration delays later, still no Node.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let claims = claims_in(&c, "canary");
    assert_eq!(claims.len(), 1, "one launch, no retries: {claims:#?}");
    assert!(
        !is_true(&claims[0], "Registered") && !is_true(&claims[0], "Initialized"),
        "{:#}",
        claims[0]
    );
    assert!(
        c.objects("", "nodes")
            .iter()
            .all(|n| n.pointer("/spec/providerID").and_then(Value::as_str)
                != Some(provider_id.as_str())),
        "no Node registered for {provider_id}"
    );
    assert_eq!(bound(&c, "canary"), 0);

    // The cluster otherwise works: a scale-up on the healthy image registers and runs.
    c.kubectl_ok(&["scale", "deployment", "web", "--replicas=2"])
        .await;
    c.eventually(
        "web scales out onto a second initialized NodeClaim",
        SETTLE,
        |c| default_pool_ready(c, 2) && bound(c, "web") == 2,
    )
    .await;
    let claims = claims_in(&c, "canary");
    assert_eq!(claims.len(), 1);
    assert!(!is_true(&claims[0], "Registered"), "{:#}", claims[0]);
    assert!(
        claims_in(&c, "default")
            .iter()
            .all(|x| !broken.contains(x["status"]["imageID"].as_str().unwrap_or_default()))
    );
}
