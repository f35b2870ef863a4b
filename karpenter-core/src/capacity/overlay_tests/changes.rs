//! Overlaid instance types: prices per offering, capacity per type, what an overlay matches in
//! each pool, and the flags behind the `*-overlay-applied` annotations.

use serde_json::json;

use super::*;

/// The price of `name`'s single offering in `pool`, in USD/hour to six decimals.
fn price(e: &Evaluation, pool: &str, name: &str) -> f64 {
    prices(e, pool, name)
        .into_values()
        .next()
        .expect("an offering")
}

/// The amount of `resource` in the capacity of `name` in `pool`.
fn capacity(e: &Evaluation, pool: &str, name: &str, resource: &str) -> i64 {
    find(e, pool, name).capacity.get(resource)
}

#[test]
fn price_overlays_by_nodepool() {
    let two_pools = || [pool("pool-1", catalog()), pool("pool-2", catalog())];
    let only = |p: &str| req(NODEPOOL_LABEL, "In", &[p]);
    let cases = [
        (json!({"price": "13234.223"}), 13234.223),
        (json!({"priceAdjustment": "+1000"}), 1001.02),
    ];
    for (change, want) in cases {
        let overlays = [overlay("o", 10, only("pool-1"), change.clone())];
        let e = evaluate(&overlays, &two_pools());
        assert_eq!(price(&e, "pool-1", "default-instance-type"), want);
        assert_eq!(price(&e, "pool-2", "default-instance-type"), 1.02);
    }
    // Two overlays of one weight, one per pool, do not conflict.
    let overlays = [
        overlay("a", 10, only("pool-1"), json!({"priceAdjustment": "+1000"})),
        overlay("b", 10, only("pool-2"), json!({"priceAdjustment": "+2500"})),
    ];
    let e = evaluate(&overlays, &two_pools());
    assert_eq!(verdict(&e, "a"), Verdict::Applied);
    assert_eq!(verdict(&e, "b"), Verdict::Applied);
    assert_eq!(price(&e, "pool-1", "default-instance-type"), 1001.02);
    assert_eq!(price(&e, "pool-2", "default-instance-type"), 2501.02);
}

#[test]
fn template_labels_match_but_undefined_labels_do_not() {
    let mut labelled = pool("pool-2", catalog());
    labelled.labels = BTreeMap::from([("test-label".into(), "test-value".into())]);
    let pools = [pool("pool-1", catalog()), labelled];
    let label = req("test-label", "In", &["test-value"]);
    let overlays = [
        overlay("price", 10, label.clone(), json!({"price": "13234.223"})),
        overlay(
            "fuse",
            10,
            label,
            json!({"capacity": {"smarter-devices/fuse": "1"}}),
        ),
    ];
    let e = evaluate(&overlays, &pools);
    let (one, two) = (
        find(&e, "pool-1", "default-instance-type"),
        find(&e, "pool-2", "default-instance-type"),
    );
    assert_eq!(
        (one.offerings[0].price, two.offerings[0].price),
        (1.02, 13234.223)
    );
    assert_eq!(one.capacity.get("smarter-devices/fuse"), 0);
    assert_eq!(two.capacity.get("smarter-devices/fuse"), 1);
    // The overlaid type does not gain the pool's labels as requirements.
    assert!(!two.requirements.has_key("test-label") && !two.requirements.has_key(NODEPOOL_LABEL));
}

#[test]
fn the_pool_spec_requirements_play_no_part() {
    let nodepool: crds::NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"},
        "spec": {"template": {
            "metadata": {"labels": {"team": "ml"}},
            "spec": {
                "requirements": [types_in(&["gpu-vendor-instance-type"])],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }
        }}
    }))
    .expect("valid NodePool");
    let overlays = [
        overlay(
            "by-pool",
            10,
            types_in(&["default-instance-type"]),
            json!({"price": "5"}),
        ),
        overlay(
            "by-label",
            20,
            req("team", "In", &["ml"]),
            json!({"capacity": {"example.com/x": "2"}}),
        ),
    ];
    let e = evaluate(&overlays, &[OverlayPool::new(&nodepool, catalog())]);
    let t = find(&e, "gpu", "default-instance-type");
    assert_eq!(t.offerings[0].price, 5.0);
    assert_eq!(t.capacity.get("example.com/x"), 2);
}

