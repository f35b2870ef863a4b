//! Tests of the metrics: decisions counted under upstream's names and labels, state gauges that
//! follow the caches, timed cloud calls, the exposition parser, and a standby's output.

use std::sync::Arc;

use async_trait::async_trait;
use crds::labels::{
    ARCH_LABEL, CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, TOPOLOGY_ZONE_LABEL,
};
use crds::{EC2NodeClass, NodeClaim};
use k8s_openapi::api::core::v1::Node;
use karpenter_core::pod_view::PodView;
use testutil::{NodeClaimBuilder, NodePoolBuilder, ec2nodeclass, nodeclaim, nodepool};

use super::*;
use crate::cloudprovider::CloudProvider;
use crate::runtime::metered::{MeteredCloud, UNKNOWN_CONTROLLER, in_controller};
use karpenter_core::capacity::InstanceType;
use karpenter_core::cloud::CloudError;
use karpenter_core::cloud::Instance;
use karpenter_core::cloud::Launched;
use karpenter_core::cloud::NodeClassResolution;

/// A NodeClaim of `pool`, on-demand in us-west-2a.
fn claim(name: &str, pool: &str) -> NodeClaimBuilder {
    nodeclaim(name)
        .nodepool(pool)
        .label(CAPACITY_TYPE_LABEL, "on-demand")
        .label(TOPOLOGY_ZONE_LABEL, "us-west-2a")
}

/// A NodePool `name` that consolidates `WhenEmpty`.
fn pool(name: &str) -> NodePoolBuilder {
    nodepool(name).consolidation_policy("WhenEmpty")
}

/// A node of `pool`: an arm64 spot m7g.large in us-west-2b, `Ready` = `ready`.
fn node(name: &str, pool: &str, ready: &str) -> Node {
    testutil::node(name)
        .label(NODEPOOL_LABEL, pool)
        .label(CAPACITY_TYPE_LABEL, "spot")
        .label(TOPOLOGY_ZONE_LABEL, "us-west-2b")
        .label(ARCH_LABEL, "arm64")
        .label(INSTANCE_TYPE_LABEL, "m7g.large")
        .allocatable("cpu", "1930m")
        .allocatable("memory", "7Gi")
        .allocatable("pods", "29")
        .ready(ready)
        .build()
}

/// A pod of the `owner_kind` `web-1` asking `cpu` and 1Gi: pending, or running (and Ready) on
/// `node`.
fn pod(name: &str, node: Option<&str>, owner_kind: &str, cpu: &str) -> PodView {
    let p = testutil::pod(name)
        .owner("apps/v1", owner_kind, "web-1", "u")
        .cpu(cpu)
        .memory("1Gi");
    match node {
        Some(node) => p.on_node(node).phase("Running").condition("Ready", "True"),
        None => p.phase("Pending"),
    }
    .decode()
}

/// The value of the one sample named `name` whose labels include every pair of `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let found: Vec<&Sample> = samples.iter().filter(|s| s.matches(name, labels)).collect();
    assert!(found.len() <= 1, "{name} {labels:?} matches {found:?}");
    found.first().map(|s| s.value)
}

fn scrape(m: &Metrics, o: &Observed) -> Vec<Sample> {
    parse_samples(&m.encode_observed(o)).expect("the exposition parses")
}

