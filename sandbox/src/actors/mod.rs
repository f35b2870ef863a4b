//! The simulated cluster around the API server: kubelets, workload controllers (Deployment,
//! ReplicaSet, DaemonSet, StatefulSet), the EBS CSI driver with volume provisioning and
//! attach/detach, the disruption (PDB status) controller, the garbage collector, and the mirror
//! of the cloud's instances as `Instance` objects. Each actor reads the store, wakes on the
//! changes it cares about, and writes through the same store operations the HTTP API uses. The
//! simulated kube-scheduler is built on Karpenter's scheduling core, so it lives in the
//! `karpenter` crate (`karpenter::sandbox::kube_scheduler`) and runs on the helpers this module
//! makes public: [`TypedCache`], [`key`], [`wait_for_change`].

mod cache;
pub mod csi;
pub mod gc;
pub mod instances;
pub mod kubelet;
pub mod pdb;
pub mod statefulset;
pub mod workloads;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use crate::registry::TypeKey;
use crate::store::{Changed, Store};

pub use cache::TypedCache;

/// What a kubelet boots with, as the cloud knows it: the instance and the configuration its
/// user data passes to the kubelet.
#[derive(Clone, Debug, PartialEq)]
pub struct BootRecord {
    /// `aws:///<zone>/<instance-id>`, registered as the Node's `spec.providerID`.
    pub provider_id: String,
    /// Node name the kubelet registers (the private DNS name).
    pub hostname: String,
    /// Private IPv4 address, reported as the Node's `InternalIP`.
    pub private_ip: String,
    /// When the instance launched; the kubelet registers a configurable delay later.
    pub launched_at: Timestamp,
    /// `--node-labels`.
    pub labels: BTreeMap<String, String>,
    /// `--register-with-taints` (including `karpenter.sh/unregistered:NoExecute`).
    pub taints: Vec<Taint>,
    /// The instance type's capacity as quantities (`cpu`, `memory`, `pods`, ...), written to
    /// the Node's `status.capacity`.
    pub capacity: BTreeMap<String, Quantity>,
    /// Capacity minus kube-reserved and eviction thresholds, the Node's `status.allocatable`.
    pub allocatable: BTreeMap<String, Quantity>,
    /// `amd64` or `arm64`.
    pub architecture: String,
    /// Image id, reported as the node's OS image.
    pub image_id: String,
    /// Instance type, e.g. `m5.large`.
    pub instance_type: String,
    /// Availability zone, e.g. `us-east-1a`.
    pub zone: String,
    /// `on-demand`, `spot` or `reserved`.
    pub capacity_type: String,
    /// Price of the instance's offering in USD per hour, when the cloud knows it.
    pub price: Option<f64>,
    /// The instance's tags (cluster, `karpenter.sh/nodepool`, `karpenter.sh/nodeclaim`, ...).
    pub tags: BTreeMap<String, String>,
}

/// Where simulated kubelets learn which instances run (a cloud provider's list).
#[async_trait]
pub trait InstanceSource: Send + Sync {
    /// Instances that are running now.
    ///
    /// Errors: the cloud could not be listed (the kubelet retries).
    async fn running(&self) -> Result<Vec<BootRecord>, String>;

    /// Terminate the instance behind `provider_id` (`aws:///<zone>/<instance-id>`), as EC2
    /// TerminateInstances does; an instance that is already gone is not an error.
    ///
    /// Errors: the cloud refused or could not be reached (the caller retries).
    async fn terminate(&self, provider_id: &str) -> Result<(), String>;
}

/// Which nodes a DaemonSet pod may run on, as the DaemonSet controller asks kube-scheduler's
/// predicates (upstream `NodeShouldRunDaemonPod`): injected, so the sandbox judges node
/// selectors, affinity and taints with the same scheduling core as its kube-scheduler.
pub trait NodeEligibility: Send + Sync {
    /// Whether a DaemonSet pod could run on the node, ignoring resources (node selector,
    /// affinity and taints), as the DaemonSet controller decides where to create pods.
    fn eligible(&self, pod: &Pod, node: &Node) -> bool;
}

/// Knobs of the simulated actors.
#[derive(Clone, Debug)]
pub struct ActorConfig {
    /// How long after launch a kubelet registers its Node.
    pub registration_delay: Duration,
    /// How often kubelets poll the cloud.
    pub kubelet_poll: Duration,
    /// How many EBS volumes an instance type can attach besides its root volume, reported as
    /// its nodes' CSINode `allocatable.count` for `ebs.csi.aws.com`; `None` (the default for
    /// every type) reports no limit.
    pub ebs_attach_limit: fn(&str) -> Option<i32>,
}

impl Default for ActorConfig {
    fn default() -> Self {
        ActorConfig {
            registration_delay: Duration::from_secs(3),
            kubelet_poll: Duration::from_millis(500),
            ebs_attach_limit: |_| None,
        }
    }
}

