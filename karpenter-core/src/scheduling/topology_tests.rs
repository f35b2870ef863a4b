//! Provisioning-solver tests of Karpenter's topology semantics (spread, pod affinity and
//! anti-affinity, relaxed preferences, minValues, host ports), each translated from an upstream
//! Karpenter Ginkgo case and citing its `It("...")` name. Upstream's fake cloud provider offers
//! its instance types in `test-zone-1`..`test-zone-3`; so do these tests. Where upstream provisions
//! in several rounds, earlier rounds become existing nodes with bound pods.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::pod::PodInfo;
use super::requirements::Requirement;
use super::solver::{
    BoundPod, ExistingNode, Input, NewClaim, NodeLabels, NodePoolTemplate, Output, solve,
};
use super::testing::{instance_type_in, pool, res, well_known};
use crate::capacity::InstanceType;
use crds::labels::{CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, INSTANCE_TYPE_LABEL, TOPOLOGY_ZONE_LABEL};

const ZONE: &str = TOPOLOGY_ZONE_LABEL;
const FAMILY: &str = "karpenter.k8s.aws/instance-family";
const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];

// Upstream files, relative to kubernetes-sigs/karpenter pkg/controllers/provisioning/scheduling/.
// TOPOLOGY = topology_test.go, SUITE = suite_test.go, SELECTION = instance_selection_test.go.

/// Shallow-merge the fields of `extra` (an object) into `base` (an object).
fn merge(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
    base
}

/// A pod in `namespace` requesting `cpu_milli` (nothing when 0), with labels and spec fields.
fn pod_in(namespace: &str, name: &str, cpu_milli: i64, labels: Value, spec: Value) -> PodInfo {
    let requests = if cpu_milli > 0 {
        json!({"cpu": format!("{cpu_milli}m")})
    } else {
        json!({})
    };
    let p = testutil::pod(name)
        .namespace(namespace)
        .uid(format!("uid-{name}"))
        .requests(requests)
        .merge(json!({"metadata": {"labels": labels}, "spec": spec}))
        .decode::<crate::pod_view::PodView>();
    PodInfo::from_pod(&p).expect("test pod compiles")
}

fn pod(name: &str, cpu_milli: i64, labels: Value, spec: Value) -> PodInfo {
    pod_in("default", name, cpu_milli, labels, spec)
}

/// `count` pods `{prefix}-{i}` alike.
fn pods(prefix: &str, count: usize, cpu_milli: i64, labels: Value, spec: Value) -> Vec<PodInfo> {
    (0..count)
        .map(|i| {
            pod(
                &format!("{prefix}-{i:02}"),
                cpu_milli,
                labels.clone(),
                spec.clone(),
            )
        })
        .collect()
}

/// Upstream's `labels := map[string]string{"test": "test"}`.
fn test_labels() -> Value {
    json!({"test": "test"})
}

/// `{"security": "s2"}`, upstream's `affLabels`.
fn s2() -> Value {
    json!({"security": "s2"})
}

fn spread(key: &str, max_skew: i32, when: &str, selector: Value) -> Value {
    json!({"topologyKey": key, "maxSkew": max_skew, "whenUnsatisfiable": when, "labelSelector": selector})
}

/// Spec fields with these topology spread constraints.
fn spreads(constraints: Vec<Value>) -> Value {
    json!({ "topologySpreadConstraints": constraints })
}

/// Spec fields: one `DoNotSchedule` spread over `key` selecting `test: test`.
fn spread_test(key: &str, max_skew: i32) -> Value {
    spreads(vec![spread(
        key,
        max_skew,
        "DoNotSchedule",
        json!({"matchLabels": test_labels()}),
    )])
}

/// A pod (anti-)affinity term selecting `labels`.
fn term(key: &str, labels: Value) -> Value {
    json!({"topologyKey": key, "labelSelector": {"matchLabels": labels}})
}

/// Spec fields: `kind` (`podAffinity` / `podAntiAffinity`) with required `terms`.
fn required(kind: &str, terms: Vec<Value>) -> Value {
    json!({"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": terms}}})
}

/// Spec fields: `kind` with one preferred term of weight 50.
fn preferred(kind: &str, term: Value) -> Value {
    json!({"affinity": {kind: {"preferredDuringSchedulingIgnoredDuringExecution":
        [{"weight": 50, "podAffinityTerm": term}]}}})
}

fn node_selector(key: &str, value: &str) -> Value {
    json!({"nodeSelector": {key: value}})
}

/// Spec fields: required node affinity `key In values`.
fn node_in(key: &str, values: &[&str]) -> Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": values}]}]}}}})
}

