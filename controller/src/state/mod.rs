//! Cluster state: reflector caches of the objects Karpenter decides from (pods, nodes,
//! NodeClaims, NodePools, node classes, NodeOverlays with their feature gate, DaemonSets,
//! volumes, CSINodes, VolumeAttachments), fed by watches. Decision code never reads
//! the API directly; it takes a [`snapshot`](ClusterState::snapshot) (`karpenter_core::snapshot`).

use std::sync::Arc;

use crds::{EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, broadcast};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

use std::collections::HashMap;

use karpenter_core::lifecycle::registration_health;
use karpenter_core::pod_view::PodView;
use karpenter_core::scheduling::pod::PodKey;
use karpenter_core::snapshot::Snapshot;

pub mod lifecycle_memory;
mod pod_events;
pub mod pod_startup;
pub use lifecycle_memory::LifecycleMemory;
pub use pod_events::PodEvents;

use karpenter_core::scheduling::pod::is_provisionable;

/// Read handles of every cache.
#[derive(Clone)]
pub struct ClusterState {
    /// Pods in every namespace, each as the [`PodView`] decisions read: the watch decodes the
    /// API's JSON straight into views, so no full `Pod` is ever held (a typed `Pod` of Online
    /// Boutique took about 14 KB; see `karpenter_core::pod_view`). The controller never writes
    /// a cached pod back (its writes to pods are evictions and patches), so nothing left out
    /// is lost.
    pub pods: Store<PodView>,
    /// Every Node, Karpenter's or not; changes are announced on
    /// [`node_changes`](Self::node_changes).
    pub nodes: Store<Node>,
    /// Every NodeClaim; each change notifies [`nodeclaim_changed`](Self::nodeclaim_changed).
    pub nodeclaims: Store<NodeClaim>,
    /// Every NodePool; changes are announced on [`nodepool_changes`](Self::nodepool_changes).
    pub nodepools: Store<NodePool>,
    /// Every EC2NodeClass; changes are announced on
    /// [`nodeclass_changes`](Self::nodeclass_changes).
    pub nodeclasses: Store<EC2NodeClass>,
    /// Every NodeOverlay, when the `NodeOverlay` feature gate is on (`None`: not watched, so
    /// every snapshot has none and no decision applies one); changes are announced on
    /// [`nodeoverlay_changes`](Self::nodeoverlay_changes).
    pub nodeoverlays: Option<Store<NodeOverlay>>,
    /// NodeOverlays as [`nodeoverlays`](Self::nodeoverlays) applies them, deletions included
    /// (the NodeOverlay status controller re-evaluates on each); `None` with the gate off.
    pub nodeoverlay_changes: Option<Changes<NodeOverlay>>,
    /// DaemonSets in every namespace.
    pub daemonsets: Store<DaemonSet>,
    /// Namespaces (their labels select pod-affinity namespaces).
    pub namespaces: Store<Namespace>,
    /// PersistentVolumeClaims, PersistentVolumes and StorageClasses (volume topology).
    pub pvcs: Store<PersistentVolumeClaim>,
    /// PersistentVolumes: a bound volume's node affinity confines its pods' zone.
    pub pvs: Store<PersistentVolume>,
    /// StorageClasses: an unbound claim's class `allowedTopologies` confine its pod.
    pub storage_classes: Store<StorageClass>,
    /// PodDisruptionBudgets (upgrades skip nodes whose pods they block).
    pub pdbs: Store<PodDisruptionBudget>,
    /// CSINodes: how many volumes each CSI driver may attach to a node (attach limits).
    pub csinodes: Store<CSINode>,
    /// VolumeAttachments: node termination waits for a drained node's to go; changes are
    /// announced on [`volume_attachment_changes`](Self::volume_attachment_changes).
    pub volume_attachments: Store<VolumeAttachment>,
    /// Pod events per node as the pod cache applies them (consolidation's `consolidateAfter`
    /// counts from the last one).
    pub pod_events: PodEvents,
    /// Pods' startup durations waiting for the metrics ([`pod_startup::PodStartup`]).
    pub pod_startup: pod_startup::PodStartup,
    /// Notified whenever a provisionable pod, a NodePool, a node class or a NodeOverlay
    /// appears or changes.
    pub pod_trigger: Arc<Notify>,
    /// Notified on every NodeClaim change (lets the provisioner wait for its own writes).
    pub nodeclaim_changed: Arc<Notify>,
    /// NodePools as [`nodepools`](Self::nodepools) applies them (drift re-checks their
    /// NodeClaims).
    pub nodepool_changes: Changes<NodePool>,
    /// Node classes as [`nodeclasses`](Self::nodeclasses) applies them (drift and NodePool
    /// readiness follow them).
    pub nodeclass_changes: Changes<EC2NodeClass>,
    /// Nodes as [`nodes`](Self::nodes) applies them (NodeClaim registration and
    /// initialization follow them).
    pub node_changes: Changes<Node>,
    /// VolumeAttachments as [`volume_attachments`](Self::volume_attachments) applies them,
    /// deletions included (node termination follows them).
    pub volume_attachment_changes: Changes<VolumeAttachment>,
    /// Becomes true once every cache has completed its initial list. One task waits on the
    /// stores and publishes here, because a store's readiness wakes only one waiter.
    synced: tokio::sync::watch::Receiver<bool>,
    /// The provisioner's plan for pods waiting on in-flight NodeClaims: pod → NodeClaim name
    /// (copied into every snapshot as [`Snapshot::planned`]). In memory only: after a restart
    /// the next pass plans those pods onto the in-flight NodeClaims again.
    planned: Arc<std::sync::Mutex<HashMap<PodKey, String>>>,
    /// NodeClaims this controller created, or may have created, that the NodeClaim cache has
    /// not applied yet ([`ClusterState::own_creates`]).
    own_creates: Arc<std::sync::Mutex<HashMap<String, OwnCreate>>>,
    /// Each NodePool's node registration outcomes ([`RegistrationHealth`]).
    registration_health: Arc<std::sync::Mutex<RegistrationHealth>>,
    /// What the NodeClaim lifecycle did that the NodeClaim cache may not show yet.
    lifecycle: Arc<std::sync::Mutex<LifecycleMemory>>,
}

