//! Typed views of stored objects for the actors, deserialized once per resourceVersion (an
//! informer's cache in miniature), shared by every actor that reads the type.

use std::any::Any;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use k8s_openapi::api::core::v1::{Container, Pod};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::registry::TypeKey;
use crate::store::Store;

/// Typed objects by the address and length of the stored JSON each was decoded from, with
/// that JSON: holding the bytes keeps the address from being reused for another version, so
/// an object whose stored bytes are at a known address has not changed since.
type ByJson<T> = HashMap<(usize, usize), (Bytes, Arc<T>)>;

/// Objects of one type, kept typed between passes. The typed objects live in the store
/// ([`Store::shared`]), one copy per type for all actors: five actors read pods, and a typed
/// pod is about 14 KB (heaptrack, BENCHMARKS.md "Sandbox memory").
pub struct TypedCache<T> {
    key: TypeKey,
    _typed: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned + Send + Sync + 'static> TypedCache<T> {
    /// A cache for the type stored under `key`.
    pub fn new(key: TypeKey) -> Self {
        TypedCache {
            key,
            _typed: PhantomData,
        }
    }

    /// Every object of the type now, typed, sorted by namespace and name; objects that fail to
    /// deserialize are skipped with a warning (a malformed object must not stop the
    /// simulation).
    pub fn refresh(&mut self, store: &Store) -> Vec<Arc<T>> {
        let raw = store.snapshot_encoded(&self.key);
        let shared = store.shared::<ByJson<T>>(&self.key);
        // Another actor's refresh at an older snapshot may decode an older version again; each
        // call still returns the versions of its own snapshot.
        let mut cache = shared.lock().unwrap_or_else(|e| e.into_inner());
        let mut fresh: ByJson<T> = HashMap::with_capacity(raw.len());
        let mut out: Vec<Option<Arc<T>>> = Vec::with_capacity(raw.len());
        let mut changed = Vec::new();
        // Runs on every actor pass over every object: an unchanged object costs two map
        // lookups and no allocation.
        for json in raw {
            let at = (json.as_ptr() as usize, json.len());
            match cache.remove(&at) {
                Some((json, typed)) => {
                    out.push(Some(Arc::clone(&typed)));
                    fresh.insert(at, (json, typed));
                }
                None => {
                    changed.push((out.len(), at, json));
                    out.push(None);
                }
            }
        }
        // What is left are superseded versions: dropped before the new ones are decoded, so
        // a change to every pod at once (the scheduler marking them unschedulable, kubelets
        // starting them) never holds two typed copies of each.
        cache.clear();
        for (slot, at, json) in changed {
            match serde_json::from_slice::<T>(&json) {
                Ok(mut t) => {
                    compact(&mut t);
                    let typed = Arc::new(t);
                    out[slot] = Some(Arc::clone(&typed));
                    fresh.insert(at, (json, typed));
                }
                Err(e) => {
                    let name = serde_json::from_slice::<Value>(&json)
                        .ok()
                        .and_then(|v| v.pointer("/metadata/name")?.as_str().map(String::from))
                        .unwrap_or_default();
                    tracing::warn!(kind = %self.key.plural, name = %name, error = %e, "skipping malformed object");
                }
            }
        }
        *cache = fresh;
        out.into_iter().flatten().collect()
    }

    /// One object of the type now, typed, or `None` when there is none (or it fails to
    /// deserialize, with a warning): decoded only if no reader of the type has decoded its
    /// current version yet, and then kept for them, so an actor that reads only the objects
    /// that changed shares the typed copies of those that read every object.
    pub fn get(&self, store: &Store, namespace: &str, name: &str) -> Option<Arc<T>> {
        let json = store.encoded(&self.key, namespace, name)?;
        let at = (json.as_ptr() as usize, json.len());
        let shared = store.shared::<ByJson<T>>(&self.key);
        let mut cache = shared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, typed)) = cache.get(&at) {
            return Some(Arc::clone(typed));
        }
        match serde_json::from_slice::<T>(&json) {
            Ok(mut t) => {
                compact(&mut t);
                let typed = Arc::new(t);
                cache.insert(at, (json, Arc::clone(&typed)));
                Some(typed)
            }
            Err(e) => {
                tracing::warn!(kind = %self.key.plural, name = %name, error = %e, "skipping malformed object");
                None
            }
        }
    }
}