#[test]
fn unmatched_types_keep_their_price_and_capacity() {
    let missing = types_in(&["default-instance-type-not-found"]);
    let overlays = [
        overlay("price", 10, missing.clone(), json!({"price": "13234.223"})),
        overlay(
            "fuse",
            10,
            missing,
            json!({"capacity": {"smarter-devices/fuse": "1"}}),
        ),
    ];
    let types = catalog();
    let e = evaluate(&overlays, &[pool("p", types.clone())]);
    assert_eq!(verdict(&e, "price"), Verdict::Applied);
    assert!(
        e.pools["p"]
            .iter()
            .zip(&types)
            .all(|(a, b)| Arc::ptr_eq(a, b))
    );
}

#[test]
fn price_overlays_by_capacity_type_and_zone() {
    let t = it(
        "default-instance-type",
        &[],
        vec![
            offering("test-zone-1", "spot", 1.02),
            offering("test-zone-2", "on-demand", 5.02),
        ],
    );
    let on_demand = req(CAPACITY_TYPE_LABEL, "In", &["on-demand"]);
    let zone_one = req(TOPOLOGY_ZONE_LABEL, "In", &["test-zone-1"]);
    let cases = [
        (
            on_demand.clone(),
            json!({"price": "12321.32"}),
            [1.02, 12321.32],
        ),
        (
            on_demand,
            json!({"priceAdjustment": "+1000"}),
            [1.02, 1005.02],
        ),
        (
            zone_one.clone(),
            json!({"price": "121.421"}),
            [121.421, 5.02],
        ),
        (
            zone_one,
            json!({"priceAdjustment": "+1000"}),
            [1001.02, 5.02],
        ),
    ];
    for (requirement, change, [z1, z2]) in cases {
        let overlays = [overlay("o", 10, requirement, change.clone())];
        let e = evaluate(&overlays, &[pool("p", vec![t.clone()])]);
        let want = zone_prices(&[("test-zone-1", z1), ("test-zone-2", z2)]);
        assert_eq!(prices(&e, "p", "default-instance-type"), want, "{change}");
        assert!(find(&e, "p", "default-instance-type").price_overlay_applied);
    }
}

#[test]
fn equal_weights_on_separate_offerings_both_apply() {
    let cases = [
        (
            json!({"price": "121.421"}),
            json!({"price": "165.421"}),
            [165.421, 121.421, 165.421, 121.421],
        ),
        (
            json!({"priceAdjustment": "+201"}),
            json!({"priceAdjustment": "-0.5"}),
            [0.52, 203.02, 2.52, 205.02],
        ),
    ];
    for (a, b, [z1, z2, z3, z4]) in cases {
        let overlays = [
            overlay(
                "a",
                10,
                req(TOPOLOGY_ZONE_LABEL, "In", &["test-zone-2", "test-zone-4"]),
                a,
            ),
            overlay("b", 10, req(CAPACITY_TYPE_LABEL, "In", &["spot"]), b),
        ];
        let e = evaluate(&overlays, &[pool("p", vec![four_offerings()])]);
        let want = zone_prices(&[
            ("test-zone-1", z1),
            ("test-zone-2", z2),
            ("test-zone-3", z3),
            ("test-zone-4", z4),
        ]);
        assert_eq!(prices(&e, "p", "default-instance-type"), want);
    }
}

#[test]
fn only_the_highest_weight_price_applies() {
    let cases = [
        (
            json!({"price": "121.421"}),
            json!({"price": "165.421"}),
            121.421,
            165.421,
        ),
        (
            json!({"priceAdjustment": "+201"}),
            json!({"priceAdjustment": "-1.5"}),
            203.02,
            2.52,
        ),
    ];
    for (a, b, z2, z4) in cases {
        let overlays = [
            overlay(
                "a-test-100",
                20,
                req(TOPOLOGY_ZONE_LABEL, "In", &["test-zone-2"]),
                a,
            ),
            overlay(
                "b-test-100",
                10,
                req(TOPOLOGY_ZONE_LABEL, "In", &["test-zone-2", "test-zone-4"]),
                b,
            ),
        ];
        let e = evaluate(&overlays, &[pool("p", vec![four_offerings()])]);
        let got = prices(&e, "p", "default-instance-type");
        assert_eq!((got["test-zone-2"], got["test-zone-4"]), (z2, z4));
        assert_eq!((got["test-zone-1"], got["test-zone-3"]), (1.02, 3.02));
    }
}

