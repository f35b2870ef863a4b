//! Garbage collection as kube-controller-manager does it: dependents whose owners are all gone
//! (background propagation), pods bound to nodes that no longer exist (pod GC), and objects
//! left in namespaces that were deleted.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::broadcast::error::TryRecvError;

use super::cache::TypedCache;
use crate::registry::ResourceType;
use crate::store::{DeleteOptions, Store};

/// What collection reads of an object: its identity, owners, deletion and (pods) node.
/// Decoded once per version of the object and kept between passes ([`TypedCache`]).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Collectable {
    metadata: CollectableMeta,
    spec: CollectableSpec,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct CollectableMeta {
    name: String,
    namespace: String,
    uid: String,
    deletion_timestamp: Option<serde::de::IgnoredAny>,
    owner_references: Option<Vec<OwnerUid>>,
}

#[derive(Debug, Default, Deserialize)]
struct OwnerUid {
    #[serde(default)]
    uid: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct CollectableSpec {
    node_name: Option<String>,
}

/// One collection pass; returns how many objects it deleted.
pub fn pass(store: &Store) -> usize {
    let objects: Vec<(ResourceType, Arc<Collectable>)> = store
        .stored_types()
        .into_iter()
        .flat_map(|rt| {
            let views = TypedCache::<Collectable>::new(rt.key()).refresh(store);
            views.into_iter().map(move |v| (rt.clone(), v))
        })
        .collect();
    let uids: HashSet<&str> = objects
        .iter()
        .map(|(_, o)| o.metadata.uid.as_str())
        .collect();
    let names_of = |plural: &str| -> HashSet<&str> {
        objects
            .iter()
            .filter(|(rt, _)| rt.group.is_empty() && rt.plural == plural)
            .map(|(_, o)| o.metadata.name.as_str())
            .collect()
    };
    let nodes = names_of("nodes");
    let namespaces = names_of("namespaces");
    let mut deleted = 0;
    for (rt, obj) in &objects {
        let meta = &obj.metadata;
        if meta.deletion_timestamp.is_some() {
            continue;
        }
        let owners = meta.owner_references.as_deref().unwrap_or_default();
        let orphaned = !owners.is_empty() && owners.iter().all(|o| !uids.contains(o.uid.as_str()));
        let lost_node = rt.group.is_empty()
            && rt.plural == "pods"
            && obj
                .spec
                .node_name
                .as_deref()
                .is_some_and(|n| !n.is_empty() && !nodes.contains(n));
        let lost_namespace = rt.namespaced && !namespaces.contains(meta.namespace.as_str());
        if (orphaned || lost_node || lost_namespace)
            && store
                .delete(rt, &meta.namespace, &meta.name, &DeleteOptions::default())
                .is_ok()
        {
            deleted += 1;
        }
    }
    deleted
}

/// Collect garbage every second until the task is aborted, in the seconds after something was
/// written: a pass over a store nothing has changed in since the last pass deletes nothing
/// more, so a settled cluster costs no pass at all (the garbage collector of
/// kube-controller-manager likewise acts on its informers' events, not on a timer). A pass
/// reads every stored object, which takes a while in a cluster of thousands of pods and Events,
/// so it runs on the blocking pool rather than holding up an API server worker; the next tick
/// waits for it.
pub async fn run(store: Arc<Store>) {
    let mut changes = store.subscribe_changes();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut due = true;
    loop {
        tick.tick().await;
        // Changes missed (a lag) count as changes.
        loop {
            match changes.try_recv() {
                Ok(_) | Err(TryRecvError::Lagged(_)) => due = true,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Closed) => return,
            }
        }
        if !due {
            continue;
        }
        due = false;
        let s = Arc::clone(&store);
        if tokio::task::spawn_blocking(move || pass(&s)).await.is_err() {
            tracing::error!("garbage collection pass panicked");
            return;
        }
    }
}
