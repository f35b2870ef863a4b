//! Tests of the simulated cloud's launch, capacity and deletion behaviour.

use std::sync::Arc;

use super::*;
use crds::Operator;
use crds::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL};
use karpenter_core::clock::{FakeClock, SystemClock};
use testutil::{ec2nodeclass, nodeclaim};

fn cloud() -> SimCloud {
    SimCloud::new("demo", Arc::new(SystemClock)).expect("catalog")
}

/// The EC2NodeClass `default` as `cloud` resolves it.
fn node_class(cloud: &SimCloud) -> EC2NodeClass {
    let mut nc = ec2nodeclass("default").build();
    let r = cloud.with_network(|n| n.resolve("demo", &nc, jiff::Timestamp::now()));
    nc.status = Some(r.status);
    nc
}

/// The NodeClaim `default-abcde` of `default` for one of `types` and `capacity_types`, asking
/// a cpu and 1Gi, with the startup taint `example.com/agent:NoSchedule`.
fn claim(types: &[&str], capacity_types: &[&str]) -> NodeClaim {
    nodeclaim("default-abcde")
        .nodepool("default")
        .requirement(INSTANCE_TYPE_LABEL, Operator::In, types)
        .requirement(CAPACITY_TYPE_LABEL, Operator::In, capacity_types)
        .request("cpu", "1")
        .request("memory", "1Gi")
        .startup_taint("example.com/agent:NoSchedule")
        .build()
}

#[tokio::test]
async fn launches_the_cheapest_spot_offering_with_kubelet_config() {
    let c = cloud();
    let nc = node_class(&c);
    let l = c
        .create(
            &claim(&["m5.large", "m5.xlarge"], &["spot", "on-demand"]),
            &nc,
        )
        .await
        .expect("launch");
    assert!(l.provider_id.starts_with("aws:///us-east-1"));
    assert_eq!(l.labels[l::CAPACITY_TYPE_LABEL], "spot");
    assert_eq!(l.labels[l::INSTANCE_TYPE_LABEL], "m5.large");
    assert!(!l.image_id.is_empty());
    let inst = &c.instances()[0];
    let cheapest_spot = [
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
        "us-east-1d",
        "us-east-1f",
    ]
    .iter()
    .filter(|z| {
        c.catalog()
            .get("m5.large")
            .is_some_and(|e| e.zones.contains(**z))
    })
    .map(|z| karpenter_core::capacity::catalog::spot_price(0.096, "m5.large", z))
    .fold(f64::MAX, f64::min);
    assert_eq!(inst.price, cheapest_spot);
    assert_eq!(inst.node_labels[l::NODEPOOL_LABEL], "default");
    let keys: Vec<&str> = inst.node_taints.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(keys, vec!["example.com/agent", l::UNREGISTERED_TAINT_KEY]);
}

#[tokio::test]
async fn on_demand_only_when_spot_is_not_allowed() {
    let c = cloud();
    let nc = node_class(&c);
    let l = c
        .create(&claim(&["m5.large"], &["on-demand"]), &nc)
        .await
        .expect("launch");
    assert_eq!(l.labels[l::CAPACITY_TYPE_LABEL], "on-demand");
}

#[tokio::test]
async fn insufficient_capacity_falls_back_then_errors() {
    let c = cloud();
    let nc = node_class(&c);
    for zone in [
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
        "us-east-1d",
        "us-east-1f",
    ] {
        c.add_capacity_shortage("m5.large", zone, "spot");
    }
    // As upstream's fleet launch: the preferred capacity type fails as a whole...
    let err = c
        .create(&claim(&["m5.large"], &["spot", "on-demand"]), &nc)
        .await
        .expect_err("spot exhausted");
    assert!(
        matches!(err, CloudError::InsufficientCapacity(ref m) if m.contains("m5.large/us-east-1a/spot")),
        "{err}"
    );
    // ...the exhausted offerings are marked unavailable, so the retry launches on-demand.
    let types = c.instance_types(&nc).await.expect("types");
    let m5 = types
        .iter()
        .find(|t| t.name == "m5.large")
        .expect("m5.large");
    assert!(
        m5.offerings
            .iter()
            .filter(|o| o.capacity_type == "spot")
            .all(|o| !o.available)
    );
    let l = c
        .create(&claim(&["m5.large"], &["spot", "on-demand"]), &nc)
        .await
        .expect("falls back");
    assert_eq!(l.labels[l::CAPACITY_TYPE_LABEL], "on-demand");
    let c2 = cloud();
    let nc2 = node_class(&c2);
    for zone in [
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
        "us-east-1d",
        "us-east-1f",
    ] {
        c2.add_capacity_shortage("m5.large", zone, "on-demand");
    }
    let err = c2
        .create(&claim(&["m5.large"], &["on-demand"]), &nc2)
        .await
        .expect_err("no capacity");
    assert!(matches!(err, CloudError::InsufficientCapacity(_)), "{err}");
}

