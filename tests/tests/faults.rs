//! Fault tolerance: the controller provisions through a bounded load of API faults (409s, 429s,
//! 500s, 504s after the write took effect, slow responses, dropped watches, expired
//! resourceVersions, injected by the sandbox API
//! server into the controller's requests only) and cloud faults (throttling, insufficient
//! capacity for single offerings, slow launches). It must keep provisioning, create no
//! duplicate NodeClaim, leak no instance, and provision new pods once the faults stop.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use controller::cloudprovider::sim::faults::{SimFaultConfig, SimFaultKind};
use sandbox::faults::{FaultConfig, FaultKind, UserAgentFilter};
use serde_json::Value;
use tests::{Options, TestCluster, condition, deployment, provider_ids};

/// Every node of this NodePool has 2 vCPUs (about 1.9 CPUs allocatable) and every `app` pod asks
/// for 1.1 CPUs, so each pod needs a node of its own, whatever the batching. That makes the
/// right number of NodeClaims exact: one per pod. A duplicate NodeClaim (capacity launched twice
/// for the same pod) shows up as one NodeClaim more than there are pods, with a node that holds
/// no `app` pod; nothing in this cluster removes it again (there is no consolidation).
const NODEPOOL: &str = r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements:
        - key: karpenter.k8s.aws/instance-cpu
          operator: In
          values: ["2"]
        - key: kubernetes.io/os
          operator: In
          values: ["linux"]
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["on-demand", "spot"]
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
"#;

const FIRST: u32 = 8;
const SCALED: u32 = 16;
const RECOVERY: u32 = 18;

fn app_pods(tc: &TestCluster) -> Vec<Value> {
    tc.objects("", "pods")
        .into_iter()
        .filter(|p| p.pointer("/metadata/labels/app").and_then(Value::as_str) == Some("app"))
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect()
}

fn bound(pods: &[Value]) -> usize {
    pods.iter()
        .filter(|p| {
            p.pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some()
        })
        .count()
}

/// The settled world for `pods` app pods: exactly one NodeClaim per pod (no duplicate), all
/// initialized; the cloud runs exactly the NodeClaims' instances (no leak); one node per
/// NodeClaim, each holding exactly one app pod; every app pod running; nothing stuck deleting.
fn settled(tc: &TestCluster, pods: usize) -> Result<(), String> {
    let claims = tc.nodeclaims();
    if claims.len() != pods {
        return Err(format!("{} nodeclaims for {pods} pods", claims.len()));
    }
    if let Some(c) = claims
        .iter()
        .find(|c| condition(c, "Initialized").as_deref() != Some("True"))
    {
        return Err(format!("{:?} not initialized", c["metadata"]["name"]));
    }
    let claimed = provider_ids(&claims);
    let running = tc.instance_ids();
    if running != claimed {
        return Err(format!(
            "instances not owned by a nodeclaim: {:?}; nodeclaims without an instance: {:?}",
            running.difference(&claimed).collect::<Vec<_>>(),
            claimed.difference(&running).collect::<Vec<_>>()
        ));
    }
    let nodes = tc.objects("", "nodes");
    if nodes.len() != pods {
        return Err(format!("{} nodes for {pods} pods", nodes.len()));
    }
    let app = app_pods(tc);
    let mut per_node: BTreeMap<String, usize> = nodes
        .iter()
        .filter_map(|n| n["metadata"]["name"].as_str())
        .map(|n| (n.to_string(), 0))
        .collect();
    for p in &app {
        if let Some(n) = p.pointer("/spec/nodeName").and_then(Value::as_str) {
            *per_node.entry(n.to_string()).or_default() += 1;
        }
    }
    if let Some((node, n)) = per_node.iter().find(|(_, n)| **n != 1) {
        // Say what kept a pod off it: the node's taints and Ready condition, and each unbound
        // pod's last `PodScheduled` message, as kube-scheduler wrote it.
        let shape = nodes
            .iter()
            .find(|o| o["metadata"]["name"] == node.as_str())
            .map(|o| {
                format!(
                    "taints {}, unschedulable {}, Ready {:?}",
                    o.pointer("/spec/taints").unwrap_or(&Value::Null),
                    o.pointer("/spec/unschedulable").unwrap_or(&Value::Null),
                    condition(o, "Ready")
                )
            })
            .unwrap_or_default();
        let unbound: Vec<String> = app
            .iter()
            .filter(|p| p.pointer("/spec/nodeName").is_none())
            .map(|p| {
                let scheduled = p
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .and_then(|cs| cs.iter().find(|c| c["type"] == "PodScheduled"));
                format!(
                    "{} ({})",
                    p["metadata"]["name"].as_str().unwrap_or(""),
                    scheduled.map_or_else(|| "no PodScheduled".to_string(), Value::to_string)
                )
            })
            .collect();
        return Err(format!(
            "node {node} holds {n} app pods ({shape}); unbound: {unbound:?}"
        ));
    }
    let phase_running = app
        .iter()
        .filter(|p| p.pointer("/status/phase").and_then(Value::as_str) == Some("Running"))
        .count();
    if app.len() != pods || phase_running != pods {
        return Err(format!("{phase_running} of {} app pods running", app.len()));
    }
    for o in claims.iter().chain(&nodes) {
        if o["metadata"]["deletionTimestamp"].is_string() {
            return Err(format!("{:?} stuck deleting", o["metadata"]["name"]));
        }
    }
    Ok(())
}

