//! Interruption messages: the EventBridge events EC2 and AWS Health send to the interruption
//! queue (upstream `aws/karpenter-provider-aws` `pkg/controllers/interruption/messages`), read
//! into [`Message`]s, and what Karpenter does about each [`Kind`] ([`Kind::action`]).
//!
//! A message body is an EventBridge event: a JSON object whose `version`, `source` and
//! `detail-type` say what it is, with `time` (RFC 3339) and a `detail` object. Four are read,
//! as upstream reads them:
//!
//! | source | detail-type | instances | kind |
//! | --- | --- | --- | --- |
//! | `aws.ec2` | `EC2 Spot Instance Interruption Warning` | `detail.instance-id` | [`Kind::SpotInterrupted`] |
//! | `aws.ec2` | `EC2 Instance Rebalance Recommendation` | `detail.instance-id` | [`Kind::RebalanceRecommendation`] |
//! | `aws.health` | `AWS Health Event` (service `EC2`, category `scheduledChange`) | `detail.affectedEntities[].entityValue` | [`Kind::ScheduledChange`] |
//! | `aws.ec2` | `EC2 Instance State-change Notification` (`stopping`, `stopped`, `shutting-down`, `terminated`) | `detail.instance-id` | [`Kind::InstanceStopped`] or [`Kind::InstanceTerminated`] |
//!
//! Any other well-formed event (another source, another Health category, a `running` state
//! change) is [`Kind::NoOp`]; a body that is not such an event is a [`ParseError`]. The
//! builders in [`event`] write the same bodies (the simulated cloud's queue and the tests use
//! them).

use jiff::Timestamp;
use serde::Deserialize;
use serde_json::{Value, json};

/// How long EC2 warns before it reclaims a spot instance: two minutes from the warning's
/// `time` (the warning's `instance-action` time).
pub const SPOT_WARNING: std::time::Duration = std::time::Duration::from_secs(120);

/// What a message reports. The `as_str` names are upstream's `message_type` metric label
/// values (`messages.Kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// EC2 will reclaim the spot instance in two minutes (`spot_interrupted`).
    SpotInterrupted,
    /// The spot instance is at elevated risk of interruption (`rebalance_recommendation`).
    RebalanceRecommendation,
    /// AWS Health scheduled maintenance (retirement, reboot) of the instance
    /// (`scheduled_change`).
    ScheduledChange,
    /// The instance is stopping or stopped (`instance_stopped`).
    InstanceStopped,
    /// The instance is shutting down or terminated (`instance_terminated`).
    InstanceTerminated,
    /// A well-formed event Karpenter does not act on (`no_op`).
    NoOp,
}

/// What Karpenter does with a NodeClaim a message names (upstream `interruption.Action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Replace and drain the node, then delete its NodeClaim (upstream: cordon and drain).
    CordonAndDrain,
    /// Only an Event (a rebalance recommendation) or nothing.
    NoAction,
}