/// The NodePools' `NodeRegistrationHealthy` inputs, in memory (as upstream's
/// `nodepoolhealth.State`): outcomes the NodeClaim lifecycle reported and the NodePool
/// controller has not counted yet, and each NodePool's tracker, which only the NodePool
/// controller (the condition's one writer) touches.
#[derive(Debug, Default)]
pub struct RegistrationHealth {
    /// Outcomes by NodePool name, oldest first.
    pub pending: HashMap<String, Vec<registration_health::Outcome>>,
    /// Trackers by NodePool name.
    pub trackers: HashMap<String, registration_health::Tracker>,
}

/// A NodeClaim this controller created (or sent a create for whose answer was lost) and the
/// NodeClaim cache has not applied yet. Every snapshot counts it as in-flight capacity, so no
/// pass launches the same capacity twice while a watch restarts or a response is lost; it is
/// dropped when the cache applies the NodeClaim, or when a read by name finds it absent.
#[derive(Clone, Debug)]
pub struct OwnCreate {
    /// The NodeClaim as the API answered it, or as sent when the answer was lost (then it has
    /// no uid, resourceVersion or creationTimestamp).
    pub claim: Arc<NodeClaim>,
    /// Whether the API confirmed it exists (a create answered, or a read found it).
    pub confirmed: bool,
    /// When this controller sent its create.
    pub since: std::time::Instant,
}

/// A watch stopped before the cluster state synced.
#[derive(Debug, thiserror::Error)]
#[error("a watch stopped before the cluster state synced")]
pub struct NotSynced;