/// Three sizes offered on-demand and spot in test-zone-1..3.
fn types() -> Vec<Arc<InstanceType>> {
    vec![
        instance_type_in("gp.large", 2, 8, 0.10, &ZONES, &[]),
        instance_type_in("gp.xlarge", 4, 16, 0.20, &ZONES, &[]),
        instance_type_in("gp.4xlarge", 16, 64, 0.80, &ZONES, &[]),
    ]
}

fn default_pool() -> NodePoolTemplate {
    pool("default", types())
}

/// The default pool restricted to `key In values`.
fn pool_in(key: &str, values: &[&str]) -> NodePoolTemplate {
    let mut p = default_pool();
    p.requirements
        .add(Requirement::is_in(key, values.iter().copied()));
    p
}

fn input(pods: Vec<PodInfo>, pools: Vec<NodePoolTemplate>) -> Input {
    Input {
        pods,
        nodepools: pools,
        well_known_labels: well_known(),
        ..Input::default()
    }
}

/// A registered node with `labels` and `cpu_milli` free (room for 110 pods).
fn existing(name: &str, labels: &[(&str, &str)], cpu_milli: i64) -> ExistingNode {
    let mut labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    labels.insert(HOSTNAME_LABEL.into(), name.into());
    let mut available = res(cpu_milli, 64 * 1024);
    available.pods = 110;
    ExistingNode {
        name: name.into(),
        labels: NodeLabels::Known(labels),
        taints: vec![],
        available,
        initialized: true,
        volumes: Default::default(),
        attach_limits: Default::default(),
    }
}

fn bound(p: PodInfo, node: &str) -> BoundPod {
    BoundPod {
        pod: p,
        node: node.into(),
    }
}

/// The single zone a new NodeClaim is pinned to.
fn zone_of(claim: &NewClaim) -> String {
    claim
        .requirements
        .get(ZONE)
        .and_then(|r| r.single_value())
        .unwrap_or_else(|| panic!("claim not pinned to one zone: {}", claim.requirements))
        .to_string()
}

/// Upstream's `ExpectSkew` over `key`: pods with `labels` per domain, counting bound pods, pods
/// the solve put on existing nodes, and pods on new NodeClaims (each must be pinned to one value
/// of `key`), sorted.
fn skew(inp: &Input, out: &Output, key: &str, labels: &Value) -> Vec<usize> {
    let wanted: BTreeMap<String, String> =
        serde_json::from_value(labels.clone()).expect("labels are a string map");
    let selected = |p: &PodInfo| {
        p.key.namespace == "default" && wanted.iter().all(|(k, v)| p.labels.get(k) == Some(v))
    };
    let by_key: BTreeMap<_, _> = inp.pods.iter().map(|p| (p.key.clone(), p)).collect();
    let node_value = |name: &str| {
        inp.existing
            .iter()
            .find(|e| e.name == name)
            .and_then(|e| match &e.labels {
                NodeLabels::Known(l) => l.get(key).cloned(),
                NodeLabels::Pending(_) => None,
            })
    };
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for b in &inp.bound_pods {
        if let Some(v) = node_value(&b.node).filter(|_| selected(&b.pod)) {
            *counts.entry(v).or_default() += 1;
        }
    }
    for (node, keys) in &out.existing {
        for k in keys {
            if let Some(v) = node_value(node).filter(|_| by_key.get(k).is_some_and(|p| selected(p)))
            {
                *counts.entry(v).or_default() += 1;
            }
        }
    }
    for (i, c) in out.new_claims.iter().enumerate() {
        let n = c
            .pods
            .iter()
            .filter(|k| by_key.get(*k).is_some_and(|p| selected(p)))
            .count();
        if n == 0 {
            continue;
        }
        let v = if key == HOSTNAME_LABEL {
            format!("claim-{i}")
        } else {
            c.requirements
                .get(key)
                .and_then(|r| r.single_value())
                .unwrap_or_else(|| panic!("claim not pinned on {key}: {}", c.requirements))
                .to_string()
        };
        *counts.entry(v).or_default() += n;
    }
    let mut v: Vec<usize> = counts.into_values().collect();
    v.sort_unstable();
    v
}

/// Names of the pods that failed to schedule.
fn failed(out: &Output) -> Vec<String> {
    let mut v: Vec<String> = out.errors.iter().map(|e| e.pod.name.clone()).collect();
    v.sort();
    v
}

/// Index of the new NodeClaim holding the pod.
fn claim_of(out: &Output, name: &str) -> usize {
    out.new_claims
        .iter()
        .position(|c| c.pods.iter().any(|k| k.name == name))
        .unwrap_or_else(|| panic!("{name} is on no new NodeClaim: {:?}", failed(out)))
}

