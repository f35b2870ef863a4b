//! The simulated cloud as API objects: every running instance is mirrored as a cluster-scoped
//! `Instance` (`sandbox.karpenter.sh/v1`, named by instance id) so clients such as
//! `kubectl get instances` and `kubectl karpenter orphans` can see the cloud through the API
//! server. Each object carries the [`FINALIZER`]; deleting the object terminates the instance
//! (as EC2 TerminateInstances does) and then releases it. Objects whose instance went away on
//! its own are removed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{ActorConfig, BootRecord, InstanceSource, TypedCache, key, wait_for_change};
use crate::error::Reason;
use crate::registry::str_ref_at as str_at;
use crate::store::{DeleteOptions, Store, Subresource};

use crds::labels::{NODECLAIM_TAG_KEY as NODECLAIM_TAG, NODEPOOL_TAG_KEY as NODEPOOL_TAG};
pub use crds::sandbox::{
    GROUP, INSTANCE_FINALIZER as FINALIZER, INSTANCE_KIND as KIND, INSTANCE_PLURAL as PLURAL,
    VERSION,
};

/// The CustomResourceDefinition of `instances.sandbox.karpenter.sh`, with printer columns for
/// `kubectl get instances` (`-o wide` adds the provider id, image and state).
pub fn crd() -> Value {
    let string = |description: &str| json!({"type": "string", "description": description});
    let column = |name: &str, type_: &str, path: &str, priority: i32| json!({"name": name, "type": type_, "jsonPath": path, "priority": priority});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{PLURAL}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": KIND, "plural": PLURAL, "singular": "instance", "listKind": "InstanceList",
                "categories": ["sandbox"],
            },
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A running instance of the sandbox's simulated cloud. Deleting it terminates the instance.",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": {
                            "type": "object",
                            "description": "What was launched.",
                            "properties": {
                                "providerID": string("aws:///<zone>/<instance-id>, as the Node and NodeClaim carry it."),
                                "instanceType": string("Instance type, e.g. m5.large."),
                                "zone": string("Availability zone."),
                                "capacityType": string("on-demand, spot or reserved."),
                                "imageID": string("Image the instance booted."),
                                "nodeClaim": string("The karpenter.sh/nodeclaim tag: the NodeClaim it was launched for."),
                                "nodePool": string("The karpenter.sh/nodepool tag."),
                                "tags": {
                                    "type": "object",
                                    "description": "EC2 tags.",
                                    "additionalProperties": {"type": "string"},
                                },
                            },
                        },
                        "status": {
                            "type": "object",
                            "description": "What the cloud reports.",
                            "properties": {
                                "state": string("Instance state: running."),
                                "launchTime": {"type": "string", "format": "date-time", "description": "When the instance launched."},
                                "hourlyPrice": {"type": "number", "description": "Price of its offering, USD per hour."},
                                "privateIP": string("Private IPv4 address."),
                                "hostname": string("Private DNS name (the Node name its kubelet registers)."),
                            },
                        },
                    },
                }},
                "additionalPrinterColumns": [
                    column("Type", "string", ".spec.instanceType", 0),
                    column("Zone", "string", ".spec.zone", 0),
                    column("Capacity", "string", ".spec.capacityType", 0),
                    column("Price", "number", ".status.hourlyPrice", 0),
                    column("NodeClaim", "string", ".spec.nodeClaim", 0),
                    column("NodePool", "string", ".spec.nodePool", 0),
                    column("Age", "date", ".status.launchTime", 0),
                    column("ProviderID", "string", ".spec.providerID", 1),
                    column("Image", "string", ".spec.imageID", 1),
                    column("State", "string", ".status.state", 1),
                ],
            }],
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

/// The instance id at the end of a providerID (`aws:///us-east-1a/i-0abc` → `i-0abc`), when it
/// is a valid object name.
pub fn instance_id(provider_id: &str) -> Option<&str> {
    let id = provider_id.rsplit('/').next()?;
    let valid = !id.is_empty()
        && id.len() <= 253
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && id.ends_with(|c: char| c.is_ascii_alphanumeric());
    valid.then_some(id)
}

/// Whether a tag value can also be a label value (63 characters of `[A-Za-z0-9._-]`, alphanumeric
/// at both ends).
fn label_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && (v.is_empty()
            || (v.starts_with(|c: char| c.is_ascii_alphanumeric())
                && v.ends_with(|c: char| c.is_ascii_alphanumeric())))
}

