//! What every controller shares: one reconcile error type and one requeue policy (conflicts
//! retry at once with the fresh object; other failures back off), and the loop that drives a
//! kube-runtime controller until its task is aborted.

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::Resource;
use kube::runtime::controller::{Action, Controller};
use serde::de::DeserializeOwned;

use super::Context;
use karpenter_core::cloud::CloudError;

/// How long a failed reconcile waits before it is retried.
pub const ERROR_REQUEUE: Duration = Duration::from_secs(5);
/// How long a reconcile that hit a write conflict waits before it is retried.
pub const CONFLICT_REQUEUE: Duration = Duration::from_millis(200);

/// Concurrent reconciles for a controller whose process requests `cpu_millicores` of CPU:
/// upstream's `LinearScaleReconciles` (`pkg/utils/controller`), `min` at 1 core (or less),
/// `max` at 60 cores, linear in between over whole cores (requests rounded up), truncated.
pub fn linear_scale_reconciles(cpu_millicores: u32, min: usize, max: usize) -> usize {
    let cores = cpu_millicores.div_ceil(1000).max(1);
    let slope = max.saturating_sub(min) as f64 / 59.0;
    let scaled = (slope * f64::from(cores - 1)) as usize + min;
    scaled.clamp(min, max.max(min))
}

/// A reconcile failure; every kind is retried.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// An API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A cloud call failed in a way that needs a retry.
    #[error("cloud provider: {0}")]
    Cloud(#[from] CloudError),
}

impl ReconcileError {
    /// Whether the object changed under the write (HTTP 409).
    pub fn is_conflict(&self) -> bool {
        matches!(self, ReconcileError::Kube(kube::Error::Api(e)) if e.code == 409)
    }
}

/// The requeue policy every controller shares: a write conflict (409) is retried after
/// [`CONFLICT_REQUEUE`] and logged at debug, any other error after [`ERROR_REQUEUE`] with a
/// warning.
pub fn error_policy<K: Resource<DynamicType = ()>>(
    obj: Arc<K>,
    err: &ReconcileError,
    _ctx: Arc<Context>,
) -> Action {
    let kind = K::kind(&());
    let name = obj.meta().name.clone().unwrap_or_default();
    if err.is_conflict() {
        tracing::debug!(kind = %kind, name = %name, error = %err, "conflict; retrying");
        return Action::requeue(CONFLICT_REQUEUE);
    }
    tracing::warn!(kind = %kind, name = %name, error = %err, "reconcile failed; retrying");
    Action::requeue(ERROR_REQUEUE)
}

/// Triggers for [`Controller::reconcile_on`] by key: each changed object mapped to the objects
/// of `store` whose `object_key` equals its `change_key` (e.g. a node's providerID to the
/// NodeClaim with that providerID). Changes are taken in batches of whatever has arrived (up to
/// 1024), and each batch is matched through one index of `store`, so a burst of changes (a
/// resync after a subscriber fell behind sends every object) costs one pass over the store
/// rather than one per change. Same `store` caveat as [`affected_by`].
pub fn affected_by_key<C, K>(
    changes: impl futures::Stream<Item = Arc<C>> + Send + 'static,
    store: kube::runtime::reflector::Store<K>,
    change_key: impl Fn(&C) -> Option<String> + Send + 'static,
    object_key: impl Fn(&K) -> Option<String> + Send + 'static,
) -> impl futures::Stream<Item = kube::runtime::reflector::ObjectRef<K>> + Send + 'static
where
    C: Send + Sync + 'static,
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    changes.ready_chunks(1024).flat_map(move |batch| {
        let keys: std::collections::HashSet<String> =
            batch.iter().filter_map(|c| change_key(c)).collect();
        let refs: Vec<_> = if keys.is_empty() {
            Vec::new()
        } else {
            store
                .state()
                .into_iter()
                .filter(|o| object_key(o).is_some_and(|k| keys.contains(&k)))
                .map(|o| kube::runtime::reflector::ObjectRef::from_obj(o.as_ref()))
                .collect()
        };
        futures::stream::iter(refs)
    })
}

/// Triggers for [`Controller::reconcile_on`]: each changed object (from
/// [`crate::state::Changes::subscribe`]) mapped to the objects of `store` that `affected` picks.
/// `store` should be the controller's own ([`Controller::store`]): an object it does not hold
/// yet gets its own reconcile when its watch event arrives, which reads the caches as they are
/// then (kube-runtime's exception: an object first seen in a relist of the controller's watch is
/// triggered before its store holds it and waits for its next change or requeue).
pub fn affected_by<C, K>(
    changes: impl futures::Stream<Item = Arc<C>> + Send + 'static,
    store: kube::runtime::reflector::Store<K>,
    affected: impl Fn(&C, &K) -> bool + Send + 'static,
) -> impl futures::Stream<Item = kube::runtime::reflector::ObjectRef<K>> + Send + 'static
where
    C: Send + Sync + 'static,
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    changes.flat_map(move |changed| {
        let refs: Vec<_> = store
            .state()
            .into_iter()
            .filter(|o| affected(&changed, o))
            .map(|o| kube::runtime::reflector::ObjectRef::from_obj(o.as_ref()))
            .collect();
        futures::stream::iter(refs)
    })
}

/// Run a controller with the shared policy until its task is aborted. When the clock jumps (a
/// test moved it on), every object is reconciled again, so requeues measured on the clock
/// (timeouts, the drift poll, drain times) are looked at at once rather than when their real-time
/// timer fires.
pub async fn drive<K, F, Fut>(controller: Controller<K>, reconcile: F, ctx: Arc<Context>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    F: FnMut(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action, ReconcileError>> + Send + 'static,
    (): Eq + Hash + Clone + Debug + Unpin,
{
    // Reconciles run outside this task: carry the controller name (cloud call metrics) along.
    let name = crate::runtime::metered::current_controller();
    let mut reconcile = reconcile;
    // Each reconcile is timed and counted by outcome (controller-runtime's
    // `controller_runtime_reconcile_time_seconds` and `controller_runtime_reconcile_total`).
    let reconcile = move |obj, ctx: Arc<Context>| {
        let metrics = Arc::clone(&ctx.metrics);
        let run = reconcile(obj, ctx);
        crate::runtime::metered::in_controller(name, async move {
            let started = std::time::Instant::now();
            let result = run.await;
            metrics.reconciled(name, result.is_ok(), started.elapsed());
            result
        })
    };
    let jumps = ctx.clock_jumped();
    controller
        .reconcile_all_on(jumps)
        .run(reconcile, error_policy::<K>, ctx)
        .for_each(|_| async {})
        .await;
}

#[cfg(test)]
mod tests {
    use super::linear_scale_reconciles;

    #[test]
    fn reconciles_scale_linearly_from_one_core_to_sixty_as_upstream() {
        // (millicores, min, max, expected): upstream's table for the NodeClaim lifecycle
        // controller (1000..5000) and the provisioning triggers (10..1000).
        for (cpu, min, max, want) in [
            (1000, 1000, 5000, 1000),
            (500, 1000, 5000, 1000),
            (1001, 1000, 5000, 1067),
            (2000, 1000, 5000, 1067),
            (30_000, 1000, 5000, 2966),
            (60_000, 1000, 5000, 5000),
            (120_000, 1000, 5000, 5000),
            (4000, 10, 1000, 60),
        ] {
            assert_eq!(
                linear_scale_reconciles(cpu, min, max),
                want,
                "{cpu}m, {min}..{max}"
            );
        }
    }
}
