//! Instance types and offerings as the scheduler sees them: requirements (labels), capacity,
//! overhead and allocatable, and priced zonal offerings; plus upstream AWS's overhead math
//! (`aws:pkg/providers/instancetype/types.go`). [`catalog`] builds them from the embedded EC2
//! data, sized for a node class by [`node_class`]; [`overlay`] applies NodeOverlays to them and
//! [`index`] looks them up by name for a NodeClaim of a NodePool; [`prices`] holds the vendored
//! on-demand price tables per region.

pub mod catalog;
pub mod embedded;
pub mod hardware;
pub mod index;
pub mod node_class;
#[cfg(test)]
mod node_class_tests;
pub mod overlay;
#[cfg(test)]
mod overlay_tests;
pub mod prices;
pub mod reservation;

use std::collections::BTreeMap;
use std::sync::Arc;

use crds::labels::{
    CAPACITY_TYPE_LABEL, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT,
    TOPOLOGY_ZONE_LABEL,
};

use crate::scheduling::requirements::{Requirement, Requirements};
use crate::scheduling::resources::Resources;

/// Where and how an instance type can be bought.
#[derive(Clone, Debug, PartialEq)]
pub struct Offering {
    /// Availability zone, e.g. `us-east-1a`.
    pub zone: String,
    /// `on-demand`, `spot` or `reserved`.
    pub capacity_type: String,
    /// USD per hour.
    pub price: f64,
    /// False while the offering is out of capacity (insufficient-capacity cache), or its
    /// reservation is full.
    pub available: bool,
    /// The capacity reservation a `reserved` offering launches into (`cr-...`); `None` for
    /// on-demand and spot.
    pub reservation_id: Option<String>,
    /// How many more instances the reservation takes (0 for other offerings).
    pub reservation_capacity: i64,
}

impl Offering {
    /// Whether zone and capacity type satisfy the requirements.
    pub fn compatible(&self, reqs: &Requirements) -> bool {
        OfferingFilter::of(reqs).admits(self)
    }
}

/// The two requirements an offering is checked against (zone and capacity type), looked up
/// once: checking every offering of every type is the plan pass's hottest loop, and each
/// lookup in [`Requirements`] compares label keys.
#[derive(Clone, Copy, Debug)]
pub struct OfferingFilter<'a> {
    zone: Option<&'a Requirement>,
    capacity_type: Option<&'a Requirement>,
}

impl<'a> OfferingFilter<'a> {
    /// The zone (`topology.kubernetes.io/zone`) and capacity-type (`karpenter.sh/capacity-type`)
    /// requirements of `reqs`.
    pub fn of(reqs: &'a Requirements) -> OfferingFilter<'a> {
        OfferingFilter {
            zone: reqs.get(TOPOLOGY_ZONE_LABEL),
            capacity_type: reqs.get(CAPACITY_TYPE_LABEL),
        }
    }

    /// Whether `o`'s zone and capacity type satisfy them (availability is not checked).
    pub fn admits(&self, o: &Offering) -> bool {
        self.zone.is_none_or(|r| r.has(&o.zone))
            && self.capacity_type.is_none_or(|r| r.has(&o.capacity_type))
    }
}

/// One launchable instance type.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceType {
    /// Name, e.g. `m5.large`.
    pub name: String,
    /// Well-known labels as requirements: single-valued `In` for the type's own labels,
    /// `DoesNotExist` for provider labels it lacks, and `In` over the zones and capacity types of
    /// its offerings.
    pub requirements: Requirements,
    /// The type's own labels (without zone and capacity type), as a node of this type gets them.
    pub labels: BTreeMap<String, String>,
    /// Capacity (cpu in millicores, memory in bytes after VM overhead, pods, ephemeral storage,
    /// GPUs).
    pub capacity: Resources,
    /// kube-reserved + system-reserved + eviction thresholds.
    pub overhead: Resources,
    /// `capacity - overhead`.
    pub allocatable: Resources,
    /// Where it can be bought: zone and capacity type, with price (USD/hour) and availability.
    pub offerings: Vec<Offering>,
    /// Why a resource's allocatable is what it is, in the node class's terms, by resource
    /// name, e.g. `pods` → `maxPods 8 (EC2NodeClass capped)`; empty when not known (synthetic
    /// and test types). `why-pending` and `status -o wide` print it.
    pub sizing: BTreeMap<String, String>,
    /// EBS volumes a node of this type can attach besides its root volume
    /// ([`ebs_attach_limit`]); `None` where the type's limit is unknown (unlimited). Set with
    /// [`InstanceType::with_ebs_attach_limit`].
    pub ebs_attach_limit: Option<i64>,
    /// Whether a NodeOverlay changed the price of one of its offerings ([`overlay::evaluate`]);
    /// a NodeClaim with such a type among its options gets
    /// `karpenter.sh/price-overlay-applied: "true"` (upstream `IsPricingOverlayApplied`).
    pub price_overlay_applied: bool,
    /// Whether a NodeOverlay set extended resources in its capacity ([`overlay::evaluate`]);
    /// a NodeClaim with such a type among its options gets
    /// `karpenter.sh/capacity-overlay-applied: "true"` (upstream `IsCapacityOverlayApplied`).
    pub capacity_overlay_applied: bool,
}

