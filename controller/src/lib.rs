//! The Karpenter operator: the controllers that act on what `karpenter_core` decides, the
//! cluster-state caches they read, the cloud providers they call, and the runtime they share.
//! Data flows one way: watches fill [`state`]; a controller copies a snapshot, asks
//! `karpenter_core` what to do, and writes the answer through one executor.
//!
//! - [`runtime`]: the floor every controller stands on (context, reconcile policy, Events,
//!   metrics, settings, leader election, HTTP endpoints).
//! - [`state`]: reflector caches and change announcements.
//! - [`cloudprovider`]: the cloud provider contract and its `sim` and `aws` implementations.
//! - The controllers, one folder each: [`provisioning`], [`nodeclaim`], [`node`], [`nodepool`],
//!   [`nodeclass`], [`nodeoverlay`], [`drift`]; and the one disruption orchestrator,
//!   [`disruption`], which owns serial upgrades ([`disruption::upgrade`]) and consolidation.
//! - [`controllers`]: starts every controller; [`operator`]: one replica, leading or standing by.

pub mod cloudprovider;
pub mod controllers;
pub mod disruption;
pub mod drift;
pub mod interruption_queue;
pub mod node;
pub mod nodeclaim;
pub mod nodeclass;
pub mod nodeoverlay;
pub mod nodepool;
pub mod operator;
pub mod provisioning;
pub mod runtime;
pub mod state;