/// Start every actor (the kube-scheduler, which is Karpenter's, is started beside them by the
/// caller); the handles stop them when aborted. Installs the `Instance` CRD first, so the
/// mirror of `instances` is served as soon as this returns.
pub fn spawn_all(
    store: &Arc<Store>,
    config: &ActorConfig,
    eligibility: Arc<dyn NodeEligibility>,
    source: Arc<dyn InstanceSource>,
) -> Vec<JoinHandle<()>> {
    if let Err(e) = instances::install_crd(store) {
        tracing::warn!(error = %e, "installing the Instance CRD failed; instances are not mirrored");
    }
    vec![
        tokio::spawn(kubelet::run(
            Arc::clone(store),
            config.clone(),
            Arc::clone(&source),
        )),
        tokio::spawn(instances::run(Arc::clone(store), config.clone(), source)),
        tokio::spawn(workloads::run(Arc::clone(store), eligibility)),
        tokio::spawn(statefulset::run(Arc::clone(store))),
        tokio::spawn(csi::run(Arc::clone(store), config.ebs_attach_limit)),
        tokio::spawn(pdb::run(Arc::clone(store))),
        tokio::spawn(gc::run(Arc::clone(store))),
    ]
}

/// The storage key of a built-in type (group `""` for the core group), e.g.
/// `key("storage.k8s.io", "csinodes")`: what a [`TypedCache`] reads and what a store change
/// names, for actors to say which types they wake on.
pub fn key(group: &str, plural: &str) -> TypeKey {
    TypeKey {
        group: group.to_string(),
        plural: plural.to_string(),
    }
}

/// Run an actor until the store goes away: `pass` over `state` off the async runtime, then wait
/// for a change to one of `interest` (or 5 s) and let a burst settle for 50 ms. `name` says which
/// actor panicked, if one does (the loop then ends).
pub(crate) async fn run_passes<T: Send + 'static>(
    store: Arc<crate::store::Store>,
    name: &'static str,
    interest: &[TypeKey],
    mut state: T,
    pass: fn(&mut T, &crate::store::Store),
) {
    let mut rx = store.subscribe_changes();
    loop {
        let st = Arc::clone(&store);
        state = match tokio::task::spawn_blocking(move || {
            pass(&mut state, &st);
            state
        })
        .await
        {
            Ok(state) => state,
            Err(e) => {
                tracing::error!(actor = name, error = %e, "sandbox actor panicked");
                return;
            }
        };
        if !wait_for_change(
            &mut rx,
            interest,
            Duration::from_secs(5),
            Duration::from_millis(50),
        )
        .await
        {
            return;
        }
    }
}

/// Wait until a change to one of `interest` arrives or `tick` passes, then let changes settle
/// for `settle` so a burst is handled in one pass. Returns false when the store is gone. Actors
/// with a loop of their own (the kube-scheduler, which wakes for its queue's timers) call it
/// between passes; the others run through `run_passes`.
pub async fn wait_for_change(
    rx: &mut tokio::sync::broadcast::Receiver<Changed>,
    interest: &[TypeKey],
    tick: Duration,
    settle: Duration,
) -> bool {
    wait_for_changes(rx, interest, tick, settle, &mut Dirty::default()).await
}

/// [`wait_for_change`], noting in `dirty` every object of its tracked types that changed
/// meanwhile (and that it must read everything again if the receiver lagged), so the pass
/// about to run looks at those objects only.
pub(crate) async fn wait_for_changes(
    rx: &mut tokio::sync::broadcast::Receiver<Changed>,
    interest: &[TypeKey],
    tick: Duration,
    settle: Duration,
    dirty: &mut Dirty,
) -> bool {
    let deadline = tokio::time::sleep(tick);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = &mut deadline => break,
            ev = rx.recv() => match ev {
                Ok(e) => {
                    let wake = interest.contains(&e.key);
                    dirty.note(e);
                    if wake {
                        break;
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    dirty.resync = true;
                    break;
                }
                Err(RecvError::Closed) => return false,
            },
        }
    }
    tokio::time::sleep(settle).await;
    // Everything that arrived meanwhile is covered by the pass about to run.
    loop {
        match rx.try_recv() {
            Ok(e) => dirty.note(e),
            Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => dirty.resync = true,
            Err(tokio::sync::broadcast::error::TryRecvError::Closed) => return false,
            Err(tokio::sync::broadcast::error::TryRecvError::Empty) => return true,
        }
    }
}

