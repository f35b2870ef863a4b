//! Drift scenarios in the sandbox: NodePool label, taint and requirement changes, a new AMI
//! release, each marking exactly the affected NodeClaims `Drifted` with the right reason and a
//! message naming the change (and `kubectl karpenter drift explain` naming it too); reverting
//! clears `Drifted`. A change of hash version, and NodeClaims stamped by upstream Karpenter, are
//! re-stamped without drifting anything.

use std::process::Command;
use std::time::{Duration, Instant};

use controller::runtime::Settings;
use crds::hash::{EC2NODECLASS_HASH_FIELDS_ANNOTATION, NODEPOOL_HASH_FIELDS_ANNOTATION};
use crds::labels::{
    EC2NODECLASS_HASH_ANNOTATION, EC2NODECLASS_HASH_VERSION_ANNOTATION, NODEPOOL_HASH_ANNOTATION,
    NODEPOOL_HASH_VERSION_ANNOTATION,
};
use karpenter_core::lifecycle::drift::HashVersions;
use serde_json::{Value, json};
use tests::{Options, TestCluster, condition, workspace_binary};

const SETTLE: Duration = Duration::from_secs(60);

/// Two NodePools told apart by their `team` label, one Deployment on each. Their upgrades are
/// paused: these tests watch drift come and go, not drifted nodes being replaced.
fn two_pools() -> String {
    let pool = |name: &str| {
        format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: {name}\n  annotations: {{upgrades.karpenter.sh/paused: \"true\"}}\nspec:\n  template:\n    metadata:\n      labels: {{team: {name}}}\n    spec:\n      requirements:\n      - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}\n      - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand, spot]}}\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n---\n"
        )
    };
    let app = |name: &str, team: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      nodeSelector: {{team: {team}}}\n      containers:\n      - name: app\n        image: public.ecr.aws/eks-distro/kubernetes/pause:3.2\n        resources:\n          requests: {{cpu: 500m, memory: 512Mi}}\n---\n"
        )
    };
    format!(
        "{}{}{}{}",
        pool("alpha"),
        pool("beta"),
        app("web", "alpha"),
        app("db", "beta")
    )
}

fn name(o: &Value) -> String {
    o["metadata"]["name"].as_str().unwrap_or_default().into()
}

fn claims_of(c: &TestCluster, pool: &str) -> Vec<Value> {
    c.nodeclaims()
        .into_iter()
        .filter(|x| x.pointer("/metadata/labels/karpenter.sh~1nodepool") == Some(&json!(pool)))
        .collect()
}

fn annotation(o: &Value, key: &str) -> Option<String> {
    o.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .map(String::from)
}

/// The `Drifted` condition's (reason, message), when it is True.
fn drifted(o: &Value) -> Option<(String, String)> {
    o.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Drifted" && c["status"] == "True")
        .map(|c| {
            (
                c["reason"].as_str().unwrap_or_default().into(),
                c["message"].as_str().unwrap_or_default().into(),
            )
        })
}

/// Wait until every pool in `pools` has at least one launched NodeClaim with its drift stamps.
async fn launched(c: &TestCluster, pools: &[&str]) {
    c.eventually("launched, stamped NodeClaims in every pool", SETTLE, |c| {
        pools.iter().all(|p| {
            let claims = claims_of(c, p);
            !claims.is_empty()
                && claims.iter().all(|x| {
                    condition(x, "Launched").as_deref() == Some("True")
                        && annotation(x, EC2NODECLASS_HASH_ANNOTATION).is_some()
                })
        })
    })
    .await;
}

/// Wait until every NodeClaim of `pool` is drifted for `reason` with `text` in its message.
async fn all_drifted(c: &TestCluster, pool: &str, reason: &str, text: &str) {
    c.eventually(
        &format!("{pool}'s NodeClaims {reason}: {text}"),
        SETTLE,
        |c| {
            let claims = claims_of(c, pool);
            !claims.is_empty()
                && claims
                    .iter()
                    .all(|x| drifted(x).is_some_and(|(r, m)| r == reason && m.contains(text)))
        },
    )
    .await;
}

async fn none_drifted(c: &TestCluster, pool: &str) {
    c.eventually(&format!("{pool}'s NodeClaims not drifted"), SETTLE, |c| {
        claims_of(c, pool).iter().all(|x| drifted(x).is_none())
    })
    .await;
}

