//! `Interruption` (`interruptions.sandbox.karpenter.sh/v1`): an interruption of a node's
//! instance rehearsed in the sandbox's simulated cloud, asked for through the API server so any
//! client can ask (`karpenter sandbox interrupt`, `kubectl create -f`). The sandbox process
//! watches these objects, resolves each new one's node to its providerID (a Node's
//! `spec.providerID`, else a NodeClaim's `status.providerID` of that name), has the simulated
//! EC2 and EventBridge act once ([`super::rehearsal`]), and writes what was sent, or why
//! nothing was, to the object's status; events EC2 sends later (the reclaim of a spot instance,
//! `stopped`, `terminated`) are appended to `status.events` as they go out. Deleting the object
//! undoes nothing.

use std::sync::Arc;
use std::time::Duration;

use sandbox::Store;
use sandbox::actors::instances::GROUP;
use sandbox::error::Reason;
use sandbox::registry::TypeKey;
use sandbox::store::Subresource;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use super::amirelease::VERSION;
use super::rehearsal::{InterruptionKind, Outcome, Refusal, Rehearsal, SentEvent};
use controller::cloudprovider::sim::SimCloud;
use karpenter_core::clock::Clock;

/// Kind of the sandbox's interruption objects, in group `sandbox.karpenter.sh`.
pub const KIND: &str = "Interruption";
/// Resource (plural) name, as in `kubectl get interruptions`.
pub const PLURAL: &str = "interruptions";
/// The status condition that says whether the interruption was sent.
pub const SENT: &str = "Sent";
/// How often, while an interrupted instance is watched, the sandbox checks for a reclaim or
/// a state change to send.
pub const TICK: Duration = Duration::from_millis(250);

/// What an `Interruption` asks for.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterruptionSpec {
    /// The Node (or NodeClaim) whose instance is interrupted.
    pub node: String,
    /// What happens to it.
    pub kind: InterruptionKind,
}

/// The CustomResourceDefinition of `interruptions.sandbox.karpenter.sh`, with printer columns
/// for `kubectl get interruptions`.
pub fn crd() -> Value {
    let column = |name: &str, type_: &str, path: &str, priority: i32| json!({"name": name, "type": type_, "jsonPath": path, "priority": priority});
    let sent = |field: &str| format!(r#".status.conditions[?(@.type=="Sent")].{field}"#);
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{PLURAL}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": KIND, "plural": PLURAL, "singular": "interruption", "listKind": "InterruptionList",
                "categories": ["sandbox"],
            },
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "An interruption of a node's instance rehearsed in the sandbox's simulated cloud: EC2 and EventBridge send the event for the kind to the interruption queue and act on the instance as they would (a spot instance is reclaimed two minutes after its warning). Creating one acts once; deleting it undoes nothing.",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec_schema(),
                        "status": status_schema(),
                    },
                }},
                "additionalPrinterColumns": [
                    column("Node", "string", ".spec.node", 0),
                    column("Kind", "string", ".spec.kind", 0),
                    column("Instance", "string", ".status.instanceID", 0),
                    column("Sent", "string", &sent("status"), 0),
                    column("Reclaim-At", "string", ".status.reclaimAt", 0),
                    column("Age", "date", ".metadata.creationTimestamp", 0),
                    column("Instance-Type", "string", ".status.instanceType", 1),
                    column("Capacity-Type", "string", ".status.capacityType", 1),
                    column("Zone", "string", ".status.zone", 1),
                    column("Reason", "string", &sent("reason"), 1),
                ],
            }],
        },
    })
}

/// The schema of an `Interruption`'s spec.
fn spec_schema() -> Value {
    let kinds: Vec<&str> = InterruptionKind::ALL.iter().map(|k| k.as_str()).collect();
    json!({
        "type": "object",
        "description": "The interruption to rehearse.",
        "required": ["node", "kind"],
        "properties": {
            "node": {"type": "string", "minLength": 1, "description": "The Node whose instance is interrupted (or a NodeClaim, for an instance whose Node has not joined)."},
            "kind": {"type": "string", "enum": kinds, "description": "spot-interruption: EC2's two-minute warning, then EC2 reclaims the instance if it still runs. rebalance: EC2's rebalance recommendation only. scheduled-change: an AWS Health instance retirement, scheduled now. stopping: the instance stops (state changes stopping, stopped). terminating: the instance terminates (state changes shutting-down, terminated). spot-interruption and rebalance need a spot instance."},
        },
    })
}