/// How many changes a [`Changes`] subscriber may fall behind before it is resynced.
const CHANGE_BUFFER: usize = 1024;

/// Objects of one kind as a cache applies them. A subscriber receives each object after the
/// cache holds it, so a controller triggered by a change and reading the cache sees that change
/// or a newer one. (A controller's own watch on the same kind would race the cache: a reconcile
/// could run on the old object and not be triggered again.)
pub struct Changes<K: Resource<DynamicType = ()> + 'static> {
    tx: broadcast::Sender<Arc<K>>,
    store: Store<K>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Clone for Changes<K> {
    fn clone(&self) -> Self {
        Changes {
            tx: self.tx.clone(),
            store: self.store.clone(),
        }
    }
}

impl<K> Changes<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    /// Publish one applied object (a copy is made only while someone subscribes).
    fn publish(tx: &broadcast::Sender<Arc<K>>, obj: &K) {
        if tx.receiver_count() > 0 {
            let _ = tx.send(Arc::new(obj.clone()));
        }
    }

    /// Every object the cache applies from now on, deleted ones included (with their last
    /// state), and after a relist every object it listed. A subscriber that falls more than
    /// 1024 changes (`CHANGE_BUFFER`) behind receives every cached object instead of the ones it
    /// missed: those are repeated, but deletions in the missed window are not (controllers
    /// re-check on their own periodic requeues). The stream does not end while the
    /// [`ClusterState`] lives.
    pub fn subscribe(&self) -> impl futures::Stream<Item = Arc<K>> + Send + 'static {
        let store = self.store.clone();
        BroadcastStream::new(self.tx.subscribe()).flat_map(move |item| {
            futures::stream::iter(match item {
                Ok(obj) => vec![obj],
                Err(BroadcastStreamRecvError::Lagged(missed)) => {
                    tracing::warn!(
                        missed,
                        "change subscriber fell behind; resyncing from the cache"
                    );
                    store.state()
                }
            })
        })
    }
}

/// Tell `on_event` about one watch event the store has just applied: an applied or deleted
/// object at once; a (re)list's objects only at its end, when the store takes them in, together
/// with the objects it held before the relist and no longer does (`before_relist` carries those
/// from `Init` to `InitDone`).
fn announce<K>(
    event: &watcher::Event<K>,
    store: &Store<K>,
    before_relist: &mut Vec<Arc<K>>,
    on_event: &impl Fn(&K, bool),
) where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    match event {
        watcher::Event::Apply(obj) => on_event(obj, false),
        watcher::Event::Delete(obj) => on_event(obj, true),
        watcher::Event::Init => *before_relist = store.state(),
        watcher::Event::InitApply(_) => {}
        watcher::Event::InitDone => {
            let listed = store.state();
            let key = |o: &K| (o.meta().namespace.clone(), o.meta().name.clone());
            let present: std::collections::HashSet<_> = listed.iter().map(|o| key(o)).collect();
            for obj in &listed {
                on_event(obj, false);
            }
            for gone in std::mem::take(before_relist) {
                if !present.contains(&key(&gone)) {
                    on_event(&gone, true);
                }
            }
        }
    }
}

/// Start a cache of `K`. `on_event` sees every object once the cache holds it: each applied or
/// deleted object; and after an initial list or relist (whose objects the store only takes in
/// at its end), every listed object and every object the relist found gone.
fn reflect<K>(api: Api<K>, on_event: impl Fn(&K) + Send + 'static) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    reflect_with_deletes(api, |_| {}, move |obj, _| on_event(obj))
}

