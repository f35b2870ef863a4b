//! The CRDs' CEL rules (`x-kubernetes-validations`) compile, stay within the API server's cost
//! budget, accept upstream's examples and reject what upstream rejects. Evaluated client-side
//! with kube-cel, after applying the schema defaults as the API server does.

use std::path::PathBuf;

use crds::Operator;
use crds::generate;
use crds::labels::ARCH_LABEL;
use kube::core::cel::{
    CompiledSchema, ScopeContext, Validator, WarningKind, analyze_rule, compile_schema,
};
use serde_json::{Value, json};

fn schema(crd_name: &str) -> Value {
    let crd = generate::crds()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(crd_name))
        .unwrap_or_else(|| panic!("no CRD {crd_name}"));
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("schema");
    serde_json::to_value(schema).expect("schema JSON")
}

fn schema_for_kind(kind: &str) -> Value {
    match kind {
        "NodePool" => schema("nodepools.karpenter.sh"),
        "NodeClaim" => schema("nodeclaims.karpenter.sh"),
        "EC2NodeClass" => schema("ec2nodeclasses.karpenter.k8s.aws"),
        "NodeOverlay" => schema("nodeoverlays.karpenter.sh"),
        other => panic!("unexpected kind {other}"),
    }
}

fn walk(path: &str, node: &CompiledSchema, problems: &mut Vec<String>, rules: &mut usize) {
    for v in &node.validations {
        match v {
            Err(e) => problems.push(format!("{path}: {e}")),
            Ok(compiled) => {
                *rules += 1;
                for w in analyze_rule(&compiled.rule.rule, node, ScopeContext::CrdValidation) {
                    // Scope warnings misfire on comprehension variables (`self.all(x, ...)`).
                    if w.kind == WarningKind::CostExceeded {
                        problems.push(format!("{path}: {}: {}", w.rule, w.message));
                    }
                }
            }
        }
    }
    for (name, child) in &node.properties {
        walk(&format!("{path}.{name}"), child, problems, rules);
    }
    if let Some(items) = &node.items {
        walk(&format!("{path}[]"), items, problems, rules);
    }
    if let Some(ap) = &node.additional_properties {
        walk(&format!("{path}[*]"), ap, problems, rules);
    }
}

#[test]
fn rules_compile_within_budget() {
    for name in [
        "nodepools.karpenter.sh",
        "nodeclaims.karpenter.sh",
        "ec2nodeclasses.karpenter.k8s.aws",
        "nodeoverlays.karpenter.sh",
    ] {
        let compiled = compile_schema(&schema(name));
        let (mut problems, mut rules) = (Vec::new(), 0);
        walk(name, &compiled, &mut problems, &mut rules);
        assert!(
            problems.is_empty(),
            "CEL problems:\n  {}",
            problems.join("\n  ")
        );
        assert!(rules > 0, "{name} has no CEL rules");
    }
}

fn examples() -> Vec<(String, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/upstream/nodepools");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for file in files {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let values: Vec<Value> = serde_saphyr::from_str_multiple(&text).expect("YAML");
        for (i, v) in values.into_iter().filter(|v| !v.is_null()).enumerate() {
            docs.push((format!("{}#{i}", file.display()), v));
        }
    }
    docs
}

fn errors(kind: &str, object: &Value, old: Option<&Value>) -> Vec<String> {
    match Validator::new().validate(&schema_for_kind(kind), object, old) {
        Ok(()) => Vec::new(),
        Err(errs) => errs.iter().map(|e| e.message.clone()).collect(),
    }
}

#[test]
fn upstream_examples_pass_cel_rules() {
    let docs = examples();
    assert!(!docs.is_empty());
    for (name, doc) in docs {
        let kind = doc["kind"].as_str().unwrap_or("").to_string();
        let errs = errors(&kind, &doc, None);
        assert!(errs.is_empty(), "{name} ({kind}) rejected: {errs:?}");
        // Applying an unchanged object as an update passes the transition rules too.
        let errs = errors(&kind, &doc, Some(&doc));
        assert!(
            errs.is_empty(),
            "{name} ({kind}) rejected as update: {errs:?}"
        );
    }
}

