//! The `karpenter simulate` command as a user runs it: JSON on stdout only, the report's fields,
//! the generated benchmark mix, the Alibaba trace, and bad input.

use crate::common;

use common::{karpenter, repo_file, report};
use serde_json::Value;

fn number(r: &Value, path: &str) -> f64 {
    r.pointer(path)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{path} in {r}"))
}

#[test]
fn diverse_mix_on_synthetic_types_reports_fleet_cost_and_bound() {
    let out = karpenter(&[
        "simulate",
        "--generate",
        "diverse:1000",
        "--instance-types",
        "synthetic-400",
        "--report",
        "json",
    ]);
    let r = report(&out);
    assert_eq!(r["instance_types"], "synthetic-400");
    assert_eq!(r["pods"]["total"], 1000);
    assert_eq!(r["pods"]["scheduled"], 1000);
    assert_eq!(r["pods"]["unschedulable"].as_array().map(Vec::len), Some(0));
    // One claim per hostname anti-affinity pod (a fifth of the mix) at least.
    let claims = r["nodeclaims"]["total"].as_u64().expect("total");
    assert!(claims >= 200, "{claims}");
    let by_type: u64 = r["nodeclaims"]["by_instance_type"]
        .as_object()
        .expect("by type")
        .values()
        .filter_map(Value::as_u64)
        .sum();
    assert_eq!(by_type, claims);
    let cost = number(&r, "/cost_per_hour_usd");
    let bound = number(&r, "/lower_bound_cost_per_hour_usd");
    assert!(bound > 0.0 && cost >= bound, "cost {cost} bound {bound}");
    assert!((number(&r, "/cost_over_bound") - cost / bound).abs() < 1e-3);
    assert!(number(&r, "/solve_seconds") > 0.0);
}

#[test]
fn alibaba_trace_on_the_aws_catalog_schedules_every_task_near_the_bound() {
    let trace = repo_file("examples/traces/openb_pod_list_default.csv");
    let out = karpenter(&[
        "simulate",
        "--workload",
        trace.to_str().expect("utf-8 path"),
        "--report",
        "json",
    ]);
    let r = report(&out);
    assert_eq!(r["instance_types"], "aws");
    assert_eq!(r["pods"]["total"], 6282);
    assert_eq!(r["pods"]["scheduled"], 6282);
    let ratio = number(&r, "/cost_over_bound");
    // The bound is a valid lower bound: no fleet beats it. The issue's quality target is 1.15.
    assert!((1.0..=1.15).contains(&ratio), "cost over bound {ratio}");
    // Every GPU task needs a GPU node: the fleet has some.
    let by_type = r["nodeclaims"]["by_instance_type"]
        .as_object()
        .expect("by type");
    assert!(
        by_type
            .keys()
            .any(|t| t.starts_with('g') || t.starts_with('p'))
    );
}

#[test]
fn a_workload_file_is_solved_and_text_goes_to_stdout() {
    let out = karpenter(&["simulate", "--scale", "2"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Pods:") && text.contains("Cost:"), "{text}");
    let json = report(&karpenter(&[
        "simulate",
        "--workload",
        repo_file("examples/workloads/online-boutique.yaml")
            .to_str()
            .expect("utf-8 path"),
        "--report",
        "json",
    ]));
    let total = json["pods"]["total"].as_u64().expect("total");
    assert!(total > 0);
    assert_eq!(json["pods"]["scheduled"].as_u64(), Some(total));
    // The serialised NodeClaims' sizes, and the spot-price caveat.
    let p50 = number(&json, "/nodeclaims/bytes_p50");
    let p99 = number(&json, "/nodeclaims/bytes_p99");
    assert!(p50 > 0.0 && p99 >= p50, "p50 {p50} p99 {p99}");
    assert_eq!(json["spot_prices_estimated"], true);
    assert!(
        text.contains("Prices:") && text.contains("estimated"),
        "{text}"
    );
}

#[test]
fn bad_input_is_a_clear_error_with_exit_code_two() {
    let out = karpenter(&["simulate", "--workload", "/nonexistent/workload.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing on stdout on error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/workload.yaml"), "{err}");
    let out = karpenter(&["simulate", "--generate", "uniform:10"]);
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("diverse"), "{err}");
}

/// The EC2NodeClass of issue 18: `maxPods: 8`, one CPU of kube-reserved and a 300Gi root
/// volume, with a NodePool of m5.large and m5.xlarge on demand.
const SIZED_NODE_CLASS: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: sized}
spec:
  role: KarpenterNodeRole-sandbox
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
  kubelet:
    maxPods: 8
    kubeReserved: {cpu: "1"}
  blockDeviceMappings:
    - deviceName: /dev/xvda
      rootVolume: true
      ebs: {volumeSize: 300Gi, volumeType: gp3}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: sized}
