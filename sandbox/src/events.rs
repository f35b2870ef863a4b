//! Events the sandbox's actors record as their real counterparts do (core/v1 `Event`s, which
//! `kubectl describe` and `kubectl get events` read): the simulated kube-scheduler's `Scheduled`
//! and `FailedScheduling`. Best effort, like the real components' recorders: a failed write is
//! logged, never returned.

use serde_json::{Value, json};

use crate::error::Reason;
use crate::store::{Store, Subresource};

/// `Normal` or `Warning`, as in `Event.type`.
pub const NORMAL: &str = "Normal";
/// A problem the user may need to act on.
pub const WARNING: &str = "Warning";

/// Record an Event about `object` (any object with `apiVersion`, `kind` and `metadata`) from
/// `component` (e.g. `default-scheduler`), in the object's namespace (`default` for
/// cluster-scoped objects), as client-go's recorder does with its correlator: the first one of a
/// kind is created with `count` 1 and first and last timestamps now; a later one about the same
/// object with the same reason, type and component updates that Event instead (its message, a
/// `count` one higher, `lastTimestamp`), so a pod the scheduler retries a thousand times has one
/// `FailedScheduling` Event, not a thousand. (client-go keeps up to 10 distinct messages apart
/// before combining them; here the latest message always replaces the previous one.) The Event
/// is named `<object name>.<16 hex digits>`, the digits derived from that key.
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
    let uid = meta["uid"].as_str().unwrap_or_default();
    let event_name = format!("{name}.{:016x}", key_hash(&[uid, component, type_, reason]));
    let now = store.now_rfc3339();
    let involved = json!({
        "apiVersion": object["apiVersion"], "kind": object["kind"], "name": name,
        "namespace": meta["namespace"], "uid": meta["uid"],
        "resourceVersion": meta["resourceVersion"],
    });
    let updated = store.modify(&rt, namespace, &event_name, Subresource::Main, |e| {
        let count = e["count"].as_u64().unwrap_or(1);
        e["count"] = json!(count + 1);
        e["message"] = json!(message);
        e["lastTimestamp"] = json!(now);
        e["involvedObject"] = involved.clone();
        Ok(())
    });
    match updated {
        Ok(_) => return,
        Err(e) if e.reason == Reason::NotFound => {}
        Err(e) => {
            tracing::debug!(object = name, reason, error = %e, "updating an event failed");
            return;
        }
    }
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name, "namespace": namespace},
        "involvedObject": involved,
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

/// A stable 64-bit hash of the parts (SipHash with fixed keys), for Event names.
fn key_hash(parts: &[&str]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_event_is_counted_on_one_object() {
        let store = Store::new();
        let pods = store.resource("", "v1", "pods").expect("pods");
        let pod = testutil::pod("web").image("nginx").json();
        let pod = store.create(&pods, "default", pod).expect("pod");
        let events = store.resource("", "v1", "events").expect("events");
        let list = || {
            store
                .list(
                    &events,
                    Some("default"),
                    &Default::default(),
                    &Default::default(),
                )
                .items
        };
        for nodes in 1..=3 {
            let message = format!("0/{nodes} nodes are available: 1 Insufficient cpu.");
            record(
                &store,
                &pod,
                "default-scheduler",
                WARNING,
                "FailedScheduling",
                &message,
            );
        }
        let failed = list();
        assert_eq!(failed.len(), 1, "one Event, updated: {failed:?}");
        assert_eq!(failed[0]["count"], 3);
        assert_eq!(
            failed[0]["message"],
            "0/3 nodes are available: 1 Insufficient cpu."
        );
        assert_eq!(failed[0]["involvedObject"]["name"], "web");
        assert!(
            failed[0]["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("web."))
        );
        record(
            &store,
            &pod,
            "default-scheduler",
            NORMAL,
            "Scheduled",
            "Successfully assigned default/web to n1",
        );
        let all = list();
        assert_eq!(all.len(), 2);
        assert!(
            all.iter()
                .any(|e| e["reason"] == "Scheduled" && e["count"] == 1)
        );
    }
}
