//! Tests of the scheduling queue and its queueing hints, each reproducing a kube-scheduler
//! test or behaviour it cites (`pkg/scheduler/backend/queue/*_test.go`, the plugins'
//! `EventsToRegister` and `QueueingHintFn`s).

use std::collections::BTreeSet;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;

use super::hints::ClusterEvent;
use super::queue::{QueueConfig, QueueState, SchedulingQueue};
use super::unschedulable::Plugin;

fn t0() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().expect("a timestamp")
}

fn at(seconds: i64) -> Timestamp {
    t0() + SignedDuration::from_secs(seconds)
}

fn pod(name: &str) -> Arc<Pod> {
    testutil::pod(name).cpu("1").arc()
}

fn node(name: &str) -> Node {
    testutil::node(name)
        .allocatable("cpu", "4")
        .ready("True")
        .build()
}

fn plugins(p: &[Plugin]) -> BTreeSet<Plugin> {
    p.iter().copied().collect()
}

/// A queue holding `p`, popped at `t` and rejected by `rejectors`.
fn rejected(p: &Arc<Pod>, rejectors: &[Plugin], t: Timestamp) -> SchedulingQueue {
    let mut q = SchedulingQueue::new(QueueConfig::default());
    q.add(Arc::clone(p), t);
    assert_eq!(q.pop_all(t).len(), 1);
    q.unschedulable("default/a", plugins(rejectors), t);
    q
}

/// `backoff_queue_test.go` `TestBackoffQueue_calculateBackoffDuration` with the defaults
/// (`podInitialBackoffSeconds` 1, `podMaxBackoffSeconds` 10): 1, 2, 4, 8 s, then 10 s.
#[test]
fn backoff_doubles_per_failure_from_one_to_ten_seconds() {
    let q = SchedulingQueue::new(QueueConfig::default());
    let got: Vec<i64> = (0..=6)
        .map(|n| q.backoff_duration(n).as_millis() as i64)
        .collect();
    assert_eq!(got, vec![0, 1000, 2000, 4000, 8000, 10_000, 10_000]);
}

/// `scheduling_queue_test.go` `TestBackOffFlow`: each failed attempt backs the pod off longer,
/// measured from the failure; the pod is popped again only once its backoff is over
/// (`flushBackoffQCompleted`).
#[test]
fn a_pod_backs_off_longer_after_each_failure() {
    let mut q = SchedulingQueue::new(QueueConfig::default());
    q.add(pod("a"), t0());
    let mut now = t0();
    for expected in [1, 2, 4, 8, 10, 10] {
        assert_eq!(q.pop_all(now).len(), 1, "popped at {now}");
        // An error (no rejecting plugin) goes straight to backoffQ.
        q.error("default/a", now);
        let until = now + SignedDuration::from_secs(expected);
        assert_eq!(q.state("default/a"), Some(QueueState::Backoff(until)));
        assert_eq!(q.next_wakeup(), Some(until));
        let just_before = until - SignedDuration::from_millis(1);
        assert!(q.pop_all(just_before).is_empty(), "still backing off");
        now = until;
    }
}

/// `scheduling_queue_test.go` `TestPriorityQueue_MoveAllToActiveOrBackoffQueueWithQueueingHint`:
/// an event a rejecting plugin's hint accepts moves the pod out of the unschedulable pool,
/// to backoffQ while its backoff lasts and to activeQ after; an event the hint skips leaves it.
#[test]
fn a_hinted_event_moves_an_unschedulable_pod_by_its_backoff() {
    let p = pod("a");
    let n = node("new");
    let mut q = rejected(&p, &[Plugin::NodeResourcesFit], t0());
    assert_eq!(q.state("default/a"), Some(QueueState::Unschedulable));
    assert!(q.pop_all(at(20)).is_empty(), "no event, no retry");
    // noderesources/fit.go registers Node/Add: the pod backs off (1 s after its failure).
    let mut early = rejected(&p, &[Plugin::NodeResourcesFit], t0());
    assert_eq!(early.on_event(&ClusterEvent::NodeAdd(&n), at(0)), 1);
    assert_eq!(early.state("default/a"), Some(QueueState::Backoff(at(1))));
    // Long after the failure it goes straight to activeQ.
    assert_eq!(q.on_event(&ClusterEvent::NodeAdd(&n), at(30)), 1);
    assert_eq!(q.state("default/a"), Some(QueueState::Active));
    assert_eq!(q.pop_all(at(30)).len(), 1);
}

