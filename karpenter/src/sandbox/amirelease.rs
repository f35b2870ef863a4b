//! `AMIRelease` (`amireleases.sandbox.karpenter.sh/v1`): a new EKS-optimized image release in
//! the sandbox's simulated cloud, asked for through the API server so any client can publish
//! one (`karpenter sandbox publish-ami`, `kubectl create -f`). The sandbox process watches these
//! objects, publishes each new one into the simulated cloud once (which moves `@latest` AMI
//! aliases and makes node classes re-resolve at once: AMI drift), and writes what it published,
//! or why it refused, to the object's status. A release marked `broken` publishes images whose
//! instances never register a Node (to test an upgrade to a bad AMI). Deleting the object does
//! not withdraw the images.

use std::sync::Arc;

use sandbox::Store;
use sandbox::actors::instances::GROUP;
use sandbox::error::Reason;
use sandbox::registry::TypeKey;
use sandbox::store::Subresource;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use controller::cloudprovider::sim::SimCloud;
use controller::cloudprovider::sim::images::{ARCHITECTURES, FAMILIES};
use controller::cloudprovider::sim::network::SimAmi;
use controller::cloudprovider::sim::release::ImageHealth;
use karpenter_core::clock::Clock;

/// API version of `AMIRelease` objects.
pub const VERSION: &str = "v1";
/// Kind of the sandbox's release objects, in group `sandbox.karpenter.sh`.
pub const KIND: &str = "AMIRelease";
/// Resource (plural) name, as in `kubectl get amireleases`.
pub const PLURAL: &str = "amireleases";
/// The status condition that says whether the release was published.
pub const PUBLISHED: &str = "Published";

/// What an `AMIRelease` asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseSpec {
    /// AMI alias family, one of [`FAMILIES`], e.g. `al2023` or `windows2022`.
    pub family: String,
    /// Release version `vYYYYMMDD`; without one, the day after the family's newest release.
    #[serde(default)]
    pub version: Option<String>,
    /// Architectures to publish images for; empty: every architecture the family is published
    /// for (`amd64` and `arm64`; Windows: `amd64`).
    #[serde(default)]
    pub architectures: Vec<String>,
    /// Publish broken images: instances booted from them run but never register a Node.
    #[serde(default)]
    pub broken: bool,
}

/// The CustomResourceDefinition of `amireleases.sandbox.karpenter.sh`, with printer columns
/// for `kubectl get amireleases`.
pub fn crd() -> Value {
    let column = |name: &str, type_: &str, path: &str, priority: i32| json!({"name": name, "type": type_, "jsonPath": path, "priority": priority});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{PLURAL}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": KIND, "plural": PLURAL, "singular": "amirelease", "listKind": "AMIReleaseList",
                "categories": ["sandbox"],
            },
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A new EKS-optimized AMI release in the sandbox's simulated cloud. Creating one publishes its images once: `family@latest` aliases then resolve to them and node classes using such an alias drift. Deleting it does not withdraw the images.",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec_schema(),
                        "status": status_schema(),
                    },
                }},
                "additionalPrinterColumns": [
                    column("Family", "string", ".spec.family", 0),
                    column("Version", "string", ".status.version", 0),
                    column("Published", "string", r#".status.conditions[?(@.type=="Published")].status"#, 0),
                    column("AMIs", "string", ".status.amis[*].id", 0),
                    column("Age", "date", ".metadata.creationTimestamp", 0),
                    column("Broken", "boolean", ".spec.broken", 1),
                    column("Reason", "string", r#".status.conditions[?(@.type=="Published")].reason"#, 1),
                ],
            }],
        },
    })
}

/// The schema of an `AMIRelease`'s spec: only what the simulated cloud publishes.
fn spec_schema() -> Value {
    json!({
        "type": "object",
        "description": "The release to publish.",
        "required": ["family"],
        "properties": {
            "family": {"type": "string", "enum": FAMILIES, "description": "AMI alias family, as in amiSelectorTerms' alias (family@version)."},
            "version": {"type": "string", "pattern": "^v[0-9]{8}$", "description": "Release version vYYYYMMDD. Default: the day after the family's newest release, so it becomes family@latest."},
            "architectures": {
                "type": "array",
                "description": "Architectures to publish an image for. Default: every architecture the family is published for (amd64 and arm64; Windows families: amd64 only).",
                "items": {"type": "string", "enum": ARCHITECTURES},
            },
            "broken": {"type": "boolean", "description": "Publish broken images: instances booted from them run, but their kubelet never starts, so no Node registers and their NodeClaims stay Launched, never Registered (to test an upgrade to a bad AMI). Default: false."},
        },
    })
}

