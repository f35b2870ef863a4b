//! Drift detection (upstream core `nodeclaim/disruption/drift.go`, AWS `cloudprovider/drift.go`),
//! pure: a NodeClaim is drifted when what it was launched from no longer matches its NodePool
//! (static: the template hash; `RequirementsDrifted`), its instance type is no longer offered
//! (`InstanceTypeNotFound`), or its node class now resolves to something else (`NodeClassDrift`,
//! `AMIDrift`, `SecurityGroupDrift`, `SubnetDrift`).
//!
//! Unlike upstream, which stops at the first reason, every check runs and every finding names
//! the exact change (field path with old and new value, AMI ids and names, subnet and security
//! group ids). The condition's reason is the first finding's, in upstream's order.

use std::collections::{BTreeMap, BTreeSet};

use crds::conditions::{self, reason as r};
use crds::hash::{self, FieldChange, HashedFields, Snapshot, Stamp};
use crds::{EC2NodeClass, NodeClaim, NodePool};

use crate::capacity::InstanceType;
use crate::cloud::Instance;
use crate::cloud::compatible_ami;
use crate::scheduling::requirements::{Requirement, Requirements};

/// On a NodeClaim: the name of the image its instance was launched from, recorded at launch so
/// that AMI drift can say which release the node runs (the node class's status lists only the
/// AMIs it selects now). An extension of this project.
pub const IMAGE_NAME_ANNOTATION: &str = "karpenter.k8s.aws/image-name";

/// The hash versions the controller stamps and compares (normally this project's current
/// versions; tests change them to prove that a version change re-stamps instead of drifting).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashVersions {
    /// The `karpenter.sh/nodepool-hash-version` a stamp must carry to be compared; a stamp of
    /// another version is re-stamped, not drifted.
    pub nodepool: String,
    /// The same for `karpenter.k8s.aws/ec2nodeclass-hash-version`.
    pub nodeclass: String,
}

impl Default for HashVersions {
    /// [`crds::hash::NODEPOOL_HASH_VERSION`] and [`crds::hash::EC2NODECLASS_HASH_VERSION`].
    fn default() -> Self {
        HashVersions {
            nodepool: hash::NODEPOOL_HASH_VERSION.into(),
            nodeclass: hash::EC2NODECLASS_HASH_VERSION.into(),
        }
    }
}

/// One reason a NodeClaim is drifted, with the changes behind it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Finding {
    /// Condition reason, e.g. `NodePoolDrifted`, `AMIDrift`.
    pub reason: &'static str,
    /// Human-readable changes, e.g. `spec.template.spec.taints: added dedicated=gpu:NoSchedule`.
    pub changes: Vec<String>,
}

/// What the checks concluded.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Not launched yet: drift does not apply (a `Drifted` condition is cleared).
    NotLaunched,
    /// Nothing differs.
    NotDrifted,
    /// Drifted, findings in upstream's order (the first gives the condition reason).
    Drifted(Vec<Finding>),
    /// A check could not be made (the node class has not resolved yet, ...); the `Drifted`
    /// condition is left as it is.
    Unknown(String),
}

/// The drift reasons, in the order upstream checks them (core: the NodePool hash, requirements,
/// instance type; AWS: the node class hash, AMI, security groups, subnet, capacity reservation,
/// placement group). The first finding in this order gives the condition's reason. The last two
/// are not checked here; they are known so that conditions upstream wrote read back
/// ([`split_message`]).
pub const REASONS: &[&str] = &[
    r::NODEPOOL_DRIFTED,
    r::REQUIREMENTS_DRIFTED,
    r::INSTANCE_TYPE_NOT_FOUND,
    r::NODE_CLASS_DRIFT,
    r::AMI_DRIFT,
    r::SECURITY_GROUP_DRIFT,
    r::SUBNET_DRIFT,
    r::CAPACITY_RESERVATION_DRIFT,
    r::PLACEMENT_GROUP_DRIFT,
];

/// Longest change text kept in a condition message, in characters.
const MAX_CHANGE: usize = 256;
/// Longest condition message, in bytes (the API allows 32768; a short message keeps Events and
/// `kubectl describe` readable). Changes beyond it are counted, not listed.
const MAX_MESSAGE: usize = 1024;