/// The mirror object of one running instance; `None` when its providerID has no usable id.
pub fn object_for(record: &BootRecord) -> Option<Value> {
    let id = instance_id(&record.provider_id)?;
    let tag = |k: &str| record.tags.get(k).cloned().unwrap_or_default();
    let labels: BTreeMap<&str, String> = [NODECLAIM_TAG, NODEPOOL_TAG]
        .into_iter()
        .filter_map(|k| record.tags.get(k).map(|v| (k, v.clone())))
        .filter(|(_, v)| !v.is_empty() && label_value(v))
        .collect();
    let mut status = json!({
        "state": "running",
        "launchTime": record.launched_at.to_string(),
        "privateIP": record.private_ip,
        "hostname": record.hostname,
    });
    if let Some(price) = record.price.filter(|p| p.is_finite()) {
        status["hourlyPrice"] = json!(price);
    }
    Some(json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "metadata": {"name": id, "labels": labels, "finalizers": [FINALIZER]},
        "spec": {
            "providerID": record.provider_id,
            "instanceType": record.instance_type,
            "zone": record.zone,
            "capacityType": record.capacity_type,
            "imageID": record.image_id,
            "nodeClaim": tag(NODECLAIM_TAG),
            "nodePool": tag(NODEPOOL_TAG),
            "tags": record.tags,
        },
        "status": status,
    }))
}

/// What one mirror pass does.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MirrorPlan {
    /// Objects to create for instances that have none.
    pub create: Vec<Value>,
    /// Deleted objects whose instance still runs: `(object name, providerID)` to terminate, then
    /// release.
    pub terminate: Vec<(String, String)>,
    /// Deleted objects whose instance is gone: release the finalizer.
    pub release: Vec<String>,
    /// Live objects whose instance went away on its own: remove.
    pub remove: Vec<String>,
}

/// Compares the running instances with the mirror objects (pure).
pub fn plan(running: &[BootRecord], objects: &[Arc<Value>]) -> MirrorPlan {
    let live: BTreeMap<&str, &BootRecord> = running
        .iter()
        .filter_map(|r| instance_id(&r.provider_id).map(|id| (id, r)))
        .collect();
    let mut plan = MirrorPlan::default();
    let mut mirrored = BTreeSet::new();
    for obj in objects {
        let Some(name) = str_at(obj, &["metadata", "name"]) else {
            continue;
        };
        mirrored.insert(name);
        let deleting = crate::registry::at(obj, &["metadata", "deletionTimestamp"]).is_some();
        match (deleting, live.get(name)) {
            (true, Some(record)) => plan
                .terminate
                .push((name.to_owned(), record.provider_id.clone())),
            (true, None) => plan.release.push(name.to_owned()),
            (false, None) => plan.remove.push(name.to_owned()),
            (false, Some(_)) => {}
        }
    }
    plan.create = live
        .iter()
        .filter(|(id, _)| !mirrored.contains(*id))
        .filter_map(|(_, r)| object_for(r))
        .collect();
    plan
}

/// Removes [`FINALIZER`] from the named object (it disappears if it was being deleted).
fn release(store: &Store, rt: &crate::registry::ResourceType, name: &str) {
    let result = store.modify(rt, "", name, Subresource::Main, |obj| {
        if let Some(list) = obj
            .pointer_mut("/metadata/finalizers")
            .and_then(Value::as_array_mut)
        {
            list.retain(|f| f.as_str() != Some(FINALIZER));
        }
        Ok(())
    });
    if let Err(e) = result
        && e.reason != Reason::NotFound
    {
        tracing::warn!(instance = %name, error = %e, "instance mirror: releasing the finalizer failed");
    }
}

async fn pass(store: &Store, source: &dyn InstanceSource) {
    let Some(rt) = store.resource(GROUP, VERSION, PLURAL) else {
        return;
    };
    let running = match source.running().await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "instance mirror: listing instances failed");
            return;
        }
    };
    // Decoded only when changed since the last pass (the shared cache keeps each version).
    let objects = TypedCache::<Value>::new(key(GROUP, PLURAL)).refresh(store);
    let plan = plan(&running, &objects);
    for (name, provider_id) in &plan.terminate {
        match source.terminate(provider_id).await {
            Ok(()) => {
                tracing::info!(instance = %name, provider_id = %provider_id, "instance terminated (its Instance object was deleted)");
                release(store, &rt, name);
            }
            Err(e) => {
                tracing::warn!(instance = %name, error = %e, "instance mirror: terminating failed; retrying")
            }
        }
    }
    for name in &plan.release {
        release(store, &rt, name);
    }
    for name in &plan.remove {
        release(store, &rt, name);
        let _ = store.delete(&rt, "", name, &DeleteOptions::default());
    }
    for obj in plan.create {
        if let Err(e) = store.create(&rt, "", obj)
            && e.reason != Reason::AlreadyExists
        {
            tracing::warn!(error = %e, "instance mirror: creating an Instance object failed");
        }
    }
}

/// Keep the mirror in sync until the store goes away: a pass on every change to Instance
/// objects and every `config.kubelet_poll`.
pub async fn run(store: Arc<Store>, config: ActorConfig, source: Arc<dyn InstanceSource>) {
    let mut rx = store.subscribe_changes();
    let interest = [key(GROUP, PLURAL)];
    loop {
        pass(&store, source.as_ref()).await;
        if !wait_for_change(
            &mut rx,
            &interest,
            config.kubelet_poll,
            Duration::from_millis(20),
        )
        .await
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