/// Make a freshly decoded object smaller before it is cached. Only pods, the type there are
/// tens of thousands of: a typed Online Boutique pod was ~20 KB, half of it what no actor reads
/// (containers' env, probes, commands) and spare capacity serde leaves in vectors (a
/// `ContainerStatus` is 752 bytes and one status is decoded into room for four). Cached
/// objects are only read, never written back, so nothing dropped here reaches the store.
fn compact<T: Any>(object: &mut T) {
    if let Some(pod) = (object as &mut dyn Any).downcast_mut::<Pod>() {
        compact_pod(pod);
    }
}

/// [`compact`] for a pod: what the actors read stays (containers' names, images, ports,
/// resources and volume mounts; the spec's scheduling fields; status, conditions and container
/// statuses); what they never read goes, and every vector gives back its spare room.
fn compact_pod(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    if let Some(owners) = pod.metadata.owner_references.as_mut() {
        owners.shrink_to_fit();
    }
    if let Some(spec) = pod.spec.as_mut() {
        spec.containers.shrink_to_fit();
        spec.containers.iter_mut().for_each(compact_container);
        if let Some(init) = spec.init_containers.as_mut() {
            init.shrink_to_fit();
            init.iter_mut().for_each(compact_container);
        }
        if let Some(v) = spec.tolerations.as_mut() {
            v.shrink_to_fit();
        }
        if let Some(v) = spec.volumes.as_mut() {
            v.shrink_to_fit();
        }
    }
    if let Some(status) = pod.status.as_mut() {
        if let Some(v) = status.conditions.as_mut() {
            v.shrink_to_fit();
        }
        for list in [
            &mut status.container_statuses,
            &mut status.init_container_statuses,
            &mut status.ephemeral_container_statuses,
        ] {
            if let Some(v) = list.as_mut() {
                v.shrink_to_fit();
            }
        }
    }
}

fn compact_container(c: &mut Container) {
    c.env = None;
    c.env_from = None;
    c.command = None;
    c.args = None;
    c.liveness_probe = None;
    c.readiness_probe = None;
    c.startup_probe = None;
    c.lifecycle = None;
    c.security_context = None;
    c.termination_message_path = None;
    c.termination_message_policy = None;
    c.working_dir = None;
    if let Some(v) = c.ports.as_mut() {
        v.shrink_to_fit();
    }
    if let Some(v) = c.volume_mounts.as_mut() {
        v.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A cached pod keeps what the actors read (names, images, ports, resources, statuses)
    /// and loses env, probes and commands, with no spare room left in its vectors.
    #[test]
    fn a_cached_pod_keeps_what_actors_read_and_drops_the_rest() {
        let json = json!({
            "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {
                "containers": [{
                    "name": "app", "image": "web:1", "command": ["/web"],
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "ports": [{"containerPort": 8080, "hostPort": 80}],
                    "readinessProbe": {"grpc": {"port": 8080}},
                    "resources": {"requests": {"cpu": "100m"}}
                }],
                "tolerations": [{"key": "k", "operator": "Exists"}]
            },
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "app", "image": "web:1", "imageID": "",
                    "ready": true, "restartCount": 0}]
            }
        });
        let mut pod: Pod = serde_json::from_value(json).expect("a pod");
        compact(&mut pod);
        let spec = pod.spec.as_ref().expect("spec");
        let c = &spec.containers[0];
        assert_eq!(c.image.as_deref(), Some("web:1"));
        assert_eq!(c.ports.as_ref().map(|p| p[0].host_port), Some(Some(80)));
        assert!(c.resources.is_some());
        assert!(c.env.is_none() && c.command.is_none() && c.readiness_probe.is_none());
        assert_eq!(spec.tolerations.as_ref().map(Vec::capacity), Some(1));
        let status = pod.status.as_ref().expect("status");
        assert_eq!(
            status.container_statuses.as_ref().map(Vec::capacity),
            Some(1)
        );
        assert_eq!(status.conditions.as_ref().map(Vec::capacity), Some(1));
        assert_eq!(
            pod.metadata.labels.as_ref().map(|l| l["app"].as_str()),
            Some("web")
        );
    }
}
