//! The sandbox's etcd: every object as JSON, one global resourceVersion counter, a bounded watch
//! history (older versions answer 410 Gone) and the write rules of kube-apiserver (uid,
//! generation, creationTimestamp, optimistic concurrency, finalizers and deletionTimestamp).

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use kube::core::Selector;
use rand::Rng;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::error::{ApiError, ApiResult, Reason};
use crate::patch::{PatchType, apply_patch};
use crate::registry::{Registry, ResourceType, TypeKey};
use crate::selector::{FieldSelector, labels_match};

/// How long each resource type's watch history keeps a change at least, so a watch that
/// resumes from an older resourceVersion is served (older ones answer 410 `Expired` and the
/// client lists again, as after an etcd compaction). kube-apiserver's watch cache keeps 75 s
/// (`eventFreshDuration`, k8s.io/apiserver `pkg/storage/cacher/watch_cache.go`).
pub const HISTORY_FRESH: Duration = Duration::from_secs(75);

/// Changes of one resource type its history keeps at most, even if fresher than
/// [`HISTORY_FRESH`]: kube-apiserver's upper bound of a watch cache's capacity
/// (`defaultUpperBoundCapacity`, 100 × 1024). Each holds the object's version at that change
/// as encoded JSON (about 3 KB for a pod), packed once older than [`HISTORY_RECENT`] changes, so
/// this bounds the memory superseded versions take.
pub const HISTORY_MAX: usize = 100 * 1024;

/// How many of each type's newest changes its history keeps as they were made, shared with the
/// live channel and watchers; older ones are packed in compressed blocks of [`HISTORY_BLOCK`]
/// (`history::TypeHistory`). A watch resuming from further back than this is served from the
/// packed blocks, decoded again. At 20,400 pods the unpacked history held about 550 MiB of
/// superseded versions (BENCHMARKS.md).
pub const HISTORY_RECENT: usize = 4096;

/// How many changes one packed block of the watch history holds: one zstd frame, so the
/// similar versions of similar objects compress against each other.
pub const HISTORY_BLOCK: usize = 256;

/// Changes of one resource type its history keeps however old they are: kube-apiserver's
/// lower bound (`defaultLowerBoundCapacity`). A type that changes rarely (NodePools, node
/// classes) keeps its last changes, so its watchers resume instead of listing again.
pub const HISTORY_MIN: usize = 100;

/// How many changes the live channel to watchers and actors buffers. A slower receiver is told
/// it lagged: an actor runs a full pass, a watch ends and its client resumes from its type's
/// history ([`HISTORY_FRESH`]), as kube-apiserver closes a watcher that does not keep up. The
/// channel shares its events (and their encoded objects) with the history.
pub const LIVE_BUFFER: usize = 16_384;

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
    /// The resource type of the object changed (group and plural).
    pub key: TypeKey,
    /// Namespace of the object (empty for cluster-scoped).
    pub namespace: String,
    /// Added, modified or deleted.
    pub event_type: EventType,
    /// The object after the change as JSON (for deletions: the last state, with the deletion's
    /// version). Encoded once when the change is recorded and shared by every watcher, the live
    /// channel, the history and the store's current object: a pod is about 3 KB encoded against
    /// 24 KB as a `serde_json::Value`, and the history keeps up to [`HISTORY_MAX`] superseded
    /// versions of each type.
    pub object: Bytes,
    /// For a modification, the object before it as JSON (the previous event's encoding, shared,
    /// not copied): selector watches turn an object that starts or stops matching into ADDED or
    /// DELETED. `None` for additions and deletions (a deleted object's last state matches as the
    /// object before its deletion did).
    pub previous: Option<Bytes>,
}

impl WatchEvent {
    /// The object after the change, decoded. `Value::Null` only if the encoding is not JSON,
    /// which the store never writes.
    pub fn decoded(&self) -> Value {
        serde_json::from_slice(&self.object).unwrap_or(Value::Null)
    }
}

/// `object` as the JSON the store keeps and a watch event carries ([`WatchEvent::object`]).
pub(crate) fn encode(object: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(object).unwrap_or_default())
}