spec:
  template:
    spec:
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m5.xlarge]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: sized}
"#;

/// A NodePool open to every instance type of the default node class.
const ANY_TYPE_POOL: &str = r#"
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
metadata: {name: any}
spec:
  template:
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"#;

/// A Deployment of `replicas` pods with `resources` (YAML flow map) on the container, or on
/// the pod when `pod_level`.
fn deployment(name: &str, replicas: u32, resources: &str, pod_level: bool) -> String {
    let (pod, container) = if pod_level {
        (format!("\n      resources: {resources}"), String::new())
    } else {
        (String::new(), format!("\n          resources: {resources}"))
    };
    format!(
        r#"
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:{pod}
      containers:
        - name: app
          image: public.ecr.aws/eks-distro/kubernetes/pause:3.2{container}
"#
    )
}

/// `karpenter simulate --report json` over the manifests; the report.
fn simulate_manifests(manifests: &str) -> Value {
    simulate_manifests_with(manifests, &[])
}

/// `karpenter simulate --report json` over the manifests with extra flags; the report.
fn simulate_manifests_with(manifests: &str, flags: &[&str]) -> Value {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("workload.yaml");
    std::fs::write(&path, manifests).expect("write workload");
    let mut args = vec![
        "simulate",
        "--workload",
        path.to_str().expect("utf-8 path"),
        "--report",
        "json",
    ];
    args.extend_from_slice(flags);
    simulated(&karpenter(&args))
}

/// The report of a `simulate` run that may leave pods unschedulable: it exits 1 exactly when
/// some pod is unschedulable (saying how many on stderr), and prints the report either way.
fn simulated(out: &std::process::Output) -> Value {
    let code = out.status.code();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(code, Some(0 | 1)), "exit {code:?}: {stderr}");
    let r: Value = serde_json::from_slice(&out.stdout).expect("the report is printed");
    let unschedulable = r["pods"]["unschedulable"].as_array().map_or(0, Vec::len);
    assert_eq!(
        code == Some(1),
        unschedulable > 0,
        "exit {code:?} with {unschedulable} unschedulable pod(s): {stderr}"
    );
    if unschedulable > 0 {
        assert!(
            stderr.contains(&format!("{unschedulable} of ")) && stderr.contains("unschedulable"),
            "{stderr}"
        );
    }
    r
}

/// NodeClaims by instance type, e.g. `{"m5.xlarge": 1}`.
fn claims_by_type(r: &Value) -> std::collections::BTreeMap<String, u64> {
    r["nodeclaims"]["by_instance_type"]
        .as_object()
        .expect("by type")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
        .collect()
}

fn all_scheduled(r: &Value, pods: u64) {
    assert_eq!(r["pods"]["total"], pods, "{r}");
    assert_eq!(r["pods"]["scheduled"], pods, "{}", r["pods"]);
}

#[test]
fn max_pods_of_the_node_class_limits_pods_per_nodeclaim() {
    let r = simulate_manifests(&format!(
        "{SIZED_NODE_CLASS}{}",
        deployment("small", 40, "{requests: {cpu: 10m, memory: 16Mi}}", false)
    ));
    all_scheduled(&r, 40);
    let claims = r["nodeclaims"]["total"].as_u64().expect("total");
    assert!(
        claims >= 5,
        "maxPods 8 needs at least 5 NodeClaims for 40 pods: {claims}"
    );
}

#[test]
fn kube_reserved_and_pod_level_requests_decide_the_instance_type() {
    // m5.large keeps 1000m after one CPU of kube-reserved: neither pod fits there.
    for (name, resources, pod_level) in [
        (
            "container",
            "{requests: {cpu: 1500m, memory: 256Mi}}",
            false,
        ),
        ("pod-level", "{requests: {cpu: 2500m, memory: 256Mi}}", true),
    ] {
        let r = simulate_manifests(&format!(
            "{SIZED_NODE_CLASS}{}",
            deployment(name, 1, resources, pod_level)
        ));
        all_scheduled(&r, 1);
        assert_eq!(
            claims_by_type(&r),
            [("m5.xlarge".to_string(), 1)].into(),
            "{name}"
        );
    }
}

#[test]
fn the_root_volume_of_the_node_class_is_ephemeral_storage() {
    let r = simulate_manifests(&format!(
        "{SIZED_NODE_CLASS}{}",
        deployment(
            "scratch",
            1,
            "{requests: {cpu: 100m, ephemeral-storage: 200Gi}}",
            false
        )
    ));
    all_scheduled(&r, 1);
}

