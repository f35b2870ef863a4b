//! The simulated EC2 and EventBridge around interruptions: which events reach the queue, in
//! EventBridge's format, when, and what happens to the instance, on a fake clock.

use controller::cloudprovider::CloudProvider;
use controller::cloudprovider::queue::InterruptionQueue;
use controller::cloudprovider::sim::SHUTDOWN_DURATION;
use controller::cloudprovider::sim::states::STOP_DURATION;
use crds::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL};
use crds::{EC2NodeClass, NodeClaim, Operator};
use karpenter_core::clock::{Clock, FakeClock};
use karpenter_core::interruption::{Kind, parse};
use testutil::{ec2nodeclass, nodeclaim};

use super::*;

fn start() -> Timestamp {
    "2026-11-26T10:00:00Z".parse().expect("time")
}

struct World {
    clock: Arc<FakeClock>,
    sim: Arc<SimCloud>,
    rehearsal: Rehearsal,
}

impl World {
    fn new(queue: bool) -> World {
        let clock = Arc::new(FakeClock::new(start()));
        let mut sim = SimCloud::new("demo", Arc::clone(&clock) as Arc<dyn Clock>).expect("catalog");
        if queue {
            sim = sim.with_interruption_queue("karpenter-sandbox");
        }
        let sim = Arc::new(sim);
        World {
            clock,
            rehearsal: Rehearsal::new(Arc::clone(&sim)),
            sim,
        }
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn advance(&self, by: SignedDuration) {
        self.clock.advance(by);
    }

    /// Launch `name` as one m5.large of `capacity_type`; returns the claim and providerID.
    async fn launch(&self, name: &str, capacity_type: &str) -> (NodeClaim, String) {
        let mut nc: EC2NodeClass = ec2nodeclass("default").build();
        nc.status = Some(
            self.sim
                .with_network(|n| n.resolve("demo", &nc, jiff::Timestamp::now()))
                .status,
        );
        let claim = nodeclaim(name)
            .nodepool("default")
            .requirement(INSTANCE_TYPE_LABEL, Operator::In, ["m5.large"])
            .requirement(CAPACITY_TYPE_LABEL, Operator::In, [capacity_type])
            .build();
        let launched = self.sim.create(&claim, &nc).await.expect("launch");
        (claim, launched.provider_id)
    }

    /// The messages in the queue, parsed: (kind, instance ids, time), oldest first.
    async fn received(&self) -> Vec<(Kind, Vec<String>, Option<Timestamp>)> {
        let queue = self.sim.interruption_queue().expect("queue");
        if queue.is_empty() {
            return vec![];
        }
        let mut out = Vec::new();
        for m in queue.receive().await.expect("receive") {
            let parsed = parse(m.body.as_deref().unwrap_or_default()).expect("EventBridge body");
            out.push((parsed.kind, parsed.instance_ids, parsed.time));
            queue.delete(&m.receipt).await.expect("delete");
        }
        out
    }

    fn state(&self, provider_id: &str) -> Option<InstanceState> {
        self.sim.describe(provider_id).map(|(_, s)| s)
    }
}

fn states(events: &[(String, SentEvent)]) -> Vec<(&str, Option<&str>)> {
    events
        .iter()
        .map(|(owner, e)| (owner.as_str(), e.state.as_deref()))
        .collect()
}

#[tokio::test]
async fn a_spot_warning_is_followed_by_ec2_reclaiming_the_instance_two_minutes_later() {
    let mut w = World::new(true);
    let (_, pid) = w.launch("default-spot", "spot").await;
    let id = instance_id(&pid).expect("an instance").to_owned();
    let out = w
        .rehearsal
        .interrupt(&pid, InterruptionKind::SpotInterruption, "spot-1", w.now())
        .expect("sent");
    assert_eq!(out.instance_id, id);
    assert_eq!(
        (out.instance_type.as_str(), out.capacity_type.as_str()),
        ("m5.large", "spot")
    );
    assert_eq!(out.queue, "karpenter-sandbox");
    assert_eq!(
        out.reclaim_at,
        Some(start() + SignedDuration::from_secs(120))
    );
    assert_eq!(out.events.len(), 1);
    assert_eq!(out.events[0].detail_type, detail_type::SPOT_INTERRUPTION);
    assert!(!out.events[0].message_id.is_empty());
    assert_eq!(
        w.received().await,
        [(Kind::SpotInterrupted, vec![id.clone()], Some(start()))]
    );

    // Nothing happens before the warning runs out; then EC2 terminates the instance.
    w.advance(SignedDuration::from_secs(119));
    assert!(w.rehearsal.tick(w.now()).is_empty());
    assert_eq!(w.state(&pid), Some(InstanceState::Running));
    w.advance(SignedDuration::from_secs(1));
    let sent = w.rehearsal.tick(w.now());
    assert_eq!(states(&sent), [("spot-1", Some("shutting-down"))]);
    assert_eq!(w.state(&pid), Some(InstanceState::ShuttingDown));
    w.advance(SHUTDOWN_DURATION);
    let sent = w.rehearsal.tick(w.now());
    assert_eq!(states(&sent), [("spot-1", Some("terminated"))]);
    assert_eq!(w.state(&pid), None);
    let later = start() + SignedDuration::from_secs(120);
    assert_eq!(
        w.received().await,
        [
            (Kind::InstanceTerminated, vec![id.clone()], Some(later)),
            (
                Kind::InstanceTerminated,
                vec![id],
                Some(later + SHUTDOWN_DURATION)
            ),
        ]
    );
    assert!(
        !w.rehearsal.is_watching(),
        "a terminated instance is forgotten"
    );
    assert!(w.rehearsal.tick(w.now()).is_empty());
}

/// Issue 33: a second spot warning asked for the same instance sent a second message and
/// moved the reclaim later. EC2 warns an instance once: the second request is answered with
/// the first warning, and the reclaim stays two minutes after it.
#[tokio::test]
async fn a_second_spot_warning_for_an_instance_is_the_first_one() {
    let mut w = World::new(true);
    let (_, pid) = w.launch("default-spot", "spot").await;
    let id = instance_id(&pid).expect("an instance").to_owned();
    let first = w
        .rehearsal
        .interrupt(&pid, InterruptionKind::SpotInterruption, "spot-1", w.now())
        .expect("sent");
    w.advance(SignedDuration::from_secs(30));
    let again = w
        .rehearsal
        .interrupt(&pid, InterruptionKind::SpotInterruption, "spot-2", w.now())
        .expect("answered");
    assert_eq!(
        again.events, first.events,
        "the first warning, not a new one"
    );
    assert_eq!(again.reclaim_at, first.reclaim_at);
    assert_eq!(
        w.received().await,
        [(Kind::SpotInterrupted, vec![id], Some(start()))],
        "one message in the queue"
    );
    // Both asked, both hear of the reclaim, at the first warning's deadline.
    w.advance(SignedDuration::from_secs(90));
    let sent = w.rehearsal.tick(w.now());
    assert_eq!(
        states(&sent),
        [
            ("spot-1", Some("shutting-down")),
            ("spot-2", Some("shutting-down"))
        ]
    );
}

#[tokio::test]
async fn an_instance_karpenter_terminates_first_is_not_reclaimed_but_its_state_changes_are_sent() {
    let mut w = World::new(true);
    let (claim, pid) = w.launch("default-spot", "spot").await;
    w.rehearsal
        .interrupt(&pid, InterruptionKind::SpotInterruption, "spot-1", w.now())
        .expect("sent");
    w.advance(SignedDuration::from_millis(30_500));
    w.rehearsal
        .interrupt(&pid, InterruptionKind::Rebalance, "rebalance-1", w.now())
        .expect("sent");
    w.sim.delete(&claim).await.expect("Karpenter terminates it");
    let sent = w.rehearsal.tick(w.now());
    // Both interruptions of the instance hear of it, at EventBridge's one-second precision.
    assert_eq!(
        states(&sent),
        [
            ("spot-1", Some("shutting-down")),
            ("rebalance-1", Some("shutting-down"))
        ]
    );
    assert_eq!(sent[0].1.time, start() + SignedDuration::from_secs(30));
    w.advance(SHUTDOWN_DURATION);
    assert_eq!(
        states(&w.rehearsal.tick(w.now())),
        [
            ("spot-1", Some("terminated")),
            ("rebalance-1", Some("terminated"))
        ]
    );
    w.advance(SignedDuration::from_secs(120));
    assert!(w.rehearsal.tick(w.now()).is_empty());
    let kinds: Vec<Kind> = w.received().await.into_iter().map(|m| m.0).collect();
    assert_eq!(
        kinds,
        [
            Kind::SpotInterrupted,
            Kind::RebalanceRecommendation,
            Kind::InstanceTerminated,
            Kind::InstanceTerminated
        ],
        "each state change is sent once"
    );
}

#[tokio::test]
async fn stopping_stops_the_instance_and_terminating_terminates_it() {
    let mut w = World::new(true);
    let (claim, stopped) = w.launch("default-a", "on-demand").await;
    let (_, terminated) = w.launch("default-b", "on-demand").await;
    let out = w
        .rehearsal
        .interrupt(&stopped, InterruptionKind::Stopping, "stop", w.now())
        .expect("sent");
    assert_eq!(out.events[0].state.as_deref(), Some("stopping"));
    assert_eq!(out.reclaim_at, None);
    assert_eq!(w.state(&stopped), Some(InstanceState::Stopping));
    let out = w
        .rehearsal
        .interrupt(&terminated, InterruptionKind::Terminating, "term", w.now())
        .expect("sent");
    assert_eq!(out.events[0].state.as_deref(), Some("shutting-down"));
    assert_eq!(w.state(&terminated), Some(InstanceState::ShuttingDown));
    assert!(w.rehearsal.tick(w.now()).is_empty(), "already sent");
    w.advance(STOP_DURATION.max(SHUTDOWN_DURATION));
    let events = w.rehearsal.tick(w.now());
    let mut sent = states(&events);
    sent.sort();
    assert_eq!(
        sent,
        [("stop", Some("stopped")), ("term", Some("terminated"))]
    );
    // Karpenter terminates the stopped instance.
    w.sim.delete(&claim).await.expect("terminates");
    assert_eq!(
        states(&w.rehearsal.tick(w.now())),
        [("stop", Some("shutting-down"))]
    );
    // In the order sent: the two interruptions, the two instances' next states (in either
    // order), the stopped instance's termination.
    let mut kinds: Vec<Kind> = w.received().await.into_iter().map(|m| m.0).collect();
    kinds[2..4].sort();
    assert_eq!(
        kinds,
        [
            Kind::InstanceStopped,
            Kind::InstanceTerminated,
            Kind::InstanceStopped,
            Kind::InstanceTerminated,
            Kind::InstanceTerminated,
        ]
    );
}

#[tokio::test]
async fn rebalance_and_scheduled_change_send_an_event_and_leave_the_instance_running() {
    let mut w = World::new(true);
    let (_, spot) = w.launch("default-spot", "spot").await;
    let (_, od) = w.launch("default-od", "on-demand").await;
    w.rehearsal
        .interrupt(&spot, InterruptionKind::Rebalance, "r", w.now())
        .expect("sent");
    w.rehearsal
        .interrupt(&od, InterruptionKind::ScheduledChange, "s", w.now())
        .expect("sent for any capacity type");
    w.advance(SignedDuration::from_secs(600));
    assert!(w.rehearsal.tick(w.now()).is_empty());
    assert_eq!(w.state(&spot), Some(InstanceState::Running));
    assert_eq!(w.state(&od), Some(InstanceState::Running));
    let got: Vec<(Kind, Vec<String>)> = w
        .received()
        .await
        .into_iter()
        .map(|(k, ids, _)| (k, ids))
        .collect();
    let ids = |p: &str| vec![instance_id(p).expect("id").to_owned()];
    assert_eq!(
        got,
        [
            (Kind::RebalanceRecommendation, ids(&spot)),
            (Kind::ScheduledChange, ids(&od)),
        ]
    );
}

#[tokio::test]
async fn refusals_send_nothing() {
    let mut w = World::new(true);
    let (_, od) = w.launch("default-od", "on-demand").await;
    for kind in [
        InterruptionKind::SpotInterruption,
        InterruptionKind::Rebalance,
    ] {
        let err = w
            .rehearsal
            .interrupt(&od, kind, "x", w.now())
            .expect_err("on-demand");
        assert_eq!(err.reason(), "NotSpot");
        assert!(err.to_string().contains("is on-demand"), "{err}");
    }
    let err = w
        .rehearsal
        .interrupt("kind://node-1", InterruptionKind::Terminating, "x", w.now())
        .expect_err("not EC2");
    assert_eq!(err.reason(), "NoInstance");
    w.sim.terminate(&od);
    let err = w
        .rehearsal
        .interrupt(&od, InterruptionKind::Terminating, "x", w.now())
        .expect_err("shutting down");
    assert!(
        err.to_string().ends_with("is shutting-down, not running"),
        "{err}"
    );
    let err = w
        .rehearsal
        .interrupt(
            "aws:///us-east-1a/i-0notthere",
            InterruptionKind::Stopping,
            "x",
            w.now(),
        )
        .expect_err("unknown");
    assert_eq!(err.reason(), "InstanceNotRunning");
    assert!(w.received().await.is_empty());
    assert!(!w.rehearsal.is_watching());

    let mut off = World::new(false);
    let (_, spot) = off.launch("default-spot", "spot").await;
    let err = off
        .rehearsal
        .interrupt(&spot, InterruptionKind::SpotInterruption, "x", off.now())
        .expect_err("no queue");
    assert_eq!(err, Refusal::QueueOff);
    assert!(err.to_string().contains("--interruption-queue"), "{err}");
    assert_eq!(off.state(&spot), Some(InstanceState::Running));
}

#[test]
fn state_changes_go_through_ec2_s_intermediate_states() {
    use InstanceState::*;
    assert_eq!(transitions(Running, Running), []);
    assert_eq!(transitions(Running, Stopped), [Stopping, Stopped]);
    assert_eq!(transitions(Stopping, Stopped), [Stopped]);
    assert_eq!(transitions(Running, Terminated), [ShuttingDown, Terminated]);
    assert_eq!(transitions(Stopped, ShuttingDown), [ShuttingDown]);
    assert_eq!(transitions(ShuttingDown, Terminated), [Terminated]);
    assert_eq!(transitions(Terminated, Terminated), []);
    let names: Vec<&str> = InterruptionKind::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "spot-interruption",
            "rebalance",
            "scheduled-change",
            "stopping",
            "terminating"
        ]
    );
}