#[test]
fn prices_clamp_at_zero_and_percentages_follow_the_cloud_price() {
    let t = it(
        "default-instance-type",
        &[],
        vec![
            offering("test-zone-1", "spot", 1.02),
            offering("test-zone-2", "on-demand", 2.0),
        ],
    );
    let cases = [
        ("-1000", [0.0, 0.0]),
        ("-100%", [0.0, 0.0]),
        ("+10%", [1.122, 2.2]),
        ("-50%", [0.51, 1.0]),
    ];
    for (adjustment, [z1, z2]) in cases {
        let overlays = [overlay(
            "o",
            0,
            types_in(&["default-instance-type"]),
            json!({"priceAdjustment": adjustment}),
        )];
        let e = evaluate(&overlays, &[pool("p", vec![t.clone()])]);
        let want = zone_prices(&[("test-zone-1", z1), ("test-zone-2", z2)]);
        assert_eq!(
            prices(&e, "p", "default-instance-type"),
            want,
            "{adjustment}"
        );
    }
}

#[test]
fn capacity_is_set_per_type_and_allocatable_follows() {
    let mut with_hugepages = (*default_type("hugepages-type")).clone();
    with_hugepages.capacity.set("hugepages-1Gi", GI);
    with_hugepages.allocatable.set("hugepages-1Gi", GI);
    let overlays = [overlay(
        "o",
        10,
        req(CAPACITY_TYPE_LABEL, "Exists", &[]),
        json!({"capacity": {"smarter-devices/fuse": "1", "hugepages-1Gi": "2Gi"}}),
    )];
    let types = vec![
        default_type("default-instance-type"),
        Arc::new(with_hugepages),
    ];
    let e = evaluate(&overlays, &[pool("p", types)]);
    for name in ["default-instance-type", "hugepages-type"] {
        let t = find(&e, "p", name);
        assert_eq!(t.capacity.get("smarter-devices/fuse"), 1, "{name}");
        assert_eq!(t.capacity.get("hugepages-1Gi"), 2 * GI, "{name}");
        assert_eq!(t.allocatable.get("hugepages-1Gi"), 2 * GI, "{name}");
        assert_eq!(t.allocatable.get("smarter-devices/fuse"), 1, "{name}");
        // Only the overlaid resources change: cpu stays capacity minus overhead.
        assert_eq!((t.capacity.cpu, t.allocatable.cpu), (2000, 1900), "{name}");
        assert!(
            t.capacity_overlay_applied && !t.price_overlay_applied,
            "{name}"
        );
        assert_eq!(t.offerings[0].price, 1.02);
    }
}

#[test]
fn capacity_from_several_overlays_merges() {
    let types = vec![
        it("zone-one", &[], vec![offering("test-zone-1", "spot", 1.02)]),
        it(
            "zone-two",
            &[],
            vec![offering("test-zone-2", "on-demand", 2.02)],
        ),
        it(
            "zone-four",
            &[],
            vec![offering("test-zone-4", "reserved", 4.02)],
        ),
    ];
    let fuse = json!({"capacity": {"smarter-devices/fuse": "1"}});
    let hugepages = json!({"capacity": {"hugepages-1Gi": "2Gi"}});
    let zones = |z: &[&str]| req(TOPOLOGY_ZONE_LABEL, "In", z);
    // Same weight, different types.
    let overlays = [
        overlay(
            "a",
            10,
            zones(&["test-zone-2", "test-zone-4"]),
            fuse.clone(),
        ),
        overlay(
            "b",
            10,
            req(CAPACITY_TYPE_LABEL, "In", &["spot"]),
            hugepages.clone(),
        ),
    ];
    let e = evaluate(&overlays, &[pool("p", types.clone())]);
    assert_eq!(capacity(&e, "p", "zone-one", "hugepages-1Gi"), 2 * GI);
    assert_eq!(capacity(&e, "p", "zone-one", "smarter-devices/fuse"), 0);
    assert_eq!(capacity(&e, "p", "zone-two", "smarter-devices/fuse"), 1);
    assert_eq!(capacity(&e, "p", "zone-four", "smarter-devices/fuse"), 1);
    // Same weight, same type, different resources.
    let overlays = [
        overlay("a", 10, types_in(&["zone-one"]), fuse.clone()),
        overlay("b", 10, types_in(&["zone-one"]), hugepages.clone()),
    ];
    let e = evaluate(&overlays, &[pool("p", types.clone())]);
    assert_eq!(capacity(&e, "p", "zone-one", "hugepages-1Gi"), 2 * GI);
    assert_eq!(capacity(&e, "p", "zone-one", "smarter-devices/fuse"), 1);
    // Different weights.
    let overlays = [
        overlay("a", 20, zones(&["test-zone-2"]), fuse),
        overlay("b", 10, zones(&["test-zone-2", "test-zone-4"]), hugepages),
    ];
    let e = evaluate(&overlays, &[pool("p", types)]);
    assert_eq!(capacity(&e, "p", "zone-two", "smarter-devices/fuse"), 1);
    assert_eq!(capacity(&e, "p", "zone-two", "hugepages-1Gi"), 2 * GI);
    assert_eq!(capacity(&e, "p", "zone-four", "hugepages-1Gi"), 2 * GI);
    assert_eq!(capacity(&e, "p", "zone-four", "smarter-devices/fuse"), 0);
}

