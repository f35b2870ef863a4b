//! The sandbox's own API group (`sandbox.karpenter.sh/v1`), as its clients name it: the
//! cluster-scoped `Instance` objects that mirror the simulated cloud's instances
//! (`kubectl get instances`; `kubectl karpenter orphans` reads and deletes them). The sandbox
//! serves them; the plugin only needs these names.

/// API group of the sandbox's kinds.
pub const GROUP: &str = "sandbox.karpenter.sh";
/// API version of the sandbox's kinds.
pub const VERSION: &str = "v1";
/// Kind of the instance mirror objects (named by instance id).
pub const INSTANCE_KIND: &str = "Instance";
/// Resource (plural) name of the instance mirror objects.
pub const INSTANCE_PLURAL: &str = "instances";
/// Finalizer on every instance mirror object: deleting the object terminates the instance, and
/// the finalizer is removed once it is gone.
pub const INSTANCE_FINALIZER: &str = "sandbox.karpenter.sh/terminate";