async fn wait_until(what: &str, timeout: Duration, cond: impl Fn() -> Result<(), String>) {
    let start = Instant::now();
    loop {
        match cond() {
            Ok(()) => return,
            Err(e) if start.elapsed() > timeout => {
                panic!("timed out after {timeout:?} waiting for {what}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// The controller's failed writes (from the audit log) and how many of them were retried
/// successfully: a later write with the same method and path that succeeded.
fn audited_retries(tc: &TestCluster) -> (usize, usize) {
    let entries: Vec<_> = tc
        .cluster
        .sandbox
        .audit()
        .into_iter()
        .filter(|e| !e.user_agent.starts_with("kubectl"))
        .filter(|e| !e.path.contains("/events"))
        .collect();
    let mut failed = 0;
    let mut retried = 0;
    for (i, e) in entries.iter().enumerate() {
        if matches!(e.status, 409 | 429 | 500 | 504) {
            failed += 1;
            if entries[i + 1..]
                .iter()
                .any(|l| l.method == e.method && l.path == e.path && l.status < 400)
            {
                retried += 1;
            }
        }
    }
    (failed, retried)
}

/// Seconds from each NodeClaim's creation to its `Launched=True` transition, sorted
/// (timestamps have one-second resolution).
fn launch_latencies(claims: &[Value]) -> Vec<i64> {
    let time = |v: &Value| {
        v.as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_second())
    };
    let mut secs: Vec<i64> = claims
        .iter()
        .filter_map(|c| {
            let created = time(&c["metadata"]["creationTimestamp"])?;
            let launched = c["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|x| x["type"] == "Launched" && x["status"] == "True")?;
            Some(time(&launched["lastTransitionTime"])? - created)
        })
        .collect();
    secs.sort_unstable();
    secs
}

#[tokio::test]
async fn provisions_through_api_and_cloud_faults_without_duplicates_or_leaks() {
    let started = Instant::now();
    let yaml = format!(
        "{NODEPOOL}---\n{}",
        deployment("app", FIRST, "1100m", "256Mi")
    );
    let mut tc = TestCluster::start(
        &yaml,
        Options {
            controller: false,
            ..Options::default()
        },
    )
    .await;

    // About 13% of the controller's reads and 22% of its writes fail or are slow (3% of writes
    // take effect but answer 504, so a blind retry would write twice); a quarter of the watches
    // break off and 15% of resumed watches are told their resourceVersion expired. kubectl (the
    // test's own client) is spared. In the cloud, 15% of calls are throttled, a quarter of the
    // offerings a launch tries are out of capacity, and 30% of launches take up to 1.5 s more.
    let api = Arc::clone(tc.cluster.sandbox.faults());
    let mut config = FaultConfig::default()
        .with_rate(FaultKind::Conflict, 60)
        .with_rate(FaultKind::TooManyRequests, 40)
        .with_rate(FaultKind::InternalError, 40)
        .with_rate(FaultKind::Slow, 50)
        .with_rate(FaultKind::DropWatch, 250)
        .with_rate(FaultKind::ExpiredResourceVersion, 150)
        .with_rate(FaultKind::LostResponse, 30);
    config.slow_max = Duration::from_millis(200);
    config.drop_watch_max = Duration::from_secs(3);
    config.budget = Some(300);
    config.user_agent = UserAgentFilter::Except("kubectl".into());
    config.seed = 7;
    api.configure(config);
    let cloud = Arc::clone(tc.sim().faults());
    cloud.configure(SimFaultConfig {
        throttle: 150,
        capacity: 250,
        slow_launch: 300,
        slow_launch_max: Duration::from_millis(1500),
        budget: Some(100),
        seed: 11,
    });
    api.enable();
    cloud.enable();
    let provider = Arc::clone(&tc.cluster.cloud);
    tc.cluster.start_controller(provider);

    // Under faults: the controller gets going, the workload scales up mid-way, and every pod
    // still gets a node.
    wait_until("nodeclaims under faults", Duration::from_secs(90), || {
        let n = tc.nodeclaims().len();
        if n >= 3 {
            Ok(())
        } else {
            Err(format!("{n} nodeclaims"))
        }
    })
    .await;
    tc.kubectl_ok(&[
        "scale",
        "deployment",
        "app",
        &format!("--replicas={SCALED}"),
    ])
    .await;
    wait_until(
        "every pod bound and every nodeclaim initialized under faults",
        Duration::from_secs(150),
        || {
            let pods = app_pods(&tc);
            let b = bound(&pods);
            if pods.len() != SCALED as usize || b != pods.len() {
                return Err(format!("{b} of {} app pods bound", pods.len()));
            }
            let claims = tc.nodeclaims();
            match claims
                .iter()
                .find(|c| condition(c, "Initialized").as_deref() != Some("True"))
            {
                Some(c) => Err(format!("{:?} not initialized", c["metadata"]["name"])),
                None => Ok(()),
            }
        },
    )
    .await;
    let under_faults = (api.counts(), cloud.counts(), api.budget_left());
    api.disable();
    cloud.disable();
    assert!(
        under_faults.0.total() >= 30,
        "too few API faults to prove anything: {}",
        under_faults.0
    );
    for kind in [
        FaultKind::Conflict,
        FaultKind::TooManyRequests,
        FaultKind::InternalError,
        FaultKind::Slow,
        FaultKind::DropWatch,
        FaultKind::LostResponse,
    ] {
        assert!(
            under_faults.0.of(kind) > 0,
            "no {} fault was injected: {}",
            kind.as_str(),
            under_faults.0
        );
    }
    for kind in SimFaultKind::ALL {
        assert!(
            under_faults.1.of(kind) > 0,
            "no {} cloud fault was injected: {}",
            kind.as_str(),
            under_faults.1
        );
    }

    // Faults off: the world settles with one NodeClaim per pod and no instance left over
    // (garbage collection gets time to terminate any orphan: 30 s minimum age, 10 s passes).
    wait_until(
        "the cluster to settle after faults",
        Duration::from_secs(90),
        || settled(&tc, SCALED as usize),
    )
    .await;
    let launches_at_settle = tc.sim().launches();
    let latencies = launch_latencies(&tc.nodeclaims());

    // Recovered: new pending pods are provisioned.
    tc.kubectl_ok(&[
        "scale",
        "deployment",
        "app",
        &format!("--replicas={RECOVERY}"),
    ])
    .await;
    wait_until(
        "new pods provisioned after faults stopped",
        Duration::from_secs(60),
        || settled(&tc, RECOVERY as usize),
    )
    .await;

    let (failed_writes, retried_writes) = audited_retries(&tc);
    let claims = tc.nodeclaims().len();
    let instances = tc.sim().instances().len();
    let pods = app_pods(&tc);
    println!("fault-tolerance scenario ({:?}):", started.elapsed());
    println!("  {} (budget left: {:?})", under_faults.0, under_faults.2);
    println!("  {}", under_faults.1);
    println!("  seconds from nodeclaim creation to Launched under faults (sorted): {latencies:?}");
    println!(
        "  controller writes failed by faults: {failed_writes}, later retried successfully: {retried_writes}"
    );
    println!(
        "  final: {} of {} app pods bound, {claims} nodeclaims, {instances} instances, {} launches in all ({launches_at_settle} before the recovery scale-up)",
        bound(&pods),
        pods.len(),
        tc.sim().launches()
    );
    assert!(
        retried_writes > 0,
        "the controller never retried a failed write"
    );
    // Every instance ever launched serves a NodeClaim at the end: no launch was repeated for
    // the same NodeClaim or wasted on a duplicate.
    assert_eq!(
        tc.sim().launches(),
        RECOVERY as usize,
        "instances launched beyond one per pod"
    );
}

/// Issue 21's heavy profile, as `karpenter sandbox --api-faults … --cloud-faults …` replays it:
/// 15% conflicts, throttling and internal errors each, 10% slow answers, 30% of watches broken
/// off, 30% of resumed watches expired and 30% of writes answered 504 after they took effect
/// (kubectl spared); half the cloud's calls throttled, half the offerings out of capacity, half
/// the launches slow. No budget: the faults last until every pod is bound.
const HEAVY_API: &str = "conflict=150,too-many-requests=150,internal-error=150,slow=100,\
drop-watch=300,expired=300,lost-response=300,except-agent=kubectl";
const HEAVY_CLOUD: &str = "throttle=500,capacity=500,slow-launch=500";
/// Pods of the heavy profile (the issue saw 104 NodeClaims for 80 pods in 1 of 3 runs).
const HEAVY_PODS: u32 = 80;

/// One run of the heavy profile with `seed`: the faults last until every pod is bound or for
/// 120 s, whichever comes first; never more live NodeClaims than pods meanwhile; then exactly
/// one NodeClaim per pod, no instance without a NodeClaim, every pod running on a node of its
/// own.
async fn heavy_faults_run(seed: u64) -> Result<String, String> {
    let started = Instant::now();
    let yaml = format!(
        "{NODEPOOL}---\n{}",
        deployment("app", HEAVY_PODS, "1100m", "256Mi")
    );
    let mut tc = TestCluster::start(
        &yaml,
        Options {
            controller: false,
            ..Options::default()
        },
    )
    .await;
    let api = Arc::clone(tc.cluster.sandbox.faults());
    api.configure(FaultConfig::parse(&format!("{HEAVY_API},seed={seed}")).expect("API faults"));
    let cloud = Arc::clone(tc.sim().faults());
    cloud.configure(
        SimFaultConfig::parse(&format!("{HEAVY_CLOUD},seed={seed}")).expect("cloud faults"),
    );
    api.enable();
    cloud.enable();
    let provider = Arc::clone(&tc.cluster.cloud);
    tc.cluster.start_controller(provider);
    let faults_end = Instant::now() + Duration::from_secs(120);
    let live_claims = |tc: &TestCluster| {
        tc.nodeclaims()
            .iter()
            .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
            .count()
    };
    let mut most_claims = 0;
    loop {
        let pods = app_pods(&tc);
        // A NodeClaim whose launch found no capacity is deleted while its replacement runs; a
        // duplicate is not, so more live NodeClaims than pods at any time is a duplicate.
        most_claims = most_claims.max(live_claims(&tc));
        if (pods.len() == HEAVY_PODS as usize && bound(&pods) == pods.len())
            || Instant::now() > faults_end
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let bound_under_faults = bound(&app_pods(&tc));
    let counts = api.counts();
    api.disable();
    cloud.disable();
    // Faults off: whatever a lost answer left in flight settles.
    let settle = Instant::now() + Duration::from_secs(120);
    let outcome = loop {
        most_claims = most_claims.max(live_claims(&tc));
        match settled(&tc, HEAVY_PODS as usize) {
            Ok(()) => break Ok(()),
            Err(e) if Instant::now() > settle => break Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    };
    let launches = tc.sim().launches();
    let summary = format!(
        "seed {seed}: {bound_under_faults} pods bound under faults, at most {most_claims} live \
         nodeclaims, {launches} launches, {} lost answers of {} faults, {:?}",
        counts.of(FaultKind::LostResponse),
        counts.total(),
        started.elapsed()
    );
    outcome.map_err(|e| format!("{summary}: {e}"))?;
    // Issue 21's acceptance: never more live NodeClaims than pods (a duplicate would be one
    // more), and settled with one per pod and no leaked instance (`settled`). Launches are
    // reported, not required to equal the pods: under half the launches slow and a quarter
    // of the status writes lost, a launch can time out and be retried on a fresh instance
    // (seen once in a full run: 81 launches, the extra instance terminated).
    if most_claims > HEAVY_PODS as usize {
        return Err(format!(
            "{summary}: more live nodeclaims than the {HEAVY_PODS} pods"
        ));
    }
    Ok(summary)
}

#[tokio::test]
async fn the_heavy_fault_profile_makes_one_nodeclaim_per_pod_whatever_the_seed() {
    // Three clusters at once, one per seed: each is mostly waiting on faults and backoffs.
    let runs = futures::future::join_all([5, 6, 7].map(heavy_faults_run)).await;
    let mut failures = Vec::new();
    for run in runs {
        match run {
            Ok(summary) => println!("{summary}"),
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