impl Verdict {
    /// The condition message for drifted findings: each change as `<Reason>: <change>`,
    /// `; `-separated, each at most 256 characters and the whole at most 1 KiB (the rest is
    /// counted as `(+N more changes)`). [`split_message`] reads it back.
    pub fn message(findings: &[Finding]) -> String {
        let all: Vec<String> = findings
            .iter()
            .flat_map(|f| {
                f.changes
                    .iter()
                    .map(move |c| format!("{}: {}", f.reason, shorten(c, MAX_CHANGE)))
            })
            .collect();
        let mut out = String::new();
        for (i, change) in all.iter().enumerate() {
            let more = all.len() - i;
            if !out.is_empty() && out.len() + change.len() + 40 > MAX_MESSAGE {
                out.push_str(&format!("; (+{more} more changes)"));
                break;
            }
            if !out.is_empty() {
                out.push_str("; ");
            }
            out.push_str(change);
        }
        out
    }
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let head: String = s.chars().take(max.saturating_sub(3)).collect();
        format!("{head}...")
    }
}

/// A `Drifted` condition message split back into `(reason, change)` pairs, given the
/// condition's `reason`. A change may itself contain `; `: a new change starts only where one of
/// [`REASONS`] and `: ` follow. Text before any such prefix (a message another controller wrote)
/// belongs to `reason`, unless it is `reason` itself (upstream's messages).
pub fn split_message(reason: &str, message: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for piece in message.split("; ") {
        let known = REASONS.iter().find_map(|r| {
            piece
                .strip_prefix(r)
                .and_then(|rest| rest.strip_prefix(": "))
                .map(|rest| (*r, rest))
        });
        match (known, out.last_mut()) {
            (Some((known, rest)), _) => out.push((known.to_string(), rest.to_string())),
            (None, Some(last)) => {
                last.1.push_str("; ");
                last.1.push_str(piece);
            }
            // Upstream writes the reason itself as the message: no change to report.
            (None, None) if !piece.trim().is_empty() && piece != reason => {
                out.push((reason.to_string(), piece.to_string()));
            }
            (None, None) => {}
        }
    }
    out
}

/// Something a check needs, as far as the caller looked it up.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup<T> {
    /// Not looked up (the plugin cannot ask the cloud): checks that need it are skipped.
    NotAsked,
    /// Looked up and not available (a cloud error): checks that need it keep what they found
    /// before, so a passing error neither clears nor changes the condition.
    Unavailable(String),
    /// Looked up: the value the checks compare against.
    Found(T),
}

/// Everything drift needs to know about one NodeClaim.
pub struct Inputs<'a> {
    /// The NodeClaim checked: drift applies once it is `Launched=True`, and its `Drifted`
    /// condition holds what a check that cannot run keeps.
    pub claim: &'a NodeClaim,
    /// Its NodePool (`karpenter.sh/nodepool` label): the static hash and requirements checks
    /// compare against it.
    pub pool: &'a NodePool,
    /// Its node class, if it exists.
    pub node_class: Option<&'a EC2NodeClass>,
    /// Its instance as the cloud describes it now (image, subnet, security groups).
    pub instance: Lookup<&'a Instance>,
    /// The instance types the node class offers now.
    pub instance_types: Lookup<&'a [std::sync::Arc<InstanceType>]>,
    /// The hash versions in force.
    pub versions: &'a HashVersions,
}

