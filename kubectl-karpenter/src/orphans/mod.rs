//! `kubectl karpenter orphans`: what Karpenter launched or tracks that nothing owns any more, or
//! that is stuck on its way out — NodeClaims that never launched or registered, NodeClaims stuck
//! terminating, Nodes and cloud instances without a NodeClaim, NodeClaims whose instance is
//! gone, and NodeClaims that claim another's providerID — and `orphans delete`, which cleans them up after a preview and a confirmation.
//!
//! The core is pure ([`classify`] finds orphans, [`plan`] turns them into steps, [`table`] prints
//! them); [`args`] is the command line, [`cloud`] reads and terminates instances (failing with a
//! [`cloud_error::CloudError`]), [`execute`] applies steps, and [`command`] wires the two
//! subcommands together.

pub mod args;
pub mod classify;
pub mod cloud;
pub mod cloud_error;
pub mod command;
#[cfg(feature = "aws")]
pub mod ec2;
pub mod execute;
pub mod plan;
pub mod table;

use std::fmt;
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;

/// What kind of orphan a row is (the KIND column), in the order the table lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Kind {
    /// A NodeClaim whose instance was not launched within the launch timeout.
    NotLaunched,
    /// A launched NodeClaim whose Node did not register within the registration TTL.
    NotRegistered,
    /// A NodeClaim being deleted for longer than `--stuck-after`.
    StuckTerminating,
    /// A Node labelled `karpenter.sh/nodepool` that no NodeClaim's providerID matches.
    NodeWithoutNodeClaim,
    /// A cloud instance tagged for the cluster that no NodeClaim owns.
    InstanceWithoutNodeClaim,
    /// A launched NodeClaim whose instance the cloud no longer has.
    InstanceGone,
    /// A NodeClaim whose `status.providerID` another NodeClaim claims too (two records of one
    /// instance and Node); the one the instance is tagged for is not reported.
    DuplicateProviderID,
}

impl Kind {
    /// The column text (also the JSON value).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::NotLaunched => "NotLaunched",
            Kind::NotRegistered => "NotRegistered",
            Kind::StuckTerminating => "StuckTerminating",
            Kind::NodeWithoutNodeClaim => "NodeWithoutNodeClaim",
            Kind::InstanceWithoutNodeClaim => "InstanceWithoutNodeClaim",
            Kind::InstanceGone => "InstanceGone",
            Kind::DuplicateProviderID => "DuplicateProviderID",
        }
    }

    /// What the NAME of a row of this kind names.
    pub fn resource(self) -> Resource {
        match self {
            Kind::NotLaunched | Kind::NotRegistered | Kind::StuckTerminating => Resource::NodeClaim,
            Kind::InstanceGone | Kind::DuplicateProviderID => Resource::NodeClaim,
            Kind::NodeWithoutNodeClaim => Resource::Node,
            Kind::InstanceWithoutNodeClaim => Resource::Instance,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kind of thing a row's NAME names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Resource {
    /// A `nodeclaims.karpenter.sh` object.
    NodeClaim,
    /// A `nodes` object.
    Node,
    /// A cloud instance (by instance id).
    Instance,
}

/// A cloud instance as the orphan check sees it (from EC2, or the sandbox's `Instance` objects).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudInstance {
    /// Instance id, e.g. `i-0abc…`.
    pub id: String,
    /// `aws:///<zone>/<instance-id>`.
    #[serde(rename = "providerID")]
    pub provider_id: String,
    /// Instance type, e.g. `m5.large`.
    pub instance_type: Option<String>,
    /// Availability zone, e.g. `us-east-1a`; `None` when the source does not say.
    pub zone: Option<String>,
    /// `on-demand`, `spot` or `reserved`.
    pub capacity_type: Option<String>,
    /// Price of its offering, USD per hour.
    pub hourly_price: Option<f64>,
    /// When it launched (EC2's `LaunchTime`); instances younger than
    /// [`Thresholds::min_instance_age`] are left alone.
    pub launch_time: Option<Timestamp>,
    /// The `karpenter.sh/nodeclaim` tag.
    pub nodeclaim: Option<String>,
    /// The `karpenter.sh/nodepool` tag.
    pub nodepool: Option<String>,
    /// Already shutting down (EC2 `shutting-down`, or a deleted `Instance` object).
    pub terminating: bool,
}

/// What is known of the instance an orphan involves.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum InstanceState {
    /// The cloud lists it (running, pending or stopped: not terminated).
    Running(CloudInstance),
    /// The cloud does not have it any more.
    Gone {
        /// The providerID its NodeClaim or Node carries, e.g. `aws:///us-east-1a/i-0abc…`.
        #[serde(rename = "providerID")]
        provider_id: String,
    },
    /// The cloud was not checked; the providerID, when there is one.
    Unchecked {
        /// The providerID its NodeClaim or Node carries, when it has one.
        #[serde(rename = "providerID")]
        provider_id: Option<String>,
    },
    /// There is no instance to speak of (never launched, nothing tagged for it).
    None,
}

