//! The sandbox's etcd: every object as JSON, one global resourceVersion counter, a bounded watch
//! history (older versions answer 410 Gone) and the write rules of kube-apiserver (uid,
//! generation, creationTimestamp, optimistic concurrency, finalizers and deletionTimestamp).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use kube::core::Selector;
use rand::Rng;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::admission;
use crate::error::{ApiError, ApiResult, Reason};
use crate::patch::{PatchType, apply_patch};
use crate::registry::{Registry, ResourceType, TypeKey};
use crate::selector::{FieldSelector, labels_match};

/// How many watch events are kept for watches that resume from an older resourceVersion.
pub const DEFAULT_HISTORY: usize = 200_000;

/// Namespaces that exist from the start, as in a new cluster.
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// The type of a watch event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// The object was created.
    Added,
    /// The object changed (including getting a deletionTimestamp).
    Modified,
    /// The object is gone.
    Deleted,
}

impl EventType {
    /// The wire name: `ADDED`, `MODIFIED`, `DELETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change to one object, in resourceVersion order.
#[derive(Clone, Debug)]
pub struct WatchEvent {
    /// The resourceVersion of this change.
    pub rv: u64,
    /// The resource type changed.
    pub key: TypeKey,
    /// Namespace of the object (empty for cluster-scoped).
    pub namespace: String,
    /// Added, modified or deleted.
    pub event_type: EventType,
    /// The object after the change (for deletions: the last state, with the deletion's version).
    pub object: Arc<Value>,
    /// The object before the change, if it existed (lets selector watches emit synthetic
    /// ADDED/DELETED events when an object starts or stops matching).
    pub previous: Option<Arc<Value>>,
}

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    /// The main resource: status is preserved when the type has a status subresource.
    Main,
    /// `/status`: only status changes.
    Status,
    /// A server-internal write that sets spec and status together (e.g. `pods/binding`).
    All,
}

/// Body of a DELETE (`meta.k8s.io/v1 DeleteOptions`), as far as the sandbox honours it.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// Precondition on the uid.
    pub uid: Option<String>,
    /// Precondition on the resourceVersion.
    pub resource_version: Option<String>,
    /// `Orphan` keeps dependents; otherwise the garbage collector removes them.
    pub orphan: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct ObjectKey {
    namespace: String,
    name: String,
}

struct Inner {
    rv: u64,
    registry: Registry,
    objects: HashMap<TypeKey, BTreeMap<ObjectKey, Arc<Value>>>,
    history: VecDeque<Arc<WatchEvent>>,
    history_cap: usize,
    /// Events with rv <= floor may have been dropped from the history.
    floor: u64,
}

/// The in-memory object store behind the API server and the simulated actors.
pub struct Store {
    inner: Mutex<Inner>,
    events: broadcast::Sender<Arc<WatchEvent>>,
}

/// A snapshot answer to a list: the items and the resourceVersion they are consistent with.
#[derive(Clone, Debug)]
pub struct Listed {
    /// Matching objects, sorted by namespace and name.
    pub items: Vec<Arc<Value>>,
    /// The store's resourceVersion at the time of the list.
    pub resource_version: u64,
}

/// A watch starting point: the backlog to replay, then the live receiver.
pub struct WatchStart {
    /// Events after the requested version (or synthetic ADDED events for every object).
    pub backlog: Vec<Arc<WatchEvent>>,
    /// Live events; the receiver reports lag when the client falls too far behind.
    pub live: broadcast::Receiver<Arc<WatchEvent>>,
    /// The store's resourceVersion when the watch started: every later change arrives on `live`.
    pub resource_version: u64,
}

/// A write transaction: every operation inside runs under one lock, so compound operations
/// (eviction checks then deletes) are atomic.
pub struct Txn<'a> {
    inner: &'a mut Inner,
    events: &'a broadcast::Sender<Arc<WatchEvent>>,
}

