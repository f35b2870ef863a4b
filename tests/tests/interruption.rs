//! Interruption scenarios in the sandbox: Online Boutique x20 on a spot NodePool, the
//! simulated cloud's interruption queue on, and EC2's two-minute spot interruption warning for
//! the busiest spot node, asked for as `karpenter sandbox interrupt` asks (an `Interruption`
//! object the sandbox acts on). The controller starts the replacement at the warning: a
//! NodeClaim on another offering exists within 20 s, the interrupted NodeClaim is gone within
//! the two minutes (before EC2 reclaims the instance), a `SpotInterrupted` Event says why, and
//! every pod runs afterwards; then, with a PodDisruptionBudget of minAvailable 1 per service,
//! the same never leaves a service without a Running pod (sampled every 100 ms). One sandbox
//! serves both.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use karpenter::workload::{ONLINE_BOUTIQUE, parse_yaml, scale};
use karpenter_core::interruption::SPOT_WARNING;
use sandbox::actors::instances::GROUP;
use serde_json::{Value, json};
use tests::{Options, TestCluster, condition};

/// How long Online Boutique x20 may take to run everywhere.
const SETTLE: Duration = Duration::from_secs(180);
/// The replacement is asked for at the warning.
const REPLACEMENT_WITHIN: Duration = Duration::from_secs(20);

/// Online Boutique's Deployments (each pod labelled `app: <name>`).
const SERVICES: &[&str] = &[
    "frontend",
    "adservice",
    "currencyservice",
    "cartservice",
    "redis-cart",
    "loadgenerator",
    "recommendationservice",
    "checkoutservice",
    "emailservice",
    "paymentservice",
    "shippingservice",
    "productcatalogservice",
];