/// [`reflect`] whose `on_event` is also told whether the object is gone from the cache
/// (deleted, or found gone by a relist), and whose cache keeps each object as `trim` leaves it.
fn reflect_with_deletes<K>(
    api: Api<K>,
    trim: impl FnMut(&mut K) + Send + 'static,
    on_event: impl Fn(&K, bool) + Send + 'static,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let objects = watcher(api, watcher::Config::default()).modify(trim);
    let stream = reflector(writer, objects).default_backoff();
    let store = reader.clone();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut before_relist = Vec::new();
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => announce(&event, &store, &mut before_relist, &on_event),
                Err(e) => {
                    tracing::warn!(kind = K::kind(&K::DynamicType::default()).as_ref(), error = %e, "watch error")
                }
            }
        }
    });
    (reader, task)
}

impl ClusterState {
    /// Start every watch; NodeOverlays only with `node_overlays` (the `NodeOverlay` feature
    /// gate: upstream neither watches them nor applies them with it off). The returned handles
    /// end the watches when aborted.
    pub fn start(client: &Client, node_overlays: bool) -> (ClusterState, Vec<JoinHandle<()>>) {
        let pod_trigger = Arc::new(Notify::new());
        let nodeclaim_changed = Arc::new(Notify::new());
        let trigger = Arc::clone(&pod_trigger);
        let pod_events = PodEvents::default();
        let events = pod_events.clone();
        let pod_startup = pod_startup::PodStartup::default();
        let startup = pod_startup.clone();
        let (pods, t1) = reflect_with_deletes(
            Api::<PodView>::all(client.clone()),
            PodView::trim,
            move |p, deleted| {
                events.observe(p, deleted);
                startup.observe(p, deleted);
                if is_provisionable(p) {
                    trigger.notify_one();
                }
            },
        );
        let (node_tx, _) = broadcast::channel(CHANGE_BUFFER);
        let tx = node_tx.clone();
        let (nodes, t2) = reflect(Api::<Node>::all(client.clone()), move |n| {
            Changes::publish(&tx, n)
        });
        let changed = Arc::clone(&nodeclaim_changed);
        let own_creates: Arc<std::sync::Mutex<HashMap<String, OwnCreate>>> = Default::default();
        let applied = Arc::clone(&own_creates);
        let (nodeclaims, t3) = reflect(Api::<NodeClaim>::all(client.clone()), move |c| {
            if let Some(name) = c.metadata.name.as_deref() {
                applied
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(name);
            }
            changed.notify_waiters()
        });
        // A NodePool or node class becoming ready can serve pods that were waiting.
        let trigger = Arc::clone(&pod_trigger);
        let (nodepool_tx, _) = broadcast::channel(CHANGE_BUFFER);
        let tx = nodepool_tx.clone();
        let (nodepools, t4) = reflect(Api::<NodePool>::all(client.clone()), move |p| {
            trigger.notify_one();
            Changes::publish(&tx, p);
        });
        let trigger = Arc::clone(&pod_trigger);
        let (nodeclass_tx, _) = broadcast::channel(CHANGE_BUFFER);
        let tx = nodeclass_tx.clone();
        let (nodeclasses, t5) = reflect(Api::<EC2NodeClass>::all(client.clone()), move |c| {
            trigger.notify_one();
            Changes::publish(&tx, c);
        });
        // An overlay changes the instance types pods may fit (an extended resource it adds).
        let mut overlay_task = None;
        let (nodeoverlays, nodeoverlay_changes) = if node_overlays {
            let trigger = Arc::clone(&pod_trigger);
            let (overlay_tx, _) = broadcast::channel(CHANGE_BUFFER);
            let tx = overlay_tx.clone();
            let (store, task) = reflect_with_deletes(
                Api::<NodeOverlay>::all(client.clone()),
                |_| {},
                move |o, _| {
                    trigger.notify_one();
                    Changes::publish(&tx, o);
                },
            );
            overlay_task = Some(task);
            let changes = Changes {
                tx: overlay_tx,
                store: store.clone(),
            };
            (Some(store), Some(changes))
        } else {
            (None, None)
        };
        let (daemonsets, t6) = reflect(Api::<DaemonSet>::all(client.clone()), |_| {});
        let (namespaces, t7) = reflect(Api::<Namespace>::all(client.clone()), |_| {});
        let (pvcs, t8) = reflect(Api::<PersistentVolumeClaim>::all(client.clone()), |_| {});
        let (pvs, t9) = reflect(Api::<PersistentVolume>::all(client.clone()), |_| {});
        let (storage_classes, t10) = reflect(Api::<StorageClass>::all(client.clone()), |_| {});
        let (pdbs, t12) = reflect(Api::<PodDisruptionBudget>::all(client.clone()), |_| {});
        let (csinodes, t13) = reflect(Api::<CSINode>::all(client.clone()), |_| {});
        let (attachment_tx, _) = broadcast::channel(CHANGE_BUFFER);
        let tx = attachment_tx.clone();
        let (volume_attachments, t14) =
            reflect(Api::<VolumeAttachment>::all(client.clone()), move |a| {
                Changes::publish(&tx, a)
            });
        let (synced_tx, synced) = tokio::sync::watch::channel(false);
        let state = ClusterState {
            nodepool_changes: Changes {
                tx: nodepool_tx,
                store: nodepools.clone(),
            },
            nodeclass_changes: Changes {
                tx: nodeclass_tx,
                store: nodeclasses.clone(),
            },
            node_changes: Changes {
                tx: node_tx,
                store: nodes.clone(),
            },
            volume_attachment_changes: Changes {
                tx: attachment_tx,
                store: volume_attachments.clone(),
            },
            pods,
            pod_events,
            pod_startup,
            nodes,
            nodeclaims,
            nodepools,
            nodeclasses,
            nodeoverlays,
            nodeoverlay_changes,
            daemonsets,
            namespaces,
            pvcs,
            pvs,
            storage_classes,
            pdbs,
            csinodes,
            volume_attachments,
            pod_trigger,
            nodeclaim_changed,
            synced,
            registration_health: Default::default(),
            lifecycle: Default::default(),
            planned: Default::default(),
            own_creates,
        };
        let stores = state.clone();
        let t11 = tokio::spawn(async move {
            if stores.stores_ready().await.is_ok() {
                let _ = synced_tx.send(true);
            }
        });
        let mut tasks = vec![t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14];
        tasks.extend(overlay_task);
        (state, tasks)
    }