impl InstanceType {
    /// Build an instance type: derives `allocatable` and adds the zone and capacity-type
    /// requirements from the offerings.
    pub fn new(
        name: String,
        labels: BTreeMap<String, String>,
        absent_labels: &[&str],
        capacity: Resources,
        overhead: Resources,
        offerings: Vec<Offering>,
    ) -> InstanceType {
        let mut requirements = Requirements::from_labels(&labels);
        for key in absent_labels {
            if !labels.contains_key(*key) {
                requirements.add(Requirement::does_not_exist(key));
            }
        }
        let zones: Vec<String> = dedup(offerings.iter().map(|o| o.zone.clone()));
        let capacity_types: Vec<String> = dedup(offerings.iter().map(|o| o.capacity_type.clone()));
        requirements.add(Requirement::is_in(TOPOLOGY_ZONE_LABEL, zones));
        requirements.add(Requirement::is_in(CAPACITY_TYPE_LABEL, capacity_types));
        let mut allocatable = capacity.clone();
        allocatable.sub(&overhead);
        InstanceType {
            name,
            requirements,
            labels,
            capacity,
            overhead,
            allocatable,
            offerings,
            sizing: BTreeMap::new(),
            ebs_attach_limit: None,
            price_overlay_applied: false,
            capacity_overlay_applied: false,
        }
    }

    /// This type with its EBS attach limit (volumes besides the root one, see
    /// [`ebs_attach_limit`]); `None` leaves it unlimited.
    pub fn with_ebs_attach_limit(mut self, limit: Option<i64>) -> InstanceType {
        self.ebs_attach_limit = limit;
        self
    }

    /// The cheapest available offering compatible with the requirements.
    pub fn cheapest_offering(&self, reqs: &Requirements) -> Option<&Offering> {
        let filter = OfferingFilter::of(reqs);
        self.offerings
            .iter()
            .filter(|o| o.available && filter.admits(o))
            .min_by(|a, b| a.price.total_cmp(&b.price))
    }

    /// Whether the type can serve the requirements: labels intersect and some available
    /// offering is compatible.
    pub fn compatible(&self, reqs: &Requirements) -> bool {
        let filter = OfferingFilter::of(reqs);
        self.requirements.intersects(reqs).is_ok()
            && self
                .offerings
                .iter()
                .any(|o| o.available && filter.admits(o))
    }
}

/// The EBS volumes (`ebs.csi.aws.com`) a node can attach for pods, from EC2's
/// `EbsInfo.MaximumEbsAttachments` (the CSV's `ebs_max_attachments`): one attachment goes to
/// the root volume, as the EBS CSI driver reserves it when it reports `allocatable.count` on
/// the node's CSINode. Never below 0; `None` when the maximum is unknown. Beyond upstream
/// Karpenter, which knows no limit before a node's CSINode reports one.
pub fn ebs_attach_limit(ebs_max_attachments: Option<i64>) -> Option<i64> {
    ebs_max_attachments.map(|max| (max - 1).max(0))
}

