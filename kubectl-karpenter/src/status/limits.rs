//! The LIMITED-BY column of `kubectl karpenter status -o wide`: which of pods, cpu and memory
//! fills a NodeClaim's node first, and why the node holds that much, in the words of the
//! capacity model for its EC2NodeClass and instance type (`maxPods 8 (EC2NodeClass capped)`,
//! `4 vCPUs, reserved 1 (EC2NodeClass)`). Pure: the node classes and the catalog come in as
//! arguments.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crds::EC2NodeClass;
use karpenter_core::capacity::catalog::Catalog;
use karpenter_core::capacity::node_class::{Allocation, CapacityConfig, CapacityOptions};
use karpenter_core::scheduling::resources::{CPU, MEMORY, PODS};
use serde::Serialize;

use super::load::{Allocatable, Amounts, percent};

/// A resource that can fill a node, in the order ties are broken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Resource {
    /// Pod slots (the kubelet's `maxPods`).
    Pods,
    /// CPU.
    Cpu,
    /// Memory.
    Memory,
}

impl Resource {
    /// The resource's name as Kubernetes spells it: `pods`, `cpu`, `memory`.
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Pods => PODS,
            Resource::Cpu => CPU,
            Resource::Memory => MEMORY,
        }
    }
}

/// The resource closest to full on a node: `limitedBy` in JSON and YAML, LIMITED-BY in the
/// wide table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitedBy {
    /// Which resource.
    pub resource: Resource,
    /// What is used of it: pods bound to the node (a count), or the summed requests of those
    /// pods (cpu in millicores, memory in bytes).
    pub used: i64,
    /// What the node has of it, in the same unit (greater than 0).
    pub allocatable: i64,
    /// `used` as a whole percentage of `allocatable`, rounded down (above 100 when the node
    /// is overcommitted).
    pub percent: i64,
    /// Why the node has that much, from its node class and instance type, e.g.
    /// `maxPods 8 (EC2NodeClass capped)`; `null` when either is not known.
    pub explanation: Option<String>,
}

impl LimitedBy {
    /// The resource with the highest `used / allocatable` among pods (`pods` bound against
    /// allocatable pods), cpu and memory (`requests` against allocatable); ties go to pods,
    /// then cpu, then memory. A resource with nothing (or an unknown amount) allocatable is
    /// left out; `None` when the allocatable is not known at all (not launched yet) or every
    /// resource is left out. Without an explanation (see [`LimitedBy::explained`]).
    pub fn of(pods: usize, requests: Amounts, allocatable: Option<Allocatable>) -> Option<Self> {
        let allocatable = allocatable?;
        let pods = i64::try_from(pods).unwrap_or(i64::MAX);
        let candidates = [
            (Resource::Pods, pods, allocatable.pods.unwrap_or(0)),
            (Resource::Cpu, requests.cpu, allocatable.cpu),
            (Resource::Memory, requests.memory, allocatable.memory),
        ];
        let mut best: Option<(Resource, i64, i64)> = None;
        for (resource, used, total) in candidates {
            if total <= 0 {
                continue;
            }
            // used/total > best_used/best_total, without rounding.
            let fuller = best.is_none_or(|(_, best_used, best_total)| {
                i128::from(used) * i128::from(best_total)
                    > i128::from(best_used) * i128::from(total)
            });
            if fuller {
                best = Some((resource, used, total));
            }
        }
        let (resource, used, allocatable) = best?;
        Some(LimitedBy {
            resource,
            used,
            allocatable,
            percent: percent(used, allocatable).unwrap_or(0),
            explanation: None,
        })
    }

    /// Adds the explanation `allocation` (the node class's sizing of the node's instance type)
    /// gives for the resource: the pods limit's (only when its count is the node's
    /// allocatable pods: a node launched under other kubelet settings is not explained by the
    /// current ones), or the cpu or memory sizing.
    pub fn explained(mut self, allocation: Option<&Allocation>) -> Self {
        self.explanation = allocation.and_then(|a| match self.resource {
            Resource::Pods => {
                (a.pods_limit.pods() == self.allocatable).then(|| a.pods_limit.explain())
            }
            Resource::Cpu | Resource::Memory => a.sizing.get(self.resource.as_str()).cloned(),
        });
        self
    }
}