// ---- Zonal spread ----

#[test]
fn zonal_spread_balances_new_claims_across_zones() {
    // TOPOLOGY It("should balance pods across zones (match labels)")
    let inp = input(
        pods("p", 4, 0, test_labels(), spread_test(ZONE, 1)),
        vec![default_pool()],
    );
    let out = solve(&inp);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(skew(&inp, &out, ZONE, &test_labels()), vec![1, 1, 2]);
}

#[test]
fn zonal_spread_pins_claims_to_the_pools_zones() {
    // TOPOLOGY It("should respect NodePool zonal constraints (subset) with requirements")
    let inp = input(
        pods("p", 4, 0, test_labels(), spread_test(ZONE, 1)),
        vec![pool_in(ZONE, &ZONES[..2])],
    );
    let out = solve(&inp);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(skew(&inp, &out, ZONE, &test_labels()), vec![2, 2]);
    for c in &out.new_claims {
        assert!(
            ZONES[..2].contains(&zone_of(c).as_str()),
            "{}",
            c.requirements
        );
    }
}

#[test]
fn zonal_spread_counts_a_pod_on_an_existing_node_outside_the_pool() {
    // TOPOLOGY It("should respect NodePool zonal constraints (existing pod)")
    let mut inp = input(
        pods("p", 6, 1100, test_labels(), spread_test(ZONE, 1)),
        vec![pool_in(ZONE, &ZONES[..2])],
    );
    inp.existing = vec![existing("zone3-node", &[(ZONE, "test-zone-3")], 0)];
    inp.bound_pods = vec![bound(
        pod("first", 1100, test_labels(), json!({})),
        "zone3-node",
    )];
    let out = solve(&inp);
    // A max of two per zone before max skew (against test-zone-3's one) would be violated.
    assert_eq!(skew(&inp, &out, ZONE, &test_labels()), vec![1, 2, 2]);
    assert_eq!(out.errors.len(), 2, "{:?}", out.errors);
}

#[test]
fn zonal_spread_does_not_violate_max_skew_against_an_existing_zone() {
    // TOPOLOGY It("should not violate max-skew when unsat = do not schedule")
    let mut inp = input(
        pods("p", 10, 1100, test_labels(), spread_test(ZONE, 1)),
        vec![pool_in(ZONE, &ZONES[1..])],
    );
    inp.existing = vec![existing("zone1-node", &[(ZONE, "test-zone-1")], 0)];
    inp.bound_pods = vec![bound(
        pod("first", 1100, test_labels(), spread_test(ZONE, 1)),
        "zone1-node",
    )];
    let out = solve(&inp);
    assert_eq!(skew(&inp, &out, ZONE, &test_labels()), vec![1, 2, 2]);
    assert_eq!(out.errors.len(), 6);
}

#[test]
fn zonal_spread_counts_only_matching_pods_on_nodes_with_the_domain() {
    // TOPOLOGY It("should only count running/scheduled pods with matching labels scheduled to nodes with a corresponding domain")
    // (Pending, terminating and finished pods never reach the solver as bound pods.)
    let mut inp = input(
        pods("new", 2, 0, test_labels(), spread_test(ZONE, 1)),
        vec![default_pool()],
    );
    inp.existing = vec![
        existing("first", &[(ZONE, "test-zone-1")], 0),
        existing("second", &[(ZONE, "test-zone-2")], 0),
        existing("third", &[], 0),
    ];
    inp.bound_pods = vec![
        bound(pod("no-labels", 0, json!({}), json!({})), "first"),
        bound(pod("no-domain", 0, test_labels(), json!({})), "third"),
        bound(
            pod_in("wrong-namespace", "wrong-ns", 0, test_labels(), json!({})),
            "first",
        ),
        bound(pod("a", 0, test_labels(), json!({})), "first"),
        bound(pod("b", 0, test_labels(), json!({})), "first"),
        bound(pod("c", 0, test_labels(), json!({})), "second"),
    ];
    let out = solve(&inp);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(skew(&inp, &out, ZONE, &test_labels()), vec![1, 2, 2]);
}

