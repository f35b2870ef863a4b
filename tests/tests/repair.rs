//! Node repair scenarios in the sandbox (feature gate `NodeRepair`), rehearsed as an operator
//! would with `karpenter sandbox fail-node` (its library function, against the sandbox's API
//! server): a node whose kubelet has reported `Ready=False` for longer than the 30-minute
//! toleration (`--for 31m`) is replaced, forcefully, with the removal recorded as `Unhealthy`
//! and its pods Running elsewhere; three failed nodes of a NodePool of five are left alone (more
//! than 20% are unhealthy) with a `NodeRepairBlocked` Event saying so (that node repair runs
//! only with the gate is `controller::controllers`' unit test). Both NodePools run one m5.large per pod and never consolidate, so every node
//! change here is repair's.

use std::time::Duration;

use controller::runtime::Settings;
use controller::runtime::feature_gates::FeatureGate;
use controller::runtime::metrics::parse_samples;
use jiff::Timestamp;
use karpenter::sandbox::fail_node::{self, FailNodeArgs, Outcome, parse_condition};
use serde_json::Value;
use tests::{Options, TestCluster, condition};

const SETTLE: Duration = Duration::from_secs(90);

/// The NodePool `name` of on-demand m5.large (1930 millicores allocatable: one 1200m pod per
/// node) that never consolidates, on the EC2NodeClass `default`.
fn nodepool(name: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: {name}\nspec:\n  disruption: {{consolidateAfter: Never}}\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      expireAfter: 720h\n      requirements:\n      - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n      - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}}\n---\n"
    )
}

const NODE_CLASS: &str = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata:\n  name: default\nspec:\n  role: KarpenterNodeRole-sandbox\n  amiSelectorTerms: [{alias: al2023@latest}]\n  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]\n  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]\n---\n";

/// A Deployment `name` of `replicas` pods of 1200m, on the NodePool `pool`.
fn deployment(name: &str, pool: &str, replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      nodeSelector: {{karpenter.sh/nodepool: {pool}}}\n      containers:\n      - name: app\n        image: public.ecr.aws/eks-distro/kubernetes/pause:3.2\n        resources:\n          requests: {{cpu: 1200m, memory: 1Gi}}\n---\n"
    )
}

/// A cluster running `yaml`, with node repair on.
async fn cluster(yaml: &str) -> TestCluster {
    let mut settings = Settings::default();
    settings.feature_gates.set(FeatureGate::NodeRepair, true);
    TestCluster::start(
        yaml,
        Options {
            settings,
            ..Options::default()
        },
    )
    .await
}

/// Every pod bound and every NodeClaim initialized.
async fn settled(c: &TestCluster, pods: usize) {
    c.wait_for("the workload provisioned", SETTLE, |o| {
        o.settled() && o.pods_total == pods && o.pods_bound == pods
    })
    .await;
}

fn name(obj: &Value) -> String {
    obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The nodes of NodePool `pool`, by name.
fn nodes_of(c: &TestCluster, pool: &str) -> Vec<String> {
    let mut names: Vec<String> = c
        .objects("", "nodes")
        .iter()
        .filter(|n| n["metadata"]["labels"]["karpenter.sh/nodepool"] == pool)
        .map(name)
        .collect();
    names.sort();
    names
}

/// The NodeClaim whose node is `node`.
fn claim_of(c: &TestCluster, node: &str) -> Option<Value> {
    c.nodeclaims()
        .into_iter()
        .find(|x| x["status"]["nodeName"] == node)
}

/// `karpenter sandbox fail-node NODE --condition Ready=False --for <held_for>` against `c`.
async fn fail_node(c: &TestCluster, node: &str, held_for: Duration) {
    let args = FailNodeArgs {
        node: node.to_owned(),
        condition: parse_condition("Ready=False").expect("condition"),
        held_for,
        heal: false,
        kubeconfig: Some(c.kubeconfig().to_path_buf()),
        timeout: Duration::from_secs(10),
    };
    let outcome = fail_node::fail(&args, Timestamp::now())
        .await
        .unwrap_or_else(|e| panic!("fail-node {node}: {e}"));
    assert!(matches!(outcome, Outcome::Failed { .. }), "{outcome:?}");
    let n = c
        .objects("", "nodes")
        .into_iter()
        .find(|n| name(n) == node)
        .expect("the node");
    assert_eq!(condition(&n, "Ready").as_deref(), Some("False"));
}

/// Every pod of `app` Running on a node other than `not_on`, `replicas` of them.
fn running_elsewhere(c: &TestCluster, app: &str, replicas: usize, not_on: &str) -> bool {
    let pods: Vec<Value> = c
        .objects("", "pods")
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["app"] == app)
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect();
    pods.len() == replicas
        && pods.iter().all(|p| {
            p["status"]["phase"] == "Running"
                && p["spec"]["nodeName"].as_str().is_some_and(|n| n != not_on)
        })
}

