//! Tests of the instance-type choice, with the cases of upstream's AWS filter tests
//! (`aws:pkg/providers/instance/filter/filter_test.go`: exotic and spot filters) and core's
//! truncation and minValues, then through the solver and the embedded catalog.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::json;

use super::choices::{
    MAX_INSTANCE_TYPES, MinValuesShortfall, accepted, is_exotic, listed, min_values_shortfall,
};
use super::requirements::{Requirement, Requirements};
use super::resources::Resources;
use super::solver::{Input, solve};
use super::testing::*;
use crate::capacity::catalog::Catalog;
use crate::capacity::{InstanceType, Offering};
use crds::labels::{
    CAPACITY_TYPE_LABEL, INSTANCE_FAMILY_LABEL, INSTANCE_SIZE_LABEL, INSTANCE_TYPE_LABEL,
    TOPOLOGY_ZONE_LABEL,
};

/// A 2-vCPU type offered as `(capacity type, zone, USD/hour)`.
fn offered(name: &str, offerings: &[(&str, &str, f64)]) -> Arc<InstanceType> {
    Arc::new(InstanceType::new(
        name.into(),
        BTreeMap::from([(INSTANCE_TYPE_LABEL.to_string(), name.to_string())]),
        &[],
        res(2000, 8192),
        Resources::default(),
        offerings
            .iter()
            .map(|(ct, zone, price)| Offering {
                zone: zone.to_string(),
                capacity_type: ct.to_string(),
                price: *price,
                available: true,
                reservation_id: None,
                reservation_capacity: 0,
            })
            .collect(),
    ))
}

/// A 2-vCPU type with one extended resource in its capacity.
fn with_resource(name: &str, resource: &str) -> Arc<InstanceType> {
    let base = instance_type(name, 2, 8, 0.1);
    let mut capacity = base.capacity.clone();
    capacity.set(resource, 1);
    Arc::new(InstanceType::new(
        name.into(),
        base.labels.clone(),
        &[],
        capacity,
        Resources::default(),
        base.offerings.clone(),
    ))
}

fn metal(name: &str) -> Arc<InstanceType> {
    instance_type_in(
        name,
        2,
        8,
        0.1,
        &["test-zone-a"],
        &[(INSTANCE_SIZE_LABEL, "metal")],
    )
}

fn names(types: &[Arc<InstanceType>], kept: &[usize]) -> Vec<String> {
    kept.iter().map(|&i| types[i].name.clone()).collect()
}

fn both_capacity_types() -> Requirements {
    let mut reqs = Requirements::new();
    reqs.add(Requirement::is_in(
        CAPACITY_TYPE_LABEL,
        ["spot", "on-demand"],
    ));
    reqs
}

fn with_min_values(mut reqs: Requirements) -> Requirements {
    let mut req = Requirement::exists(INSTANCE_TYPE_LABEL);
    req.min_values = Some(2);
    reqs.add(req);
    reqs
}

#[test]
fn types_with_exotic_resources_go_while_a_generic_type_remains() {
    for resource in [
        "nvidia.com/gpu",
        "amd.com/gpu",
        "aws.amazon.com/neuron",
        "aws.amazon.com/neuroncore",
        "habana.ai/gaudi",
    ] {
        let types = vec![
            instance_type("generic", 2, 8, 0.1),
            with_resource("exotic", resource),
        ];
        let kept = accepted(&Requirements::new(), &types);
        assert_eq!(names(&types, &kept), ["generic"], "{resource}");
    }
}

#[test]
fn types_with_normal_resources_are_not_exotic() {
    for resource in [
        "cpu",
        "memory",
        "pods",
        "ephemeral-storage",
        "vpc.amazonaws.com/pod-eni",
    ] {
        let types = vec![
            with_resource("generic", resource),
            with_resource("exotic", "nvidia.com/gpu"),
        ];
        let kept = accepted(&Requirements::new(), &types);
        assert_eq!(names(&types, &kept), ["generic"], "{resource}");
    }
}

