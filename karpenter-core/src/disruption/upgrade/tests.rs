//! Tests of the upgrade planner: queue order, NodeClaims skipped by do-not-disrupt and blocking
//! PDBs, steps in progress and their phases, pause and step allowance, `Drifted` budgets and the
//! drain timeout.

use serde_json::json;
use testutil::{NodeClaimBuilder, PodBuilder, nodeclaim, nodepool, pod};

use super::*;
use crate::disruption::budgets::budget_active;

/// A NodeClaim of `default` on node `n-<name>`, created at minute `created`, without conditions.
fn fresh(name: &str, created: u32) -> NodeClaimBuilder {
    nodeclaim(name)
        .nodepool("default")
        .created(format!("2026-01-01T00:{created:02}:00Z"))
        .node_name(format!("n-{name}"))
}

/// [`fresh`], launched, registered and initialized, and `Drifted` when `drifted`.
fn claim(name: &str, created: u32, drifted: bool) -> NodeClaimBuilder {
    let c = fresh(name, created)
        .condition("Launched", "True")
        .condition("Registered", "True")
        .condition("Initialized", "True");
    if drifted {
        c.condition("Drifted", "True")
    } else {
        c
    }
}

/// A running pod of app `name` in namespace `shop` on `node`.
fn running(name: &str, node: &str) -> PodBuilder {
    pod(name)
        .namespace("shop")
        .label("app", name)
        .on_node(node)
        .phase("Running")
}

/// The PodDisruptionBudget `app` in `shop` over pods of app `app`, allowing `allowed` evictions.
fn pdb(app: &str, allowed: i32) -> Arc<PodDisruptionBudget> {
    testutil::pdb(app)
        .namespace("shop")
        .disruptions_allowed(allowed)
        .arc()
}

fn run(
    pool: &NodePool,
    claims: &[Arc<NodeClaim>],
    pods: &[Arc<PodView>],
    pdbs: &[Arc<PodDisruptionBudget>],
) -> Plan {
    plan(&View {
        pool,
        claims,
        pods,
        pdbs,
        now: "2026-01-01T01:00:00Z".parse().expect("time"),
        budget_active: &|_| true,
    })
}

fn names(queue: &[Candidate]) -> Vec<&str> {
    queue.iter().map(|c| c.nodeclaim.as_str()).collect()
}

#[test]
fn empty_nodes_first_then_fewest_pods_then_oldest() {
    let claims = vec![
        claim("busy", 1, true).arc(),
        claim("light-new", 5, true).arc(),
        claim("light-old", 2, true).arc(),
        claim("empty", 9, true).arc(),
        claim("fine", 0, false).arc(),
    ];
    let pods = vec![
        running("a", "n-busy").arc(),
        running("b", "n-busy").arc(),
        running("c", "n-light-new").arc(),
        running("d", "n-light-old").arc(),
        running("ds", "n-empty")
            .owner("apps/v1", "DaemonSet", "ds", "u")
            .arc(),
    ];
    let p = run(&nodepool("default").build(), &claims, &pods, &[]);
    assert_eq!(names(&p.queue), ["empty", "light-old", "light-new", "busy"]);
    assert_eq!(p.queue[0].pods, 0, "DaemonSet pods do not count");
    assert_eq!(
        (p.max_in_progress, p.can_start),
        (1, 1),
        "one at a time by default"
    );
}

#[test]
fn do_not_disrupt_and_blocking_pdbs_are_skipped_with_why() {
    let claims = vec![
        claim("pinned", 1, true).arc(),
        claim("guarded", 2, true).arc(),
        claim("ok", 3, true).arc(),
    ];
    let pods = vec![
        running("db", "n-pinned").do_not_disrupt().arc(),
        running("cart", "n-guarded").arc(),
        running("web", "n-ok").arc(),
    ];
    let p = run(
        &nodepool("default").build(),
        &claims,
        &pods,
        &[pdb("cart", 0), pdb("web", 1)],
    );
    assert_eq!(names(&p.queue), ["ok"]);
    let why: Vec<(&str, &str)> = p
        .skipped
        .iter()
        .map(|s| (s.nodeclaim.as_str(), s.why.as_str()))
        .collect();
    assert_eq!(
        why,
        [
            ("pinned", "pod shop/db has karpenter.sh/do-not-disrupt"),
            (
                "guarded",
                "PodDisruptionBudget shop/cart allows no disruption (pod shop/cart)"
            ),
        ]
    );
}

