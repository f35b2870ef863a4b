//! `kubectl karpenter status`, the operator's cockpit: per NodePool, limits against usage, how
//! many nodes are ready, in flight, drifted or terminating and where its serial upgrade stands;
//! then one row per NodeClaim with its lifecycle state, offering, node, price and age; then the
//! totals with the fleet's hourly cost. `--watch` keeps it on screen.
//!
//! The core is pure: [`rows`] derives NodeClaim rows and totals, [`sort`] orders them, [`pools`]
//! the NodePool rows,
//! [`document`] assembles and sorts the one document every output format prints, and
//! [`crate::render`] lays out the tables. [`command`] reads the cluster and [`watch`] decides what
//! to print as it changes.

pub mod command;
pub mod document;
pub mod pools;
pub mod rows;
pub mod sort;
pub mod watch;

#[cfg(test)]
pub mod fixtures;
#[cfg(test)]
mod snapshots;

pub use rows::{PriceBook, Row, State, filter_nodepool};
