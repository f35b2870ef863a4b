//! Multi-node consolidation (upstream `disruption/multinodeconsolidation.go`): the longest prefix
//! of the usable candidates that can go together, deleted or replaced by one cheaper NodeClaim,
//! found by binary search over the [`Simulator`].

use crds::DisruptionReason;

use super::balanced::Scorer;
use super::budgets::Budgets;
use super::candidates::Candidate;
use super::consolidation::{Command, MAX_MULTI_NODE_CANDIDATES, Method, underutilized};
use super::simulator::Simulator;

/// Multi-node consolidation: the longest prefix (at least two, at most
/// [`MAX_MULTI_NODE_CANDIDATES`]) of the usable candidates that can be deleted or replaced by one
/// cheaper NodeClaim, found by binary search; a prefix a `Balanced` NodePool does not approve
/// ([`Scorer::approve`]) counts as one that cannot go, as upstream's
/// `firstNConsolidationOption` counts it. `keep_going` is asked before each simulation (a time
/// budget: upstream gives up after a minute and keeps the best found).
pub fn multi_node(
    sim: &mut Simulator<'_>,
    scorer: &Scorer,
    candidates: &[Candidate],
    budgets: &Budgets,
    keep_going: &mut dyn FnMut() -> bool,
) -> Option<Command> {
    let usable = underutilized(candidates, budgets);
    let usable = &usable[..usable.len().min(MAX_MULTI_NODE_CANDIDATES)];
    if usable.len() < 2 {
        return None;
    }
    let (mut lo, mut hi) = (2, usable.len());
    let mut best: Option<Command> = None;
    while lo <= hi {
        if !keep_going() {
            break;
        }
        let mid = (lo + hi) / 2;
        let approved = sim.simulate(&usable[..mid]).ok().and_then(|action| {
            let mut command = Command {
                method: Method::Multi,
                reason: DisruptionReason::Underutilized,
                candidates: usable[..mid].iter().map(|c| (*c).clone()).collect(),
                action,
                scores: Vec::new(),
            };
            command.scores = scorer.approve(&command).ok()?;
            Some(command)
        });
        match approved {
            Some(command) => {
                best = Some(command);
                lo = mid + 1;
            }
            None => hi = mid - 1,
        }
    }
    best
}
