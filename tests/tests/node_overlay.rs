//! NodeOverlays end to end (`FEATURE_GATES=NodeOverlay=true`, upstream's alpha): a price
//! overlay changes the instance type launched and the NodeClaim says so; a capacity overlay
//! makes a pod asking for an extended resource get a NodeClaim; of two overlays of equal weight
//! changing the same resource one is not applied and its status says why. With the gate off,
//! overlays change nothing and each gets a Warning naming the gate.

use std::time::Duration;

use controller::runtime::Settings;
use controller::runtime::feature_gates::{FeatureGate, FeatureGates};
use serde_json::Value;
use tests::{Options, TestCluster, condition, deployment};

const SETTLE: Duration = Duration::from_secs(60);

/// A NodePool of on-demand m5.large ($0.096/h) or c5.large ($0.085/h); a $0.05/h fee on
/// c5.large (so m5.large is cheaper); an FPGA on every m5.large; and two overlays of weight 5
/// that both set the same resource of t3.micro.
const OVERLAID: &str = r#"
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
metadata: {name: general}
spec:
  template:
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, c5.large]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: c5-license-fee}
spec:
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: [c5.large]}
  priceAdjustment: "+0.05"
---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: m5-fpga}
spec:
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
  capacity: {example.com/fpga: "1"}
---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: clash-a}
spec:
  weight: 5
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: [t3.micro]}
  capacity: {example.com/widget: "1"}
---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: clash-b}
spec:
  weight: 5
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: [t3.micro]}
  capacity: {example.com/widget: "2"}
"#;

/// A Deployment of one pod asking for an FPGA (an extended resource no instance type has).
const FPGA_APP: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: fpga}
spec:
  replicas: 1
  selector: {matchLabels: {app: fpga}}
  template:
    metadata: {labels: {app: fpga}}
    spec:
      containers:
      - name: app
        image: public.ecr.aws/eks-distro/kubernetes/pause:3.2
        resources:
          requests: {cpu: 500m, example.com/fpga: "1"}
          limits: {example.com/fpga: "1"}
"#;

fn options(overlays: bool) -> Options {
    let mut feature_gates = FeatureGates::default();
    feature_gates.set(FeatureGate::NodeOverlay, overlays);
    Options {
        defaults: false,
        settings: Settings {
            feature_gates,
            ..Settings::default()
        },
        ..Options::default()
    }
}

fn overlay(c: &TestCluster, name: &str) -> Value {
    c.objects("karpenter.sh", "nodeoverlays")
        .into_iter()
        .find(|o| o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("NodeOverlay {name}"))
}

/// `(status, reason)` of an overlay's condition, empty when unset.
fn overlay_condition(c: &TestCluster, name: &str, type_: &str) -> (String, String) {
    let o = overlay(c, name);
    let reason = o["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|x| x["type"] == type_))
        .and_then(|x| x["reason"].as_str())
        .unwrap_or_default()
        .to_string();
    (condition(&o, type_).unwrap_or_default(), reason)
}

fn annotation<'a>(claim: &'a Value, key: &str) -> Option<&'a str> {
    claim["metadata"]["annotations"][key].as_str()
}

