//! The simulated kube-scheduler: binds pending pods (schedulerName `default-scheduler`) to nodes
//! through `pods/binding`, in kube-scheduler's queue order (priority, then age), and marks the
//! rest `PodScheduled=False` with reason `Unschedulable` and a `0/N nodes are available` message
//! — the signal Karpenter provisions for.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::Value;

use super::{PodPlacer, TypedCache, key, wait_for_change};
use crate::pods::{bind, set_pod_condition};
use crate::store::{Store, Subresource};

/// Longest wait between passes when nothing changes (kube-scheduler retries unschedulable pods
/// periodically too).
const RESYNC: Duration = Duration::from_secs(5);
/// How long a burst of changes may settle before a pass.
const SETTLE: Duration = Duration::from_millis(100);

/// Whether this scheduler is responsible for the pod and it still needs a node.
fn is_pending(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    let unbound = spec
        .and_then(|s| s.node_name.as_deref())
        .is_none_or(str::is_empty);
    let ours = spec
        .and_then(|s| s.scheduler_name.as_deref())
        .is_none_or(|n| n == "default-scheduler");
    let gated = spec
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty());
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    unbound && ours && !gated && pod.metadata.deletion_timestamp.is_none() && phase == "Pending"
}

fn is_active_bound(pod: &Pod) -> bool {
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    bound && phase != "Succeeded" && phase != "Failed"
}

fn unschedulable_message(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .and_then(|c| c.message.as_deref())
}

/// Run one pass: returns how many pods were bound.
pub fn pass(
    store: &Store,
    placer: &dyn PodPlacer,
    pods: &mut TypedCache<Pod>,
    nodes: &mut TypedCache<Node>,
) -> usize {
    let all_pods = pods.refresh(store);
    let all_nodes = nodes.refresh(store);
    let mut pending: Vec<Arc<Pod>> = all_pods.iter().filter(|p| is_pending(p)).cloned().collect();
    if pending.is_empty() {
        return 0;
    }
    let bound: Vec<Arc<Pod>> = all_pods
        .iter()
        .filter(|p| is_active_bound(p))
        .cloned()
        .collect();
    pending.sort_by(|a, b| {
        let prio = |p: &Pod| p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
        let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        prio(b)
            .cmp(&prio(a))
            .then(created(a).cmp(&created(b)))
            .then(a.metadata.name.cmp(&b.metadata.name))
    });
    let results = placer.place(&pending, &all_nodes, &bound);
    let Some(rt) = store.resource("", "v1", "pods") else {
        return 0;
    };
    let mut bound_count = 0;
    for (pod, result) in pending.iter().zip(results) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or("");
        match result {
            Ok(node) => match bind(store, ns, name, &node) {
                Ok(_) => bound_count += 1,
                Err(e) => tracing::debug!(pod = name, error = %e, "binding failed"),
            },
            Err(message) => {
                if unschedulable_message(pod) == Some(message.as_str()) {
                    continue;
                }
                let update = store.modify(&rt, ns, name, Subresource::Status, |p: &mut Value| {
                    set_pod_condition(
                        p,
                        "PodScheduled",
                        "False",
                        Some("Unschedulable"),
                        Some(&message),
                    );
                    Ok(())
                });
                if let Err(e) = update {
                    tracing::debug!(pod = name, error = %e, "marking unschedulable failed");
                }
            }
        }
    }
    bound_count
}

/// Schedule until the store goes away.
pub async fn run(store: Arc<Store>, placer: Arc<dyn PodPlacer>) {
    let mut rx = store.subscribe();
    let mut pods = TypedCache::new(key("", "pods"));
    let mut nodes = TypedCache::new(key("", "nodes"));
    let interest = [key("", "pods"), key("", "nodes")];
    loop {
        let (s, p) = (Arc::clone(&store), Arc::clone(&placer));
        let result = tokio::task::spawn_blocking(move || {
            let n = pass(&s, p.as_ref(), &mut pods, &mut nodes);
            (n, pods, nodes)
        })
        .await;
        match result {
            Ok((_, p, n)) => {
                pods = p;
                nodes = n;
            }
            Err(e) => {
                tracing::error!(error = %e, "scheduler pass panicked");
                return;
            }
        }
        if !wait_for_change(&mut rx, &interest, RESYNC, SETTLE).await {
            return;
        }
    }
}
