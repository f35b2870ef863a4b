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
        for obj in raw {
            let uid = obj
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let rv = obj
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let typed = match self.by_uid.remove(&uid) {
                Some((old_rv, typed)) if old_rv == rv => typed,
                _ => match serde_json::from_value::<T>((*obj).clone()) {
                    Ok(t) => Arc::new(t),
                    Err(e) => {
                        tracing::warn!(kind = %self.key.plural, uid = %uid, error = %e, "skipping malformed object");
                        continue;
                    }
                },
            };
            out.push(Arc::clone(&typed));
            fresh.insert(uid, (rv, typed));
        }
        self.by_uid = fresh;
        out
    }
}
