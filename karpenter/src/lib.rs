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

/// How `karpenter sandbox --report` and `karpenter simulate --report` print their report. It
/// stands here, not in either command, because both use it and the sandbox reads the simulate
/// command's `--capacity-reservations` reader: neither command's module imports the other back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// Human-readable summary: settle time, pod and NodeClaim counts, cost, instance types,
    /// why pods are pending.
    Text,
    /// One JSON document on stdout (logs stay on stderr).
    Json,
}
