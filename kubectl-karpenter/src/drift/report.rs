//! What `drift explain` reports about one NodeClaim: the document printed as text, JSON and
//! YAML (field names are stable), and how a stamp compares with the object it was taken from.

use crds::hash::{HashedFields, Stamp};
use jiff::Timestamp;
use karpenter_core::lifecycle::drift::{self, HashComparison};
use serde::Serialize;

/// Everything `drift explain` says about one NodeClaim (the JSON and YAML document; field
/// names are stable).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The NodeClaim's name.
    pub name: String,
    /// Its Node, once registered.
    pub node: Option<String>,
    /// Its NodePool (label `karpenter.sh/nodepool`).
    pub nodepool: Option<String>,
    /// Its EC2NodeClass (`spec.nodeClassRef`), when it references one.
    pub nodeclass: Option<String>,
    /// Whether it is drifted: `Drifted=True`, or drift detected now.
    pub drifted: bool,
    /// Who says it is drifted; absent when it is not.
    pub source: Option<Source>,
    /// The drift reason: the condition's, else the first detected.
    pub reason: Option<String>,
    /// What changed, from the condition's message and from the checks made now.
    pub changes: Vec<ChangeLine>,
    /// The `Drifted` condition as the controller wrote it, if present.
    pub condition: Option<DriftedCondition>,
    /// What the checks made now (without the cloud) conclude.
    pub live: Live,
    /// The NodePool stamp against the NodePool now.
    pub nodepool_hash: HashReport,
    /// The EC2NodeClass stamp against the EC2NodeClass now.
    pub nodeclass_hash: HashReport,
    /// Why it is not drifted (one line per check), or notes on a drifted one.
    pub why: Vec<String>,
    /// One sentence: the verdict, who gave it, and why.
    pub message: String,
}

/// Who says a NodeClaim, or one change, is drifted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Source {
    /// The controller marked it (`Drifted=True`, or listed in its message).
    Controller,
    /// The checks made now find it; the controller has not marked it (yet).
    Detected,
    /// Both (changes only).
    Both,
}

/// One change behind the drift.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeLine {
    /// The drift reason it belongs to, e.g. `NodePoolDrifted`.
    pub reason: String,
    /// The change, e.g. `spec.template.spec.taints: added dedicated=gpu:NoSchedule`.
    pub change: String,
    /// Where it was seen.
    pub source: Source,
}

/// The NodeClaim's `Drifted` condition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftedCondition {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// E.g. `NodePoolDrifted`.
    pub reason: String,
    /// The controller's changes, `; `-separated.
    pub message: String,
    /// When the status last changed.
    pub last_transition_time: Option<Timestamp>,
}

/// The verdict of the checks made now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Live {
    /// `drifted`, `not_drifted`, `not_launched` or `unknown` (in JSON).
    pub verdict: LiveVerdict,
    /// Why the checks could not be made (`unknown`).
    pub detail: Option<String>,
}

/// What the checks made now conclude.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum LiveVerdict {
    /// A check made now finds a difference (the changes are listed).
    Drifted,
    /// No check made finds a difference (checks that need the cloud are not made).
    NotDrifted,
    /// Not launched: drift does not apply.
    NotLaunched,
    /// A check could not be made.
    Unknown,
}

/// A stamp on the NodeClaim against the object now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HashReport {
    /// The hash annotation on the NodeClaim (`karpenter.sh/nodepool-hash` or
    /// `karpenter.k8s.aws/ec2nodeclass-hash`); absent when not stamped.
    pub stamped: Option<String>,
    /// The matching `…-hash-version` annotation, e.g. `v3`; absent when not stamped.
    pub stamped_version: Option<String>,
    /// The object's hash now; absent when the object was not found.
    pub current: Option<String>,
    /// The hash version the controller uses.
    pub current_version: String,
    /// How they compare; absent when the object was not found.
    pub comparison: Option<HashComparison>,
}

impl HashReport {
    pub(super) fn new(stamp: &Stamp, current: Option<&HashedFields>, version: &str) -> HashReport {
        HashReport {
            stamped: stamp.hash.clone(),
            stamped_version: stamp.version.clone(),
            current: current.map(HashedFields::hash),
            current_version: version.to_owned(),
            comparison: current.map(|c| drift::compare(stamp, c, version)),
        }
    }

    /// One line on how the stamp compares, for a NodeClaim found not drifted.
    pub(super) fn why(&self, what: &str, name: Option<&str>) -> String {
        let stamped = self.stamped.as_deref().unwrap_or("?");
        let version = self.stamped_version.as_deref().unwrap_or("?");
        match &self.comparison {
            None => match name {
                Some(name) => format!("{what} {name} not found: its hash is not compared"),
                None => format!("no {what}: its hash is not compared"),
            },
            Some(HashComparison::Equal) => {
                format!("{what} hash and version equal ({stamped}, {version})")
            }
            Some(HashComparison::VersionMismatch) => format!(
                "{what} stamped under hash version {version} (controller uses {}): will be \
                 re-stamped, not drifted",
                self.current_version
            ),
            Some(HashComparison::NotStamped) => {
                format!("no {what} hash and version stamped: not compared")
            }
            Some(HashComparison::Differs) => format!(
                "{what} hash differs ({stamped} -> {})",
                self.current.as_deref().unwrap_or("?")
            ),
        }
    }
}
