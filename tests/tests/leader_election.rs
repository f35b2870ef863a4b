//! Leader election between controller replicas on one sandbox: only the Lease holder acts; a
//! standby takes over within the lease duration when the leader dies, at once when it shuts
//! down gracefully, and a leader that cannot renew stops acting before its Lease expires. Also
//! the operator's HTTP endpoints (`/healthz`, `/readyz`, `/metrics`).
//!
//! Each replica talks to the API with its own User-Agent, so the sandbox's audit log shows who
//! wrote what.

use std::sync::Arc;
use std::time::{Duration, Instant};

use controller::operator::{Operator, Stopped};
use controller::runtime::http as endpoints;
use controller::runtime::leader::{Elector, LeaseConfig, Lost};
use http::Method;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::{Value, json};
use tests::crash::{Crash, Step};
use tests::{Options, TestCluster, condition, deployment, http_get, provider_ids};

const LEASE: &str = "karpenter-leader-election";
const NAMESPACE: &str = "kube-system";

/// Short timings so the tests run in seconds; the same ratios as controller-runtime's
/// defaults (lease > renew deadline > retry period).
fn lease(identity: &str) -> LeaseConfig {
    LeaseConfig {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(500),
        ..LeaseConfig::new(LEASE, NAMESPACE, identity)
    }
}

/// Two pods that fit on one node: a single controller makes exactly one NodeClaim.
async fn cluster(registration_delay: Duration) -> TestCluster {
    TestCluster::start(
        &deployment("app", 2, "500m", "256Mi"),
        Options {
            controller: false,
            registration_delay,
            ..Options::default()
        },
    )
    .await
}

/// Writes other than to the Lease itself: acting on the cluster.
fn acts(tc: &TestCluster, user_agent: &str) -> Vec<String> {
    tc.writes_by(user_agent)
        .into_iter()
        .filter(|e| !e.path.contains("/leases"))
        .map(|e| format!("{} {}", e.method, e.path))
        .collect()
}

fn nodeclaim_creates(tc: &TestCluster, user_agent: &str) -> usize {
    tc.writes_by(user_agent)
        .iter()
        .filter(|e| e.method == "POST" && e.path.ends_with("/nodeclaims") && e.status < 300)
        .count()
}

async fn holder(tc: &TestCluster) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(tc.cluster.client(), NAMESPACE);
    leases
        .get_opt(LEASE)
        .await
        .expect("read the Lease")
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// The world one controller leaves: one initialized NodeClaim, every cloud instance owned by
/// a NodeClaim and vice versa, both pods running.
fn settled(tc: &TestCluster) -> Result<(), String> {
    let claims = tc.nodeclaims();
    if claims.len() != 1 {
        return Err(format!("{} nodeclaims", claims.len()));
    }
    if condition(&claims[0], "Initialized").as_deref() != Some("True") {
        return Err("the nodeclaim is not initialized".into());
    }
    let owned = provider_ids(&claims);
    let instances = tc.instance_ids();
    if instances != owned {
        return Err(format!("instances {instances:?} != nodeclaims {owned:?}"));
    }
    let running = tc
        .objects("", "pods")
        .iter()
        .filter(|p| p.pointer("/metadata/labels/app").and_then(Value::as_str) == Some("app"))
        .filter(|p| p.pointer("/status/phase").and_then(Value::as_str) == Some("Running"))
        .count();
    if running != 2 {
        return Err(format!("{running} of 2 pods running"));
    }
    Ok(())
}

