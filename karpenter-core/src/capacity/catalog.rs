//! The simulated cloud's instance-type catalog: real EC2 data (vendored under `data/ec2/`,
//! embedded at compile time) turned into instance types with upstream AWS labels, capacity and
//! overhead, and priced zonal offerings in one region: us-east-1 by default
//! ([`Catalog::embedded`]), or any of the 30 regions whose zone offerings are vendored
//! ([`Catalog::for_region`]). On-demand prices come from the region's vendored table
//! ([`PriceTable`]: us-east-1, us-gov-east-1 and us-gov-west-1, upstream's generated tables); in
//! another region the catalog prices at the us-east-1 list prices, as upstream does until its
//! Pricing API refresh answers, and says so ([`Catalog::prices_approximate`]).
//!
//! Spot prices are not in the data. They are derived deterministically per instance type and
//! zone as a fraction between 0.35 and 0.70 of the on-demand price (real spot discounts vary by
//! type and zone in a similar range; upstream's kwok provider uses a flat 0.7).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use crds::labels as l;
use serde::Deserialize;

use crate::capacity::node_class::CapacityConfig;
use crate::capacity::prices::PriceTable;
use crate::capacity::reservation::{RESERVED_PRICE_DIVISOR, ReservedCapacity};
use crate::capacity::{InstanceType, Offering};

pub use super::embedded::{CatalogError, REGION};

const INSTANCE_TYPES_CSV: &str = include_str!("../../data/ec2/ec2-instance-types.csv");
const ENI_LIMITS_CSV: &str = include_str!("../../data/ec2/ec2-eni-limits.csv");
const ZONE_OFFERINGS_CSV: &str = include_str!("../../data/ec2/ec2-zone-offerings.csv");

/// Provider labels a type may lack; a type without one gets `DoesNotExist` for it, so that a
/// NodePool requiring, say, a GPU name never matches CPU-only types.
pub const OPTIONAL_LABELS: &[&str] = &[
    l::INSTANCE_GPU_NAME_LABEL,
    l::INSTANCE_GPU_MANUFACTURER_LABEL,
    l::INSTANCE_GPU_COUNT_LABEL,
    l::INSTANCE_GPU_MEMORY_LABEL,
    l::INSTANCE_ACCELERATOR_NAME_LABEL,
    l::INSTANCE_ACCELERATOR_MANUFACTURER_LABEL,
    l::INSTANCE_ACCELERATOR_COUNT_LABEL,
    l::INSTANCE_LOCAL_NVME_LABEL,
    l::INSTANCE_HYPERVISOR_LABEL,
];

pub use crate::capacity::hardware::TypeSpec;

#[derive(Deserialize)]
struct EniRow {
    instance_type: String,
    max_network_interfaces: i64,
    ipv4_per_interface: i64,
}

#[derive(Deserialize)]
struct ZoneRow {
    region: String,
    instance_type: String,
    /// The letters of the zones that offer it, e.g. `abc` for `REGIONa`, `REGIONb`, `REGIONc`.
    zones: String,
}

/// One catalog entry before zones and availability are applied.
#[derive(Clone, Debug)]
pub struct CatalogEntry {
    /// Instance type name.
    pub name: String,
    /// Labels a node of this type carries (instance type, arch, os, region, provider labels).
    pub labels: BTreeMap<String, String>,
    /// The hardware, with the ENI limits of upstream's vendored table where it knows the
    /// type; [`CapacityConfig::allocation`] sizes it for a node class.
    pub spec: TypeSpec,
    /// On-demand price, USD/hour.
    pub on_demand_price: f64,
    /// Capacity types it is sold as: `on-demand` and/or `spot` (never empty).
    pub sells: Vec<&'static str>,
    /// Zones the type is offered in.
    pub zones: BTreeSet<String>,
}

