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

use crate::cloudprovider::{Instance, InstanceType};
use crate::scheduling::requirements::{Requirement, Requirements};

/// On a NodeClaim: the name of the image its instance was launched from, recorded at launch so
/// that AMI drift can say which release the node runs (the node class's status lists only the
/// AMIs it selects now). An extension of this project.
pub const IMAGE_NAME_ANNOTATION: &str = "karpenter.k8s.aws/image-name";

/// The hash versions the controller stamps and compares (normally this project's current
/// versions; tests change them to prove that a version change re-stamps instead of drifting).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashVersions {
    /// NodePool hash version.
    pub nodepool: String,
    /// EC2NodeClass hash version.
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

impl Verdict {
    /// The condition message for drifted findings: each finding's changes, `; `-separated.
    pub fn message(findings: &[Finding]) -> String {
        findings
            .iter()
            .flat_map(|f| f.changes.iter().map(move |c| format!("{}: {c}", f.reason)))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Everything drift needs to know about one NodeClaim.
pub struct Inputs<'a> {
    /// The NodeClaim.
    pub claim: &'a NodeClaim,
    /// Its NodePool.
    pub pool: &'a NodePool,
    /// Its node class, if it exists.
    pub node_class: Option<&'a EC2NodeClass>,
    /// Its instance as the cloud describes it now (image, subnet, security groups), if known.
    pub instance: Option<&'a Instance>,
    /// The instance types the node class offers now, if known.
    pub instance_types: Option<&'a [std::sync::Arc<InstanceType>]>,
    /// The hash versions in force.
    pub versions: &'a HashVersions,
}

/// Run every drift check on a NodeClaim.
pub fn detect(inputs: &Inputs<'_>) -> Verdict {
    let claim = inputs.claim;
    if !conditions::is_true(
        crds::StatusConditions::status_conditions(claim),
        conditions::LAUNCHED,
    ) {
        return Verdict::NotLaunched;
    }
    let mut findings = Vec::new();
    if let Some(f) = nodepool_drift(claim, inputs.pool, &inputs.versions.nodepool) {
        findings.push(f);
    }
    if let Some(f) = requirements_drift(claim, inputs.pool) {
        findings.push(f);
    }
    if let Some(types) = inputs.instance_types
        && let Some(f) = instance_type_not_found(claim, types)
    {
        findings.push(f);
    }
    if let Some(class) = inputs.node_class {
        if let Some(f) = nodeclass_drift(claim, class, &inputs.versions.nodeclass) {
            findings.push(f);
        }
        match cloud_drift(claim, class, inputs.instance) {
            Ok(found) => findings.extend(found),
            Err(why) if findings.is_empty() => return Verdict::Unknown(why),
            Err(_) => {}
        }
    }
    if findings.is_empty() {
        Verdict::NotDrifted
    } else {
        Verdict::Drifted(findings)
    }
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
/// hash version stays drifted (its drift was real; it is not re-stamped either), where
/// upstream would clear the condition and lose the drift.
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
            let prefix = format!("{reason}: ");
            let kept: Vec<String> = drifted
                .message
                .split("; ")
                .filter_map(|m| m.strip_prefix(&prefix).map(String::from))
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
/// `IsDrifted`, in its order). Errors: the status has not resolved what a check needs.
fn cloud_drift(
    claim: &NodeClaim,
    class: &EC2NodeClass,
    instance: Option<&Instance>,
) -> Result<Vec<Finding>, String> {
    let status = class
        .status
        .as_ref()
        .ok_or_else(|| "node class has no status yet".to_string())?;
    let mut findings = Vec::new();
    let image = instance
        .map(|i| i.image_id.clone())
        .filter(|id| !id.is_empty())
        .or_else(|| claim.status.as_ref().and_then(|s| s.image_id.clone()))
        .filter(|id| !id.is_empty())
        .ok_or_else(|| "the instance's image is not known".to_string())?;
    if status.amis.is_empty() {
        return Err("node class has resolved no AMIs".into());
    }
    let labels = claim.metadata.labels.clone().unwrap_or_default();
    // The AMI a launch would pick now: the first one whose requirements the node's labels meet.
    let wanted = status
        .amis
        .iter()
        .find(|ami| {
            ami.requirements.iter().all(|req| {
                Requirement::from_node_selector(req).is_ok_and(|req| admits(&req, &labels))
            })
        })
        .ok_or_else(|| "no resolved AMI is compatible with the instance type".to_string())?;
    if wanted.id != image {
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
        findings.push(Finding {
            reason: r::AMI_DRIFT,
            changes: vec![format!(
                "AMI: {} -> {}",
                named(&image, old_name.as_deref()),
                named(&wanted.id, wanted.name.as_deref())
            )],
        });
    }
    let Some(instance) = instance else {
        return Ok(findings);
    };
    if status.security_groups.is_empty() {
        return Err("node class has resolved no security groups".into());
    }
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
    if !have.is_empty() && have != want {
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
        return Err("node class has resolved no subnets".into());
    }
    if !instance.subnet_id.is_empty() && !status.subnets.iter().any(|s| s.id == instance.subnet_id)
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
    Ok(findings)
}

#[cfg(test)]
mod tests;
