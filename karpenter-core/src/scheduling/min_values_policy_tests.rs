//! `MIN_VALUES_POLICY` through the solver, translated from upstream's provisioning suite
//! (`pkg/controllers/provisioning/suite_test.go`, Context "MinValuesPolicy"): under Strict an
//! unmet `minValues` leaves the pod pending; under BestEffort the NodeClaim is created with
//! `minValues` lowered to what the fitting instance types offer, and says so.

use serde_json::json;

use super::choices::MinValuesPolicy;
use super::requirements::Requirement;
use super::solver::{Input, NodePoolTemplate, Output, solve};
use super::testing::*;
use crds::labels::{INSTANCE_TYPE_LABEL, TOPOLOGY_ZONE_LABEL};

fn input(pools: Vec<NodePoolTemplate>, policy: MinValuesPolicy) -> Input {
    Input {
        pods: vec![pod("p", 500, 512, json!({}))],
        nodepools: pools,
        well_known_labels: well_known(),
        repack: true,
        min_values_policy: policy,
        ..Input::default()
    }
}

/// Two instance types (upstream's `it-1`, `it-2`) in zones a and b, and a pool asking for
/// `minValues` 3 on instance types.
fn short_pool(name: &str, weight: i32) -> NodePoolTemplate {
    let mut p = pool(
        name,
        vec![
            instance_type("it-1", 2, 4, 0.10),
            instance_type("it-2", 4, 8, 0.20),
        ],
    );
    p.weight = weight;
    let mut req = Requirement::is_in(INSTANCE_TYPE_LABEL, ["it-1", "it-2"]);
    req.min_values = Some(3);
    p.requirements.add(req);
    p
}

fn min_values(out: &Output, key: &str) -> Option<usize> {
    out.new_claims[0]
        .requirements
        .get(key)
        .and_then(|r| r.min_values)
}

#[test]
fn strict_leaves_the_pod_pending_and_says_why() {
    // It("should not schedule when minValues requirement is not met")
    let out = solve(&input(
        vec![short_pool("default", 0)],
        MinValuesPolicy::Strict,
    ));
    assert!(out.new_claims.is_empty());
    assert_eq!(out.errors.len(), 1);
    let why = out.errors[0].to_string();
    assert!(why.contains("minValues requirement is not met"), "{why}");
}

#[test]
fn best_effort_lowers_min_values_to_what_the_types_offer() {
    // It("should schedule even when minValues requirement is not met")
    let out = solve(&input(
        vec![short_pool("default", 0)],
        MinValuesPolicy::BestEffort,
    ));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.new_claims.len(), 1);
    let claim = &out.new_claims[0];
    assert!(claim.min_values_relaxed);
    let names: Vec<&str> = claim
        .instance_types
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(names, vec!["it-1", "it-2"]);
    assert_eq!(min_values(&out, INSTANCE_TYPE_LABEL), Some(2));
}

#[test]
fn best_effort_relaxes_zone_min_values_and_keeps_the_zones() {
    // It("should schedule even when zone minValues requirement is not met")
    let mut p = pool("default", small_medium_large());
    let mut zones = Requirement::is_in(
        TOPOLOGY_ZONE_LABEL,
        ["test-zone-a", "test-zone-b", "test-zone-c"],
    );
    zones.min_values = Some(3);
    p.requirements.add(zones);
    // Strict: only two of the three zones are offered.
    let strict = solve(&input(vec![p.clone()], MinValuesPolicy::Strict));
    assert!(strict.new_claims.is_empty());
    let out = solve(&input(vec![p], MinValuesPolicy::BestEffort));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert!(out.new_claims[0].min_values_relaxed);
    assert_eq!(min_values(&out, TOPOLOGY_ZONE_LABEL), Some(2));
}

#[test]
fn best_effort_relaxes_before_falling_back_to_a_lighter_pool() {
    // It("should relax minValues before falling back to other nodepools")
    let light = pool("fallback", small_medium_large());
    let out = solve(&input(
        vec![short_pool("heavy", 100), light],
        MinValuesPolicy::BestEffort,
    ));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.new_claims[0].nodepool, "heavy");
    // Under Strict the heavier pool is passed over.
    let light = pool("fallback", small_medium_large());
    let strict = solve(&input(
        vec![short_pool("heavy", 100), light],
        MinValuesPolicy::Strict,
    ));
    assert_eq!(strict.new_claims[0].nodepool, "fallback");
    assert!(!strict.new_claims[0].min_values_relaxed);
}

#[test]
fn met_min_values_are_not_relaxed() {
    let mut p = short_pool("default", 0);
    let mut req = Requirement::is_in(INSTANCE_TYPE_LABEL, ["it-1", "it-2"]);
    req.min_values = Some(2);
    p.requirements.remove(INSTANCE_TYPE_LABEL);
    p.requirements.add(req);
    let out = solve(&input(vec![p], MinValuesPolicy::BestEffort));
    assert!(!out.new_claims[0].min_values_relaxed);
    assert_eq!(min_values(&out, INSTANCE_TYPE_LABEL), Some(2));
}

#[test]
fn the_policy_parses_as_upstream_spells_it() {
    assert_eq!("Strict".parse(), Ok(MinValuesPolicy::Strict));
    assert_eq!("BestEffort".parse(), Ok(MinValuesPolicy::BestEffort));
    let err = "besteffort"
        .parse::<MinValuesPolicy>()
        .expect_err("lower case is refused");
    assert!(err.contains("invalid MIN_VALUES_POLICY"), "{err}");
    assert_eq!(MinValuesPolicy::default(), MinValuesPolicy::Strict);
}