#[test]
fn metal_goes_while_a_generic_type_remains() {
    let types = vec![metal("generic.metal"), instance_type("generic", 2, 8, 0.2)];
    assert!(is_exotic(&types[0]) && !is_exotic(&types[1]));
    assert_eq!(
        names(&types, &accepted(&Requirements::new(), &types)),
        ["generic"]
    );
}

#[test]
fn metal_and_exotic_types_stay_when_nothing_else_fits() {
    let types = vec![
        with_resource("exotic", "nvidia.com/gpu"),
        metal("generic.metal"),
    ];
    let kept = accepted(&Requirements::new(), &types);
    assert_eq!(names(&types, &kept), ["exotic", "generic.metal"]);
}

#[test]
fn exotic_types_stay_when_a_requirement_has_min_values() {
    let types = vec![
        instance_type("generic", 2, 8, 0.1),
        with_resource("exotic", "nvidia.com/gpu"),
    ];
    let kept = accepted(&with_min_values(Requirements::new()), &types);
    assert_eq!(names(&types, &kept), ["generic", "exotic"]);
}

#[test]
fn gpu_labelled_types_are_exotic_without_a_gpu_resource() {
    // AMD (g4ad) and Habana (dl1) GPUs carry the GPU labels but no resource in the catalog.
    let amd = instance_type_in(
        "g4ad.xlarge",
        4,
        16,
        0.4,
        &["test-zone-a"],
        &[("karpenter.k8s.aws/instance-gpu-count", "1")],
    );
    assert!(is_exotic(&amd));
    assert!(is_exotic(&gpu_instance_type("g4dn.xlarge", 4, 16, 1, 0.5)));
}

#[test]
fn spot_types_dearer_than_the_cheapest_on_demand_offering_go_in_a_mixed_launch() {
    let types = vec![
        offered("cheap-spot", &[("spot", "a", 1.0), ("spot", "a", 2.0)]),
        offered("od", &[("on-demand", "a", 5.0), ("on-demand", "a", 10.0)]),
        offered("mixed-spot", &[("spot", "a", 1.0), ("spot", "a", 10.0)]),
        offered(
            "expensive-spot",
            &[("spot", "a", 10.0), ("spot", "a", 15.0)],
        ),
    ];
    let kept = accepted(&both_capacity_types(), &types);
    assert_eq!(names(&types, &kept), ["cheap-spot", "od", "mixed-spot"]);
    // No capacity-type requirement at all allows both, as upstream.
    assert_eq!(accepted(&Requirements::new(), &types), kept);
}

#[test]
fn spot_filter_stands_aside_without_on_demand_offerings() {
    let types = vec![
        offered("spot-a", &[("spot", "a", 1.0)]),
        offered("spot-b", &[("spot", "a", 10.0)]),
    ];
    assert_eq!(accepted(&both_capacity_types(), &types), [0, 1]);
}

#[test]
fn spot_filter_stands_aside_unless_both_capacity_types_are_allowed() {
    let types = vec![
        offered("od", &[("on-demand", "a", 5.0)]),
        offered("expensive-spot", &[("spot", "a", 10.0)]),
    ];
    let mut spot_only = Requirements::new();
    spot_only.add(Requirement::is_in(CAPACITY_TYPE_LABEL, ["spot"]));
    assert_eq!(accepted(&spot_only, &types), [0, 1]);
}

#[test]
fn spot_filter_stands_aside_with_min_values() {
    let types = vec![
        offered("od", &[("on-demand", "a", 5.0)]),
        offered("expensive-spot", &[("spot", "a", 10.0)]),
    ];
    assert_eq!(
        accepted(&with_min_values(both_capacity_types()), &types),
        [0, 1]
    );
}

#[test]
fn spot_filter_keeps_reserved_offerings_and_counts_only_compatible_ones() {
    let types = vec![
        offered("od", &[("on-demand", "b", 1.0), ("on-demand", "a", 5.0)]),
        offered("spot-in-a", &[("spot", "a", 4.0), ("spot", "b", 0.5)]),
        offered("reserved", &[("spot", "a", 9.0), ("reserved", "a", 0.0)]),
        offered("dear-spot", &[("spot", "a", 6.0)]),
    ];
    let mut in_a = Requirements::new();
    in_a.add(Requirement::is_in(
        CAPACITY_TYPE_LABEL,
        ["spot", "on-demand", "reserved"],
    ));
    in_a.add(Requirement::is_in(TOPOLOGY_ZONE_LABEL, ["a"]));
    // The $1 on-demand offering is in zone b, which the claim does not allow: $5 is the bar.
    let kept = accepted(&in_a, &types);
    assert_eq!(names(&types, &kept), ["od", "spot-in-a", "reserved"]);
}