impl Kind {
    /// Upstream's `message_type` label value, e.g. `spot_interrupted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::SpotInterrupted => "spot_interrupted",
            Kind::RebalanceRecommendation => "rebalance_recommendation",
            Kind::ScheduledChange => "scheduled_change",
            Kind::InstanceStopped => "instance_stopped",
            Kind::InstanceTerminated => "instance_terminated",
            Kind::NoOp => "no_op",
        }
    }

    /// What is done about it (upstream `actionForMessage`): every kind but a rebalance
    /// recommendation and a no-op replaces and drains the node.
    pub fn action(self) -> Action {
        match self {
            Kind::SpotInterrupted
            | Kind::ScheduledChange
            | Kind::InstanceStopped
            | Kind::InstanceTerminated => Action::CordonAndDrain,
            Kind::RebalanceRecommendation | Kind::NoOp => Action::NoAction,
        }
    }

    /// The Event reason upstream records on the NodeClaim and Node (`interruption/events`):
    /// `SpotInterrupted`, `SpotRebalanceRecommendation`, `InstanceUnhealthy` (scheduled
    /// change), `InstanceStopping`, `InstanceTerminating`; `None` for a no-op.
    pub fn event_reason(self) -> Option<&'static str> {
        match self {
            Kind::SpotInterrupted => Some("SpotInterrupted"),
            Kind::RebalanceRecommendation => Some("SpotRebalanceRecommendation"),
            Kind::ScheduledChange => Some("InstanceUnhealthy"),
            Kind::InstanceStopped => Some("InstanceStopping"),
            Kind::InstanceTerminated => Some("InstanceTerminating"),
            Kind::NoOp => None,
        }
    }

    /// The Event message upstream writes with [`Kind::event_reason`].
    pub fn event_message(self) -> &'static str {
        match self {
            Kind::SpotInterrupted => "Spot interruption warning was triggered",
            Kind::RebalanceRecommendation => "Spot rebalance recommendation was triggered",
            Kind::ScheduledChange => "An unhealthy warning was triggered for the instance",
            Kind::InstanceStopped => "Instance is stopping",
            Kind::InstanceTerminated => "Instance is terminating",
            Kind::NoOp => "",
        }
    }

    /// Whether the Event is a Warning (all but the rebalance recommendation, which is Normal).
    pub fn is_warning(self) -> bool {
        !matches!(self, Kind::RebalanceRecommendation | Kind::NoOp)
    }

    /// The disruption history's reason for a NodeClaim removed on this kind: the CamelCase of
    /// the `karpenter_nodeclaims_disrupted_total` reason (`SpotInterrupted`, `ScheduledChange`,
    /// `InstanceStopped`, `InstanceTerminated`); `None` for kinds that remove nothing.
    pub fn history_reason(self) -> Option<&'static str> {
        match self {
            Kind::SpotInterrupted => Some("SpotInterrupted"),
            Kind::ScheduledChange => Some("ScheduledChange"),
            Kind::InstanceStopped => Some("InstanceStopped"),
            Kind::InstanceTerminated => Some("InstanceTerminated"),
            Kind::RebalanceRecommendation | Kind::NoOp => None,
        }
    }

    /// The kind whose [`Kind::history_reason`] is `reason`.
    pub fn from_history_reason(reason: &str) -> Option<Kind> {
        [
            Kind::SpotInterrupted,
            Kind::ScheduledChange,
            Kind::InstanceStopped,
            Kind::InstanceTerminated,
        ]
        .into_iter()
        .find(|k| k.history_reason() == Some(reason))
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One interruption message, read from an EventBridge event.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// What it reports.
    pub kind: Kind,
    /// The EC2 instance ids it names (`i-0123...`); empty for a no-op.
    pub instance_ids: Vec<String>,
    /// The event's `time`: when EC2 or AWS Health raised it (the spot warning's two minutes
    /// count from here). `None` when the event has none.
    pub time: Option<Timestamp>,
    /// The event's `id`.
    pub id: String,
    /// The event's `detail-type`, e.g. `EC2 Spot Instance Interruption Warning`.
    pub detail_type: String,
}

/// Why a message body could not be read (the message is deleted from the queue and logged).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not a JSON object with EventBridge's `version`, `source` and `detail-type` strings.
    #[error("not an EventBridge event: {0}")]
    NotAnEvent(String),
    /// A known event whose `detail` lacks what its kind needs.
    #[error("{detail_type} event {id:?}: {why}")]
    BadDetail {
        /// The event's `detail-type`.
        detail_type: String,
        /// The event's `id`.
        id: String,
        /// What is missing or wrong, e.g. `detail.instance-id is missing`.
        why: String,
    },
}

#[derive(Deserialize)]
struct Envelope {
    version: String,
    source: String,
    #[serde(rename = "detail-type")]
    detail_type: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    time: Option<String>,
    #[serde(default)]
    detail: Value,
}

