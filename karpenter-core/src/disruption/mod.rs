//! Disruption decisions: disruption budgets and the serial upgrade planner that picks which
//! drifted NodeClaims to replace next ([`upgrade`]). The controller that executes the plans is
//! `controller::upgrade`.

pub mod blockers;
pub mod budgets;
pub mod candidates;
pub mod consolidation;
pub mod upgrade;