/// A stored object's JSON, decoded. `Value::Null` only if the bytes are not JSON, which the
/// store never writes.
fn decode(json: &Bytes) -> Arc<Value> {
    Arc::new(serde_json::from_slice(json).unwrap_or(Value::Null))
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
    /// `preconditions.uid`: delete only the object with this uid (409 otherwise).
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`: delete only at this version (409 otherwise).
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
    /// Every current object as encoded JSON (about 3 KB for a pod, against 24 KB as a
    /// `serde_json::Value`), the same bytes its last watch event carries: as etcd keeps
    /// objects, decoded when read.
    objects: HashMap<TypeKey, BTreeMap<ObjectKey, Bytes>>,
    /// Each type's recent changes, as kube-apiserver keeps one watch cache per resource.
    history: HashMap<TypeKey, TypeHistory>,
    limits: HistoryLimits,
    /// The store's clock, for the times writes stamp.
    clock: Now,
}

/// How much watch history each resource type keeps ([`HISTORY_FRESH`], [`HISTORY_MAX`],
/// [`HISTORY_MIN`]).
#[derive(Clone, Copy, Debug)]
pub struct HistoryLimits {
    /// Changes younger than this stay (up to `max`).
    pub fresh: Duration,
    /// At most this many changes per type.
    pub max: usize,
    /// At least this many changes per type stay, however old.
    pub min: usize,
    /// The newest this many changes stay as made; older ones are packed ([`HISTORY_RECENT`]).
    pub recent: usize,
    /// Changes per packed block ([`HISTORY_BLOCK`]).
    pub block: usize,
}

impl Default for HistoryLimits {
    fn default() -> Self {
        HistoryLimits {
            fresh: HISTORY_FRESH,
            max: HISTORY_MAX,
            min: HISTORY_MIN,
            recent: HISTORY_RECENT,
            block: HISTORY_BLOCK,
        }
    }
}

/// A change's type, object and resourceVersion, without the object's JSON
/// ([`Store::subscribe_changes`]): what an actor needs to know which objects to look at again
/// (its dirty set, `actors::Dirty`), as an informer's event handler queues a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changed {
    /// The resource type of the object changed.
    pub key: TypeKey,
    /// The resourceVersion of the change.
    pub rv: u64,
    /// Namespace of the object changed (empty for cluster-scoped types).
    pub namespace: String,
    /// Name of the object changed.
    pub name: String,
}

/// The live channels every change is sent on: whole events to watch streams, and what changed
/// to the actors.
pub(crate) struct Live {
    events: broadcast::Sender<Arc<WatchEvent>>,
    changes: broadcast::Sender<Changed>,
}

impl Live {
    /// Send a change to the object `name` on both channels (having no receivers is fine:
    /// nobody is watching).
    fn send(&self, event: Arc<WatchEvent>, name: &str) {
        let _ = self.changes.send(Changed {
            key: event.key.clone(),
            rv: event.rv,
            namespace: event.namespace.clone(),
            name: name.to_owned(),
        });
        let _ = self.events.send(event);
    }
}

/// The in-memory object store behind the API server and the simulated actors.
pub struct Store {
    inner: Mutex<Inner>,
    /// Where the time stamped on objects comes from ([`Now`]); read without the lock.
    clock: Now,
    events: Live,
    /// State shared by every reader of a type, by type and state kind ([`Store::shared`]).
    shared: Mutex<HashMap<(TypeKey, TypeId), SharedState>>,
}

/// Where the API server reads the time it stamps on objects (creation and deletion
/// timestamps, pod and node conditions, Events, status times): real time by default, or a test
/// clock shared with the controller ([`Store::with_clock`]), so a test that moves the
/// controller's clock on moves the cluster's with it.
pub type Now = Arc<dyn Fn() -> jiff::Timestamp + Send + Sync>;

/// One entry of [`Store::shared`]: a `Mutex<C>` behind `Any`.
type SharedState = Arc<dyn Any + Send + Sync>;

/// A snapshot answer to a list: the items and the resourceVersion they are consistent with.
#[derive(Clone, Debug)]
pub struct Listed {
    /// Matching objects, sorted by namespace and name.
    pub items: Vec<Arc<Value>>,
    /// The store's resourceVersion at the time of the list.
    pub resource_version: u64,
}

/// Which page of a list to read ([`Store::list_page`]).
#[derive(Clone, Debug, Default)]
pub struct PageRequest<'a> {
    /// Namespace and name of the previous page's last object (the next starts after it);
    /// `None` for the first page.
    pub after: Option<(&'a str, &'a str)>,
    /// At most this many objects; `None`: all.
    pub limit: Option<usize>,
    /// The resourceVersion the first page returned; `None` for the first page.
    pub first_rv: Option<u64>,
}

/// One page of a list (`limit`/`continue`, see [`Store::list_page`]).
#[derive(Clone, Debug)]
pub struct Page {
    /// Matching objects of this page as the JSON the store keeps (shared, not copied), sorted
    /// by namespace and name: a list answer splices these bytes into its body without decoding
    /// them ([`Page::decoded`] for readers that need values).
    pub items: Vec<Bytes>,
    /// The store's resourceVersion when the list's first page was read.
    pub resource_version: u64,
    /// Matching objects after this page.
    pub remaining: usize,
    /// Namespace and name of this page's last object, when more follow: where the next page
    /// starts (exclusive).
    pub next: Option<(String, String)>,
}

impl Page {
    /// This page's objects, decoded (a Table renders from values).
    pub fn decoded(&self) -> Vec<Arc<Value>> {
        self.items.iter().map(decode).collect()
    }
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
    events: &'a Live,
}

impl Txn<'_> {
    /// One object, as this transaction sees it ([`Store::get`]). Errors: 404.
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
                    .map(|(_, o)| decode(o))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Delete inside this transaction, with [`Store::delete`]'s rules (finalizers only set a
    /// deletionTimestamp). Errors: 404, 409 on a failed precondition.
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

    /// A store holding the system namespaces, with kube-apiserver's watch history limits.
    pub fn new() -> Arc<Store> {
        Store::with_limits(HistoryLimits::default())
    }

    /// A store whose watch history keeps exactly the last `history_cap` changes of each type,
    /// however fresh (small values make 410 Gone easy to provoke in tests).
    pub fn with_history(history_cap: usize) -> Arc<Store> {
        Store::with_limits(HistoryLimits {
            fresh: Duration::ZERO,
            max: history_cap,
            min: history_cap,
            ..HistoryLimits::default()
        })
    }

    /// A store like [`Store::new`] whose times come from `clock` instead of real time.
    pub fn with_clock(clock: Now) -> Arc<Store> {
        Store::build(HistoryLimits::default(), clock)
    }

    /// A store whose watch history keeps what `limits` say for each type.
    pub fn with_limits(limits: HistoryLimits) -> Arc<Store> {
        Store::build(limits, Arc::new(jiff::Timestamp::now))
    }

    fn build(limits: HistoryLimits, clock: Now) -> Arc<Store> {
        let events = Live {
            events: broadcast::channel(LIVE_BUFFER).0,
            changes: broadcast::channel(LIVE_BUFFER).0,
        };
        let store = Arc::new(Store {
            inner: Mutex::new(Inner {
                rv: 0,
                registry: Registry::default(),
                objects: HashMap::new(),
                history: HashMap::new(),
                limits,
                clock: Arc::clone(&clock),
            }),
            clock,
            events,
            shared: Mutex::new(HashMap::new()),
        });
        if let Some(ns) = store.resource("", "v1", "namespaces") {
            for name in SYSTEM_NAMESPACES {
                // Cannot fail on an empty store.
                let _ = store.create(&ns, "", json!({"metadata": {"name": name}}));
            }
        }
        store
    }

    /// State of kind `C` kept for objects of type `key` and shared by every reader in this
    /// process: the actors' typed caches (`actors::TypedCache`) keep one typed copy of
    /// each pod here instead of one per actor (five copies at 11 KB a pod). Created with
    /// `C::default()` on first use.
    pub(crate) fn shared<C: Default + Send + 'static>(&self, key: &TypeKey) -> Arc<Mutex<C>> {
        let mut states = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let state = states
            .entry((key.clone(), TypeId::of::<C>()))
            .or_insert_with(|| Arc::new(Mutex::new(C::default())));
        Arc::clone(state)
            .downcast::<Mutex<C>>()
            .unwrap_or_else(|_| Arc::new(Mutex::new(C::default())))
    }

    /// The store's clock ([`Now`]), for readers that stamp or age objects later.
    pub fn clock(&self) -> Now {
        Arc::clone(&self.clock)
    }

    /// Now, on the store's clock ([`Now`]).
    pub fn now(&self) -> jiff::Timestamp {
        (self.clock)()
    }

    /// Now on the store's clock as Kubernetes writes metadata times ([`rfc3339`]).
    pub fn now_rfc3339(&self) -> String {
        rfc3339(self.now())
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

    /// The resourceVersion of the latest write: one counter for every object, as etcd's
    /// revision.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Subscribe to every future change, objects included (tests that check the order of
    /// writes). A receiver holds every change sent until it reads it, up to [`LIVE_BUFFER`]
    /// of them: a loop that only wakes on changes takes [`Store::subscribe_changes`].
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.events.events.subscribe()
    }

    /// Subscribe to which type changed at which resourceVersion, without the objects: what the
    /// simulated actors wake on. A receiver busy with a long pass keeps the changes sent
    /// meanwhile, and these are a few dozen bytes each, not the objects' JSON.
    pub fn subscribe_changes(&self) -> broadcast::Receiver<Changed> {
        self.events.changes.subscribe()
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
        let (encoded, resource_version): (Vec<Bytes>, u64) = {
            let inner = self.lock();
            let encoded = inner
                .table(&rt.key())
                .map(|t| {
                    t.iter()
                        .filter(|(k, _)| namespace.is_none_or(|ns| k.namespace == ns))
                        .map(|(_, o)| o.clone())
                        .collect()
                })
                .unwrap_or_default();
            (encoded, inner.rv)
        };
        let items = encoded
            .iter()
            .map(decode)
            .filter(|o| labels_match(labels, o) && fields.matches(o))
            .collect();
        Listed {
            items,
            resource_version,
        }
    }

    /// One page of [`Store::list`]: at most `page.limit` matching objects after the object
    /// `page.after` (exclusive), as kube-apiserver pages a list with `limit` and `continue`.
    /// Later pages are read from the current state, not a
    /// snapshot at that version, so objects created, changed or deleted in between show as
    /// they are now; a client watching from `first_rv` afterwards is told every such change.
    ///
    /// Errors: 410 `Expired` when changes after `first_rv` have left the watch history (the
    /// client must list again, as when etcd compacted the revision).
    pub fn list_page(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        labels: &Selector,
        fields: &FieldSelector,
        page: &PageRequest<'_>,
    ) -> ApiResult<Page> {
        let PageRequest {
            after,
            limit,
            first_rv,
        } = *page;
        let unfiltered = labels.selects_all() && fields.is_empty();
        let limit = limit.unwrap_or(usize::MAX);
        // Under the lock only the bytes are taken (shared, not copied); decoding and selector
        // matching happen after it is released, so a long list does not hold up writes.
        let (resource_version, candidates, uncounted) = {
            let inner = self.lock();
            if let Some(rv) = first_rv
                && rv < inner.floor(&rt.key())
            {
                return Err(ApiError::new(
                    Reason::Expired,
                    "The provided continue parameter is too old to display a consistent list \
                     result. You can start a new list without the continue parameter.",
                ));
            }
            let resource_version = first_rv.unwrap_or(inner.rv);
            let Some(table) = inner.table(&rt.key()) else {
                return Ok(Page {
                    items: vec![],
                    resource_version,
                    remaining: 0,
                    next: None,
                });
            };
            let start = after.map(|(ns, name)| ObjectKey {
                namespace: ns.to_owned(),
                name: name.to_owned(),
            });
            let range = match &start {
                Some(k) => table.range((std::ops::Bound::Excluded(k), std::ops::Bound::Unbounded)),
                None => table.range::<ObjectKey, _>(..),
            };
            let mut in_namespace =
                range.filter(|(k, _)| namespace.is_none_or(|ns| k.namespace == ns));
            // Without selectors, the page is the next `limit` objects and the rest is counted
            // here; with them, every later object is a candidate.
            let take = if unfiltered { limit } else { usize::MAX };
            let candidates: Vec<(ObjectKey, Bytes)> = in_namespace
                .by_ref()
                .take(take)
                .map(|(k, o)| (k.clone(), o.clone()))
                .collect();
            let uncounted = if unfiltered { in_namespace.count() } else { 0 };
            (resource_version, candidates, uncounted)
        };
        // Without selectors nothing is decoded: the page is the stored bytes. With them, each
        // candidate is decoded only to be matched, and the page still carries its bytes.
        let mut matching = candidates.into_iter().filter(|(_, o)| {
            unfiltered || {
                let decoded = decode(o);
                labels_match(labels, &decoded) && fields.matches(&decoded)
            }
        });
        let mut items = Vec::new();
        let mut last = None;
        for (k, o) in matching.by_ref().take(limit) {
            items.push(o);
            last = Some(k);
        }
        // kube-apiserver counts the rest only without selectors; with them, whether one more
        // matches is enough (and decodes at most until the first).
        let remaining = if unfiltered {
            uncounted
        } else {
            usize::from(matching.next().is_some())
        };
        Ok(Page {
            items,
            resource_version,
            remaining,
            next: last
                .filter(|_| remaining > 0)
                .map(|k| (k.namespace, k.name)),
        })
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
                            object: o.clone(),
                            previous: None,
                        })
                    })
                    .collect()
            }
            Some(rv) if rv < inner.floor(&key) => {
                return Err(ApiError::new(
                    Reason::Expired,
                    format!("too old resource version: {rv} ({})", inner.floor(&key) + 1),
                ));
            }
            Some(rv) => match inner.history.get(&key) {
                Some(history) => history.since(rv, namespace).map_err(|e| {
                    tracing::error!(error = %e, "watch: answering 410 so the client lists again");
                    ApiError::new(Reason::Expired, format!("too old resource version: {rv}"))
                })?,
                None => Vec::new(),
            },
        };
        // Subscribing under the lock means no event falls between backlog and live stream.
        let live = self.events.events.subscribe();
        Ok(WatchStart {
            backlog,
            live,
            resource_version: inner.rv,
        })
    }

    /// Every current object of a type, decoded, sorted by namespace and name. The lock is held
    /// only to take the bytes; decoding happens after.
    pub fn objects(&self, key: &TypeKey) -> Vec<Arc<Value>> {
        self.snapshot_encoded(key).iter().map(decode).collect()
    }

    /// Every current object of a type as the encoded JSON the store keeps, sorted by
    /// namespace and name. The bytes of an object that has not changed are the same
    /// allocation from one call to the next, so a reader can keep what it decoded from them
    /// (`actors::TypedCache`).
    pub fn snapshot_encoded(&self, key: &TypeKey) -> Vec<Bytes> {
        let inner = self.lock();
        inner
            .table(key)
            .map(|t| t.values().cloned().collect())
            .unwrap_or_default()
    }

    /// One current object as the encoded JSON the store keeps (the bytes
    /// [`Store::snapshot_encoded`] returns for it), or `None` when there is no such object: how
    /// an actor reads again only the objects it was told changed.
    pub fn encoded(&self, key: &TypeKey, namespace: &str, name: &str) -> Option<Bytes> {
        let inner = self.lock();
        inner
            .table(key)?
            .get(&ObjectKey {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            })
            .cloned()
    }

    /// The served type of every resource that has stored objects now.
    pub fn stored_types(&self) -> Vec<ResourceType> {
        let inner = self.lock();
        inner
            .objects
            .iter()
            .filter(|(_, table)| !table.is_empty())
            .filter_map(|(key, _)| inner.registry.by_key(key).cloned())
            .collect()
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

/// `t` as an RFC 3339 timestamp with second precision, as Kubernetes writes metadata times
/// (e.g. `2026-11-28T11:30:00Z`).
pub fn rfc3339(t: jiff::Timestamp) -> String {
    jiff::Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

/// Drop `metadata.resourceVersion` so the write is unconditional (no optimistic-lock check).
fn unconditional(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
}

mod history;
use history::TypeHistory;
mod write;

#[cfg(test)]
mod tests;
