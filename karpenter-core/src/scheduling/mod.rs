//! The pure scheduling core: requirements algebra, resources, taints, pods, topology, volume
//! and CSI attach-limit ([`attach`]) constraints, and the solver that turns pending pods plus a
//! cluster snapshot into NodeClaims ([`solver`]); [`explain`] answers why a pod can or cannot
//! get a node from the same engine. No I/O, no clock.

pub mod attach;
pub mod choices;
pub mod constraints;
pub mod explain;
pub mod pod;
pub mod repack;
pub mod requirements;
pub mod resources;
pub mod solver;
pub mod taints;
pub mod topology;
pub mod volumes;

#[cfg(test)]
mod attach_tests;
#[cfg(test)]
mod choices_tests;
#[cfg(test)]
mod min_values_policy_tests;
#[cfg(test)]
mod solver_tests;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod topology_tests;
