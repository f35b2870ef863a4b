//! The durable disruption history (an extension of this project): one record per NodeClaim
//! Karpenter removed, for any reason, and per disruption it rolled back, kept in one ConfigMap
//! ([`CONFIGMAP_NAME`], key [`RECORDS_KEY`], JSON Lines, oldest first) in the controller's own
//! namespace, so it outlives controller restarts and Event expiry and reads with plain
//! `kubectl get configmap karpenter-disruption-history -o yaml`.
//!
//! How a record comes to be: whoever deletes a NodeClaim for a reason first sets its
//! `DisruptionReason` condition (upstream Karpenter v1's `ConditionTypeDisruptionReason`, with
//! the reason as the condition's reason); the node's drain writes the pods it moves on the
//! NodeClaim ([`DRAINED_PODS_ANNOTATION`]); when the termination finalizer releases the NodeClaim
//! (its instance gone) the controller appends the record ([`Record::removal`]). A NodeClaim
//! deleted without a Karpenter reason (a user's `kubectl delete`) is recorded as
//! [`reason::DELETED`]. Serial upgrade steps are records with reason [`reason::DRIFTED`]; the
//! upgrade view reads them back as steps ([`upgrade_steps`]).
//!
//! Bounded: at most [`MAX_RECORDS`] records and [`MAX_BYTES`] bytes (well under the 1 MiB a
//! ConfigMap may hold); the oldest go first. Appends are idempotent by [`Record::id`].
//!
//! Pure: no I/O.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::NodeClaim;
use crate::conditions::{self, DISRUPTION_REASON};
use crate::labels::{
    CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, TOPOLOGY_ZONE_LABEL,
};
use crate::upgrade::{HISTORY_LENGTH, Outcome, StepRecord};

/// Name of the ConfigMap that holds the history, in the controller's namespace (the leader
/// Lease's: `LEADER_ELECTION_NAMESPACE`, else the pod's, else `kube-system`).
pub const CONFIGMAP_NAME: &str = "karpenter-disruption-history";
/// The ConfigMap key whose value is the history: one JSON [`Record`] per line, oldest first.
pub const RECORDS_KEY: &str = "records.jsonl";
/// The most records kept; older ones are dropped.
pub const MAX_RECORDS: usize = 500;
/// The most bytes of [`RECORDS_KEY`] kept (a ConfigMap holds at most 1 MiB); older records are
/// dropped until the text fits.
pub const MAX_BYTES: usize = 512 * 1024;
/// On a NodeClaim being drained: the reschedulable pods its node had when the drain began, as
/// JSON [`DrainedPods`], written once by node termination.
pub const DRAINED_PODS_ANNOTATION: &str = "disruption.karpenter.sh/drained-pods";
/// On a consolidation candidate: how many NodeClaims its command replaces together (the
/// replacement's price is shared evenly among them in each one's cost change).
pub const CANDIDATES_ANNOTATION: &str = "disruption.karpenter.sh/candidates";
/// The most pod names a record (and [`DRAINED_PODS_ANNOTATION`]) lists; the count is exact.
pub const MAX_POD_NAMES: usize = 20;