/// All instance types the simulated cloud sells in one region.
#[derive(Debug)]
pub struct Catalog {
    entries: Vec<CatalogEntry>,
    by_name: HashMap<String, usize>,
    region: String,
    prices_approximate: bool,
}

fn rows<T: for<'de> Deserialize<'de>>(
    file: &'static str,
    data: &str,
) -> Result<Vec<T>, CatalogError> {
    csv::Reader::from_reader(data.as_bytes())
        .deserialize()
        .collect::<Result<Vec<T>, _>>()
        .map_err(|e| CatalogError {
            file,
            message: e.to_string(),
        })
}

/// A stable pseudo-random fraction in [0, 1) for a key (FNV-1a), for derived spot prices.
fn stable_fraction(key: &str) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % 10_000) as f64 / 10_000.0
}

/// Derived spot price (USD/hour) of a type in a zone: 35%–70% of on-demand, stable per pair.
pub fn spot_price(on_demand: f64, instance_type: &str, zone: &str) -> f64 {
    let factor = 0.35 + 0.35 * stable_fraction(&format!("{instance_type}/{zone}"));
    (on_demand * factor * 10_000.0).round() / 10_000.0
}

impl Catalog {
    /// The us-east-1 catalog parsed from the embedded data (parsed once per process).
    ///
    /// Errors: the embedded CSVs are malformed (a build defect).
    pub fn embedded() -> Result<Arc<Catalog>, Arc<CatalogError>> {
        Catalog::for_region(REGION)
    }

    /// The catalog of `region` (e.g. `eu-west-1`), parsed once per process and region: its
    /// zones' offerings, priced from its vendored on-demand table, or at the us-east-1 list
    /// prices where there is none ([`Catalog::prices_approximate`]).
    ///
    /// Errors: no zone offerings are vendored for `region` (the message lists the regions that
    /// are), or the embedded CSVs are malformed.
    pub fn for_region(region: &str) -> Result<Arc<Catalog>, Arc<CatalogError>> {
        type Cache = Mutex<HashMap<String, Result<Arc<Catalog>, Arc<CatalogError>>>>;
        static CATALOGS: OnceLock<Cache> = OnceLock::new();
        let cache = CATALOGS.get_or_init(Default::default);
        let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .entry(region.to_string())
            .or_insert_with(|| Catalog::parse(region).map(Arc::new).map_err(Arc::new))
            .clone()
    }

    /// The regions whose zone offerings are vendored, sorted.
    pub fn regions() -> Vec<String> {
        let mut regions: Vec<String> = ZONE_OFFERINGS_CSV
            .lines()
            .skip(1)
            .filter_map(|l| l.split(',').next())
            .map(str::to_string)
            .collect();
        regions.dedup();
        regions
    }

    /// The region it describes, e.g. `us-east-1`.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// Whether its on-demand prices are the us-east-1 list prices standing in for a region
    /// with no vendored table (every price in it is then an estimate).
    pub fn prices_approximate(&self) -> bool {
        self.prices_approximate
    }