/// The schema of an `Interruption`'s status.
fn status_schema() -> Value {
    let string = |description: &str| json!({"type": "string", "description": description});
    json!({
        "type": "object",
        "description": "What the simulated EC2 and EventBridge did.",
        "properties": {
            "providerID": string("The node's providerID."),
            "instanceID": string("The EC2 instance id."),
            "instanceType": string("The instance's type."),
            "zone": string("The instance's availability zone."),
            "capacityType": string("spot or on-demand."),
            "queue": string("The interruption queue the events went to."),
            "reclaimAt": {"type": "string", "format": "date-time", "description": "spot-interruption: when EC2 reclaims the instance if it still runs (two minutes after the warning)."},
            "events": {
                "type": "array",
                "description": "The events sent to the queue, oldest first: the interruption's, then the instance's state changes.",
                "items": {"type": "object", "properties": {
                    "time": {"type": "string", "format": "date-time"},
                    "detailType": string("The EventBridge detail-type."),
                    "state": string("For a state change, the state entered."),
                    "id": string("The event id."),
                    "messageId": string("The queue message id."),
                }},
            },
            "conditions": {
                "type": "array",
                "description": "Sent: True once the event is in the queue; False with the reason nothing was sent (NodeNotFound, NoInstance, NotSpot, InstanceNotRunning, InterruptionQueueOff, InvalidSpec).",
                "items": {"type": "object", "properties": {
                    "type": {"type": "string"},
                    "status": {"type": "string"},
                    "reason": {"type": "string"},
                    "message": {"type": "string"},
                    "lastTransitionTime": {"type": "string", "format": "date-time"},
                }},
            },
        },
    })
}

/// Installs [`crd`] unless it is already there.
///
/// Errors: the store refused the CRD (message), or CRDs are not served.
pub fn install_crd(store: &Store) -> Result<(), String> {
    let rt = store
        .resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .ok_or("CustomResourceDefinitions are not served")?;
    match store.create(&rt, "", crd()) {
        Ok(_) => Ok(()),
        Err(e) if e.reason == Reason::AlreadyExists => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// The interruptions still to act on: objects without a `Sent` condition that are not being
/// deleted, by name, with their spec (or why it cannot be read).
pub fn pending(objects: &[Arc<Value>]) -> Vec<(String, Result<InterruptionSpec, String>)> {
    objects
        .iter()
        .filter(|o| o.pointer("/metadata/deletionTimestamp").is_none())
        .filter(|o| {
            !o.pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == SENT))
        })
        .filter_map(|o| {
            let name = o.pointer("/metadata/name")?.as_str()?.to_string();
            let spec = o
                .get("spec")
                .cloned()
                .ok_or_else(|| "spec is missing".to_string())
                .and_then(|s| serde_json::from_value(s).map_err(|e| format!("invalid spec: {e}")));
            Some((name, spec))
        })
        .collect()
}

/// Why nothing was sent: the condition's reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotSent {
    /// CamelCase reason, e.g. `NodeNotFound`.
    pub reason: String,
    /// What to tell the user.
    pub message: String,
}

impl From<Refusal> for NotSent {
    fn from(r: Refusal) -> NotSent {
        NotSent {
            reason: r.reason().to_owned(),
            message: r.to_string(),
        }
    }
}

/// The providerID of `node`: the Node's `spec.providerID`, else that of the NodeClaim so
/// named (an instance whose Node has not joined yet).
///
/// Errors: no Node or NodeClaim has that name (`NodeNotFound`), or it has no providerID
/// (`NoInstance`).
pub fn provider_id_of(
    node: &str,
    nodes: &[Arc<Value>],
    claims: &[Arc<Value>],
) -> Result<String, NotSent> {
    let named = |objects: &[Arc<Value>], pointer: &str| {
        objects
            .iter()
            .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(node))
            .map(|o| {
                o.pointer(pointer)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            })
    };
    let found = named(nodes, "/spec/providerID")
        .map(|p| ("node", p))
        .or_else(|| named(claims, "/status/providerID").map(|p| ("nodeclaim", p)));
    match found {
        Some((_, pid)) if !pid.is_empty() => Ok(pid),
        Some((what, _)) => Err(NotSent {
            reason: "NoInstance".into(),
            message: format!("{what} {node} has no providerID: no instance to interrupt"),
        }),
        None => Err(NotSent {
            reason: "NodeNotFound".into(),
            message: format!("no node or nodeclaim named {node}"),
        }),
    }
}