/// Why a NodeClaim was removed: the reason of its `DisruptionReason` condition. Upstream's
/// budget reasons (`Empty`, `Underutilized`, `Drifted`) are upstream's spelling; the others
/// are the CamelCase of upstream's `karpenter_nodeclaims_disrupted_total` reasons.
pub mod reason {
    /// An empty node removed by consolidation (upstream `DisruptionReasonEmpty`).
    pub const EMPTY: &str = "Empty";
    /// An underutilized node deleted or replaced by consolidation.
    pub const UNDERUTILIZED: &str = "Underutilized";
    /// A drifted node replaced (or removed, when empty) by a serial upgrade step.
    pub const DRIFTED: &str = "Drifted";
    /// The NodeClaim reached `expireAfter`.
    pub const EXPIRED: &str = "Expired";
    /// Its node matched one of the cloud provider's repair policies for longer than the
    /// policy tolerates (node repair, feature gate `NodeRepair`).
    pub const UNHEALTHY: &str = "Unhealthy";
    /// Not launched within the launch timeout (5 minutes).
    pub const LAUNCH_TIMEOUT: &str = "LaunchTimeout";
    /// No node registered within the registration timeout (15 minutes).
    pub const REGISTRATION_TIMEOUT: &str = "RegistrationTimeout";
    /// The NodeClaim's instance no longer exists in the cloud.
    pub const GARBAGE_COLLECTED: &str = "GarbageCollected";
    /// Its Capacity Block was about to end: deleted 40 minutes before, ahead of EC2's
    /// reclamation (upstream `capacityreservation.expiration`).
    pub const CAPACITY_BLOCK_EXPIRING: &str = "CapacityBlockExpiring";
    /// The launch found no capacity for any of its offerings.
    pub const INSUFFICIENT_CAPACITY: &str = "InsufficientCapacity";
    /// The launch found the node class not ready.
    pub const NODE_CLASS_NOT_READY: &str = "NodeClassNotReady";
    /// A replacement deleted because its disruption was rolled back; recorded as the rollback
    /// ([`super::Outcome::RolledBack`]), not as a removal of its own.
    pub const ROLLED_BACK: &str = "RolledBack";
    /// Deleted without a Karpenter reason: a user's `kubectl delete`, its node's deletion, or
    /// its NodePool's.
    pub const DELETED: &str = "Deleted";
}

/// The pods a drain moves, as written in [`DRAINED_PODS_ANNOTATION`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainedPods {
    /// How many reschedulable pods the node had when its drain began.
    pub count: u32,
    /// `namespace/name` of the first [`MAX_POD_NAMES`] of them.
    #[serde(default)]
    pub pods: Vec<String>,
}

impl DrainedPods {
    /// The pods named `names` (`namespace/name`), the list capped at [`MAX_POD_NAMES`].
    pub fn of(mut names: Vec<String>) -> DrainedPods {
        names.sort();
        let count = u32::try_from(names.len()).unwrap_or(u32::MAX);
        names.truncate(MAX_POD_NAMES);
        DrainedPods { count, pods: names }
    }
}

/// The NodeClaim that replaced a removed one (or whose rollback a record tells).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Replacement {
    /// The replacement NodeClaim's name.
    pub nodeclaim: String,
    /// Its instance type, once launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// Its offering's price, USD/hour, once launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<f64>,
    /// How many NodeClaims it replaces together (a multi-node consolidation: several); the
    /// record's cost change counts `price / replaces`.
    #[serde(default = "one")]
    pub replaces: u32,
}

fn one() -> u32 {
    1
}

/// One entry of the history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// What makes it unique, for idempotent appends: the NodeClaim's uid for a removal;
    /// `<uid>/rollback/<replacement>` for a rollback.
    pub id: String,
    /// The NodeClaim removed (for a rollback: the one that keeps running).
    pub nodeclaim: String,
    /// Its NodePool (`karpenter.sh/nodepool` label); empty when unknown.
    #[serde(default)]
    pub nodepool: String,
    /// Its node, when one registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Its instance type, once launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// `on-demand`, `spot` or `reserved`, once launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<String>,
    /// Its zone, once launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Why (one of [`reason`]).
    pub reason: String,
    /// More on why, e.g. the rollback's cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// [`Outcome::Succeeded`]: the NodeClaim is gone; [`Outcome::RolledBack`]: its disruption
    /// was abandoned (the replacement did not initialize) and it keeps running.
    pub outcome: Outcome,
    /// When Karpenter decided (the command's or step's start, else the `DisruptionReason`
    /// condition's transition, else the deletion).
    pub decided: Timestamp,
    /// When the NodeClaim was released (its instance gone), or the rollback happened.
    pub finished: Timestamp,
    /// Reschedulable pods its node had when the drain began (see [`DRAINED_PODS_ANNOTATION`]).
    #[serde(default)]
    pub pods_moved: u32,
    /// `namespace/name` of at most [`MAX_POD_NAMES`] of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<String>,
    /// The removed NodeClaim's offering price, USD/hour, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<f64>,
    /// The replacement, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<Replacement>,
    /// USD/hour the fleet's cost changed by: the replacement's share minus the removed price
    /// (negative: cheaper). Absent when a price is unknown, and for a rollback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_change: Option<f64>,
}

