//! `kubectl karpenter status`, the operator's cockpit: per NodePool, limits against usage, how
//! many nodes are ready, in flight, drifted, unhealthy or terminating and where its serial
//! upgrade stands; then one row per NodeClaim with its lifecycle state (Unhealthy when its node
//! reports a condition node repair acts on), offering, what runs on its node (pods,
//! requested against allocatable cpu and memory, as eks-node-viewer shows it), price and age;
//! then the totals with the fleet's hourly cost. `--watch` keeps it on screen.
//!
//! The core is pure: [`rows`] derives NodeClaim rows and totals, [`load`] what runs on each
//! node, [`limits`] which resource fills it first and why, [`sort`] orders them, [`pools`] the NodePool rows, [`document`] assembles and sorts the
//! one document every output format prints, [`table`] lays it out as kubectl-style tables and
//! [`mod@print`] picks the format for `-o`.
//! [`command`] reads the cluster and [`watch`] decides what to print as it changes; on a
//! terminal it draws the [`cockpit`] (the [`fleet`] summary and every node, laid out by [`fit`]
//! to the terminal's width).

pub mod cockpit;
pub mod command;
pub mod document;
pub mod fit;
pub mod fleet;
pub mod interval;
pub mod keys;
pub mod limits;
pub mod load;
pub mod pod_feed;
pub mod pools;
pub mod print;
pub mod rows;
pub mod sort;
pub mod table;
pub mod watch;

#[cfg(test)]
pub mod fixtures;
#[cfg(test)]
mod snapshots;

pub use rows::{PriceBook, filter_nodepool};
