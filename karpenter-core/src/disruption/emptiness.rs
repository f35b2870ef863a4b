//! Emptiness (upstream `disruption/emptiness.go`): every empty candidate the `Empty` budgets
//! allow, deleted together in one command, without simulating anything.

use crds::DisruptionReason;

use super::budgets::Budgets;
use super::candidates::Candidate;
use super::consolidation::{Action, Command, Method};

/// Emptiness: every empty candidate the `Empty` budgets allow, deleted in one command.
pub fn emptiness(candidates: &[Candidate], budgets: &Budgets) -> Option<Command> {
    let mut budgets = budgets.clone();
    let chosen: Vec<Candidate> = candidates
        .iter()
        .filter(|c| c.is_empty())
        .filter(|c| {
            let ok = budgets.allowed(c.nodepool_name(), DisruptionReason::Empty) > 0;
            if ok {
                budgets.take(c.nodepool_name());
            }
            ok
        })
        .cloned()
        .collect();
    (!chosen.is_empty()).then_some(Command {
        method: Method::Empty,
        reason: DisruptionReason::Empty,
        candidates: chosen,
        action: Action::Delete,
        scores: Vec::new(),
    })
}