#[test]
fn a_step_in_progress_holds_the_next_and_reports_its_phase() {
    let claims = vec![
        claim("old", 1, true)
            .annotation("upgrades.karpenter.sh/replacement", "default-new")
            .annotation("upgrades.karpenter.sh/step-started", "2026-01-01T00:59:00Z")
            .arc(),
        fresh("default-new", 59).condition("Launched", "True").arc(),
        claim("next", 2, true).arc(),
    ];
    let p = run(&nodepool("default").build(), &claims, &[], &[]);
    assert_eq!(p.in_progress.len(), 1);
    assert_eq!(p.in_progress[0].phase, Phase::LaunchingReplacement);
    assert_eq!(p.in_progress[0].replacement.as_deref(), Some("default-new"));
    assert_eq!(names(&p.queue), ["next"]);
    assert_eq!(p.can_start, 0, "never two steps at once by default");

    let registered = vec![
        claims[0].clone(),
        fresh("default-new", 59)
            .condition("Launched", "True")
            .condition("Registered", "True")
            .arc(),
    ];
    let pods = [
        running("web", "n-old").arc(),
        running("agent", "n-old")
            .owner("apps/v1", "DaemonSet", "agent", "u1")
            .arc(),
    ];
    let p = run(&nodepool("default").build(), &registered, &pods, &[]);
    assert_eq!(p.in_progress[0].phase, Phase::WaitingForInitialization);
    // The pods its drain moves, as for a queued NodeClaim: the DaemonSet's stays.
    assert_eq!(p.in_progress[0].pods, 1);
}

#[test]
fn pause_and_step_allowance() {
    let claims = vec![claim("a", 1, true).arc(), claim("b", 2, true).arc()];
    let paused = nodepool("default")
        .annotation("upgrades.karpenter.sh/paused", "true")
        .build();
    assert_eq!(run(&paused, &claims, &[], &[]).can_start, 0);
    let stepped = nodepool("default")
        .annotation("upgrades.karpenter.sh/paused", "true")
        .annotation("upgrades.karpenter.sh/step-allowance", "1")
        .build();
    let p = run(&stepped, &claims, &[], &[]);
    assert!(p.paused);
    assert_eq!((p.step_allowance, p.can_start), (1, 1));
}

#[test]
fn drifted_budgets_widen_or_stop_the_rollout() {
    let claims: Vec<_> = (0..4)
        .map(|i| claim(&format!("c{i}"), i, true).arc())
        .collect();
    let two = nodepool("default")
        .budget(json!({"nodes": "2", "reasons": ["Drifted"]}))
        .build();
    assert_eq!(run(&two, &claims, &[], &[]).can_start, 2);
    let none = nodepool("default").budget(json!({"nodes": "0"})).build();
    assert_eq!(run(&none, &claims, &[], &[]).can_start, 0);
    // A budget naming Drifted outside its schedule window widens nothing: one at a time.
    let windowed = nodepool("default")
        .budget(json!({"nodes": "0", "reasons": ["Drifted"], "schedule": "0 9 * * *", "duration": "8h"}))
        .build();
    let evening: Timestamp = "2026-01-01T20:00:00Z".parse().expect("time");
    let p = plan(&View {
        pool: &windowed,
        claims: &claims,
        pods: &[],
        pdbs: &[],
        now: evening,
        budget_active: &|b| budget_active(b, evening),
    });
    assert_eq!((p.max_in_progress, p.can_start), (1, 1));
    // A deleting node counts against the budget.
    let mut busy = claims.clone();
    busy.push(
        claim("leaving", 9, false)
            .deleting("2026-01-01T00:30:00Z")
            .finalizer("karpenter.sh/termination")
            .arc(),
    );
    assert_eq!(run(&two, &busy, &[], &[]).can_start, 1);
}