/// What a removal record is made of besides the NodeClaim itself.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Removal {
    /// When the NodeClaim was released.
    pub finished: Option<Timestamp>,
    /// Its offering price, USD/hour.
    pub price: Option<f64>,
    /// Its replacement (looked up by the caller from the NodeClaim's replacement annotation).
    pub replacement: Option<Replacement>,
}

/// The cost change of removing something priced `price` with `replacement` taking its place:
/// `replacement.price / replacement.replaces - price`, or `-price` without a replacement; `None`
/// when a price is unknown.
pub fn cost_change(price: Option<f64>, replacement: Option<&Replacement>) -> Option<f64> {
    let removed = price?;
    let added = match replacement {
        None => 0.0,
        Some(r) => r.price? / f64::from(r.replaces.max(1)),
    };
    Some(added - removed)
}

fn label(claim: &NodeClaim, key: &str) -> Option<String> {
    claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .filter(|v| !v.is_empty())
        .cloned()
}

fn annotation<'a>(claim: &'a NodeClaim, key: &str) -> Option<&'a str> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// How long before its deletion a NodeClaim's `DisruptionReason` may have been set and still
/// explain it: Karpenter sets it just before its delete; one that is older was left by a delete
/// that did not go through (a conflict), and a later deletion is someone else's.
pub const REASON_WINDOW: jiff::SignedDuration = jiff::SignedDuration::from_secs(300);

/// `claim`'s `DisruptionReason` condition when it explains the deletion: True, with a reason,
/// and (once deleting) set at most [`REASON_WINDOW`] before the deletion.
fn reason_condition(claim: &NodeClaim) -> Option<&crate::Condition> {
    let conds = claim.status.as_ref().map(|s| s.conditions.as_slice())?;
    let deleted = claim.metadata.deletion_timestamp.as_ref().map(|t| t.0);
    conditions::get(conds, DISRUPTION_REASON)
        .filter(|c| c.status == "True" && !c.reason.is_empty())
        .filter(|c| {
            deleted.is_none_or(|d| d.duration_since(c.last_transition_time.0) <= REASON_WINDOW)
        })
}

/// The Karpenter reason `claim` was deleted for: its `DisruptionReason` condition (see
/// [`REASON_WINDOW`]), else the reason of the disruption command that held it
/// ([`crate::disruption::REASON_ANNOTATION`]: the command caused the deletion even when another
/// path carried it out, such as the node going away with its interrupted instance), else
/// [`reason::DELETED`].
pub fn disruption_reason(claim: &NodeClaim) -> String {
    reason_condition(claim)
        .map(|c| c.reason.clone())
        .or_else(|| {
            annotation(claim, crate::disruption::REASON_ANNOTATION)
                .filter(|r| !r.is_empty())
                .map(String::from)
        })
        .unwrap_or_else(|| reason::DELETED.to_string())
}

/// The name of the NodeClaim that replaces `claim`: the consolidation command's or the upgrade
/// step's replacement annotation, when set and not empty.
pub fn replacement_name(claim: &NodeClaim) -> Option<String> {
    annotation(claim, crate::disruption::REPLACEMENT_ANNOTATION)
        .or_else(|| annotation(claim, crate::upgrade::REPLACEMENT_ANNOTATION))
        .map(String::from)
}

/// How many NodeClaims `claim`'s replacement replaces together ([`CANDIDATES_ANNOTATION`];
/// 1 when absent or unreadable, as for an upgrade step).
pub fn replaced_together(claim: &NodeClaim) -> u32 {
    annotation(claim, CANDIDATES_ANNOTATION)
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(1)
}