/// Checks that could not run, with why.
type Unchecked = Vec<(&'static str, String)>;

/// Run every drift check on a NodeClaim. A check that cannot run (the node class is missing or
/// has not resolved, a cloud lookup failed) keeps the finding the NodeClaim's condition already
/// has for its reason; when nothing is found and some check could not run, the verdict is
/// [`Verdict::Unknown`] and the condition is left alone.
pub fn detect(inputs: &Inputs<'_>) -> Verdict {
    let claim = inputs.claim;
    if !conditions::is_true(
        crds::StatusConditions::status_conditions(claim),
        conditions::LAUNCHED,
    ) {
        return Verdict::NotLaunched;
    }
    let mut findings = Vec::new();
    let mut unchecked: Unchecked = Vec::new();
    findings.extend(nodepool_drift(
        claim,
        inputs.pool,
        &inputs.versions.nodepool,
    ));
    findings.extend(requirements_drift(claim, inputs.pool));
    match &inputs.instance_types {
        // An empty list means the node class offers nothing right now (no subnets resolved):
        // that is no evidence against this NodeClaim's instance type.
        Lookup::Found(types) if !types.is_empty() => {
            findings.extend(instance_type_not_found(claim, types));
        }
        Lookup::Found(_) => unchecked.push((
            r::INSTANCE_TYPE_NOT_FOUND,
            "the node class offers no instance types".into(),
        )),
        Lookup::Unavailable(why) => unchecked.push((r::INSTANCE_TYPE_NOT_FOUND, why.clone())),
        Lookup::NotAsked => {}
    }
    match inputs.node_class {
        Some(class) => {
            findings.extend(nodeclass_drift(claim, class, &inputs.versions.nodeclass));
            findings.extend(cloud_drift(claim, class, &inputs.instance, &mut unchecked));
        }
        None => {
            let why = format!(
                "{} {:?} not found",
                claim.spec.node_class_ref.kind, claim.spec.node_class_ref.name
            );
            for reason in [
                r::NODE_CLASS_DRIFT,
                r::AMI_DRIFT,
                r::SECURITY_GROUP_DRIFT,
                r::SUBNET_DRIFT,
            ] {
                unchecked.push((reason, why.clone()));
            }
        }
    }
    findings.extend(kept(claim, &unchecked, &findings));
    findings.sort_by_key(|f| REASONS.iter().position(|r| *r == f.reason));
    match (findings.is_empty(), unchecked.is_empty()) {
        (false, _) => Verdict::Drifted(findings),
        (true, true) => Verdict::NotDrifted,
        (true, false) => Verdict::Unknown(
            unchecked
                .iter()
                .map(|(reason, why)| format!("{reason} not checked: {why}"))
                .collect::<Vec<_>>()
                .join("; "),
        ),
    }
}

/// The findings the NodeClaim's `Drifted` condition already has for reasons whose check could
/// not run now (and that no other check found again).
fn kept(claim: &NodeClaim, unchecked: &Unchecked, found: &[Finding]) -> Vec<Finding> {
    let Some(condition) = conditions::get(
        crds::StatusConditions::status_conditions(claim),
        conditions::DRIFTED,
    )
    .filter(|c| c.status == "True") else {
        return vec![];
    };
    let previous = split_message(&condition.reason, &condition.message);
    let mut out = Vec::new();
    for reason in REASONS {
        let Some((_, why)) = unchecked.iter().find(|(r, _)| r == reason) else {
            continue;
        };
        if found.iter().any(|f| f.reason == *reason) {
            continue;
        }
        let mut changes: Vec<String> = previous
            .iter()
            .filter(|(r, _)| r == reason)
            .map(|(_, c)| c.clone())
            .collect();
        // Upstream's condition names the reason without a change.
        if changes.is_empty() && condition.reason == *reason {
            changes.push(format!("found earlier; not checked now: {why}"));
        }
        if !changes.is_empty() {
            out.push(Finding { reason, changes });
        }
    }
    out
}

/// How a stamped hash compares with the current one.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum HashComparison {
    /// Hash and version equal.
    Equal,
    /// Same version, different hash: drifted.
    Differs,
    /// The NodeClaim has no stamp (or only part of one): not compared, as upstream.
    NotStamped,
    /// Stamped under another hash version (an older controller, or upstream Karpenter): not
    /// compared; the NodeClaim is re-stamped instead.
    VersionMismatch,
}

/// Compare a stamp with the current fields under `version`.
pub fn compare(stamp: &Stamp, current: &HashedFields, version: &str) -> HashComparison {
    match (&stamp.hash, &stamp.version) {
        (Some(h), Some(v)) if v == version => {
            if *h == current.hash() {
                HashComparison::Equal
            } else {
                HashComparison::Differs
            }
        }
        (Some(_), Some(_)) => HashComparison::VersionMismatch,
        _ => HashComparison::NotStamped,
    }
}

/// The field changes between a stamp's snapshot and the current fields, rendered; when the
/// snapshot is missing or unreadable, one line saying the hash changed.
pub fn explain(stamp: &Stamp, current: &HashedFields, what: &str) -> Vec<String> {
    let changes: Vec<FieldChange> = stamp
        .fields
        .as_deref()
        .and_then(|t| Snapshot::parse(t).ok())
        .map(|s| hash::diff(&s, current))
        .unwrap_or_default();
    if changes.is_empty() {
        vec![format!(
            "{what} hash {} -> {} (no field snapshot to compare)",
            stamp.hash.as_deref().unwrap_or("?"),
            current.hash()
        )]
    } else {
        changes.iter().map(ToString::to_string).collect()
    }
}