impl fmt::Display for LimitedBy {
    /// The LIMITED-BY cell: `pods 8/8`, `cpu 95%` or `memory 40%`, then `: ` and the
    /// explanation when there is one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.resource {
            Resource::Pods => write!(f, "pods {}/{}", self.used, self.allocatable)?,
            Resource::Cpu | Resource::Memory => {
                write!(f, "{} {}%", self.resource.as_str(), self.percent)?;
            }
        }
        if let Some(explanation) = &self.explanation {
            write!(f, ": {explanation}")?;
        }
        Ok(())
    }
}

/// How the node classes size the catalog's instance types, for [`LimitedBy::explained`].
#[derive(Clone, Debug, Default)]
pub struct Sizing {
    catalog: Option<Arc<Catalog>>,
    /// Capacity settings by node class name; a node class whose kubelet or volume settings
    /// do not parse is left out (its nodes are not explained).
    configs: HashMap<String, CapacityConfig>,
}

impl Sizing {
    /// Parses the settings of `node_classes` (with upstream's default `RESERVED_ENIS` and
    /// `VM_MEMORY_OVERHEAD_PERCENT`, as `why-pending` does); instance types are looked up in
    /// `catalog` (none: nothing is explained).
    pub fn new(node_classes: &[EC2NodeClass], catalog: Option<Arc<Catalog>>) -> Sizing {
        let configs = node_classes
            .iter()
            .filter_map(|nc| {
                let name = nc.metadata.name.clone()?;
                let config =
                    CapacityConfig::from_node_class(nc, CapacityOptions::default()).ok()?;
                Some((name, config))
            })
            .collect();
        Sizing { catalog, configs }
    }