fn requests_fpga(claim: &Value) -> bool {
    !claim["spec"]["resources"]["requests"]["example.com/fpga"].is_null()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlays_change_prices_and_capacity_and_conflicts_are_reported() {
    let yaml = format!("{OVERLAID}---\n{}", deployment("app", 1, "500m", "1Gi"));
    let c = TestCluster::start(&yaml, options(true)).await;

    // The overlays' statuses: the conflict's loser is the one earlier in the alphabet.
    c.eventually("overlay statuses written", SETTLE, |c| {
        overlay_condition(c, "clash-a", "ValidationSucceeded").0 == "False"
    })
    .await;
    assert_eq!(
        overlay_condition(&c, "clash-a", "ValidationSucceeded"),
        ("False".into(), "Conflict".into())
    );
    assert_eq!(overlay_condition(&c, "clash-a", "Ready").0, "False");
    let message = overlay(&c, "clash-a")["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|x| x["type"] == "ValidationSucceeded"))
        .and_then(|x| x["message"].as_str())
        .map(String::from);
    assert_eq!(message.as_deref(), Some("conflict with another overlay"));
    for applied in ["clash-b", "c5-license-fee", "m5-fpga"] {
        assert_eq!(
            overlay_condition(&c, applied, "Ready").0,
            "True",
            "{applied}"
        );
    }

    // The fee makes m5.large the cheaper type: it is launched, and the NodeClaim says a price
    // overlay ranked its options.
    let o = c
        .wait_for("the app pod bound", SETTLE, |o| {
            o.pods_bound == 1 && o.claims_initialized == 1
        })
        .await;
    assert_eq!(o.by_instance_type.get("m5.large"), Some(&1), "{o:?}");
    let claims = c.nodeclaims();
    assert_eq!(claims.len(), 1);
    let claim = &claims[0];
    assert_eq!(
        annotation(claim, "karpenter.sh/price-overlay-applied"),
        Some("true"),
        "{claim}"
    );

    // A pod asking for an FPGA: only the overlaid m5.large has one, so Karpenter launches a
    // NodeClaim for it offering m5.large alone, and the cloud launches it although its own
    // m5.large reports no FPGA. (The simulated kubelet registers capacity from the cloud's
    // instance type, so kube-scheduler cannot bind the pod: as upstream, the overlay changes
    // only what Karpenter assumes, and a device plugin would advertise the resource.)
    let out = c.kubectl(&["apply", "-f", "-"], Some(FPGA_APP)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.eventually("a NodeClaim for the FPGA pod, launched", SETTLE, |c| {
        c.nodeclaims()
            .iter()
            .any(|x| requests_fpga(x) && condition(x, "Launched").as_deref() == Some("True"))
    })
    .await;
    let claims = c.nodeclaims();
    let fpga = claims
        .iter()
        .find(|x| requests_fpga(x))
        .expect("the FPGA NodeClaim");
    assert_eq!(
        annotation(fpga, "karpenter.sh/capacity-overlay-applied"),
        Some("true"),
        "{fpga}"
    );
    let types: Vec<&str> = fpga["spec"]["requirements"]
        .as_array()
        .and_then(|rs| {
            rs.iter()
                .find(|r| r["key"] == "node.kubernetes.io/instance-type")
        })
        .and_then(|r| r["values"].as_array())
        .map(|vs| vs.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(types, ["m5.large"], "{fpga}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_the_gate_off_overlays_change_nothing_and_say_so() {
    let yaml = format!("{OVERLAID}---\n{}", deployment("app", 1, "500m", "1Gi"));
    let c = TestCluster::start(&yaml, options(false)).await;
    c.eventually(
        "a FeatureGateDisabled warning on each overlay",
        SETTLE,
        |c| {
            ["c5-license-fee", "m5-fpga", "clash-a", "clash-b"]
                .iter()
                .all(|n| !c.events(n, "FeatureGateDisabled").is_empty())
        },
    )
    .await;
    let event = &c.events("c5-license-fee", "FeatureGateDisabled")[0];
    assert_eq!(event["type"], "Warning");
    let message = event["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("FEATURE_GATES=NodeOverlay=true"),
        "{message}"
    );
    // c5.large, the cloud's cheaper type, is launched; nothing says an overlay applied and no
    // overlay has a status.
    let o = c
        .wait_for("the app pod bound", SETTLE, |o| o.pods_bound == 1)
        .await;
    assert_eq!(o.by_instance_type.get("c5.large"), Some(&1), "{o:?}");
    for claim in c.nodeclaims() {
        assert_eq!(
            annotation(&claim, "karpenter.sh/price-overlay-applied"),
            None
        );
    }
    assert!(
        c.objects("karpenter.sh", "nodeoverlays")
            .iter()
            .all(|o| o["status"]["conditions"].is_null()),
        "no status is written with the gate off"
    );
}