fn rfc3339(t: jiff::Timestamp) -> String {
    jiff::Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

/// The status of an interruption: what was sent for `provider_id`, or why nothing was; `now`
/// is the condition's transition time.
pub fn status(
    provider_id: &str,
    outcome: &Result<Outcome, NotSent>,
    now: jiff::Timestamp,
) -> Value {
    let at = rfc3339(now);
    match outcome {
        Ok(o) => {
            let mut s = serde_json::to_value(o).unwrap_or_else(|_| json!({}));
            s["providerID"] = json!(provider_id);
            let first = o.events.first().map(|e| e.detail_type.as_str());
            let mut message = format!(
                "sent {} for {} to {}",
                first.unwrap_or_default(),
                o.instance_id,
                o.queue
            );
            if let Some(at) = o.reclaim_at {
                message.push_str(&format!("; EC2 reclaims it at {}", rfc3339(at)));
            }
            s["conditions"] = json!([{
                "type": SENT, "status": "True", "reason": SENT, "message": message,
                "lastTransitionTime": at,
            }]);
            s
        }
        Err(not) => json!({
            "providerID": provider_id,
            "conditions": [{
                "type": SENT, "status": "False", "reason": not.reason, "message": not.message,
                "lastTransitionTime": at,
            }],
        }),
    }
}

fn read(store: &Store, group: &str, plural: &str) -> Vec<Arc<Value>> {
    let key = TypeKey {
        group: group.into(),
        plural: plural.into(),
    };
    store.objects(&key)
}

fn write_status(store: &Store, name: &str, change: impl FnOnce(&mut Value)) {
    let Some(rt) = store.resource(GROUP, VERSION, PLURAL) else {
        return;
    };
    let written = store.modify(&rt, "", name, Subresource::Status, |obj| {
        change(obj);
        Ok(())
    });
    if let Err(e) = written
        && e.reason != Reason::NotFound
    {
        tracing::warn!(interruption = %name, error = %e, "writing the Interruption status failed");
    }
}

/// Act on every pending interruption, then send what EC2 does by now, recording both.
pub fn pass(store: &Store, rehearsal: &mut Rehearsal, clock: &dyn Clock) {
    let objects = read(store, GROUP, PLURAL);
    let todo = pending(&objects);
    if !todo.is_empty() {
        let nodes = read(store, "", "nodes");
        let claims = read(store, "karpenter.sh", "nodeclaims");
        for (name, spec) in todo {
            let now = clock.now();
            let (provider_id, outcome) = match spec {
                Err(message) => (
                    String::new(),
                    Err(NotSent {
                        reason: "InvalidSpec".into(),
                        message,
                    }),
                ),
                Ok(spec) => match provider_id_of(&spec.node, &nodes, &claims) {
                    Err(not) => (String::new(), Err(not)),
                    Ok(pid) => {
                        let outcome = rehearsal
                            .interrupt(&pid, spec.kind, &name, now)
                            .map_err(NotSent::from);
                        (pid, outcome)
                    }
                },
            };
            match &outcome {
                Ok(o) => {
                    tracing::info!(interruption = %name, instance = %o.instance_id, queue = %o.queue, "interruption sent");
                }
                Err(not) => {
                    tracing::warn!(interruption = %name, reason = %not.reason, error = %not.message, "interruption refused");
                }
            }
            let new_status = status(&provider_id, &outcome, now);
            write_status(store, &name, |obj| obj["status"] = new_status);
        }
    }
    for (owner, event) in rehearsal.tick(clock.now()) {
        append_event(store, &owner, &event);
    }
}

fn append_event(store: &Store, owner: &str, event: &SentEvent) {
    let Ok(value) = serde_json::to_value(event) else {
        return;
    };
    write_status(store, owner, |obj| {
        if !obj["status"]["events"].is_array() {
            obj["status"]["events"] = json!([]);
        }
        if let Some(events) = obj["status"]["events"].as_array_mut() {
            events.push(value);
        }
    });
}

/// Install the CRD, then act on `Interruption` objects as they appear and send what EC2 does
/// later, until the task is aborted. The CRD is served when this returns.
///
/// Errors: the CRD could not be installed (message).
pub fn start(
    store: &Arc<Store>,
    sim: Arc<SimCloud>,
    clock: Arc<dyn Clock>,
) -> Result<JoinHandle<()>, String> {
    install_crd(store)?;
    let store = Arc::clone(store);
    let interest = TypeKey {
        group: GROUP.to_string(),
        plural: PLURAL.to_string(),
    };
    let mut rx = store.subscribe_changes();
    let mut rehearsal = Rehearsal::new(sim);
    Ok(tokio::spawn(async move {
        loop {
            pass(&store, &mut rehearsal, clock.as_ref());
            let watching = rehearsal.is_watching();
            let tick = async {
                if watching {
                    tokio::time::sleep(TICK).await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            tokio::pin!(tick);
            loop {
                tokio::select! {
                    () = &mut tick => break,
                    ev = rx.recv() => match ev {
                        Ok(ev) if ev.key == interest => break,
                        Ok(_) => continue,
                        Err(RecvError::Lagged(_)) => break,
                        Err(RecvError::Closed) => return,
                    },
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests;