#[test]
fn min_domains_caps_each_zone_when_the_pool_has_fewer_domains() {
    // TOPOLOGY It("should respect minDomains constraints")
    let constraint = merge(
        spread(
            ZONE,
            1,
            "DoNotSchedule",
            json!({"matchLabels": test_labels()}),
        ),
        json!({"minDomains": 3}),
    );
    let inp = input(
        pods("p", 3, 0, test_labels(), spreads(vec![constraint.clone()])),
        vec![pool_in(ZONE, &ZONES[..2])],
    );
    let out = solve(&inp);
    assert_eq!(skew(&inp, &out, ZONE, &test_labels()), vec![1, 1]);
    assert_eq!(out.errors.len(), 1);

    // TOPOLOGY It("satisfied minDomains constraints (equal) should allow expected pod scheduling")
    let inp = input(
        pods("p", 11, 0, test_labels(), spreads(vec![constraint])),
        vec![default_pool()],
    );
    let out = solve(&inp);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(skew(&inp, &out, ZONE, &test_labels()), vec![3, 4, 4]);
}

#[test]
fn spread_on_an_unknown_key_does_not_schedule() {
    // TOPOLOGY It("should ignore unknown topology keys")
    let inp = input(
        vec![
            pod("spread", 0, test_labels(), spread_test("unknown", 1)),
            pod("plain", 0, json!({}), json!({})),
        ],
        vec![default_pool()],
    );
    let out = solve(&inp);
    assert_eq!(failed(&out), vec!["spread"]);
    claim_of(&out, "plain");
}

// ---- Hostname spread ----

#[test]
fn hostname_spread_forces_one_pod_per_claim() {
    // TOPOLOGY It("should balance pods across nodes")
    let inp = input(
        pods("p", 4, 0, test_labels(), spread_test(HOSTNAME_LABEL, 1)),
        vec![default_pool()],
    );
    let out = solve(&inp);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(
        skew(&inp, &out, HOSTNAME_LABEL, &test_labels()),
        vec![1, 1, 1, 1]
    );
}

#[test]
fn hostname_spread_packs_up_to_max_skew() {
    // TOPOLOGY It("should balance pods on the same hostname up to maxskew")
    let inp = input(
        pods("p", 4, 0, test_labels(), spread_test(HOSTNAME_LABEL, 4)),
        vec![default_pool()],
    );
    let out = solve(&inp);
    assert_eq!(skew(&inp, &out, HOSTNAME_LABEL, &test_labels()), vec![4]);
    assert_eq!(out.new_claims.len(), 1);
}

#[test]
fn hostname_spread_of_two_deployments_shares_claims() {
    // TOPOLOGY It("balance multiple deployments with hostname topology spread")
    let app = |name: &str| {
        pods(
            name,
            2,
            0,
            json!({ "app": name }),
            spreads(vec![spread(
                HOSTNAME_LABEL,
                1,
                "DoNotSchedule",
                json!({"matchLabels": {"app": name}}),
            )]),
        )
    };
    let mut all = app("app1");
    all.extend(app("app2"));
    let out = solve(&input(all, vec![default_pool()]));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    // The minimum number of nodes.
    assert_eq!(out.new_claims.len(), 2);
}

#[test]
fn hostname_spread_selecting_other_pods_packs_one_claim() {
    // TOPOLOGY It("should handle interdependent selectors")
    let out = solve(&input(
        pods("p", 5, 0, json!({}), spread_test(HOSTNAME_LABEL, 1)),
        vec![default_pool()],
    ));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.new_claims.len(), 1);
}

#[test]
fn hostname_and_zonal_spread_together() {
    // TOPOLOGY It("should spread pods while respecting both constraints (hostname and zonal)"), first round
    let both = spreads(vec![
        spread(
            ZONE,
            1,
            "DoNotSchedule",
            json!({"matchLabels": test_labels()}),
        ),
        spread(
            HOSTNAME_LABEL,
            3,
            "DoNotSchedule",
            json!({"matchLabels": test_labels()}),
        ),
    ]);
    let inp = input(pods("p", 2, 0, test_labels(), both), vec![default_pool()]);
    let out = solve(&inp);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(skew(&inp, &out, ZONE, &test_labels()), vec![1, 1]);
    assert!(
        skew(&inp, &out, HOSTNAME_LABEL, &test_labels())
            .iter()
            .all(|n| *n <= 3)
    );
}

// ---- Capacity-type spread: DoNotSchedule vs ScheduleAnyway ----

/// Upstream's two-round capacity-type cases: one pod already on a spot node, the pool now
/// on-demand only, five more pods spread over the capacity type with `when`.
fn capacity_type_round_two(when: &str) -> (Input, Output) {
    let constraint = spreads(vec![spread(
        CAPACITY_TYPE_LABEL,
        1,
        when,
        json!({"matchLabels": test_labels()}),
    )]);
    let mut inp = input(
        pods("p", 5, 1100, test_labels(), constraint.clone()),
        vec![pool_in(CAPACITY_TYPE_LABEL, &["on-demand"])],
    );
    inp.existing = vec![existing(
        "spot-node",
        &[(CAPACITY_TYPE_LABEL, "spot"), (ZONE, "test-zone-1")],
        0,
    )];
    inp.bound_pods = vec![bound(
        pod("first", 1100, test_labels(), constraint),
        "spot-node",
    )];
    let out = solve(&inp);
    (inp, out)
}

