//! Typed views of stored objects for the actors, deserialized once per resourceVersion (an
//! informer's cache in miniature), shared by every actor that reads the type.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
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
                Ok(t) => {
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
}
