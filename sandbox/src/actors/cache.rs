//! Typed views of stored objects for the actors, deserialized once per resourceVersion (an
//! informer's cache in miniature).

use std::collections::HashMap;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::registry::TypeKey;
use crate::store::Store;

/// Objects of one type, kept typed between passes.
pub struct TypedCache<T> {
    key: TypeKey,
    by_uid: HashMap<String, (String, Arc<T>)>,
}

impl<T: DeserializeOwned> TypedCache<T> {
    /// A cache for the type stored under `key`.
    pub fn new(key: TypeKey) -> Self {
        TypedCache {
            key,
            by_uid: HashMap::new(),
        }
    }

    /// Every object of the type now, typed; objects that fail to deserialize are skipped with a
    /// warning (a malformed object must not stop the simulation).
    pub fn refresh(&mut self, store: &Store) -> Vec<Arc<T>> {
        let raw: Vec<Arc<Value>> = store.snapshot(|read| read(&self.key));
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
            let entry = match self.by_uid.remove_entry(uid) {
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
        self.by_uid = fresh;
        out
    }
}