/// The NodePool `default`: spot c/m/r instances of generation 5 and later, amd64, that
/// consolidation leaves alone (so every replacement seen is the interruption's), and its
/// EC2NodeClass.
const SPOT_POOL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: default\nspec:\n  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: Never}\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      expireAfter: 720h\n      requirements:\n      - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}\n      - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}\n      - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: [\"4\"]}\n      - {key: kubernetes.io/arch, operator: In, values: [amd64]}\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata:\n  name: default\nspec:\n  role: KarpenterNodeRole-sandbox\n  amiSelectorTerms: [{alias: al2023@latest}]\n  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]\n  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: sandbox}}]\n";

/// Online Boutique with every Deployment's replicas multiplied by 20 (as `karpenter sandbox
/// --scale 20`), as YAML documents.
fn boutique_x20() -> String {
    let mut manifests =
        parse_yaml(Path::new("online-boutique.yaml"), ONLINE_BOUTIQUE).expect("bundled");
    scale(&mut manifests, 20);
    manifests
        .iter()
        .map(|m| serde_json::to_string(&m.object).expect("JSON is YAML"))
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// A PodDisruptionBudget of minAvailable 1 per service.
fn pdbs() -> String {
    SERVICES
        .iter()
        .map(|s| {
            format!(
                "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: {s}\nspec:\n  minAvailable: 1\n  selector:\n    matchLabels: {{app: {s}}}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

fn name(o: &Value) -> String {
    o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn label<'a>(o: &'a Value, key: &str) -> Option<&'a str> {
    o.pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

/// An offering: instance type, zone, capacity type.
type Offering = (String, String, String);

/// A launched NodeClaim's offering.
fn offering(claim: &Value) -> Option<Offering> {
    Some((
        label(claim, "node.kubernetes.io/instance-type")?.to_owned(),
        label(claim, "topology.kubernetes.io/zone")?.to_owned(),
        label(claim, "karpenter.sh/capacity-type")?.to_owned(),
    ))
}

/// Pods that are not finished or being deleted.
fn live_pods(c: &TestCluster) -> Vec<Value> {
    c.objects("", "pods")
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
        .collect()
}

/// Running pods that are not being deleted, by `app` label.
fn running_per_app(c: &TestCluster) -> BTreeMap<String, usize> {
    let mut out: BTreeMap<String, usize> = SERVICES.iter().map(|s| (s.to_string(), 0)).collect();
    for p in live_pods(c) {
        let Some(app) = label(&p, "app") else {
            continue;
        };
        if p["status"]["phase"] == "Running"
            && let Some(n) = out.get_mut(app)
        {
            *n += 1;
        }
    }
    out
}

/// Every service has its 20 pods Running on a node, and every NodeClaim is initialized.
fn all_running(c: &TestCluster) -> bool {
    let pods = live_pods(c);
    pods.len() == 20 * SERVICES.len()
        && pods
            .iter()
            .all(|p| p["status"]["phase"] == "Running" && p["spec"]["nodeName"].is_string())
        && c.nodeclaims()
            .iter()
            .all(|x| condition(x, "Initialized").as_deref() == Some("True"))
}

/// The spot NodeClaim whose node runs the most pods: (NodeClaim, node name, pods).
fn busiest_spot_node(c: &TestCluster) -> (Value, String, usize) {
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for p in live_pods(c) {
        if let Some(node) = p["spec"]["nodeName"].as_str() {
            *per_node.entry(node.to_owned()).or_default() += 1;
        }
    }
    c.nodeclaims()
        .into_iter()
        .filter(|x| x["metadata"]["deletionTimestamp"].is_null())
        .filter(|x| label(x, "karpenter.sh/capacity-type") == Some("spot"))
        .filter_map(|x| {
            let node = x.pointer("/status/nodeName")?.as_str()?.to_owned();
            Some((per_node.get(&node).copied().unwrap_or(0), x, node))
        })
        .max_by_key(|(pods, x, _)| (*pods, name(x)))
        .map(|(pods, x, node)| (x, node, pods))
        .expect("a spot node")
}

/// Ask the sandbox for EC2's spot interruption warning for `node`, as `karpenter sandbox
/// interrupt NODE --kind spot-interruption` does; returns when it was sent.
async fn interrupt(c: &TestCluster, node: &str) -> Instant {
    let store = c.cluster.sandbox.store();
    let rt = store
        .resource(GROUP, "v1", "interruptions")
        .expect("the sandbox serves Interruptions");
    let object = json!({"apiVersion": "sandbox.karpenter.sh/v1", "kind": "Interruption",
        "metadata": {"name": format!("spot-{node}")},
        "spec": {"node": node, "kind": "spot-interruption"}});
    store.create(&rt, "", object).expect("Interruption created");
    let sent = Instant::now();
    c.eventually("the warning is sent", Duration::from_secs(5), |c| {
        c.objects(GROUP, "interruptions").iter().any(|i| {
            name(i) == format!("spot-{node}") && condition(i, "Sent").as_deref() == Some("True")
        })
    })
    .await;
    sent
}

/// Sample every 100 ms until `done` holds, asserting `check` each time; panics after `timeout`.
async fn watch(
    c: &TestCluster,
    what: &str,
    timeout: Duration,
    check: impl Fn(&TestCluster),
    done: impl Fn(&TestCluster) -> bool,
) {
    let start = Instant::now();
    loop {
        check(c);
        if done(c) {
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Interrupt the busiest spot node and check what the controller does about it, asserting
/// `check` every 100 ms until every pod runs again.
async fn rehearse(c: &TestCluster, check: impl Fn(&TestCluster) + Copy) {
    let (victim, node, pods) = busiest_spot_node(c);
    assert!(pods > 0, "the busiest node runs pods");
    let victim_name = name(&victim);
    let victim_offering = offering(&victim).expect("a launched NodeClaim");
    let before: BTreeSet<String> = c.nodeclaims().iter().map(name).collect();
    let sent = interrupt(c, &node).await;

    // A replacement is launched at the warning, on another offering.
    let new_claims = |c: &TestCluster| -> Vec<Value> {
        c.nodeclaims()
            .into_iter()
            .filter(|x| !before.contains(&name(x)))
            .collect()
    };
    watch(
        c,
        "a replacement NodeClaim",
        REPLACEMENT_WITHIN,
        check,
        |c| !new_claims(c).is_empty(),
    )
    .await;
    assert!(sent.elapsed() <= REPLACEMENT_WITHIN);
    let replaced_after = sent.elapsed();

    // The interrupted NodeClaim is gone before EC2 reclaims the instance.
    watch(
        c,
        "the interrupted NodeClaim gone",
        SPOT_WARNING.saturating_sub(sent.elapsed()),
        check,
        |c| c.nodeclaims().iter().all(|x| name(x) != victim_name),
    )
    .await;
    let gone_after = sent.elapsed();
    assert!(
        gone_after < SPOT_WARNING,
        "gone {gone_after:?} after the warning"
    );
    let reasons: Vec<String> = c
        .events_with_reason("SpotInterrupted")
        .iter()
        .filter_map(|e| {
            e.pointer("/involvedObject/name")?
                .as_str()
                .map(String::from)
        })
        .collect();
    assert!(
        reasons.iter().any(|o| *o == victim_name || *o == node),
        "a SpotInterrupted Event about {victim_name} or {node}: {reasons:?}"
    );

    // Every pod runs again, and none of the replacements took the interrupted offering.
    watch(c, "every pod Running again", SETTLE, check, all_running).await;
    let launched: Vec<(String, Option<Offering>)> = new_claims(c)
        .iter()
        .map(|x| (name(x), offering(x)))
        .collect();
    assert!(!launched.is_empty());
    eprintln!(
        "interrupted {victim_name} ({pods} pods on {victim_offering:?}): replacement after \
         {replaced_after:?}, gone after {gone_after:?}, all running after {:?}; new: {launched:?}",
        sent.elapsed()
    );
    for (claim, o) in &launched {
        assert_ne!(
            o.as_ref(),
            Some(&victim_offering),
            "{claim} reuses the interrupted spot offering {victim_offering:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spot_interruption_is_replaced_within_the_warning_with_and_without_pdbs() {
    let workload = format!("{SPOT_POOL}---\n{}", boutique_x20());
    let c = TestCluster::start(&workload, Options::default()).await;
    c.eventually(
        "Online Boutique x20 running on spot nodes",
        SETTLE,
        all_running,
    )
    .await;
    assert!(c.nodeclaims().len() >= 2, "several nodes");

    rehearse(&c, |_| {}).await;

    // With a PodDisruptionBudget per service, no service is ever left without a Running pod.
    let out = c.kubectl(&["apply", "-f", "-"], Some(&pdbs())).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    rehearse(&c, |c| {
        for (app, n) in running_per_app(c) {
            assert!(n >= 1, "{app} has no Running pod");
        }
    })
    .await;
    let queue = c
        .sim()
        .interruption_queue()
        .expect("the sandbox's queue is on");
    let (sent, _) = queue.totals();
    assert!(sent >= 2, "two warnings and their state changes: {sent}");
}
