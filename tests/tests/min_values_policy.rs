//! `MIN_VALUES_POLICY=BestEffort` end to end: a NodePool whose `minValues` no node class can
//! meet still launches, and the NodeClaim says it was relaxed (upstream v1.6).

use std::time::Duration;

use controller::runtime::Settings;
use controller::runtime::options::MinValuesPolicy;
use tests::{Options, TestCluster, deployment};

const SETTLE: Duration = Duration::from_secs(60);

/// The default node class, and a NodePool asking for 50 distinct instance types (the API's
/// maximum) among the m5 and c5 families, which have fewer.
const WIDE_POOL: &str = r#"
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
metadata: {name: wide}
spec:
  template:
    spec:
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, c5]}
        - {key: node.kubernetes.io/instance-type, operator: Exists, minValues: 50}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn best_effort_launches_with_relaxed_min_values_and_says_so() {
    let yaml = format!("{WIDE_POOL}---\n{}", deployment("app", 2, "500m", "256Mi"));
    let opts = Options {
        defaults: false,
        settings: Settings {
            min_values_policy: MinValuesPolicy::BestEffort,
            ..Settings::default()
        },
        ..Options::default()
    };
    let c = TestCluster::start(&yaml, opts).await;
    let o = c
        .wait_for("pods bound", SETTLE, |o| o.pods_bound == 2 && o.settled())
        .await;
    assert!(o.claims_total >= 1, "{o:?}");
    for claim in c.nodeclaims() {
        assert_eq!(
            claim["metadata"]["annotations"]["karpenter.sh/nodeclaim-min-values-relaxed"], "true",
            "{claim}"
        );
        let types = claim["spec"]["requirements"]
            .as_array()
            .and_then(|rs| {
                rs.iter()
                    .find(|r| r["key"] == "node.kubernetes.io/instance-type")
            })
            .cloned()
            .expect("instance-type requirement");
        let listed = types["values"].as_array().map_or(0, Vec::len) as u64;
        let min = types["minValues"]
            .as_u64()
            .expect("minValues kept, lowered");
        assert!((1..50).contains(&min) && listed >= min, "{types}");
    }
}