#[test]
fn drain_timeout_is_the_pods_grace_or_the_pools() {
    let claims = vec![claim("a", 1, true).arc()];
    let pods = vec![
        running("x", "n-a").arc(),
        running("y", "n-a").grace_period(10).arc(),
    ];
    let p = run(&nodepool("default").build(), &claims, &pods, &[]);
    assert_eq!(p.queue[0].drain_timeout, Duration::from_secs(40));
    // The NodeClaim's own terminationGracePeriod (what its finalizer applies) wins.
    let with_grace = vec![claim("a", 1, true).termination_grace_period("5m").arc()];
    let p = run(&nodepool("default").build(), &with_grace, &pods, &[]);
    assert_eq!(p.queue[0].drain_timeout, Duration::from_secs(300));
    let huge = vec![
        running("x", "n-a").grace_period(i64::MAX).arc(),
        running("y", "n-a").grace_period(i64::MAX).arc(),
        running("z", "n-a").grace_period(i64::MAX).arc(),
    ];
    let p = run(&nodepool("default").build(), &claims, &huge, &[]);
    assert_eq!(
        p.queue[0].drain_timeout,
        Duration::from_secs(u64::MAX),
        "saturates"
    );
}

#[test]
fn scheduled_budgets_are_active_for_their_duration_after_each_hit() {
    let budget = |schedule: &str, duration: &str| -> Budget {
        serde_json::from_value(json!({"nodes": "0", "schedule": schedule, "duration": duration}))
            .expect("valid budget")
    };
    let at = |t: &str| -> Timestamp { t.parse().expect("time") };
    let nine_to_five = budget("0 9 * * *", "8h");
    assert!(budget_active(&nine_to_five, at("2026-01-01T09:00:00Z")));
    assert!(budget_active(&nine_to_five, at("2026-01-01T16:59:00Z")));
    assert!(!budget_active(&nine_to_five, at("2026-01-01T17:01:00Z")));
    assert!(!budget_active(&nine_to_five, at("2026-01-01T08:59:00Z")));
    assert!(budget_active(
        &budget("@daily", "1h"),
        at("2026-01-02T00:30:00Z")
    ));
    assert!(!budget_active(
        &budget("@daily", "1h"),
        at("2026-01-02T01:30:00Z")
    ));
    assert!(
        budget_active(&Budget::default(), at("2026-01-02T01:30:00Z")),
        "unscheduled"
    );
    // During the window a `nodes: 0` budget stops the rollout; outside it, it does not.
    let claims = vec![claim("a", 1, true).arc()];
    let p = nodepool("default")
        .budget(json!({"nodes": "0", "schedule": "0 9 * * *", "duration": "8h"}))
        .build();
    for (time, can) in [("2026-01-01T10:00:00Z", 0), ("2026-01-01T20:00:00Z", 1)] {
        let now = at(time);
        let plan = plan(&View {
            pool: &p,
            claims: &claims,
            pods: &[],
            pdbs: &[],
            now,
            budget_active: &|b| budget_active(b, now),
        });
        assert_eq!(plan.can_start, can, "{time}");
    }
}

#[test]
fn consolidation_commands_share_the_in_progress_set_and_the_budget() {
    // `a` is a candidate of a consolidation command (drifted too), `r` the replacement it
    // launches; `b` waits for its upgrade step.
    let claims = vec![
        claim("a", 1, true)
            .annotation("disruption.karpenter.sh/command", "underutilized-x7k2p")
            .annotation("disruption.karpenter.sh/replacement", "default-r")
            .arc(),
        fresh("default-r", 59)
            .condition("Launched", "True")
            .condition("Drifted", "True")
            .annotation("disruption.karpenter.sh/command", "underutilized-x7k2p")
            .annotation("disruption.karpenter.sh/replaces", "a")
            .arc(),
        claim("b", 2, true).arc(),
    ];
    let one = nodepool("default").budget(json!({"nodes": "1"})).build();
    let p = run(&one, &claims, &[], &[]);
    assert_eq!(
        names(&p.queue),
        ["b"],
        "neither the candidate nor its replacement"
    );
    assert_eq!(p.skipped.len(), 1);
    assert_eq!(p.skipped[0].nodeclaim, "a");
    assert!(
        p.skipped[0]
            .why
            .contains("consolidation command underutilized-x7k2p"),
        "{}",
        p.skipped[0].why
    );
    assert_eq!(
        p.can_start, 0,
        "the command takes the pool's one disruption"
    );
    let two = nodepool("default")
        .budget(json!({"nodes": "2", "reasons": ["Drifted"]}))
        .build();
    assert_eq!(run(&two, &claims, &[], &[]).can_start, 1);
}