/// Which objects of the types an actor tracks changed since its last pass, as an informer's
/// work queue holds keys: filled by [`wait_for_changes`], drained by the pass. When changes
/// were missed (the actor's receiver lagged behind the store) or nothing was read yet,
/// `resync` says to read every object again instead.
#[derive(Debug, Default)]
pub struct Dirty {
    /// The types whose changed objects are noted; changes to others only wake the actor.
    tracked: Vec<TypeKey>,
    /// Changed objects: (type, namespace, name), namespace empty for cluster-scoped types.
    keys: BTreeSet<(TypeKey, String, String)>,
    /// Read everything on the next pass: set at the start and after a missed change.
    pub resync: bool,
}

impl Dirty {
    /// A set noting changes to `tracked`, starting with a resync (nothing was read yet).
    pub fn tracking(tracked: Vec<TypeKey>) -> Dirty {
        Dirty {
            tracked,
            keys: BTreeSet::new(),
            resync: true,
        }
    }

    /// Note a change, if its type is tracked (and no resync is due, which covers it anyway).
    pub fn note(&mut self, change: Changed) {
        if !self.resync && self.tracked.contains(&change.key) {
            self.keys
                .insert((change.key, change.namespace, change.name));
        }
    }

    /// The changed objects of type `key` as (namespace, name), sorted, removed from the set.
    pub fn take(&mut self, key: &TypeKey) -> Vec<(String, String)> {
        let (taken, kept) = std::mem::take(&mut self.keys)
            .into_iter()
            .partition(|(k, _, _)| k == key);
        self.keys = kept;
        taken.into_iter().map(|(_, ns, name)| (ns, name)).collect()
    }

    /// Forget every noted change (after a pass that read everything).
    pub fn clear(&mut self) {
        self.keys.clear();
        self.resync = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str) -> serde_json::Value {
        json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
    }

    /// Changes to tracked types are noted by namespace and name while the actor waits; other
    /// types only wake it. A fresh set asks for a resync and notes nothing until cleared.
    #[tokio::test]
    async fn waiting_notes_which_tracked_objects_changed() {
        let store = Store::new();
        let pods = store.resource("", "v1", "pods").expect("pods");
        let cms = store.resource("", "v1", "configmaps").expect("configmaps");
        let mut rx = store.subscribe_changes();
        let mut dirty = Dirty::tracking(vec![pods.key()]);
        assert!(dirty.resync, "nothing read yet");
        dirty.clear();
        store.create(&pods, "default", pod("b")).expect("pod");
        store.create(&pods, "kube-system", pod("a")).expect("pod");
        store.create(&pods, "default", pod("a")).expect("pod");
        store
            .create(&cms, "default", json!({"metadata": {"name": "c"}}))
            .expect("configmap");
        let tick = Duration::from_millis(10);
        assert!(wait_for_changes(&mut rx, &[pods.key()], tick, tick, &mut dirty).await);
        assert!(!dirty.resync);
        assert!(
            dirty.take(&cms.key()).is_empty(),
            "configmaps are not tracked"
        );
        let taken = dirty.take(&pods.key());
        let names: Vec<String> = taken.iter().map(|(ns, n)| format!("{ns}/{n}")).collect();
        assert_eq!(names, ["default/a", "default/b", "kube-system/a"]);
        assert!(dirty.take(&pods.key()).is_empty(), "taken once");
    }

    /// A receiver that fell behind the live channel missed changes: the set asks for a resync.
    #[tokio::test]
    async fn a_lagging_receiver_asks_for_a_resync() {
        let store = Store::new();
        let cms = store.resource("", "v1", "configmaps").expect("configmaps");
        let mut rx = store.subscribe_changes();
        let mut dirty = Dirty::tracking(vec![cms.key()]);
        dirty.clear();
        for i in 0..=crate::store::LIVE_BUFFER {
            store
                .create(
                    &cms,
                    "default",
                    json!({"metadata": {"name": format!("c{i}")}}),
                )
                .expect("configmap");
        }
        let tick = Duration::from_millis(10);
        assert!(wait_for_changes(&mut rx, &[cms.key()], tick, tick, &mut dirty).await);
        assert!(dirty.resync);
    }

    /// Reading one object shares the typed copy a full refresh decoded, and reads a changed
    /// object's new version.
    #[test]
    fn one_object_is_read_from_the_shared_typed_cache() {
        let store = Store::new();
        let rt = store.resource("", "v1", "pods").expect("pods");
        store.create(&rt, "default", pod("a")).expect("pod");
        let mut cache = TypedCache::<Pod>::new(rt.key());
        let all = cache.refresh(&store);
        let one = cache.get(&store, "default", "a").expect("pod a");
        assert!(Arc::ptr_eq(&all[0], &one), "the same typed copy");
        store
            .modify(&rt, "default", "a", crate::store::Subresource::Main, |p| {
                p["metadata"]["labels"] = json!({"x": "y"});
                Ok(())
            })
            .expect("labelled");
        let changed = cache.get(&store, "default", "a").expect("pod a");
        assert!(
            changed
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l["x"] == "y")
        );
        assert!(cache.get(&store, "default", "b").is_none());
    }
}
