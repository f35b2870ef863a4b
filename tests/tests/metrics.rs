//! `/metrics` end to end: a workload is provisioned in the sandbox, one NodeClaim is deleted,
//! and the Prometheus exposition, scraped over HTTP, carries upstream Karpenter's series with
//! the values the cluster shows.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use controller::runtime::Context;
use controller::runtime::metrics::{Sample, parse_samples};
use karpenter_core::scheduling::resources::parse_milli;
use serde_json::Value;
use tests::{Options, TestCluster, condition, deployment, http_get};

const SETTLE: Duration = Duration::from_secs(90);

/// Serve `/metrics` for `ctx` (a controller that always leads) on a loopback port; returns
/// the address.
async fn serve(ctx: Arc<Context>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("bound address");
    tokio::spawn(controller::runtime::http::serve_metrics(
        listener,
        ctx,
        tokio::sync::watch::channel(true).1,
        std::future::pending(),
    ));
    addr
}

/// `GET /metrics`: the samples of a successful OpenMetrics response.
async fn scrape(addr: std::net::SocketAddr) -> Vec<Sample> {
    let (status, head, body) = http_get(addr, "/metrics").await;
    assert_eq!(status, 200, "scrape failed: {head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    println!("---- /metrics (karpenter series) ----");
    for line in body.lines().filter(|l| l.starts_with("karpenter_")) {
        println!("{line}");
    }
    parse_samples(&body).expect("the exposition parses")
}

/// Scrape until the exposition has caught up with the cluster (the watch caches trail the
/// API server by a moment): one `karpenter_pods_state` series per pod and one NodeClaim
/// counted per NodeClaim.
async fn scrape_settled(c: &TestCluster, addr: std::net::SocketAddr) -> Vec<Sample> {
    let deadline = std::time::Instant::now() + SETTLE;
    loop {
        let s = scrape(addr).await;
        let pods = matching(&s, "karpenter_pods_state", &[]).len();
        let claims = sum(
            &s,
            "karpenter_nodepools_usage",
            &[("resource_type", "nodes")],
        );
        if pods == c.objects("", "pods").len() && claims == c.nodeclaims().len() as f64 {
            return s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/metrics never caught up: {pods} pod series, {claims} NodeClaims"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Samples named `name` whose labels include every pair of `labels`.
fn matching<'a>(samples: &'a [Sample], name: &str, labels: &[(&str, &str)]) -> Vec<&'a Sample> {
    samples.iter().filter(|s| s.matches(name, labels)).collect()
}

/// The sum of the matching samples (0 when none match).
fn sum(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    matching(samples, name, labels)
        .iter()
        .map(|s| s.value)
        .sum()
}

fn initialized(c: &TestCluster) -> usize {
    c.nodeclaims()
        .iter()
        .filter(|n| condition(n, "Initialized").as_deref() == Some("True"))
        .count()
}

fn web_pods(c: &TestCluster) -> Vec<Value> {
    c.objects("", "pods")
        .into_iter()
        .filter(|p| p.pointer("/metadata/labels/app").and_then(Value::as_str) == Some("web"))
        .collect()
}

fn bound(c: &TestCluster) -> usize {
    web_pods(c)
        .iter()
        .filter(|p| {
            p.pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some()
        })
        .count()
}

/// Sum of one resource over the NodeClaims' `status.capacity`, as the metric reports it
/// (cpu in cores, memory in bytes).
fn capacity_sum(claims: &[Value], resource: &str) -> f64 {
    claims
        .iter()
        .filter_map(|c| c.pointer(&format!("/status/capacity/{resource}"))?.as_str())
        .map(|q| parse_milli(q).expect("a valid quantity") as f64 / 1000.0)
        .sum()
}

/// All web pods bound, every NodeClaim initialized and none deleting.
async fn settled(c: &TestCluster, replicas: usize) {
    c.eventually(
        "the web pods bound and every NodeClaim initialized",
        SETTLE,
        |c| {
            let claims = c.nodeclaims();
            bound(c) == replicas
                && !claims.is_empty()
                && initialized(c) == claims.len()
                && claims
                    .iter()
                    .all(|n| n.pointer("/metadata/deletionTimestamp").is_none())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_report_provisioning_termination_pods_and_nodepool_usage() {
    const REPLICAS: usize = 3;
    // One web pod per node (required hostname anti-affinity), so each gets its own NodeClaim.
    let web = deployment("web", REPLICAS as u32, "900m", "1Gi").replace(
        "      containers:\n",
        "      affinity:\n        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n          - labelSelector: {matchLabels: {app: web}}\n            topologyKey: kubernetes.io/hostname\n      containers:\n",
    );
    let workload = format!(
        "{web}---\n{}",
        // Fits no instance type: stays pending, with no NodeClaim for it.
        deployment("huge", 1, "4000", "1Gi")
    );
    let c = TestCluster::start(&workload, Options::default()).await;
    c.merge_patch(
        "nodepool",
        "default",
        r#"{"spec":{"limits":{"cpu":"1000","memory":"4000Gi"}}}"#,
    )
    .await;
    settled(&c, REPLICAS).await;
    let addr = serve(Arc::clone(&c.cluster.ctx)).await;

    let s = scrape_settled(&c, addr).await;
    let claims = c.nodeclaims();
    assert_eq!(claims.len(), REPLICAS, "one NodeClaim per web pod");
    let pool = [("nodepool", "default")];
    let created = "karpenter_nodeclaims_created_total";
    assert_eq!(
        sum(&s, created, &[("reason", "provisioned"), pool[0]]),
        claims.len() as f64,
        "one creation per NodeClaim"
    );
    // Pods by state: every pod in the cluster has one series; the web pods are scheduled and
    // the huge one is pending.
    let pods = "karpenter_pods_state";
    assert_eq!(matching(&s, pods, &[]).len(), c.objects("", "pods").len());
    assert_eq!(
        web_pods(&c)
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap_or_default())
            .filter(|n| sum(
                &s,
                pods,
                &[
                    ("name", n),
                    ("scheduled", "true"),
                    pool[0],
                    ("managed", "true")
                ]
            ) == 1.0)
            .count(),
        REPLICAS
    );
    let huge = matching(&s, pods, &[("phase", "Pending"), ("scheduled", "false")]);
    assert_eq!(huge.len(), 1, "{huge:?}");
    assert!(
        huge[0].labels["owner"].starts_with("ReplicaSet/huge-"),
        "{huge:?}"
    );
    // NodePool usage is the sum of its NodeClaims' capacity; limits are the spec's.
    let usage = "karpenter_nodepools_usage";
    assert_eq!(
        sum(&s, usage, &[pool[0], ("resource_type", "cpu")]),
        capacity_sum(&claims, "cpu")
    );
    assert_eq!(
        sum(&s, usage, &[pool[0], ("resource_type", "memory")]),
        capacity_sum(&claims, "memory")
    );
    assert_eq!(
        sum(&s, usage, &[pool[0], ("resource_type", "nodes")]),
        claims.len() as f64
    );
    let limit = "karpenter_nodepools_limit";
    assert_eq!(sum(&s, limit, &[pool[0], ("resource_type", "cpu")]), 1000.0);
    assert_eq!(
        sum(&s, limit, &[pool[0], ("resource_type", "memory")]),
        4000.0 * 1024.0 * 1024.0 * 1024.0
    );
    // The scheduling simulation and the launches were timed.
    assert!(
        sum(
            &s,
            "karpenter_scheduler_scheduling_duration_seconds_count",
            &[("controller", "provisioner")]
        ) >= 1.0
    );
    let cloud_count = "karpenter_cloudprovider_duration_seconds_count";
    let creates = sum(
        &s,
        cloud_count,
        &[
            ("controller", "nodeclaim.lifecycle"),
            ("method", "Create"),
            ("provider", "sim"),
        ],
    );
    assert!(
        creates >= claims.len() as f64,
        "{creates} Create calls for {} NodeClaims",
        claims.len()
    );
    assert!(
        sum(
            &s,
            cloud_count,
            &[
                ("controller", "provisioner"),
                ("method", "GetInstanceTypes")
            ]
        ) >= 1.0
    );
    // Nodes: one per NodeClaim, each registered once, all Ready.
    let nodes = c.objects("", "nodes");
    assert_eq!(
        sum(&s, "karpenter_cluster_state_node_count", &[]),
        nodes.len() as f64
    );
    assert_eq!(sum(&s, "karpenter_cluster_state_synced", &[]), 1.0);
    assert_eq!(
        sum(&s, "karpenter_nodes_created_total", &pool),
        claims.len() as f64
    );
    assert_eq!(
        matching(
            &s,
            "karpenter_nodes_allocatable",
            &[("resource_type", "cpu"), ("phase", "Ready")]
        )
        .len(),
        nodes.len()
    );
    assert_eq!(sum(&s, "karpenter_nodeclaims_terminated_total", &[]), 0.0);

    // Delete one NodeClaim: its pods are provisioned for again.
    let victim = claims[0].clone();
    let victim_name = victim["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    c.kubectl_ok(&["delete", "nodeclaim", &victim_name]).await;
    c.eventually(&format!("{victim_name} gone"), SETTLE, |c| {
        !c.nodeclaims()
            .iter()
            .any(|n| n["metadata"]["name"] == victim_name.as_str())
    })
    .await;
    settled(&c, REPLICAS).await;

    let s = scrape_settled(&c, addr).await;
    let claims = c.nodeclaims();
    let labels = |key: &str| {
        victim
            .pointer(&format!("/metadata/labels/{}", key.replace('/', "~1")))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (capacity_type, zone) = (
        labels("karpenter.sh/capacity-type"),
        labels("topology.kubernetes.io/zone"),
    );
    let terminated = matching(&s, "karpenter_nodeclaims_terminated_total", &[]);
    assert_eq!(terminated.len(), 1, "{terminated:?}");
    let expected: BTreeMap<String, String> = [
        ("nodepool", "default".to_string()),
        ("capacity_type", capacity_type),
        ("zone", zone.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(terminated[0].labels, expected);
    assert_eq!(terminated[0].value, 1.0);
    assert_eq!(
        sum(
            &s,
            "karpenter_nodes_terminated_total",
            &[pool[0], ("zone", &zone)]
        ),
        1.0
    );
    // Every NodeClaim ever created is either still here or was the one terminated.
    assert_eq!(
        sum(&s, created, &[("reason", "provisioned"), pool[0]]),
        claims.len() as f64 + 1.0
    );
    // The node held one web pod (one per node), evicted through the eviction API.
    assert_eq!(
        sum(
            &s,
            "karpenter_pods_eviction_requests_total",
            &[("code", "200")]
        ),
        1.0
    );
    // The node's termination took some time since its deletion, in the summary the
    // performance dashboard reads (quantiles 0 to 1, by NodePool).
    assert_eq!(
        sum(
            &s,
            "karpenter_nodes_termination_duration_seconds_count",
            &[pool[0]]
        ),
        1.0
    );
    for q in ["0", "0.5", "0.9", "0.99", "1"] {
        let v = sum(
            &s,
            "karpenter_nodes_termination_duration_seconds",
            &[pool[0], ("quantile", q)],
        );
        assert!(v >= 0.0 && v.is_finite(), "quantile {q}: {v}");
    }
    // Every web pod waited for a node and became ready: each counted once in the startup
    // summary (the evicted one's replacement too).
    assert!(
        sum(&s, "karpenter_pods_startup_duration_seconds_count", &[]) >= REPLICAS as f64,
        "{:?}",
        matching(&s, "karpenter_pods_startup_duration_seconds_count", &[])
    );
    // Reconciles are timed and counted per controller, as controller-runtime's are.
    assert!(
        sum(
            &s,
            "controller_runtime_reconcile_total",
            &[("controller", "nodeclaim.lifecycle"), ("result", "success")]
        ) >= 1.0
    );
    assert!(
        sum(
            &s,
            "controller_runtime_reconcile_time_seconds_count",
            &[("controller", "nodeclaim.lifecycle")]
        ) >= 1.0
    );
    // A user's delete is not a Karpenter disruption.
    assert_eq!(sum(&s, "karpenter_nodeclaims_disrupted_total", &[]), 0.0);
    assert!(
        sum(
            &s,
            cloud_count,
            &[("controller", "nodeclaim.lifecycle"), ("method", "Delete")]
        ) >= 1.0
    );
    assert_eq!(
        sum(&s, usage, &[pool[0], ("resource_type", "cpu")]),
        capacity_sum(&claims, "cpu")
    );
    assert_eq!(
        matching(&s, "karpenter_pods_state", &[]).len(),
        c.objects("", "pods").len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodeclaims_deleted_by_karpenter_are_counted_as_disrupted_with_their_reason() {
    // Nodes never register, so every NodeClaim is deleted by the registration timeout.
    let c = TestCluster::start(
        &deployment("web", 1, "500m", "256Mi"),
        Options::never_registering(Duration::from_secs(3)),
    )
    .await;
    let addr = serve(Arc::clone(&c.cluster.ctx)).await;
    c.eventually("a RegistrationTimeout event", SETTLE, |c| {
        !c.events_with_reason("RegistrationTimeout").is_empty()
    })
    .await;
    // Stop the churn: without pods, no new NodeClaims; the last ones time out too.
    c.kubectl_ok(&["delete", "deployment", "web"]).await;
    c.eventually("every NodeClaim gone", SETTLE, |c| {
        c.nodeclaims().is_empty()
    })
    .await;

    let s = scrape_settled(&c, addr).await;
    let timed_out: std::collections::BTreeSet<String> = c
        .events_with_reason("RegistrationTimeout")
        .iter()
        .filter_map(|e| e["involvedObject"]["name"].as_str().map(String::from))
        .collect();
    let disrupted = matching(
        &s,
        "karpenter_nodeclaims_disrupted_total",
        &[
            ("reason", "registration_timeout"),
            ("nodepool", "default"),
            ("consolidation_policy", "when_empty_or_underutilized"),
        ],
    );
    assert!(!disrupted.is_empty());
    assert!(
        disrupted
            .iter()
            .all(|d| ["graceful", "eventual"].contains(&d.labels["termination_mode"].as_str()))
    );
    let disrupted: f64 = disrupted.iter().map(|d| d.value).sum();
    assert_eq!(
        disrupted,
        timed_out.len() as f64,
        "one per timed-out NodeClaim"
    );
    // Every NodeClaim created was disrupted, and every one finished terminating.
    let created = sum(
        &s,
        "karpenter_nodeclaims_created_total",
        &[("reason", "provisioned")],
    );
    assert_eq!(created, disrupted);
    assert_eq!(
        sum(&s, "karpenter_nodeclaims_terminated_total", &[]),
        disrupted
    );
    assert_eq!(sum(&s, "karpenter_nodes_created_total", &[]), 0.0);
    // Terminating each instance ended with the cloud reporting it gone.
    assert!(
        sum(
            &s,
            "karpenter_cloudprovider_errors_total",
            &[
                ("controller", "nodeclaim.lifecycle"),
                ("method", "Delete"),
                ("provider", "sim"),
                ("error", "NodeClaimNotFoundError")
            ]
        ) >= disrupted
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drift_rollout_counts_replacements_created_and_drifted_nodeclaims_disrupted() {
    let web = deployment("web", 2, "900m", "1Gi").replace(
        "      containers:\n",
        "      affinity:\n        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n          - labelSelector: {matchLabels: {app: web}}\n            topologyKey: kubernetes.io/hostname\n      containers:\n",
    );
    let c = TestCluster::start(&web, Options::default()).await;
    settled(&c, 2).await;
    let before: Vec<String> = c
        .nodeclaims()
        .iter()
        .filter_map(|n| n["metadata"]["name"].as_str().map(String::from))
        .collect();
    let addr = serve(Arc::clone(&c.cluster.ctx)).await;
    // A new AMI drifts every node; the upgrade orchestrator replaces them one at a time.
    let new: Vec<String> = c
        .publish_ami("al2023", None)
        .into_iter()
        .map(|a| a.id)
        .collect();
    c.eventually(
        "every node replaced by one on the new AMI",
        Duration::from_secs(240),
        |c| {
            let claims = c.nodeclaims();
            claims.iter().all(|n| {
                let name = n["metadata"]["name"].as_str().unwrap_or_default();
                !before.iter().any(|b| b == name)
                    && n["status"]["imageID"]
                        .as_str()
                        .is_some_and(|i| new.iter().any(|x| x == i))
                    && n.pointer("/metadata/annotations/upgrades.karpenter.sh~1replaces")
                        .is_none()
            }) && !claims.is_empty()
        },
    )
    .await;
    settled(&c, 2).await;

    let s = scrape_settled(&c, addr).await;
    let replaced = before.len() as f64;
    let pool = ("nodepool", "default");
    assert_eq!(
        sum(
            &s,
            "karpenter_nodeclaims_created_total",
            &[("reason", "drifted"), pool]
        ),
        replaced,
        "one replacement per drifted NodeClaim"
    );
    assert_eq!(
        sum(
            &s,
            "karpenter_nodeclaims_disrupted_total",
            &[("reason", "drifted"), pool]
        ),
        replaced
    );
    assert_eq!(
        sum(&s, "karpenter_nodeclaims_terminated_total", &[pool]),
        replaced
    );
    // Whatever else was created is still here.
    assert_eq!(
        sum(&s, "karpenter_nodeclaims_created_total", &[pool]) - replaced,
        c.nodeclaims().len() as f64
    );
}