    fn parse(region: &str) -> Result<Catalog, CatalogError> {
        let prices = PriceTable::vendored(region).map_err(|e| CatalogError {
            file: e.file,
            message: e.message.clone(),
        })?;
        let prices_approximate = prices.approximate();
        let enis: HashMap<String, (i64, i64)> =
            rows::<EniRow>("ec2-eni-limits.csv", ENI_LIMITS_CSV)?
                .into_iter()
                .map(|r| {
                    (
                        r.instance_type,
                        (r.max_network_interfaces, r.ipv4_per_interface),
                    )
                })
                .collect();
        let mut zones: HashMap<String, BTreeSet<String>> = HashMap::new();
        for r in rows::<ZoneRow>("ec2-zone-offerings.csv", ZONE_OFFERINGS_CSV)? {
            if r.region == region {
                let offered = r.zones.chars().map(|z| format!("{region}{z}")).collect();
                zones.insert(r.instance_type, offered);
            }
        }
        if zones.is_empty() {
            return Err(CatalogError {
                file: "ec2-zone-offerings.csv",
                message: format!(
                    "no EC2 data for region {region:?}; vendored regions: {}",
                    Catalog::regions().join(", ")
                ),
            });
        }
        let mut entries = Vec::new();
        for row in rows::<TypeSpec>("ec2-instance-types.csv", INSTANCE_TYPES_CSV)? {
            let (Some(price), Some(type_zones)) = (
                prices.get(&row.instance_type),
                zones.get(&row.instance_type),
            ) else {
                continue;
            };
            let eni = enis.get(&row.instance_type).copied();
            entries.extend(entry(&row, price, eni, type_zones.clone()).map(|mut e| {
                e.labels
                    .insert(l::TOPOLOGY_REGION_LABEL.to_string(), region.to_string());
                e
            }));
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let by_name = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.name.clone(), i))
            .collect();
        Ok(Catalog {
            entries,
            by_name,
            region: region.to_string(),
            prices_approximate,
        })
    }

    /// Every entry, sorted by name.
    pub fn entries(&self) -> &[CatalogEntry] {
        &self.entries
    }

    /// One entry by instance type name.
    pub fn get(&self, name: &str) -> Option<&CatalogEntry> {
        self.by_name.get(name).map(|&i| &self.entries[i])
    }

    /// Instance types offered in `zones`, sized for a node class by `config`, with
    /// `unavailable(type, zone, capacity_type)` offerings marked unavailable and spot priced by
    /// [`spot_price`]. Types with no offering in those zones are left out.
    pub fn instance_types(
        &self,
        zones: &BTreeSet<String>,
        config: &CapacityConfig,
        unavailable: impl Fn(&str, &str, &str) -> bool,
    ) -> Vec<Arc<InstanceType>> {
        self.instance_types_with(zones, config, &[], unavailable)
    }

    /// [`Catalog::instance_types`] plus one `reserved` offering per capacity reservation of
    /// `reserved` whose zone is among `zones` ([`with_reservations`]).
    pub fn instance_types_with(
        &self,
        zones: &BTreeSet<String>,
        config: &CapacityConfig,
        reserved: &[ReservedCapacity],
        unavailable: impl Fn(&str, &str, &str) -> bool,
    ) -> Vec<Arc<InstanceType>> {
        let types = instance_types(
            &self.entries,
            zones,
            config,
            |e, zone| spot_price(e.on_demand_price, &e.name, zone),
            &unavailable,
        );
        with_reservations(types, zones, reserved, |name| {
            self.get(name).map(|e| e.on_demand_price)
        })
    }
}

/// `types` with a `reserved` offering added per reservation of `reserved` for that type in one
/// of `zones` (upstream `ReservedCapacityResolver`): price `on_demand(type) /`
/// [`RESERVED_PRICE_DIVISOR`] (0 when the on-demand price is unknown), available while the
/// reservation takes more instances. A type whose offerings change is rebuilt so its
/// requirements list the `reserved` capacity type.
pub fn with_reservations(
    types: Vec<Arc<InstanceType>>,
    zones: &BTreeSet<String>,
    reserved: &[ReservedCapacity],
    on_demand: impl Fn(&str) -> Option<f64>,
) -> Vec<Arc<InstanceType>> {
    if reserved.is_empty() {
        return types;
    }
    types
        .into_iter()
        .map(|t| {
            let mine: Vec<&ReservedCapacity> = reserved
                .iter()
                .filter(|r| r.instance_type == t.name && zones.contains(&r.zone))
                .collect();
            if mine.is_empty() {
                return t;
            }
            let price = on_demand(&t.name).unwrap_or(0.0) / RESERVED_PRICE_DIVISOR;
            let mut offerings = t.offerings.clone();
            offerings.extend(mine.iter().map(|r| Offering {
                zone: r.zone.clone(),
                capacity_type: l::CAPACITY_TYPE_RESERVED.into(),
                price,
                available: r.available > 0,
                reservation_id: Some(r.id.clone()),
                reservation_capacity: r.available.max(0),
            }));
            let mut it = InstanceType::new(
                t.name.clone(),
                t.labels.clone(),
                OPTIONAL_LABELS,
                t.capacity.clone(),
                t.overhead.clone(),
                offerings,
            );
            it.sizing = t.sizing.clone();
            it.ebs_attach_limit = t.ebs_attach_limit;
            Arc::new(it)
        })
        .collect()
}