impl Txn<'_> {
    /// See [`Store::get`].
    pub fn get(&self, rt: &ResourceType, namespace: &str, name: &str) -> ApiResult<Arc<Value>> {
        self.inner
            .find(rt, namespace, name)
            .ok_or_else(|| ApiError::not_found(&rt.qualified(), name))
    }

    /// Every object of a type in a namespace (all namespaces for `None`).
    pub fn list(&self, rt: &ResourceType, namespace: Option<&str>) -> Vec<Arc<Value>> {
        self.inner
            .table(&rt.key())
            .map(|t| {
                t.iter()
                    .filter(|(k, _)| namespace.is_none_or(|ns| k.namespace == ns))
                    .map(|(_, o)| Arc::clone(o))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// See [`Store::delete`].
    pub fn delete(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Arc<Value>> {
        self.inner.delete(rt, namespace, name, opts, self.events)
    }

    /// Look up a served type by group, version and plural.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<ResourceType> {
        self.inner.registry.get(group, version, plural).cloned()
    }
}

impl Store {
    /// Run `f` with exclusive access to the store.
    pub fn transaction<T>(&self, f: impl FnOnce(&mut Txn<'_>) -> T) -> T {
        let mut inner = self.lock();
        let mut txn = Txn {
            inner: &mut inner,
            events: &self.events,
        };
        f(&mut txn)
    }

    /// A store holding the system namespaces, with the default watch history.
    pub fn new() -> Arc<Store> {
        Store::with_history(DEFAULT_HISTORY)
    }

    /// A store whose watch history keeps `history_cap` events (small values make 410 Gone easy
    /// to provoke in tests).
    pub fn with_history(history_cap: usize) -> Arc<Store> {
        let (events, _) = broadcast::channel(65_536);
        let store = Arc::new(Store {
            inner: Mutex::new(Inner {
                rv: 0,
                registry: Registry::default(),
                objects: HashMap::new(),
                history: VecDeque::new(),
                history_cap,
                floor: 0,
            }),
            events,
        });
        if let Some(ns) = store.resource("", "v1", "namespaces") {
            for name in SYSTEM_NAMESPACES {
                // Cannot fail on an empty store.
                let _ = store.create(&ns, "", json!({"metadata": {"name": name}}));
            }
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every write is one insert), so
        // recover the guard rather than poisoning the whole server.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A copy of the registry (for discovery and OpenAPI documents).
    pub fn registry(&self) -> Registry {
        self.lock().registry.clone()
    }

    /// Look up a served type by group, version and plural.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<ResourceType> {
        self.lock().registry.get(group, version, plural).cloned()
    }

    /// Look up a served type by `apiVersion` and `kind`.
    pub fn resource_for_kind(&self, api_version: &str, kind: &str) -> Option<ResourceType> {
        self.lock().registry.by_kind(api_version, kind).cloned()
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Subscribe to every future change (used by the simulated actors).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.events.subscribe()
    }

    /// Create an object in `namespace` (ignored for cluster-scoped types).
    ///
    /// Errors: 409 AlreadyExists, 404 when the namespace does not exist, 400/422 for a malformed
    /// object.
    pub fn create(&self, rt: &ResourceType, namespace: &str, obj: Value) -> ApiResult<Arc<Value>> {
        self.create_with(rt, namespace, obj, false)
    }

    /// [`Store::create`], refusing unknown fields of custom resources when `strict`
    /// (`fieldValidation=Strict`) instead of pruning them.
    pub fn create_with(
        &self,
        rt: &ResourceType,
        namespace: &str,
        obj: Value,
        strict: bool,
    ) -> ApiResult<Arc<Value>> {
        let mut inner = self.lock();
        inner.create(rt, namespace, obj, strict, &self.events)
    }

    /// Get one object. Errors: 404.
    pub fn get(&self, rt: &ResourceType, namespace: &str, name: &str) -> ApiResult<Arc<Value>> {
        let inner = self.lock();
        inner
            .find(rt, namespace, name)
            .ok_or_else(|| ApiError::not_found(&rt.qualified(), name))
    }

    /// List objects of a type, in one namespace or all (`None`), filtered by selectors.
    pub fn list(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        labels: &Selector,
        fields: &FieldSelector,
    ) -> Listed {
        let inner = self.lock();
        let items = inner
            .table(&rt.key())
            .map(|t| {
                t.iter()
                    .filter(|(k, _)| namespace.is_none_or(|ns| k.namespace == ns))
                    .filter(|(_, o)| labels_match(labels, o) && fields.matches(o))
                    .map(|(_, o)| Arc::clone(o))
                    .collect()
            })
            .unwrap_or_default();
        Listed {
            items,
            resource_version: inner.rv,
        }
    }

    /// Replace an object (PUT). A non-empty `metadata.resourceVersion` must match (409 otherwise).
    pub fn update(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        obj: Value,
        sub: Subresource,
    ) -> ApiResult<Arc<Value>> {
        self.update_with(rt, namespace, name, obj, sub, false)
    }

    /// [`Store::update`] with strict field validation when `strict`.
    pub fn update_with(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        obj: Value,
        sub: Subresource,
        strict: bool,
    ) -> ApiResult<Arc<Value>> {
        let mut inner = self.lock();
        inner.update(rt, namespace, name, obj, sub, strict, &self.events)
    }

    /// Apply a PATCH body to an object. Server-side apply (`Apply`) creates a missing object.
    pub fn patch(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        patch_type: PatchType,
        patch: &Value,
        sub: Subresource,
    ) -> ApiResult<Arc<Value>> {
        self.patch_with(rt, namespace, name, patch_type, patch, sub, false)
    }

    /// [`Store::patch`] with strict field validation when `strict`.
    #[allow(clippy::too_many_arguments)]
    pub fn patch_with(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        patch_type: PatchType,
        patch: &Value,
        sub: Subresource,
        strict: bool,
    ) -> ApiResult<Arc<Value>> {
        let mut inner = self.lock();
        let current = match inner.find(rt, namespace, name) {
            Some(o) => o,
            None if patch_type == PatchType::Apply && sub == Subresource::Main => {
                let mut obj = apply_patch(patch_type, &rt.group, &rt.kind, &json!({}), patch)
                    .map_err(|e| ApiError::new(Reason::BadRequest, e.to_string()))?;
                obj["metadata"]["name"] = json!(name);
                return inner.create(rt, namespace, obj, strict, &self.events);
            }
            None => return Err(ApiError::not_found(&rt.qualified(), name)),
        };
        if patch_type == PatchType::StrategicMerge && rt.crd.is_some() {
            return Err(ApiError::new(
                Reason::UnsupportedMediaType,
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ));
        }
        let mut patched =
            apply_patch(patch_type, &rt.group, &rt.kind, &current, patch).map_err(|e| {
                let reason = if matches!(e, crate::patch::PatchError::UnsupportedForKind { .. }) {
                    Reason::UnsupportedMediaType
                } else {
                    Reason::Invalid
                };
                ApiError::new(reason, e.to_string())
            })?;
        // A patch only checks the resourceVersion when it sets one explicitly.
        let explicit_rv = patch
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .map(String::from);
        match explicit_rv {
            Some(rv) => patched["metadata"]["resourceVersion"] = json!(rv),
            None => unconditional(&mut patched),
        }
        inner.update(rt, namespace, name, patched, sub, strict, &self.events)
    }

    /// Read-modify-write an object atomically (in-process actors: no conflicts possible).
    /// The closure's error aborts the write.
    pub fn modify(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        sub: Subresource,
        f: impl FnOnce(&mut Value) -> ApiResult<()>,
    ) -> ApiResult<Arc<Value>> {
        let mut inner = self.lock();
        let current = inner
            .find(rt, namespace, name)
            .ok_or_else(|| ApiError::not_found(&rt.qualified(), name))?;
        let mut obj = (*current).clone();
        f(&mut obj)?;
        if obj == *current {
            return Ok(current);
        }
        unconditional(&mut obj);
        inner.update(rt, namespace, name, obj, sub, false, &self.events)
    }

    /// Delete an object: with finalizers it only gets a deletionTimestamp; otherwise it is
    /// removed. Returns the object's last state. Errors: 404, 409 on a failed precondition.
    pub fn delete(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Arc<Value>> {
        let mut inner = self.lock();
        inner.delete(rt, namespace, name, opts, &self.events)
    }

    /// Start a watch. `from` is the client's resourceVersion: `None` or `0` replays every current
    /// object as ADDED; an older version than the history holds is 410 Gone.
    pub fn watch(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        from: Option<u64>,
    ) -> ApiResult<WatchStart> {
        let inner = self.lock();
        let key = rt.key();
        let backlog = match from {
            None | Some(0) => {
                let table = inner.table(&key);
                table
                    .into_iter()
                    .flat_map(|t| t.iter())
                    .filter(|(k, _)| namespace.is_none_or(|ns| k.namespace == ns))
                    .map(|(k, o)| {
                        Arc::new(WatchEvent {
                            rv: inner.rv,
                            key: key.clone(),
                            namespace: k.namespace.clone(),
                            event_type: EventType::Added,
                            object: Arc::clone(o),
                            previous: None,
                        })
                    })
                    .collect()
            }
            Some(rv) if rv < inner.floor => {
                return Err(ApiError::new(
                    Reason::Expired,
                    format!("too old resource version: {rv} ({})", inner.floor + 1),
                ));
            }
            Some(rv) => inner
                .history
                .iter()
                .filter(|e| e.rv > rv && e.key == key)
                .filter(|e| namespace.is_none_or(|ns| e.namespace == ns))
                .cloned()
                .collect(),
        };
        // Subscribing under the lock means no event falls between backlog and live stream.
        let live = self.events.subscribe();
        Ok(WatchStart {
            backlog,
            live,
            resource_version: inner.rv,
        })
    }

    /// Run a closure over one consistent view of several types (read-only).
    pub fn snapshot<T>(&self, f: impl FnOnce(&dyn Fn(&TypeKey) -> Vec<Arc<Value>>) -> T) -> T {
        let inner = self.lock();
        let read = |key: &TypeKey| -> Vec<Arc<Value>> {
            inner
                .table(key)
                .map(|t| t.values().cloned().collect())
                .unwrap_or_default()
        };
        f(&read)
    }

    /// Every stored object with its type (for the garbage collector).
    pub fn all_objects(&self) -> Vec<(ResourceType, Arc<Value>)> {
        let inner = self.lock();
        let mut out = Vec::new();
        for (key, table) in &inner.objects {
            if let Some(rt) = inner.registry.by_key(key) {
                out.extend(table.values().map(|o| (rt.clone(), Arc::clone(o))));
            }
        }
        out
    }
}

impl Inner {
    fn table(&self, key: &TypeKey) -> Option<&BTreeMap<ObjectKey, Arc<Value>>> {
        self.objects.get(key)
    }

    fn object_key(rt: &ResourceType, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            namespace: if rt.namespaced {
                namespace.to_string()
            } else {
                String::new()
            },
            name: name.to_string(),
        }
    }

    fn find(&self, rt: &ResourceType, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.objects
            .get(&rt.key())?
            .get(&Inner::object_key(rt, namespace, name))
            .cloned()
    }

    fn namespace_exists(&self, namespace: &str) -> bool {
        let key = TypeKey {
            group: String::new(),
            plural: "namespaces".into(),
        };
        self.objects.get(&key).is_some_and(|t| {
            t.contains_key(&ObjectKey {
                namespace: String::new(),
                name: namespace.to_string(),
            })
        })
    }

    fn create(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        mut obj: Value,
        strict: bool,
        tx: &broadcast::Sender<Arc<WatchEvent>>,
    ) -> ApiResult<Arc<Value>> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        check_type_meta(rt, &obj)?;
        let namespace = if rt.namespaced {
            let ns = match obj.pointer("/metadata/namespace").and_then(Value::as_str) {
                Some(body_ns) if !namespace.is_empty() && body_ns != namespace => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                Some(body_ns) => body_ns.to_string(),
                None if namespace.is_empty() => "default".to_string(),
                None => namespace.to_string(),
            };
            if !self.namespace_exists(&ns) {
                return Err(ApiError::not_found("namespaces", &ns));
            }
            ns
        } else {
            String::new()
        };
        let name = match obj.pointer("/metadata/name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => match obj
                .pointer("/metadata/generateName")
                .and_then(Value::as_str)
            {
                Some(prefix) if !prefix.is_empty() => self.generate_name(rt, &namespace, prefix),
                _ => {
                    return Err(ApiError::invalid(
                        &rt.kind,
                        "",
                        "metadata.name",
                        "Required value: name or generateName is required",
                    ));
                }
            },
        };
        validate_name(rt, &name)?;
        let key = Inner::object_key(rt, namespace.as_str(), &name);
        if self
            .objects
            .get(&rt.key())
            .is_some_and(|t| t.contains_key(&key))
        {
            return Err(ApiError::already_exists(&rt.qualified(), &name));
        }
        obj["apiVersion"] = json!(rt.api_version());
        obj["kind"] = json!(rt.kind);
        let meta = obj
            .as_object_mut()
            .and_then(|o| o.get_mut("metadata"))
            .and_then(Value::as_object_mut);
        let meta = match meta {
            Some(m) => m,
            None => {
                obj["metadata"] = json!({});
                obj["metadata"]
                    .as_object_mut()
                    .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?
            }
        };
        meta.insert("name".into(), json!(name));
        if rt.namespaced {
            meta.insert("namespace".into(), json!(namespace));
        } else {
            meta.remove("namespace");
        }
        meta.insert("uid".into(), json!(new_uid()));
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        meta.insert("generation".into(), json!(1));
        meta.remove("deletionTimestamp");
        meta.remove("resourceVersion");
        meta.remove("managedFields");
        if rt.status_subresource
            && let Some(o) = obj.as_object_mut()
        {
            o.remove("status");
        }
        admission::on_create(rt, &mut obj)?;
        check_schema(rt, &name, &mut obj, strict)?;
        if admission::is_crd(rt) {
            let registered = self
                .registry
                .register_crd(&obj)
                .map_err(|e| ApiError::invalid(&rt.kind, &name, "spec", &e.0))?;
            admission::crd_established(&mut obj, &registered);
        }
        Ok(self.put(rt, key, obj, EventType::Added, None, tx))
    }

    fn generate_name(&self, rt: &ResourceType, namespace: &str, prefix: &str) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut rng = rand::rng();
        loop {
            let suffix: String = (0..5)
                .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
                .collect();
            let name = format!("{prefix}{suffix}");
            if self.find(rt, namespace, &name).is_none() {
                return name;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn update(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        mut obj: Value,
        sub: Subresource,
        strict: bool,
        tx: &broadcast::Sender<Arc<WatchEvent>>,
    ) -> ApiResult<Arc<Value>> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        check_type_meta(rt, &obj)?;
        let current = self
            .find(rt, namespace, name)
            .ok_or_else(|| ApiError::not_found(&rt.qualified(), name))?;
        if let Some(body_name) = obj.pointer("/metadata/name").and_then(Value::as_str)
            && body_name != name
        {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        if let Some(rv) = obj
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            && !rv.is_empty()
            && Some(rv)
                != current
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
        {
            return Err(ApiError::conflict(&rt.qualified(), name));
        }
        obj["apiVersion"] = json!(rt.api_version());
        obj["kind"] = json!(rt.kind);
        match sub {
            Subresource::Status => {
                // Only status changes through /status.
                let status = obj.get("status").cloned();
                obj = (*current).clone();
                match status {
                    Some(s) => obj["status"] = s,
                    None => {
                        if let Some(o) = obj.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
            }
            Subresource::Main | Subresource::All => {
                if sub == Subresource::Main && rt.status_subresource {
                    match current.get("status") {
                        Some(s) => obj["status"] = s.clone(),
                        None => {
                            if let Some(o) = obj.as_object_mut() {
                                o.remove("status");
                            }
                        }
                    }
                }
                // System fields are owned by the server.
                for field in [
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "namespace",
                    "name",
                ] {
                    match current.get("metadata").and_then(|m| m.get(field)) {
                        Some(v) => obj["metadata"][field] = v.clone(),
                        None => {
                            if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut)
                            {
                                m.remove(field);
                            }
                        }
                    }
                }
                let spec_changed =
                    without_meta_and_status(&obj) != without_meta_and_status(&current);
                let generation = current
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(1);
                obj["metadata"]["generation"] = json!(if spec_changed {
                    generation + 1
                } else {
                    generation
                });
                admission::on_update(rt, &current, &mut obj)?;
                if admission::is_crd(rt) {
                    let registered = self
                        .registry
                        .register_crd(&obj)
                        .map_err(|e| ApiError::invalid(&rt.kind, name, "spec", &e.0))?;
                    admission::crd_established(&mut obj, &registered);
                }
            }
        }
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        check_schema(rt, name, &mut obj, strict)?;
        let key = Inner::object_key(rt, namespace, name);
        let deleting = obj.pointer("/metadata/deletionTimestamp").is_some();
        let finalizers_empty = obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if deleting && finalizers_empty {
            return Ok(self.remove(rt, key, tx));
        }
        if obj == *current_without_rv(&current, &obj) {
            return Ok(current);
        }
        Ok(self.put(rt, key, obj, EventType::Modified, Some(current), tx))
    }

    fn delete(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        opts: &DeleteOptions,
        tx: &broadcast::Sender<Arc<WatchEvent>>,
    ) -> ApiResult<Arc<Value>> {
        let current = self
            .find(rt, namespace, name)
            .ok_or_else(|| ApiError::not_found(&rt.qualified(), name))?;
        let meta = &current["metadata"];
        if let Some(uid) = &opts.uid
            && meta["uid"].as_str() != Some(uid)
        {
            return Err(ApiError::new(
                Reason::Conflict,
                format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta["uid"].as_str().unwrap_or_default()
                ),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && meta["resourceVersion"].as_str() != Some(rv)
        {
            return Err(ApiError::conflict(&rt.qualified(), name));
        }
        let key = Inner::object_key(rt, namespace, name);
        let has_finalizers = meta["finalizers"].as_array().is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if meta.get("deletionTimestamp").is_some() {
                return Ok(current);
            }
            let mut obj = (*current).clone();
            obj["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            let updated = self.put(rt, key, obj, EventType::Modified, Some(current), tx);
            if opts.orphan {
                self.orphan_dependents(&updated, tx);
            }
            return Ok(updated);
        }
        let last = self.remove(rt, key, tx);
        if opts.orphan {
            self.orphan_dependents(&last, tx);
        }
        Ok(last)
    }

    /// `propagationPolicy: Orphan`: dependents lose their owner reference instead of being
    /// garbage-collected.
    fn orphan_dependents(&mut self, owner: &Value, tx: &broadcast::Sender<Arc<WatchEvent>>) {
        let Some(uid) = owner.pointer("/metadata/uid").and_then(Value::as_str) else {
            return;
        };
        let mut dependents = Vec::new();
        for (type_key, table) in &self.objects {
            for (k, obj) in table {
                let refs = obj
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array);
                if refs.is_some_and(|r| r.iter().any(|o| o["uid"] == uid)) {
                    dependents.push((type_key.clone(), k.clone(), Arc::clone(obj)));
                }
            }
        }
        for (type_key, k, obj) in dependents {
            let Some(rt) = self.registry.by_key(&type_key).cloned() else {
                continue;
            };
            let mut updated = (*obj).clone();
            if let Some(refs) = updated["metadata"]["ownerReferences"].as_array_mut() {
                refs.retain(|o| o["uid"] != uid);
            }
            self.put(&rt, k, updated, EventType::Modified, Some(obj), tx);
        }
    }

    fn put(
        &mut self,
        rt: &ResourceType,
        key: ObjectKey,
        mut obj: Value,
        event_type: EventType,
        previous: Option<Arc<Value>>,
        tx: &broadcast::Sender<Arc<WatchEvent>>,
    ) -> Arc<Value> {
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let obj = Arc::new(obj);
        let namespace = key.namespace.clone();
        self.objects
            .entry(rt.key())
            .or_default()
            .insert(key, Arc::clone(&obj));
        self.record(
            rt.key(),
            namespace,
            event_type,
            Arc::clone(&obj),
            previous,
            tx,
        );
        obj
    }

    fn remove(
        &mut self,
        rt: &ResourceType,
        key: ObjectKey,
        tx: &broadcast::Sender<Arc<WatchEvent>>,
    ) -> Arc<Value> {
        let previous = self.objects.get_mut(&rt.key()).and_then(|t| t.remove(&key));
        let Some(previous) = previous else {
            return Arc::new(Value::Null);
        };
        self.rv += 1;
        let mut last = (*previous).clone();
        last["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let last = Arc::new(last);
        if admission::is_crd(rt)
            && let Some(crd) = previous["metadata"]["name"].as_str()
        {
            self.drop_crd_objects(crd, tx);
        }
        self.record(
            rt.key(),
            key.namespace,
            EventType::Deleted,
            Arc::clone(&last),
            Some(previous),
            tx,
        );
        last
    }

    /// Deleting a CRD removes its types and every object of them.
    fn drop_crd_objects(&mut self, crd: &str, tx: &broadcast::Sender<Arc<WatchEvent>>) {
        let keys: Vec<TypeKey> = self
            .registry
            .all()
            .filter(|rt| rt.crd.as_deref() == Some(crd))
            .map(ResourceType::key)
            .collect();
        self.registry.unregister_crd(crd);
        for key in keys {
            let Some(table) = self.objects.remove(&key) else {
                continue;
            };
            for (k, obj) in table {
                self.rv += 1;
                let mut last = (*obj).clone();
                last["metadata"]["resourceVersion"] = json!(self.rv.to_string());
                self.record(
                    key.clone(),
                    k.namespace,
                    EventType::Deleted,
                    Arc::new(last),
                    Some(obj),
                    tx,
                );
            }
        }
    }

    fn record(
        &mut self,
        key: TypeKey,
        namespace: String,
        event_type: EventType,
        object: Arc<Value>,
        previous: Option<Arc<Value>>,
        tx: &broadcast::Sender<Arc<WatchEvent>>,
    ) {
        let ev = Arc::new(WatchEvent {
            rv: self.rv,
            key,
            namespace,
            event_type,
            object,
            previous,
        });
        self.history.push_back(Arc::clone(&ev));
        while self.history.len() > self.history_cap {
            if let Some(old) = self.history.pop_front() {
                self.floor = old.rv;
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = tx.send(ev);
    }
}

/// Drop `metadata.resourceVersion` so the write is unconditional (no optimistic-lock check).
fn unconditional(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
}

/// The current object with its resourceVersion replaced by the candidate's, for a no-op check.
fn current_without_rv<'a>(
    current: &'a Arc<Value>,
    candidate: &Value,
) -> std::borrow::Cow<'a, Value> {
    let cand_rv = candidate.pointer("/metadata/resourceVersion");
    if cand_rv == current.pointer("/metadata/resourceVersion") {
        return std::borrow::Cow::Borrowed(current.as_ref());
    }
    let mut c = (**current).clone();
    match cand_rv {
        Some(rv) => c["metadata"]["resourceVersion"] = rv.clone(),
        None => {
            if let Some(m) = c.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
        }
    }
    std::borrow::Cow::Owned(c)
}

/// Apply a custom resource's schema: defaults, pruning, validation (422 on failure; unknown
/// fields are an error only under strict field validation).
fn check_schema(rt: &ResourceType, name: &str, obj: &mut Value, strict: bool) -> ApiResult<()> {
    let Some(schema) = rt.schema.as_deref() else {
        return Ok(());
    };
    let outcome = crate::schema::process(obj, schema);
    let mut causes: Vec<(String, String)> = outcome
        .errors
        .into_iter()
        .map(|e| (e.field, e.message))
        .collect();
    if strict {
        causes.extend(
            outcome
                .unknown
                .into_iter()
                .map(|f| (f.clone(), format!("unknown field \"{f}\""))),
        );
    }
    if causes.is_empty() {
        return Ok(());
    }
    let listed: Vec<String> = causes.iter().map(|(f, m)| format!("{f}: {m}")).collect();
    let summary = if listed.len() == 1 {
        listed[0].clone()
    } else {
        format!("[{}]", listed.join(", "))
    };
    Err(ApiError {
        reason: Reason::Invalid,
        message: format!("{}.{} \"{name}\" is invalid: {summary}", rt.kind, rt.group),
        details: Some(json!({
            "name": name, "group": rt.group, "kind": rt.kind,
            "causes": causes.iter().map(|(f, m)| json!({"reason": "FieldValueInvalid", "message": m, "field": f})).collect::<Vec<_>>(),
        })),
    })
}

fn without_meta_and_status(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
    }
    o
}

fn check_type_meta(rt: &ResourceType, obj: &Value) -> ApiResult<()> {
    if let Some(kind) = obj.get("kind").and_then(Value::as_str)
        && kind != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind {kind:?} of the object does not match the resource {:?} ({})",
            rt.qualified(),
            rt.kind
        )));
    }
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str) {
        let group = av.split_once('/').map(|(g, _)| g).unwrap_or("");
        if group != rt.group {
            return Err(ApiError::bad_request(format!(
                "the apiVersion {av:?} of the object does not match the resource {:?}",
                rt.qualified()
            )));
        }
    }
    Ok(())
}

/// Names must be DNS subdomains (RFC 1123): lowercase alphanumerics, `-` and `.`, at most 253.
fn validate_name(rt: &ResourceType, name: &str) -> ApiResult<()> {
    let ok = name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            &rt.kind,
            name,
            "metadata.name",
            &format!(
                "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            ),
        ))
    }
}

