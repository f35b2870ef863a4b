//! Static NodePools end to end (`spec.replicas`, gate `StaticCapacity`, upstream v1.8): the pool
//! keeps exactly `replicas` NodeClaims without pods, follows a patch or `kubectl scale` up and
//! down, stops at `limits.nodes` and says so, and consolidation leaves its empty nodes alone;
//! with the gate off the pool says that `replicas` is not honoured, as other objects name the
//! fields they set that are not honoured yet (`UnsupportedField`).

use std::time::Duration;

use controller::runtime::Settings;
use controller::runtime::options::FeatureGate;
use serde_json::Value;
use tests::{Options, TestCluster};

const SETTLE: Duration = Duration::from_secs(60);

/// The default node class, a static pool of 3 and a static pool of 3 capped at 2 nodes.
const STATIC_POOLS: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-sandbox
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: fixed}
spec:
  replicas: 3
  template:
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  disruption: {consolidateAfter: 0s}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: capped}
spec:
  replicas: 3
  limits: {nodes: "2"}
  template:
    spec:
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"#;

fn claims_of(c: &TestCluster, pool: &str) -> Vec<Value> {
    c.nodeclaims()
        .into_iter()
        .filter(|n| n["metadata"]["labels"]["karpenter.sh/nodepool"] == pool)
        .filter(|n| n["metadata"]["deletionTimestamp"].is_null())
        .collect()
}

fn static_condition(c: &TestCluster, pool: &str) -> Option<(String, String, String)> {
    let pools = c.objects("karpenter.sh", "nodepools");
    let p = pools.iter().find(|p| p["metadata"]["name"] == pool)?;
    let cond = p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|x| x["type"] == "StaticCapacity")?;
    Some((
        cond["status"].as_str()?.to_string(),
        cond["reason"].as_str()?.to_string(),
        cond["message"].as_str()?.to_string(),
    ))
}

async fn expect_claims(c: &TestCluster, pool: &str, n: usize) {
    c.eventually(&format!("{n} NodeClaims in {pool}"), SETTLE, |c| {
        claims_of(c, pool).len() == n
            && c.nodeclaims()
                .iter()
                .all(|x| x["metadata"]["deletionTimestamp"].is_null())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_are_kept_scaled_capped_and_never_consolidated() {
    let mut settings = Settings::default();
    settings
        .feature_gates
        .set(FeatureGate::StaticCapacity, true);
    let opts = Options {
        defaults: false,
        settings,
        ..Options::default()
    };
    let c = TestCluster::start(STATIC_POOLS, opts).await;
    // replicas: 3 gives 3 NodeClaims with no pods; they launch and their nodes register.
    expect_claims(&c, "fixed", 3).await;
    c.eventually("fixed's nodes registered", SETTLE, |c| {
        claims_of(c, "fixed")
            .iter()
            .all(|n| n["status"]["nodeName"].is_string())
    })
    .await;
    c.eventually("StaticCapacity True", SETTLE, |c| {
        static_condition(c, "fixed").is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    // limits.nodes: 2 caps replicas: 3, and the condition says so.
    expect_claims(&c, "capped", 2).await;
    let (status, reason, message) = static_condition(&c, "capped").expect("condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "NodeLimitReached")
    );
    assert!(message.contains("limits.nodes 2"), "{message}");
    // Empty nodes of a static pool are not consolidated, however long they sit empty.
    let before: Vec<Value> = claims_of(&c, "fixed")
        .iter()
        .map(|n| n["metadata"]["name"].clone())
        .collect();
    c.advance(jiff::SignedDuration::from_mins(10)).await;
    c.advance(jiff::SignedDuration::from_mins(10)).await;
    let after: Vec<Value> = claims_of(&c, "fixed")
        .iter()
        .map(|n| n["metadata"]["name"].clone())
        .collect();
    assert_eq!(before, after, "a static pool's empty nodes stay");
    // Patching replicas scales up and down.
    c.merge_patch("nodepool", "fixed", r#"{"spec":{"replicas":5}}"#)
        .await;
    expect_claims(&c, "fixed", 5).await;
    c.merge_patch("nodepool", "fixed", r#"{"spec":{"replicas":1}}"#)
        .await;
    expect_claims(&c, "fixed", 1).await;
    // kubectl scale goes through the scale subresource.
    c.kubectl_ok(&["scale", "nodepool", "fixed", "--replicas=2"])
        .await;
    expect_claims(&c, "fixed", 2).await;
    let scale = c
        .kubectl_ok(&[
            "get",
            "--raw",
            "/apis/karpenter.sh/v1/nodepools/fixed/scale",
        ])
        .await;
    let scale: Value = serde_json::from_str(&scale).expect("Scale JSON");
    assert_eq!(scale["spec"]["replicas"], 2, "{scale}");
    // Removed NodeClaims say why.
    assert!(!c.events_with_reason("StaticScaleDown").is_empty());
}

/// A NodePool that sets a field this project does not honour yet, and its node class (whose
/// `associatePublicIPAddress` is honoured, so not named).
const UNHONOURED: &str = r#"
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: public}
spec:
  role: KarpenterNodeRole-sandbox
  associatePublicIPAddress: false
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: balanced}
spec:
  disruption: {consolidationPolicy: Balanced}
  template:
    spec:
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: public}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_the_gate_off_replicas_are_reported_not_honoured() {
    let opts = Options {
        defaults: false,
        ..Options::default()
    };
    let c = TestCluster::start(&format!("{STATIC_POOLS}{UNHONOURED}"), opts).await;
    c.eventually("StaticCapacity condition", SETTLE, |c| {
        static_condition(c, "fixed").is_some()
    })
    .await;
    // `consolidationPolicy: Balanced` is honoured now (issue 37): the NodePool that sets it,
    // validated by now, is not reported.
    assert!(
        c.events("balanced", "UnsupportedField").is_empty(),
        "{:?}",
        c.events("balanced", "UnsupportedField")
    );
    let (status, reason, message) = static_condition(&c, "fixed").expect("condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "FeatureGateDisabled")
    );
    assert!(message.contains("StaticCapacity=true"), "{message}");
    assert!(c.nodeclaims().is_empty());
}
