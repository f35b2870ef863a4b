//! What `orphans delete` does to each orphan (pure), and the preview it prints first.
//!
//! The safety rule: Karpenter's `karpenter.sh/termination` finalizer is what makes the
//! controller terminate a NodeClaim's instance, so the plugin removes it (from a NodeClaim or a
//! Node) only when the cloud was checked — the instance is then either known to be gone or
//! terminated by the same plan, first. Without a cloud view it only deletes objects and leaves
//! the finalizers for the controller. Other finalizers are never touched. A NodeClaim that
//! duplicates another's providerID is left alone: deleting it would make the controller
//! terminate the instance its owner still runs on.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Write};

use crds::labels::TERMINATION_FINALIZER;

use super::{Kind, ObjectRef, Orphan, Resource};

/// One change to the cluster or the cloud.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Terminate a cloud instance.
    TerminateInstance {
        /// Instance id, e.g. `i-0abc…`.
        id: String,
        /// `aws:///<zone>/<instance-id>`, shown in the preview.
        provider_id: String,
    },
    /// Delete a Node (it stays, terminating, while it has finalizers).
    DeleteNode {
        /// Node name.
        name: String,
    },
    /// Delete a NodeClaim (it stays, terminating, while it has finalizers).
    DeleteNodeClaim {
        /// NodeClaim name.
        name: String,
    },
    /// Remove `karpenter.sh/termination` from a Node's or NodeClaim's finalizers.
    RemoveFinalizer {
        /// [`Resource::Node`] or [`Resource::NodeClaim`].
        resource: Resource,
        /// The Node's or NodeClaim's name.
        name: String,
    },
}

impl fmt::Display for Step {
    /// The preview line, e.g. `remove finalizer karpenter.sh/termination from node ip-10-0-1-7`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::TerminateInstance { id, provider_id } => {
                write!(f, "terminate instance {id} ({provider_id})")
            }
            Step::DeleteNode { name } => write!(f, "delete node {name}"),
            Step::DeleteNodeClaim { name } => write!(f, "delete nodeclaim {name}"),
            Step::RemoveFinalizer { resource, name } => write!(
                f,
                "remove finalizer {TERMINATION_FINALIZER} from {} {name}",
                resource_word(*resource)
            ),
        }
    }
}

fn resource_word(resource: Resource) -> &'static str {
    match resource {
        Resource::NodeClaim => "nodeclaim",
        Resource::Node => "node",
        Resource::Instance => "instance",
    }
}

/// The steps for one orphan, in the order they run, and notes on what is left alone.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The orphan it cleans up.
    pub orphan: Orphan,
    /// The changes, in the order they run; a failed step skips the rest of this plan.
    pub steps: Vec<Step>,
    /// What is deliberately not done, and why.
    pub notes: Vec<String>,
}

const DUPLICATE_NOTE: &str = "left alone: deleting a NodeClaim makes Karpenter drain its node and \
                              terminate the instance its providerID names, which another NodeClaim \
                              claims too (see DETAIL); remove this one's finalizers, then delete it";

const UNCHECKED_NOTE: &str = "finalizers are left for the controller: the cloud was not \
                              checked, so the instance may still be running";

/// Plans for `orphans`, in their order. An instance terminated by an earlier plan is not
/// terminated again.
pub fn plan(orphans: &[Orphan], cloud_checked: bool) -> Vec<Plan> {
    let mut terminated: HashMap<String, String> = HashMap::new();
    orphans
        .iter()
        .map(|o| {
            let mut plan = plan_one(o, cloud_checked);
            let mut notes = Vec::new();
            plan.steps.retain(|s| match s {
                Step::TerminateInstance { id, .. } => match terminated.get(id) {
                    Some(first) => {
                        notes.push(format!("instance {id} is terminated with {first} above"));
                        false
                    }
                    None => {
                        terminated.insert(id.clone(), o.qualified_name());
                        true
                    }
                },
                _ => true,
            });
            plan.notes.splice(0..0, notes);
            plan
        })
        .collect()
}

fn plan_one(orphan: &Orphan, cloud_checked: bool) -> Plan {
    let mut steps = Vec::new();
    let mut notes = Vec::new();
    let terminate = |steps: &mut Vec<Step>| {
        if let Some(i) = orphan.instance.running() {
            steps.push(Step::TerminateInstance {
                id: i.id.clone(),
                provider_id: i.provider_id.clone(),
            });
        }
    };
    let mut finalizers_left = false;
    let mut clean = |steps: &mut Vec<Step>, resource: Resource, obj: &ObjectRef, delete: bool| {
        if delete && !obj.deleting {
            steps.push(match resource {
                Resource::Node => Step::DeleteNode {
                    name: obj.name.clone(),
                },
                _ => Step::DeleteNodeClaim {
                    name: obj.name.clone(),
                },
            });
        }
        if obj.has_termination_finalizer() {
            if cloud_checked {
                steps.push(Step::RemoveFinalizer {
                    resource,
                    name: obj.name.clone(),
                });
            } else {
                finalizers_left = true;
            }
        }
        let others: Vec<&str> = obj
            .finalizers
            .iter()
            .map(String::as_str)
            .filter(|f| *f != TERMINATION_FINALIZER)
            .collect();
        if !others.is_empty() {
            notes.push(format!(
                "{} {} keeps its other finalizers: {}",
                resource_word(resource),
                obj.name,
                others.join(", ")
            ));
        }
    };
    match orphan.kind {
        Kind::DuplicateProviderID => notes.push(DUPLICATE_NOTE.to_owned()),
        Kind::InstanceWithoutNodeClaim => terminate(&mut steps),
        Kind::NodeWithoutNodeClaim => {
            terminate(&mut steps);
            if let Some(node) = &orphan.node {
                clean(&mut steps, Resource::Node, node, true);
            }
        }
        Kind::NotLaunched | Kind::NotRegistered | Kind::StuckTerminating | Kind::InstanceGone => {
            // Delete first, so a running controller sees the deletion and its own finalizer
            // logic agrees with what follows.
            if let Some(claim) = &orphan.nodeclaim
                && !claim.deleting
            {
                steps.push(Step::DeleteNodeClaim {
                    name: claim.name.clone(),
                });
            }
            terminate(&mut steps);
            if let Some(node) = &orphan.node {
                clean(&mut steps, Resource::Node, node, true);
            }
            if let Some(claim) = &orphan.nodeclaim {
                clean(&mut steps, Resource::NodeClaim, claim, false);
            }
        }
    }
    if finalizers_left {
        notes.push(UNCHECKED_NOTE.to_owned());
    }
    Plan {
        orphan: orphan.clone(),
        steps,
        notes,
    }
}

/// Writes the preview: per orphan its kind and name, then its steps and notes.
///
/// Errors: writing failed.
pub fn write_preview(out: &mut impl Write, plans: &[Plan]) -> io::Result<()> {
    for plan in plans {
        writeln!(
            out,
            "{} {}:",
            plan.orphan.kind,
            plan.orphan.qualified_name()
        )?;
        if plan.steps.is_empty() && plan.notes.is_empty() {
            writeln!(out, "  - nothing to do")?;
        }
        for step in &plan.steps {
            writeln!(out, "  - {step}")?;
        }
        for note in &plan.notes {
            writeln!(out, "  note: {note}")?;
        }
    }
    Ok(())
}

/// How many steps the plans hold.
pub fn step_count(plans: &[Plan]) -> usize {
    plans.iter().map(|p| p.steps.len()).sum()
}

#[cfg(test)]
mod tests;