#[test]
fn amd_gpus_land_on_g4ad_and_neuron_on_inferentia_or_trainium() {
    // The requests of upstream's `examples/workloads/gpu-amd.yaml` and `neuron.yaml`: one
    // device as a limit (requests default to it), one CPU, 256M.
    for (resource, families) in [
        ("amd.com/gpu", &["g4ad"][..]),
        (
            "aws.amazon.com/neuron",
            &["inf1", "inf2", "trn1", "trn1n", "trn2"][..],
        ),
    ] {
        let r = simulate_manifests(&format!(
            "{ANY_TYPE_POOL}{}",
            deployment(
                "accelerated",
                1,
                &format!(
                    "{{limits: {{{resource}: \"1\"}}, requests: {{cpu: \"1\", memory: 256M}}}}"
                ),
                false,
            )
        ));
        all_scheduled(&r, 1);
        let types = claims_by_type(&r);
        assert!(
            types
                .keys()
                .all(|t| families.contains(&t.split('.').next().unwrap_or(""))),
            "{resource}: {types:?}"
        );
    }
}

/// A NodePool asking for 50 distinct instance types (the API's maximum, as upstream's CRD has it)
/// among the m5 and c5 families, which have fewer.
const MIN_VALUES_50_POOL: &str = r#"
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

#[test]
fn min_values_policy_strict_leaves_pods_pending_and_best_effort_relaxes() {
    let manifests = format!(
        "{MIN_VALUES_50_POOL}{}",
        deployment("app", 2, "{requests: {cpu: 500m}}", false)
    );
    // Strict (the default): no NodeClaim, and each pod says minValues is why.
    let strict = simulate_manifests(&manifests);
    assert_eq!(strict["nodeclaims"]["total"], 0, "{strict}");
    let pending = strict["pods"]["unschedulable"].as_array().expect("list");
    assert_eq!(pending.len(), 2, "{strict}");
    for p in pending {
        let why = p["reason"].as_str().expect("reason");
        assert!(why.contains("minValues requirement is not met"), "{why}");
    }
    // BestEffort: the pods are scheduled, and the NodeClaim is counted as relaxed.
    let relaxed = simulate_manifests_with(&manifests, &["--min-values-policy", "BestEffort"]);
    all_scheduled(&relaxed, 2);
    let claims = relaxed["nodeclaims"]["total"].as_u64().expect("total");
    assert!(claims >= 1, "{relaxed}");
    assert_eq!(
        relaxed["nodeclaims"]["min_values_relaxed"], claims,
        "{relaxed}"
    );
    assert_eq!(
        relaxed["nodeclaims"]["by_nodepool"]["wide"], claims,
        "{relaxed}"
    );
    let by_capacity_type: u64 = relaxed["nodeclaims"]["by_capacity_type"]
        .as_object()
        .expect("by capacity type")
        .values()
        .filter_map(Value::as_u64)
        .sum();
    assert_eq!(by_capacity_type, claims);
    // A value upstream does not accept is refused with the variable named.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("workload.yaml");
    std::fs::write(&path, &manifests).expect("write workload");
    let out = karpenter(&[
        "simulate",
        "--workload",
        path.to_str().expect("utf-8 path"),
        "--min-values-policy",
        "besteffort",
    ]);
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid MIN_VALUES_POLICY"), "{err}");
}

