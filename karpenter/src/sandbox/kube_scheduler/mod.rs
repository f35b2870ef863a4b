//! The sandbox's simulated kube-scheduler, an actor on the sandbox's store: pops pending pods
//! (schedulerName `default-scheduler`) from its scheduling queue (activeQ order: priority, then
//! age; failed pods back off or wait in the unschedulable pool for an event that may help,
//! [`queue`] with [`hints`], fed by [`informer`]), places them with a [`PodPlacer`] over a
//! [`ClusterView`] (the [`placer`] built on Karpenter's scheduling core), binds the placed ones
//! through `pods/binding`, and marks the rest `PodScheduled=False` with reason `Unschedulable`
//! and a `0/N nodes are available` message ([`unschedulable`]) — the signal Karpenter
//! provisions for — recording kube-scheduler's `Scheduled` and `FailedScheduling` Events.
//!
//! It lives in the `karpenter` crate, not the Karpenter-agnostic `sandbox` one, because its
//! placer is Karpenter's scheduling core; it reads and writes the store through the sandbox's
//! public operations (`sandbox::pods::bind`, `sandbox::events::record`, typed caches).
pub mod hints;
pub mod informer;
pub mod placer;
#[cfg(test)]
mod placer_tests;
#[cfg(test)]
mod placer_volume_tests;
pub mod queue;
#[cfg(test)]
mod queue_tests;
#[cfg(test)]
mod tests;
pub mod unschedulable;
pub mod view;
pub mod volume_binding;
pub mod volume_limits;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use sandbox::actors::csi::SELECTED_NODE;
use sandbox::actors::{TypedCache, key, wait_for_change};
use sandbox::events;
use sandbox::pods::{bind, set_pod_condition};
use sandbox::store::{Store, Subresource};
use serde_json::Value;

use self::informer::{Seen, is_active_bound};
use self::queue::{QueueConfig, SchedulingQueue, pod_key};
use self::view::{ClusterView, PodPlacer};

/// The component the scheduler's Events come from, as kube-scheduler names itself.
const SCHEDULER: &str = "default-scheduler";

/// Longest wait between passes when nothing changes; a pass without events only flushes the
/// queue's timers (backoffs, the unschedulable pool's leftovers).
const RESYNC: Duration = Duration::from_secs(5);
/// How long a burst of changes may settle before a pass.
const SETTLE: Duration = Duration::from_millis(100);

/// The message of the pod's `PodScheduled=False` condition, if it has one.
fn unschedulable_message(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .and_then(|c| c.message.as_deref())
}

/// The scheduler's informer caches.
struct Caches {
    pods: TypedCache<Pod>,
    nodes: TypedCache<Node>,
    namespaces: TypedCache<Namespace>,
    pvcs: TypedCache<PersistentVolumeClaim>,
    pvs: TypedCache<PersistentVolume>,
    storage_classes: TypedCache<StorageClass>,
    csinodes: TypedCache<CSINode>,
    volume_attachments: TypedCache<VolumeAttachment>,
}

impl Default for Caches {
    fn default() -> Self {
        Caches {
            pods: TypedCache::new(key("", "pods")),
            nodes: TypedCache::new(key("", "nodes")),
            namespaces: TypedCache::new(key("", "namespaces")),
            pvcs: TypedCache::new(key("", "persistentvolumeclaims")),
            pvs: TypedCache::new(key("", "persistentvolumes")),
            storage_classes: TypedCache::new(key("storage.k8s.io", "storageclasses")),
            csinodes: TypedCache::new(key("storage.k8s.io", "csinodes")),
            volume_attachments: TypedCache::new(key("storage.k8s.io", "volumeattachments")),
        }
    }
}

/// The scheduler between passes: its informer caches, what it saw last, and its queue.
pub struct Scheduler {
    caches: Caches,
    seen: Seen,
    queue: SchedulingQueue,
}

impl Default for Scheduler {
    fn default() -> Self {
        Scheduler::new(QueueConfig::default())
    }
}

impl Scheduler {
    /// A scheduler that has seen nothing yet, whose queue runs on `config`'s timing.
    pub fn new(config: QueueConfig) -> Scheduler {
        Scheduler {
            caches: Caches::default(),
            seen: Seen::default(),
            queue: SchedulingQueue::new(config),
        }
    }

    /// The scheduling queue (tests look where a pod waits).
    pub fn queue(&self) -> &SchedulingQueue {
        &self.queue
    }
}