async fn wait_settled(tc: &TestCluster) {
    let start = Instant::now();
    loop {
        match settled(tc) {
            Ok(()) => return,
            Err(e) if start.elapsed() > Duration::from_secs(60) => {
                panic!("not settled after 60s: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn wait_leading(op: &Operator, what: &str, timeout: Duration) {
    let mut rx = op.leading();
    tokio::time::timeout(timeout, rx.wait_for(|l| *l))
        .await
        .unwrap_or_else(|_| panic!("{what} did not lead within {timeout:?}"))
        .expect("the operator is running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_leader_acts_and_a_standby_takes_over_after_it_crashes() {
    let tc = cluster(Duration::from_secs(2)).await;
    let a = tc.start_replica("replica-a", Some(lease("replica-a")));
    wait_leading(&a, "the first replica", Duration::from_secs(10)).await;
    let b = tc.start_replica("replica-b", Some(lease("replica-b")));
    // The scale-up is under way: the leader created the NodeClaim, its node is not registered.
    tc.eventually(
        "the leader creates a NodeClaim",
        Duration::from_secs(30),
        |tc| !tc.nodeclaims().is_empty(),
    )
    .await;
    assert!(
        !b.is_leader(),
        "the standby must not lead while the leader renews"
    );
    assert_eq!(holder(&tc).await.as_deref(), Some("replica-a"));
    assert_eq!(
        acts(&tc, "replica-b"),
        Vec::<String>::new(),
        "the standby wrote"
    );
    tc.eventually(
        "the leader's create is audited",
        Duration::from_secs(5),
        |tc| nodeclaim_creates(tc, "replica-a") == 1,
    )
    .await;

    // Crash the leader: its tasks are aborted and the Lease is left held.
    a.kill();
    let killed = Instant::now();
    wait_leading(&b, "the standby", Duration::from_secs(30)).await;
    let handover = killed.elapsed();
    // Requests in flight at the kill have long been answered by now.
    let writes_of_a = tc.writes_by("replica-a").len();
    let cfg = lease("replica-b");
    println!("handover after a crash took {handover:?}");
    // The standby sees the last renewal within one retry period and takes the Lease as soon as
    // that record is a lease duration old. The last renewal was at most one retry period
    // before the kill; allow a second retry period and a second of scheduling and API
    // latency on a loaded machine. Still well under two lease durations, so a standby that
    // waited for a second expiry (or never noticed the renewals stop) fails this.
    let bound = cfg.lease_duration + 2 * cfg.retry_period + Duration::from_secs(1);
    assert!(bound < 2 * cfg.lease_duration);
    assert!(
        handover <= bound,
        "handover took {handover:?}, more than {bound:?}"
    );
    assert_eq!(holder(&tc).await.as_deref(), Some("replica-b"));

    wait_settled(&tc).await;
    assert_eq!(
        tc.writes_by("replica-a").len(),
        writes_of_a,
        "the killed leader kept writing"
    );
    assert_eq!(
        nodeclaim_creates(&tc, "replica-b"),
        0,
        "the new leader duplicated the in-flight NodeClaim"
    );
    assert!(
        !acts(&tc, "replica-b").is_empty(),
        "the new leader finished the scale-up, so it must have written"
    );
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_graceful_shutdown_hands_over_at_once() {
    let tc = cluster(Duration::from_millis(500)).await;
    let a = tc.start_replica("replica-a", Some(lease("replica-a")));
    wait_leading(&a, "the first replica", Duration::from_secs(10)).await;
    wait_settled(&tc).await;
    let b = tc.start_replica("replica-b", Some(lease("replica-b")));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!b.is_leader());
    let probes_of_a = Arc::clone(&a.probes);
    let stopping = Instant::now();
    assert_eq!(a.shutdown().await, Stopped::Shutdown);
    assert_eq!(
        probes_of_a.dead(),
        Vec::<String>::new(),
        "a graceful shutdown is not a failure"
    );
    assert_ne!(
        holder(&tc).await.as_deref(),
        Some("replica-a"),
        "not released"
    );
    wait_leading(&b, "the standby", Duration::from_secs(30)).await;
    let handover = stopping.elapsed();
    println!("handover after a graceful shutdown took {handover:?}");
    let cfg = lease("replica-b");
    assert!(
        handover < cfg.lease_duration,
        "a released Lease must be taken before it would have expired ({handover:?})"
    );
    let leases: Api<Lease> = Api::namespaced(tc.cluster.client(), NAMESPACE);
    let spec = leases.get(LEASE).await.expect("lease").spec.expect("spec");
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-b"));
    assert_eq!(spec.lease_transitions, Some(1));
    assert_eq!(spec.lease_duration_seconds, Some(3));
    // The new leader keeps the world as it is: still one NodeClaim.
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_settled(&tc).await;
    assert_eq!(nodeclaim_creates(&tc, "replica-b"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_whose_lease_is_taken_stops_acting() {
    let tc = TestCluster::start(
        "",
        Options {
            controller: false,
            ..Options::default()
        },
    )
    .await;
    let mut a = tc.start_replica("replica-a", Some(lease("replica-a")));
    wait_leading(&a, "the replica", Duration::from_secs(10)).await;
    // Someone else writes itself into the Lease through the API.
    let leases: Api<Lease> = Api::namespaced(tc.cluster.client(), NAMESPACE);
    let now = jiff::Timestamp::now().to_string();
    let patch = json!({"spec": {"holderIdentity": "intruder", "renewTime": now,
                                "acquireTime": now, "leaseDurationSeconds": 3600}});
    leases
        .patch(
            LEASE,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("steal the Lease");
    let stopped = tokio::time::timeout(Duration::from_secs(10), a.stopped())
        .await
        .expect("the leader noticed within its renew deadline");
    assert_eq!(
        stopped,
        Stopped::LostLeadership(Lost::Stolen("intruder".into()))
    );
    assert!(!a.is_leader());
    assert_eq!(holder(&tc).await.as_deref(), Some("intruder"));
    // Pending pods appear; a stopped leader must not provision them.
    let writes = acts(&tc, "replica-a").len();
    let out = tc
        .kubectl(
            &["apply", "-f", "-"],
            Some(&deployment("late", 2, "500m", "256Mi")),
        )
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    tc.eventually(
        "the late pods are unschedulable",
        Duration::from_secs(30),
        |tc| {
            let pods = tc.objects("", "pods");
            pods.len() == 2
                && pods
                    .iter()
                    .all(|p| condition(p, "PodScheduled").as_deref() == Some("False"))
        },
    )
    .await;
    // Two batch windows: a live provisioner would have created a NodeClaim by now.
    tokio::time::sleep(2 * Options::default().batch_max).await;
    assert!(tc.nodeclaims().is_empty(), "the deposed leader provisioned");
    assert_eq!(acts(&tc, "replica-a").len(), writes);
    // Control: a replica that acts (no election) provisions these very pods, so there was
    // work the deposed leader would have done had it kept running.
    let control = tc.start_replica("replica-control", None);
    tc.eventually(
        "the control replica provisions the late pods",
        Duration::from_secs(60),
        |tc| nodeclaim_creates(tc, "replica-control") >= 1,
    )
    .await;
    assert_eq!(
        acts(&tc, "replica-a").len(),
        writes,
        "the deposed leader joined in"
    );
    drop(control);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_that_cannot_renew_stops_before_its_lease_expires() {
    let tc = cluster(Duration::from_millis(500)).await;
    // The leader's API client freezes after its second Lease renewal (a partition): every
    // later request hangs, so it can no longer renew.
    let crash = Crash::at(Step::Api {
        method: Method::PUT,
        path: vec!["/leases/".into()],
        nth: 2,
    });
    let client = tests::crash::client(tc.cluster.sandbox.client_config(), &crash);
    let mut a = controller::operator::start_operator(
        client.clone(),
        Arc::clone(&tc.cluster.cloud),
        Arc::new(karpenter_core::clock::SystemClock),
        tc.cluster.settings.clone(),
        Some(Elector::new(client, lease("replica-a"))),
    );
    wait_leading(&a, "the first replica", Duration::from_secs(10)).await;
    let b = tc.start_replica("replica-b", Some(lease("replica-b")));
    let mut b_leading = b.leading();
    let stopped = tokio::time::timeout(Duration::from_secs(30), a.stopped())
        .await
        .expect("the partitioned leader gives up");
    let a_stopped = Instant::now();
    assert!(
        matches!(stopped, Stopped::LostLeadership(Lost::RenewDeadline(..))),
        "{stopped:?}"
    );
    assert!(crash.fired());
    assert!(
        !*b_leading.borrow_and_update(),
        "the standby led before the old leader stopped"
    );
    tokio::time::timeout(Duration::from_secs(30), b_leading.wait_for(|l| *l))
        .await
        .expect("the standby takes over")
        .expect("running");
    println!(
        "the standby took over {:?} after the partitioned leader stopped",
        a_stopped.elapsed()
    );
    wait_settled(&tc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_readiness_and_metrics_answer() {
    let tc = cluster(Duration::from_millis(500)).await;
    let op = tc.start_replica("replica-a", None);
    // The servers listen where `karpenter run`'s flags (METRICS_PORT, HEALTH_PROBE_PORT,
    // BIND_ADDRESS) say: two free loopback ports, found by binding port 0 and letting go.
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port()
    };
    let (metrics_port, health_port) = (free(), free());
    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        run: controller::runtime::RunOptions,
    }
    let flags = <Flags as clap::Parser>::try_parse_from([
        "karpenter".to_string(),
        format!("--metrics-port={metrics_port}"),
        format!("--health-probe-port={health_port}"),
        "--bind-address=127.0.0.1".to_string(),
    ])
    .expect("flags parse");
    let run = flags.run.settings("replica-a".into()).expect("valid");
    let (metrics, probes) = endpoints::listen(&run).await.expect("listening");
    let (probes_addr, metrics_addr) = (
        probes.local_addr().expect("addr"),
        metrics.local_addr().expect("addr"),
    );
    assert_eq!(probes_addr, ([127, 0, 0, 1], health_port).into());
    assert_eq!(metrics_addr, ([127, 0, 0, 1], metrics_port).into());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let probe_server = tokio::spawn(endpoints::serve_probes(
        probes,
        Arc::clone(&op.probes),
        op.ctx.state.clone(),
        async {
            let _ = stop_rx.await;
        },
    ));
    tokio::spawn(endpoints::serve_metrics(
        metrics,
        Arc::clone(&op.ctx),
        op.leading(),
        std::future::pending(),
    ));

    let start = Instant::now();
    loop {
        let (status, _, body) = http_get(probes_addr, "/readyz").await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 503, "{body}");
        assert!(start.elapsed() < Duration::from_secs(30), "never ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _, body) = http_get(probes_addr, "/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, head, body) = http_get(metrics_addr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    assert!(
        body.trim_end().ends_with("# EOF"),
        "OpenMetrics text: {body}"
    );
    let (status, _, _) = http_get(probes_addr, "/nope").await;
    assert_eq!(status, 404);

    // A replica whose tasks died is not healthy.
    let probes_of_op = Arc::clone(&op.probes);
    op.kill();
    tc.eventually("the killed tasks finish", Duration::from_secs(10), |_| {
        !probes_of_op.dead().is_empty()
    })
    .await;
    let (status, _, body) = http_get(probes_addr, "/healthz").await;
    assert_eq!(status, 500, "{body}");
    assert!(
        body.contains("operator") && !body.contains("leader-election"),
        "without election the supervisor is the operator: {body}"
    );
    let _ = stop_tx.send(());
    probe_server
        .await
        .expect("server task")
        .expect("graceful stop");
}