/// The EventBridge detail types read here.
pub mod detail_type {
    /// EC2's two-minute spot interruption warning.
    pub const SPOT_INTERRUPTION: &str = "EC2 Spot Instance Interruption Warning";
    /// EC2's rebalance recommendation.
    pub const REBALANCE: &str = "EC2 Instance Rebalance Recommendation";
    /// An AWS Health event.
    pub const HEALTH: &str = "AWS Health Event";
    /// An EC2 instance state change.
    pub const STATE_CHANGE: &str = "EC2 Instance State-change Notification";
}

/// Read one queue message body. An empty body is a no-op, as upstream reads it.
///
/// Errors: the body is not an EventBridge event, or a known event lacks its instance id(s).
pub fn parse(body: &str) -> Result<Message, ParseError> {
    if body.trim().is_empty() {
        return Ok(Message {
            kind: Kind::NoOp,
            instance_ids: vec![],
            time: None,
            id: String::new(),
            detail_type: String::new(),
        });
    }
    let env: Envelope = serde_json::from_str(body).map_err(|e| {
        let mut s = e.to_string();
        s.truncate(200);
        ParseError::NotAnEvent(s)
    })?;
    let bad = |why: String| ParseError::BadDetail {
        detail_type: env.detail_type.clone(),
        id: env.id.clone(),
        why,
    };
    let time = match env.time.as_deref() {
        None | Some("") => None,
        Some(t) => Some(
            t.parse::<Timestamp>()
                .map_err(|e| bad(format!("time {t:?} is not RFC 3339: {e}")))?,
        ),
    };
    let instance_id = || -> Result<Vec<String>, ParseError> {
        match env.detail.get("instance-id").and_then(Value::as_str) {
            Some(id) if !id.is_empty() => Ok(vec![id.to_string()]),
            _ => Err(bad("detail.instance-id is missing".into())),
        }
    };
    let (kind, instance_ids) = match (
        env.version.as_str(),
        env.source.as_str(),
        env.detail_type.as_str(),
    ) {
        ("0", "aws.ec2", detail_type::SPOT_INTERRUPTION) => (Kind::SpotInterrupted, instance_id()?),
        ("0", "aws.ec2", detail_type::REBALANCE) => (Kind::RebalanceRecommendation, instance_id()?),
        ("0", "aws.health", detail_type::HEALTH) => {
            let field = |k: &str| env.detail.get(k).and_then(Value::as_str);
            if field("service") != Some("EC2")
                || field("eventTypeCategory") != Some("scheduledChange")
            {
                (Kind::NoOp, vec![])
            } else {
                let entities = env
                    .detail
                    .get("affectedEntities")
                    .and_then(Value::as_array)
                    .ok_or_else(|| bad("detail.affectedEntities is missing".into()))?;
                let ids: Vec<String> = entities
                    .iter()
                    .filter_map(|e| e.get("entityValue").and_then(Value::as_str))
                    .filter(|v| !v.is_empty())
                    .map(str::to_string)
                    .collect();
                (Kind::ScheduledChange, ids)
            }
        }
        ("0", "aws.ec2", detail_type::STATE_CHANGE) => {
            let state = env
                .detail
                .get("state")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("detail.state is missing".into()))?
                .to_ascii_lowercase();
            match state.as_str() {
                "stopping" | "stopped" => (Kind::InstanceStopped, instance_id()?),
                "shutting-down" | "terminated" => (Kind::InstanceTerminated, instance_id()?),
                _ => (Kind::NoOp, vec![]),
            }
        }
        _ => (Kind::NoOp, vec![]),
    };
    Ok(Message {
        kind,
        instance_ids,
        time,
        id: env.id,
        detail_type: env.detail_type,
    })
}