/// An offering a launch may try: price (USD/hour), instance type, zone, capacity type.
pub type LaunchOffering<'a> = (f64, &'a Arc<InstanceType>, String, String);

/// The offerings a launch tries, cheapest first (ties by type name, then zone), all of one
/// capacity type chosen by upstream's priority (`aws:pkg/providers/instance`): reserved when the
/// requirements allow it and some candidate has an available compatible reserved offering, else
/// spot likewise, else on-demand. `skip(type, zone,
/// capacity type)` leaves offerings out (e.g. ones a launch already tried).
///
/// `prioritized` (a NodeClaim annotated `karpenter.sh/price-overlay-applied`): the cloud's
/// prices are not the ones the NodeClaim was chosen by, so the offerings follow the order of
/// `candidates` (the NodeClaim's, cheapest first by the overlaid prices), each type's cheapest
/// first; upstream's AWS provider then asks CreateFleet for a `prioritized` allocation.
pub fn launch_offerings<'a>(
    candidates: &[&'a Arc<InstanceType>],
    reqs: &Requirements,
    skip: impl Fn(&str, &str, &str) -> bool,
    prioritized: bool,
) -> Vec<LaunchOffering<'a>> {
    let wants = |ct: &str| reqs.get(CAPACITY_TYPE_LABEL).is_none_or(|r| r.has(ct));
    let mut offerings: Vec<LaunchOffering<'a>> = Vec::new();
    for ct in [
        CAPACITY_TYPE_RESERVED,
        CAPACITY_TYPE_SPOT,
        CAPACITY_TYPE_ON_DEMAND,
    ] {
        if !wants(ct) {
            continue;
        }
        for t in candidates {
            for o in t.offerings.iter().filter(|o| {
                o.available
                    && o.capacity_type == ct
                    && o.compatible(reqs)
                    && !skip(&t.name, &o.zone, ct)
            }) {
                offerings.push((o.price, *t, o.zone.clone(), ct.to_string()));
            }
        }
        if !offerings.is_empty() {
            break;
        }
    }
    if prioritized {
        let rank = |t: &InstanceType| candidates.iter().position(|c| c.name == t.name);
        offerings.sort_by(|a, b| {
            rank(a.1)
                .cmp(&rank(b.1))
                .then(a.0.total_cmp(&b.0))
                .then(a.2.cmp(&b.2))
        });
        return offerings;
    }
    offerings.sort_by(|a, b| {
        a.0.total_cmp(&b.0)
            .then(a.1.name.cmp(&b.1.name))
            .then(a.2.cmp(&b.2))
    });
    offerings
}

fn dedup(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = items.collect();
    v.sort();
    v.dedup();
    v
}

/// Pods an instance type supports under the VPC CNI without prefix delegation:
/// `ENIs × (IPv4 addresses per ENI − 1) + 2` (EKS `max-pods-calculator.sh`).
pub fn eni_limited_pods(enis: i64, ipv4_per_eni: i64) -> i64 {
    enis * (ipv4_per_eni - 1) + 2
}

/// kube-reserved CPU in millicores for a core count (EKS AMI formula upstream uses): 6% of the
/// first core, 1% of the second, 0.5% of the third and fourth, 0.25% of every further core.
pub fn kube_reserved_cpu_milli(vcpus: i64) -> i64 {
    let mut tenths_of_milli: i64 = 0; // work in 1/10 millicores to stay exact
    for core in 1..=vcpus {
        tenths_of_milli += match core {
            1 => 600,
            2 => 100,
            3 | 4 => 50,
            _ => 25,
        };
    }
    (tenths_of_milli + 9) / 10
}