/// `n` instance types, cheapest first, in `families` families assigned in turn.
fn family_types(n: usize, families: usize) -> Vec<Arc<InstanceType>> {
    (0..n)
        .map(|i| {
            let family = format!("f{}", i % families);
            instance_type_in(
                &format!("{family}.t{i:03}"),
                2,
                8,
                0.01 * (i + 1) as f64,
                &["test-zone-a"],
                &[(INSTANCE_FAMILY_LABEL, family.as_str())],
            )
        })
        .collect()
}

fn on_demand() -> Requirements {
    let mut reqs = Requirements::new();
    reqs.add(Requirement::is_in(CAPACITY_TYPE_LABEL, ["on-demand"]));
    reqs
}

fn family_min(min: usize) -> Requirements {
    let mut req = Requirement::exists(INSTANCE_FAMILY_LABEL);
    req.min_values = Some(min);
    let mut reqs = Requirements::default();
    reqs.add(req);
    reqs
}

#[test]
fn a_nodeclaim_lists_the_60_cheapest_types_in_order() {
    let all = family_types(200, 4);
    let kept = accepted(&on_demand(), &all);
    assert_eq!(kept, (0..MAX_INSTANCE_TYPES).collect::<Vec<_>>());
    assert_eq!(listed(&Requirements::default(), &all[..12]), 12);
    // 4 families cycle through the first 60: minValues 4 is kept by the cut.
    assert_eq!(listed(&family_min(4), &all), 60);
}

#[test]
fn min_values_keep_more_than_60_when_the_cheapest_60_fall_short() {
    // 100 families: the cheapest 60 types hold 60 of them; minValues 70 needs 70 types.
    let all = family_types(200, 100);
    assert_eq!(accepted(&family_min(70), &all).len(), 70);
    assert_eq!(
        min_values_shortfall(&family_min(70), &all[..60]),
        Some(MinValuesShortfall {
            key: INSTANCE_FAMILY_LABEL.into(),
            needed: 70,
            left: 60
        })
    );
    // Never satisfiable: every type is listed.
    assert_eq!(listed(&family_min(150), &all), 200);
}

fn input(pods: Vec<super::pod::PodInfo>, types: Vec<Arc<InstanceType>>, repack: bool) -> Input {
    Input {
        pods,
        nodepools: vec![pool("default", types)],
        well_known_labels: well_known(),
        repack,
        ..Input::default()
    }
}