/// The schema of an `AMIRelease`'s status.
fn status_schema() -> Value {
    let string = |description: &str| json!({"type": "string", "description": description});
    json!({
        "type": "object",
        "description": "What the simulated cloud published.",
        "properties": {
            "version": string("The release version published."),
            "amis": {
                "type": "array",
                "description": "The images published, one per architecture.",
                "items": {"type": "object", "properties": {
                    "id": string("Image id, ami-..."),
                    "name": string("Image name."),
                    "architecture": string("amd64 or arm64."),
                }},
            },
            "conditions": {
                "type": "array",
                "description": "Published: True once the images exist; False with the reason the release was refused.",
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

/// The releases still to publish: objects without a `Published` condition that are not being
/// deleted, by name, with their spec (or why it cannot be read).
pub fn pending(objects: &[Arc<Value>]) -> Vec<(String, Result<ReleaseSpec, String>)> {
    objects
        .iter()
        .filter(|o| o.pointer("/metadata/deletionTimestamp").is_none())
        .filter(|o| {
            !o.pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == PUBLISHED))
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

/// The status of a release: the images published, or the reason (CamelCase) and message of
/// the refusal; `now` is the condition's transition time.
pub fn status(outcome: &Result<Vec<SimAmi>, (String, String)>, now: jiff::Timestamp) -> Value {
    let at = jiff::Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string();
    match outcome {
        Ok(amis) => {
            let version = amis.first().map(|a| a.version.clone()).unwrap_or_default();
            let family = amis.first().map(|a| a.family.clone()).unwrap_or_default();
            let archs: Vec<&str> = amis.iter().map(|a| a.arch.as_str()).collect();
            json!({
                "version": version,
                "amis": amis.iter().map(|a| json!({"id": a.id, "name": a.name, "architecture": a.arch})).collect::<Vec<_>>(),
                "conditions": [{
                    "type": PUBLISHED, "status": "True", "reason": PUBLISHED,
                    "message": format!("published {family}@{version} for {}", archs.join(", ")),
                    "lastTransitionTime": at,
                }],
            })
        }
        Err((reason, message)) => json!({
            "conditions": [{
                "type": PUBLISHED, "status": "False", "reason": reason, "message": message,
                "lastTransitionTime": at,
            }],
        }),
    }
}

/// Publish every pending release and record the outcome in its status.
fn pass(store: &Store, sim: &SimCloud, clock: &dyn Clock) {
    let Some(rt) = store.resource(GROUP, VERSION, PLURAL) else {
        return;
    };
    let key = rt.key();
    let objects = store.objects(&key);
    for (name, spec) in pending(&objects) {
        let broken = spec.as_ref().is_ok_and(|s| s.broken);
        let outcome = spec
            .map_err(|message| ("InvalidSpec".to_string(), message))
            .and_then(|spec| {
                let archs: Vec<&str> = spec.architectures.iter().map(String::as_str).collect();
                let health = ImageHealth::broken_if(spec.broken);
                sim.publish_release(&spec.family, spec.version.as_deref(), &archs, health)
                    .map_err(|e| (e.reason().to_string(), e.to_string()))
            });
        match &outcome {
            Ok(amis) => {
                let ids: Vec<&str> = amis.iter().map(|a| a.id.as_str()).collect();
                tracing::info!(amirelease = %name, version = %amis.first().map(|a| a.version.as_str()).unwrap_or_default(), amis = ?ids, broken, "AMI release published");
            }
            Err((reason, message)) => {
                tracing::warn!(amirelease = %name, reason = %reason, error = %message, "AMI release refused");
            }
        }
        let new_status = status(&outcome, clock.now());
        let written = store.modify(&rt, "", &name, Subresource::Status, |obj| {
            obj["status"] = new_status;
            Ok(())
        });
        if let Err(e) = written
            && e.reason != Reason::NotFound
        {
            tracing::warn!(amirelease = %name, error = %e, "writing the AMIRelease status failed");
        }
    }
}

/// Install the CRD, then publish releases as `AMIRelease` objects appear, until the task is
/// aborted. The CRD is served when this returns.
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
    Ok(tokio::spawn(async move {
        loop {
            pass(&store, &sim, clock.as_ref());
            loop {
                match rx.recv().await {
                    Ok(ev) if ev.key == interest => break,
                    Ok(_) => continue,
                    Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => return,
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests;