/// Instance types from catalog entries, sized for a node class by `config`, with offerings
/// for each zone in `zones` the type is sold in and each capacity type it is sold as: on-demand
/// at the entry's price, spot at `spot(entry, zone)` (USD/hour), unavailable where
/// `unavailable(type, zone, capacity_type)`. Types with no offering in those zones, or that
/// the node class's AMI family cannot run ([`CapacityConfig::node_labels`]), are left out.
pub fn instance_types(
    entries: &[CatalogEntry],
    zones: &BTreeSet<String>,
    config: &CapacityConfig,
    spot: impl Fn(&CatalogEntry, &str) -> f64,
    unavailable: impl Fn(&str, &str, &str) -> bool,
) -> Vec<Arc<InstanceType>> {
    entries
        .iter()
        .filter_map(|e| {
            let labels = config.node_labels(&e.labels)?;
            let mut offerings = Vec::new();
            for zone in e.zones.intersection(zones) {
                for &ct in &e.sells {
                    let price = if ct == l::CAPACITY_TYPE_SPOT {
                        spot(e, zone)
                    } else {
                        e.on_demand_price
                    };
                    offerings.push(Offering {
                        zone: zone.clone(),
                        capacity_type: ct.to_string(),
                        price,
                        available: !unavailable(&e.name, zone, ct),
                        reservation_id: None,
                        reservation_capacity: 0,
                    });
                }
            }
            (!offerings.is_empty()).then(|| {
                let allocation = config.allocation(&e.spec);
                let mut it = InstanceType::new(
                    e.name.clone(),
                    labels,
                    OPTIONAL_LABELS,
                    allocation.capacity,
                    allocation.overhead,
                    offerings,
                );
                it.sizing = allocation.sizing;
                it.ebs_attach_limit = super::ebs_attach_limit(e.spec.ebs_max_attachments);
                Arc::new(it)
            })
        })
        .collect()
}

/// A catalog entry for one instance type: upstream AWS's labels and its hardware, with its
/// on-demand price (USD/hour) and zones. `eni_limits` (interfaces, IPv4 per interface)
/// overrides the spec's when known (upstream's vendored ENI table). `None` for types that run
/// no Linux kubelet (mac, 32-bit only), have no vCPUs or memory, or are sold neither on-demand nor spot.
pub fn entry(
    row: &TypeSpec,
    price: f64,
    eni_limits: Option<(i64, i64)>,
    zones: BTreeSet<String>,
) -> Option<CatalogEntry> {
    let arch = match row
        .architectures
        .split(' ')
        .find(|a| *a == "x86_64" || *a == "arm64")
    {
        Some("x86_64") => l::ARCH_AMD64,
        Some(_) => l::ARCH_ARM64,
        None => return None, // mac and 32-bit-only types run no Linux kubelet
    };
    if row.vcpus <= 0 || row.memory_mib <= 0 {
        return None;
    }
    let mut sells = Vec::new();
    for class in row.usage_classes.split(' ') {
        match class {
            "on-demand" => sells.push(l::CAPACITY_TYPE_ON_DEMAND),
            "spot" => sells.push(l::CAPACITY_TYPE_SPOT),
            _ => {}
        }
    }
    if sells.is_empty() {
        return None;
    }
    let mut spec = row.clone();
    if let Some((eni, ipv4)) = eni_limits {
        spec.max_network_interfaces = eni;
        spec.ipv4_per_interface = ipv4;
    }
    Some(CatalogEntry {
        labels: labels_for(row, arch),
        name: row.instance_type.clone(),
        spec,
        on_demand_price: price,
        sells,
        zones,
    })
}