fn gpu_pod(name: &str) -> super::pod::PodInfo {
    let requests = json!({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"});
    pod(
        name,
        1000,
        1024,
        json!({"containers": [{"name": "c", "resources": {"requests": requests, "limits": {"nvidia.com/gpu": "1"}}}]}),
    )
}

/// A metal box cheaper per hour than any ordinary type that holds the same pods.
fn cheap_metal() -> Arc<InstanceType> {
    instance_type_in(
        "cheap.metal",
        16,
        64,
        0.05,
        &["test-zone-a"],
        &[(INSTANCE_SIZE_LABEL, "metal")],
    )
}

#[test]
fn the_solver_lists_ordinary_types_for_cpu_pods_and_gpu_types_for_gpu_pods() {
    let types = vec![
        // The cheapest room is a metal box and a GPU box; a user would not accept either for
        // web pods.
        cheap_metal(),
        gpu_instance_type("gpu.xlarge", 4, 16, 1, 0.08),
        instance_type("gp.large", 2, 8, 0.10),
        instance_type("gp.4xlarge", 16, 64, 0.80),
    ];
    for repack in [false, true] {
        let cpu = solve(&input(
            vec![pod("web", 500, 512, json!({}))],
            types.clone(),
            repack,
        ));
        let listed: Vec<&str> = cpu.new_claims[0]
            .instance_types
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        // gp.4xlarge's spot price ($0.48) exceeds gp.large on demand ($0.10): it goes too.
        assert_eq!(listed, ["gp.large"], "repack {repack}");
        assert!((cpu.new_claims[0].cheapest_price().expect("priced") - 0.06).abs() < 1e-9);
        let it = cpu.new_claims[0]
            .requirements
            .get(INSTANCE_TYPE_LABEL)
            .expect("types");
        assert!(!it.has("cheap.metal") && !it.has("gpu.xlarge"));

        let gpu = solve(&input(vec![gpu_pod("train")], types.clone(), repack));
        let listed: Vec<&str> = gpu.new_claims[0]
            .instance_types
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(listed, ["gpu.xlarge"], "repack {repack}");
    }
}

#[test]
fn the_cost_repack_prices_claims_as_they_would_launch() {
    // 12 pods of 1 cpu: one cheap metal box would hold them all at $0.05/h, but the NodeClaim
    // would list only ordinary types. First fit opens one claim (gp.4xlarge, $0.48/h spot); the
    // re-pack must not keep a plan priced at the metal box's $0.05.
    let types = vec![
        cheap_metal(),
        instance_type("gp.large", 2, 8, 0.10),
        instance_type("gp.4xlarge", 16, 64, 0.80),
    ];
    let pods: Vec<_> = (0..12)
        .map(|i| pod(&format!("p{i}"), 1000, 512, json!({})))
        .collect();
    let out = solve(&input(pods, types, true));
    let total: f64 = out
        .new_claims
        .iter()
        .filter_map(|c| c.cheapest_price())
        .sum();
    for c in &out.new_claims {
        assert!(
            c.instance_types.iter().all(|t| !is_exotic(t)),
            "{:?}",
            c.instance_types
        );
    }
    assert_eq!(
        out.new_claims.iter().map(|c| c.pods.len()).sum::<usize>(),
        12
    );
    // Whatever the plan, it is what the listed types cost and no dearer than one gp.4xlarge.
    assert!(total <= 0.48 + 1e-9, "{total}");
}

#[test]
fn with_the_embedded_catalog_a_small_pod_gets_ordinary_types_at_most_60() {
    let catalog = Catalog::embedded().expect("embedded catalog");
    let zones: BTreeSet<String> = ["us-east-1a", "us-east-1b"]
        .iter()
        .map(|z| z.to_string())
        .collect();
    let types = catalog.instance_types(
        &zones,
        &crate::capacity::node_class::CapacityConfig::default(),
        |_, _, _| false,
    );
    let mut on_demand_pool = pool("default", types.clone());
    on_demand_pool
        .requirements
        .add(Requirement::is_in(CAPACITY_TYPE_LABEL, ["on-demand"]));
    let mixed = solve(&input(vec![pod("web", 100, 128, json!({}))], types, false));
    let on_demand = solve(&Input {
        pods: vec![pod("web", 100, 128, json!({}))],
        nodepools: vec![on_demand_pool],
        well_known_labels: well_known(),
        ..Input::default()
    });
    let on_demand = &on_demand.new_claims[0].instance_types;
    assert_eq!(on_demand.len(), MAX_INSTANCE_TYPES);
    let mixed = &mixed.new_claims[0];
    assert!((1..=MAX_INSTANCE_TYPES).contains(&mixed.instance_types.len()));
    for t in on_demand.iter().chain(&mixed.instance_types) {
        assert!(!is_exotic(t), "{}", t.name);
    }
    // In the mixed launch every listed type with spot offerings has one no dearer than the
    // cheapest on-demand one (types sold on demand only stay, as upstream).
    let bar = mixed
        .instance_types
        .iter()
        .flat_map(|t| &t.offerings)
        .filter(|o| o.capacity_type == "on-demand")
        .map(|o| o.price)
        .fold(f64::INFINITY, f64::min);
    for t in &mixed.instance_types {
        let mut spot = t.offerings.iter().filter(|o| o.capacity_type == "spot");
        assert!(
            spot.clone().next().is_none() || spot.any(|o| o.price <= bar),
            "{}",
            t.name
        );
    }
}
