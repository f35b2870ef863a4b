//! Table tests of node repair: which policy a node matches, when its toleration runs out, the
//! 20% rule per NodePool and for the cluster (upstream `node/health/suite_test.go`'s cases), and
//! the termination timestamp.

use super::*;
use testutil::{condition, node, nodeclaim, nodepool};

/// When every decision is made: an hour after `T0`.
fn now() -> Timestamp {
    "2026-01-01T01:00:00Z".parse().expect("timestamp")
}

/// `now` minus `minutes`.
fn ago(minutes: i64) -> Timestamp {
    now() - SignedDuration::from_mins(minutes)
}

/// A cluster being built: nodes with their NodeClaims, and NodePools.
#[derive(Default)]
struct World {
    nodes: Vec<Arc<Node>>,
    claims: Vec<Arc<NodeClaim>>,
    pools: Vec<Arc<NodePool>>,
}

/// A failure: condition type, status, and how many minutes ago it began.
type Failure<'a> = (&'a str, &'a str, i64);

impl World {
    /// A Karpenter node `name` of `pool` (the label on the node and its NodeClaim) reporting
    /// `Ready=True` and each of `failures`.
    fn karpenter(mut self, name: &str, pool: Option<&str>, failures: &[Failure<'_>]) -> World {
        let pid = format!("aws:///us-east-1a/i-{name}");
        let mut claim = nodeclaim(format!("{name}-claim")).provider_id(&pid);
        if let Some(pool) = pool {
            claim = claim.nodepool(pool);
        }
        self.claims.push(claim.arc());
        self.nodes.push(self.node(name, pool, &pid, failures));
        self
    }

    /// A node `name` no NodeClaim owns.
    fn foreign(mut self, name: &str, failures: &[Failure<'_>]) -> World {
        let pid = format!("aws:///us-east-1a/i-{name}");
        self.nodes.push(self.node(name, None, &pid, failures));
        self
    }

    fn node(
        &self,
        name: &str,
        pool: Option<&str>,
        pid: &str,
        failures: &[Failure<'_>],
    ) -> Arc<Node> {
        let mut n = node(name).provider_id(pid);
        if let Some(pool) = pool {
            n = n.label(crds::labels::NODEPOOL_LABEL, pool);
        }
        if !failures.iter().any(|(t, _, _)| *t == "Ready") {
            n = n.with_condition(condition("Ready", "True").at(ago(600)));
        }
        for (type_, status, minutes) in failures {
            n = n.with_condition(condition(*type_, *status).at(ago(*minutes)));
        }
        n.arc()
    }

    /// `n` healthy nodes of `pool`, named `<pool>-h<i>`.
    fn healthy(self, pool: &str, n: usize) -> World {
        (0..n).fold(self, |w, i| {
            w.karpenter(&format!("{pool}-h{i}"), Some(pool), &[])
        })
    }

    fn pool(mut self, name: &str) -> World {
        self.pools.push(nodepool(name).arc());
        self
    }

    /// Change the NodeClaim of node `name`.
    fn claim_of(mut self, name: &str, change: impl FnOnce(&mut NodeClaim)) -> World {
        let wanted = format!("{name}-claim");
        let claim = self
            .claims
            .iter_mut()
            .find(|c| c.metadata.name.as_deref() == Some(wanted.as_str()))
            .expect("a NodeClaim of the node");
        change(Arc::make_mut(claim));
        self
    }

    fn decide_with(&self, policies: &[RepairPolicy]) -> Decision {
        decide(&Input {
            nodes: &self.nodes,
            nodeclaims: &self.claims,
            nodepools: &self.pools,
            policies,
            now: now(),
        })
    }

    fn decide(&self) -> Decision {
        self.decide_with(&aws_policies())
    }
}

fn repaired(d: &Decision) -> Vec<String> {
    d.repairs
        .iter()
        .map(|r| r.node.metadata.name.clone().unwrap_or_default())
        .collect()
}

fn held(b: &Blocked) -> Vec<String> {
    b.held
        .iter()
        .map(|(n, _, _)| n.metadata.name.clone().unwrap_or_default())
        .collect()
}

#[test]
fn the_aws_policies_are_upstreams() {
    let got: Vec<(String, u64)> = aws_policies()
        .iter()
        .map(|p| (p.condition(), p.toleration.as_secs() / 60))
        .collect();
    let want = [
        ("Ready=False", 30),
        ("Ready=Unknown", 30),
        ("AcceleratedHardwareReady=False", 10),
        ("StorageReady=False", 30),
        ("NetworkingReady=False", 30),
        ("KernelReady=False", 30),
        ("ContainerRuntimeReady=False", 30),
    ];
    assert_eq!(
        got,
        want.map(|(c, m)| (c.to_owned(), m)).to_vec(),
        "policies"
    );
}

/// A table row: the case's name, the node's failed conditions, and the expected match (the
/// policy's condition and how many minutes ago it began to hold), if any.
type MatchCase<'a> = (&'a str, &'a [Failure<'a>], Option<(&'a str, i64)>);

#[test]
fn a_node_matches_the_policy_due_first() {
    let policies = aws_policies();
    let cases: &[MatchCase<'_>] = &[
        ("healthy", &[], None),
        (
            "Ready=False",
            &[("Ready", "False", 5)],
            Some(("Ready=False", 5)),
        ),
        (
            "Ready=Unknown",
            &[("Ready", "Unknown", 5)],
            Some(("Ready=Unknown", 5)),
        ),
        (
            "a status no policy names",
            &[("StorageReady", "Unknown", 5)],
            None,
        ),
        (
            "a condition no policy names",
            &[("BadNode", "False", 50)],
            None,
        ),
        (
            "AcceleratedHardwareReady runs out 20 minutes sooner",
            &[
                ("Ready", "False", 5),
                ("AcceleratedHardwareReady", "False", 5),
            ],
            Some(("AcceleratedHardwareReady=False", 5)),
        ),
        (
            "Ready began long enough before to run out first",
            &[
                ("Ready", "False", 25),
                ("AcceleratedHardwareReady", "False", 1),
            ],
            Some(("Ready=False", 25)),
        ),
    ];
    for (what, failures, want) in cases {
        let w = World::default().karpenter("n", Some("default"), failures);
        let got = unhealthy(&w.nodes[0], &policies);
        assert_eq!(
            got.as_ref().map(|u| (u.policy.condition(), u.since)),
            want.map(|(c, m)| (c.to_owned(), Some(ago(m)))),
            "{what}"
        );
    }
    let bare = node("bare").arc();
    assert_eq!(unhealthy(&bare, &policies), None, "no conditions at all");
}

#[test]
fn a_node_is_repaired_once_its_toleration_runs_out() {
    // Ready=False since 29 minutes: not yet; looked at again when the 30 run out.
    let w = World::default()
        .pool("default")
        .healthy("default", 4)
        .karpenter("sick", Some("default"), &[("Ready", "False", 29)]);
    let d = w.decide();
    assert!(d.repairs.is_empty() && d.blocked.is_empty(), "{d:#?}");
    assert_eq!(d.recheck_at, Some(ago(29) + SignedDuration::from_mins(30)));

    // 31 minutes: repaired, with the condition, how long it held and the timestamp to write.
    let w = World::default()
        .pool("default")
        .healthy("default", 4)
        .karpenter("sick", Some("default"), &[("Ready", "False", 31)]);
    let d = w.decide();
    assert_eq!(repaired(&d), ["sick"]);
    let r = &d.repairs[0];
    assert_eq!(r.nodeclaim.metadata.name.as_deref(), Some("sick-claim"));
    assert_eq!(r.unhealthy.policy, RepairPolicy::new("Ready", "False", 30));
    assert_eq!(r.held_for, Duration::from_secs(31 * 60));
    assert_eq!(r.termination_timestamp, Some(now()));
    assert!(r.delete);
    assert_eq!(d.recheck_at, None);

    // Exactly at the toleration: due (upstream waits only while now is before it).
    let w = World::default().healthy("default", 4).karpenter(
        "sick",
        Some("default"),
        &[("Ready", "Unknown", 30)],
    );
    assert_eq!(repaired(&w.decide()), ["sick"]);

    // AcceleratedHardwareReady tolerates 10 minutes only.
    let w = World::default().healthy("gpu", 4).karpenter(
        "sick",
        Some("gpu"),
        &[("AcceleratedHardwareReady", "False", 11)],
    );
    assert_eq!(repaired(&w.decide()), ["sick"]);

    // No policies (a provider without any): nothing, ever.
    assert_eq!(w.decide_with(&[]), Decision::default());
}

#[test]
fn the_twenty_percent_rule_per_nodepool_rounds_up() {
    assert_eq!(
        (0..=11).map(allowed_unhealthy).collect::<Vec<_>>(),
        [0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3]
    );
    let due = [("Ready", "False", 45)];
    // (nodes in the pool, unhealthy among them, repaired?)
    let cases = [
        (3, 1, true), // 33%, but one of three rounds up to allowed
        (5, 1, true),
        (5, 2, false),
        (5, 3, false),
        (10, 2, true),
        (10, 3, false),
        (1, 1, true),
    ];
    for (total, sick, repairs) in cases {
        let mut w = World::default()
            .pool("fleet")
            .healthy("fleet", total - sick);
        for i in 0..sick {
            w = w.karpenter(&format!("fleet-s{i}"), Some("fleet"), &due);
        }
        let d = w.decide();
        let what = format!("{sick} of {total}");
        if repairs {
            assert_eq!(d.repairs.len(), sick, "{what}: {d:#?}");
            assert!(d.blocked.is_empty(), "{what}");
        } else {
            assert!(d.repairs.is_empty(), "{what}: {d:#?}");
            let [b] = d.blocked.as_slice() else {
                panic!("{what}: one blocked NodePool: {d:#?}")
            };
            assert_eq!(b.scope, Scope::NodePool("fleet".into()));
            assert_eq!(
                (b.unhealthy, b.total, b.allowed),
                (sick, total, allowed_unhealthy(total)),
                "{what}"
            );
            assert_eq!(b.held.len(), sick, "{what}");
            assert!(b.nodepool.is_some());
            assert_eq!(
                d.recheck_at,
                Some(now() + SignedDuration::from_mins(5)),
                "{what}"
            );
        }
    }
}

#[test]
fn nodes_not_yet_due_count_toward_the_rule_and_other_pools_do_not() {
    // One due, one only just failed: 2 of 5 unhealthy, more than 1.
    let w = World::default()
        .pool("fleet")
        .healthy("fleet", 3)
        .karpenter("fleet-due", Some("fleet"), &[("Ready", "False", 40)])
        .karpenter("fleet-new", Some("fleet"), &[("Ready", "Unknown", 1)]);
    let d = w.decide();
    assert!(d.repairs.is_empty());
    assert_eq!(held(&d.blocked[0]), ["fleet-due"]);
    assert_eq!(d.blocked[0].unhealthy, 2);
    // The new one's toleration runs out later than the recheck of the blocked pool.
    assert_eq!(d.recheck_at, Some(now() + SignedDuration::from_mins(5)));

    // Another NodePool's sick nodes do not count: `fleet` has 1 of 5.
    let w = World::default()
        .pool("fleet")
        .pool("other")
        .healthy("fleet", 4)
        .karpenter("fleet-due", Some("fleet"), &[("Ready", "False", 40)])
        .karpenter("other-1", Some("other"), &[("Ready", "False", 40)])
        .karpenter("other-2", Some("other"), &[("Ready", "False", 40)]);
    let d = w.decide();
    assert_eq!(repaired(&d), ["fleet-due"]);
    assert_eq!(d.blocked.len(), 1);
    assert_eq!(d.blocked[0].scope, Scope::NodePool("other".into()));
    assert_eq!(held(&d.blocked[0]), ["other-1", "other-2"]);
    assert_eq!(
        d.blocked[0].message(),
        "2 of 2 nodes of NodePool other are unhealthy, more than 20% (at most 1 may be); \
         unhealthy nodes are not replaced until fewer are"
    );
}

#[test]
fn a_blocked_nodepool_that_is_gone_has_no_object() {
    let w = World::default().healthy("gone", 3).karpenter(
        "gone-1",
        Some("gone"),
        &[("Ready", "False", 40)],
    );
    let w = w.karpenter("gone-2", Some("gone"), &[("Ready", "False", 40)]);
    let d = w.decide();
    assert_eq!(d.blocked.len(), 1);
    assert_eq!(d.blocked[0].nodepool, None);
}

#[test]
fn a_nodeclaim_without_a_nodepool_counts_the_whole_cluster() {
    // 3 of 10 nodes in the cluster (a foreign one among them), more than 2.
    let due = [("Ready", "False", 40)];
    let w = World::default()
        .healthy("a", 4)
        .healthy("b", 3)
        .karpenter("lone", None, &due)
        .karpenter("b-sick", Some("b"), &due)
        .foreign("foreign", &due);
    let d = w.decide();
    // `b` has 1 of 4: its node is repaired; the NodeClaim without a NodePool is held back.
    assert_eq!(repaired(&d), ["b-sick"]);
    let [b] = d.blocked.as_slice() else {
        panic!("{d:#?}")
    };
    assert_eq!(b.scope, Scope::Cluster);
    assert_eq!((b.unhealthy, b.total, b.allowed), (3, 10, 2));
    assert_eq!(held(b), ["lone"]);
    assert_eq!(
        b.message(),
        "3 of 10 nodes of the cluster are unhealthy, more than 20% (at most 2 may be); \
         unhealthy nodes are not replaced until fewer are"
    );

    // 1 of 10: repaired.
    let w = World::default()
        .healthy("a", 9)
        .karpenter("lone", None, &due);
    assert_eq!(repaired(&w.decide()), ["lone"]);
}

#[test]
fn only_nodes_with_exactly_one_nodeclaim_are_repaired() {
    let due = [("Ready", "False", 40)];
    let w = World::default().healthy("a", 9).foreign("foreign", &due);
    assert_eq!(w.decide(), Decision::default(), "no NodeClaim");

    let mut w = World::default()
        .healthy("a", 9)
        .karpenter("twice", Some("a"), &due);
    let mut copy = (*w.claims[9]).clone();
    copy.metadata.name = Some("twice-claim-2".into());
    w.claims.push(Arc::new(copy));
    assert!(w.decide().repairs.is_empty(), "two NodeClaims");
}

#[test]
fn the_termination_timestamp_is_set_to_now_unless_already_past() {
    let due = [("Ready", "False", 40)];
    let with = |value: &str| {
        let value = value.to_owned();
        World::default()
            .healthy("a", 4)
            .karpenter("sick", Some("a"), &due)
            .claim_of("sick", move |c| {
                c.metadata.annotations =
                    Some([(NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION.to_owned(), value)].into());
            })
            .decide()
    };
    // A past time is kept; a future one (a terminationGracePeriod's) is brought forward; an
    // unreadable one is replaced.
    assert_eq!(
        with("2026-01-01T00:57:00Z").repairs[0].termination_timestamp,
        None
    );
    assert_eq!(
        with("2026-01-01T03:00:00Z").repairs[0].termination_timestamp,
        Some(now())
    );
    assert_eq!(with("soon").repairs[0].termination_timestamp, Some(now()));

    // Written to the second.
    let w = World::default()
        .healthy("a", 4)
        .karpenter("sick", Some("a"), &due);
    let later = now() + SignedDuration::from_millis(1500);
    let d = decide(&Input {
        nodes: &w.nodes,
        nodeclaims: &w.claims,
        nodepools: &w.pools,
        policies: &aws_policies(),
        now: later,
    });
    assert_eq!(
        d.repairs[0].termination_timestamp,
        Some(now() + SignedDuration::from_secs(1))
    );
}

#[test]
fn a_deleting_nodeclaim_only_gets_the_termination_timestamp() {
    let due = [("Ready", "False", 40)];
    let deleting = World::default()
        .healthy("a", 4)
        .karpenter("sick", Some("a"), &due)
        .claim_of("sick", |c| {
            c.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ago(2)));
        });
    let d = deleting.decide();
    assert_eq!(repaired(&d), ["sick"]);
    assert!(!d.repairs[0].delete);
    assert_eq!(d.repairs[0].termination_timestamp, Some(now()));

    // Already forceful: nothing left to do.
    let done = deleting.claim_of("sick", |c| {
        c.metadata.annotations = Some(
            [(
                NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION.to_owned(),
                "2026-01-01T00:58:00Z".to_owned(),
            )]
            .into(),
        );
    });
    assert!(done.decide().repairs.is_empty());
}

#[test]
fn a_condition_without_a_transition_time_is_due_at_once() {
    let mut w = World::default().healthy("a", 4);
    w.claims.push(
        nodeclaim("bare-claim")
            .nodepool("a")
            .provider_id("aws:///us-east-1a/i-bare")
            .arc(),
    );
    w.nodes.push(
        node("bare")
            .provider_id("aws:///us-east-1a/i-bare")
            .label(crds::labels::NODEPOOL_LABEL, "a")
            .ready("Unknown")
            .arc(),
    );
    let d = w.decide();
    assert_eq!(repaired(&d), ["bare"]);
    assert_eq!(d.repairs[0].unhealthy.since, None);
    assert_eq!(d.repairs[0].held_for, Duration::ZERO);
}