/// Upstream AWS's instance labels, derived from the type's data and name.
fn labels_for(row: &TypeSpec, arch: &str) -> BTreeMap<String, String> {
    let (family, size) = row
        .instance_type
        .split_once('.')
        .unwrap_or((&row.instance_type, ""));
    let category: String = family
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    let after_category = &family[category.len()..];
    let generation: String = after_category
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let suffix: String = after_category
        .chars()
        .skip_while(|c| !c.is_ascii_alphabetic())
        .collect();
    let cpu_manufacturer = if arch == l::ARCH_ARM64 {
        "aws"
    } else if suffix.starts_with('a') {
        "amd"
    } else {
        "intel"
    };
    let mut labels: BTreeMap<String, String> = [
        (l::INSTANCE_TYPE_LABEL, row.instance_type.clone()),
        (l::ARCH_LABEL, arch.to_string()),
        (l::OS_LABEL, l::OS_LINUX.to_string()),
        (l::TOPOLOGY_REGION_LABEL, REGION.to_string()),
        (l::INSTANCE_CATEGORY_LABEL, category.clone()),
        (l::INSTANCE_FAMILY_LABEL, family.to_string()),
        (l::INSTANCE_SIZE_LABEL, size.to_string()),
        (l::INSTANCE_CPU_LABEL, row.vcpus.to_string()),
        (
            l::INSTANCE_CPU_MANUFACTURER_LABEL,
            cpu_manufacturer.to_string(),
        ),
        (l::INSTANCE_MEMORY_LABEL, row.memory_mib.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let mut put = |k: &str, v: String| {
        if !v.is_empty() {
            labels.insert(k.to_string(), v);
        }
    };
    put(l::INSTANCE_GENERATION_LABEL, generation);
    put(l::INSTANCE_HYPERVISOR_LABEL, row.hypervisor.clone());
    if let Some(gbps) = row.baseline_bandwidth_gbps {
        put(
            l::INSTANCE_NETWORK_BANDWIDTH_LABEL,
            ((gbps * 1000.0).round() as i64).to_string(),
        );
    }
    if row.gpu_count > 0 {
        put(
            l::INSTANCE_GPU_NAME_LABEL,
            row.gpu_name.to_ascii_lowercase().replace(' ', "-"),
        );
        put(
            l::INSTANCE_GPU_MANUFACTURER_LABEL,
            row.gpu_manufacturer.to_ascii_lowercase(),
        );
        put(l::INSTANCE_GPU_COUNT_LABEL, row.gpu_count.to_string());
        if let Some(mem) = row.gpu_memory_mib {
            put(l::INSTANCE_GPU_MEMORY_LABEL, mem.to_string());
        }
    }
    if row.accelerator_count > 0 && !row.accelerator_name.is_empty() {
        put(
            l::INSTANCE_ACCELERATOR_NAME_LABEL,
            row.accelerator_name.to_ascii_lowercase(),
        );
        put(
            l::INSTANCE_ACCELERATOR_MANUFACTURER_LABEL,
            "aws".to_string(),
        );
        put(
            l::INSTANCE_ACCELERATOR_COUNT_LABEL,
            row.accelerator_count.to_string(),
        );
    }
    if let Some(gb) = row
        .instance_storage_gb
        .filter(|_| matches!(row.instance_storage_type.as_str(), "ssd" | "nvme"))
    {
        put(l::INSTANCE_LOCAL_NVME_LABEL, gb.to_string());
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_has_its_own_zones_and_says_when_its_prices_are_us_east_1s() {
        let east = Catalog::embedded().expect("us-east-1");
        assert_eq!(east.region(), "us-east-1");
        assert!(!east.prices_approximate());
        let m5 = east.get("m5.large").expect("m5.large");
        assert!(m5.zones.contains("us-east-1f"), "{:?}", m5.zones);
        let ireland = Catalog::for_region("eu-west-1").expect("eu-west-1");
        assert_eq!(ireland.region(), "eu-west-1");
        assert!(ireland.prices_approximate());
        let m5 = ireland.get("m5.large").expect("m5.large in eu-west-1");
        let zones: Vec<&str> = m5.zones.iter().map(String::as_str).collect();
        assert_eq!(zones, ["eu-west-1a", "eu-west-1b", "eu-west-1c"]);
        assert_eq!(
            m5.labels.get(l::TOPOLOGY_REGION_LABEL).map(String::as_str),
            Some("eu-west-1")
        );
        assert_eq!(m5.on_demand_price, 0.096, "the us-east-1 list price");
        assert_eq!(Catalog::regions().len(), 30);
        let err = Catalog::for_region("mars-north-1").expect_err("no such region");
        assert!(err.message.contains("eu-west-1"), "{err}");
    }

    fn catalog() -> Arc<Catalog> {
        Catalog::embedded().expect("embedded data parses")
    }

    #[test]
    fn catalog_has_real_types_with_upstream_labels() {
        let c = catalog();
        assert!(c.entries().len() > 700, "{} types", c.entries().len());
        let m5 = c.get("m5.large").expect("m5.large");
        assert_eq!(m5.on_demand_price, 0.096);
        let m5_size = CapacityConfig::default().allocation(&m5.spec);
        assert_eq!(m5_size.capacity.cpu, 2000);
        assert_eq!(m5_size.capacity.pods, 29);
        assert_eq!(m5_size.capacity.memory, (8192 - 615) << 20);
        assert_eq!(m5.labels[l::INSTANCE_FAMILY_LABEL], "m5");
        assert_eq!(m5.labels[l::INSTANCE_GENERATION_LABEL], "5");
        assert_eq!(m5.labels[l::INSTANCE_CATEGORY_LABEL], "m");
        assert_eq!(
            super::super::ebs_attach_limit(m5.spec.ebs_max_attachments),
            Some(26),
            "27 attachments less the root volume"
        );
        let g4 = c.get("g4dn.xlarge").expect("g4dn.xlarge");
        let g4_size = CapacityConfig::default().allocation(&g4.spec);
        assert_eq!(g4_size.capacity.get(l::RESOURCE_NVIDIA_GPU), 1);
        assert_eq!(g4.labels[l::INSTANCE_GPU_NAME_LABEL], "t4");
        assert_eq!(
            c.get("m7g.large").map(|e| e.labels[l::ARCH_LABEL].as_str()),
            Some("arm64")
        );
        assert!(c.get("mac1.metal").is_none());
    }

    #[test]
    fn spot_is_cheaper_and_stable() {
        let p = spot_price(1.0, "m5.large", "us-east-1a");
        assert!((0.35..0.70).contains(&p));
        assert_eq!(p, spot_price(1.0, "m5.large", "us-east-1a"));
    }

    #[test]
    fn zones_and_availability_shape_offerings() {
        let c = catalog();
        let zones: BTreeSet<String> = ["us-east-1a".to_string()].into();
        let types = c.instance_types(&zones, &CapacityConfig::default(), |t, _, ct| {
            t == "m5.large" && ct == "spot"
        });
        let m5 = types
            .iter()
            .find(|t| t.name == "m5.large")
            .expect("offered in 1a");
        assert!(m5.offerings.iter().all(|o| o.zone == "us-east-1a"));
        let spot = m5
            .offerings
            .iter()
            .find(|o| o.capacity_type == "spot")
            .expect("spot offering");
        assert!(!spot.available);
        assert!(m5.allocatable.cpu < m5.capacity.cpu);
    }
}
