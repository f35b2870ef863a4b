//! End-to-end tests of `kubectl karpenter drift explain` against the in-process sandbox API
//! server, without a controller: a NodePool, an EC2NodeClass and NodeClaims stamped the way the
//! controller stamps them are created through the API, then the NodePool gets a taint.

use crate::support;

use std::collections::BTreeMap;

use crds::hash::{nodeclass_fields, nodeclass_stamp, nodepool_fields, nodepool_stamp};
use crds::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL};
use crds::{EC2NodeClass, NodePool, Operator};
use karpenter_core::lifecycle::drift::HashVersions;
use sandbox::store::Subresource;
use serde_json::{Value, json};
use testutil::{condition, ec2nodeclass, node, nodeclaim, nodepool};

use support::{Cluster, STAGED, kubectl, plugin_path, stderr, stdout};

/// The AMI the EC2NodeClass resolves and every NodeClaim runs.
const AMI: &str = "ami-0aaa";
/// The change the NodePool gets after the first NodeClaims were stamped.
const TAINT_CHANGE: &str = "spec.template.spec.taints: added dedicated=gpu:NoSchedule";

/// The sandbox with the objects, and what the tests compare against.
struct Drift {
    cluster: Cluster,
    kubeconfig: String,
    /// The NodePool's hash now (with the taint).
    pool_hash: String,
    /// The EC2NodeClass's hash.
    class_hash: String,
}

impl Drift {
    async fn plugin(&self, args: &[&str]) -> std::process::Output {
        let mut all = vec!["drift", "explain", "--kubeconfig", &self.kubeconfig];
        all.extend_from_slice(args);
        self.cluster.plugin(&all).await
    }
}

/// The sandbox's resource type for `plural` in `group` (all at version v1).
fn resource(cluster: &Cluster, group: &str, plural: &str) -> sandbox::registry::ResourceType {
    cluster
        .sandbox
        .store()
        .resource(group, "v1", plural)
        .expect("served")
}

/// Creates the `default` EC2NodeClass with a resolved status; returns it as stored.
fn create_class(cluster: &Cluster) -> EC2NodeClass {
    let rt = resource(cluster, "karpenter.k8s.aws", "ec2nodeclasses");
    let store = cluster.sandbox.store();
    let class = ec2nodeclass("default")
        .role("KarpenterNodeRole")
        .discovery("sandbox")
        .json();
    store.create(&rt, "", class).expect("create EC2NodeClass");
    let stored = store
        .modify(&rt, "", "default", Subresource::Status, |obj| {
            obj["status"] = json!({
                "subnets": [{"id": "subnet-a", "zone": "us-east-1a"}],
                "securityGroups": [{"id": "sg-1"}],
                "amis": [{"id": AMI, "name": "al2023-x86_64", "requirements": []}],
            });
            Ok(())
        })
        .expect("EC2NodeClass status");
    serde_json::from_value((*stored).clone()).expect("stored EC2NodeClass")
}

/// Creates the `default` NodePool or sets its taints; returns it as stored (defaults applied).
fn apply_pool(cluster: &Cluster, taints: Value) -> NodePool {
    let rt = resource(cluster, "karpenter.sh", "nodepools");
    let store = cluster.sandbox.store();
    let stored = if store.get(&rt, "", "default").is_ok() {
        store
            .modify(&rt, "", "default", Subresource::Main, |obj| {
                obj["spec"]["template"]["spec"]["taints"] = taints;
                Ok(())
            })
            .expect("update NodePool")
    } else {
        let pool = nodepool("default")
            .template_label("team", "web")
            .requirement(CAPACITY_TYPE_LABEL, Operator::In, ["spot", "on-demand"])
            .merge(json!({"spec": {"template": {"spec": {"taints": taints}}}}))
            .json();
        store.create(&rt, "", pool).expect("create NodePool")
    };
    serde_json::from_value((*stored).clone()).expect("stored NodePool")
}