#[test]
fn capacity_reservations_are_planned_into_first() {
    let manifests = format!(
        "{}{}",
        r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-sandbox
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]
  capacityReservationSelectorTerms: [{tags: {team: ml}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: reserved}
spec:
  template:
    spec:
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [reserved, on-demand]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"#,
        deployment("trainer", 5, "{requests: {cpu: 1500m}}", false)
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let reservations = dir.path().join("reservations.yaml");
    std::fs::write(
        &reservations,
        "- {CapacityReservationId: cr-0123456789abcdef0, InstanceType: m5.large, \
         AvailabilityZone: us-east-1a, TotalInstanceCount: 3, AvailableInstanceCount: 3, \
         OwnerId: \"123456789012\", Tags: [{Key: team, Value: ml}]}\n",
    )
    .expect("write reservations");
    let r = simulate_manifests_with(
        &manifests,
        &[
            "--capacity-reservations",
            reservations.to_str().expect("utf-8 path"),
        ],
    );
    all_scheduled(&r, 5);
    assert_eq!(r["nodeclaims"]["by_capacity_type"]["reserved"], 3, "{r}");
    assert_eq!(r["nodeclaims"]["by_capacity_type"]["on-demand"], 2, "{r}");
    // Without the file, all five are on demand.
    let plain = simulate_manifests(&manifests);
    assert_eq!(
        plain["nodeclaims"]["by_capacity_type"]["on-demand"], 5,
        "{plain}"
    );
}

/// NodeOverlays (`--feature-gates NodeOverlay=true`): on-demand m5.large ($0.096/h) or
/// c5.large ($0.085/h); the overlays change what the provisioner assumes of them.
const M5_OR_C5_POOL: &str = r#"
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
"#;

/// `karpenter simulate --report json` over the manifests with extra flags: the report and
/// stderr.
fn simulate_with_stderr(manifests: &str, flags: &[&str]) -> (Value, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("workload.yaml");
    std::fs::write(&path, manifests).expect("write workload");
    let mut args = vec!["simulate", "--workload", path.to_str().expect("utf-8 path")];
    args.extend_from_slice(&["--report", "json"]);
    args.extend_from_slice(flags);
    let out = karpenter(&args);
    (
        simulated(&out),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_price_overlay_makes_m5_large_win_only_with_its_feature_gate() {
    let manifests = format!(
        "{M5_OR_C5_POOL}{}",
        deployment("app", 1, "{requests: {cpu: 500m, memory: 1Gi}}", false)
    );
    let (off, stderr) = simulate_with_stderr(&manifests, &[]);
    all_scheduled(&off, 1);
    assert_eq!(claims_by_type(&off), [("c5.large".to_string(), 1)].into());
    assert!(
        stderr.contains("2 NodeOverlay(s) in the workload are not applied")
            && stderr.contains("--feature-gates NodeOverlay=true"),
        "{stderr}"
    );

    let (on, stderr) = simulate_with_stderr(&manifests, &["--feature-gates", "NodeOverlay=true"]);
    all_scheduled(&on, 1);
    assert_eq!(claims_by_type(&on), [("m5.large".to_string(), 1)].into());
    assert!(
        (number(&on, "/cost_per_hour_usd") - 0.096).abs() < 1e-9,
        "{on}"
    );
    assert!(!stderr.contains("NodeOverlay"), "{stderr}");
}

#[test]
fn a_capacity_overlay_makes_an_extended_resource_schedulable() {
    let manifests = format!(
        "{M5_OR_C5_POOL}{}",
        deployment(
            "fpga",
            1,
            "{requests: {cpu: 500m, example.com/fpga: \"1\"}, limits: {example.com/fpga: \"1\"}}",
            false
        )
    );
    let (off, _) = simulate_with_stderr(&manifests, &[]);
    assert_eq!(off["pods"]["scheduled"], 0, "{off}");
    assert_eq!(off["nodeclaims"]["total"], 0, "{off}");
    // As text, with nothing scheduled, no meaningless bound is printed.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("workload.yaml");
    std::fs::write(&path, &manifests).expect("write workload");
    let text = karpenter(&["simulate", "--workload", path.to_str().expect("utf-8 path")]);
    assert_eq!(text.status.code(), Some(1));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("no lower bound: no pod was scheduled") && !text.contains("(x0.000)"),
        "{text}"
    );

    let (on, _) = simulate_with_stderr(&manifests, &["--feature-gates", "NodeOverlay=true"]);
    all_scheduled(&on, 1);
    assert_eq!(claims_by_type(&on), [("m5.large".to_string(), 1)].into());
}

#[test]
fn another_region_has_its_own_zones_and_says_its_prices_are_approximate() {
    let manifests = deployment("web", 3, "{requests: {cpu: 1500m}}", false);
    let r = simulate_manifests_with(&manifests, &["--region", "eu-west-1"]);
    all_scheduled(&r, 3);
    assert_eq!(r["region"], "eu-west-1", "{r}");
    assert_eq!(r["on_demand_prices_approximate"], true, "{r}");
    let note = r["price_note"].as_str().expect("note");
    assert!(
        note.contains("APPROXIMATE") && note.contains("eu-west-1"),
        "{note}"
    );
    let home = simulate_manifests(&manifests);
    assert_eq!(home["region"], "us-east-1", "{home}");
    assert_eq!(home["on_demand_prices_approximate"], false, "{home}");
    let bad = karpenter(&[
        "simulate",
        "--generate",
        "diverse:10",
        "--region",
        "mars-north-1",
    ]);
    assert_ne!(bad.status.code(), Some(0));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("mars-north-1") && err.contains("eu-west-1"),
        "{err}"
    );
}