/// `kubectl karpenter drift explain ARGS`: exit code and stdout.
async fn explain(c: &TestCluster, args: &[&str]) -> (i32, String) {
    let mut cmd = Command::new(workspace_binary("kubectl-karpenter"));
    cmd.arg("drift")
        .arg("explain")
        .args(args)
        .arg("--kubeconfig")
        .arg(c.kubeconfig())
        .env("NO_COLOR", "1");
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("plugin runs"))
        .await
        .expect("plugin thread");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Pause the replacement of drifted nodes in `pool` (these tests watch drift, not upgrades).
async fn pause_upgrades(c: &TestCluster, pool: &str) {
    patch(
        c,
        "nodepool",
        pool,
        json!({"metadata": {"annotations": {"upgrades.karpenter.sh/paused": "true"}}}),
    )
    .await;
}

async fn patch(c: &TestCluster, kind: &str, name: &str, patch: Value) {
    c.kubectl_ok(&[
        "patch",
        kind,
        name,
        "--type=merge",
        "-p",
        &patch.to_string(),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodepool_label_and_taint_changes_drift_exactly_that_pools_nodeclaims() {
    let c = TestCluster::start(&two_pools(), Options::default()).await;
    launched(&c, &["alpha", "beta"]).await;

    patch(
        &c,
        "nodepool",
        "alpha",
        json!({"spec": {"template": {"metadata": {"labels": {"tier": "gold"}}}}}),
    )
    .await;
    all_drifted(
        &c,
        "alpha",
        "NodePoolDrifted",
        "spec.template.metadata.labels.tier: added gold",
    )
    .await;
    // beta did not change: it stays undrifted (watched over a window, not at one instant).
    never_drifted(&c, &["beta"], Duration::from_secs(2)).await;
    let (code, out) = explain(&c, &["--nodepool", "alpha"]).await;
    assert_eq!(code, 1, "drifted NodeClaims exit 1: {out}");
    assert!(
        out.contains("spec.template.metadata.labels.tier: added gold"),
        "{out}"
    );
    let claim = name(&claims_of(&c, "alpha")[0]);
    let (code, out) = explain(&c, &[&claim, "-o", "json"]).await;
    assert_eq!(code, 1, "{out}");
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(doc[0]["reason"], "NodePoolDrifted", "{doc:#}");

    patch(
        &c,
        "nodepool",
        "alpha",
        json!({"spec": {"template": {"metadata": {"labels": {"tier": null}}}}}),
    )
    .await;
    none_drifted(&c, "alpha").await;
    let (code, out) = explain(&c, &["--nodepool", "alpha"]).await;
    assert_eq!(code, 0, "reverted: nothing drifted: {out}");

    let taint = json!({"spec": {"template": {"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}}});
    patch(&c, "nodepool", "beta", taint).await;
    all_drifted(
        &c,
        "beta",
        "NodePoolDrifted",
        "spec.template.spec.taints: added dedicated=gpu:NoSchedule",
    )
    .await;
    never_drifted(&c, &["alpha"], Duration::from_secs(2)).await;
    // A drifted NodeClaim is steady: one Drifted Event, not one per check.
    for x in claims_of(&c, "beta") {
        let events = c.events(&name(&x), "Drifted");
        assert_eq!(events.len(), 1, "{events:#?}");
    }
    let (code, out) = explain(&c, &[]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("spec.template.spec.taints: added dedicated=gpu:NoSchedule"),
        "{out}"
    );
    patch(
        &c,
        "nodepool",
        "beta",
        json!({"spec": {"template": {"spec": {"taints": null}}}}),
    )
    .await;
    none_drifted(&c, "beta").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn narrowed_requirement_is_requirements_drift() {
    let c = TestCluster::start(&two_pools(), Options::default()).await;
    launched(&c, &["alpha", "beta"]).await;
    let claim = claims_of(&c, "alpha").remove(0);
    let capacity = claim
        .pointer("/metadata/labels/karpenter.sh~1capacity-type")
        .and_then(Value::as_str)
        .expect("launched NodeClaims carry their capacity type")
        .to_string();
    let other = if capacity == "spot" {
        "on-demand"
    } else {
        "spot"
    };
    let requirements = |values: Value| {
        json!({"spec": {"template": {"spec": {"requirements": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": values},
        ]}}}})
    };
    // Only alpha's NodeClaims on `capacity` are affected; pin every alpha claim to it first.
    c.eventually("alpha's NodeClaims share one capacity type", SETTLE, |c| {
        claims_of(c, "alpha").iter().all(|x| {
            x.pointer("/metadata/labels/karpenter.sh~1capacity-type") == Some(&json!(capacity))
        })
    })
    .await;
    patch(&c, "nodepool", "alpha", requirements(json!([other]))).await;
    all_drifted(
        &c,
        "alpha",
        "RequirementsDrifted",
        &format!("requirement karpenter.sh/capacity-type In [{other}] no longer admits label karpenter.sh/capacity-type={capacity}"),
    )
    .await;
    never_drifted(&c, &["beta"], Duration::from_secs(2)).await;
    let (code, out) = explain(&c, &["--nodepool", "alpha"]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("RequirementsDrifted"), "{out}");
    patch(
        &c,
        "nodepool",
        "alpha",
        requirements(json!(["on-demand", "spot"])),
    )
    .await;
    none_drifted(&c, "alpha").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_ami_release_is_ami_drift_and_pinning_the_old_release_clears_it() {
    let c = TestCluster::start(
        &tests::deployment("web", 2, "500m", "512Mi"),
        Options::default(),
    )
    .await;
    pause_upgrades(&c, "default").await;
    launched(&c, &["default"]).await;
    let claim = c.nodeclaims().remove(0);
    let old_image = claim["status"]["imageID"]
        .as_str()
        .expect("imageID")
        .to_string();
    let old = c
        .sim()
        .with_network(|n| n.amis.iter().find(|a| a.id == old_image).cloned())
        .expect("the launched image is a simulated AMI");
    let released = c.publish_ami("al2023", None);
    let new = released
        .iter()
        .find(|a| a.arch == old.arch)
        .expect("the release has the node's architecture")
        .clone();
    all_drifted(
        &c,
        "default",
        "AMIDrift",
        &format!(
            "AMI: {} ({}) -> {} ({})",
            old.id, old.name, new.id, new.name
        ),
    )
    .await;
    let (code, out) = explain(&c, &[]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&new.id) && out.contains(&old.id), "{out}");

    // Pinning the alias to the release the nodes run selects their AMI again: not drifted.
    // (Selector terms are not hashed, so this is no NodeClassDrift either.)
    let alias = format!("al2023@{}", old.version);
    patch(
        &c,
        "ec2nodeclass",
        "default",
        json!({"spec": {"amiSelectorTerms": [{"alias": alias}]}}),
    )
    .await;
    none_drifted(&c, "default").await;
}

/// Poll for `within`, failing if any NodeClaim of `pools` is ever `Drifted`.
async fn never_drifted(c: &TestCluster, pools: &[&str], within: Duration) {
    let start = Instant::now();
    while start.elapsed() < within {
        for p in pools {
            for x in claims_of(c, p) {
                assert!(
                    drifted(&x).is_none(),
                    "{} must not drift: {:?}",
                    name(&x),
                    drifted(&x)
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_only_the_hash_version_restamps_without_drifting() {
    let old = HashVersions {
        nodepool: "test-v0".into(),
        nodeclass: "test-v0".into(),
    };
    let opts = Options {
        settings: Settings {
            hash_versions: old.clone(),
            ..Settings::default()
        },
        ..Options::default()
    };
    let mut c = TestCluster::start(&two_pools(), opts).await;
    launched(&c, &["alpha", "beta"]).await;
    for x in c.nodeclaims() {
        assert_eq!(
            annotation(&x, NODEPOOL_HASH_VERSION_ANNOTATION).as_deref(),
            Some("test-v0")
        );
    }
    // beta really drifts under the old version; that drift must survive the version change.
    patch(
        &c,
        "nodepool",
        "beta",
        json!({"spec": {"template": {"metadata": {"labels": {"tier": "gold"}}}}}),
    )
    .await;
    all_drifted(&c, "beta", "NodePoolDrifted", "tier: added gold").await;

    c.cluster.stop_controller();
    // A new hash version means the hashing changed: the old stamps' values no longer match
    // what the new controller computes for the same, unchanged NodePool and node class.
    for x in claims_of(&c, "alpha") {
        let old_hashes = json!({"metadata": {"annotations": {
            NODEPOOL_HASH_ANNOTATION: "1111", EC2NODECLASS_HASH_ANNOTATION: "2222"}}});
        patch(&c, "nodeclaim", &name(&x), old_hashes).await;
    }
    c.cluster.settings.hash_versions = HashVersions::default();
    let cloud = c.cluster.cloud.clone();
    c.cluster.start_controller(cloud);
    let current = HashVersions::default();
    let restamped = |c: &TestCluster| {
        claims_of(c, "alpha").iter().all(|x| {
            annotation(x, NODEPOOL_HASH_VERSION_ANNOTATION) == Some(current.nodepool.clone())
                && annotation(x, EC2NODECLASS_HASH_VERSION_ANNOTATION)
                    == Some(current.nodeclass.clone())
        })
    };
    let start = Instant::now();
    while !restamped(&c) {
        assert!(
            start.elapsed() < SETTLE,
            "alpha's NodeClaims were not re-stamped"
        );
        for x in claims_of(&c, "alpha") {
            assert!(
                drifted(&x).is_none(),
                "{} drifted on a version change",
                name(&x)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    never_drifted(&c, &["alpha"], Duration::from_secs(3)).await;
    for x in claims_of(&c, "alpha") {
        assert!(
            !c.events(&name(&x), "HashRestamped").is_empty(),
            "an Event says why"
        );
    }
    for x in claims_of(&c, "beta") {
        assert_eq!(
            annotation(&x, NODEPOOL_HASH_VERSION_ANNOTATION).as_deref(),
            Some("test-v0"),
            "a drifted NodeClaim keeps its stamp"
        );
        assert_eq!(drifted(&x).map(|d| d.0).as_deref(), Some("NodePoolDrifted"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodeclaims_stamped_by_upstream_are_taken_over_without_drift() {
    let mut c = TestCluster::start(&two_pools(), Options::default()).await;
    launched(&c, &["alpha", "beta"]).await;
    c.cluster.stop_controller();
    // Rewrite every stamp into upstream's format (its hash values and versions, no field
    // snapshots), as a cluster run by upstream Karpenter has them.
    let upstream = json!({
        NODEPOOL_HASH_ANNOTATION: "6821555240594823858",
        NODEPOOL_HASH_VERSION_ANNOTATION: "v3",
        NODEPOOL_HASH_FIELDS_ANNOTATION: null,
        EC2NODECLASS_HASH_ANNOTATION: "2767937012397016128",
        EC2NODECLASS_HASH_VERSION_ANNOTATION: "v6",
        EC2NODECLASS_HASH_FIELDS_ANNOTATION: null,
    });
    for x in c.nodeclaims() {
        patch(
            &c,
            "nodeclaim",
            &name(&x),
            json!({"metadata": {"annotations": upstream}}),
        )
        .await;
    }
    for p in ["alpha", "beta"] {
        patch(&c, "nodepool", p, json!({"metadata": {"annotations": {
            NODEPOOL_HASH_ANNOTATION: "6821555240594823858", NODEPOOL_HASH_VERSION_ANNOTATION: "v3"}}})).await;
    }
    patch(&c, "ec2nodeclass", "default", json!({"metadata": {"annotations": {
        EC2NODECLASS_HASH_ANNOTATION: "2767937012397016128", EC2NODECLASS_HASH_VERSION_ANNOTATION: "v6"}}})).await;

    let cloud = c.cluster.cloud.clone();
    c.cluster.start_controller(cloud);
    let current = HashVersions::default();
    let taken_over = |c: &TestCluster| {
        c.nodeclaims().iter().all(|x| {
            annotation(x, NODEPOOL_HASH_VERSION_ANNOTATION) == Some(current.nodepool.clone())
                && annotation(x, EC2NODECLASS_HASH_VERSION_ANNOTATION)
                    == Some(current.nodeclass.clone())
                && annotation(x, NODEPOOL_HASH_FIELDS_ANNOTATION).is_some()
        })
    };
    let start = Instant::now();
    while !taken_over(&c) {
        assert!(
            start.elapsed() < SETTLE,
            "upstream stamps were not replaced"
        );
        for x in c.nodeclaims() {
            assert!(drifted(&x).is_none(), "{} drifted on takeover", name(&x));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    never_drifted(&c, &["alpha", "beta"], Duration::from_secs(3)).await;
    let pool = c
        .objects("karpenter.sh", "nodepools")
        .into_iter()
        .find(|p| name(p) == "alpha")
        .expect("alpha");
    assert_eq!(
        annotation(&pool, NODEPOOL_HASH_VERSION_ANNOTATION),
        Some(current.nodepool.clone())
    );
    let (code, out) = explain(&c, &[]).await;
    assert_eq!(code, 0, "nothing drifted after takeover: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_class_spec_and_subnet_changes_are_named() {
    let c = TestCluster::start(
        &tests::deployment("web", 2, "500m", "512Mi"),
        Options::default(),
    )
    .await;
    pause_upgrades(&c, "default").await;
    launched(&c, &["default"]).await;

    // A spec field of the node class (hashed): NodeClassDrift naming the field.
    patch(
        &c,
        "ec2nodeclass",
        "default",
        json!({"spec": {"tags": {"team": "web"}}}),
    )
    .await;
    all_drifted(&c, "default", "NodeClassDrift", "spec.tags.team: added web").await;
    patch(
        &c,
        "ec2nodeclass",
        "default",
        json!({"spec": {"tags": null}}),
    )
    .await;
    none_drifted(&c, "default").await;

    // Selecting only a subnet in another zone: the nodes' subnet is no longer selected.
    let claim = c.nodeclaims().remove(0);
    let zone = claim
        .pointer("/metadata/labels/topology.kubernetes.io~1zone")
        .and_then(Value::as_str)
        .expect("launched NodeClaims carry their zone")
        .to_string();
    let subnets = c.sim().with_network(|n| n.subnets.clone());
    let mine = subnets
        .iter()
        .find(|s| s.zone == zone)
        .expect("the node's subnet")
        .clone();
    let other = subnets
        .iter()
        .find(|s| s.zone != zone)
        .expect("another zone")
        .clone();
    c.eventually("every NodeClaim in one zone", SETTLE, |c| {
        c.nodeclaims().iter().all(|x| {
            x.pointer("/metadata/labels/topology.kubernetes.io~1zone") == Some(&json!(zone))
        })
    })
    .await;
    let select = |id: &str| json!({"spec": {"subnetSelectorTerms": [{"id": id}]}});
    patch(&c, "ec2nodeclass", "default", select(&other.id)).await;
    all_drifted(
        &c,
        "default",
        "SubnetDrift",
        &format!(
            "subnet: {} ({zone}) is no longer selected; selected now: {} ({})",
            mine.id, other.id, other.zone
        ),
    )
    .await;
    let (code, out) = explain(&c, &[]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&mine.id), "{out}");
    patch(&c, "ec2nodeclass", "default", select(&mine.id)).await;
    none_drifted(&c, "default").await;
}

/// Issue 33: a NodePool requirement on a custom label with several values (`example.com/team
/// In [a, b]`) gave its NodeClaims no such label, so each was `RequirementsDrifted` at once and
/// replaced by one with the same flaw, for ever. Its NodeClaims now carry one of the values
/// (`a`, the first; `b` for pods that select it), and over five minutes of the cluster's clock
/// none is drifted, replaced or recorded as removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_custom_label_with_several_values_never_drifts_its_nodeclaims() {
    let pool = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: teams\nspec:\n  disruption: {consolidateAfter: Never}\n  template:\n    spec:\n      requirements:\n      - {key: example.com/team, operator: In, values: [a, b]}\n      - {key: kubernetes.io/arch, operator: In, values: [amd64]}\n      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n---\n";
    let team_b = tests::deployment("team-b", 2, "500m", "512Mi").replace(
        "    spec:\n      containers:",
        "    spec:\n      nodeSelector: {example.com/team: b}\n      containers:",
    );
    let yaml = format!(
        "{pool}{}---\n{team_b}",
        tests::deployment("any-team", 2, "500m", "512Mi")
    );
    let c = TestCluster::start(&yaml, Options::default()).await;
    c.wait_for(
        "every pod bound, every NodeClaim initialized",
        SETTLE,
        |o| o.settled() && o.pods_total == 4 && o.pods_bound == 4,
    )
    .await;
    let claims = claims_of(&c, "teams");
    let teams: std::collections::BTreeSet<String> = claims
        .iter()
        .map(|x| {
            x.pointer("/metadata/labels/example.com~1team")
                .and_then(Value::as_str)
                .unwrap_or_else(|| panic!("{} has no example.com/team label", name(x)))
                .to_string()
        })
        .collect();
    assert!(
        teams.contains("b"),
        "team-b's pods need a team b node: {teams:?}"
    );
    assert!(teams.iter().all(|t| t == "a" || t == "b"), "{teams:?}");
    let names: Vec<String> = claims.iter().map(name).collect();
    c.advance_through(
        jiff::SignedDuration::from_mins(5),
        jiff::SignedDuration::from_secs(15),
        |c| {
            let now = claims_of(c, "teams");
            for x in &now {
                assert_eq!(drifted(x), None, "{} drifted", name(x));
            }
            assert_eq!(
                now.iter().map(name).collect::<Vec<_>>(),
                names,
                "NodeClaims were replaced"
            );
        },
    )
    .await;
    assert_eq!(c.disruption_history(), Vec::<Value>::new());
}
