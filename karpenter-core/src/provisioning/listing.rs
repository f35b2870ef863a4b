//! The instance types of a pass, per NodePool: each node class's listing from the cloud, with
//! the snapshot's NodeOverlays applied per NodePool (upstream decorates the cloud provider's
//! `GetInstanceTypes(nodePool)` with its overlay store, `pkg/cloudprovider/overlay`). Every
//! decision that reads instance types for a NodePool (provisioning, consolidation's
//! simulations, why-pending, `karpenter simulate`) and the NodeOverlay status controller take
//! them from here, so one overlay has one verdict and one effect everywhere.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crds::NodePool;

use super::template::{self, SkipReason};
use crate::capacity::InstanceType;
use crate::capacity::index::TypeIndex;
use crate::capacity::overlay::{self, OverlayPool, Verdict};
use crate::snapshot::Snapshot;

/// The instance types the cloud offers one node class, as listed for this pass, or why they
/// could not be listed (the NodePools using it are then left out).
pub type Listing = Result<Arc<Vec<Arc<InstanceType>>>, String>;

/// One NodePool's instance types for a pass (overlays applied), or why it has none.
pub type PoolTypes = Result<Arc<Vec<Arc<InstanceType>>>, SkipReason>;

/// A pass's instance types per NodePool.
#[derive(Clone, Debug, Default)]
pub struct Listed {
    /// Every NodePool of the snapshot, in snapshot order, with its node class's instance types
    /// (overlaid where NodeOverlays match) or why it has none: not usable before listing
    /// ([`template::node_class_of`]) or its node class's listing failed.
    pub pools: Vec<(Arc<NodePool>, PoolTypes)>,
    /// The listed types by name, each NodePool's overlaid ones first: what existing
    /// NodeClaims are priced and sized with.
    pub index: TypeIndex,
    /// Each NodeOverlay's verdict, by overlay name; empty when the snapshot has none.
    pub verdicts: BTreeMap<String, Verdict>,
}

/// Each NodePool of `snap` with the instance types of its node class in `listings` (by node
/// class name), and the snapshot's NodeOverlays evaluated over every NodePool whose types were
/// listed ([`overlay::evaluate`]): their verdicts, and each pool's types with the applied
/// overlays' prices and capacity. Without overlays the listings are passed through unchanged.
pub fn pool_types(snap: &Snapshot, listings: &HashMap<String, Listing>) -> Listed {
    let mut out = Listed::default();
    for pool in &snap.nodepools {
        let types = template::node_class_of(pool, snap).and_then(|nc| {
            let class = nc.metadata.name.as_deref().unwrap_or_default();
            match listings.get(class) {
                Some(Ok(types)) => Ok(Arc::clone(types)),
                Some(Err(why)) => Err(SkipReason::InstanceTypes(why.clone())),
                None => Err(SkipReason::InstanceTypes("not listed".into())),
            }
        });
        if let Ok(types) = &types {
            out.index.add_listed(types);
        }
        out.pools.push((Arc::clone(pool), types));
    }
    if snap.nodeoverlays.is_empty() {
        return out;
    }
    let overlay_pools: Vec<OverlayPool> = out
        .pools
        .iter()
        .filter_map(|(pool, types)| Some(OverlayPool::new(pool, types.as_ref().ok()?.to_vec())))
        .collect();
    let mut evaluation = overlay::evaluate(&snap.nodeoverlays, &overlay_pools);
    for (pool, types) in out.pools.iter_mut() {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        let Ok(types) = types.as_mut() else {
            continue;
        };
        if let Some(overlaid) = evaluation.pools.remove(name) {
            out.index.add_pool(name, &overlaid);
            *types = Arc::new(overlaid);
        }
    }
    out.verdicts = evaluation.verdicts;
    out
}

#[cfg(test)]
mod tests;
