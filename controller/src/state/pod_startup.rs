//! Pods' startup durations, from the pod cache's changes (upstream's pod metrics controller,
//! `karpenter_pods_startup_duration_seconds`): a pod seen waiting for a node is remembered
//! with its creation time; when a later change shows it `Ready`, the time from creation to
//! that condition's transition is kept for the metrics to observe at the next scrape. Pods
//! already bound when first seen (running before this controller started) are not counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;
use karpenter_core::pod_view::PodView;
use karpenter_core::scheduling::pod::is_terminal;

/// At most this many durations wait for a scrape; older ones are dropped first.
const MAX_WAITING_SCRAPE: usize = 10_000;

/// Shared by the pod cache's watch (which records) and the metrics (which drain).
#[derive(Clone, Debug, Default)]
pub struct PodStartup(Arc<Mutex<Inner>>);

#[derive(Debug, Default)]
struct Inner {
    /// Pods seen without a node, by uid: their creation time.
    waiting: HashMap<String, Timestamp>,
    /// Startup durations not yet observed by the metrics, seconds.
    done: Vec<f64>,
}

impl PodStartup {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record the pod cache applying `pod` (`deleted`: gone from the cache).
    pub fn observe(&self, pod: &PodView, deleted: bool) {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return;
        };
        let mut inner = self.lock();
        if deleted || is_terminal(pod) || pod.metadata.deletion_timestamp.is_some() {
            inner.waiting.remove(uid);
            return;
        }
        let bound = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        if !bound {
            if let Some(created) = pod.metadata.creation_timestamp.as_ref() {
                inner.waiting.entry(uid.to_string()).or_insert(created.0);
            }
            return;
        }
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0);
        let Some(ready) = ready else {
            return;
        };
        if let Some(created) = inner.waiting.remove(uid) {
            let seconds = ready.duration_since(created).as_secs_f64().max(0.0);
            if inner.done.len() >= MAX_WAITING_SCRAPE {
                inner.done.remove(0);
            }
            inner.done.push(seconds);
        }
    }

    /// The durations recorded since the last call, seconds.
    pub fn drain(&self) -> Vec<f64> {
        std::mem::take(&mut self.lock().done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(extra: serde_json::Value) -> PodView {
        testutil::pod("web-1")
            .merge(json!({"metadata": {"uid": "u1", "creationTimestamp": "2026-01-01T00:00:00Z"}}))
            .merge(extra)
            .decode()
    }

    #[test]
    fn a_pod_seen_waiting_counts_from_creation_to_ready_once() {
        let startup = PodStartup::default();
        startup.observe(&pod(json!({})), false);
        startup.observe(&pod(json!({"spec": {"nodeName": "n1"}})), false);
        assert!(startup.drain().is_empty(), "bound, not ready yet");
        let ready = json!({"spec": {"nodeName": "n1"}, "status": {"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:42Z"}]}});
        startup.observe(&pod(ready.clone()), false);
        assert_eq!(startup.drain(), vec![42.0]);
        startup.observe(&pod(ready), false);
        assert!(startup.drain().is_empty(), "counted once");
    }

    #[test]
    fn a_pod_first_seen_bound_or_deleted_while_waiting_is_not_counted() {
        let startup = PodStartup::default();
        startup.observe(
            &pod(json!({"spec": {"nodeName": "n1"}, "status": {"conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:42Z"}]}})),
            false,
        );
        assert!(startup.drain().is_empty());
        startup.observe(&pod(json!({})), false);
        startup.observe(&pod(json!({})), true);
        startup.observe(
            &pod(json!({"spec": {"nodeName": "n1"}, "status": {"conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:42Z"}]}})),
            false,
        );
        assert!(startup.drain().is_empty());
    }
}