/// When Karpenter decided to remove `claim`: the consolidation command's or upgrade step's
/// start annotation, else the `DisruptionReason` condition's transition (when it explains the
/// deletion), else the deletion timestamp; `None` when none is known.
pub fn decided_at(claim: &NodeClaim) -> Option<Timestamp> {
    let started = [
        crate::disruption::STARTED_ANNOTATION,
        crate::upgrade::STEP_STARTED_ANNOTATION,
    ]
    .into_iter()
    .find_map(|k| annotation(claim, k).and_then(|v| v.parse::<Timestamp>().ok()));
    let condition = reason_condition(claim).map(|c| c.last_transition_time.0);
    started
        .or(condition)
        .or_else(|| claim.metadata.deletion_timestamp.as_ref().map(|t| t.0))
}

impl Record {
    /// The record of `claim`'s removal, as its termination finalizer releases it at
    /// `removal.finished` (`None`: the decision time). The reason, decision time and pods come
    /// from the NodeClaim ([`disruption_reason`], [`decided_at`], [`DRAINED_PODS_ANNOTATION`]);
    /// an unreadable pods annotation counts no pods.
    pub fn removal(claim: &NodeClaim, removal: Removal) -> Record {
        let status = claim.status.as_ref();
        let node = status
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        let drained: DrainedPods = annotation(claim, DRAINED_PODS_ANNOTATION)
            .and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or_default();
        let decided = decided_at(claim).or(removal.finished).unwrap_or_default();
        let finished = removal.finished.unwrap_or(decided);
        let cost_change = cost_change(removal.price, removal.replacement.as_ref());
        Record {
            id: claim
                .metadata
                .uid
                .clone()
                .or_else(|| claim.metadata.name.clone())
                .unwrap_or_default(),
            nodeclaim: claim.metadata.name.clone().unwrap_or_default(),
            nodepool: label(claim, NODEPOOL_LABEL).unwrap_or_default(),
            node,
            instance_type: label(claim, INSTANCE_TYPE_LABEL),
            capacity_type: label(claim, CAPACITY_TYPE_LABEL),
            zone: label(claim, TOPOLOGY_ZONE_LABEL),
            reason: disruption_reason(claim),
            message: None,
            outcome: Outcome::Succeeded,
            decided,
            finished,
            pods_moved: drained.count,
            pods: drained.pods,
            price: removal.price,
            replacement: removal.replacement,
            cost_change,
        }
    }

    /// The record of a rolled-back disruption of `claim` (it keeps running) for `reason`, whose
    /// `replacement` was deleted at `at` because of `why`.
    pub fn rollback(
        claim: &NodeClaim,
        reason: &str,
        replacement: Replacement,
        why: &str,
        at: Timestamp,
    ) -> Record {
        let mut record = Record::removal(
            claim,
            Removal {
                finished: Some(at),
                price: None,
                replacement: None,
            },
        );
        record.id = format!("{}/rollback/{}", record.id, replacement.nodeclaim);
        record.reason = reason.to_string();
        record.message = Some(why.to_string());
        record.outcome = Outcome::RolledBack;
        record.pods_moved = 0;
        record.pods = Vec::new();
        record.replacement = Some(replacement);
        record.cost_change = None;
        record
    }
}

/// A line of the history that could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line} of {CONFIGMAP_NAME} {RECORDS_KEY} is not a disruption record: {error}")]
pub struct Malformed {
    /// 1-based line number.
    pub line: usize,
    /// The JSON error.
    pub error: String,
}

/// The history as read: the records (oldest first) and the lines skipped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    /// Every readable record, in stored order (oldest first).
    pub records: Vec<Record>,
    /// Lines that are not records (hand edits, a future format); skipped.
    pub malformed: Vec<Malformed>,
}

