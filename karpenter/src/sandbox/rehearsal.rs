//! What EC2 and EventBridge do around an interruption, played in the sandbox's simulated cloud
//! for `karpenter sandbox interrupt`: the event for the asked [`InterruptionKind`] goes to the
//! cloud's interruption queue in EventBridge's format (`karpenter_core::interruption::event`),
//! and the instance then does what EC2 would do to it:
//!
//! | kind | sent at once | the instance |
//! | --- | --- | --- |
//! | `spot-interruption` | EC2 Spot Instance Interruption Warning | reclaimed (terminated) [`SPOT_WARNING`] after the warning if it still runs |
//! | `rebalance` | EC2 Instance Rebalance Recommendation | keeps running |
//! | `scheduled-change` | AWS Health Event (EC2 instance retirement, scheduled now) | keeps running (EC2 would retire it at the scheduled time, days later) |
//! | `stopping` | state change `stopping` | stopped at once (StopInstances): its kubelet stops and its Node goes; `stopped` follows |
//! | `terminating` | state change `shutting-down` | terminated at once: its kubelet stops and its Node goes; `terminated` follows |
//!
//! From then on every state change of an interrupted instance is sent too (`stopping`,
//! `stopped`, `shutting-down`, `terminated`), whoever causes it (EC2's reclaim, Karpenter's
//! own termination), as the EventBridge rule for state-change notifications forwards them.
//! Spot warnings and rebalance recommendations are only for spot instances, as in EC2.
//!
//! Sans-IO apart from the simulated cloud: time comes in as `now`.

use std::collections::BTreeMap;
use std::sync::Arc;

use clap::ValueEnum;
use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use controller::cloudprovider::queue::InterruptionQueue;
use controller::cloudprovider::sim::states::InstanceState;
use controller::cloudprovider::sim::{ACCOUNT_ID, SimCloud};
use karpenter_core::capacity::catalog::REGION;
use karpenter_core::interruption::{SPOT_WARNING, detail_type, event, instance_id};

/// What to rehearse (the `--kind` of `karpenter sandbox interrupt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InterruptionKind {
    /// EC2's two-minute spot interruption warning; EC2 reclaims the instance two minutes later.
    SpotInterruption,
    /// EC2's rebalance recommendation (a spot instance at elevated risk); nothing else happens.
    Rebalance,
    /// An AWS Health scheduled change (instance retirement) for the instance.
    ScheduledChange,
    /// The instance stops (state change `stopping`, then `stopped`).
    Stopping,
    /// The instance terminates (state change `shutting-down`, then `terminated`).
    Terminating,
}

impl InterruptionKind {
    /// Every kind, in `--kind`'s order.
    pub const ALL: [InterruptionKind; 5] = [
        InterruptionKind::SpotInterruption,
        InterruptionKind::Rebalance,
        InterruptionKind::ScheduledChange,
        InterruptionKind::Stopping,
        InterruptionKind::Terminating,
    ];

    /// The flag value, e.g. `spot-interruption`.
    pub fn as_str(self) -> &'static str {
        match self {
            InterruptionKind::SpotInterruption => "spot-interruption",
            InterruptionKind::Rebalance => "rebalance",
            InterruptionKind::ScheduledChange => "scheduled-change",
            InterruptionKind::Stopping => "stopping",
            InterruptionKind::Terminating => "terminating",
        }
    }

    /// Whether EC2 sends it only for spot instances.
    pub fn spot_only(self) -> bool {
        matches!(
            self,
            InterruptionKind::SpotInterruption | InterruptionKind::Rebalance
        )
    }
}

/// One event sent to the interruption queue.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SentEvent {
    /// When EventBridge sent it (the event's `time`).
    pub time: Timestamp,
    /// The event's `detail-type`, e.g. `EC2 Spot Instance Interruption Warning`.
    pub detail_type: String,
    /// For a state change, the state entered (`stopping`, `shutting-down`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The event's `id`.
    pub id: String,
    /// The queue's id of the message that carries it.
    pub message_id: String,
}

/// What an interruption did to an instance.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// The EC2 instance id.
    #[serde(rename = "instanceID")]
    pub instance_id: String,
    /// Instance type, zone and capacity type of its offering.
    pub instance_type: String,
    /// Availability zone.
    pub zone: String,
    /// `spot` or `on-demand`.
    pub capacity_type: String,
    /// The queue the events went to.
    pub queue: String,
    /// For a spot interruption: when EC2 reclaims the instance if it still runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reclaim_at: Option<Timestamp>,
    /// The events sent at once.
    pub events: Vec<SentEvent>,
}