/// A random RFC 4122 version-4 UUID string.
pub fn new_uid() -> String {
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Now as an RFC 3339 timestamp with second precision, as Kubernetes writes metadata times.
pub fn now_rfc3339() -> String {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::{parse_field_selector, parse_label_selector};

    fn pods(store: &Store) -> ResourceType {
        store.resource("", "v1", "pods").expect("pods")
    }

    fn pod(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
    }

    #[test]
    fn create_sets_system_fields_and_rejects_duplicates() {
        let store = Store::new();
        let rt = pods(&store);
        let p = store.create(&rt, "default", pod("a")).expect("created");
        assert_eq!(p["metadata"]["namespace"], "default");
        assert_eq!(p["metadata"]["generation"], 1);
        assert!(p["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36));
        let err = store
            .create(&rt, "default", pod("a"))
            .expect_err("duplicate");
        assert_eq!(err.reason, Reason::AlreadyExists);
        let err = store
            .create(&rt, "nope", pod("b"))
            .expect_err("namespace missing");
        assert_eq!(err.reason, Reason::NotFound);
    }

    #[test]
    fn generate_name_appends_five_characters() {
        let store = Store::new();
        let rt = pods(&store);
        let p = store
            .create(
                &rt,
                "default",
                json!({"metadata": {"generateName": "web-"}, "spec": {}}),
            )
            .expect("created");
        let name = p["metadata"]["name"].as_str().expect("name");
        assert!(name.starts_with("web-") && name.len() == 9, "{name}");
    }

    #[test]
    fn stale_resource_version_conflicts() {
        let store = Store::new();
        let rt = pods(&store);
        let p = store.create(&rt, "default", pod("a")).expect("created");
        let mut stale = (*p).clone();
        store
            .update(&rt, "default", "a", (*p).clone(), Subresource::Main)
            .expect("no-op update");
        stale["metadata"]["labels"]["x"] = json!("1");
        stale["metadata"]["resourceVersion"] = json!("1");
        let err = store
            .update(&rt, "default", "a", stale, Subresource::Main)
            .expect_err("stale");
        assert_eq!(err.reason, Reason::Conflict);
    }

    #[test]
    fn generation_moves_with_spec_not_metadata_or_status() {
        let store = Store::new();
        let rt = pods(&store);
        store.create(&rt, "default", pod("a")).expect("created");
        let p = store
            .modify(&rt, "default", "a", Subresource::Main, |o| {
                o["metadata"]["labels"]["x"] = json!("1");
                Ok(())
            })
            .expect("label");
        assert_eq!(p["metadata"]["generation"], 1);
        let p = store
            .modify(&rt, "default", "a", Subresource::Main, |o| {
                o["spec"]["nodeName"] = json!("n1");
                Ok(())
            })
            .expect("spec");
        assert_eq!(p["metadata"]["generation"], 2);
        let p = store
            .modify(&rt, "default", "a", Subresource::Main, |o| {
                o["status"] = json!({"phase": "Running"});
                Ok(())
            })
            .expect("status ignored on main resource");
        assert_eq!(p["status"]["phase"], "Pending");
        let p = store
            .modify(&rt, "default", "a", Subresource::Status, |o| {
                o["status"] = json!({"phase": "Running"});
                o["spec"]["nodeName"] = json!("ignored");
                Ok(())
            })
            .expect("status");
        assert_eq!(p["status"]["phase"], "Running");
        assert_eq!(p["spec"]["nodeName"], "n1");
    }

    #[test]
    fn finalizers_hold_deletion_until_removed() {
        let store = Store::new();
        let rt = pods(&store);
        let mut obj = pod("a");
        obj["metadata"]["finalizers"] = json!(["example.com/hold"]);
        store.create(&rt, "default", obj).expect("created");
        let deleting = store
            .delete(&rt, "default", "a", &DeleteOptions::default())
            .expect("delete");
        assert!(deleting["metadata"]["deletionTimestamp"].is_string());
        assert!(store.get(&rt, "default", "a").is_ok());
        store
            .modify(&rt, "default", "a", Subresource::Main, |o| {
                o["metadata"]["finalizers"] = json!([]);
                Ok(())
            })
            .expect("drop finalizer");
        assert_eq!(
            store.get(&rt, "default", "a").expect_err("gone").reason,
            Reason::NotFound
        );
    }

    #[test]
    fn watch_replays_history_and_expires_old_versions() {
        let store = Store::with_history(3);
        let rt = pods(&store);
        let start = store.resource_version();
        for n in ["a", "b", "c", "d", "e"] {
            store.create(&rt, "default", pod(n)).expect("created");
        }
        let err = store.watch(&rt, None, Some(start)).err().expect("too old");
        assert_eq!(err.reason, Reason::Expired);
        let recent = store.resource_version() - 2;
        let w = store.watch(&rt, None, Some(recent)).expect("recent");
        let names: Vec<_> = w
            .backlog
            .iter()
            .map(|e| e.object["metadata"]["name"].clone())
            .collect();
        assert_eq!(names, vec![json!("d"), json!("e")]);
        let all = store
            .watch(&rt, Some("default"), Some(0))
            .expect("from zero");
        assert_eq!(all.backlog.len(), 5);
    }

    #[test]
    fn list_filters_by_namespace_and_selectors() {
        let store = Store::new();
        let rt = pods(&store);
        store.create(&rt, "default", pod("a")).expect("a");
        let mut b = pod("b");
        b["spec"]["nodeName"] = json!("n1");
        b["metadata"]["labels"]["app"] = json!("db");
        store.create(&rt, "kube-system", b).expect("b");
        let all = Selector::default();
        let none = FieldSelector::default();
        assert_eq!(store.list(&rt, None, &all, &none).items.len(), 2);
        assert_eq!(store.list(&rt, Some("default"), &all, &none).items.len(), 1);
        let web = parse_label_selector("app=web").expect("selector");
        assert_eq!(store.list(&rt, None, &web, &none).items.len(), 1);
        let on_n1 = parse_field_selector("spec.nodeName=n1").expect("selector");
        assert_eq!(store.list(&rt, None, &all, &on_n1).items.len(), 1);
    }

    #[test]
    fn crd_create_registers_type_and_delete_drops_objects() {
        let store = Store::new();
        let crds = store
            .resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .expect("crds");
        let crd = json!({"metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true}]}});
        let created = store.create(&crds, "", crd).expect("crd");
        assert_eq!(created["status"]["conditions"][0]["type"], "NamesAccepted");
        let widgets = store
            .resource("example.com", "v1", "widgets")
            .expect("registered");
        store
            .create(
                &widgets,
                "default",
                json!({"metadata": {"name": "w"}, "spec": {}}),
            )
            .expect("widget");
        store
            .delete(&crds, "", "widgets.example.com", &DeleteOptions::default())
            .expect("delete crd");
        assert!(store.resource("example.com", "v1", "widgets").is_none());
    }
}