/// The NodePool `default` (amd64 only) with `spec_patch` merged into its spec (RFC 7386).
fn nodepool(spec_patch: Value) -> Value {
    testutil::nodepool("default")
        .requirement(ARCH_LABEL, Operator::In, ["amd64"])
        .merge(json!({"spec": spec_patch}))
        .json()
}

/// The EC2NodeClass `default` (subnets and security groups tagged for cluster `c`) with
/// `spec_patch` merged into its spec (RFC 7386).
fn ec2nodeclass(spec_patch: Value) -> Value {
    testutil::ec2nodeclass("default")
        .role("KarpenterNodeRole")
        .discovery("c")
        .merge(json!({"spec": spec_patch}))
        .json()
}

#[test]
fn nodepool_rules_reject_like_upstream() {
    let req = |r: Value| json!({"template": {"spec": {"requirements": [r]}}});
    let cases: Vec<(&str, Value, &str)> = vec![
        ("valid", json!({}), ""),
        (
            "in with empty values",
            req(json!({"key": "a", "operator": "In", "values": []})),
            "must have a value defined",
        ),
        // As on a real API server, the rule cannot read the absent list and the object is rejected.
        (
            "in without values",
            req(json!({"key": "a", "operator": "In"})),
            "values",
        ),
        (
            "gt negative",
            req(json!({"key": "a", "operator": "Gt", "values": ["-1"]})),
            "single positive integer",
        ),
        (
            "minValues above values",
            req(json!({"key": "a", "operator": "In", "values": ["x"], "minValues": 2})),
            "at least that many values",
        ),
        (
            "nodepool key",
            req(json!({"key": "karpenter.sh/nodepool", "operator": "Exists"})),
            "restricted",
        ),
        (
            "karpenter domain key",
            req(json!({"key": "karpenter.sh/custom", "operator": "Exists"})),
            "restricted",
        ),
        (
            "aws domain key",
            req(json!({"key": "karpenter.k8s.aws/custom", "operator": "Exists"})),
            "restricted",
        ),
        (
            "aws well-known key",
            req(json!({"key": "karpenter.k8s.aws/instance-family", "operator": "Exists"})),
            "",
        ),
        (
            "nodepool label",
            json!({"template": {"metadata": {"labels": {"karpenter.sh/nodepool": "x"}}}}),
            "restricted",
        ),
        (
            "hostname label",
            json!({"template": {"metadata": {"labels": {"kubernetes.io/hostname": "x"}}}}),
            "restricted",
        ),
        (
            "custom label",
            json!({"template": {"metadata": {"labels": {"team": "a"}}}}),
            "",
        ),
        (
            "empty nodeclass name",
            json!({"template": {"spec": {"nodeClassRef": {"name": ""}}}}),
            "may not be empty",
        ),
        (
            "schedule without duration",
            json!({"disruption": {"budgets": [{"nodes": "1", "schedule": "@daily"}]}}),
            "'schedule' must be set with 'duration'",
        ),
        (
            "static with weight",
            json!({"replicas": 2, "weight": 10}),
            "'weight' is not supported",
        ),
        (
            "static with cpu limit",
            json!({"replicas": 2, "limits": {"cpu": "10"}}),
            "only 'limits.nodes'",
        ),
        (
            "static with nodes limit",
            json!({"replicas": 2, "limits": {"nodes": 10}}),
            "",
        ),
    ];
    for (name, patch, want) in cases {
        let np = nodepool(patch);
        let errs = errors("NodePool", &np, None);
        if want.is_empty() {
            assert!(errs.is_empty(), "{name}: unexpected {errs:?}");
        } else {
            assert!(
                errs.iter().any(|e| e.contains(want)),
                "{name}: want {want:?}, got {errs:?}"
            );
        }
    }
}