/// The acceptance case "no requeue on an unrelated event": a pod NodeResourcesFit rejected
/// stays in the pool when a pod is bound elsewhere (fit.go registers only Pod/Delete) or a node
/// only changes its labels (`UpdateNodeLabel` does not change allocatable, so its hint skips).
/// `scheduling_queue_test.go` `TestPriorityQueue_MoveAllToActiveOrBackoffQueue`, "QueueSkip".
#[test]
fn an_unrelated_event_leaves_the_pod_in_the_pool() {
    let p = pod("a");
    let mut q = rejected(&p, &[Plugin::NodeResourcesFit], t0());
    let bound = testutil::pod("b").on_node("n1").build();
    let old = node("n1");
    let relabelled = testutil::node("n1")
        .label("team", "x")
        .allocatable("cpu", "4")
        .ready("True")
        .build();
    let events = [
        ClusterEvent::AssignedPodAdd(&bound),
        ClusterEvent::NodeUpdate {
            old: &old,
            new: &relabelled,
        },
        ClusterEvent::PvChange,
        ClusterEvent::StorageClassChange,
    ];
    for e in &events {
        assert_eq!(q.on_event(e, at(30)), 0, "{e:?}");
    }
    assert_eq!(q.state("default/a"), Some(QueueState::Unschedulable));
    // Pod/Delete of a bound pod frees room: requeued.
    assert_eq!(
        q.on_event(&ClusterEvent::AssignedPodDelete(&bound), at(30)),
        1
    );
}

/// Each plugin's hint, as its `QueueingHintFn` judges the event (plugin files cited in
/// `hints.rs`): (rejecting plugin, event, whether the pod is requeued).
#[test]
fn plugin_hints_requeue_only_on_events_that_may_help() {
    let selective = Arc::new(
        testutil::pod("a")
            .node_selector("zone", "a")
            .merge(json!({"spec": {
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}],
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                    "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}],
                "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "db"}}}]}},
                "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]
            }}))
            .arc(),
    );
    let in_zone = |zone: &str| {
        testutil::node("n")
            .label("zone", zone)
            .allocatable("cpu", "4")
            .ready("True")
    };
    let zone_a = in_zone("a").build();
    let zone_b = in_zone("b").build();
    let tainted_gpu = in_zone("a").taint("gpu=1:NoSchedule").build();
    let tainted_other = in_zone("a").taint("other:NoSchedule").build();
    let cordoned = in_zone("a")
        .merge(json!({"spec": {"unschedulable": true}}))
        .build();
    let web = testutil::pod("w")
        .on_node("n")
        .merge(json!({"metadata": {"labels": {"app": "web"}}}))
        .build();
    let db = testutil::pod("d")
        .on_node("n")
        .merge(json!({"metadata": {"labels": {"app": "db"}}}))
        .build();
    let with_port = testutil::pod("p")
        .on_node("n")
        .merge(json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}]}}))
        .build();
    let claim = |name: &str| {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default"}}))
            .expect("a claim")
    };
    let (data, other): (k8s_openapi::api::core::v1::PersistentVolumeClaim, _) =
        (claim("data"), claim("other"));
    use ClusterEvent as E;
    use Plugin as P;
    let cases: Vec<(P, E, bool)> = vec![
        (P::NodeAffinity, E::NodeAdd(&zone_a), true),
        (P::NodeAffinity, E::NodeAdd(&zone_b), false),
        (
            P::NodeAffinity,
            E::NodeUpdate {
                old: &zone_b,
                new: &zone_a,
            },
            true,
        ),
        (
            P::NodeAffinity,
            E::NodeUpdate {
                old: &zone_a,
                new: &tainted_gpu,
            },
            false,
        ),
        (P::TaintToleration, E::NodeAdd(&tainted_gpu), true),
        (P::TaintToleration, E::NodeAdd(&tainted_other), false),
        (
            P::TaintToleration,
            E::NodeUpdate {
                old: &tainted_other,
                new: &zone_a,
            },
            true,
        ),
        (P::TaintToleration, E::AssignedPodDelete(&web), false),
        (
            P::NodeUnschedulable,
            E::NodeUpdate {
                old: &cordoned,
                new: &zone_a,
            },
            true,
        ),
        (P::NodeUnschedulable, E::NodeAdd(&cordoned), false),
        (P::NodePorts, E::AssignedPodDelete(&with_port), true),
        (P::NodePorts, E::AssignedPodDelete(&web), false),
        (P::PodTopologySpread, E::AssignedPodAdd(&web), true),
        (P::PodTopologySpread, E::AssignedPodAdd(&db), false),
        (P::PodTopologySpread, E::NodeAdd(&zone_b), true),
        (P::InterPodAffinity, E::AssignedPodAdd(&db), true),
        (P::InterPodAffinity, E::AssignedPodAdd(&web), false),
        (P::VolumeBinding, E::PvcChange(&data), true),
        (P::VolumeBinding, E::PvcChange(&other), false),
        (P::VolumeBinding, E::AssignedPodAdd(&web), false),
        (P::NodeVolumeLimits, E::CsiNodeChange, true),
        (P::NodeVolumeLimits, E::AssignedPodAdd(&web), false),
    ];
    for (plugin, event, want) in cases {
        let mut q = rejected(&selective, &[plugin], t0());
        let moved = q.on_event(&event, at(30)) == 1;
        assert_eq!(moved, want, "{plugin:?} on {event:?}");
    }
}

