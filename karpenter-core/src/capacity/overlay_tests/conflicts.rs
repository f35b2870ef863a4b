//! Verdicts: which overlays conflict (same weight, same offering price or resource) and which
//! fail runtime validation.

use serde_json::json;

use super::*;

#[test]
fn no_overlays_leave_the_types_shared() {
    let types = catalog();
    let e = evaluate::<NodeOverlay>(&[], &[pool("p", types.clone())]);
    assert!(e.verdicts.is_empty());
    assert!(
        e.pools["p"]
            .iter()
            .zip(&types)
            .all(|(a, b)| Arc::ptr_eq(a, b))
    );
}

#[test]
fn invalid_overlays_fail_runtime_validation_and_apply_nowhere() {
    let long_key = format!("test.com.test/test-{}", "x".repeat(250));
    let overlays = [
        overlay(
            "long-key",
            10,
            req(&long_key, "Exists", &[]),
            json!({"price": "100"}),
        ),
        overlay(
            "gpu-capacity",
            10,
            types_in(&["default-instance-type"]),
            json!({"capacity": {"nvidia.com/gpu": "5"}}),
        ),
    ];
    let e = evaluate(&overlays, &[pool("p", catalog())]);
    let v = verdict(&e, "long-key");
    assert_eq!(v.reason(), Some("RuntimeValidation"));
    assert!(v.message().contains("63 characters"), "{v:?}");
    assert_eq!(
        verdict(&e, "gpu-capacity"),
        Verdict::RuntimeValidation(
            "spec.capacity[nvidia.com/gpu]: invalid capacity: nvidia.com/gpu in resource, restricted"
                .into()
        )
    );
    let t = find(&e, "p", "default-instance-type");
    assert_eq!(t.offerings[0].price, 1.02);
    assert!(!t.price_overlay_applied && !t.capacity_overlay_applied);
}

#[test]
fn overlapping_instance_type_requirements_conflict() {
    let arm = it(
        "arm-instance-type",
        &[(ARCH_LABEL, "arm64")],
        vec![offering("test-zone-1", "spot", 1.02)],
    );
    let overlays = [
        overlay(
            "overlay-a",
            10,
            req(ARCH_LABEL, "In", &["arm64"]),
            json!({"price": "1.03"}),
        ),
        overlay(
            "overlay-b",
            10,
            req(CAPACITY_TYPE_LABEL, "Exists", &[]),
            json!({"price": "23"}),
        ),
    ];
    let e = evaluate(&overlays, &[pool("p", vec![arm])]);
    // overlay-b comes first (later in the alphabet); overlay-a changes the same offering.
    assert_eq!(verdict(&e, "overlay-a"), Verdict::Conflict);
    assert_eq!(
        verdict(&e, "overlay-a").message(),
        "conflict with another overlay"
    );
    assert_eq!(verdict(&e, "overlay-b"), Verdict::Applied);
    assert_eq!(
        prices(&e, "p", "arm-instance-type"),
        zone_prices(&[("test-zone-1", 23.0)])
    );
}

#[test]
fn disjoint_instance_type_requirements_do_not_conflict() {
    let arm = it(
        "arm-instance-type",
        &[(ARCH_LABEL, "arm64"), (OS_LABEL, "linux")],
        vec![offering("test-zone-1", "spot", 1.02)],
    );
    let amd = it(
        "amd-instance-type",
        &[(ARCH_LABEL, "amd64"), (OS_LABEL, "ios")],
        vec![offering("test-zone-1", "spot", 1.02)],
    );
    let overlays = [
        // The deprecated key is normalized to kubernetes.io/arch.
        overlay(
            "overlay-a",
            10,
            req("beta.kubernetes.io/arch", "In", &["arm64"]),
            json!({"price": "1.03"}),
        ),
        overlay(
            "overlay-b",
            10,
            req(OS_LABEL, "In", &["ios"]),
            json!({"price": "23"}),
        ),
    ];
    let e = evaluate(&overlays, &[pool("p", vec![arm, amd])]);
    assert_eq!(verdict(&e, "overlay-a"), Verdict::Applied);
    assert_eq!(verdict(&e, "overlay-b"), Verdict::Applied);
    assert_eq!(find(&e, "p", "arm-instance-type").offerings[0].price, 1.03);
    assert_eq!(find(&e, "p", "amd-instance-type").offerings[0].price, 23.0);
}

#[test]
fn offering_requirements_conflict_only_on_shared_offerings() {
    let zones = |z: &[&str]| req(TOPOLOGY_ZONE_LABEL, "In", z);
    let spot = req(CAPACITY_TYPE_LABEL, "In", &["spot"]);
    let any_capacity = req(CAPACITY_TYPE_LABEL, "Exists", &[]);
    // (overlay-a's requirement, overlay-b's requirement, whether overlay-a conflicts)
    let cases = [
        (
            zones(&["test-zone-1", "test-zone-4"]),
            any_capacity.clone(),
            true,
        ),
        (any_capacity.clone(), spot.clone(), true),
        (zones(&["test-zone-6", "test-zone-4"]), spot.clone(), false),
        (zones(&["test-zone-1", "test-zone-4"]), spot.clone(), true),
    ];
    for (a, b, conflict) in cases {
        let overlays = [
            overlay("overlay-a", 10, a.clone(), json!({"price": "1.03"})),
            overlay("overlay-b", 10, b.clone(), json!({"price": "23"})),
        ];
        let e = evaluate(&overlays, &[pool("p", vec![four_offerings()])]);
        let want = if conflict {
            Verdict::Conflict
        } else {
            Verdict::Applied
        };
        assert_eq!(verdict(&e, "overlay-a"), want, "{a} vs {b}");
        assert_eq!(verdict(&e, "overlay-b"), Verdict::Applied, "{a} vs {b}");
    }
}

