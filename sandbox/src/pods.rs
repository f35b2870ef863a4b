//! The two pod subresources that carry cluster rules: `pods/binding` (the scheduler's write) and
//! `pods/eviction` (a delete guarded by PodDisruptionBudgets, policy/v1 semantics).

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Reason};
use crate::selector::labels_of;
use crate::store::{DeleteOptions, Store, Subresource, Txn};

/// Bind a pod to a node: sets `spec.nodeName` and `PodScheduled=True` in one write.
///
/// Errors: 404 when the pod is gone; 409 when it is already bound or being deleted.
pub fn bind(store: &Store, namespace: &str, pod: &str, node: &str) -> ApiResult<Arc<Value>> {
    let rt = store
        .resource("", "v1", "pods")
        .ok_or_else(|| ApiError::new(Reason::InternalError, "pods are not served"))?;
    let now = store.now_rfc3339();
    store.modify(&rt, namespace, pod, Subresource::All, |p| {
        if let Some(current) = p.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            return Err(ApiError::new(
                Reason::Conflict,
                format!("Operation cannot be fulfilled on pods/binding \"{pod}\": pod {pod} is already assigned to node \"{current}\""),
            ));
        }
        if p.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(ApiError::new(
                Reason::Conflict,
                format!("Operation cannot be fulfilled on pods/binding \"{pod}\": pod {pod} is being deleted, cannot be assigned to a host"),
            ));
        }
        p["spec"]["nodeName"] = json!(node);
        // kube-apiserver clears a nomination when it binds the pod (KEP-5278: the nomination
        // was a plan; the binding is the outcome).
        if let Some(status) = p.get_mut("status").and_then(Value::as_object_mut) {
            status.remove("nominatedNodeName");
        }
        set_pod_condition(p, &now, "PodScheduled", "True", None, None);
        Ok(())
    })
}

/// Set (or replace) a pod condition at `now` (RFC 3339, [`Store::now_rfc3339`]), keeping
/// lastTransitionTime when the status is unchanged.
pub fn set_pod_condition(
    pod: &mut Value,
    now: &str,
    type_: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<&str>,
) {
    if !pod["status"]["conditions"].is_array() {
        pod["status"]["conditions"] = json!([]);
    }
    let Some(conds) = pod["status"]["conditions"].as_array_mut() else {
        return;
    };
    let existing = conds.iter_mut().find(|c| c["type"] == type_);
    let mut cond =
        json!({"type": type_, "status": status, "lastProbeTime": null, "lastTransitionTime": now});
    if let Some(r) = reason {
        cond["reason"] = json!(r);
    }
    if let Some(m) = message {
        cond["message"] = json!(m);
    }
    match existing {
        Some(c) => {
            if c["status"] == status {
                cond["lastTransitionTime"] = c["lastTransitionTime"].clone();
            }
            *c = cond;
        }
        None => conds.push(cond),
    }
}

/// Whether a pod counts as healthy for a disruption budget: Running, Ready, not deleting.
pub fn is_healthy(pod: &Value) -> bool {
    pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
        && pod.pointer("/metadata/deletionTimestamp").is_none()
        && pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
}

/// A PodDisruptionBudget's computed state: how many matching pods there are, how many are
/// healthy, how many must stay healthy, and so how many may be disrupted now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetState {
    /// Matching pods that are not terminal and not deleting.
    pub expected: i64,
    /// Of those, the healthy ones: Running, Ready and not deleting ([`is_healthy`]).
    pub current_healthy: i64,
    /// Healthy pods the budget requires.
    pub desired_healthy: i64,
    /// `current_healthy - desired_healthy`, floored at 0.
    pub disruptions_allowed: i64,
}

/// The pods a PDB's `spec.selector` picks (policy/v1: an empty selector selects every pod of the
/// namespace, a missing one selects none).
pub fn pdb_selector(pdb: &Value) -> Option<Selector> {
    let sel = pdb.pointer("/spec/selector")?;
    let ls: LabelSelector = serde_json::from_value(sel.clone()).ok()?;
    Selector::try_from(ls).ok()
}

/// Compute a PDB's state over the pods of its namespace.
pub fn budget_state(pdb: &Value, pods: &[Arc<Value>]) -> BudgetState {
    let selector = pdb_selector(pdb);
    let matching: Vec<&Arc<Value>> = pods
        .iter()
        .filter(|p| selector.as_ref().is_some_and(|s| s.matches(&labels_of(p))))
        .filter(|p| {
            let phase = p
                .pointer("/status/phase")
                .and_then(Value::as_str)
                .unwrap_or("");
            phase != "Succeeded"
                && phase != "Failed"
                && p.pointer("/metadata/deletionTimestamp").is_none()
        })
        .collect();
    let expected = matching.len() as i64;
    let current_healthy = matching.iter().filter(|p| is_healthy(p)).count() as i64;
    let desired_healthy = if let Some(min) = pdb.pointer("/spec/minAvailable") {
        scaled(min, expected)
    } else if let Some(max) = pdb.pointer("/spec/maxUnavailable") {
        (expected - scaled(max, expected)).max(0)
    } else {
        // Neither set: the budget allows no voluntary disruption beyond healthy pods.
        expected
    };
    BudgetState {
        expected,
        current_healthy,
        desired_healthy,
        disruptions_allowed: (current_healthy - desired_healthy).max(0),
    }
}

/// An IntOrString against a total: integers as is, percentages rounded up.
fn scaled(v: &Value, total: i64) -> i64 {
    match v {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
            Some(pct) => (pct * total + 99) / 100,
            None => s.parse().unwrap_or(0),
        },
        _ => 0,
    }
}