#[test]
fn do_not_schedule_spread_leaves_pods_pending() {
    // TOPOLOGY It("should not violate max-skew when unsat = do not schedule (capacity type)")
    let (inp, out) = capacity_type_round_two("DoNotSchedule");
    assert_eq!(
        skew(&inp, &out, CAPACITY_TYPE_LABEL, &test_labels()),
        vec![1, 2]
    );
    assert_eq!(out.errors.len(), 3);
}

#[test]
fn schedule_anyway_spread_is_relaxed_when_unsatisfiable() {
    // TOPOLOGY It("should violate max-skew when unsat = schedule anyway (capacity type)")
    let (inp, out) = capacity_type_round_two("ScheduleAnyway");
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(
        skew(&inp, &out, CAPACITY_TYPE_LABEL, &test_labels()),
        vec![1, 5]
    );
}

// ---- Pod anti-affinity ----

#[test]
fn hostname_anti_affinity_separates_claims_in_either_order() {
    // TOPOLOGY It("should separate nodes using simple pod anti-affinity on hostname")
    // Upstream repeats the case to cover both scheduling orders; the names set the order here.
    for (target, avoider) in [("a-target", "b-avoider"), ("b-target", "a-avoider")] {
        let out = solve(&input(
            vec![
                pod(target, 0, s2(), json!({})),
                pod(
                    avoider,
                    0,
                    json!({}),
                    required("podAntiAffinity", vec![term(HOSTNAME_LABEL, s2())]),
                ),
            ],
            vec![default_pool()],
        ));
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        assert_ne!(
            claim_of(&out, target),
            claim_of(&out, avoider),
            "{target} then {avoider}"
        );
    }
}

#[test]
fn hostname_self_anti_affinity_puts_one_pod_per_claim() {
    // Self-selecting form of TOPOLOGY It("should separate nodes using simple pod anti-affinity on
    // hostname"): replicas labelled s2 avoiding s2 on the hostname each get a NodeClaim.
    let out = solve(&input(
        pods(
            "p",
            3,
            0,
            s2(),
            required("podAntiAffinity", vec![term(HOSTNAME_LABEL, s2())]),
        ),
        vec![default_pool()],
    ));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.new_claims.len(), 3);
    assert!(out.new_claims.iter().all(|c| c.pods.len() == 1));
}

#[test]
fn zonal_anti_affinity_blocks_every_occupied_zone() {
    // TOPOLOGY It("should not violate pod anti-affinity on zone")
    let mut all: Vec<PodInfo> = ZONES
        .iter()
        .map(|z| pod(&format!("pinned-{z}"), 2000, s2(), node_selector(ZONE, z)))
        .collect();
    all.push(pod(
        "avoider",
        0,
        json!({}),
        required("podAntiAffinity", vec![term(ZONE, s2())]),
    ));
    let out = solve(&input(all, vec![default_pool()]));
    assert_eq!(failed(&out), vec!["avoider"]);
    let mut zones: Vec<String> = out.new_claims.iter().map(zone_of).collect();
    zones.sort();
    assert_eq!(zones, ZONES);
}

#[test]
fn zonal_anti_affinity_against_a_pod_of_unknown_zone_fails() {
    // TOPOLOGY It("should not violate pod anti-affinity on zone (other schedules first)")
    let out = solve(&input(
        vec![
            pod("target", 2000, s2(), json!({})),
            pod(
                "avoider",
                0,
                json!({}),
                required("podAntiAffinity", vec![term(ZONE, s2())]),
            ),
        ],
        vec![default_pool()],
    ));
    assert_eq!(failed(&out), vec!["avoider"]);
    claim_of(&out, "target");
}

