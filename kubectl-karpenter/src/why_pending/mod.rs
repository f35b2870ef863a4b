//! `kubectl karpenter why-pending [POD]`: for each pending pod, either the NodeClaim (or node)
//! it is waiting for, or each NodePool's verdict — compatible (with the instance type Karpenter
//! would launch), or rejected with the exact reason: NodePool not ready, taint not tolerated,
//! requirement conflict naming the key and both sides, no instance type large enough, limit
//! reached, minValues not satisfiable.
//!
//! The verdicts come from the controller's own scheduling core
//! ([`karpenter_core::scheduling::explain`]); instance types are the simulated cloud's embedded
//! us-east-1 catalog in the zones of each EC2NodeClass's resolved subnets. [`args`] is the
//! command line, [`report`] the pure core, [`conflicts`] finds a pod's own conflicting node
//! requirements, [`render`] the text output, [`command`] reads the cluster.

pub mod args;
pub mod command;
pub mod conflicts;
pub mod render;
pub mod report;

/// Why `why-pending` could not look at the pod asked for.
#[derive(Debug, thiserror::Error)]
pub enum WhyPendingError {
    /// The named pod does not exist.
    #[error(
        "pod {name:?} not found in namespace {namespace:?}; check the name with `kubectl get \
         pods -n {namespace}`, or pass -n/--namespace"
    )]
    PodNotFound {
        /// The pod name given, without a namespace.
        name: String,
        /// The namespace searched: `-n`, else the context's, else `default`.
        namespace: String,
    },
    /// The named pod has a field its type does not allow (stored by a lax server), so it cannot
    /// be judged.
    #[error(
        "pod {name:?} in namespace {namespace:?} does not decode: {reason}; fix or recreate it \
         (`kubectl get pod {name} -n {namespace} -o yaml` shows what the server holds)"
    )]
    Undecodable {
        /// The pod name given, without a namespace.
        name: String,
        /// Its namespace.
        namespace: String,
        /// The field at fault and why, e.g. `spec.priority: invalid type: string "high",
        /// expected i32`.
        reason: String,
    },
    /// A pod name with `-A`, which names no namespace (kubectl refuses the same).
    #[error(
        "a pod cannot be looked up by name across all namespaces: pass -n NAMESPACE instead of -A"
    )]
    NameWithAllNamespaces,
}
