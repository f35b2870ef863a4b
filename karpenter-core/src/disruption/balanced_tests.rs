//! Tests of Balanced scoring (upstream `balanced.go`, `balanced_test.go`): the score, its
//! threshold, and the cases upstream scores 0.

use super::*;

fn totals(cost: f64, disruption_cost: f64) -> PoolTotals {
    PoolTotals {
        cost,
        disruption_cost,
    }
}

#[test]
fn a_move_is_approved_when_its_savings_share_is_at_least_half_its_disruption_share() {
    let pool = totals(4.0, 20.0);
    // Saves 10% of the pool's cost and disrupts 40% of it: 0.25 < 0.5.
    let low = score_move(0.4, 8.0, Some(&pool));
    assert!((low.value() - 0.25).abs() < 1e-12);
    assert!(!low.approved());
    assert_eq!(low.threshold(), 0.5);
    // Saves 30% and disrupts 40%: 0.75 >= 0.5.
    let high = score_move(1.2, 8.0, Some(&pool));
    assert!((high.value() - 0.75).abs() < 1e-12);
    assert!(high.approved());
    // Exactly the threshold is approved.
    assert!(score_move(0.4, 4.0, Some(&pool)).approved());
    assert_eq!(
        low.to_string(),
        "score 0.25 < threshold 0.50 (k 2, savings 10.0%, disruption 40.0%)"
    );
}

#[test]
fn nothing_saved_or_no_totals_scores_zero_and_deleting_a_single_node_pool_scores_one() {
    let pool = totals(1.0, 5.0);
    assert_eq!(score_move(0.0, 2.0, Some(&pool)).value(), 0.0);
    assert_eq!(score_move(-0.1, 2.0, Some(&pool)).value(), 0.0);
    assert_eq!(score_move(f64::NAN, 2.0, Some(&pool)).value(), 0.0);
    assert!(
        !score_move(0.5, 2.0, None).approved(),
        "no totals: not proven"
    );
    assert!(!score_move(0.5, 2.0, Some(&totals(0.0, 5.0))).approved());
    assert!(!score_move(0.5, 2.0, Some(&totals(1.0, 0.0))).approved());
    // A pool of one node: deleting it saves all its cost and disrupts all of it.
    let one = score_move(1.0, 5.0, Some(&pool));
    assert_eq!(one.value(), 1.0);
    assert!(one.approved());
    // Nothing disrupted (cannot happen with the per-node cost, but is defined): infinite.
    assert_eq!(score_move(0.1, 0.0, Some(&pool)).value(), f64::INFINITY);
}

#[test]
fn a_nodes_disruption_cost_is_one_plus_its_pods_positive_eviction_costs() {
    use testutil::pod;
    let plain = pod("a").arc();
    let low = pod("b")
        .merge(serde_json::json!({"spec": {"priority": -1_000_000_000}}))
        .arc();
    let costly = pod("c")
        .annotation("controller.kubernetes.io/pod-deletion-cost", "134217728")
        .arc();
    // 1 (node) + 1 (plain) + 0 (negative, floored) + 2 (1 + 2^27 / 2^27).
    assert_eq!(reschedule_cost([&plain, &low, &costly]), 4.0);
    assert_eq!(reschedule_cost([]), PER_NODE_DISRUPTION_COST);
}
