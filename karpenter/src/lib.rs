//! The `karpenter` binary's library: what the three commands need beyond the operator itself.
//! `karpenter run` is the operator (`controller`); `karpenter sandbox` wires an in-memory API
//! server, Karpenter-agnostic simulated actors, a kube-scheduler on the scheduling core
//! ([`sandbox::kube_scheduler`]), the simulated cloud and the controller into one local cluster
//! ([`sandbox`]); `karpenter simulate` plans a workload without a cluster
//! ([`simulate`]). Both read workloads the same way ([`workload`]). Tests start sandboxes through
//! [`sandbox::start_cluster`]. `run` and the commands that act on a running sandbox find their
//! API server through [`kubeconfig`].

pub mod kubeconfig;
pub mod run;
pub mod sandbox;
pub mod simulate;
pub mod workload;