#[test]
fn existing_pods_anti_affinity_blocks_the_incoming_pod() {
    // TOPOLOGY It("should not violate pod anti-affinity on zone (inverse)")
    let anti = required("podAntiAffinity", vec![term(ZONE, s2())]);
    let mut all: Vec<PodInfo> = ZONES
        .iter()
        .map(|z| {
            pod(
                &format!("pinned-{z}"),
                2000,
                json!({}),
                merge(anti.clone(), node_selector(ZONE, z)),
            )
        })
        .collect();
    all.push(pod("target", 0, s2(), json!({})));
    let out = solve(&input(all, vec![default_pool()]));
    assert_eq!(failed(&out), vec!["target"]);
    assert_eq!(out.new_claims.len(), 3);

    // TOPOLOGY It("should not violate pod anti-affinity on zone (inverse w/existing nodes)")
    let mut inp = input(
        vec![pod("target", 0, s2(), json!({}))],
        vec![default_pool()],
    );
    for z in ZONES {
        let name = format!("node-{z}");
        inp.existing.push(existing(&name, &[(ZONE, z)], 4000));
        inp.bound_pods.push(bound(
            pod(&format!("pinned-{z}"), 2000, json!({}), anti.clone()),
            &name,
        ));
    }
    let out = solve(&inp);
    assert_eq!(failed(&out), vec!["target"]);
}

#[test]
fn existing_pods_preferred_anti_affinity_does_not_block() {
    // TOPOLOGY It("should violate preferred pod anti-affinity on zone (inverse w/existing nodes)")
    let anti = preferred("podAntiAffinity", term(ZONE, s2()));
    let mut inp = input(
        vec![pod("target", 0, s2(), json!({}))],
        vec![default_pool()],
    );
    for z in ZONES {
        let name = format!("node-{z}");
        inp.existing.push(existing(&name, &[(ZONE, z)], 4000));
        inp.bound_pods.push(bound(
            pod(&format!("pinned-{z}"), 2000, json!({}), anti.clone()),
            &name,
        ));
    }
    let out = solve(&inp);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
}

#[test]
fn zonal_self_anti_affinity_takes_one_zone_each() {
    // TOPOLOGY It("should support pod anti-affinity with a zone topology"). Upstream commits a
    // NodeClaim's zone only at launch, so it needs three provisioning rounds to place one pod per
    // zone; this solver pins each NodeClaim to a free zone (topology.rs `anti_affinity`), reaching
    // the same end state in one round. Either way no fourth pod schedules.
    let inp = input(
        pods(
            "p",
            4,
            0,
            s2(),
            required("podAntiAffinity", vec![term(ZONE, s2())]),
        ),
        vec![default_pool()],
    );
    let out = solve(&inp);
    assert_eq!(skew(&inp, &out, ZONE, &s2()), vec![1, 1, 1]);
    assert_eq!(out.errors.len(), 1);
}

#[test]
fn preferred_anti_affinity_is_relaxed() {
    // TOPOLOGY It("should allow violation of preferred pod anti-affinity")
    let mut all = pods("spread", 3, 0, test_labels(), spread_test(ZONE, 1));
    all.extend(pods(
        "avoider",
        10,
        0,
        json!({}),
        preferred("podAntiAffinity", term(ZONE, test_labels())),
    ));
    let out = solve(&input(all, vec![default_pool()]));
    assert!(out.errors.is_empty(), "{:?}", out.errors);

    // TOPOLOGY It("should violate preferred pod anti-affinity on zone (inverse)")
    let anti = preferred("podAntiAffinity", term(ZONE, s2()));
    let mut all: Vec<PodInfo> = ZONES
        .iter()
        .map(|z| {
            pod(
                &format!("pinned-{z}"),
                2000,
                json!({}),
                merge(anti.clone(), node_selector(ZONE, z)),
            )
        })
        .collect();
    all.push(pod("target", 0, s2(), json!({})));
    let out = solve(&input(all, vec![default_pool()]));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
}

// ---- Pod affinity ----

#[test]
fn hostname_affinity_co_locates_on_one_claim() {
    // TOPOLOGY It("should respect pod affinity (hostname)")
    let mut all = pods(
        "spread",
        10,
        0,
        test_labels(),
        spread_test(HOSTNAME_LABEL, 1),
    );
    all.push(pod("target", 0, s2(), json!({})));
    all.push(pod(
        "follower",
        0,
        json!({}),
        required("podAffinity", vec![term(HOSTNAME_LABEL, s2())]),
    ));
    let out = solve(&input(all, vec![default_pool()]));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(claim_of(&out, "target"), claim_of(&out, "follower"));

    // TOPOLOGY It("should respect self pod affinity (hostname)")
    let out = solve(&input(
        pods(
            "p",
            3,
            0,
            s2(),
            required("podAffinity", vec![term(HOSTNAME_LABEL, s2())]),
        ),
        vec![default_pool()],
    ));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.new_claims.len(), 1);
}

