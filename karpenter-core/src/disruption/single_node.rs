//! Single-node consolidation (upstream `disruption/singlenodeconsolidation.go`): the first usable
//! candidate that can go alone, deleted or replaced by one cheaper NodeClaim, and why each one
//! tried before it could not.

use crds::DisruptionReason;

use super::balanced::{PoolScore, Scorer};
use super::budgets::Budgets;
use super::candidates::Candidate;
use super::consolidation::{Command, Method, Unconsolidatable, underutilized};
use super::simulator::Simulator;

/// Single-node consolidation: the first usable candidate that can be deleted or replaced by a
/// cheaper NodeClaim, and that its NodePool approves if it is `Balanced` ([`Scorer`]: a
/// candidate whose outright deletion would not be approved is not simulated); every candidate
/// tried before it is returned with why it could not go.
pub fn single_node(
    sim: &mut Simulator<'_>,
    scorer: &Scorer,
    candidates: &[Candidate],
    budgets: &Budgets,
    keep_going: &mut dyn FnMut() -> bool,
) -> (Option<Command>, Vec<(String, Unconsolidatable)>) {
    let mut rejected = Vec::new();
    for c in underutilized(candidates, budgets) {
        if !keep_going() {
            break;
        }
        if let Some(Err(score)) = scorer.upper_bound(c) {
            rejected.push((
                c.name().to_string(),
                Unconsolidatable::BelowBalancedThreshold {
                    nodepool: c.nodepool_name().to_string(),
                    score,
                },
            ));
            continue;
        }
        match sim.simulate(&[c]) {
            Ok(action) => {
                let mut command = Command {
                    method: Method::Single,
                    reason: DisruptionReason::Underutilized,
                    candidates: vec![c.clone()],
                    action,
                    scores: Vec::new(),
                };
                match scorer.approve(&command) {
                    Ok(scores) => {
                        command.scores = scores;
                        return (Some(command), rejected);
                    }
                    Err(PoolScore { nodepool, score }) => rejected.push((
                        c.name().to_string(),
                        Unconsolidatable::BelowBalancedThreshold { nodepool, score },
                    )),
                }
            }
            Err(why) => rejected.push((c.name().to_string(), why)),
        }
    }
    (None, rejected)
}