#[tokio::test]
async fn launch_is_idempotent_and_delete_completes() {
    let clock = Arc::new(FakeClock::new(jiff::Timestamp::now()));
    let c = SimCloud::new("demo", Arc::clone(&clock) as Arc<dyn Clock>).expect("catalog");
    let nc = node_class(&c);
    let cl = claim(&["m5.large"], &["on-demand"]);
    let first = c.create(&cl, &nc).await.expect("launch");
    let again = c.create(&cl, &nc).await.expect("retry");
    assert_eq!(first.provider_id, again.provider_id);
    assert_eq!(c.list().await.expect("list").len(), 1);
    c.delete(&cl).await.expect("terminate");
    // Shutting down: no longer listed as running, and deleting again still succeeds.
    assert!(c.list().await.expect("list").is_empty());
    assert!(c.instances().is_empty());
    c.delete(&cl).await.expect("still shutting down");
    assert!(c.get(&first.provider_id).await.is_ok());
    clock.advance(SHUTDOWN_DURATION);
    assert!(matches!(
        c.delete(&cl).await,
        Err(CloudError::NodeClaimNotFound(_))
    ));
    assert!(matches!(
        c.get(&first.provider_id).await,
        Err(CloudError::NodeClaimNotFound(_))
    ));
}

#[tokio::test]
async fn unready_node_class_is_refused() {
    let c = cloud();
    let mut nc = node_class(&c);
    nc.spec.subnet_selector_terms[0]
        .tags
        .insert("karpenter.sh/discovery".into(), "other".into());
    let err = c
        .create(&claim(&["m5.large"], &["on-demand"]), &nc)
        .await
        .expect_err("not ready");
    assert!(matches!(err, CloudError::NodeClassNotReady(m) if m.contains("SubnetsNotFound")));
}

#[tokio::test]
async fn terminate_by_provider_id() {
    let c = cloud();
    let nc = node_class(&c);
    let l = c
        .create(&claim(&["m5.large"], &["on-demand"]), &nc)
        .await
        .expect("launch");
    assert!(!c.terminate("aws:///us-east-1a/i-0notthere"));
    assert_eq!(c.instances().len(), 1);
    assert!(c.terminate(&l.provider_id));
    assert!(c.instances().is_empty());
    assert!(!c.terminate(&l.provider_id), "terminating twice is a no-op");
}

#[tokio::test]
async fn instances_carry_their_subnet_and_security_groups() {
    let c = cloud();
    let nc = node_class(&c);
    let l = c
        .create(&claim(&["m5.large"], &["on-demand"]), &nc)
        .await
        .expect("launch");
    let i = c.get(&l.provider_id).await.expect("get");
    let status = nc.status.as_ref().expect("resolved");
    let subnet = status
        .subnets
        .iter()
        .find(|s| s.zone == i.zone)
        .expect("a subnet in the instance's zone");
    assert_eq!(i.subnet_id, subnet.id);
    assert_eq!(i.security_group_ids, ["sg-0c0ffee0000000001"]);
    assert_eq!(c.list().await.expect("list"), vec![i]);
}

#[tokio::test]
async fn publishing_a_release_moves_latest_and_signals_a_change() {
    let c = cloud();
    let nc = node_class(&c);
    let mut changes = c.resolution_changes().expect("the sim signals changes");
    let old: Vec<String> = nc
        .status
        .as_ref()
        .map(|s| s.amis.iter().map(|a| a.id.clone()).collect())
        .unwrap_or_default();
    let amis = c
        .publish_release("al2023", None, &["arm64"], ImageHealth::Healthy)
        .expect("published");
    assert_eq!(amis.len(), 1);
    assert_eq!(amis[0].version, "v20260302");
    assert!(changes.has_changed().expect("sender alive"));
    changes.mark_unchanged();
    let now = c.resolve_node_class(&nc).await.status.amis;
    let ids: Vec<&str> = now.iter().map(|a| a.id.as_str()).collect();
    assert!(ids.contains(&amis[0].id.as_str()), "{ids:?}");
    assert_eq!(c.amis().last(), Some(&amis[0]));
    assert!(
        !changes.has_changed().expect("sender alive"),
        "reads change nothing"
    );
    assert!(
        ids.contains(&old[0].as_str()) || ids.contains(&old[1].as_str()),
        "amd64 stays on the previous release"
    );
    assert!(matches!(
        c.publish_release("al2023", Some("v20260302"), &["arm64"], ImageHealth::Broken),
        Err(release::PublishError::AlreadyPublished { .. })
    ));
    assert!(
        !changes.has_changed().expect("sender alive"),
        "a refused release changes nothing"
    );
    assert!(
        c.broken_images().is_empty(),
        "a refused release marks nothing broken"
    );
}

fn faulty(cloud: &SimCloud, config: faults::SimFaultConfig) {
    cloud.faults().configure(config);
    cloud.faults().enable();
}