#[test]
fn the_higher_weight_wins_a_shared_resource() {
    let default = types_in(&["default-instance-type"]);
    let overlays = [
        overlay(
            "overlay-a",
            10,
            default.clone(),
            json!({"capacity": {"smarter-devices/fuse": "5"}}),
        ),
        overlay(
            "overlay-b",
            20,
            default,
            json!({"capacity": {"smarter-devices/fuse": "99"}}),
        ),
    ];
    let e = evaluate(&overlays, &[pool("p", catalog())]);
    assert_eq!(verdict(&e, "overlay-a"), Verdict::Applied);
    assert_eq!(verdict(&e, "overlay-b"), Verdict::Applied);
    assert_eq!(
        capacity(&e, "p", "default-instance-type", "smarter-devices/fuse"),
        99
    );
}

#[test]
fn price_and_capacity_from_two_overlays_stack() {
    let default = types_in(&["default-instance-type"]);
    let overlays = [
        overlay(
            "price",
            10,
            default.clone(),
            json!({"priceAdjustment": "+1000.0"}),
        ),
        overlay(
            "capacity",
            10,
            default,
            json!({"capacity": {"smarter-devices/fuse": "1"}}),
        ),
    ];
    let e = evaluate(&overlays, &[pool("p", catalog())]);
    assert_eq!(verdict(&e, "price"), Verdict::Applied);
    assert_eq!(verdict(&e, "capacity"), Verdict::Applied);
    let t = find(&e, "p", "default-instance-type");
    assert_eq!(price(&e, "p", "default-instance-type"), 1001.02);
    assert_eq!(t.capacity.get("smarter-devices/fuse"), 1);
    assert!(t.price_overlay_applied && t.capacity_overlay_applied);
}

#[test]
fn a_conflicting_overlay_applies_nowhere() {
    let a_types = types_in(&[
        "default-instance-type",
        "small-instance-type",
        "gpu-vendor-b-instance-type",
    ]);
    let b_types = types_in(&["small-instance-type", "gpu-vendor-instance-type"]);
    let changes = [
        (json!({"price": "382"}), json!({"price": "100"})),
        (
            json!({"priceAdjustment": "-23"}),
            json!({"priceAdjustment": "+10"}),
        ),
        (
            json!({"capacity": {"smarter-devices/buz": "54"}}),
            json!({"capacity": {"smarter-devices/buz": "21"}}),
        ),
    ];
    for (a, b) in changes {
        let overlays = [
            overlay("overlay-a", 10, a_types.clone(), a.clone()),
            overlay("overlay-b", 10, b_types.clone(), b),
        ];
        // In every pool, however its own requirements narrow it.
        let e = evaluate(
            &overlays,
            &[pool("pool-1", catalog()), pool("pool-2", catalog())],
        );
        assert_eq!(verdict(&e, "overlay-a"), Verdict::Conflict, "{a}");
        for p in ["pool-1", "pool-2"] {
            let applied = |name: &str| {
                let t = find(&e, p, name);
                t.price_overlay_applied || t.capacity_overlay_applied
            };
            assert!(
                !applied("default-instance-type") && !applied("gpu-vendor-b-instance-type"),
                "{a}"
            );
            assert!(
                applied("small-instance-type") && applied("gpu-vendor-instance-type"),
                "{a}"
            );
        }
    }
}
