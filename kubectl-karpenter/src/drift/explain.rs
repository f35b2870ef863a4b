//! The core of `drift explain`, pure: for one NodeClaim, what the controller marked (the
//! `Drifted` condition), what the checks that need no cloud find now (the controller's own
//! [`drift::detect`] without an instance or instance types), both stamps against the current
//! hashes, and why it is drifted or not, as one [`Report`].

use std::collections::BTreeSet;

use crds::conditions::{self, DRIFTED, LAUNCHED, reason as r};
use crds::hash::{self, Stamp};
use crds::labels::{AWS_GROUP, NODEPOOL_LABEL};
use crds::{EC2NodeClass, NodeClaim, NodePool, StatusConditions};
use karpenter_core::lifecycle::drift::{
    self, HashVersions, Inputs, Lookup, Verdict, split_message,
};

use super::report::{ChangeLine, DriftedCondition, HashReport, Live, LiveVerdict, Report, Source};

/// Reasons only a check against the cloud finds (the plugin does not make those checks).
const CLOUD_REASONS: &[&str] = &[
    r::INSTANCE_TYPE_NOT_FOUND,
    r::SECURITY_GROUP_DRIFT,
    r::SUBNET_DRIFT,
    r::CAPACITY_RESERVATION_DRIFT,
    r::PLACEMENT_GROUP_DRIFT,
];

/// The label value `key` of a NodeClaim.
fn label<'a>(claim: &'a NodeClaim, key: &str) -> Option<&'a str> {
    claim.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// The NodeClaim's NodePool name.
pub fn nodepool_name(claim: &NodeClaim) -> Option<&str> {
    label(claim, NODEPOOL_LABEL)
}

/// The NodeClaim's EC2NodeClass name, when `spec.nodeClassRef` names one.
pub fn nodeclass_name(claim: &NodeClaim) -> Option<&str> {
    let reference = &claim.spec.node_class_ref;
    let group_ok = reference.group.is_empty() || reference.group == AWS_GROUP;
    (group_ok && reference.kind == "EC2NodeClass" && !reference.name.is_empty())
        .then_some(reference.name.as_str())
}

/// The condition's changes and the detected ones, each once: the condition's first (in its
/// order), then those only detected now.
fn merge_changes(marked: &[(String, String)], detected: &[(String, String)]) -> Vec<ChangeLine> {
    let detected_set: BTreeSet<&(String, String)> = detected.iter().collect();
    let marked_set: BTreeSet<&(String, String)> = marked.iter().collect();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for pair in marked {
        if seen.insert(pair) {
            let source = if detected_set.contains(pair) {
                Source::Both
            } else {
                Source::Controller
            };
            out.push(ChangeLine {
                reason: pair.0.clone(),
                change: pair.1.clone(),
                source,
            });
        }
    }
    for pair in detected {
        if !marked_set.contains(pair) && seen.insert(pair) {
            out.push(ChangeLine {
                reason: pair.0.clone(),
                change: pair.1.clone(),
                source: Source::Detected,
            });
        }
    }
    out
}

