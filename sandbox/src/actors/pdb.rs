//! The disruption controller's status half: each PodDisruptionBudget's expected, healthy and
//! desired pod counts and how many disruptions it allows now, as `kubectl get pdb` shows them.
//! (The eviction subresource computes the same numbers live, so evictions never race this.)

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{key, wait_for_change};
use crate::pods::budget_state;
use crate::selector::FieldSelector;
use crate::store::{Store, Subresource};

fn pass(store: &Store) {
    let (Some(pdb_rt), Some(pods_rt)) = (
        store.resource("policy", "v1", "poddisruptionbudgets"),
        store.resource("", "v1", "pods"),
    ) else {
        return;
    };
    let pdbs = store.objects(&pdb_rt.key());
    if pdbs.is_empty() {
        return;
    }
    // The pods of each namespace with a budget, decoded once per pass (the store keeps pods
    // encoded): not every pod in the cluster, most of which no budget covers.
    let mut by_namespace: HashMap<String, Vec<Arc<Value>>> = HashMap::new();
    for pdb in pdbs {
        let ns = pdb
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let name = pdb
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let pods = by_namespace.entry(ns.to_owned()).or_insert_with(|| {
            let everything = kube::core::Selector::default();
            store
                .list(&pods_rt, Some(ns), &everything, &FieldSelector::default())
                .items
        });
        let s = budget_state(&pdb, pods);
        let allowed = s.disruptions_allowed > 0;
        let old = &pdb["status"];
        let unchanged = old["disruptionsAllowed"] == json!(s.disruptions_allowed)
            && old["currentHealthy"] == json!(s.current_healthy)
            && old["desiredHealthy"] == json!(s.desired_healthy)
            && old["expectedPods"] == json!(s.expected)
            && old["observedGeneration"] == pdb["metadata"]["generation"];
        if unchanged {
            continue;
        }
        let now = store.now_rfc3339();
        let _ = store.modify(&pdb_rt, ns, name, Subresource::Status, |o| {
            let was_allowed = o["status"]["conditions"][0]["status"] == "True";
            let ltt = if was_allowed == allowed && o["status"]["conditions"][0].is_object() {
                o["status"]["conditions"][0]["lastTransitionTime"].clone()
            } else {
                json!(now)
            };
            o["status"] = json!({
                "observedGeneration": o["metadata"]["generation"],
                "disruptionsAllowed": s.disruptions_allowed,
                "currentHealthy": s.current_healthy,
                "desiredHealthy": s.desired_healthy,
                "expectedPods": s.expected,
                "conditions": [{"type": "DisruptionAllowed",
                    "status": if allowed { "True" } else { "False" },
                    "reason": if allowed { "SufficientPods" } else { "InsufficientPods" },
                    "message": "", "observedGeneration": o["metadata"]["generation"],
                    "lastTransitionTime": ltt}],
            });
            Ok(())
        });
    }
}

/// Keep PDB status current until the store goes away.
pub async fn run(store: Arc<Store>) {
    let mut rx = store.subscribe_changes();
    let interest = [key("policy", "poddisruptionbudgets"), key("", "pods")];
    loop {
        pass(&store);
        if !wait_for_change(
            &mut rx,
            &interest,
            Duration::from_secs(10),
            Duration::from_millis(200),
        )
        .await
        {
            return;
        }
    }
}
