//! `--instance-types synthetic-400`: the instance types upstream's fake cloud provider generates
//! for its scheduling benchmark (`pkg/cloudprovider/fake/instancetype.go`, `InstanceTypes(400)`),
//! so our solve times and fleets compare with upstream's published figures.
//!
//! Type `fake-it-i` (i = 0..n) has i+1 vCPU, 2(i+1) GiB and 10(i+1) pods; amd64; linux, windows
//! and darwin; spot in test-zone-1 and -2, on-demand in test-zone-1, -2 and -3, every offering at
//! `0.1 × vCPU + 0.1 × bytes / 1e9` USD/hour; kube-reserved 100m CPU and 10 MiB; labels
//! `integer=<vCPU>`, `size=large` and `special=optional` above 4 vCPU and 8 GiB, else
//! `size=small`.

use std::collections::BTreeMap;
use std::sync::Arc;

use crds::labels::{ARCH_LABEL, INSTANCE_TYPE_LABEL, OS_LABEL};

use karpenter_core::capacity::InstanceType;
use karpenter_core::capacity::Offering;
use karpenter_core::scheduling::requirements::Requirement;
use karpenter_core::scheduling::resources::Resources;

/// Zones of the synthetic offerings.
pub const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];

/// Upstream's `PriceFromResources`: 0.1 per vCPU plus 0.1 per 1e9 bytes of memory, USD/hour.
pub fn price(vcpus: i64, memory_bytes: i64) -> f64 {
    0.1 * vcpus as f64 + 0.1 * memory_bytes as f64 / 1e9
}

/// `n` synthetic instance types, smallest first.
pub fn instance_types(n: usize) -> Vec<Arc<InstanceType>> {
    (0..n)
        .map(|i| {
            let vcpus = i as i64 + 1;
            let memory = vcpus * 2 * (1 << 30);
            let name = format!("fake-it-{i}");
            let p = price(vcpus, memory);
            let mut offerings = Vec::new();
            for zone in &ZONES[..2] {
                offerings.push(Offering {
                    zone: zone.to_string(),
                    capacity_type: "spot".into(),
                    price: p,
                    available: true,
                    reservation_id: None,
                    reservation_capacity: 0,
                });
            }
            for zone in ZONES {
                offerings.push(Offering {
                    zone: zone.to_string(),
                    capacity_type: "on-demand".into(),
                    price: p,
                    available: true,
                    reservation_id: None,
                    reservation_capacity: 0,
                });
            }
            let large = vcpus > 4 && memory > 8 * (1 << 30);
            let mut labels: BTreeMap<String, String> = [
                (INSTANCE_TYPE_LABEL, name.clone()),
                (ARCH_LABEL, "amd64".to_string()),
                ("integer", vcpus.to_string()),
                ("size", if large { "large" } else { "small" }.to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            if large {
                labels.insert("special".into(), "optional".into());
            }
            let capacity = Resources {
                cpu: vcpus * 1000,
                memory,
                pods: vcpus * 10,
                ..Resources::default()
            };
            let overhead = Resources {
                cpu: 100,
                memory: 10 << 20,
                ..Resources::default()
            };
            let mut it =
                InstanceType::new(name, labels, &["special"], capacity, overhead, offerings);
            // Several operating systems: the label set above carries none, the requirement all three.
            it.requirements
                .add(Requirement::is_in(OS_LABEL, ["darwin", "linux", "windows"]));
            Arc::new(it)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_upstreams_fake_catalog() {
        let types = instance_types(400);
        assert_eq!(types.len(), 400);
        let first = &types[0];
        assert_eq!(first.name, "fake-it-0");
        assert_eq!((first.capacity.cpu, first.capacity.pods), (1000, 10));
        assert_eq!(first.allocatable.cpu, 900);
        let last = &types[399];
        assert_eq!(last.capacity.memory, 800 << 30);
        assert!((last.offerings[0].price - 400.0 * (0.1 + 0.2 * 1.073_741_824)).abs() < 1e-9);
        assert_eq!(last.offerings.len(), 5);
        assert_eq!(last.labels["size"], "large");
        assert_eq!(types[3].labels["size"], "small");
        assert!(
            types[3]
                .requirements
                .get("special")
                .is_some_and(|r| r.is_empty()),
            "special DoesNotExist on small types"
        );
    }
}