/// `scheduling_queue_test.go` `TestPriorityQueue_FlushUnschedulablePodsLeftover`: a pod no event
/// moved is retried once it has been unschedulable for `podMaxInUnschedulablePodsDuration`
/// (5 min), at the next 30 s flush.
#[test]
fn the_periodic_flush_retries_pods_left_unschedulable_for_five_minutes() {
    let p = pod("a");
    let mut q = rejected(&p, &[Plugin::NodeResourcesFit], t0());
    assert!(q.pop_all(at(299)).is_empty());
    assert_eq!(q.state("default/a"), Some(QueueState::Unschedulable));
    assert_eq!(q.next_wakeup(), Some(at(329)), "the next flush");
    assert_eq!(q.pop_all(at(329)).len(), 1);
}

/// `scheduling_queue_test.go` `TestPriorityQueue_Update`: an update to an unschedulable pod
/// that may make it schedulable (its spec) moves it; the scheduler's own status write does not.
#[test]
fn only_a_change_beyond_status_moves_the_pod_itself() {
    let p = pod("a");
    let mut q = rejected(&p, &[Plugin::NodeAffinity], t0());
    let mut marked = (*p).clone();
    marked.status.get_or_insert_with(Default::default).phase = Some("Pending".into());
    q.update(Arc::new(marked), at(30));
    assert_eq!(q.state("default/a"), Some(QueueState::Unschedulable));
    let relaxed = testutil::pod("a").cpu("500m").arc();
    q.update(relaxed, at(30));
    assert_eq!(q.state("default/a"), Some(QueueState::Active));
}

/// `scheduling_queue_test.go` `TestPriorityQueue_Pop` with `queuesort.PrioritySort`: higher
/// priority first, then the older pod; each pop is one cycle's pod, in that order.
#[test]
fn active_pods_pop_by_priority_then_age() {
    let mut q = SchedulingQueue::new(QueueConfig::default());
    let made = |name: &str, prio: i32, created: &str| {
        testutil::pod(name)
            .created(created)
            .merge(json!({"spec": {"priority": prio}}))
            .arc()
    };
    q.add(made("late", 0, "2026-01-01T00:00:02Z"), t0());
    q.add(made("urgent", 100, "2026-01-01T00:00:03Z"), t0());
    q.add(made("early", 0, "2026-01-01T00:00:01Z"), t0());
    let names: Vec<String> = q
        .pop_all(t0())
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(names, ["urgent", "early", "late"]);
    assert_eq!(q.state("default/late"), Some(QueueState::InFlight));
}

/// A pod no plugin rejected (no nodes at all) cannot wait for an event: upstream's
/// `isPodWorthRequeuing` treats it as `queueAfterBackoff`; it backs off instead.
#[test]
fn a_pod_without_rejecting_plugins_backs_off_instead_of_waiting() {
    let p = pod("a");
    let q = rejected(&p, &[], t0());
    assert_eq!(q.state("default/a"), Some(QueueState::Backoff(at(1))));
    assert_eq!(q.lengths(), (0, 1, 0));
}