/// Why an interruption was not rehearsed. [`Refusal::reason`] is the CamelCase reason of the
/// `Interruption`'s `Sent=False` condition.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The simulated cloud has no interruption queue.
    #[error(
        "the sandbox runs without an interruption queue (started with an empty \
         --interruption-queue): restart it without that flag to rehearse interruptions"
    )]
    QueueOff,
    /// The providerID names no EC2 instance.
    #[error("{0:?} is not an EC2 instance's providerID")]
    NotAnInstance(String),
    /// The instance is not running (stopped, terminated, or unknown to the cloud).
    #[error("instance {instance_id} is {state}, not running")]
    NotRunning {
        /// `i-...`.
        instance_id: String,
        /// Its state, or `terminated` when the cloud no longer knows it.
        state: InstanceState,
    },
    /// A spot-only event for an on-demand instance.
    #[error("instance {instance_id} is {capacity_type}: EC2 sends {kind} only for spot instances")]
    NotSpot {
        /// `i-...`.
        instance_id: String,
        /// Its capacity type.
        capacity_type: String,
        /// The kind asked for.
        kind: &'static str,
    },
}

impl Refusal {
    /// CamelCase reason, e.g. `InterruptionQueueOff`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::QueueOff => "InterruptionQueueOff",
            Refusal::NotAnInstance(_) => "NoInstance",
            Refusal::NotRunning { .. } => "InstanceNotRunning",
            Refusal::NotSpot { .. } => "NotSpot",
        }
    }
}

/// An interrupted instance whose state changes are forwarded.
#[derive(Clone, Debug)]
struct Watched {
    instance_id: String,
    /// Who asked (the `Interruption` objects' names), told about later events.
    owners: Vec<String>,
    /// When EC2 reclaims it (spot interruptions), until it has.
    reclaim_at: Option<Timestamp>,
    /// The spot interruption warning sent for it: EC2 warns an instance once, so a second
    /// request is answered with this one instead of a second message.
    warning: Option<SentEvent>,
    /// The last state an event was sent for.
    sent: InstanceState,
}

/// The simulated EC2 and EventBridge of one sandbox.
pub struct Rehearsal {
    sim: Arc<SimCloud>,
    /// Interrupted instances by providerID.
    watched: BTreeMap<String, Watched>,
    sent: u64,
}

impl Rehearsal {
    /// Rehearsals in `sim` (whose interruption queue, if any, receives the events).
    pub fn new(sim: Arc<SimCloud>) -> Rehearsal {
        Rehearsal {
            sim,
            watched: BTreeMap::new(),
            sent: 0,
        }
    }

    /// Whether some interrupted instance is still watched (a reclaim or a state change may
    /// come).
    pub fn is_watching(&self) -> bool {
        !self.watched.is_empty()
    }

    /// Interrupt the instance behind `provider_id` with `kind` at `now` (to the second, as
    /// EventBridge's `time`), for `owner`.
    ///
    /// Errors: see [`Refusal`]; nothing is sent then.
    pub fn interrupt(
        &mut self,
        provider_id: &str,
        kind: InterruptionKind,
        owner: &str,
        now: Timestamp,
    ) -> Result<Outcome, Refusal> {
        let now = to_second(now);
        let Some(queue) = self.sim.interruption_queue().map(|q| q.name().to_owned()) else {
            return Err(Refusal::QueueOff);
        };
        let Some(id) = instance_id(provider_id).map(str::to_owned) else {
            return Err(Refusal::NotAnInstance(provider_id.to_owned()));
        };
        let instance = match self.sim.describe(provider_id) {
            Some((instance, InstanceState::Running)) => instance,
            found => {
                return Err(Refusal::NotRunning {
                    instance_id: id,
                    state: found.map_or(InstanceState::Terminated, |(_, s)| s),
                });
            }
        };
        if kind.spot_only() && instance.capacity_type != "spot" {
            return Err(Refusal::NotSpot {
                instance_id: id,
                capacity_type: instance.capacity_type,
                kind: kind.as_str(),
            });
        }
        // EC2 warns a spot instance once: a second request gets the first warning (same event
        // id and message), not a second message or a later reclaim.
        if kind == InterruptionKind::SpotInterruption
            && let Some(watched) = self.watched.get_mut(provider_id)
            && let Some(warning) = watched.warning.clone()
        {
            watched.owners.push(owner.to_owned());
            return Ok(Outcome {
                instance_id: id,
                instance_type: instance.instance_type,
                zone: instance.zone,
                capacity_type: instance.capacity_type,
                queue,
                reclaim_at: watched.reclaim_at,
                events: vec![warning],
            });
        }
        let mut reclaim_at = None;
        let mut events = Vec::new();
        let mut sent_state = InstanceState::Running;
        match kind {
            InterruptionKind::SpotInterruption => {
                let event_id = self.next_id(now);
                let body = event::spot_interruption(&event_id, ACCOUNT_ID, REGION, &id, now);
                events.push(self.send(&body, event_id, detail_type::SPOT_INTERRUPTION, None, now));
                reclaim_at = SignedDuration::try_from(SPOT_WARNING)
                    .ok()
                    .and_then(|d| now.checked_add(d).ok());
            }
            InterruptionKind::Rebalance => {
                let event_id = self.next_id(now);
                let body = event::rebalance_recommendation(&event_id, ACCOUNT_ID, REGION, &id, now);
                events.push(self.send(&body, event_id, detail_type::REBALANCE, None, now));
            }
            InterruptionKind::ScheduledChange => {
                let event_id = self.next_id(now);
                let body = event::scheduled_change(&event_id, ACCOUNT_ID, REGION, &[&id], now);
                events.push(self.send(&body, event_id, detail_type::HEALTH, None, now));
            }
            InterruptionKind::Stopping => {
                self.sim.stop(provider_id);
                events.push(self.state_change(&id, InstanceState::Stopping, now));
                sent_state = InstanceState::Stopping;
            }
            InterruptionKind::Terminating => {
                self.sim.terminate(provider_id);
                events.push(self.state_change(&id, InstanceState::ShuttingDown, now));
                sent_state = InstanceState::ShuttingDown;
            }
        }
        let watched = self
            .watched
            .entry(provider_id.to_owned())
            .or_insert(Watched {
                instance_id: id.clone(),
                owners: Vec::new(),
                reclaim_at: None,
                warning: None,
                sent: InstanceState::Running,
            });
        watched.owners.push(owner.to_owned());
        watched.sent = watched.sent.max(sent_state);
        if reclaim_at.is_some() {
            watched.reclaim_at = reclaim_at;
            watched.warning = events.first().cloned();
        }
        Ok(Outcome {
            instance_id: id,
            instance_type: instance.instance_type,
            zone: instance.zone,
            capacity_type: instance.capacity_type,
            queue,
            reclaim_at,
            events,
        })
    }