/// Read the history text (JSON Lines; blank lines ignored). Never fails: unreadable lines are
/// reported in [`Parsed::malformed`] and skipped.
pub fn parse(text: &str) -> Parsed {
    let mut parsed = Parsed::default();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(line) {
            Ok(r) => parsed.records.push(r),
            Err(e) => parsed.malformed.push(Malformed {
                line: i + 1,
                error: e.to_string(),
            }),
        }
    }
    parsed
}

/// The history as text: one JSON record per line, each line ending in `\n`.
pub fn render(records: &[Record]) -> String {
    let mut out = String::new();
    for r in records {
        // A record is plain data (strings, numbers, timestamps): it always serializes.
        if let Ok(line) = serde_json::to_string(r) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// What [`append`] decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Append {
    /// A record with the same id is there already: nothing to write.
    AlreadyRecorded,
    /// The new text to write, with how many old records were dropped to stay within bounds and
    /// how many unreadable lines were dropped.
    Write {
        /// The history with the record appended, oldest first.
        text: String,
        /// Old records dropped for [`MAX_RECORDS`] / [`MAX_BYTES`].
        evicted: usize,
        /// Unreadable lines dropped.
        malformed: usize,
    },
}

/// `text` (the stored history, `None` when there is none yet) with `record` appended, keeping
/// at most [`MAX_RECORDS`] records and [`MAX_BYTES`] bytes (dropping the oldest first; the new
/// record is always kept), or [`Append::AlreadyRecorded`] when its id is there already.
pub fn append(text: Option<&str>, record: Record) -> Append {
    append_bounded(text, record, MAX_RECORDS, MAX_BYTES)
}

/// [`append`] with explicit bounds (records, bytes).
pub fn append_bounded(
    text: Option<&str>,
    record: Record,
    max_records: usize,
    max_bytes: usize,
) -> Append {
    let parsed = parse(text.unwrap_or_default());
    if parsed.records.iter().any(|r| r.id == record.id) {
        return Append::AlreadyRecorded;
    }
    let mut records = parsed.records;
    records.push(record);
    let mut evicted = records.len().saturating_sub(max_records.max(1));
    records.drain(..evicted);
    let mut lines: Vec<String> = records
        .iter()
        .map(|r| render(std::slice::from_ref(r)))
        .collect();
    let mut bytes: usize = lines.iter().map(String::len).sum();
    let mut first = 0;
    while bytes > max_bytes && first + 1 < lines.len() {
        bytes -= lines[first].len();
        first += 1;
    }
    evicted += first;
    lines.drain(..first);
    Append::Write {
        text: lines.concat(),
        evicted,
        malformed: parsed.malformed.len(),
    }
}

/// The serial upgrade steps of NodePool `nodepool` the history tells (records with reason
/// [`reason::DRIFTED`]), as `kubectl karpenter upgrade status` shows them: the newest
/// [`HISTORY_LENGTH`], oldest first.
pub fn upgrade_steps(records: &[Record], nodepool: &str) -> Vec<StepRecord> {
    let mut drifted: Vec<&Record> = records
        .iter()
        .filter(|r| r.nodepool == nodepool && r.reason == reason::DRIFTED)
        .collect();
    drifted.sort_by_key(|r| r.finished);
    let excess = drifted.len().saturating_sub(HISTORY_LENGTH);
    drifted
        .into_iter()
        .skip(excess)
        .map(|r| StepRecord {
            nodeclaim: r.nodeclaim.clone(),
            node: r.node.clone(),
            replacement: r.replacement.as_ref().map(|x| x.nodeclaim.clone()),
            outcome: r.outcome,
            reason: match (&r.message, r.outcome, &r.replacement) {
                (Some(m), _, _) => Some(m.clone()),
                (None, Outcome::Succeeded, None) => {
                    Some("empty node: drained without a replacement".into())
                }
                _ => None,
            },
            started: r.decided.to_string(),
            finished: r.finished.to_string(),
            seconds: r.finished.duration_since(r.decided).as_secs().max(0) as u64,
            pods_moved: r.pods_moved,
        })
        .collect()
}

#[cfg(test)]
mod tests;