/// Run one pass: feed what changed since the last pass to the queue, pop the pods ready for a
/// cycle, place them in queue order, bind the placed ones and report the others. Returns how
/// many pods were bound.
pub fn pass(store: &Store, placer: &dyn PodPlacer, state: &mut Scheduler) -> usize {
    let now = store.now();
    let caches = &mut state.caches;
    let seen = Seen {
        pods: caches.pods.refresh(store),
        nodes: caches.nodes.refresh(store),
        pvcs: caches.pvcs.refresh(store),
        pvs: caches.pvs.refresh(store),
        storage_classes: caches.storage_classes.refresh(store),
        csinodes: caches.csinodes.refresh(store),
        volume_attachments: caches.volume_attachments.refresh(store),
    };
    state.seen.observe(seen, &mut state.queue, now);
    let pending = state.queue.pop_all(now);
    if pending.is_empty() {
        return 0;
    }
    let nominated = state.queue.nominated();
    let seen = &state.seen;
    let bound: Vec<Arc<Pod>> = seen
        .pods
        .iter()
        .filter(|p| is_active_bound(p))
        .cloned()
        .collect();
    let namespaces: BTreeMap<String, BTreeMap<String, String>> = caches
        .namespaces
        .refresh(store)
        .iter()
        .filter_map(|n| {
            Some((
                n.metadata.name.clone()?,
                n.metadata.labels.clone().unwrap_or_default(),
            ))
        })
        .collect();
    let view = ClusterView {
        pending: &pending,
        nominated: &nominated,
        nodes: &seen.nodes,
        bound: &bound,
        namespaces: &namespaces,
        pvcs: &seen.pvcs,
        pvs: &seen.pvs,
        storage_classes: &seen.storage_classes,
        csinodes: &seen.csinodes,
        volume_attachments: &seen.volume_attachments,
    };
    let results = placer.place(&view);
    let Some(rt) = store.resource("", "v1", "pods") else {
        return 0;
    };
    let queue = &mut state.queue;
    let mut bound_count = 0;
    for (pod, result) in pending.iter().zip(results) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or("");
        let key = pod_key(pod);
        match result {
            Ok(node) => match select_node(store, pod, &node, &seen.pvcs, &seen.storage_classes)
                .and_then(|()| bind(store, ns, name, &node))
            {
                Ok(bound) => {
                    queue.done(&key);
                    bound_count += 1;
                    events::record(
                        store,
                        &bound,
                        SCHEDULER,
                        events::NORMAL,
                        "Scheduled",
                        &format!("Successfully assigned {ns}/{name} to {node}"),
                    );
                }
                Err(e) => {
                    queue.error(&key, now);
                    tracing::debug!(pod = name, error = %e, "binding failed");
                }
            },
            Err(why) => {
                queue.unschedulable(&key, why.plugins.clone(), now);
                // The message is built here, once per failed attempt, not per node.
                let message = why.message();
                if unschedulable_message(pod) == Some(message.as_str()) {
                    continue;
                }
                let now = store.now_rfc3339();
                let update = store.modify(&rt, ns, name, Subresource::Status, |p: &mut Value| {
                    set_pod_condition(
                        p,
                        &now,
                        "PodScheduled",
                        "False",
                        Some("Unschedulable"),
                        Some(&message),
                    );
                    Ok(())
                });
                match update {
                    Ok(marked) => events::record(
                        store,
                        &marked,
                        SCHEDULER,
                        events::WARNING,
                        "FailedScheduling",
                        &message,
                    ),
                    Err(e) => {
                        tracing::debug!(pod = name, error = %e, "marking unschedulable failed");
                    }
                }
            }
        }
    }
    bound_count
}

/// kube-scheduler's VolumeBinding PreBind: each of the pod's unbound claims whose class binds
/// `WaitForFirstConsumer` is annotated with the chosen node
/// (`volume.kubernetes.io/selected-node`), which tells the provisioner where to create its
/// volume. kube-scheduler then waits for the claims to be bound before binding the pod; here the
/// pod is bound at once and the kubelet holds it in `ContainerCreating` until its volumes are
/// attached.
///
/// Errors: a claim could not be annotated (the pod is not bound and is retried next pass).
fn select_node(
    store: &Store,
    pod: &Pod,
    node: &str,
    pvcs: &[Arc<PersistentVolumeClaim>],
    classes: &[Arc<StorageClass>],
) -> sandbox::error::ApiResult<()> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let claims = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref());
    for claim in claims {
        let Some(pvc) = pvcs.iter().find(|c| {
            c.metadata.namespace.as_deref() == Some(ns)
                && c.metadata.name.as_deref() == Some(claim.claim_name.as_str())
        }) else {
            continue;
        };
        let spec = pvc.spec.as_ref();
        let unbound = spec
            .and_then(|s| s.volume_name.as_deref())
            .is_none_or(str::is_empty);
        let class = spec.and_then(|s| s.storage_class_name.as_deref());
        let wait_for_consumer = classes.iter().any(|c| {
            c.metadata.name.as_deref() == class
                && c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
        });
        let selected = pvc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SELECTED_NODE))
            .is_some_and(|n| n == node);
        if !unbound || !wait_for_consumer || selected {
            continue;
        }
        let Some(rt) = store.resource("", "v1", "persistentvolumeclaims") else {
            continue;
        };
        store.modify(&rt, ns, &claim.claim_name, Subresource::Main, |c| {
            c["metadata"]["annotations"][SELECTED_NODE] = serde_json::json!(node);
            Ok(())
        })?;
    }
    Ok(())
}

/// Schedule until the store goes away.
pub async fn run(store: Arc<Store>, placer: Arc<dyn PodPlacer>) {
    let mut rx = store.subscribe_changes();
    let mut state = Scheduler::default();
    // Claims and volumes too: a pod waits for its claim to exist or its volume to be bound.
    let interest = [
        key("", "pods"),
        key("", "nodes"),
        key("", "persistentvolumeclaims"),
        key("", "persistentvolumes"),
        key("storage.k8s.io", "storageclasses"),
        key("storage.k8s.io", "csinodes"),
        key("storage.k8s.io", "volumeattachments"),
    ];
    loop {
        let (s, p) = (Arc::clone(&store), Arc::clone(&placer));
        let result = tokio::task::spawn_blocking(move || {
            let n = pass(&s, p.as_ref(), &mut state);
            (n, state)
        })
        .await;
        match result {
            Ok((_, st)) => state = st,
            Err(e) => {
                tracing::error!(error = %e, "scheduler pass panicked");
                return;
            }
        }
        // Wake for the queue's next backoff end or flush, on the store's clock.
        let tick = state
            .queue
            .next_wakeup()
            .and_then(|t| Duration::try_from(t.duration_since(store.now())).ok())
            .map_or(RESYNC, |d| d.min(RESYNC));
        if !wait_for_change(&mut rx, &interest, tick, SETTLE).await {
            return;
        }
    }
}