/// Nominated pods not in flight are listed (the nominator holds their room); deleted pods
/// leave every queue.
#[test]
fn nominated_and_deleted_pods() {
    let mut nominated = testutil::pod("a").cpu("1").build();
    nominated
        .status
        .get_or_insert_with(Default::default)
        .nominated_node_name = Some("n".into());
    let nominated = Arc::new(nominated);
    let mut q = rejected(&nominated, &[Plugin::NodeResourcesFit], t0());
    assert_eq!(q.nominated().len(), 1);
    q.add(pod("b"), t0());
    q.delete("default/a");
    assert!(q.nominated().is_empty());
    assert_eq!(q.lengths(), (1, 0, 0));
    assert_eq!(q.state("default/a"), None);
}

/// A pod NodeResourcesFit rejected while another pod's nomination held room waits in the
/// pool; when that nomination is released (its pod bound elsewhere, or the nomination taken
/// back) the pod is retried at the next pop, not after the five-minute flush. A pod rejected
/// for its node affinity stays.
#[test]
fn a_released_nomination_retries_the_pods_it_may_have_kept_out() {
    let nominated = |node: Option<&str>| {
        let mut p = testutil::pod("holder").cpu("1").build();
        p.status
            .get_or_insert_with(Default::default)
            .nominated_node_name = node.map(String::from);
        Arc::new(p)
    };
    for release in ["bound", "taken back"] {
        let mut q = SchedulingQueue::new(QueueConfig::default());
        q.add(nominated(Some("n")), t0());
        q.add(pod("a"), t0());
        q.add(pod("b"), t0());
        assert_eq!(q.pop_all(t0()).len(), 3);
        q.unschedulable("default/holder", plugins(&[Plugin::NodeAffinity]), t0());
        q.unschedulable("default/a", plugins(&[Plugin::NodeResourcesFit]), t0());
        q.unschedulable("default/b", plugins(&[Plugin::NodeAffinity]), t0());
        assert_eq!(q.nominated().len(), 1);
        // Nothing released yet: a later pop leaves both waiting.
        assert!(q.pop_all(at(5)).is_empty(), "{release}");
        match release {
            "bound" => q.delete("default/holder"),
            _ => q.update(nominated(None), at(6)),
        }
        let popped: Vec<String> = q
            .pop_all(at(7))
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(popped, vec!["a".to_string()], "{release}");
        assert_eq!(
            q.state("default/b"),
            Some(QueueState::Unschedulable),
            "{release}"
        );
    }
}

/// Every hint that can say `Queue` is for an event its plugin registers: the queue skips a
/// plugin's pods for events it does not register, which must never hide a `Queue`.
#[test]
fn hints_only_queue_events_their_plugin_registers() {
    use super::hints::{queue, registers};
    let p = pod("a");
    let n = node("n");
    let bound = testutil::pod("b").on_node("n").build();
    let claim: k8s_openapi::api::core::v1::PersistentVolumeClaim =
        serde_json::from_value(json!({"metadata": {"name": "c", "namespace": "default"}}))
            .expect("a claim");
    let events = [
        ClusterEvent::NodeAdd(&n),
        ClusterEvent::NodeUpdate { old: &n, new: &n },
        ClusterEvent::AssignedPodAdd(&bound),
        ClusterEvent::AssignedPodUpdate {
            old: &bound,
            new: &bound,
        },
        ClusterEvent::AssignedPodDelete(&bound),
        ClusterEvent::PvcChange(&claim),
        ClusterEvent::PvChange,
        ClusterEvent::StorageClassChange,
        ClusterEvent::CsiNodeChange,
        ClusterEvent::VolumeAttachmentDelete,
    ];
    use Plugin as P;
    for plugin in [
        P::NodeUnschedulable,
        P::TaintToleration,
        P::NodeAffinity,
        P::NodePorts,
        P::NodeResourcesFit,
        P::NodeVolumeLimits,
        P::PodTopologySpread,
        P::InterPodAffinity,
        P::VolumeBinding,
    ] {
        for e in &events {
            assert!(
                registers(plugin, e) || !queue(plugin, &p, e),
                "{plugin:?} queues on {e:?} without registering it"
            );
        }
    }
}
