//! Pod events per node, as the pod cache applies them (upstream
//! `nodeclaim/podevents/controller.go`): a pod bound to a node that would have to move if the
//! node went away (reschedulable: active, not a DaemonSet or static pod) is counted on; one that
//! leaves it (deleted, terminating, terminal, or bound elsewhere) is counted off, and each change
//! is one pod event of that node. Consolidation compares the counts between its passes, so a pod
//! that arrives and leaves between two passes still restarts the node's `consolidateAfter`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use karpenter_core::disruption::candidates::is_reschedulable;
use karpenter_core::pod_view::PodView;

/// How many pod events each node has had since this controller started (shared by the pod
/// cache, which records them, and consolidation, which reads them). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct PodEvents(Arc<Mutex<Inner>>);

#[derive(Debug, Default)]
struct Inner {
    /// Reschedulable bound pods (uid, else `namespace/name`) and their node.
    bound: HashMap<String, String>,
    /// Pod events per node name.
    counts: HashMap<String, u64>,
}

impl PodEvents {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain maps behind: still usable.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record the pod cache applying `pod` (`deleted`: the pod is gone from the cache): a pod
    /// event for the node it arrived on and the node it left, if its binding changed.
    pub fn observe(&self, pod: &PodView, deleted: bool) {
        let key = pod.metadata.uid.clone().unwrap_or_else(|| {
            format!(
                "{}/{}",
                pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod.metadata.name.as_deref().unwrap_or_default()
            )
        });
        let on = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|_| !deleted && is_reschedulable(pod));
        let mut inner = self.lock();
        let before = match &on {
            Some(node) => inner.bound.insert(key, node.clone()),
            None => inner.bound.remove(&key),
        };
        if before == on {
            return;
        }
        for node in [before, on].into_iter().flatten() {
            *inner.counts.entry(node).or_default() += 1;
        }
    }

    /// How many pod events `node` has had (0 for a node never seen).
    pub fn count(&self, node: &str) -> u64 {
        self.lock().counts.get(node).copied().unwrap_or(0)
    }

    /// Forget the counts of nodes for which `keep` is false (nodes that are gone), so the map
    /// does not grow with every node the cluster ever had.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut inner = self.lock();
        let Inner { bound, counts } = &mut *inner;
        counts.retain(|node, _| keep(node) || bound.values().any(|n| n == node));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: Option<&str>, extra: serde_json::Value) -> PodView {
        testutil::pod("web-1")
            .merge(json!({"metadata": {"uid": "u1"}, "spec": {"nodeName": node}}))
            .merge(extra)
            .decode()
    }

    #[test]
    fn binding_leaving_and_moving_are_pod_events() {
        let events = PodEvents::default();
        events.observe(&pod(None, json!({})), false);
        assert_eq!(events.count("n1"), 0, "a pending pod is no event");
        events.observe(&pod(Some("n1"), json!({})), false);
        assert_eq!(events.count("n1"), 1, "bound");
        events.observe(
            &pod(Some("n1"), json!({"status": {"phase": "Running"}})),
            false,
        );
        assert_eq!(events.count("n1"), 1, "a status update is no event");
        events.observe(
            &pod(
                Some("n1"),
                json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
            ),
            false,
        );
        assert_eq!(events.count("n1"), 2, "terminating");
        events.observe(&pod(Some("n1"), json!({})), true);
        assert_eq!(events.count("n1"), 2, "already counted off");
        events.observe(&pod(Some("n2"), json!({})), false);
        events.observe(&pod(Some("n2"), json!({})), true);
        assert_eq!(events.count("n2"), 2, "bound, then deleted");
        events.retain(|n| n == "n2");
        assert_eq!((events.count("n1"), events.count("n2")), (0, 2));
    }
}