/// The stamps the controller writes for `pool` and `class`.
fn stamps(pool: &NodePool, class: &EC2NodeClass) -> BTreeMap<String, String> {
    let versions = HashVersions::default();
    let mut out = nodepool_stamp(&nodepool_fields(pool), &versions.nodepool);
    out.extend(nodeclass_stamp(
        &nodeclass_fields(class),
        &versions.nodeclass,
    ));
    out
}

/// Creates a launched NodeClaim of `default` with `annotations`, registered as `node` when
/// given, with `Drifted=True` and `drifted` as its message when given.
fn create_claim(
    cluster: &Cluster,
    name: &str,
    annotations: &BTreeMap<String, String>,
    node: Option<&str>,
    drifted: Option<&str>,
) {
    let rt = cluster.nodeclaim_type();
    let store = cluster.sandbox.store();
    let claim = nodeclaim(name)
        .nodepool("default")
        .label("team", "web")
        .label(CAPACITY_TYPE_LABEL, "on-demand")
        .label(INSTANCE_TYPE_LABEL, "m5.large")
        .annotations(annotations)
        .json();
    store.create(&rt, "", claim).expect("create NodeClaim");
    let mut conditions = vec![condition("Launched", "True").at(STAGED).json()];
    if let Some(message) = drifted {
        conditions.push(
            condition("Drifted", "True")
                .reason("NodePoolDrifted")
                .message(message)
                .at("2025-06-01T01:00:00Z")
                .json(),
        );
    }
    store
        .modify(&rt, "", name, Subresource::Status, |obj| {
            let mut status = json!({
                "providerID": format!("aws:///us-east-1a/i-{name}"),
                "imageID": AMI,
                "conditions": conditions,
            });
            if let Some(node) = node {
                status["nodeName"] = json!(node);
            }
            obj["status"] = status;
            Ok(())
        })
        .expect("NodeClaim status");
}

fn create_node(cluster: &Cluster, name: &str, provider_id: &str) {
    let rt = resource(cluster, "", "nodes");
    let node = node(name).provider_id(provider_id).json();
    cluster
        .sandbox
        .store()
        .create(&rt, "", node)
        .expect("create Node");
}

