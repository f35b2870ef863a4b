use serde_json::{Value, json};

use super::*;
use crate::disruption::budgets::budget_active;

fn pool(extra: Value) -> NodePool {
    let mut v = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default", "annotations": {}},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [],
        }}},
    });
    merge(&mut v, extra);
    serde_json::from_value(v).expect("valid NodePool")
}

fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn condition(t: &str) -> Value {
    json!({"type": t, "status": "True", "reason": t, "message": "",
           "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

/// A NodeClaim on node `n-<name>`, created at minute `created`, drifted unless told.
fn claim(name: &str, created: u32, drifted: bool, extra: Value) -> Arc<NodeClaim> {
    let mut conds = vec![
        condition("Launched"),
        condition("Registered"),
        condition("Initialized"),
    ];
    if drifted {
        conds.push(condition("Drifted"));
    }
    let mut v = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"},
                     "creationTimestamp": format!("2026-01-01T00:{created:02}:00Z")},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": []},
        "status": {"nodeName": format!("n-{name}"), "conditions": conds},
    });
    merge(&mut v, extra);
    Arc::new(serde_json::from_value(v).expect("valid NodeClaim"))
}

fn pod(name: &str, node: &str, extra: Value) -> Arc<Pod> {
    let mut v = json!({
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": name}},
        "spec": {"nodeName": node, "containers": []},
        "status": {"phase": "Running"},
    });
    merge(&mut v, extra);
    Arc::new(serde_json::from_value(v).expect("valid Pod"))
}

fn pdb(app: &str, allowed: i32) -> Arc<PodDisruptionBudget> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": app, "namespace": "shop"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1,
                       "expectedPods": 1},
        }))
        .expect("valid PDB"),
    )
}

fn run(
    pool: &NodePool,
    claims: &[Arc<NodeClaim>],
    pods: &[Arc<Pod>],
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
        claim("busy", 1, true, json!({})),
        claim("light-new", 5, true, json!({})),
        claim("light-old", 2, true, json!({})),
        claim("empty", 9, true, json!({})),
        claim("fine", 0, false, json!({})),
    ];
    let pods = vec![
        pod("a", "n-busy", json!({})),
        pod("b", "n-busy", json!({})),
        pod("c", "n-light-new", json!({})),
        pod("d", "n-light-old", json!({})),
        pod(
            "ds",
            "n-empty",
            json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u", "controller": true}]}}),
        ),
    ];
    let p = run(&pool(json!({})), &claims, &pods, &[]);
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
        claim("pinned", 1, true, json!({})),
        claim("guarded", 2, true, json!({})),
        claim("ok", 3, true, json!({})),
    ];
    let pods = vec![
        pod(
            "db",
            "n-pinned",
            json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}),
        ),
        pod("cart", "n-guarded", json!({})),
        pod("web", "n-ok", json!({})),
    ];
    let p = run(
        &pool(json!({})),
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
        claim(
            "old",
            1,
            true,
            json!({"metadata": {"annotations": {
            "upgrades.karpenter.sh/replacement": "default-new",
            "upgrades.karpenter.sh/step-started": "2026-01-01T00:59:00Z"}}}),
        ),
        claim(
            "default-new",
            59,
            false,
            json!({"status": {"conditions": [condition("Launched")]}}),
        ),
        claim("next", 2, true, json!({})),
    ];
    let p = run(&pool(json!({})), &claims, &[], &[]);
    assert_eq!(p.in_progress.len(), 1);
    assert_eq!(p.in_progress[0].phase, Phase::LaunchingReplacement);
    assert_eq!(p.in_progress[0].replacement.as_deref(), Some("default-new"));
    assert_eq!(names(&p.queue), ["next"]);
    assert_eq!(p.can_start, 0, "never two steps at once by default");

    let registered = vec![
        claims[0].clone(),
        claim(
            "default-new",
            59,
            false,
            json!({"status": {"conditions": [condition("Launched"), condition("Registered")]}}),
        ),
    ];
    let p = run(&pool(json!({})), &registered, &[], &[]);
    assert_eq!(p.in_progress[0].phase, Phase::WaitingForInitialization);
}

#[test]
fn pause_and_step_allowance() {
    let claims = vec![
        claim("a", 1, true, json!({})),
        claim("b", 2, true, json!({})),
    ];
    let paused =
        pool(json!({"metadata": {"annotations": {"upgrades.karpenter.sh/paused": "true"}}}));
    assert_eq!(run(&paused, &claims, &[], &[]).can_start, 0);
    let stepped = pool(json!({"metadata": {"annotations": {
        "upgrades.karpenter.sh/paused": "true", "upgrades.karpenter.sh/step-allowance": "1"}}}));
    let p = run(&stepped, &claims, &[], &[]);
    assert!(p.paused);
    assert_eq!((p.step_allowance, p.can_start), (1, 1));
}

#[test]
fn drifted_budgets_widen_or_stop_the_rollout() {
    let claims: Vec<_> = (0..4)
        .map(|i| claim(&format!("c{i}"), i, true, json!({})))
        .collect();
    let two = pool(
        json!({"spec": {"disruption": {"budgets": [{"nodes": "2", "reasons": ["Drifted"]}]}}}),
    );
    assert_eq!(run(&two, &claims, &[], &[]).can_start, 2);
    let none = pool(json!({"spec": {"disruption": {"budgets": [{"nodes": "0"}]}}}));
    assert_eq!(run(&none, &claims, &[], &[]).can_start, 0);
    // A budget naming Drifted outside its schedule window widens nothing: one at a time.
    let windowed = pool(json!({"spec": {"disruption": {"budgets": [
        {"nodes": "0", "reasons": ["Drifted"], "schedule": "0 9 * * *", "duration": "8h"}]}}}));
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
    busy.push(claim("leaving", 9, false, json!({"metadata": {"deletionTimestamp": "2026-01-01T00:30:00Z", "finalizers": ["karpenter.sh/termination"]}})));
    assert_eq!(run(&two, &busy, &[], &[]).can_start, 1);
}

#[test]
fn drain_timeout_is_the_pods_grace_or_the_pools() {
    let claims = vec![claim("a", 1, true, json!({}))];
    let pods = vec![
        pod("x", "n-a", json!({})),
        pod(
            "y",
            "n-a",
            json!({"spec": {"terminationGracePeriodSeconds": 10}}),
        ),
    ];
    let p = run(&pool(json!({})), &claims, &pods, &[]);
    assert_eq!(p.queue[0].drain_timeout, Duration::from_secs(40));
    // The NodeClaim's own terminationGracePeriod (what its finalizer applies) wins.
    let with_grace = vec![claim(
        "a",
        1,
        true,
        json!({"spec": {"terminationGracePeriod": "5m"}}),
    )];
    let p = run(&pool(json!({})), &with_grace, &pods, &[]);
    assert_eq!(p.queue[0].drain_timeout, Duration::from_secs(300));
    let huge = vec![
        pod(
            "x",
            "n-a",
            json!({"spec": {"terminationGracePeriodSeconds": i64::MAX}}),
        ),
        pod(
            "y",
            "n-a",
            json!({"spec": {"terminationGracePeriodSeconds": i64::MAX}}),
        ),
        pod(
            "z",
            "n-a",
            json!({"spec": {"terminationGracePeriodSeconds": i64::MAX}}),
        ),
    ];
    let p = run(&pool(json!({})), &claims, &huge, &[]);
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
    let claims = vec![claim("a", 1, true, json!({}))];
    let p = pool(json!({"spec": {"disruption": {"budgets": [
        {"nodes": "0", "schedule": "0 9 * * *", "duration": "8h"}]}}}));
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
