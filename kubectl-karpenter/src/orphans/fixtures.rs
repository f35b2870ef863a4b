//! Test builders for orphans: NodeClaims, Nodes and instances of a small cluster at
//! [`crate::fixtures::now`] (12:00) with one orphan of each kind and look-alikes that are not.

use std::collections::BTreeMap;

use crds::NodeClaim;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::classify::{Inputs, classify};
use super::{CloudInstance, CloudView, Orphan, Thresholds};
use crate::fixtures::{claim, set_status};

/// `2025-06-01T<hms>Z`.
pub fn at(hms: &str) -> Timestamp {
    format!("2025-06-01T{hms}Z").parse().expect("time")
}

/// `aws:///us-east-1a/i-0a1b2c3d4e5f6000<n>` and its id.
pub fn ids(n: u32) -> (String, String) {
    let id = format!("i-0a1b2c3d4e5f6000{n}");
    (format!("aws:///us-east-1a/{id}"), id)
}

/// Sets `type_` True with the given lastTransitionTime.
pub fn set_true_at(c: &mut NodeClaim, type_: &str, hms: &str) {
    set_status(c, type_, "True");
    if let Some(cond) = c
        .status
        .as_mut()
        .and_then(|s| s.conditions.iter_mut().find(|x| x.type_ == type_))
    {
        cond.last_transition_time = Time(at(hms));
    }
}

/// A NodeClaim with instance `n` and, optionally, its Node.
pub fn launched(name: &str, pool: &str, n: u32, node: Option<&str>) -> NodeClaim {
    let mut c = claim(name, pool, "2025-06-01T10:00:00Z");
    set_true_at(&mut c, "Launched", "10:00:30");
    let status = c.status.get_or_insert_with(Default::default);
    status.provider_id = Some(ids(n).0);
    status.node_name = node.map(str::to_owned);
    c.metadata.finalizers = Some(vec!["karpenter.sh/termination".into()]);
    c
}

/// Marks a NodeClaim deleted at `hms`.
pub fn deleting(c: &mut NodeClaim, hms: &str) {
    c.metadata.deletion_timestamp = Some(Time(at(hms)));
}

/// A Node of `pool` (unlabelled when `None`) for instance `n`, created at 10:01.
pub fn node(name: &str, pool: Option<&str>, n: u32, finalizers: &[&str]) -> Node {
    finalizers
        .iter()
        .fold(testutil::node(name), |node, f| node.finalizer(f))
        .labels(pool.map(|p| (crds::labels::NODEPOOL_LABEL, p)))
        .created("2025-06-01T10:01:00Z")
        .provider_id(ids(n).0)
        .build()
}

/// Instance `n`, launched at `hms`, tagged for `nodeclaim`.
pub fn instance(n: u32, nodeclaim: Option<&str>, hms: &str) -> CloudInstance {
    let (provider_id, id) = ids(n);
    CloudInstance {
        id,
        provider_id,
        instance_type: Some("m5.large".into()),
        zone: Some("us-east-1a".into()),
        capacity_type: Some("on-demand".into()),
        hourly_price: Some(0.096),
        launch_time: Some(at(hms)),
        nodeclaim: nodeclaim.map(str::to_owned),
        nodepool: Some("default".into()),
        terminating: false,
    }
}

/// The sample cluster.
pub struct World {
    /// NodeClaims.
    pub claims: Vec<NodeClaim>,
    /// Nodes.
    pub nodes: Vec<Node>,
    /// Instances.
    pub instances: Vec<CloudInstance>,
    /// Pods per node.
    pub pods: BTreeMap<String, usize>,
}

/// One orphan of each kind, and for most kinds a look-alike just inside its threshold.
pub fn world() -> World {
    let fin = ["karpenter.sh/termination"];
    let mut unlaunched = claim("default-unlaunched", "default", "2025-06-01T11:50:00Z");
    set_status(&mut unlaunched, "Launched", "Unknown");
    if let Some(c) = unlaunched.status.as_mut().map(|s| &mut s.conditions[0]) {
        c.reason = "InsufficientCapacity".into();
        c.message = "no offering available ".into();
    }
    let young = claim("default-young", "default", "2025-06-01T11:58:00Z");
    let mut unregistered = launched("default-unregistered", "default", 2, None);
    set_true_at(&mut unregistered, "Launched", "11:40:00");
    let mut registering = launched("default-registering", "default", 4, None);
    set_true_at(&mut registering, "Launched", "11:55:00");
    let mut stuck = launched("gpu-stuck", "gpu", 3, Some("ip-10-0-3-3"));
    deleting(&mut stuck, "11:50:00");
    let mut just_deleted = launched("gpu-deleting", "gpu", 10, None);
    deleting(&mut just_deleted, "11:59:00");
    let mut ready = launched("default-ready", "default", 1, Some("ip-10-0-1-1"));
    set_true_at(&mut ready, "Registered", "10:01:00");
    let mut lost = launched("default-lost", "default", 9, Some("ip-10-0-1-9"));
    set_true_at(&mut lost, "Registered", "10:01:00");
    World {
        claims: vec![
            stuck,
            ready,
            unlaunched,
            lost,
            young,
            unregistered,
            registering,
            just_deleted,
        ],
        nodes: vec![
            node("ip-10-0-1-1", Some("default"), 1, &fin),
            node("ip-10-0-1-2", Some("default"), 2, &[]),
            node("ip-10-0-3-3", Some("gpu"), 3, &fin),
            node("ip-10-0-1-9", Some("default"), 9, &fin),
            node("ip-10-0-2-5", Some("default"), 5, &fin),
            node("ip-10-0-9-9", None, 99, &[]),
        ],
        instances: vec![
            instance(1, Some("default-ready"), "10:00:10"),
            instance(2, Some("default-unregistered"), "11:39:50"),
            instance(3, Some("gpu-stuck"), "10:00:10"),
            instance(4, Some("default-registering"), "11:54:50"),
            instance(5, Some("default-gone"), "11:00:00"),
            instance(6, Some("default-young"), "11:58:30"),
            instance(7, None, "11:59:50"),
            CloudInstance {
                terminating: true,
                ..instance(8, None, "09:00:00")
            },
            instance(10, Some("gpu-deleting"), "10:00:10"),
        ],
        pods: [("ip-10-0-3-3".to_owned(), 3), ("ip-10-0-2-5".to_owned(), 1)].into(),
    }
}

/// The sample's cloud view.
pub fn checked(w: &World) -> CloudView {
    CloudView::Checked {
        source: "sandbox".into(),
        instances: w.instances.clone(),
    }
}

/// Classifies the sample at 12:00 with default thresholds.
pub fn orphans(w: &World, cloud: &CloudView) -> Vec<Orphan> {
    classify(&Inputs {
        claims: &w.claims,
        nodes: &w.nodes,
        pods_by_node: &w.pods,
        cloud,
        now: crate::fixtures::now(),
        thresholds: Thresholds::default(),
    })
}