/// kube-reserved memory in MiB: `11 MiB × maxPods + 255 MiB`.
pub fn kube_reserved_memory_mib(max_pods: i64) -> i64 {
    11 * max_pods + 255
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_demand(name: &str, prices: &[(&str, f64)]) -> Arc<InstanceType> {
        let offerings = prices
            .iter()
            .map(|(zone, price)| Offering {
                zone: zone.to_string(),
                capacity_type: "on-demand".into(),
                price: *price,
                available: true,
                reservation_id: None,
                reservation_capacity: 0,
            })
            .collect();
        Arc::new(InstanceType::new(
            name.into(),
            BTreeMap::new(),
            &[],
            Resources::default(),
            Resources::default(),
            offerings,
        ))
    }

    #[test]
    fn a_prioritized_launch_follows_the_claims_order_not_the_clouds_prices() {
        let m5 = on_demand("m5.large", &[("b", 0.096), ("a", 0.097)]);
        let c5 = on_demand("c5.large", &[("a", 0.085)]);
        let claim_order = [&m5, &c5];
        let tried = |prioritized| -> Vec<(String, String)> {
            launch_offerings(
                &claim_order,
                &Requirements::new(),
                |_, _, _| false,
                prioritized,
            )
            .into_iter()
            .map(|(_, t, zone, _)| (t.name.clone(), zone))
            .collect()
        };
        let pair = |t: &str, z: &str| (t.to_string(), z.to_string());
        assert_eq!(
            tried(false),
            [
                pair("c5.large", "a"),
                pair("m5.large", "b"),
                pair("m5.large", "a")
            ]
        );
        assert_eq!(
            tried(true),
            [
                pair("m5.large", "b"),
                pair("m5.large", "a"),
                pair("c5.large", "a")
            ]
        );
    }

    #[test]
    fn overhead_matches_upstream_formulas() {
        assert_eq!(kube_reserved_cpu_milli(1), 60);
        assert_eq!(kube_reserved_cpu_milli(2), 70);
        assert_eq!(kube_reserved_cpu_milli(4), 80);
        assert_eq!(kube_reserved_cpu_milli(8), 90);
        assert_eq!(kube_reserved_cpu_milli(96), 310);
        // m5.large: 3 ENIs x 10 IPv4 -> 29 pods, 574 MiB kube-reserved memory.
        assert_eq!(eni_limited_pods(3, 10), 29);
        assert_eq!(kube_reserved_memory_mib(29), 574);
        // m5.large attaches 27 EBS volumes; the root volume takes one.
        assert_eq!(ebs_attach_limit(Some(27)), Some(26));
        assert_eq!(ebs_attach_limit(Some(0)), Some(0));
        assert_eq!(ebs_attach_limit(None), None);
    }

    #[test]
    fn offerings_filter_by_zone_and_capacity_type() {
        let offerings = vec![
            Offering {
                zone: "a".into(),
                capacity_type: "spot".into(),
                price: 0.03,
                available: false,
                reservation_id: None,
                reservation_capacity: 0,
            },
            Offering {
                zone: "a".into(),
                capacity_type: "on-demand".into(),
                price: 0.10,
                available: true,
                reservation_id: None,
                reservation_capacity: 0,
            },
            Offering {
                zone: "b".into(),
                capacity_type: "spot".into(),
                price: 0.04,
                available: true,
                reservation_id: None,
                reservation_capacity: 0,
            },
        ];
        let it = InstanceType::new(
            "t".into(),
            BTreeMap::new(),
            &[],
            Resources::default(),
            Resources::default(),
            offerings,
        );
        let mut reqs = Requirements::new();
        assert_eq!(it.cheapest_offering(&reqs).map(|o| o.price), Some(0.04));
        reqs.add(Requirement::is_in(TOPOLOGY_ZONE_LABEL, ["a"]));
        assert_eq!(
            it.cheapest_offering(&reqs)
                .map(|o| o.capacity_type.as_str()),
            Some("on-demand")
        );
        reqs.add(Requirement::is_in(CAPACITY_TYPE_LABEL, ["spot"]));
        assert!(!it.compatible(&reqs));
    }
}