/// Evict a pod: delete it unless that would violate its PodDisruptionBudget.
///
/// Errors: 404 when the pod is gone; 429 TooManyRequests when the budget allows no disruption
/// (kubectl drain and Karpenter retry); 500 when more than one PDB selects the pod (the eviction
/// API does not support that).
pub fn evict(store: &Store, namespace: &str, pod: &str, opts: &DeleteOptions) -> ApiResult<()> {
    store.transaction(|txn| evict_in(txn, namespace, pod, opts))
}

fn evict_in(txn: &mut Txn<'_>, namespace: &str, name: &str, opts: &DeleteOptions) -> ApiResult<()> {
    let missing = || ApiError::new(Reason::InternalError, "built-in types are not served");
    let pods_rt = txn.resource("", "v1", "pods").ok_or_else(missing)?;
    let pdb_rt = txn
        .resource("policy", "v1", "poddisruptionbudgets")
        .ok_or_else(missing)?;
    let pod = txn.get(&pods_rt, namespace, name)?;
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        return Ok(());
    }
    let labels = labels_of(&pod);
    let pdbs: Vec<Arc<Value>> = txn
        .list(&pdb_rt, Some(namespace))
        .into_iter()
        .filter(|pdb| pdb_selector(pdb).is_some_and(|s| s.matches(&labels)))
        .collect();
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    if pdbs.len() > 1 {
        return Err(ApiError::new(
            Reason::InternalError,
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        ));
    }
    if let (Some(pdb), "Running") = (pdbs.first(), phase) {
        let pods = txn.list(&pods_rt, Some(namespace));
        let state = budget_state(pdb, &pods);
        let always_allow_unhealthy = pdb
            .pointer("/spec/unhealthyPodEvictionPolicy")
            .and_then(Value::as_str)
            == Some("AlwaysAllow");
        let unhealthy_ok = !is_healthy(&pod)
            && (always_allow_unhealthy || state.current_healthy >= state.desired_healthy);
        if !unhealthy_ok && state.disruptions_allowed < 1 {
            let pdb_name = pdb["metadata"]["name"].as_str().unwrap_or("");
            return Err(ApiError {
                reason: Reason::TooManyRequests,
                message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
                details: Some(json!({"causes": [{
                    "reason": "DisruptionBudget",
                    "message": format!("The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
                        state.desired_healthy, state.current_healthy),
                }]})),
            });
        }
    }
    txn.delete(&pods_rt, namespace, name, opts)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(store: &Store, name: &str) {
        let rt = store.resource("", "v1", "pods").expect("pods");
        store
            .create(&rt, "default", json!({"metadata": {"name": name, "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}}))
            .expect("pod");
        let now = store.now_rfc3339();
        store
            .modify(&rt, "default", name, Subresource::Status, |p| {
                p["status"]["phase"] = json!("Running");
                set_pod_condition(p, &now, "Ready", "True", None, None);
                Ok(())
            })
            .expect("running");
    }

    #[test]
    fn eviction_honours_min_available() {
        let store = Store::new();
        for n in ["a", "b", "c"] {
            running(&store, n);
        }
        let pdbs = store
            .resource("policy", "v1", "poddisruptionbudgets")
            .expect("pdbs");
        store
            .create(
                &pdbs,
                "default",
                json!({"metadata": {"name": "web"},
                "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}),
            )
            .expect("pdb");
        evict(&store, "default", "a", &DeleteOptions::default()).expect("first eviction allowed");
        let err =
            evict(&store, "default", "b", &DeleteOptions::default()).expect_err("budget exhausted");
        assert_eq!(err.reason, Reason::TooManyRequests);
        assert!(
            err.status()["details"]["causes"][0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("needs 2 healthy pods and has 2"))
        );
    }

    #[test]
    fn binding_twice_conflicts() {
        let store = Store::new();
        let rt = store.resource("", "v1", "pods").expect("pods");
        store
            .create(
                &rt,
                "default",
                json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}),
            )
            .expect("pod");
        let bound = bind(&store, "default", "p", "n1").expect("bound");
        assert_eq!(bound["spec"]["nodeName"], "n1");
        assert_eq!(bound["status"]["conditions"][0]["type"], "PodScheduled");
        assert_eq!(
            bind(&store, "default", "p", "n2")
                .expect_err("rebind")
                .reason,
            Reason::Conflict
        );
    }

    /// KEP-5278: kube-apiserver clears `status.nominatedNodeName` when it binds the pod, to
    /// whichever node.
    #[test]
    fn binding_clears_the_nomination() {
        let store = Store::new();
        let rt = store.resource("", "v1", "pods").expect("pods");
        store
            .create(
                &rt,
                "default",
                json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]},
                       "status": {"nominatedNodeName": "planned"}}),
            )
            .expect("pod");
        let bound = bind(&store, "default", "p", "elsewhere").expect("bound");
        assert_eq!(bound["spec"]["nodeName"], "elsewhere");
        assert!(
            bound["status"].get("nominatedNodeName").is_none(),
            "{bound}"
        );
    }

    #[test]
    fn max_unavailable_percent_rounds_up() {
        let pdb = json!({"spec": {"maxUnavailable": "50%", "selector": {}}});
        let pods: Vec<Arc<Value>> = (0..3)
            .map(|i| {
                Arc::new(
                    json!({"metadata": {"name": format!("p{i}")}, "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}]}}),
                )
            })
            .collect();
        let s = budget_state(&pdb, &pods);
        assert_eq!(
            (s.expected, s.desired_healthy, s.disruptions_allowed),
            (3, 1, 2)
        );
    }
}