    /// Wait until every cache has completed its initial list (upstream: cluster state synced).
    /// Any number of tasks may wait.
    ///
    /// Errors: a watch stopped before it synced.
    pub async fn wait_synced(&self) -> Result<(), NotSynced> {
        let mut rx = self.synced.clone();
        rx.wait_for(|s| *s).await.map(|_| ()).map_err(|_| NotSynced)
    }

    async fn stores_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.pods.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.nodeclaims.wait_until_ready().await?;
        self.nodepools.wait_until_ready().await?;
        self.nodeclasses.wait_until_ready().await?;
        self.daemonsets.wait_until_ready().await?;
        self.namespaces.wait_until_ready().await?;
        self.pvcs.wait_until_ready().await?;
        self.pvs.wait_until_ready().await?;
        self.storage_classes.wait_until_ready().await?;
        self.csinodes.wait_until_ready().await?;
        self.volume_attachments.wait_until_ready().await?;
        if let Some(overlays) = &self.nodeoverlays {
            overlays.wait_until_ready().await?;
        }
        self.pdbs.wait_until_ready().await
    }

    /// A consistent-enough copy of every cache for one decision.
    ///
    /// The plan records are read first and the NodeClaims after them, so every NodeClaim a
    /// plan record names is in the copy unless it was deleted: a create records its NodeClaim
    /// (in [`own_creates`](Self::own_creates)) before its plan records.
    pub fn snapshot(&self) -> Snapshot {
        let planned = self.planned().clone();
        let nodeclaims = self.nodeclaims_with_own_creates();
        Snapshot {
            pods: self.pods.state(),
            nodes: self.nodes.state(),
            nodeclaims,
            nodepools: self.nodepools.state(),
            nodeclasses: self.nodeclasses.state(),
            nodeoverlays: self
                .nodeoverlays
                .as_ref()
                .map(Store::state)
                .unwrap_or_default(),
            daemonsets: self.daemonsets.state(),
            namespaces: self.namespaces.state(),
            pvcs: self.pvcs.state(),
            pvs: self.pvs.state(),
            storage_classes: self.storage_classes.state(),
            csinodes: self.csinodes.state(),
            pdbs: self.pdbs.state(),
            planned,
        }
    }

    /// Every cached NodeClaim, plus this controller's creates the cache has not applied yet
    /// ([`OwnCreate`]).
    ///
    /// The own creates are read before the cache: the cache's watch forgets an own create only
    /// after the cache holds it, so a NodeClaim created before this call is in one of the two
    /// reads. Read the other way round, a NodeClaim the cache applied between the reads would
    /// be in neither, and its pods' plan records would be dropped as settled.
    fn nodeclaims_with_own_creates(&self) -> Vec<Arc<NodeClaim>> {
        let own: Vec<(String, Arc<NodeClaim>)> = self
            .own_creates()
            .iter()
            .map(|(name, o)| (name.clone(), Arc::clone(&o.claim)))
            .collect();
        let mut claims = self.nodeclaims.state();
        if own.is_empty() {
            return claims;
        }
        let cached: std::collections::HashSet<&str> = claims
            .iter()
            .filter_map(|c| c.metadata.name.as_deref())
            .collect();
        let pending: Vec<Arc<NodeClaim>> = own
            .into_iter()
            .filter(|(name, _)| !cached.contains(name.as_str()))
            .map(|(_, claim)| claim)
            .collect();
        claims.extend(pending);
        claims
    }

    /// NodeClaims this controller created, or may have created, that the NodeClaim cache has
    /// not applied yet, by name, locked ([`OwnCreate`]).
    pub fn own_creates(&self) -> std::sync::MutexGuard<'_, HashMap<String, OwnCreate>> {
        self.own_creates.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Report a node registration outcome of a NodeClaim of NodePool `pool` (counted towards the
    /// NodePool's `NodeRegistrationHealthy` at its next reconcile).
    pub fn report_registration(&self, pool: &str, outcome: registration_health::Outcome) {
        self.registration_health()
            .pending
            .entry(pool.to_string())
            .or_default()
            .push(outcome);
    }

    /// The NodePools' registration outcomes and trackers, locked.
    pub fn registration_health(&self) -> std::sync::MutexGuard<'_, RegistrationHealth> {
        self.registration_health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// What the NodeClaim lifecycle did that the NodeClaim cache may not show yet
    /// ([`LifecycleMemory`]), locked.
    pub fn lifecycle_memory(&self) -> std::sync::MutexGuard<'_, LifecycleMemory> {
        self.lifecycle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The provisioner's plan for pods waiting on in-flight NodeClaims (pod → NodeClaim name), locked.
    pub fn planned(&self) -> std::sync::MutexGuard<'_, HashMap<PodKey, String>> {
        self.planned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The nodes registered for a NodeClaim's providerID (none before launch).
    pub fn nodes_for_claim(&self, claim: &NodeClaim) -> Vec<Arc<Node>> {
        match claim.status.as_ref().and_then(|s| s.provider_id.as_deref()) {
            Some(pid) => self.node_for_provider_id(pid),
            None => Vec::new(),
        }
    }

    /// The nodes registered with a providerID (more than one is an invariant violation the
    /// caller reports).
    pub fn node_for_provider_id(&self, provider_id: &str) -> Vec<Arc<Node>> {
        self.nodes
            .state()
            .into_iter()
            .filter(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;
    use testutil::nodepool;

    fn names(objs: &[Arc<NodePool>]) -> Vec<(String, i64)> {
        objs.iter()
            .map(|p| {
                (
                    p.metadata.name.clone().unwrap_or_default(),
                    p.metadata.generation.unwrap_or_default(),
                )
            })
            .collect()
    }

    /// A relist's objects are announced once the store holds them, with the objects the relist
    /// found gone; single changes at once.
    #[test]
    fn a_relist_is_announced_when_the_store_takes_it_in() {
        let (store, mut writer) = reflector::store::<NodePool>();
        let heard = std::sync::Mutex::new(Vec::new());
        let on_event = |p: &NodePool, deleted: bool| {
            let name = p.metadata.name.clone().unwrap_or_default();
            // Every announced object that still exists is in the store already; the others are
            // announced as gone.
            let held = store.state().iter().any(|s| {
                s.metadata.name == p.metadata.name && s.metadata.generation == p.metadata.generation
            });
            assert_eq!(deleted, !held, "{name} announced as gone: {deleted}");
            heard.lock().expect("not poisoned").push((
                name,
                p.metadata.generation.unwrap_or_default(),
                held,
            ));
        };
        let mut before = Vec::new();
        let mut feed = |event: Event<NodePool>| {
            writer.apply_watcher_event(&event);
            announce(&event, &store, &mut before, &on_event);
        };
        feed(Event::Init);
        feed(Event::InitApply(nodepool("a").generation(1).build()));
        feed(Event::InitApply(nodepool("b").generation(1).build()));
        assert!(
            heard.lock().expect("not poisoned").is_empty(),
            "nothing before the list ends"
        );
        feed(Event::InitDone);
        feed(Event::Apply(nodepool("a").generation(2).build()));
        // A relist in which b is gone and c new.
        feed(Event::Init);
        feed(Event::InitApply(nodepool("a").generation(2).build()));
        feed(Event::InitApply(nodepool("c").generation(1).build()));
        feed(Event::InitDone);
        let mut heard = heard.into_inner().expect("not poisoned");
        heard[..2].sort();
        heard[3..5].sort();
        let t = |n: &str, g: i64, held: bool| (n.to_string(), g, held);
        assert_eq!(
            heard,
            [
                t("a", 1, true),
                t("b", 1, true),
                t("a", 2, true),
                t("a", 2, true),
                t("c", 1, true),
                t("b", 1, false),
            ]
        );
    }

    #[tokio::test]
    async fn subscribers_get_each_change_and_a_resync_when_they_fall_behind() {
        let (store, mut writer) = reflector::store::<NodePool>();
        let (tx, _) = broadcast::channel(2);
        let changes = Changes {
            tx: tx.clone(),
            store,
        };
        // Nobody subscribes yet: nothing is queued.
        Changes::publish(&tx, &nodepool("early").generation(1).build());
        assert_eq!(tx.len(), 0);

        let mut stream = std::pin::pin!(changes.subscribe());
        let apply = |writer: &mut reflector::store::Writer<NodePool>, p: NodePool| {
            writer.apply_watcher_event(&Event::Apply(p.clone()));
            Changes::publish(&tx, &p);
        };
        apply(&mut writer, nodepool("a").generation(1).build());
        assert_eq!(
            names(&[stream.next().await.expect("a change")]),
            [("a".to_string(), 1)]
        );

        // Five changes into a buffer of two: the subscriber gets the cache's current objects.
        for generation in 2..=6 {
            apply(&mut writer, nodepool("a").generation(generation).build());
        }
        apply(&mut writer, nodepool("b").generation(1).build());
        let mut resync = vec![
            stream.next().await.expect("resync"),
            stream.next().await.expect("resync"),
        ];
        resync.sort_by_key(|p| p.metadata.name.clone());
        assert_eq!(names(&resync), [("a".to_string(), 6), ("b".to_string(), 1)]);
    }
}