/// Explains one NodeClaim, given its NodePool and EC2NodeClass as they are now (`None` when
/// not found) and the controller's hash versions.
pub fn report(
    claim: &NodeClaim,
    pool: Option<&NodePool>,
    class: Option<&EC2NodeClass>,
    versions: &HashVersions,
) -> Report {
    let annotations = claim.metadata.annotations.as_ref();
    let pool_fields = pool.map(hash::nodepool_fields);
    let class_fields = class.map(hash::nodeclass_fields);
    let nodepool_hash = HashReport::new(
        &Stamp::nodepool(annotations),
        pool_fields.as_ref(),
        &versions.nodepool,
    );
    let nodeclass_hash = HashReport::new(
        &Stamp::nodeclass(annotations),
        class_fields.as_ref(),
        &versions.nodeclass,
    );
    let condition = conditions::get(claim.status_conditions(), DRIFTED).map(|c| DriftedCondition {
        status: c.status.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
        last_transition_time: Some(c.last_transition_time.0),
    });
    let marked = condition.as_ref().filter(|c| c.status == "True");

    let launched = conditions::is_true(claim.status_conditions(), LAUNCHED);
    let verdict = match (launched, pool) {
        (false, _) => Verdict::NotLaunched,
        (true, None) => Verdict::Unknown(match nodepool_name(claim) {
            Some(name) => format!("drift not checked: nodepool {name} not found"),
            None => format!("drift not checked: the NodeClaim has no {NODEPOOL_LABEL} label"),
        }),
        (true, Some(pool)) => drift::detect(&Inputs {
            claim,
            pool,
            node_class: class,
            instance: Lookup::NotAsked,
            instance_types: Lookup::NotAsked,
            versions,
        }),
    };
    let detected: Vec<(String, String)> = match &verdict {
        Verdict::Drifted(findings) => findings
            .iter()
            .flat_map(|f| f.changes.iter().map(|c| (f.reason.to_owned(), c.clone())))
            .collect(),
        _ => Vec::new(),
    };
    let from_condition = marked
        .map(|c| split_message(&c.reason, &c.message))
        .unwrap_or_default();
    let live = match &verdict {
        Verdict::Drifted(_) => LiveVerdict::Drifted,
        Verdict::NotDrifted => LiveVerdict::NotDrifted,
        Verdict::NotLaunched => LiveVerdict::NotLaunched,
        Verdict::Unknown(_) => LiveVerdict::Unknown,
    };
    let live_detail = match &verdict {
        Verdict::Unknown(why) => Some(why.clone()),
        _ => None,
    };

    let source = match (marked.is_some(), live) {
        (true, _) => Some(Source::Controller),
        (false, LiveVerdict::Drifted) => Some(Source::Detected),
        _ => None,
    };
    let reason = match (marked, detected.first()) {
        (Some(c), _) if !c.reason.is_empty() => Some(c.reason.clone()),
        (_, Some((reason, _))) => Some(reason.clone()),
        _ => None,
    };
    let nodeclass = nodeclass_name(claim);
    let (why, message) = match source {
        Some(source) => {
            let why = drifted_notes(source, reason.as_deref(), live, live_detail.as_deref());
            let who = match source {
                Source::Detected => "detected now, not yet marked by the controller",
                _ => "marked by the controller",
            };
            let mut message = match &reason {
                Some(reason) => format!("drifted: {who} ({reason})"),
                None => format!("drifted: {who}"),
            };
            for note in &why {
                message.push_str("; ");
                message.push_str(note);
            }
            (why, message)
        }
        None if live == LiveVerdict::NotLaunched => (
            vec!["not launched yet: drift applies once its instance is launched".to_owned()],
            "not launched: drift does not apply until its instance is launched".to_owned(),
        ),
        None => {
            let mut why = vec![nodepool_hash.why("nodepool", nodepool_name(claim))];
            if nodeclass.is_some() {
                why.push(nodeclass_hash.why("ec2nodeclass", nodeclass));
            }
            if pool.is_some() {
                why.push("requirements admit its labels".to_owned());
            }
            why.push(ami_why(claim, class, nodeclass, &verdict));
            let message = format!("not drifted: {}", why.join("; "));
            (why, message)
        }
    };
    Report {
        name: claim.metadata.name.clone().unwrap_or_default(),
        node: claim.status.as_ref().and_then(|s| s.node_name.clone()),
        nodepool: nodepool_name(claim).map(str::to_owned),
        nodeclass: nodeclass.map(str::to_owned),
        drifted: source.is_some(),
        source,
        reason,
        changes: merge_changes(&from_condition, &detected),
        condition,
        live: Live {
            verdict: live,
            detail: live_detail,
        },
        nodepool_hash,
        nodeclass_hash,
        why,
        message,
    }
}

/// Notes on a drifted NodeClaim where the condition and the checks made now disagree.
fn drifted_notes(
    source: Source,
    reason: Option<&str>,
    live: LiveVerdict,
    detail: Option<&str>,
) -> Vec<String> {
    match (source, live) {
        (Source::Detected, _) => {
            vec!["the controller marks it Drifted on its next check".to_owned()]
        }
        (_, LiveVerdict::NotDrifted) => match reason.filter(|r| CLOUD_REASONS.contains(r)) {
            Some(reason) => vec![format!(
                "{reason} is found against the cloud, which the plugin does not check"
            )],
            None => vec![
                "the checks made now (hashes, requirements, AMI) find no drift: the controller \
                 clears the condition on its next check"
                    .to_owned(),
            ],
        },
        (_, LiveVerdict::Unknown) => vec![format!(
            "not re-checked now: {}",
            detail.unwrap_or("unknown")
        )],
        _ => Vec::new(),
    }
}

/// The AMI line of a NodeClaim found not drifted.
fn ami_why(
    claim: &NodeClaim,
    class: Option<&EC2NodeClass>,
    nodeclass: Option<&str>,
    verdict: &Verdict,
) -> String {
    let image = claim.status.as_ref().and_then(|s| s.image_id.as_deref());
    match (verdict, class, nodeclass) {
        (Verdict::Unknown(why), _, _) => why.clone(),
        (_, Some(_), _) => format!("AMI {} is current", image.unwrap_or("?")),
        (_, None, Some(name)) => format!("AMI not checked: ec2nodeclass {name} not found"),
        (_, None, None) => "AMI not checked: the NodeClaim references no EC2NodeClass".to_owned(),
    }
}

/// Explains `claims` against `pools` and `classes`, ordered by NodePool, then name.
pub fn report_all<'a>(
    claims: impl IntoIterator<Item = &'a NodeClaim>,
    pools: &[NodePool],
    classes: &[EC2NodeClass],
    versions: &HashVersions,
) -> Vec<Report> {
    let mut reports: Vec<Report> = claims
        .into_iter()
        .map(|claim| {
            let pool = nodepool_name(claim)
                .and_then(|n| pools.iter().find(|p| p.metadata.name.as_deref() == Some(n)));
            let class = nodeclass_name(claim).and_then(|n| {
                classes
                    .iter()
                    .find(|c| c.metadata.name.as_deref() == Some(n))
            });
            report(claim, pool, class, versions)
        })
        .collect();
    reports.sort_by(|a, b| {
        let key = |r: &Report| (r.nodepool.is_none(), r.nodepool.clone(), r.name.clone());
        key(a).cmp(&key(b))
    });
    reports
}

#[cfg(test)]
mod tests;