    /// The allocation of `instance_type` under the node class named `node_class`; `None` when
    /// either is unknown.
    pub fn allocation(&self, node_class: &str, instance_type: &str) -> Option<Allocation> {
        let config = self.configs.get(node_class)?;
        let entry = self.catalog.as_ref()?.get(instance_type)?;
        Some(config.allocation(&entry.spec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use testutil::ec2nodeclass;

    fn allocatable(cpu: i64, memory: i64, pods: Option<i64>) -> Option<Allocatable> {
        Some(Allocatable { cpu, memory, pods })
    }

    fn requests(cpu: i64, memory: i64) -> Amounts {
        Amounts { cpu, memory }
    }

    fn sizing() -> Sizing {
        let capped = ec2nodeclass("capped")
            .merge(serde_json::json!({"spec": {"kubelet": {
                "maxPods": 8,
                "kubeReserved": {"cpu": "1"},
            }}}))
            .build();
        let broken = ec2nodeclass("broken")
            .merge(serde_json::json!({"spec": {"kubelet": {"maxPods": "lots"}}}))
            .build();
        let catalog = Catalog::embedded().expect("embedded catalog");
        Sizing::new(&[capped, broken], Some(catalog))
    }

    #[test]
    fn the_fullest_resource_limits_and_ties_prefer_pods_then_cpu() {
        let node = allocatable(2000, 8 << 30, Some(8));
        let pick = |pods, cpu, memory| {
            LimitedBy::of(pods, requests(cpu, memory), node).map(|l| (l.resource, l.percent))
        };
        assert_eq!(pick(8, 1000, 1 << 30), Some((Resource::Pods, 100)));
        assert_eq!(pick(2, 1900, 1 << 30), Some((Resource::Cpu, 95)));
        assert_eq!(pick(2, 100, 4 << 30), Some((Resource::Memory, 50)));
        // Exactly half of everything: pods; cpu and memory half, pods less: cpu.
        assert_eq!(pick(4, 1000, 4 << 30), Some((Resource::Pods, 50)));
        assert_eq!(pick(3, 1000, 4 << 30), Some((Resource::Cpu, 50)));
        // An idle node is limited by nothing in particular: the tie goes to pods.
        assert_eq!(pick(0, 0, 0), Some((Resource::Pods, 0)));
        // Fractions are compared exactly, not by their rounded percentages.
        let close = allocatable(3000, 8 << 30, Some(1000));
        let l = LimitedBy::of(333, requests(1001, 0), close).expect("limited");
        assert_eq!((l.resource, l.percent), (Resource::Cpu, 33));
        // Overcommitted memory shows above 100%.
        assert_eq!(pick(1, 100, 10 << 30), Some((Resource::Memory, 125)));
    }

    #[test]
    fn unknown_allocatable_leaves_the_resource_out() {
        // No pod count: cpu or memory decide.
        let no_pods = allocatable(4000, 8 << 30, None);
        let l = LimitedBy::of(30, requests(100, 1 << 30), no_pods).expect("limited");
        assert_eq!(
            (l.resource, l.used, l.allocatable),
            (Resource::Memory, 1 << 30, 8 << 30)
        );
        // Nothing allocatable at all, or not known: no answer.
        assert_eq!(
            LimitedBy::of(3, requests(100, 1), allocatable(0, 0, Some(0))),
            None
        );
        assert_eq!(LimitedBy::of(3, requests(100, 1), None), None);
    }

    #[test]
    fn full_by_pods_under_a_node_class_with_max_pods_8() {
        let sizing = sizing();
        let allocation = sizing.allocation("capped", "m5.large");
        let l = LimitedBy::of(
            8,
            requests(500, 1 << 30),
            allocatable(1000, 6 << 30, Some(8)),
        )
        .expect("limited")
        .explained(allocation.as_ref());
        assert_eq!(l.to_string(), "pods 8/8: maxPods 8 (EC2NodeClass capped)");
        // A node that registered 29 pods (launched before maxPods was set) is not explained
        // by the current setting.
        let l = LimitedBy::of(
            29,
            requests(500, 1 << 30),
            allocatable(1000, 6 << 30, Some(29)),
        )
        .expect("limited")
        .explained(allocation.as_ref());
        assert_eq!(l.to_string(), "pods 29/29");
    }

    #[test]
    fn limited_by_cpu_names_the_vcpus_and_what_is_reserved() {
        let sizing = sizing();
        let allocation = sizing.allocation("capped", "m5.xlarge");
        let l = LimitedBy::of(
            4,
            requests(2850, 4 << 30),
            allocatable(3000, 14 << 30, Some(8)),
        )
        .expect("limited")
        .explained(allocation.as_ref());
        assert_eq!(l.to_string(), "cpu 95%: 4 vCPUs, reserved 1 (EC2NodeClass)");
        let l = LimitedBy::of(
            1,
            requests(100, 6 << 30),
            allocatable(3000, 14 << 30, Some(8)),
        )
        .expect("limited")
        .explained(allocation.as_ref());
        // kube-reserved memory is upstream's default for the ENI-limited 58 pods (AL2023),
        // not for the 8 pods the node class allows.
        assert_eq!(
            l.to_string(),
            "memory 42%: 15155Mi after VM overhead, reserved 993Mi (default)"
        );
    }

    #[test]
    fn unknown_node_class_or_instance_type_is_not_explained() {
        let sizing = sizing();
        assert!(sizing.allocation("capped", "m5.large").is_some());
        assert!(sizing.allocation("absent", "m5.large").is_none());
        assert!(sizing.allocation("capped", "m99.huge").is_none());
        // Settings that do not parse: as if the node class were not there.
        assert!(sizing.allocation("broken", "m5.large").is_none());
        // No catalog: nothing is explained.
        assert!(Sizing::default().allocation("capped", "m5.large").is_none());
        let l = LimitedBy::of(8, requests(0, 0), allocatable(1000, 1 << 30, Some(8)))
            .expect("limited")
            .explained(None);
        assert_eq!(l.to_string(), "pods 8/8");
        assert_eq!(l.explanation, None);
    }
}