fn nodepool_drift(claim: &NodeClaim, pool: &NodePool, version: &str) -> Option<Finding> {
    let stamp = Stamp::nodepool(claim.metadata.annotations.as_ref());
    let current = hash::nodepool_fields(pool);
    static_drift(
        claim,
        &stamp,
        &current,
        version,
        r::NODEPOOL_DRIFTED,
        "nodepool",
    )
}

fn nodeclass_drift(claim: &NodeClaim, class: &EC2NodeClass, version: &str) -> Option<Finding> {
    let stamp = Stamp::nodeclass(claim.metadata.annotations.as_ref());
    let current = hash::nodeclass_fields(class);
    static_drift(
        claim,
        &stamp,
        &current,
        version,
        r::NODE_CLASS_DRIFT,
        "ec2nodeclass",
    )
}

/// A hash comparison as a finding. A NodeClaim already drifted for this reason under another
/// hash version stays drifted with the changes its condition names (its drift was real, and it
/// is not re-stamped), until it is replaced.
fn static_drift(
    claim: &NodeClaim,
    stamp: &Stamp,
    current: &HashedFields,
    version: &str,
    reason: &'static str,
    what: &str,
) -> Option<Finding> {
    match compare(stamp, current, version) {
        HashComparison::Differs => Some(Finding {
            reason,
            changes: explain(stamp, current, what),
        }),
        HashComparison::VersionMismatch => {
            let drifted = conditions::get(
                crds::StatusConditions::status_conditions(claim),
                conditions::DRIFTED,
            )
            .filter(|c| c.status == "True")?;
            let kept: Vec<String> = split_message(&drifted.reason, &drifted.message)
                .into_iter()
                .filter(|(r, _)| r == reason)
                .map(|(_, c)| c)
                .collect();
            (!kept.is_empty() || drifted.reason == reason).then(|| Finding {
                reason,
                changes: if kept.is_empty() {
                    vec![format!(
                        "{what} hash changed under hash version {}",
                        stamp.version.as_deref().unwrap_or("?")
                    )]
                } else {
                    kept
                },
            })
        }
        HashComparison::Equal | HashComparison::NotStamped => None,
    }
}

/// `RequirementsDrifted`: each NodePool requirement the NodeClaim's labels no longer satisfy (a
/// label the NodeClaim lacks satisfies only `NotIn` and `DoesNotExist`).
fn requirements_drift(claim: &NodeClaim, pool: &NodePool) -> Option<Finding> {
    let labels = claim.metadata.labels.clone().unwrap_or_default();
    let reqs = Requirements::from_api(&pool.spec.template.spec.requirements);
    let changes: Vec<String> = reqs
        .iter()
        .filter(|req| !admits(req, &labels))
        .map(|req| match labels.get(&req.key) {
            Some(v) => format!("requirement {req} no longer admits label {}={v}", req.key),
            None => format!(
                "requirement {req} no longer admits a node without label {}",
                req.key
            ),
        })
        .collect();
    (!changes.is_empty()).then_some(Finding {
        reason: r::REQUIREMENTS_DRIFTED,
        changes,
    })
}

fn admits(req: &Requirement, labels: &BTreeMap<String, String>) -> bool {
    match labels.get(&req.key) {
        Some(v) => req.has(v),
        None => req.allows_absent(),
    }
}

/// `InstanceTypeNotFound`: the NodeClaim's instance type is no longer among the types its node
/// class offers (availability aside: a type whose offerings are all out of capacity is still
/// offered).
fn instance_type_not_found(
    claim: &NodeClaim,
    types: &[std::sync::Arc<InstanceType>],
) -> Option<Finding> {
    let name = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(crds::labels::INSTANCE_TYPE_LABEL))?;
    (!types.iter().any(|t| &t.name == name)).then(|| Finding {
        reason: r::INSTANCE_TYPE_NOT_FOUND,
        changes: vec![format!(
            "instance type {name} is no longer offered by the node class"
        )],
    })
}

