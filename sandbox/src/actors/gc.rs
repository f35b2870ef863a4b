//! Garbage collection as kube-controller-manager does it: dependents whose owners are all gone
//! (background propagation), pods bound to nodes that no longer exist (pod GC), and objects
//! left in namespaces that were deleted.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::registry::str_ref_at as str_at;
use crate::store::{DeleteOptions, Store};

/// One collection pass; returns how many objects it deleted.
pub fn pass(store: &Store) -> usize {
    let objects = store.all_objects();
    let uids: HashSet<&str> = objects
        .iter()
        .filter_map(|(_, o)| str_at(o, &["metadata", "uid"]))
        .collect();
    let nodes: HashSet<&str> = objects
        .iter()
        .filter(|(rt, _)| rt.group.is_empty() && rt.plural == "nodes")
        .filter_map(|(_, o)| str_at(o, &["metadata", "name"]))
        .collect();
    let namespaces: HashSet<&str> = objects
        .iter()
        .filter(|(rt, _)| rt.group.is_empty() && rt.plural == "namespaces")
        .filter_map(|(_, o)| str_at(o, &["metadata", "name"]))
        .collect();
    let mut deleted = 0;
    for (rt, obj) in &objects {
        let ns = str_at(obj, &["metadata", "namespace"]).unwrap_or("");
        let name = str_at(obj, &["metadata", "name"]).unwrap_or("");
        if crate::registry::at(obj, &["metadata", "deletionTimestamp"]).is_some() {
            continue;
        }
        let owners: Vec<&str> = crate::registry::at(obj, &["metadata", "ownerReferences"])
            .and_then(Value::as_array)
            .map(|refs| refs.iter().filter_map(|r| r["uid"].as_str()).collect())
            .unwrap_or_default();
        let orphaned = !owners.is_empty() && owners.iter().all(|u| !uids.contains(u));
        let lost_node = rt.group.is_empty()
            && rt.plural == "pods"
            && str_at(obj, &["spec", "nodeName"])
                .is_some_and(|n| !n.is_empty() && !nodes.contains(n));
        let lost_namespace = rt.namespaced && !namespaces.contains(ns);
        if (orphaned || lost_node || lost_namespace)
            && store
                .delete(rt, ns, name, &DeleteOptions::default())
                .is_ok()
        {
            deleted += 1;
        }
    }
    deleted
}

/// Collect garbage every second until the task is aborted. A pass reads every stored object,
/// which takes a while in a cluster of thousands of pods and Events, so it runs on the blocking
/// pool rather than holding up an API server worker; the next tick waits for it.
pub async fn run(store: Arc<Store>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let s = Arc::clone(&store);
        if tokio::task::spawn_blocking(move || pass(&s)).await.is_err() {
            tracing::error!("garbage collection pass panicked");
            return;
        }
    }
}