/// Four NodeClaims of `default`, all launched:
/// - `default-drifted` (Node ip-10-0-1-1): stamped before the NodePool got a taint, and marked
///   `Drifted=True` by "the controller";
/// - `default-detected`: stamped before the taint, not marked yet;
/// - `default-clean`: stamped after the taint; its Node ip-10-0-1-2 is linked by providerID
///   only (status.nodeName not set yet);
/// - `default-upstream`: stamped by upstream Karpenter (hash versions v3 and v6).
///
/// Plus a Node ip-10-0-9-9 that no NodeClaim owns.
async fn setup() -> Drift {
    let cluster = Cluster::start(true).await;
    let class = create_class(&cluster);
    let before = stamps(&apply_pool(&cluster, json!([])), &class);
    let pool = apply_pool(
        &cluster,
        json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
    );
    let message = format!("NodePoolDrifted: {TAINT_CHANGE}");
    let node = Some("ip-10-0-1-1.ec2.internal");
    create_claim(&cluster, "default-drifted", &before, node, Some(&message));
    create_claim(&cluster, "default-detected", &before, None, None);
    create_claim(
        &cluster,
        "default-clean",
        &stamps(&pool, &class),
        None,
        None,
    );
    let upstream: BTreeMap<String, String> = [
        ("karpenter.sh/nodepool-hash", "6821555240594823858"),
        ("karpenter.sh/nodepool-hash-version", "v3"),
        ("karpenter.k8s.aws/ec2nodeclass-hash", "4929514813234187212"),
        ("karpenter.k8s.aws/ec2nodeclass-hash-version", "v6"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    create_claim(&cluster, "default-upstream", &upstream, None, None);
    create_node(
        &cluster,
        "ip-10-0-1-2.ec2.internal",
        "aws:///us-east-1a/i-default-clean",
    );
    create_node(
        &cluster,
        "ip-10-0-9-9.ec2.internal",
        "aws:///us-east-1a/i-stray",
    );
    let kubeconfig = cluster
        .kubeconfig()
        .to_str()
        .expect("utf-8 path")
        .to_owned();
    Drift {
        cluster,
        kubeconfig,
        pool_hash: nodepool_fields(&pool).hash(),
        class_hash: nodeclass_fields(&class).hash(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drifted_nodeclaim_names_the_field_change_and_exits_1() {
    let d = setup().await;
    let out = d.plugin(&["default-drifted"]).await;
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    assert!(
        !text.contains('\u{1b}'),
        "no colour off a terminal:\n{text}"
    );
    for want in [
        "Name:          default-drifted\n",
        "Node:          ip-10-0-1-1.ec2.internal\n",
        "Drifted:       True (marked by the controller)\n",
        "Reason:        NodePoolDrifted\n",
        "Since:         2025-06-01T01:00:00Z (",
        &format!("Changes:\n  NodePoolDrifted: {TAINT_CHANGE}\n"),
        &format!("  Current:     {} (version rs-v1)\n", d.pool_hash),
        "  Comparison:  Differs\n",
        "  Comparison:  Equal\n",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }

    let out = d.plugin(&["default-drifted", "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let items = doc.as_array().expect("a JSON array");
    assert_eq!(items.len(), 1);
    let r = &items[0];
    assert_eq!(r["name"], "default-drifted");
    assert_eq!(r["node"], "ip-10-0-1-1.ec2.internal");
    assert_eq!(r["nodepool"], "default");
    assert_eq!(r["drifted"], true);
    assert_eq!(r["source"], "controller");
    assert_eq!(r["reason"], "NodePoolDrifted");
    assert_eq!(
        r["changes"],
        json!([{"reason": "NodePoolDrifted", "change": TAINT_CHANGE, "source": "both"}])
    );
    assert_eq!(r["nodepoolHash"]["current"], d.pool_hash.as_str());
    assert_eq!(r["nodepoolHash"]["stampedVersion"], "rs-v1");
    assert_eq!(r["nodepoolHash"]["currentVersion"], "rs-v1");
    assert_eq!(r["nodepoolHash"]["comparison"], "differs");
    assert_ne!(r["nodepoolHash"]["stamped"], r["nodepoolHash"]["current"]);
    assert_eq!(r["nodeclassHash"]["comparison"], "equal");
    assert_eq!(r["nodeclassHash"]["current"], d.class_hash.as_str());
    assert_eq!(
        r["message"],
        "drifted: marked by the controller (NodePoolDrifted)"
    );

    // Not marked yet, but the same change is found now.
    let out = d.plugin(&["default-detected"]).await;
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("Drifted:       True (detected now, not yet marked by the controller)\n"),
        "{text}"
    );
    assert!(text.contains(TAINT_CHANGE), "{text}");

    // All of them: exit 1 because some are drifted, and a summary.
    let out = d.plugin(&[]).await;
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("Name:"))
        .map(str::trim)
        .collect();
    assert_eq!(
        names,
        [
            "default-clean",
            "default-detected",
            "default-drifted",
            "default-upstream"
        ]
    );
    assert_eq!(
        text.lines().last(),
        Some("4 nodeclaims: 2 drifted (1 marked by the controller, 1 detected now), 2 not drifted"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodeclaim_not_drifted_says_why_and_exits_0() {
    let d = setup().await;
    let out = d.plugin(&["default-clean"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    let want = format!(
        "Drifted:       False\nWhy:\n  nodepool hash and version equal ({}, rs-v1)\n  \
         ec2nodeclass hash and version equal ({}, rs-v1)\n  requirements admit its labels\n  \
         AMI {AMI} is current\n",
        d.pool_hash, d.class_hash
    );
    assert!(text.contains(&want), "missing\n{want}in\n{text}");
    assert!(!text.contains("Changes:"), "{text}");

    let out = d.plugin(&["default-clean", "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(doc[0]["drifted"], false);
    assert_eq!(doc[0]["source"], Value::Null);
    assert_eq!(doc[0]["changes"], json!([]));
    assert_eq!(doc[0]["nodepoolHash"]["comparison"], "equal");
    assert!(
        doc[0]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("not drifted: nodepool hash and version equal")),
        "{}",
        doc[0]["message"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_stamps_are_a_version_mismatch_not_drift() {
    let d = setup().await;
    let out = d.plugin(&["default-upstream"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    for want in [
        "Drifted:       False\n",
        "  nodepool stamped under hash version v3 (controller uses rs-v1): will be re-stamped, \
         not drifted\n",
        "  ec2nodeclass stamped under hash version v6 (controller uses rs-v1): will be \
         re-stamped, not drifted\n",
        "  Stamped:     6821555240594823858 (version v3)\n",
        "  Comparison:  VersionMismatch (will be re-stamped, not drifted)\n",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    let out = d.plugin(&["default-upstream", "-o", "json"]).await;
    let doc: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(doc[0]["nodepoolHash"]["comparison"], "versionMismatch");
    assert_eq!(doc[0]["nodepoolHash"]["stamped"], "6821555240594823858");
    assert_eq!(doc[0]["nodeclassHash"]["comparison"], "versionMismatch");
    assert_eq!(doc[0]["nodeclassHash"]["stampedVersion"], "v6");
    assert_eq!(doc[0]["drifted"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_names_resolve_and_unknown_names_fail() {
    let d = setup().await;
    // By status.nodeName.
    let out = d.plugin(&["ip-10-0-1-1.ec2.internal"]).await;
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    assert!(
        stdout(&out).starts_with("Name:          default-drifted\n"),
        "{}",
        stdout(&out)
    );
    // By the Node's providerID (the NodeClaim has no nodeName yet).
    let out = d.plugin(&["node/ip-10-0-1-2.ec2.internal"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(
        stdout(&out).starts_with("Name:          default-clean\n"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("Node:          ip-10-0-1-2.ec2.internal\n"),
        "the Node found by providerID is shown: {}",
        stdout(&out)
    );

    let out = d.plugin(&["nope"]).await;
    assert_eq!(out.status.code(), Some(2), "stdout: {}", stdout(&out));
    assert_eq!(stdout(&out), "");
    let err = stderr(&out);
    assert!(
        err.starts_with("error: no NodeClaim or Node named \"nope\" (context \""),
        "{err}"
    );
    assert!(
        err.contains("`kubectl karpenter status` lists NodeClaims"),
        "{err}"
    );

    let out = d.plugin(&["ip-10-0-9-9.ec2.internal"]).await;
    assert_eq!(out.status.code(), Some(2), "stdout: {}", stdout(&out));
    assert!(
        stderr(&out).starts_with(
            "error: node \"ip-10-0-9-9.ec2.internal\" has no NodeClaim: none has status.nodeName \
             ip-10-0-9-9.ec2.internal or providerID aws:///us-east-1a/i-stray"
        ),
        "{}",
        stderr(&out)
    );

    // A NodePool without NodeClaims: nothing to explain, nothing drifted.
    let out = d.plugin(&["--nodepool", "gpu"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "");
    assert_eq!(stderr(&out), "No resources found\n");
    let out = d.plugin(&["--nodepool", "gpu", "-o", "json"]).await;
    assert_eq!(stdout(&out).trim(), "[]");

    let out = d.plugin(&["x", "--nodepool", "default"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot be used with"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_as_a_kubectl_plugin_with_its_exit_code() {
    let d = setup().await;
    let out = d
        .cluster
        .run(
            &kubectl(),
            &[
                "karpenter",
                "drift",
                "explain",
                "ip-10-0-1-1.ec2.internal",
                "--kubeconfig",
                &d.kubeconfig,
            ],
            Some(plugin_path()),
        )
        .await;
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    assert!(stdout(&out).contains(TAINT_CHANGE), "{}", stdout(&out));

    let help = d
        .cluster
        .run(
            &kubectl(),
            &["karpenter", "drift", "explain", "--help"],
            Some(plugin_path()),
        )
        .await;
    assert!(help.status.success(), "stderr: {}", stderr(&help));
    let text = stdout(&help);
    assert!(
        text.contains("Usage: kubectl karpenter drift explain [OPTIONS] [NODE|NODECLAIM]"),
        "{text}"
    );
    assert!(
        text.contains("kubectl karpenter drift explain ip-10-0-1-17.ec2.internal"),
        "{text}"
    );
}
