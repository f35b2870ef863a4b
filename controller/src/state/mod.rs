//! Cluster state: reflector caches of the objects Karpenter decides from (pods, nodes,
//! NodeClaims, NodePools, node classes, DaemonSets), fed by watches. Decision code never reads
//! the API directly; it takes a [`snapshot`](ClusterState::snapshot).

pub mod snapshot;

use std::sync::Arc;

use crds::{EC2NodeClass, NodeClaim, NodePool};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

pub use snapshot::Snapshot;

use crate::scheduling::pod::is_provisionable;

/// Read handles of every cache.
#[derive(Clone)]
pub struct ClusterState {
    /// Pods in every namespace.
    pub pods: Store<Pod>,
    /// Nodes.
    pub nodes: Store<Node>,
    /// NodeClaims.
    pub nodeclaims: Store<NodeClaim>,
    /// NodePools.
    pub nodepools: Store<NodePool>,
    /// EC2NodeClasses.
    pub nodeclasses: Store<EC2NodeClass>,
    /// DaemonSets in every namespace.
    pub daemonsets: Store<DaemonSet>,
    /// Namespaces (their labels select pod-affinity namespaces).
    pub namespaces: Store<Namespace>,
    /// PersistentVolumeClaims, PersistentVolumes and StorageClasses (volume topology).
    pub pvcs: Store<PersistentVolumeClaim>,
    /// PersistentVolumes.
    pub pvs: Store<PersistentVolume>,
    /// StorageClasses.
    pub storage_classes: Store<StorageClass>,
    /// PodDisruptionBudgets (upgrades skip nodes whose pods they block).
    pub pdbs: Store<PodDisruptionBudget>,
    /// Notified whenever a provisionable pod, a NodePool or a node class appears or changes.
    pub pod_trigger: Arc<Notify>,
    /// Notified on every NodeClaim change (lets the provisioner wait for its own writes).
    pub nodeclaim_changed: Arc<Notify>,
    /// Becomes true once every cache has completed its initial list. One task waits on the
    /// stores and publishes here, because a store's readiness wakes only one waiter.
    synced: tokio::sync::watch::Receiver<bool>,
}

/// A watch stopped before the cluster state synced.
#[derive(Debug, thiserror::Error)]
#[error("a watch stopped before the cluster state synced")]
pub struct NotSynced;

fn reflect<K>(api: Api<K>, on_event: impl Fn(&K) + Send + 'static) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(obj) => on_event(&obj),
                Err(e) => {
                    tracing::warn!(kind = K::kind(&K::DynamicType::default()).as_ref(), error = %e, "watch error")
                }
            }
        }
    });
    (reader, task)
}

impl ClusterState {
    /// Start every watch; the returned handles end the watches when aborted.
    pub fn start(client: &Client) -> (ClusterState, Vec<JoinHandle<()>>) {
        let pod_trigger = Arc::new(Notify::new());
        let nodeclaim_changed = Arc::new(Notify::new());
        let trigger = Arc::clone(&pod_trigger);
        let (pods, t1) = reflect(Api::<Pod>::all(client.clone()), move |p| {
            if is_provisionable(p) {
                trigger.notify_one();
            }
        });
        let (nodes, t2) = reflect(Api::<Node>::all(client.clone()), |_| {});
        let changed = Arc::clone(&nodeclaim_changed);
        let (nodeclaims, t3) = reflect(Api::<NodeClaim>::all(client.clone()), move |_| {
            changed.notify_waiters()
        });
        // A NodePool or node class becoming ready can serve pods that were waiting.
        let trigger = Arc::clone(&pod_trigger);
        let (nodepools, t4) = reflect(Api::<NodePool>::all(client.clone()), move |_| {
            trigger.notify_one()
        });
        let trigger = Arc::clone(&pod_trigger);
        let (nodeclasses, t5) = reflect(Api::<EC2NodeClass>::all(client.clone()), move |_| {
            trigger.notify_one()
        });
        let (daemonsets, t6) = reflect(Api::<DaemonSet>::all(client.clone()), |_| {});
        let (namespaces, t7) = reflect(Api::<Namespace>::all(client.clone()), |_| {});
        let (pvcs, t8) = reflect(Api::<PersistentVolumeClaim>::all(client.clone()), |_| {});
        let (pvs, t9) = reflect(Api::<PersistentVolume>::all(client.clone()), |_| {});
        let (storage_classes, t10) = reflect(Api::<StorageClass>::all(client.clone()), |_| {});
        let (pdbs, t12) = reflect(Api::<PodDisruptionBudget>::all(client.clone()), |_| {});
        let (synced_tx, synced) = tokio::sync::watch::channel(false);
        let state = ClusterState {
            pods,
            nodes,
            nodeclaims,
            nodepools,
            nodeclasses,
            daemonsets,
            namespaces,
            pvcs,
            pvs,
            storage_classes,
            pdbs,
            pod_trigger,
            nodeclaim_changed,
            synced,
        };
        let stores = state.clone();
        let t11 = tokio::spawn(async move {
            if stores.stores_ready().await.is_ok() {
                let _ = synced_tx.send(true);
            }
        });
        (
            state,
            vec![t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12],
        )
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
        self.pdbs.wait_until_ready().await
    }

    /// A consistent-enough copy of every cache for one decision.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            pods: self.pods.state(),
            nodes: self.nodes.state(),
            nodeclaims: self.nodeclaims.state(),
            nodepools: self.nodepools.state(),
            nodeclasses: self.nodeclasses.state(),
            daemonsets: self.daemonsets.state(),
            namespaces: self.namespaces.state(),
            pvcs: self.pvcs.state(),
            pvs: self.pvs.state(),
            storage_classes: self.storage_classes.state(),
        }
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