/// Not an upstream rule: a NodePool's name is the `karpenter.sh/nodepool` label value of its
/// NodeClaims and Nodes, so this project's CRD caps it at a label value's 63 characters.
#[test]
fn nodepool_names_longer_than_a_label_value_are_refused() {
    let named = |name: String| {
        let mut pool = nodepool(json!({}));
        pool["metadata"]["name"] = json!(name);
        pool
    };
    assert_eq!(
        errors("NodePool", &named("a".repeat(63)), None),
        Vec::<String>::new()
    );
    let long = named("a".repeat(64));
    assert_eq!(
        errors("NodePool", &long, None),
        [crds::nodepool::NODEPOOL_NAME_MESSAGE]
    );
}

#[test]
fn transition_rules() {
    let old = nodepool(json!({}));
    let new =
        nodepool(json!({"template": {"spec": {"nodeClassRef": {"group": "other.example.com"}}}}));
    let errs = errors("NodePool", &new, Some(&old));
    assert!(
        errs.iter()
            .any(|e| e.contains("nodeClassRef.group is immutable")),
        "{errs:?}"
    );
    let new = nodepool(json!({"replicas": 1}));
    let errs = errors("NodePool", &new, Some(&old));
    assert!(
        errs.iter()
            .any(|e| e.contains("Cannot transition NodePool")),
        "{errs:?}"
    );

    let claim = |instance_type: &str| {
        json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "c"},
            "spec": {
                "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }
        })
    };
    assert!(errors("NodeClaim", &claim("m5.large"), Some(&claim("m5.large"))).is_empty());
    let errs = errors("NodeClaim", &claim("m5.xlarge"), Some(&claim("m5.large")));
    assert!(
        errs.iter().any(|e| e.contains("spec is immutable")),
        "{errs:?}"
    );
}

