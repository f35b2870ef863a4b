//! NodeOverlays where the provisioner reads instance types: passed through without overlays,
//! applied per NodePool, and seen by the plan (the chosen type, the NodeClaim's annotations,
//! a pod needing an overlaid extended resource).

use std::collections::HashMap;
use std::sync::Arc;

use crate::pod_view::PodView;
use crds::labels::{CAPACITY_OVERLAY_APPLIED_ANNOTATION, PRICE_OVERLAY_APPLIED_ANNOTATION};
use crds::{EC2NodeClass, NodeOverlay};
use serde_json::json;
use testutil::{ec2nodeclass, nodepool, pod};

use super::*;
use crate::capacity::overlay::Verdict;
use crate::provisioning::plan::{self, Settings};
use crate::scheduling::testing::small_medium_large;

fn nodeclass() -> Arc<EC2NodeClass> {
    ec2nodeclass("default")
        .subnet_ids(["subnet-1"])
        .security_group_ids(["sg-1"])
        .arc()
}

fn listings() -> HashMap<String, Listing> {
    HashMap::from([("default".to_string(), Ok(Arc::new(small_medium_large())))])
}

/// The NodeOverlay `name` with `spec` (JSON).
fn overlay(name: &str, spec: serde_json::Value) -> Arc<NodeOverlay> {
    let obj = json!({
        "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
        "metadata": {"name": name}, "spec": spec,
    });
    Arc::new(serde_json::from_value(obj).expect("test overlay"))
}

fn on_type(name: &str) -> serde_json::Value {
    json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [name]}])
}

/// Ready NodePools named `pools` on the default node class, the pods, and the overlays.
fn snapshot(pools: &[&str], pods: Vec<Arc<PodView>>, overlays: Vec<Arc<NodeOverlay>>) -> Snapshot {
    Snapshot {
        pods,
        nodepools: pools
            .iter()
            .map(|p| nodepool(p).condition("Ready", "True").arc())
            .collect(),
        nodeclasses: vec![nodeclass()],
        nodeoverlays: overlays,
        ..Snapshot::default()
    }
}

fn pending(name: &str) -> Arc<PodView> {
    pod(name)
        .uid(name)
        .cpu("500m")
        .memory("512Mi")
        .unschedulable()
        .arc()
}

fn cheapest_price(types: &[Arc<InstanceType>], name: &str) -> f64 {
    types
        .iter()
        .find(|t| t.name == name)
        .and_then(|t| t.offerings.iter().map(|o| o.price).reduce(f64::min))
        .expect("listed")
}

#[test]
fn without_overlays_the_listing_is_passed_through() {
    let listings = listings();
    let listed = pool_types(&snapshot(&["default"], vec![], vec![]), &listings);
    let (_, types) = &listed.pools[0];
    let Some(Ok(listed_types)) = listings.get("default") else {
        panic!("listed");
    };
    assert!(Arc::ptr_eq(types.as_ref().expect("types"), listed_types));
    assert!(listed.verdicts.is_empty());
}

#[test]
fn an_overlay_applies_to_the_pools_it_selects_and_the_index_follows() {
    let only_a = json!([{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["a"]}]);
    let snap = snapshot(
        &["a", "b"],
        vec![],
        vec![overlay(
            "cheap",
            json!({"requirements": only_a, "price": "0.01"}),
        )],
    );
    let listed = pool_types(&snap, &listings());
    assert_eq!(
        listed.verdicts.get("cheap"),
        Some(&Verdict::Applied),
        "{:?}",
        listed.verdicts
    );
    let types = |i: usize| listed.pools[i].1.clone().expect("listed");
    assert_eq!(cheapest_price(&types(0), "gp.large"), 0.01);
    assert_eq!(cheapest_price(&types(1), "gp.large"), 0.06);
    let price = |pool: &str| {
        let t = listed.index.get(Some(pool), "gp.xlarge").expect("indexed");
        (t.price_overlay_applied, t.offerings[0].price)
    };
    assert_eq!(price("a"), (true, 0.01));
    assert_eq!(price("b"), (false, 0.20));
}

#[test]
fn a_price_overlay_changes_the_type_the_plan_launches_and_says_so() {
    let raise = overlay(
        "gp-large-fee",
        json!({"requirements": on_type("gp.large"), "priceAdjustment": "+1"}),
    );
    let plan_with = |overlays| {
        let snap = snapshot(&["default"], vec![pending("a")], overlays);
        plan::plan(&snap, &listings(), &Settings::default())
    };
    let first = |p: &plan::Plan| p.nodeclaims[0].decision.instance_types[0].name.clone();
    let annotation = |p: &plan::Plan, key: &str| {
        let claim = &p.nodeclaims[0].nodeclaim;
        claim.metadata.annotations.as_ref()?.get(key).cloned()
    };
    let plain = plan_with(vec![]);
    assert_eq!(first(&plain), "gp.large");
    assert_eq!(annotation(&plain, PRICE_OVERLAY_APPLIED_ANNOTATION), None);
    let overlaid = plan_with(vec![raise]);
    assert_eq!(first(&overlaid), "gp.xlarge");
    let options: Vec<bool> = overlaid.nodeclaims[0]
        .decision
        .instance_types
        .iter()
        .map(|t| t.price_overlay_applied)
        .collect();
    let expected = options.contains(&true).then(|| "true".to_string());
    assert_eq!(
        annotation(&overlaid, PRICE_OVERLAY_APPLIED_ANNOTATION),
        expected
    );
    assert_eq!(
        annotation(&overlaid, CAPACITY_OVERLAY_APPLIED_ANNOTATION),
        None
    );
}

#[test]
fn a_capacity_overlay_makes_an_extended_resource_schedulable() {
    let fpga = pod("fpga")
        .uid("fpga")
        .cpu("500m")
        .request("example.com/fpga", "1")
        .unschedulable()
        .arc();
    let board = overlay(
        "fpga",
        json!({"requirements": on_type("gp.xlarge"), "capacity": {"example.com/fpga": "1"}}),
    );
    let none = snapshot(&["default"], vec![Arc::clone(&fpga)], vec![]);
    let out = plan::plan(&none, &listings(), &Settings::default());
    assert!(out.nodeclaims.is_empty());
    assert_eq!(out.failures.len(), 1, "{:?}", out.failures);

    let with = snapshot(&["default"], vec![fpga], vec![board]);
    let out = plan::plan(&with, &listings(), &Settings::default());
    assert!(out.failures.is_empty(), "{:?}", out.failures);
    let claim = &out.nodeclaims[0];
    let names: Vec<&str> = claim
        .decision
        .instance_types
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(names, ["gp.xlarge"]);
    let annotations = claim
        .nodeclaim
        .metadata
        .annotations
        .clone()
        .unwrap_or_default();
    assert_eq!(
        annotations
            .get(CAPACITY_OVERLAY_APPLIED_ANNOTATION)
            .map(String::as_str),
        Some("true")
    );
}