/// The EC2 instance id of an AWS providerID (`aws:///us-west-2a/i-0123...`), or of the
/// simulated cloud's, which has the same shape; `None` for any other shape.
pub fn instance_id(provider_id: &str) -> Option<&str> {
    let id = provider_id.rsplit('/').next()?;
    (provider_id.starts_with("aws://") && id.starts_with("i-")).then_some(id)
}

/// EventBridge event bodies as EC2 and AWS Health send them, for the simulated cloud's queue
/// and the tests. `id` is the event's id, `time` when it was raised.
pub mod event {
    use super::*;

    fn envelope(
        id: &str,
        source: &str,
        detail_type: &str,
        (account, region): (&str, &str),
        time: Timestamp,
        resources: Vec<String>,
        detail: Value,
    ) -> String {
        json!({
            "version": "0",
            "id": id,
            "detail-type": detail_type,
            "source": source,
            "account": account,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "region": region,
            "resources": resources,
            "detail": detail,
        })
        .to_string()
    }

    fn instance_arn(account: &str, region: &str, instance_id: &str) -> String {
        format!("arn:aws:ec2:{region}:{account}:instance/{instance_id}")
    }

    /// EC2's spot interruption warning for `instance_id`, raised at `time`; the instance is
    /// reclaimed ([`SPOT_WARNING`]) later (`instance-action` `terminate`).
    pub fn spot_interruption(
        id: &str,
        account: &str,
        region: &str,
        instance_id: &str,
        time: Timestamp,
    ) -> String {
        envelope(
            id,
            "aws.ec2",
            detail_type::SPOT_INTERRUPTION,
            (account, region),
            time,
            vec![instance_arn(account, region, instance_id)],
            json!({"instance-id": instance_id, "instance-action": "terminate"}),
        )
    }

    /// EC2's rebalance recommendation for `instance_id`.
    pub fn rebalance_recommendation(
        id: &str,
        account: &str,
        region: &str,
        instance_id: &str,
        time: Timestamp,
    ) -> String {
        envelope(
            id,
            "aws.ec2",
            detail_type::REBALANCE,
            (account, region),
            time,
            vec![instance_arn(account, region, instance_id)],
            json!({"instance-id": instance_id}),
        )
    }

    /// An AWS Health scheduled change (EC2 instance retirement) for `instance_ids`.
    pub fn scheduled_change(
        id: &str,
        account: &str,
        region: &str,
        instance_ids: &[&str],
        time: Timestamp,
    ) -> String {
        let start = time.strftime("%a, %-d %b %Y %H:%M:%S GMT").to_string();
        envelope(
            id,
            "aws.health",
            detail_type::HEALTH,
            (account, region),
            time,
            instance_ids
                .iter()
                .map(|i| instance_arn(account, region, i))
                .collect(),
            json!({
                "eventArn": format!("arn:aws:health:{region}::event/EC2/EC2_INSTANCE_RETIREMENT_SCHEDULED/{id}"),
                "service": "EC2",
                "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
                "eventTypeCategory": "scheduledChange",
                "startTime": start,
                "endTime": start,
                "eventDescription": [{"language": "en_US", "latestDescription": "The instance is scheduled for retirement."}],
                "affectedEntities": instance_ids.iter().map(|i| json!({"entityValue": i})).collect::<Vec<_>>(),
            }),
        )
    }

    /// EC2's state-change notification: `instance_id` entered `state` (`pending`, `running`,
    /// `stopping`, `stopped`, `shutting-down`, `terminated`).
    pub fn state_change(
        id: &str,
        account: &str,
        region: &str,
        instance_id: &str,
        state: &str,
        time: Timestamp,
    ) -> String {
        envelope(
            id,
            "aws.ec2",
            detail_type::STATE_CHANGE,
            (account, region),
            time,
            vec![instance_arn(account, region, instance_id)],
            json!({"instance-id": instance_id, "state": state}),
        )
    }
}

#[cfg(test)]
mod tests;