#[test]
fn decisions_are_counted_with_upstream_names_and_labels() {
    let m = Metrics::new();
    let a = claim("a", "general").build();
    let relaxed = claim("b", "general")
        .annotation("karpenter.sh/nodeclaim-min-values-relaxed", "true")
        .build();
    m.nodeclaim_created(&a, reason::PROVISIONED);
    m.nodeclaim_created(&a, reason::PROVISIONED);
    m.nodeclaim_created(&relaxed, reason::DRIFTED);
    m.nodeclaim_terminated(&a);
    let with_grace = claim("c", "general").termination_grace_period("1h").build();
    m.nodeclaim_disrupted_with(
        &with_grace,
        reason::EXPIRED,
        Some(ConsolidationPolicy::WhenEmpty),
    );
    m.nodeclaim_disrupted_with(&a, reason::GARBAGE_COLLECTED, None);
    m.scheduling_simulated(PROVISIONER, Duration::from_millis(30));
    let refused = kube::core::Status::failure("Cannot evict pod", "TooManyRequests").with_code(429);
    m.eviction_requested::<()>(&Ok(()));
    m.eviction_requested::<()>(&Err(kube::Error::Api(refused.clone().boxed())));
    m.eviction_requested::<()>(&Err(kube::Error::Api(refused.boxed())));
    let s = scrape(&m, &Observed::default());

    let created = "karpenter_nodeclaims_created_total";
    assert_eq!(
        value(
            &s,
            created,
            &[
                ("reason", "provisioned"),
                ("nodepool", "general"),
                ("min_values_relaxed", "false")
            ]
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &s,
            created,
            &[("reason", "drifted"), ("min_values_relaxed", "true")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &s,
            "karpenter_nodeclaims_terminated_total",
            &[
                ("nodepool", "general"),
                ("capacity_type", "on-demand"),
                ("zone", "us-west-2a")
            ]
        ),
        Some(1.0)
    );
    let disrupted = "karpenter_nodeclaims_disrupted_total";
    assert_eq!(
        value(
            &s,
            disrupted,
            &[
                ("reason", "expired"),
                ("consolidation_policy", "when_empty"),
                ("termination_mode", "eventual"),
                ("capacity_type", "on-demand")
            ]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &s,
            disrupted,
            &[
                ("reason", "garbage_collected"),
                ("consolidation_policy", ""),
                ("termination_mode", "graceful")
            ]
        ),
        Some(1.0)
    );
    let evictions = "karpenter_pods_eviction_requests_total";
    assert_eq!(value(&s, evictions, &[("code", "200")]), Some(1.0));
    assert_eq!(value(&s, evictions, &[("code", "429")]), Some(2.0));
    let sched = "karpenter_scheduler_scheduling_duration_seconds";
    assert_eq!(
        value(
            &s,
            &format!("{sched}_count"),
            &[("controller", "provisioner")]
        ),
        Some(1.0)
    );
    // 30ms falls in the 0.05 bucket but not the 0.025 one.
    assert_eq!(
        value(&s, &format!("{sched}_bucket"), &[("le", "0.025")]),
        Some(0.0)
    );
    assert_eq!(
        value(&s, &format!("{sched}_bucket"), &[("le", "0.05")]),
        Some(1.0)
    );
}

#[test]
fn state_gauges_follow_the_caches_and_drop_deleted_objects() {
    let m = Metrics::new();
    let with_capacity = |name: &str, cpu: &str, mem: &str| {
        claim(name, "general")
            .capacity("cpu", cpu)
            .capacity("memory", mem)
            .capacity("pods", "29")
            .condition("Launched", "True")
            .arc()
    };
    let observed = Observed {
        pods: vec![
            Arc::new(pod("bound", Some("n1"), "ReplicaSet", "500m")),
            Arc::new(pod("daemon", Some("n1"), "DaemonSet", "100m")),
            Arc::new(pod("pending", None, "ReplicaSet", "1")),
        ],
        nodes: vec![
            Arc::new(node("n1", "general", "True")),
            Arc::new(node("n2", "general", "False")),
        ],
        nodeclaims: vec![
            with_capacity("a", "2", "8Gi"),
            with_capacity("b", "4", "16Gi"),
        ],
        nodepools: vec![
            pool("general")
                .limit("cpu", "100")
                .limit("memory", "1000Gi")
                .arc(),
        ],
        synced: true,
    };
    let s = scrape(&m, &observed);

    let pods = "karpenter_pods_state";
    assert_eq!(
        value(
            &s,
            pods,
            &[
                ("name", "bound"),
                ("namespace", "default"),
                ("owner", "ReplicaSet/web-1"),
                ("node", "n1"),
                ("scheduled", "true"),
                ("nodepool", "general"),
                ("zone", "us-west-2b"),
                ("arch", "arm64"),
                ("capacity_type", "spot"),
                ("instance_type", "m7g.large"),
                ("phase", "Running"),
                ("ready", "true"),
                ("managed", "true")
            ]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &s,
            pods,
            &[
                ("name", "pending"),
                ("node", ""),
                ("scheduled", "false"),
                ("phase", "Pending"),
                ("nodepool", ""),
                ("managed", "false")
            ]
        ),
        Some(1.0)
    );
    assert_eq!(s.iter().filter(|x| x.name == pods).count(), 3);

    let usage = "karpenter_nodepools_usage";
    assert_eq!(
        value(
            &s,
            usage,
            &[("nodepool", "general"), ("resource_type", "cpu")]
        ),
        Some(6.0)
    );
    assert_eq!(
        value(
            &s,
            usage,
            &[("nodepool", "general"), ("resource_type", "memory")]
        ),
        Some(24.0 * 1024.0 * 1024.0 * 1024.0)
    );
    assert_eq!(
        value(
            &s,
            usage,
            &[("nodepool", "general"), ("resource_type", "nodes")]
        ),
        Some(2.0)
    );
    let limit = "karpenter_nodepools_limit";
    assert_eq!(
        value(
            &s,
            limit,
            &[("nodepool", "general"), ("resource_type", "cpu")]
        ),
        Some(100.0)
    );
    assert_eq!(
        value(&s, limit, &[("resource_type", "memory")]),
        Some(1000.0 * 1024.0 * 1024.0 * 1024.0)
    );

    assert_eq!(
        value(&s, "karpenter_cluster_state_node_count", &[]),
        Some(2.0)
    );
    assert_eq!(value(&s, "karpenter_cluster_state_synced", &[]), Some(1.0));
    let alloc = "karpenter_nodes_allocatable";
    assert_eq!(
        value(
            &s,
            alloc,
            &[
                ("node_name", "n1"),
                ("resource_type", "cpu"),
                ("phase", "Ready"),
                ("nodepool", "general"),
                ("instance_type", "m7g.large")
            ]
        ),
        Some(1.93)
    );
    assert_eq!(
        value(
            &s,
            alloc,
            &[
                ("node_name", "n2"),
                ("resource_type", "pods"),
                ("phase", "NotReady")
            ]
        ),
        Some(29.0)
    );
    // Pod requests include DaemonSet pods; daemon requests only those.
    assert_eq!(
        value(
            &s,
            "karpenter_nodes_total_pod_requests",
            &[("node_name", "n1"), ("resource_type", "cpu")]
        ),
        Some(0.6)
    );
    assert_eq!(
        value(
            &s,
            "karpenter_nodes_total_daemon_requests",
            &[("node_name", "n1"), ("resource_type", "cpu")]
        ),
        Some(0.1)
    );
    assert_eq!(
        value(
            &s,
            "operator_nodeclaim_status_condition_count",
            &[
                ("name", "a"),
                ("type", "Launched"),
                ("status", "True"),
                ("reason", "Launched")
            ]
        ),
        Some(1.0)
    );

    // Deleted objects' series disappear at the next scrape.
    let after = Observed {
        pods: vec![Arc::clone(&observed.pods[0])],
        nodes: vec![Arc::clone(&observed.nodes[0])],
        nodeclaims: vec![Arc::clone(&observed.nodeclaims[0])],
        nodepools: observed.nodepools.clone(),
        synced: false,
    };
    let s = scrape(&m, &after);
    assert_eq!(s.iter().filter(|x| x.name == pods).count(), 1);
    assert_eq!(value(&s, pods, &[("name", "pending")]), None);
    assert_eq!(value(&s, "karpenter_cluster_state_synced", &[]), Some(0.0));
    assert_eq!(value(&s, usage, &[("resource_type", "cpu")]), Some(2.0));
    assert_eq!(
        value(&s, alloc, &[("node_name", "n2"), ("resource_type", "pods")]),
        None
    );
    assert_eq!(
        value(
            &s,
            "operator_nodeclaim_status_condition_count",
            &[("name", "b")]
        ),
        None
    );
}

/// A cloud whose `create` fails with insufficient capacity and whose `list` succeeds.
struct FakeCloud;

#[async_trait]
impl CloudProvider for FakeCloud {
    fn name(&self) -> &str {
        "fake"
    }
    async fn create(&self, _: &NodeClaim, _: &EC2NodeClass) -> Result<Launched, CloudError> {
        Err(CloudError::InsufficientCapacity("no m7g.large".into()))
    }
    async fn delete(&self, _: &NodeClaim) -> Result<(), CloudError> {
        Err(CloudError::NodeClaimNotFound("gone".into()))
    }
    async fn get(&self, id: &str) -> Result<Instance, CloudError> {
        Err(CloudError::Other(format!("throttled: {id}")))
    }
    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        Ok(Vec::new())
    }
    async fn instance_types(
        &self,
        _: &EC2NodeClass,
    ) -> Result<Arc<Vec<Arc<InstanceType>>>, CloudError> {
        Ok(Arc::new(Vec::new()))
    }
    async fn resolve_node_class(&self, _: &EC2NodeClass) -> NodeClassResolution {
        NodeClassResolution {
            status: Default::default(),
            not_ready: None,
        }
    }
}