#[test]
fn price_overlays_conflict_at_equal_weight_on_the_same_types() {
    let a_types = types_in(&["default-instance-type", "small-instance-type"]);
    let b_types = types_in(&["default-instance-type", "gpu-vendor-instance-type"]);
    let not_default = req(INSTANCE_TYPE_LABEL, "NotIn", &["default-instance-type"]);
    let only_default = types_in(&["default-instance-type"]);
    let changes = [
        (json!({"price": "1.03"}), json!({"price": "23"})),
        (
            json!({"priceAdjustment": "+54"}),
            json!({"priceAdjustment": "-2"}),
        ),
        // Identical changes conflict too.
        (json!({"price": "100"}), json!({"price": "100"})),
        (
            json!({"priceAdjustment": "+100"}),
            json!({"priceAdjustment": "+100"}),
        ),
    ];
    for (a, b) in changes {
        let run = |ra: &Value, wa: i32, rb: &Value, wb: i32| {
            let overlays = [
                overlay("overlay-a", wa, ra.clone(), a.clone()),
                overlay("overlay-b", wb, rb.clone(), b.clone()),
            ];
            let e = evaluate(&overlays, &[pool("p", catalog())]);
            (verdict(&e, "overlay-a"), verdict(&e, "overlay-b"))
        };
        let overlapping = run(&a_types, 10, &b_types, 10);
        assert_eq!(overlapping, (Verdict::Conflict, Verdict::Applied), "{a}");
        let exclusive = run(&only_default, 10, &not_default, 10);
        assert_eq!(exclusive, (Verdict::Applied, Verdict::Applied), "{a}");
        let weighted = run(&only_default, 10, &b_types, 20);
        assert_eq!(weighted, (Verdict::Applied, Verdict::Applied), "{a}");
    }
}

#[test]
fn capacity_overlays_conflict_at_equal_weight_on_the_same_resource() {
    let fuse = |n: &str| json!({"capacity": {"smarter-devices/fuse": n}});
    let a_types = types_in(&["default-instance-type", "small-instance-type"]);
    let b_types = types_in(&["default-instance-type", "gpu-vendor-instance-type"]);
    let only_default = types_in(&["default-instance-type"]);
    let not_default = req(INSTANCE_TYPE_LABEL, "NotIn", &["default-instance-type"]);
    let buz = json!({"capacity": {"smarter-devices/buz": "5"}});
    // (a, b, whether overlay-a conflicts)
    let cases = [
        (
            (a_types.clone(), 10, fuse("1")),
            (b_types.clone(), 10, fuse("54")),
            true,
        ),
        (
            (a_types.clone(), 10, fuse("54")),
            (b_types.clone(), 10, fuse("54")),
            true,
        ),
        (
            (only_default.clone(), 10, fuse("54")),
            (not_default, 10, fuse("5")),
            false,
        ),
        (
            (only_default.clone(), 10, fuse("55")),
            (b_types.clone(), 20, fuse("5")),
            false,
        ),
        (
            (only_default.clone(), 10, fuse("55")),
            (b_types.clone(), 20, buz),
            false,
        ),
    ];
    for ((ra, wa, ca), (rb, wb, cb), conflict) in cases {
        let overlays = [
            overlay("overlay-a", wa, ra.clone(), ca.clone()),
            overlay("overlay-b", wb, rb.clone(), cb.clone()),
        ];
        let e = evaluate(&overlays, &[pool("p", catalog())]);
        let want = if conflict {
            Verdict::Conflict
        } else {
            Verdict::Applied
        };
        assert_eq!(verdict(&e, "overlay-a"), want, "{ca} vs {cb}");
        assert_eq!(verdict(&e, "overlay-b"), Verdict::Applied);
    }
}

#[test]
fn a_capacity_conflict_is_with_any_earlier_overlay_of_the_weight() {
    let hugepages = |q: &str| json!({"capacity": {"hugepage-1Gi": q}});
    let overlays = [
        overlay(
            "conflicting-overlay-1",
            10,
            types_in(&["default-instance-type", "small-instance-type"]),
            hugepages("2Gi"),
        ),
        overlay(
            "good-overlay-1",
            10,
            types_in(&["default-instance-type"]),
            json!({"capacity": {"smarter-devices/fuse": "1"}}),
        ),
        overlay(
            "conflicting-overlay-2",
            10,
            types_in(&["default-instance-type"]),
            hugepages("3Gi"),
        ),
    ];
    let e = evaluate(&overlays, &[pool("p", catalog())]);
    assert_eq!(verdict(&e, "conflicting-overlay-1"), Verdict::Conflict);
    assert_eq!(verdict(&e, "good-overlay-1"), Verdict::Applied);
    assert_eq!(verdict(&e, "conflicting-overlay-2"), Verdict::Applied);
    // Beyond upstream, whose store remembers only the last overlay's resources: c-fuse and
    // a-fuse share a resource at weight 10 with b-buz processed between them.
    let fuse = json!({"capacity": {"smarter-devices/fuse": "1"}});
    let overlays = [
        overlay(
            "c-fuse",
            10,
            types_in(&["default-instance-type"]),
            fuse.clone(),
        ),
        overlay(
            "b-buz",
            10,
            types_in(&["default-instance-type"]),
            json!({"capacity": {"smarter-devices/buz": "1"}}),
        ),
        overlay("a-fuse", 10, types_in(&["default-instance-type"]), fuse),
    ];
    let e = evaluate(&overlays, &[pool("p", catalog())]);
    assert_eq!(verdict(&e, "a-fuse"), Verdict::Conflict);
}