#[tokio::test]
async fn an_injected_capacity_error_moves_the_launch_to_the_next_offering() {
    let (plain, c) = (cloud(), cloud());
    let request = claim(&["m5.large"], &["spot"]);
    let first = plain
        .create(&request, &node_class(&plain))
        .await
        .expect("launch");
    let nc = node_class(&c);
    faulty(
        &c,
        faults::SimFaultConfig {
            capacity: 1000,
            budget: Some(1),
            ..Default::default()
        },
    );
    let second = c.create(&request, &nc).await.expect("launch elsewhere");
    let zone = |l: &Launched| l.labels[l::TOPOLOGY_ZONE_LABEL].clone();
    assert_ne!(
        zone(&first),
        zone(&second),
        "the out-of-capacity zone was tried again"
    );
    let types = c.instance_types(&nc).await.expect("types");
    let m5 = types
        .iter()
        .find(|t| t.name == "m5.large")
        .expect("m5.large");
    assert!(
        m5.offerings
            .iter()
            .any(|o| o.zone == zone(&first) && o.capacity_type == "spot" && !o.available),
        "the offering that ran out is marked unavailable"
    );
    let counts = c.faults().counts();
    assert_eq!(counts.of(faults::SimFaultKind::InsufficientCapacity), 1);
}

#[tokio::test]
async fn throttled_calls_fail_retryably_and_launch_nothing() {
    let c = cloud();
    let nc = node_class(&c);
    let request = claim(&["m5.large"], &["spot"]);
    faulty(
        &c,
        faults::SimFaultConfig {
            throttle: 1000,
            ..Default::default()
        },
    );
    for result in [
        c.create(&request, &nc).await.map(|_| ()),
        c.list().await.map(|_| ()),
        c.delete(&request).await,
    ] {
        assert!(
            matches!(&result, Err(CloudError::Other(m)) if m.contains("RequestLimitExceeded")),
            "{result:?}"
        );
    }
    assert_eq!(c.launches(), 0);
    c.faults().disable();
    c.create(&request, &nc)
        .await
        .expect("launch once the throttling stops");
    assert_eq!(c.launches(), 1);
}

#[tokio::test]
async fn a_stopped_instance_runs_nothing_but_is_listed_until_terminated() {
    use super::states::{InstanceState, STOP_DURATION};
    let clock = Arc::new(FakeClock::new(jiff::Timestamp::now()));
    let c = SimCloud::new("demo", Arc::clone(&clock) as Arc<dyn Clock>).expect("catalog");
    let nc = node_class(&c);
    let cl = claim(&["m5.large"], &["on-demand"]);
    let l = c.create(&cl, &nc).await.expect("launch");
    let state = |c: &SimCloud| c.describe(&l.provider_id).map(|(_, s)| s);
    assert_eq!(state(&c), Some(InstanceState::Running));
    assert!(c.stop(&l.provider_id));
    assert!(!c.stop(&l.provider_id), "stopping twice is a no-op");
    assert_eq!(state(&c), Some(InstanceState::Stopping));
    assert!(c.instances().is_empty(), "no kubelet runs on it");
    clock.advance(STOP_DURATION);
    assert_eq!(state(&c), Some(InstanceState::Stopped));
    assert_eq!(c.list().await.expect("list").len(), 1, "EC2 lists it");
    c.delete(&cl)
        .await
        .expect("a stopped instance can be terminated");
    assert_eq!(state(&c), Some(InstanceState::ShuttingDown));
    assert!(
        !c.stop(&l.provider_id),
        "a terminated instance does not stop"
    );
    clock.advance(SHUTDOWN_DURATION);
    assert_eq!(state(&c), None);
    assert!(!c.stop("aws:///us-east-1a/i-0notthere"));
    assert_eq!(InstanceState::ShuttingDown.to_string(), "shutting-down");
}

/// `--region` (`AWS_REGION`): an account in eu-west-1 has subnets in eu-west-1a, b and c, sells
/// what eu-west-1 offers, and labels its nodes with the region.
#[tokio::test]
async fn an_account_in_another_region_launches_in_its_zones() {
    let c = SimCloud::in_region("demo", Arc::new(SystemClock), "eu-west-1").expect("eu-west-1");
    assert_eq!(c.region(), "eu-west-1");
    let mut nc = ec2nodeclass("default").build();
    let r = c.resolve_node_class(&nc).await;
    let zones: Vec<&str> = r.status.subnets.iter().map(|s| s.zone.as_str()).collect();
    assert_eq!(zones, ["eu-west-1a", "eu-west-1b", "eu-west-1c"]);
    nc.status = Some(r.status);
    let l = c
        .create(&claim(&["m5.large"], &["on-demand"]), &nc)
        .await
        .expect("launch");
    assert!(
        l.provider_id.starts_with("aws:///eu-west-1"),
        "{}",
        l.provider_id
    );
    assert_eq!(l.labels[l::TOPOLOGY_REGION_LABEL], "eu-west-1");
    assert!(l.labels[l::TOPOLOGY_ZONE_LABEL].starts_with("eu-west-1"));
    let err = SimCloud::in_region("demo", Arc::new(SystemClock), "mars-north-1")
        .err()
        .expect("no such region");
    assert!(err.to_string().contains("mars-north-1"), "{err}");
}