#[test]
fn zonal_self_affinity_keeps_replicas_in_one_zone() {
    // TOPOLOGY It("should respect self pod affinity (zone)")
    let inp = input(
        pods(
            "p",
            3,
            0,
            s2(),
            required("podAffinity", vec![term(ZONE, s2())]),
        ),
        vec![default_pool()],
    );
    let out = solve(&inp);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.new_claims.len(), 1);

    // TOPOLOGY It("should respect self pod affinity (zone w/ constraint)")
    let inp = input(
        pods(
            "p",
            3,
            0,
            s2(),
            merge(
                required("podAffinity", vec![term(ZONE, s2())]),
                node_in(ZONE, &["test-zone-3"]),
            ),
        ),
        vec![default_pool()],
    );
    let out = solve(&inp);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.new_claims.len(), 1);
    assert_eq!(zone_of(&out.new_claims[0]), "test-zone-3");
}

#[test]
fn zonal_affinity_waits_for_the_target_zone_then_follows_it() {
    // TOPOLOGY It("should support pod affinity with zone topology (unconstrained target)")
    let followers = || {
        pods(
            "follower",
            10,
            0,
            json!({}),
            required("podAffinity", vec![term(ZONE, s2())]),
        )
    };
    let mut all = followers();
    all.push(pod("target", 0, s2(), json!({})));
    let out = solve(&input(all, vec![default_pool()]));
    // The target's zone is not known until its NodeClaim launches.
    assert_eq!(out.errors.len(), 10);
    claim_of(&out, "target");

    // Next round: the target runs on a node in test-zone-2.
    let mut inp = input(followers(), vec![default_pool()]);
    inp.existing = vec![existing("target-node", &[(ZONE, "test-zone-2")], 0)];
    inp.bound_pods = vec![bound(pod("target", 0, s2(), json!({})), "target-node")];
    let out = solve(&inp);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert!(out.new_claims.iter().all(|c| zone_of(c) == "test-zone-2"));
    assert_eq!(skew(&inp, &out, ZONE, &json!({})), vec![11]);
}

#[test]
fn zonal_affinity_follows_a_constrained_target_in_one_round() {
    // TOPOLOGY It("should support pod affinity with zone topology (constrained target)")
    let mut all = pods(
        "follower",
        10,
        0,
        json!({}),
        required("podAffinity", vec![term(ZONE, s2())]),
    );
    all.push(pod("target", 0, s2(), node_in(ZONE, &["test-zone-1"])));
    let inp = input(all, vec![default_pool()]);
    let out = solve(&inp);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(skew(&inp, &out, ZONE, &json!({})), vec![11]);
    assert!(out.new_claims.iter().all(|c| zone_of(c) == "test-zone-1"));
}

#[test]
fn affinity_to_a_missing_pod_does_not_schedule() {
    // TOPOLOGY It("should not schedule pods with affinity to a non-existent pod")
    let out = solve(&input(
        pods(
            "follower",
            10,
            0,
            json!({}),
            required("podAffinity", vec![term(ZONE, s2())]),
        ),
        vec![default_pool()],
    ));
    assert_eq!(out.errors.len(), 10);
    assert!(out.new_claims.is_empty());
}

#[test]
fn preferred_affinity_is_relaxed() {
    // TOPOLOGY It("should allow violation of preferred pod affinity")
    let mut all = pods(
        "spread",
        10,
        0,
        test_labels(),
        spread_test(HOSTNAME_LABEL, 1),
    );
    all.push(pod(
        "follower",
        0,
        json!({}),
        preferred("podAffinity", term(HOSTNAME_LABEL, s2())),
    ));
    let out = solve(&input(all, vec![default_pool()]));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    claim_of(&out, "follower");
}

// ---- Preferred node affinity ----

/// Spec fields: preferred node affinity, `(weight, key, operator, values)` per term.
fn node_preferences(terms: &[(i32, &str, &str, &[&str])]) -> Value {
    let list: Vec<Value> = terms
        .iter()
        .map(|(w, k, op, vs)| {
            json!({"weight": w, "preference": {"matchExpressions": [{"key": k, "operator": op, "values": vs}]}})
        })
        .collect();
    json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": list}}})
}