    /// What happens by `now`: EC2 reclaims spot instances whose warning ran out and that still
    /// run, and every state change of an interrupted instance since the last call is sent.
    /// Returns the events sent, once for each interruption of the instance (by owner);
    /// forgets instances once `terminated` is sent.
    pub fn tick(&mut self, now: Timestamp) -> Vec<(String, SentEvent)> {
        let now = to_second(now);
        let mut out = Vec::new();
        let ids: Vec<String> = self.watched.keys().cloned().collect();
        for provider_id in ids {
            let Some(mut w) = self.watched.get(&provider_id).cloned() else {
                continue;
            };
            let mut current = self.state_of(&provider_id);
            if w.reclaim_at.is_some_and(|at| now >= at) {
                w.reclaim_at = None;
                if current == InstanceState::Running && self.sim.terminate(&provider_id) {
                    tracing::info!(instance = %w.instance_id, "spot instance reclaimed: the interruption warning ran out");
                }
                current = self.state_of(&provider_id);
            }
            for state in transitions(w.sent, current) {
                let event = self.state_change(&w.instance_id, state, now);
                out.extend(w.owners.iter().map(|o| (o.clone(), event.clone())));
                w.sent = state;
            }
            if w.sent == InstanceState::Terminated {
                self.watched.remove(&provider_id);
            } else {
                self.watched.insert(provider_id, w);
            }
        }
        out
    }

    fn state_of(&self, provider_id: &str) -> InstanceState {
        self.sim
            .describe(provider_id)
            .map_or(InstanceState::Terminated, |(_, s)| s)
    }

    /// An event id shaped like EventBridge's (a UUID), unique in this sandbox.
    fn next_id(&mut self, now: Timestamp) -> String {
        self.sent += 1;
        let millis = u64::try_from(now.as_millisecond()).unwrap_or_default() & 0xffff_ffff_ffff;
        format!("{:08x}-5a4d-4b0c-8000-{millis:012x}", self.sent)
    }

    fn state_change(&mut self, instance: &str, state: InstanceState, now: Timestamp) -> SentEvent {
        let event_id = self.next_id(now);
        let body =
            event::state_change(&event_id, ACCOUNT_ID, REGION, instance, state.as_str(), now);
        self.send(
            &body,
            event_id,
            detail_type::STATE_CHANGE,
            Some(state.as_str()),
            now,
        )
    }

    fn send(
        &self,
        body: &str,
        id: String,
        detail_type: &str,
        state: Option<&str>,
        now: Timestamp,
    ) -> SentEvent {
        let message_id = self
            .sim
            .interruption_queue()
            .map(|q| q.send(body, now))
            .unwrap_or_default();
        tracing::info!(event = %id, detail_type, state, message = %message_id, "interruption event sent");
        SentEvent {
            time: now,
            detail_type: detail_type.to_owned(),
            state: state.map(str::to_owned),
            id,
            message_id,
        }
    }
}

/// `t` to the second (EventBridge's `time` has no fraction).
fn to_second(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// The states EC2 reports going from `sent` to `current`, in order: a stop goes through
/// `stopping` to `stopped`, a termination through `shutting-down` to `terminated`; a stopped
/// instance that is terminated skips nothing it has not reported.
pub fn transitions(sent: InstanceState, current: InstanceState) -> Vec<InstanceState> {
    use InstanceState::*;
    let path: &[InstanceState] = match current {
        Running => &[],
        Stopping => &[Stopping],
        Stopped => &[Stopping, Stopped],
        ShuttingDown => &[ShuttingDown],
        Terminated => &[ShuttingDown, Terminated],
    };
    path.iter().copied().filter(|s| *s > sent).collect()
}

#[cfg(test)]
mod tests;