impl InstanceState {
    /// The instance id, when known (running, or parsed from the providerID).
    pub fn id(&self) -> Option<&str> {
        match self {
            InstanceState::Running(i) => Some(&i.id),
            InstanceState::Gone { provider_id } => instance_id(provider_id),
            InstanceState::Unchecked { provider_id } => {
                provider_id.as_deref().and_then(instance_id)
            }
            InstanceState::None => None,
        }
    }

    /// The running instance, if the cloud lists one.
    pub fn running(&self) -> Option<&CloudInstance> {
        match self {
            InstanceState::Running(i) => Some(i),
            _ => None,
        }
    }
}

/// The instance id at the end of a providerID (`aws:///us-east-1a/i-0abc` → `i-0abc`).
pub fn instance_id(provider_id: &str) -> Option<&str> {
    provider_id.rsplit('/').next().filter(|id| !id.is_empty())
}

/// A Node or NodeClaim an orphan involves, as far as cleaning it up needs to know.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// The NodeClaim's or Node's `metadata.name`.
    pub name: String,
    /// It has a deletionTimestamp.
    pub deleting: bool,
    /// `metadata.finalizers`; while `karpenter.sh/termination` is there, deletion waits for
    /// Karpenter.
    pub finalizers: Vec<String>,
}

impl ObjectRef {
    /// Whether it carries Karpenter's `karpenter.sh/termination` finalizer.
    pub fn has_termination_finalizer(&self) -> bool {
        self.finalizers
            .iter()
            .any(|f| f == crds::labels::TERMINATION_FINALIZER)
    }
}

/// One orphan: a table row, and what `orphans delete` needs to clean it up.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Orphan {
    /// What kind of orphan it is (the KIND column); it also says what `name` names.
    pub kind: Kind,
    /// NodeClaim name, Node name or instance id (see [`Kind::resource`]).
    pub name: String,
    /// Its NodePool (label or tag), when known.
    pub nodepool: Option<String>,
    /// The NodeClaim involved (the orphan itself for NodeClaim kinds).
    pub nodeclaim: Option<ObjectRef>,
    /// The Node involved, if one exists.
    pub node: Option<ObjectRef>,
    /// Pods on that Node that are not finished, when counted.
    pub pods: Option<usize>,
    /// What the cloud says of its instance: running, gone, not checked, or none.
    pub instance: InstanceState,
    /// When it entered the state that makes it an orphan (see the SINCE column).
    pub since: Option<Timestamp>,
    /// What it is stuck on, in short clauses (joined with `; ` in the DETAIL column).
    pub detail: Vec<String>,
}

impl Orphan {
    /// `nodeclaim.karpenter.sh/<name>`, `node/<name>` or `instance/<id>`.
    pub fn qualified_name(&self) -> String {
        let prefix = match self.kind.resource() {
            Resource::NodeClaim => "nodeclaim.karpenter.sh",
            Resource::Node => "node",
            Resource::Instance => "instance",
        };
        format!("{prefix}/{}", self.name)
    }
}

/// When things count as orphans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// A NodeClaim not Launched this long after creation is [`Kind::NotLaunched`].
    pub launch_timeout: Duration,
    /// A NodeClaim Launched this long ago but not Registered is [`Kind::NotRegistered`].
    pub registration_ttl: Duration,
    /// A NodeClaim deleted this long ago and still present is [`Kind::StuckTerminating`].
    pub stuck_after: Duration,
    /// Instances (and launches) younger than this are left alone: a launch may be in flight.
    pub min_instance_age: Duration,
}

impl Default for Thresholds {
    /// Upstream's defaults: launch timeout 5m, registration TTL 15m, stuck after 5m, orphan
    /// instance minimum age 30s.
    fn default() -> Self {
        Thresholds {
            launch_timeout: Duration::from_secs(5 * 60),
            registration_ttl: Duration::from_secs(15 * 60),
            stuck_after: Duration::from_secs(5 * 60),
            min_instance_age: Duration::from_secs(30),
        }
    }
}

/// The cloud's instances, or why they were not checked.
#[derive(Clone, Debug, PartialEq)]
pub enum CloudView {
    /// Listed from `source` (e.g. `sandbox` or `EC2 us-east-1, cluster demo`).
    Checked {
        /// Where the list came from.
        source: String,
        /// Instances tagged for the cluster that are not terminated.
        instances: Vec<CloudInstance>,
    },
    /// Not listed: `--no-cloud`, or the cloud could not be read.
    Unchecked {
        /// Why (printed as a warning unless the user asked with `--no-cloud`).
        reason: String,
    },
}

impl CloudView {
    /// The instances, when the cloud was checked.
    pub fn instances(&self) -> Option<&[CloudInstance]> {
        match self {
            CloudView::Checked { instances, .. } => Some(instances),
            CloudView::Unchecked { .. } => None,
        }
    }

    /// Whether the cloud was checked.
    pub fn checked(&self) -> bool {
        matches!(self, CloudView::Checked { .. })
    }
}

#[cfg(test)]
mod fixtures;