#[test]
fn preferred_node_affinity_is_honoured_then_relaxed_by_weight() {
    // SUITE It("should relax to use lighter weights")
    let prefs = node_preferences(&[
        (100, INSTANCE_TYPE_LABEL, "In", &["test-zone-3"]),
        (50, ZONE, "In", &["test-zone-2"]),
        (1, ZONE, "In", &["test-zone-1"]),
    ]);
    let out = solve(&input(
        vec![pod("p", 0, json!({}), prefs)],
        vec![pool_in(ZONE, &ZONES[..2])],
    ));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(zone_of(&out.new_claims[0]), "test-zone-2");

    // SUITE It("should relax all terms")
    let prefs = node_preferences(&[
        (1, ZONE, "In", &["invalid"]),
        (1, INSTANCE_TYPE_LABEL, "In", &["invalid"]),
    ]);
    let out = solve(&input(
        vec![pod("p", 0, json!({}), prefs)],
        vec![default_pool()],
    ));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.new_claims.len(), 1);

    // SUITE It("should schedule even if preference is conflicting with requirement")
    let mut spec = node_in(ZONE, &["test-zone-3"]);
    spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] =
        node_preferences(&[(1, ZONE, "NotIn", &["test-zone-3"])])["affinity"]["nodeAffinity"]
            ["preferredDuringSchedulingIgnoredDuringExecution"]
            .clone();
    let out = solve(&input(
        vec![pod("p", 0, json!({}), spec)],
        vec![default_pool()],
    ));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(zone_of(&out.new_claims[0]), "test-zone-3");
}

// ---- minValues ----

/// Two instance types, one fitting one 0.9-cpu pod and one fitting two (upstream's
/// `instance-type-1` 1 cpu / 1Gi and `instance-type-2` 4 cpu / 4Gi), with extra labels.
fn min_values_types(labels: [&[(&str, &str)]; 2]) -> Vec<Arc<InstanceType>> {
    vec![
        instance_type_in("instance-type-1", 1, 1, 0.52, &ZONES[..1], labels[0]),
        instance_type_in("instance-type-2", 4, 4, 1.0, &ZONES[..1], labels[1]),
    ]
}

fn with_min_values(mut r: Requirement, min: usize) -> Requirement {
    r.min_values = Some(min);
    r
}

#[test]
fn min_values_on_instance_types_opens_a_claim_per_pod() {
    // SELECTION It("should schedule respecting the minValues from instance-type requirements")
    let mut p = pool("default", min_values_types([&[], &[]]));
    p.requirements.add(with_min_values(
        Requirement::is_in(INSTANCE_TYPE_LABEL, ["instance-type-1", "instance-type-2"]),
        2,
    ));
    let out = solve(&input(pods("p", 2, 900, json!({}), json!({})), vec![p]));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    // Both pods would fit instance-type-2 together, but then only one type would remain.
    assert_ne!(claim_of(&out, "p-00"), claim_of(&out, "p-01"));
    for c in &out.new_claims {
        assert!(c.instance_types.len() >= 2, "{:?}", c.instance_types);
        assert_eq!(
            c.requirements
                .get(INSTANCE_TYPE_LABEL)
                .and_then(|r| r.min_values),
            Some(2)
        );
    }
}

#[test]
fn min_values_on_the_instance_family_keeps_two_families() {
    // SELECTION It("should schedule and respect multiple requirement keys with minValues"), with
    // karpenter.k8s.aws/instance-family in place of upstream's architecture key.
    let mut p = pool(
        "default",
        min_values_types([&[(FAMILY, "c5")], &[(FAMILY, "m5")]]),
    );
    p.requirements
        .add(with_min_values(Requirement::exists(FAMILY), 2));
    p.requirements.add(with_min_values(
        Requirement::is_in(INSTANCE_TYPE_LABEL, ["instance-type-1", "instance-type-2"]),
        1,
    ));
    let out = solve(&input(pods("p", 2, 900, json!({}), json!({})), vec![p]));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_ne!(claim_of(&out, "p-00"), claim_of(&out, "p-01"));
    for c in &out.new_claims {
        let families: std::collections::BTreeSet<&str> = c
            .instance_types
            .iter()
            .filter_map(|it| it.labels.get(FAMILY).map(String::as_str))
            .collect();
        assert_eq!(families.len(), 2, "{:?}", c.instance_types);
    }
}

#[test]
fn unmet_min_values_leaves_the_pod_pending() {
    // SELECTION It("schedule should fail if minimum number of InstanceTypes is not met as per the minValues in the requirement")
    let mut p = default_pool();
    p.requirements
        .add(with_min_values(Requirement::exists(INSTANCE_TYPE_LABEL), 4));
    let out = solve(&input(vec![pod("p", 0, json!({}), json!({}))], vec![p]));
    assert_eq!(failed(&out), vec!["p"]);
    assert!(out.new_claims.is_empty());
}

// ---- Host ports ----

#[test]
fn same_host_port_needs_two_claims() {
    // SUITE It("should schedule pods with the same host port to different nodes")
    let port = json!({"containers": [{"name": "c", "ports": [{"containerPort": 8080, "hostPort": 8080}]}]});
    let out = solve(&input(
        pods("p", 2, 0, json!({}), port),
        vec![default_pool()],
    ));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_ne!(claim_of(&out, "p-00"), claim_of(&out, "p-01"));
}
