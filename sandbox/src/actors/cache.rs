//! Typed views of stored objects for the actors, deserialized once per resourceVersion (an
//! informer's cache in miniature), shared by every actor that reads the type.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::registry::TypeKey;
use crate::store::Store;

/// Typed objects by uid, with the resourceVersion each was decoded at.
type ByUid<T> = HashMap<String, (String, Arc<T>)>;

/// Objects of one type, kept typed between passes. The typed objects live in the store
/// ([`Store::shared`]), one copy per type for all actors: five actors read pods, and a typed
/// pod is about 11 KB (heaptrack, BENCHMARKS.md "Sandbox memory").
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

    /// Every object of the type now, typed; objects that fail to deserialize are skipped with a
    /// warning (a malformed object must not stop the simulation).
    pub fn refresh(&mut self, store: &Store) -> Vec<Arc<T>> {
        let raw: Vec<Arc<Value>> = store.snapshot(|read| read(&self.key));
        let shared = store.shared::<ByUid<T>>(&self.key);
        // Another actor's refresh at an older snapshot may decode an older version again; each
        // call still returns the versions of its own snapshot.
        let mut by_uid = shared.lock().unwrap_or_else(|e| e.into_inner());
        let mut fresh = HashMap::with_capacity(raw.len());
        let mut out = Vec::with_capacity(raw.len());
        // Runs on every actor pass over every object: an unchanged object costs two map lookups
        // and no allocation (its key moves from the old map to the new one).
        for obj in raw {
            let meta = obj.get("metadata");
            let field = |f: &str| meta.and_then(|m| m.get(f)).and_then(Value::as_str);
            let (uid, rv) = (
                field("uid").unwrap_or(""),
                field("resourceVersion").unwrap_or(""),
            );
            let entry = match by_uid.remove_entry(uid) {
                Some((key, (old_rv, typed))) if old_rv == rv => (key, (old_rv, typed)),
                _ => match serde_json::from_value::<T>((*obj).clone()) {
                    Ok(t) => (uid.to_string(), (rv.to_string(), Arc::new(t))),
                    Err(e) => {
                        tracing::warn!(kind = %self.key.plural, uid = %uid, error = %e, "skipping malformed object");
                        continue;
                    }
                },
            };
            out.push(Arc::clone(&entry.1.1));
            fresh.insert(entry.0, entry.1);
        }
        *by_uid = fresh;
        out
    }
}
