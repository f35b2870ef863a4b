//! Tests of NodeOverlay evaluation, translating upstream's documented cases
//! (`pkg/controllers/nodeoverlay/suite_test.go`): shared builders and price parsing here,
//! verdicts in [`conflicts`], overlaid prices and capacity in [`changes`].

mod changes;
mod conflicts;

use std::collections::BTreeMap;
use std::sync::Arc;

use crds::NodeOverlay;
use crds::labels::{
    ARCH_LABEL, CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, OS_LABEL,
    TOPOLOGY_ZONE_LABEL,
};
use serde_json::{Value, json};

use super::overlay::*;
use super::{InstanceType, Offering};
use crate::scheduling::resources::Resources;

const GI: i64 = 1 << 30;

fn offering(zone: &str, capacity_type: &str, price: f64) -> Offering {
    Offering {
        zone: zone.into(),
        capacity_type: capacity_type.into(),
        price,
        available: true,
        reservation_id: None,
        reservation_capacity: 0,
    }
}

/// An instance type named `name` with extra labels: 2 cores, 4 GiB, 110 pods, 100m/256Mi
/// overhead.
fn it(name: &str, labels: &[(&str, &str)], offerings: Vec<Offering>) -> Arc<InstanceType> {
    let labels: BTreeMap<String, String> = [(INSTANCE_TYPE_LABEL, name)]
        .iter()
        .chain(labels)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let capacity = Resources {
        cpu: 2000,
        memory: 4 * GI,
        pods: 110,
        ..Resources::default()
    };
    let overhead = Resources {
        cpu: 100,
        memory: 256 << 20,
        ..Resources::default()
    };
    Arc::new(InstanceType::new(
        name.into(),
        labels,
        &[],
        capacity,
        overhead,
        offerings,
    ))
}

/// Upstream's default: one spot offering in test-zone-1 at 1.02 USD/hour.
fn default_type(name: &str) -> Arc<InstanceType> {
    it(name, &[], vec![offering("test-zone-1", "spot", 1.02)])
}

/// Upstream's four-offering type: spot z1 1.02, on-demand z2 2.02, spot z3 3.02, reserved z4
/// 4.02.
fn four_offerings() -> Arc<InstanceType> {
    it(
        "default-instance-type",
        &[],
        vec![
            offering("test-zone-1", "spot", 1.02),
            offering("test-zone-2", "on-demand", 2.02),
            offering("test-zone-3", "spot", 3.02),
            offering("test-zone-4", "reserved", 4.02),
        ],
    )
}

/// Upstream's fake cloud provider's default catalog, by name.
fn catalog() -> Vec<Arc<InstanceType>> {
    [
        "default-instance-type",
        "small-instance-type",
        "gpu-vendor-instance-type",
        "gpu-vendor-b-instance-type",
        "arm-instance-type",
        "single-pod-instance-type",
    ]
    .into_iter()
    .map(default_type)
    .collect()
}

fn pool(name: &str, types: Vec<Arc<InstanceType>>) -> OverlayPool {
    OverlayPool {
        name: name.into(),
        labels: BTreeMap::new(),
        instance_types: types,
    }
}

fn req(key: &str, op: &str, values: &[&str]) -> Value {
    json!({"key": key, "operator": op, "values": values})
}

fn types_in(values: &[&str]) -> Value {
    req(INSTANCE_TYPE_LABEL, "In", values)
}

/// A NodeOverlay `name` with `weight` (0 = unset), one requirement and the other spec fields
/// of `extra` (`price`, `priceAdjustment`, `capacity`).
fn overlay(name: &str, weight: i32, requirement: Value, extra: Value) -> NodeOverlay {
    let mut spec = json!({"requirements": [requirement]});
    if weight != 0 {
        spec["weight"] = json!(weight);
    }
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("valid NodeOverlay")
}

fn verdict(e: &Evaluation, name: &str) -> Verdict {
    e.verdicts.get(name).cloned().expect("a verdict")
}

fn find<'a>(e: &'a Evaluation, pool: &str, name: &str) -> &'a InstanceType {
    e.pools[pool]
        .iter()
        .find(|t| t.name == name)
        .expect("the instance type")
}

/// Prices of `name`'s offerings in `pool`, by zone.
fn prices(e: &Evaluation, pool: &str, name: &str) -> BTreeMap<String, f64> {
    let t = find(e, pool, name);
    t.offerings
        .iter()
        .map(|o| (o.zone.clone(), (o.price * 1e6).round() / 1e6))
        .collect()
}

fn zone_prices(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs.iter().map(|(z, p)| (z.to_string(), *p)).collect()
}

#[test]
fn parses_and_adjusts_prices() {
    assert_eq!(
        PriceChange::parse_price("0.432"),
        Ok(PriceChange::Set(0.432))
    );
    assert_eq!(
        PriceChange::parse_adjustment("+10%"),
        Ok(PriceChange::Percent(10.0))
    );
    assert_eq!(
        PriceChange::parse_adjustment("-.5"),
        Ok(PriceChange::Add(-0.5))
    );
    assert_eq!(
        PriceChange::parse_price("+1"),
        Err(OverlayError::Price("+1".into()))
    );
    assert_eq!(
        PriceChange::parse_adjustment("1"),
        Err(OverlayError::PriceAdjustment("1".into()))
    );
    let cases = [
        (PriceChange::Set(0.432), 0.432),
        (PriceChange::Add(1000.0), 1001.02),
        (PriceChange::Add(-1.5), 0.0),
        (PriceChange::Percent(10.0), 1.122),
        (PriceChange::Percent(-50.0), 0.51),
        (PriceChange::Percent(-100.0), 0.0),
        (PriceChange::Percent(298.0), 4.0596),
    ];
    for (change, want) in cases {
        let got = adjusted_price(1.02, &change);
        assert!((got - want).abs() < 1e-9, "{change:?}: {got} != {want}");
    }
}