/// AMI, security group and subnet drift against the node class's resolved status (AWS
/// `IsDrifted`, in its order). A check whose inputs are not resolved or not available goes to
/// `unchecked` instead.
fn cloud_drift(
    claim: &NodeClaim,
    class: &EC2NodeClass,
    instance: &Lookup<&Instance>,
    unchecked: &mut Unchecked,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let Some(status) = class.status.as_ref() else {
        let why = "the node class has no status yet";
        unchecked.push((r::AMI_DRIFT, why.into()));
        if !matches!(instance, Lookup::NotAsked) {
            unchecked.push((r::SECURITY_GROUP_DRIFT, why.into()));
            unchecked.push((r::SUBNET_DRIFT, why.into()));
        }
        return findings;
    };
    match ami_drift(claim, status, instance) {
        Ok(found) => findings.extend(found),
        Err(why) => unchecked.push((r::AMI_DRIFT, why)),
    }
    let instance = match instance {
        Lookup::Found(i) => *i,
        Lookup::NotAsked => return findings,
        Lookup::Unavailable(why) => {
            unchecked.push((r::SECURITY_GROUP_DRIFT, why.clone()));
            unchecked.push((r::SUBNET_DRIFT, why.clone()));
            return findings;
        }
    };
    let have: BTreeSet<&str> = instance
        .security_group_ids
        .iter()
        .map(String::as_str)
        .collect();
    let want: BTreeSet<&str> = status
        .security_groups
        .iter()
        .map(|g| g.id.as_str())
        .collect();
    if want.is_empty() {
        unchecked.push((
            r::SECURITY_GROUP_DRIFT,
            "the node class has resolved no security groups".into(),
        ));
    } else if !have.is_empty() && have != want {
        let list = |s: &BTreeSet<&str>| s.iter().copied().collect::<Vec<_>>().join(", ");
        findings.push(Finding {
            reason: r::SECURITY_GROUP_DRIFT,
            changes: vec![format!(
                "security groups: [{}] -> [{}]",
                list(&have),
                list(&want)
            )],
        });
    }
    if status.subnets.is_empty() {
        unchecked.push((
            r::SUBNET_DRIFT,
            "the node class has resolved no subnets".into(),
        ));
    } else if !instance.subnet_id.is_empty()
        && !status.subnets.iter().any(|s| s.id == instance.subnet_id)
    {
        let selected: Vec<String> = status
            .subnets
            .iter()
            .map(|s| format!("{} ({})", s.id, s.zone))
            .collect();
        findings.push(Finding {
            reason: r::SUBNET_DRIFT,
            changes: vec![format!(
                "subnet: {} ({}) is no longer selected; selected now: {}",
                instance.subnet_id,
                instance.zone,
                selected.join(", ")
            )],
        });
    }
    findings
}

/// `AMIDrift`: the instance's image is not the AMI a launch would pick now (the first resolved
/// AMI whose requirements the node's labels meet, see [`compatible_ami`]).
///
/// Errors: the image or the resolved AMIs are not known.
fn ami_drift(
    claim: &NodeClaim,
    status: &crds::EC2NodeClassStatus,
    instance: &Lookup<&Instance>,
) -> Result<Option<Finding>, String> {
    let from_instance = match instance {
        Lookup::Found(i) => Some(i.image_id.clone()),
        _ => None,
    };
    let image = from_instance
        .filter(|id| !id.is_empty())
        .or_else(|| claim.status.as_ref().and_then(|s| s.image_id.clone()))
        .filter(|id| !id.is_empty())
        .ok_or_else(|| "the instance's image is not known".to_string())?;
    if status.amis.is_empty() {
        return Err("the node class has resolved no AMIs".into());
    }
    let labels = claim.metadata.labels.clone().unwrap_or_default();
    let wanted = compatible_ami(&status.amis, &labels)
        .ok_or_else(|| "no resolved AMI is compatible with the instance type".to_string())?;
    if wanted.id == image {
        return Ok(None);
    }
    let old_name = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(IMAGE_NAME_ANNOTATION))
        .cloned()
        .or_else(|| {
            status
                .amis
                .iter()
                .find(|a| a.id == image)
                .and_then(|a| a.name.clone())
        });
    let named = |id: &str, name: Option<&str>| match name {
        Some(n) => format!("{id} ({n})"),
        None => id.to_string(),
    };
    Ok(Some(Finding {
        reason: r::AMI_DRIFT,
        changes: vec![format!(
            "AMI: {} -> {}",
            named(&image, old_name.as_deref()),
            named(&wanted.id, wanted.name.as_deref())
        )],
    }))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fresh_tests;
