//! Creation and launch at scale (issue 36): one provisioning pass creates 200 NodeClaims (one
//! at a time for now: `provisioning::create_concurrency` says why) and the lifecycle controller
//! launches them concurrently while 30% of the
//! controller's writes take effect but answer 504 (a lost response). Every pod must get exactly
//! one NodeClaim (a create retried blindly, or a lost create counted as never made, would add
//! one), every NodeClaim one instance and no instance be left without a NodeClaim, and each
//! pod's plan record must name its own NodeClaim.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandbox::faults::{FaultConfig, FaultKind, UserAgentFilter};
use serde_json::Value;
use tests::{Options, TestCluster, condition, deployment, provider_ids};

/// Nodes of 2 vCPUs (about 1.9 allocatable) for pods of 1.1 CPUs: one NodeClaim per pod, so a
/// duplicate shows as one NodeClaim more than there are pods.
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
          values: ["on-demand"]
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
"#;

const PODS: usize = 200;

/// Live (not deleting) NodeClaims.
fn live(claims: &[Value]) -> Vec<&Value> {
    claims
        .iter()
        .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
        .collect()
}

/// Pending app pods kube-scheduler has marked `Unschedulable`.
fn unschedulable(tc: &TestCluster) -> usize {
    tc.objects("", "pods")
        .iter()
        .filter(|p| p.pointer("/metadata/labels/app").and_then(Value::as_str) == Some("app"))
        .filter(|p| {
            p["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "PodScheduled" && c["reason"] == "Unschedulable")
            })
        })
        .count()
}

/// One NodeClaim per pod, each launched, and the cloud running exactly their instances.
fn settled(tc: &TestCluster) -> Result<(), String> {
    let claims = tc.nodeclaims();
    let live = live(&claims);
    if live.len() != PODS || claims.len() != PODS {
        return Err(format!(
            "{} nodeclaims ({} live) for {PODS} pods",
            claims.len(),
            live.len()
        ));
    }
    if let Some(c) = live
        .iter()
        .find(|c| condition(c, "Launched").as_deref() != Some("True"))
    {
        return Err(format!("{:?} not launched", c["metadata"]["name"]));
    }
    let claimed = provider_ids(&claims);
    let running = tc.instance_ids();
    if claimed.len() != PODS || running != claimed {
        return Err(format!(
            "instances without a nodeclaim: {:?}; nodeclaims without an instance: {:?}",
            running.difference(&claimed).collect::<Vec<_>>(),
            claimed.difference(&running).collect::<Vec<_>>()
        ));
    }
    Ok(())
}

#[tokio::test]
async fn two_hundred_creates_of_one_pass_under_lost_responses_make_no_duplicate_and_leak_nothing() {
    let yaml = format!(
        "{NODEPOOL}---\n{}",
        deployment("app", PODS as u32, "1100m", "256Mi")
    );
    // Nodes never register: the test is about creates and launches, and 200 kubelets would only
    // slow it down (the registration TTL, 15 minutes, is never reached).
    let mut tc = TestCluster::start(
        &yaml,
        Options {
            controller: false,
            registration_delay: Duration::from_secs(3600),
            ..Options::default()
        },
    )
    .await;
    // Every pod pending before the controller starts, so one pass plans all 200 NodeClaims and
    // creates them concurrently.
    tc.eventually("200 unschedulable pods", Duration::from_secs(60), |tc| {
        unschedulable(tc) == PODS
    })
    .await;

    // 30% of the controller's writes (creates, status patches, finalizers, Events) take effect
    // and answer 504; kubectl and the sandbox's own actors are spared.
    let api = Arc::clone(tc.cluster.sandbox.faults());
    let mut config = FaultConfig::default().with_rate(FaultKind::LostResponse, 300);
    config.user_agent = UserAgentFilter::Only(controller::runtime::USER_AGENT.into());
    config.seed = 36;
    api.configure(config);
    api.enable();
    let started = Instant::now();
    let provider = Arc::clone(&tc.cluster.cloud);
    tc.cluster.start_controller(provider);

    let mut most_live = 0;
    let mut all_created = None;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let claims = tc.nodeclaims();
        most_live = most_live.max(live(&claims).len());
        if all_created.is_none() && claims.len() >= PODS {
            all_created = Some(started.elapsed());
        }
        let launched = claims
            .iter()
            .filter(|c| condition(c, "Launched").as_deref() == Some("True"))
            .count();
        if launched >= PODS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{launched} of {} nodeclaims launched for {PODS} pods under lost responses",
            claims.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let launched_in = started.elapsed();
    let lost = api.counts().of(FaultKind::LostResponse);
    api.disable();
    assert!(
        lost >= 30,
        "too few lost responses to prove anything: {lost}"
    );

    // Faults off: whatever a lost answer left in flight settles. A duplicate NodeClaim is never
    // deleted here (no consolidation, no registration timeout), so it would still be counted.
    let settle = Instant::now() + Duration::from_secs(90);
    loop {
        most_live = most_live.max(live(&tc.nodeclaims()).len());
        match settled(&tc) {
            Ok(()) => break,
            Err(e) => assert!(Instant::now() < settle, "not settled: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        most_live <= PODS,
        "{most_live} live nodeclaims at once for {PODS} pods: a duplicate"
    );

    // Each pod is planned onto its own NodeClaim, one of those that exist.
    let names: BTreeSet<String> = tc
        .nodeclaims()
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    let planned: Vec<String> = tc.cluster.ctx.state.planned().values().cloned().collect();
    let targets: BTreeSet<&String> = planned.iter().collect();
    assert_eq!(planned.len(), PODS, "pods with a plan record");
    assert_eq!(
        targets.len(),
        PODS,
        "distinct nodeclaims pods are planned onto"
    );
    assert!(
        targets.iter().all(|t| names.contains(*t)),
        "a plan record names a nodeclaim that does not exist"
    );
    println!(
        "parallel creates: {PODS} nodeclaims created in {:?} and launched in {launched_in:?} \
         under {lost} lost responses; {} launches in all",
        all_created.unwrap_or_default(),
        tc.sim().launches()
    );
}
