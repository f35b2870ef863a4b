//! `kubectl karpenter upgrade status|pause|resume|step`: the operator's view and controls of
//! serial node upgrades (the controller replaces drifted nodes one at a time).
//!
//! All state lives in the cluster ([`crds::upgrade`]): the controls are NodePool annotations
//! (paused, step allowance), the step in progress is marked on NodeClaims, and finished steps
//! are the `Drifted` records of the durable disruption history ([`crds::history`]). `status`
//! runs the controller's own planner ([`karpenter_core::disruption::upgrade`]) over what it
//! reads, so it shows what the orchestrator will do. The core is pure: [`report`] builds the document, [`render`] prints it,
//! [`control`] decides the patch each control sends; [`command`] reads and writes the cluster.

pub mod args;
pub mod command;
pub mod control;
pub mod render;
pub mod report;

#[cfg(test)]
pub mod fixtures;

use crate::causes::causes;

/// Why an `upgrade` command failed (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    /// `pause`, `resume` or `step` without `--nodepool` or `--all`.
    #[error(
        "`upgrade {action}` changes NodePools and needs to be told which: --nodepool NAME for \
         one, or --all for every NodePool (`kubectl karpenter upgrade status` lists them)"
    )]
    NoTarget {
        /// The subcommand: `pause`, `resume` or `step`.
        action: &'static str,
    },
    /// The server does not serve NodePools.
    #[error(
        "the server at {server} (context \"{context}\") does not serve nodepools.karpenter.sh/v1; \
         install Karpenter's CRDs or pick the cluster that runs Karpenter with --context"
    )]
    NotInstalled {
        /// API server URL without a trailing `/`.
        server: String,
        /// The kubeconfig context used.
        context: String,
    },
    /// A control's patch failed.
    #[error(
        "{verb} nodepool/{nodepool}: {}; check that the cluster is reachable and that you may \
         patch NodePools (`kubectl auth can-i patch nodepools.karpenter.sh`)",
        causes(source.as_ref())
    )]
    Patch {
        /// What was being done, e.g. `pausing`.
        verb: &'static str,
        /// The NodePool's name.
        nodepool: String,
        /// The patch call's error, printed with its causes.
        source: Box<kube::Error>,
    },
    /// The NodePool went away while it was being changed.
    #[error(
        "{verb} nodepool/{nodepool}: it was deleted meanwhile; `kubectl karpenter upgrade \
         status` lists the NodePools there are"
    )]
    Gone {
        /// What was being done, e.g. `resuming`.
        verb: &'static str,
        /// The NodePool's name.
        nodepool: String,
    },
    /// Every guarded write conflicted with another writer.
    #[error(
        "{verb} nodepool/{nodepool}: it kept changing ({attempts} conflicting writes, e.g. the \
         controller starting steps); run the command again"
    )]
    Conflict {
        /// What was being done, e.g. `allowing a step on`.
        verb: &'static str,
        /// The NodePool's name.
        nodepool: String,
        /// Guarded writes tried, each refused with 409 Conflict.
        attempts: usize,
    },
    /// With `--all`, some NodePools could not be changed.
    #[error(
        "{failed} of {total} NodePools could not be changed (see the errors above); `kubectl \
         karpenter upgrade status` shows where each one stands"
    )]
    Incomplete {
        /// NodePools that failed.
        failed: usize,
        /// NodePools tried.
        total: usize,
    },
}
