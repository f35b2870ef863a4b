//! The instance types listed for one pass, by name, as existing NodeClaims are priced and sized
//! with: each NodePool's own types (NodeOverlays apply per NodePool, so one name may carry a
//! different price or capacity in two pools), and the cloud's listing for a NodeClaim whose
//! NodePool was not listed. Upstream prices a consolidation candidate from its NodePool's
//! instance types (`disruption/helpers.go`), which its overlay decorator has overlaid.

use std::collections::HashMap;
use std::sync::Arc;

use super::InstanceType;

/// Instance types by name, per NodePool where overlays changed them.
#[derive(Clone, Debug, Default)]
pub struct TypeIndex {
    /// The cloud's listing (no overlay), first listing of a name wins.
    by_name: HashMap<String, Arc<InstanceType>>,
    /// Each NodePool's types with its NodeOverlays applied, by pool then type name; only
    /// filled when the pass had overlays.
    by_pool: HashMap<String, HashMap<String, Arc<InstanceType>>>,
}

impl TypeIndex {
    /// Adds cloud-listed `types` (the first listing of a name wins).
    pub fn add_listed(&mut self, types: &[Arc<InstanceType>]) {
        for t in types {
            self.by_name
                .entry(t.name.clone())
                .or_insert_with(|| Arc::clone(t));
        }
    }

    /// Records `pool`'s own (overlaid) `types`; they take precedence over the listing for the
    /// NodeClaims of `pool`.
    pub fn add_pool(&mut self, pool: &str, types: &[Arc<InstanceType>]) {
        let own = self.by_pool.entry(pool.to_string()).or_default();
        for t in types {
            own.insert(t.name.clone(), Arc::clone(t));
        }
    }

    /// The type `name` as a NodeClaim of NodePool `pool` sees it: the pool's own when
    /// recorded, else the listed one.
    pub fn get(&self, pool: Option<&str>, name: &str) -> Option<&Arc<InstanceType>> {
        pool.and_then(|p| self.by_pool.get(p))
            .and_then(|own| own.get(name))
            .or_else(|| self.by_name.get(name))
    }

    /// The cloud-listed types (no overlay), each name once, in no particular order. Capacity
    /// reservations' room is read from these: an overlay changes prices and extended
    /// resources, never a reservation.
    pub fn listed(&self) -> impl Iterator<Item = &Arc<InstanceType>> {
        self.by_name.values()
    }

    /// Whether nothing was listed.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty() && self.by_pool.is_empty()
    }
}

impl From<HashMap<String, Arc<InstanceType>>> for TypeIndex {
    /// An index of listed types only (no NodePool of its own).
    fn from(by_name: HashMap<String, Arc<InstanceType>>) -> TypeIndex {
        TypeIndex {
            by_name,
            by_pool: HashMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::Offering;
    use crate::scheduling::resources::Resources;
    use std::collections::BTreeMap;

    fn priced(name: &str, price: f64) -> Arc<InstanceType> {
        let offering = Offering {
            zone: "z".into(),
            capacity_type: "on-demand".into(),
            price,
            available: true,
            reservation_id: None,
            reservation_capacity: 0,
        };
        Arc::new(InstanceType::new(
            name.into(),
            BTreeMap::new(),
            &[],
            Resources::default(),
            Resources::default(),
            vec![offering],
        ))
    }

    fn price(index: &TypeIndex, pool: Option<&str>, name: &str) -> Option<f64> {
        index.get(pool, name).map(|t| t.offerings[0].price)
    }

    #[test]
    fn a_pool_sees_its_own_types_and_others_the_listing() {
        let mut index = TypeIndex::default();
        index.add_listed(&[priced("m5.large", 0.096)]);
        index.add_listed(&[priced("m5.large", 9.0), priced("c5.large", 0.085)]);
        index.add_pool("overlaid", &[priced("m5.large", 0.01)]);
        assert_eq!(price(&index, Some("overlaid"), "m5.large"), Some(0.01));
        assert_eq!(price(&index, Some("overlaid"), "c5.large"), Some(0.085));
        assert_eq!(price(&index, Some("other"), "m5.large"), Some(0.096));
        assert_eq!(price(&index, None, "m5.large"), Some(0.096));
        assert_eq!(price(&index, None, "t3.nano"), None);
    }
}
