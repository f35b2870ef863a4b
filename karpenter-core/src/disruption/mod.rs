//! Disruption decisions: candidates and their blockers, budgets, consolidation's solver-backed
//! simulations, the replacement and drain deadline of an interrupted node ([`interruption`]), the serial upgrade planner that picks which drifted NodeClaims to replace next
//! ([`upgrade`]), and the per-node [`report`] people read. The controller that executes the
//! decisions is `controller::disruption` (one orchestrator).

pub mod balanced;
pub mod blockers;
pub mod budgets;
pub mod candidates;
pub mod command;
pub mod consolidation;
pub mod emptiness;
pub mod interruption;
pub mod multi_node;
pub mod report;
pub mod simulator;
pub mod single_node;
pub mod upgrade;
