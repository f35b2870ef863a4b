//! `kubectl karpenter disruption [explain NODE]`: what the disruption orchestrator would do with
//! each node now. Per NodePool its consolidation settings and budgets (how many more nodes may
//! start being disrupted per reason, how many are in progress, when a closed budget window
//! reopens); per node its verdict: consolidatable (delete, or replace with which instance type,
//! saving how much per hour) or blocked and by exactly what (a pod's do-not-disrupt annotation, a
//! PodDisruptionBudget allowing nothing, the budget, `consolidateAfter` still running, no cheaper
//! placement). `explain NODE` is the what-if of removing one node now: where each pod would go,
//! the cost change, every blocker.
//!
//! The verdicts come from the orchestrator's own code ([`karpenter_core::disruption::report`]);
//! instance types and prices are the vendored catalog of the region of each EC2NodeClass's
//! resolved subnets, in their zones, as for `why-pending`. [`args`] is the command line,
//! [`render`] the text output, [`command`] reads the cluster.

pub mod args;
pub mod command;
pub mod render;

/// Why `disruption` could not answer.
#[derive(Debug, thiserror::Error)]
pub enum DisruptionError {
    /// `explain NAME` named no Karpenter node, or one that cannot be simulated yet.
    #[error("{0}; `kubectl karpenter disruption` lists the nodes it can explain")]
    Explain(#[from] karpenter_core::disruption::report::ExplainError),
}