/// One sandbox with the gate on: (a) a failed node is replaced; (b) then, in another NodePool of
/// five nodes, three failed nodes are not, with the Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_node_is_replaced_unless_too_many_of_its_nodepool_fail() {
    let yaml = format!(
        "{}{}{NODE_CLASS}{}{}",
        nodepool("default"),
        nodepool("fleet"),
        deployment("web", "default", 2),
        deployment("batch", "fleet", 5)
    );
    let c = cluster(&yaml).await;
    settled(&c, 7).await;
    let web = nodes_of(&c, "default");
    let fleet = nodes_of(&c, "fleet");
    assert_eq!((web.len(), fleet.len()), (2, 5), "one node per pod");

    // (a) Ready=False for 31 minutes, past the 30-minute toleration: 1 of 2 nodes is within
    // the 20% rule (rounded up), so the node is repaired at once.
    let sick = web[0].clone();
    let claim = claim_of(&c, &sick).expect("the failed node's NodeClaim");
    let claim_name = name(&claim);
    fail_node(&c, &sick, Duration::from_secs(31 * 60)).await;
    c.eventually(
        "the failed node's NodeClaim deleted as Unhealthy",
        SETTLE,
        |c| match c.nodeclaims().into_iter().find(|x| name(x) == claim_name) {
            None => true,
            Some(x) => {
                let reason = x["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|k| k["type"] == "DisruptionReason")
                    .map(|k| k["reason"].clone());
                !x["metadata"]["deletionTimestamp"].is_null()
                    && reason == Some(Value::from("Unhealthy"))
                    && x["metadata"]["annotations"]["karpenter.sh/nodeclaim-termination-timestamp"]
                        .is_string()
            }
        },
    )
    .await;
    c.eventually("the web pods Running on another node", SETTLE, |c| {
        running_elsewhere(c, "web", 2, &sick)
            && c.nodeclaims().iter().all(|x| name(x) != claim_name)
    })
    .await;
    c.eventually("the removal recorded as Unhealthy", SETTLE, |c| {
        c.disruption_history()
            .iter()
            .any(|r| r["nodeclaim"] == claim_name.as_str() && r["reason"] == "Unhealthy")
    })
    .await;
    let ctx = &c.cluster.ctx;
    let samples = parse_samples(&ctx.metrics.encode(&ctx.state, true)).expect("metrics parse");
    assert!(
        samples.iter().any(|s| s.matches(
            "karpenter_nodeclaims_disrupted_total",
            &[("reason", "unhealthy"), ("nodepool", "default")]
        ) && s.value == 1.0),
        "counted once as unhealthy"
    );
    assert!(
        c.events(&claim_name, "DisruptionTerminating")
            .iter()
            .any(|e| e["message"]
                .as_str()
                .is_some_and(|m| m.contains("Ready=False for 31m"))),
        "the NodeClaim's Event says why"
    );

    // (b) Three of the five `fleet` nodes fail. First as just failed (nothing is due), then
    // dated 31 minutes back: by then 3 of 5 are unhealthy, more than the 1 the rule allows.
    let failed = &fleet[..3];
    let claims: Vec<String> = failed
        .iter()
        .map(|n| name(&claim_of(&c, n).expect("a NodeClaim")))
        .collect();
    for node in failed {
        fail_node(&c, node, Duration::ZERO).await;
    }
    for node in failed {
        fail_node(&c, node, Duration::from_secs(31 * 60)).await;
    }
    let blocked = "3 of 5 nodes of NodePool fleet are unhealthy, more than 20% (at most 1 may be)";
    c.eventually("NodeRepairBlocked on the NodePool", SETTLE, |c| {
        c.events("fleet", "NodeRepairBlocked").iter().any(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(blocked))
        })
    })
    .await;
    c.eventually("NodeRepairBlocked on each failed node", SETTLE, |c| {
        failed
            .iter()
            .all(|n| !c.events(n, "NodeRepairBlocked").is_empty())
    })
    .await;
    // The pass that sent the Events held the three back; none is being deleted.
    let live = c.nodeclaims();
    for claim in &claims {
        let x = live
            .iter()
            .find(|x| &name(x) == claim)
            .unwrap_or_else(|| panic!("{claim} was removed"));
        assert!(
            x["metadata"]["deletionTimestamp"].is_null(),
            "{claim} is being deleted"
        );
    }
    assert_eq!(nodes_of(&c, "fleet"), fleet, "no fleet node replaced");
}
