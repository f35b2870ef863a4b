//! The pure scheduling core: requirements algebra, resources, taints, pods, and the solver that
//! turns pending pods plus a cluster snapshot into NodeClaims. No I/O, no clock.

pub mod constraints;
pub mod explain;
pub mod kube_scheduler;
pub mod pod;
pub mod repack;
pub mod requirements;
pub mod resources;
pub mod solver;
pub mod taints;
pub mod topology;
pub mod volumes;

#[cfg(test)]
mod kube_scheduler_tests;
#[cfg(test)]
mod solver_tests;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod topology_tests;
