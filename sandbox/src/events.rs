//! Events the sandbox's actors record as their real counterparts do (core/v1 `Event`s, which
//! `kubectl describe` and `kubectl get events` read): the simulated kube-scheduler's `Scheduled`
//! and `FailedScheduling`. Best effort, like the real components' recorders: a failed write is
//! logged, never returned.

use serde_json::{Value, json};

use crate::store::{Store, now_rfc3339};

/// `Normal` or `Warning`, as in `Event.type`.
pub const NORMAL: &str = "Normal";
/// A problem the user may need to act on.
pub const WARNING: &str = "Warning";

/// Record an Event about `object` (any object with `apiVersion`, `kind` and `metadata`) from
/// `component` (e.g. `default-scheduler`): named `<object name>.<16 hex digits>`, in the
/// object's namespace (`default` for cluster-scoped objects), with `count` 1 and first and last
/// timestamps now, as client-go's recorder writes a new Event.
pub fn record(
    store: &Store,
    object: &Value,
    component: &str,
    type_: &str,
    reason: &str,
    message: &str,
) {
    let Some(rt) = store.resource("", "v1", "events") else {
        return;
    };
    let meta = &object["metadata"];
    let name = meta["name"].as_str().unwrap_or_default();
    let namespace = meta["namespace"]
        .as_str()
        .filter(|n| !n.is_empty())
        .unwrap_or("default");
    let now = now_rfc3339();
    let suffix = format!("{:016x}", rand_suffix());
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": format!("{name}.{suffix}"), "namespace": namespace},
        "involvedObject": {
            "apiVersion": object["apiVersion"], "kind": object["kind"], "name": name,
            "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
        },
        "reason": reason,
        "message": message,
        "type": type_,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    if let Err(e) = store.create(&rt, namespace, event) {
        tracing::debug!(object = name, reason, error = %e, "recording an event failed");
    }
}

/// A name suffix that does not repeat within a process (client-go uses the time in nanoseconds).
fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = jiff::Timestamp::now().as_nanosecond() as u64;
    nanos.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed))
}
