//! Karpenter's decisions, pure: no tokio, no Kubernetes client, no cloud SDK. Every function
//! here takes a snapshot (objects, instance types, a time) and returns data; the controller
//! (`controller`) reads the cluster into those snapshots and one executor per decision writes
//! what comes back. `karpenter simulate` and `kubectl karpenter` run the same code without a
//! cluster.
//!
//! - [`scheduling`]: requirements, resources, taints, topology, volumes, the solver, explain.
//! - [`provisioning`]: from NodePools to solver templates and from decisions to NodeClaims.
//! - [`capacity`]: instance types and offerings, allocatable, the embedded EC2 catalog.
//! - [`cloud`]: the cloud provider's data (launches, instances, typed errors).
//! - [`snapshot`]: one copy of the cluster state and what decisions derive from it.
//! - [`lifecycle`]: a NodeClaim's life as predicates: registration, initialization, liveness,
//!   expiration, drift checks and stamps, drain order, termination deadline.
//! - [`disruption`]: budgets and the serial upgrade planner.
//! - [`interruption`]: EC2 and AWS Health interruption messages and what each asks for.
//! - [`clock`]: time as an injected dependency.
//! - [`pod_view`]: the pod as decisions read it (what the controller caches and snapshots hold).

pub mod capacity;
pub mod clock;
pub mod cloud;
pub mod disruption;
pub mod interruption;
pub mod lifecycle;
pub mod pod_view;
pub mod provisioning;
pub mod scheduling;
pub mod snapshot;
