//! Tests of the drift hashes: stable under reordering, changed by every hashed field, field
//! diffs from stamped snapshots, and golden hashes pinned to the hash version.

use serde_json::json;

use super::*;

fn pool(template: Value) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": template},
    }))
    .expect("valid NodePool")
}

fn base() -> Value {
    json!({
        "metadata": {"labels": {"team": "web"}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
        },
    })
}

fn with(mut v: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("pointer has a parent");
    v.pointer_mut(parent).expect("parent exists")[key] = value;
    v
}

#[test]
fn hash_is_stable_and_ignores_requirements_and_taint_order() {
    let a = nodepool_fields(&pool(base()));
    assert_eq!(a.hash(), nodepool_fields(&pool(base())).hash());
    let narrowed = with(
        base(),
        "/spec/requirements",
        json!([{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]),
    );
    assert_eq!(a.hash(), nodepool_fields(&pool(narrowed)).hash());
    let t1 = with(
        base(),
        "/spec/taints",
        json!([{"key": "a", "effect": "NoSchedule"}, {"key": "b", "value": "1", "effect": "NoExecute"}]),
    );
    let t2 = with(
        base(),
        "/spec/taints",
        json!([{"key": "b", "value": "1", "effect": "NoExecute"}, {"key": "a", "effect": "NoSchedule"}]),
    );
    let (h1, h2) = (
        nodepool_fields(&pool(t1)).hash(),
        nodepool_fields(&pool(t2)).hash(),
    );
    assert_eq!(h1, h2);
    assert_ne!(h1, a.hash());
    assert!(
        a.hash().parse::<u64>().is_ok(),
        "decimal like upstream's: {}",
        a.hash()
    );
}

#[test]
fn every_hashed_field_changes_the_hash() {
    let h = nodepool_fields(&pool(base())).hash();
    for (pointer, value) in [
        ("/metadata/labels/team", json!("db")),
        ("/metadata/annotations", json!({"note": "x"})),
        (
            "/spec/taints",
            json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
        ),
        (
            "/spec/startupTaints",
            json!([{"key": "cni", "effect": "NoSchedule"}]),
        ),
        ("/spec/nodeClassRef/name", json!("other")),
        ("/spec/expireAfter", json!("24h")),
        ("/spec/terminationGracePeriod", json!("1h")),
    ] {
        let changed = nodepool_fields(&pool(with(base(), pointer, value))).hash();
        assert_ne!(h, changed, "{pointer} must be hashed");
    }
}

#[test]
fn diff_names_added_taint_and_changed_label() {
    let old = nodepool_fields(&pool(base()));
    let snapshot = Snapshot::parse(&old.snapshot()).expect("own snapshot parses");
    let new = with(
        with(base(), "/metadata/labels/team", json!("db")),
        "/spec/taints",
        json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
    );
    let changes: Vec<String> = diff(&snapshot, &nodepool_fields(&pool(new)))
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        changes,
        [
            "spec.template.metadata.labels.team: web -> db",
            "spec.template.spec.taints: added dedicated=gpu:NoSchedule",
        ]
    );
    assert!(diff(&snapshot, &old).is_empty(), "no change, no diff");
}

#[test]
fn label_keys_with_domains_are_quoted_and_removals_named() {
    let old = with(
        base(),
        "/metadata/labels",
        json!({"example.com/team": "a", "tier": "1"}),
    );
    let new = with(base(), "/metadata/labels", json!({"tier": "1"}));
    let snapshot = Snapshot::parse(&nodepool_fields(&pool(old)).snapshot()).expect("parses");
    let changes: Vec<String> = diff(&snapshot, &nodepool_fields(&pool(new)))
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        changes,
        ["spec.template.metadata.labels[\"example.com/team\"]: removed a"]
    );
}

#[test]
fn oversized_groups_are_kept_as_digests_and_still_detected() {
    let big: String = "x".repeat(4000);
    let old = with(base(), "/metadata/annotations", json!({"blob": big}));
    let fields = nodepool_fields(&pool(old.clone()));
    let text = fields.snapshot();
    assert!(text.len() <= SNAPSHOT_BUDGET, "{} bytes", text.len());
    assert!(text.contains("team"), "small groups are kept whole: {text}");
    let snapshot = Snapshot::parse(&text).expect("parses");
    assert!(diff(&snapshot, &fields).is_empty());
    let new = with(old, "/metadata/annotations/blob", json!("y"));
    let changes = diff(&snapshot, &nodepool_fields(&pool(new)));
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].path, "spec.template.metadata.annotations");
    assert!(matches!(
        changes[0].change,
        Change::ChangedUnrecorded { .. }
    ));
}

#[test]
fn nodeclass_hash_ignores_selectors_and_ip_prefixes_but_not_user_data_or_placement() {
    let class = |spec: Value| -> EC2NodeClass {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"}, "spec": spec,
        }))
        .expect("valid EC2NodeClass")
    };
    let spec = json!({
        "role": "KarpenterNodeRole",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
    });
    let h = nodeclass_fields(&class(spec.clone())).hash();
    let mut pinned = spec.clone();
    pinned["amiSelectorTerms"] = json!([{"alias": "al2023@v20260101"}]);
    pinned["subnetSelectorTerms"] = json!([{"id": "subnet-1"}]);
    // ipPrefixCount only sizes pod addressing: not hashed, as upstream.
    pinned["ipPrefixCount"] = json!(4);
    assert_eq!(h, nodeclass_fields(&class(pinned)).hash());
    // A placement group is where nodes run: hashed, as upstream, so moving it drifts them.
    let mut placed = spec.clone();
    placed["placementGroupSelector"] = json!({"name": "training"});
    assert_ne!(h, nodeclass_fields(&class(placed)).hash());
    let mut user_data = spec;
    user_data["userData"] = json!("echo hi");
    let changed = nodeclass_fields(&class(user_data));
    assert_ne!(h, changed.hash());
    let old = Snapshot::parse(
        &nodeclass_fields(&class(json!({
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"id": "s"}], "securityGroupSelectorTerms": [{"id": "g"}],
        })))
        .snapshot(),
    )
    .expect("parses");
    let changes: Vec<String> = diff(&old, &changed)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(changes, ["spec.userData: added echo hi"]);
}

#[test]
fn malformed_snapshots_are_errors() {
    assert!(Snapshot::parse("[1]").is_err());
    assert!(Snapshot::parse("{").is_err());
}

/// The hashes of a fixed NodePool and EC2NodeClass. If this test fails, the hashing changed:
/// bump NODEPOOL_HASH_VERSION / EC2NODECLASS_HASH_VERSION (so running clusters re-stamp instead
/// of drifting) and then update the expected values.
#[test]
fn golden_hashes_pin_the_hashing_to_its_version() {
    let class: EC2NodeClass = serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole", "userData": "echo hi", "tags": {"team": "web"},
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
            "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi", "volumeType": "gp3"}}],
        },
    }))
    .expect("valid EC2NodeClass");
    let with_taint = with(
        base(),
        "/spec/taints",
        json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
    );
    assert_eq!(
        (
            NODEPOOL_HASH_VERSION,
            nodepool_fields(&pool(with_taint)).hash()
        ),
        ("rs-v1", GOLDEN_NODEPOOL.to_string())
    );
    assert_eq!(
        (EC2NODECLASS_HASH_VERSION, nodeclass_fields(&class).hash()),
        ("rs-v1", GOLDEN_NODECLASS.to_string())
    );
}

const GOLDEN_NODEPOOL: &str = "2645689498240329035";
const GOLDEN_NODECLASS: &str = "14648435126249218646";