#[tokio::test]
async fn cloud_calls_are_timed_and_errors_counted_per_controller() {
    let metrics = Arc::new(Metrics::new());
    let cloud = MeteredCloud::wrap(Arc::new(FakeCloud), Arc::clone(&metrics));
    let class = ec2nodeclass("default").build();
    let c = claim("a", "general").build();
    in_controller("nodeclaim.lifecycle", async {
        assert!(cloud.create(&c, &class).await.is_err());
        assert!(cloud.create(&c, &class).await.is_err());
        assert!(cloud.delete(&c).await.is_err());
    })
    .await;
    assert!(cloud.list().await.is_ok());
    assert!(cloud.get("aws:///x/i-1").await.is_err());
    assert_eq!(cloud.name(), "fake");

    let s = scrape(&metrics, &Observed::default());
    let count = "karpenter_cloudprovider_duration_seconds_count";
    let lifecycle = ("controller", "nodeclaim.lifecycle");
    assert_eq!(
        value(
            &s,
            count,
            &[lifecycle, ("method", "Create"), ("provider", "fake")]
        ),
        Some(2.0)
    );
    assert_eq!(
        value(&s, count, &[lifecycle, ("method", "Delete")]),
        Some(1.0)
    );
    assert_eq!(
        value(
            &s,
            count,
            &[("controller", UNKNOWN_CONTROLLER), ("method", "List")]
        ),
        Some(1.0)
    );
    let errors = "karpenter_cloudprovider_errors_total";
    assert_eq!(
        value(
            &s,
            errors,
            &[
                lifecycle,
                ("method", "Create"),
                ("error", "InsufficientCapacityError")
            ]
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &s,
            errors,
            &[("method", "Delete"), ("error", "NodeClaimNotFoundError")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&s, errors, &[("method", "Get"), ("error", "unknown")]),
        Some(1.0)
    );
    assert_eq!(value(&s, errors, &[("method", "List")]), None);
}

#[test]
fn the_parser_reads_escapes_and_rejects_garbage() {
    let s = parse_samples(
        "# TYPE x counter\nx_total{a=\"q\\\"uo}te\",b=\"line\\nbreak\"} 3\ny 1.5\nz{} +Inf\n# EOF\n",
    )
    .expect("parses");
    assert_eq!(s.len(), 3);
    assert_eq!(s[0].labels["a"], "q\"uo}te");
    assert_eq!(s[0].labels["b"], "line\nbreak");
    assert_eq!(s[0].value, 3.0);
    assert_eq!((s[1].name.as_str(), s[1].value), ("y", 1.5));
    assert!(s[2].value.is_infinite());
    assert!(parse_samples("x{a=\"b\" 1").is_err());
    assert!(parse_samples("x{a=b} 1").is_err());
    assert_eq!(parse_samples("x one").map_err(|e| e.line), Err(1));
}

#[test]
fn a_standby_exports_counters_but_no_cluster_state() {
    let m = Metrics::new();
    let observed = Observed {
        pods: vec![Arc::new(pod("bound", Some("n1"), "ReplicaSet", "500m"))],
        nodes: vec![Arc::new(node("n1", "general", "True"))],
        nodeclaims: vec![claim("a", "general").arc()],
        nodepools: vec![pool("general").limit("cpu", "100").arc()],
        synced: true,
    };
    m.nodeclaim_created(&claim("a", "general").build(), reason::PROVISIONED);
    let created = "karpenter_nodeclaims_created_total";
    let as_leader = scrape(&m, &observed);
    assert_eq!(
        value(&as_leader, "karpenter_cluster_state_node_count", &[]),
        Some(1.0)
    );
    assert!(
        as_leader.iter().any(|s| s.name == "karpenter_pods_state"),
        "the leader reports pods"
    );
    // The replica lost leadership: the same process scraped as a standby.
    let as_standby = parse_samples(&m.encode_standby()).expect("the exposition parses");
    for family in [
        "karpenter_pods_state",
        "karpenter_nodes_allocatable",
        "karpenter_nodepools_limit",
        "operator_nodeclaim_status_condition_count",
    ] {
        assert!(
            !as_standby.iter().any(|s| s.name.starts_with(family)),
            "a standby exports {family}"
        );
    }
    assert_eq!(
        value(&as_standby, "karpenter_cluster_state_node_count", &[]),
        Some(0.0)
    );
    assert_eq!(
        value(&as_standby, created, &[("nodepool", "general")]),
        Some(1.0),
        "counters stay"
    );
    // Leading again refreshes the gauges.
    let again = scrape(&m, &observed);
    assert!(again.iter().any(|s| s.name == "karpenter_pods_state"));
}