#[test]
fn ec2nodeclass_rules_reject_like_upstream() {
    let cases: Vec<(&str, Value, &str)> = vec![
        ("valid", json!({}), ""),
        (
            "role and profile",
            json!({"instanceProfile": "p"}),
            "exactly one of ['role', 'instanceProfile']",
        ),
        (
            "neither role nor profile",
            json!({"role": null}),
            "exactly one of ['role', 'instanceProfile']",
        ),
        (
            "no family without alias",
            json!({"amiSelectorTerms": [{"id": "ami-123"}]}),
            "must specify amiFamily",
        ),
        (
            "family with ids",
            json!({"amiFamily": "AL2023", "amiSelectorTerms": [{"id": "ami-123"}]}),
            "",
        ),
        (
            "wrong family for alias",
            json!({"amiFamily": "Bottlerocket"}),
            "amiFamily must be 'AL2023' or 'Custom'",
        ),
        (
            "custom family with alias",
            json!({"amiFamily": "Custom"}),
            "",
        ),
        (
            "alias with other term",
            json!({"amiSelectorTerms": [{"alias": "al2023@latest"}, {"id": "ami-1"}]}),
            "mutually exclusive",
        ),
        (
            "bad alias family",
            json!({"amiSelectorTerms": [{"alias": "ubuntu@latest"}]}),
            "family is not supported",
        ),
        (
            "pinned windows",
            json!({"amiSelectorTerms": [{"alias": "windows2022@v1"}]}),
            "only specify version 'latest'",
        ),
        (
            "empty subnets",
            json!({"subnetSelectorTerms": []}),
            "subnetSelectorTerms cannot be empty",
        ),
        (
            "id with tags",
            json!({"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}]}),
            "mutually exclusive",
        ),
        (
            "restricted tag",
            json!({"tags": {"karpenter.sh/nodepool": "x"}}),
            "restricted tag",
        ),
        (
            "cluster tag",
            json!({"tags": {"kubernetes.io/cluster/c": "owned"}}),
            "restricted tag",
        ),
        (
            "two root volumes",
            json!({"blockDeviceMappings": [
                {"rootVolume": true, "ebs": {"volumeSize": "20Gi"}},
                {"rootVolume": true, "ebs": {"volumeSize": "20Gi"}}
            ]}),
            "only one blockDeviceMappings with rootVolume",
        ),
        (
            "ebs without size",
            json!({"blockDeviceMappings": [{"ebs": {"volumeType": "gp3"}}]}),
            "snapshotID or volumeSize",
        ),
    ];
    for (name, patch, want) in cases {
        let nc = ec2nodeclass(patch);
        let errs = errors("EC2NodeClass", &nc, None);
        if want.is_empty() {
            assert!(errs.is_empty(), "{name}: unexpected {errs:?}");
        } else {
            assert!(
                errs.iter().any(|e| e.contains(want)),
                "{name}: want {want:?}, got {errs:?}"
            );
        }
    }
}

/// The NodeOverlay `o` (upstream's base: `karpenter.sh/capacity-type Exists`) with the fields
/// of `spec_patch` set in its spec.
fn nodeoverlay(spec_patch: Value) -> Value {
    let mut o = json!({
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "o"},
        "spec": {"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}]}
    });
    if let (Some(spec), Some(patch)) = (o["spec"].as_object_mut(), spec_patch.as_object()) {
        spec.extend(patch.clone());
    }
    o
}

#[test]
fn nodeoverlay_rules_reject_like_upstream() {
    let req = |r: Value| json!({"requirements": [r]});
    let cases: Vec<(&str, Value, &str)> = vec![
        ("valid", json!({}), ""),
        (
            "in with empty values",
            req(json!({"key": "a", "operator": "In", "values": []})),
            "requirements with operator 'In' must have a value defined",
        ),
        (
            "notin with empty values",
            req(json!({"key": "a", "operator": "NotIn", "values": []})),
            "requirements with operator 'NotIn' must have a value defined",
        ),
        (
            "gte negative",
            req(json!({"key": "a", "operator": "Gte", "values": ["-1"]})),
            "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
        ),
        (
            "lt two values",
            req(json!({"key": "a", "operator": "Lt", "values": ["1", "2"]})),
            "single positive integer value",
        ),
        (
            "nodepool key",
            req(json!({"key": "karpenter.sh/nodepool", "operator": "In", "values": ["a"]})),
            "",
        ),
        (
            "karpenter domain key",
            req(json!({"key": "karpenter.sh/custom", "operator": "Exists"})),
            "label domain \"karpenter.sh\" is restricted",
        ),
        (
            "hostname key",
            req(json!({"key": "kubernetes.io/hostname", "operator": "Exists"})),
            "label \"kubernetes.io/hostname\" is restricted",
        ),
        (
            "price and adjustment",
            json!({"price": "0.432", "priceAdjustment": "+10%"}),
            "cannot set both 'price' and 'priceAdjustment'",
        ),
        ("price alone", json!({"price": "0.432"}), ""),
        (
            "cpu capacity",
            json!({"capacity": {"cpu": "1"}}),
            "invalid resource restricted",
        ),
        (
            "pods capacity",
            json!({"capacity": {"pods": 324}}),
            "invalid resource restricted",
        ),
        (
            "extended capacity",
            json!({"capacity": {"smarter-devices/fuse": "1"}}),
            "",
        ),
    ];
    for (name, patch, want) in cases {
        let o = nodeoverlay(patch);
        let errs = errors("NodeOverlay", &o, None);
        if want.is_empty() {
            assert!(errs.is_empty(), "{name}: unexpected {errs:?}");
        } else {
            assert!(
                errs.iter().any(|e| e.contains(want)),
                "{name}: want {want:?}, got {errs:?}"
            );
        }
    }
}
