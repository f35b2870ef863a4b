//! What an EC2NodeClass decides about a node's size: the kubelet's `maxPods`, `podsPerCore`,
//! `kubeReserved`, `systemReserved` and eviction thresholds, the root or data volume that
//! becomes ephemeral storage, `instanceStorePolicy`, EFA-only interfaces and the AMI family's
//! defaults. [`CapacityConfig::allocation`] turns one instance type's hardware into its
//! capacity and overhead as upstream's AWS provider computes them
//! (`aws:pkg/providers/instancetype/types.go`, `pkg/providers/amifamily/*.go`); the simulated
//! kubelet registers the same numbers, so a plan is what the node reports.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use crds::conditions::reason;
use crds::ec2nodeclass::{
    AmiFamily, BlockDeviceMapping, EC2NodeClass, InstanceStorePolicy, InterfaceType,
    KubeletConfiguration, NetworkInterface,
};
use crds::labels::{
    ARCH_AMD64, ARCH_LABEL, OS_LABEL, OS_WINDOWS, RESOURCE_AMD_GPU, RESOURCE_AWS_NEURON,
    RESOURCE_AWS_NEURON_CORE, RESOURCE_EFA, RESOURCE_HABANA_GAUDI, RESOURCE_NVIDIA_GPU,
    WINDOWS_BUILD_LABEL,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::capacity::hardware::TypeSpec;
use crate::capacity::{eni_limited_pods, kube_reserved_cpu_milli, kube_reserved_memory_mib};
use crate::scheduling::resources::{
    CPU, EPHEMERAL_STORAGE, MEMORY, PODS, QuantityError, Resources, format_quantity, parse_milli,
    parse_units,
};

/// Kubelet eviction signal for available memory.
pub const MEMORY_AVAILABLE: &str = "memory.available";
/// Kubelet eviction signal for available node filesystem space.
pub const NODEFS_AVAILABLE: &str = "nodefs.available";
/// Size of upstream's default EBS volume (`amifamily.DefaultEBS`): 20 GiB, in bytes.
pub const DEFAULT_VOLUME_BYTES: i64 = 20 << 30;
/// Pods per node when neither `maxPods` nor the ENI limit applies (Windows), as upstream.
pub const DEFAULT_MAX_PODS: i64 = 110;

/// Operator settings that shape every instance type (upstream's `RESERVED_ENIS` and
/// `VM_MEMORY_OVERHEAD_PERCENT`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CapacityOptions {
    /// ENIs kept out of the VPC CNI's pod addressing (`RESERVED_ENIS`, default 0).
    pub reserved_enis: i64,
    /// Fraction of memory the hypervisor keeps (`VM_MEMORY_OVERHEAD_PERCENT`, default 0.075).
    pub vm_memory_overhead_percent: f64,
}

impl Default for CapacityOptions {
    fn default() -> Self {
        CapacityOptions {
            reserved_enis: 0,
            vm_memory_overhead_percent: 0.075,
        }
    }
}

/// A kubelet eviction threshold: an absolute amount (bytes) or a percentage of capacity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Threshold {
    /// An amount in bytes, e.g. `500Mi`.
    Bytes(i64),
    /// A percentage of the signal's capacity, e.g. `5%`; 100% disables the threshold (the
    /// kubelet's rule).
    Percent(f64),
}

impl Threshold {
    /// The threshold in bytes for a capacity in bytes (percentages rounded up, as upstream).
    pub fn bytes(self, capacity: i64) -> i64 {
        match self {
            Threshold::Bytes(b) => b,
            Threshold::Percent(p) if p >= 100.0 => 0,
            Threshold::Percent(p) => (capacity as f64 / 100.0 * p).ceil() as i64,
        }
    }
}

/// A block device mapping as far as ephemeral storage is concerned.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VolumeSize {
    /// Device name, e.g. `/dev/xvda`.
    pub device_name: String,
    /// Whether `rootVolume: true` marks it as the kubelet's volume.
    pub root_volume: bool,
    /// `ebs.volumeSize` in bytes, when given.
    pub bytes: Option<i64>,
}

/// Why a node holds the number of pods it does, for `why-pending` and `status -o wide`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodsLimit {
    /// `kubelet.maxPods` of the node class.
    MaxPods(i64),
    /// The VPC CNI's ENI limit: `(ENIs - reserved) x (IPv4 per ENI - 1) + 2`.
    EniLimited(i64),
    /// The AMI family has no ENI limit (Windows): 110.
    Default(i64),
    /// `kubelet.podsPerCore` x vCPUs, lower than the other limit.
    PodsPerCore(i64),
}

impl PodsLimit {
    /// The pod count.
    pub fn pods(self) -> i64 {
        match self {
            PodsLimit::MaxPods(n)
            | PodsLimit::EniLimited(n)
            | PodsLimit::Default(n)
            | PodsLimit::PodsPerCore(n) => n,
        }
    }

    /// How the limit is explained to a user, e.g. `maxPods 8 (EC2NodeClass capped)`.
    pub fn explain(self) -> String {
        match self {
            PodsLimit::MaxPods(n) => format!("maxPods {n} (EC2NodeClass capped)"),
            PodsLimit::EniLimited(n) => format!("maxPods {n} (ENI-limited)"),
            PodsLimit::Default(n) => format!("maxPods {n} (AMI family default)"),
            PodsLimit::PodsPerCore(n) => format!("maxPods {n} (podsPerCore x vCPUs)"),
        }
    }
}

/// One instance type's size under a node class: capacity, the overhead the kubelet keeps
/// (kube-reserved + system-reserved + eviction thresholds) and why pods is what it is.
/// Allocatable is `capacity - overhead`.
#[derive(Clone, Debug, PartialEq)]
pub struct Allocation {
    /// cpu (millicores), memory (bytes, VM overhead taken off), ephemeral-storage (bytes),
    /// pods, and the accelerators and EFA interfaces the type has.
    pub capacity: Resources,
    /// kube-reserved + system-reserved + eviction thresholds, in the same units.
    pub overhead: Resources,
    /// Where the pod count comes from.
    pub pods_limit: PodsLimit,
    /// Why pods, cpu, memory and ephemeral-storage are what they are, in the node class's
    /// numbers, e.g. `cpu` → `4 vCPUs, reserved 1 (EC2NodeClass)`.
    pub sizing: BTreeMap<String, String>,
}

/// A node class setting the capacity model cannot read.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A quantity in `kubeReserved`, `systemReserved`, an eviction threshold or a volume size.
    #[error("spec.kubelet.{field}[{key:?}]: {source}")]
    Quantity {
        /// `kubeReserved`, `systemReserved`, `evictionHard`, `evictionSoft` or
        /// `blockDeviceMappings`.
        field: &'static str,
        /// The resource, signal or device name.
        key: String,
        /// The parse error.
        source: QuantityError,
    },
    /// `maxPods` given as a string that is not an integer (a CEL expression, which this
    /// version does not evaluate), or a negative count.
    #[error(
        "spec.kubelet.maxPods {0:?} is not a non-negative integer (CEL expressions are not supported yet)"
    )]
    MaxPods(String),
    /// A percentage eviction threshold that does not parse or is outside 0-100.
    #[error("spec.kubelet.{field}[{key:?}]: {value:?} is not a percentage between 0% and 100%")]
    Percent {
        /// `evictionHard` or `evictionSoft`.
        field: &'static str,
        /// The signal.
        key: String,
        /// The value as written.
        value: String,
    },
}

impl ConfigError {
    /// The reason of the node class's `ValidationSucceeded=False` condition: a CEL `maxPods`
    /// is `UnsupportedKubeletConfiguration`, anything else `InvalidKubeletConfiguration`.
    pub fn condition_reason(&self) -> &'static str {
        match self {
            ConfigError::MaxPods(_) => reason::UNSUPPORTED_KUBELET_CONFIGURATION,
            _ => reason::INVALID_KUBELET_CONFIGURATION,
        }
    }
}

/// The node class settings that decide an instance type's capacity and overhead, parsed once
/// per node class. Amounts are in the scheduler's units (cpu millicores, bytes).
#[derive(Clone, Debug, PartialEq)]
pub struct CapacityConfig {
    /// The effective AMI family (its feature flags and default block devices).
    pub family: AmiFamily,
    /// `kubelet.maxPods`.
    pub max_pods: Option<i64>,
    /// `kubelet.podsPerCore` (0 or absent: no cap).
    pub pods_per_core: Option<i64>,
    /// `kubelet.kubeReserved`, overriding upstream's defaults per resource.
    pub kube_reserved: BTreeMap<String, i64>,
    /// `kubelet.systemReserved` (no defaults).
    pub system_reserved: BTreeMap<String, i64>,
    /// `kubelet.evictionHard`, by signal.
    pub eviction_hard: BTreeMap<String, Threshold>,
    /// `kubelet.evictionSoft`, by signal: validated, but it does not reduce allocatable.
    pub eviction_soft: BTreeMap<String, Threshold>,
    /// `blockDeviceMappings`, sizes only.
    pub volumes: Vec<VolumeSize>,
    /// `instanceStorePolicy: RAID0`.
    pub raid0: bool,
    /// `networkInterfaces` given at all (then EFA capacity counts its EFA-only interfaces).
    pub network_interfaces_set: bool,
    /// EFA-only interfaces in `networkInterfaces` (all cards).
    pub efa_only_interfaces: i64,
    /// EFA-only interfaces on network card 0 (they take ENI slots from the VPC CNI).
    pub efa_only_on_card0: i64,
    /// Operator settings.
    pub options: CapacityOptions,
}

impl Default for CapacityConfig {
    /// An AL2023 node class with no kubelet settings and default volumes.
    fn default() -> Self {
        CapacityConfig {
            family: AmiFamily::Al2023,
            max_pods: None,
            pods_per_core: None,
            kube_reserved: BTreeMap::new(),
            system_reserved: BTreeMap::new(),
            eviction_hard: BTreeMap::new(),
            eviction_soft: BTreeMap::new(),
            volumes: Vec::new(),
            raid0: false,
            network_interfaces_set: false,
            efa_only_interfaces: 0,
            efa_only_on_card0: 0,
            options: CapacityOptions::default(),
        }
    }
}

impl Hash for CapacityConfig {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.family.hash(h);
        self.max_pods.hash(h);
        self.pods_per_core.hash(h);
        self.kube_reserved.hash(h);
        self.system_reserved.hash(h);
        for map in [&self.eviction_hard, &self.eviction_soft] {
            for (k, t) in map {
                k.hash(h);
                match t {
                    Threshold::Bytes(b) => (0u8, *b).hash(h),
                    Threshold::Percent(p) => (1u8, p.to_bits()).hash(h),
                }
            }
            0xffu8.hash(h);
        }
        self.volumes.hash(h);
        self.raid0.hash(h);
        self.network_interfaces_set.hash(h);
        self.efa_only_interfaces.hash(h);
        self.efa_only_on_card0.hash(h);
        self.options.reserved_enis.hash(h);
        self.options.vm_memory_overhead_percent.to_bits().hash(h);
    }
}

impl Eq for CapacityConfig {}

impl CapacityConfig {
    /// The capacity settings of a node class.
    ///
    /// Errors: a malformed quantity in `kubeReserved`, `systemReserved`, the eviction
    /// thresholds or a volume size; `maxPods` that is not a non-negative integer.
    pub fn from_node_class(
        nc: &EC2NodeClass,
        options: CapacityOptions,
    ) -> Result<CapacityConfig, ConfigError> {
        let spec = &nc.spec;
        CapacityConfig::from_kubelet(
            nc.ami_family(),
            spec.kubelet.as_ref(),
            &spec.block_device_mappings,
            spec.instance_store_policy,
            &spec.network_interfaces,
            options,
        )
    }

    /// The capacity settings from their parts: what a kubelet knows of itself (its family's
    /// defaults and its configuration, e.g. read back from user data) and the node's volumes
    /// and network interfaces.
    ///
    /// Errors: as [`CapacityConfig::from_node_class`].
    pub fn from_kubelet(
        family: AmiFamily,
        kubelet: Option<&KubeletConfiguration>,
        block_device_mappings: &[BlockDeviceMapping],
        instance_store_policy: Option<InstanceStorePolicy>,
        network_interfaces: &[NetworkInterface],
        options: CapacityOptions,
    ) -> Result<CapacityConfig, ConfigError> {
        let empty = KubeletConfiguration::default();
        let kubelet = kubelet.unwrap_or(&empty);
        let max_pods = match &kubelet.max_pods {
            None => None,
            Some(IntOrString::Int(n)) if *n >= 0 => Some(i64::from(*n)),
            Some(IntOrString::Int(n)) => return Err(ConfigError::MaxPods(n.to_string())),
            Some(IntOrString::String(s)) => match s.trim().parse::<i64>() {
                Ok(n) if n >= 0 => Some(n),
                _ => return Err(ConfigError::MaxPods(s.clone())),
            },
        };
        let volumes = block_device_mappings
            .iter()
            .map(|m| {
                let device_name = m.device_name.clone().unwrap_or_default();
                let bytes = match m.ebs.as_ref().and_then(|e| e.volume_size.as_ref()) {
                    Some(q) => Some(parse_units(&q.0).map_err(|source| ConfigError::Quantity {
                        field: "blockDeviceMappings",
                        key: device_name.clone(),
                        source,
                    })?),
                    None => None,
                };
                Ok(VolumeSize {
                    device_name,
                    root_volume: m.root_volume,
                    bytes,
                })
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        let efa = |card0: bool| {
            network_interfaces
                .iter()
                .filter(|n| n.interface_type == InterfaceType::EfaOnly)
                .filter(|n| !card0 || n.network_card_index == 0)
                .count() as i64
        };
        Ok(CapacityConfig {
            family,
            max_pods,
            pods_per_core: kubelet.pods_per_core.map(i64::from),
            kube_reserved: reserved("kubeReserved", &kubelet.kube_reserved)?,
            system_reserved: reserved("systemReserved", &kubelet.system_reserved)?,
            eviction_hard: thresholds("evictionHard", &kubelet.eviction_hard)?,
            eviction_soft: thresholds("evictionSoft", &kubelet.eviction_soft)?,
            volumes,
            raid0: instance_store_policy == Some(InstanceStorePolicy::Raid0),
            network_interfaces_set: !network_interfaces.is_empty(),
            efa_only_interfaces: efa(false),
            efa_only_on_card0: efa(true),
            options,
        })
    }

    /// Whether the family sizes pods by the VPC CNI's ENI limit (all but Windows).
    fn eni_limited_density(&self) -> bool {
        !matches!(
            self.family,
            AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025
        )
    }

    /// Whether kube-reserved memory follows the ENI-limited pod count rather than the
    /// configured one (AL2, AL2023 and Custom; not Bottlerocket or Windows).
    fn eni_limited_memory_overhead(&self) -> bool {
        matches!(
            self.family,
            AmiFamily::Al2 | AmiFamily::Al2023 | AmiFamily::Custom
        )
    }

    /// Whether the family honours `podsPerCore` (Bottlerocket does not).
    fn pods_per_core_enabled(&self) -> bool {
        self.family != AmiFamily::Bottlerocket
    }

    /// The device whose volume holds the kubelet's data for this family, and its default size
    /// in bytes: `/dev/xvda` 20 GiB (AL2, AL2023), `/dev/xvdb` 20 GiB (Bottlerocket's data
    /// volume), `/dev/sda1` 50 GiB (Windows); none for Custom.
    pub fn ephemeral_device(&self) -> Option<(&'static str, i64)> {
        match self.family {
            AmiFamily::Al2 | AmiFamily::Al2023 => Some(("/dev/xvda", DEFAULT_VOLUME_BYTES)),
            AmiFamily::Bottlerocket => Some(("/dev/xvdb", DEFAULT_VOLUME_BYTES)),
            AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => {
                Some(("/dev/sda1", 50 << 30))
            }
            AmiFamily::Custom => None,
        }
    }

    /// The labels a type's nodes carry under this family, from the type's `labels` (which
    /// say `kubernetes.io/os=linux`): a Windows family's nodes report `kubernetes.io/os=windows`
    /// and the family's `node.kubernetes.io/windows-build`, as upstream's instance types do
    /// under a Windows family (`aws:pkg/providers/instancetype/types.go` `getOS`). `None` when
    /// the family cannot run on the type: Windows on a non-amd64 type (EKS publishes no arm64
    /// Windows image).
    pub fn node_labels(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> Option<BTreeMap<String, String>> {
        let mut labels = labels.clone();
        if let Some(build) = self.family.windows_build() {
            if labels.get(ARCH_LABEL).map(String::as_str) != Some(ARCH_AMD64) {
                return None;
            }
            labels.insert(OS_LABEL.into(), OS_WINDOWS.into());
            labels.insert(WINDOWS_BUILD_LABEL.into(), build.into());
        }
        Some(labels)
    }

    /// Ephemeral storage in bytes: the instance store under RAID0 (decimal GB), else the
    /// `rootVolume` mapping's size, else (Custom) the last mapping's, else the mapping of the
    /// family's ephemeral device, else the family's default, else 20 GiB.
    pub fn ephemeral_storage(&self, spec: &TypeSpec) -> i64 {
        if self.raid0
            && let Some(gb) = spec.instance_storage_gb
        {
            return gb * 1_000_000_000;
        }
        if !self.volumes.is_empty() {
            if let Some(bytes) = self
                .volumes
                .iter()
                .find(|v| v.root_volume)
                .and_then(|v| v.bytes)
            {
                return bytes;
            }
            match self.ephemeral_device() {
                None => {
                    return self
                        .volumes
                        .last()
                        .and_then(|v| v.bytes)
                        .unwrap_or(DEFAULT_VOLUME_BYTES);
                }
                Some((device, _)) => {
                    if let Some(bytes) = self
                        .volumes
                        .iter()
                        .find(|v| v.device_name == device)
                        .and_then(|v| v.bytes)
                    {
                        return bytes;
                    }
                }
            }
        }
        self.ephemeral_device()
            .map_or(DEFAULT_VOLUME_BYTES, |(_, bytes)| bytes)
    }

    /// ENI-limited pods with `reserved` ENIs held back and card 0's EFA-only interfaces taken
    /// off: 0 when no ENI is left.
    fn eni_pods(&self, spec: &TypeSpec, reserved: i64) -> i64 {
        let usable = (spec.max_network_interfaces - reserved - self.efa_only_on_card0).max(0);
        if usable == 0 {
            0
        } else {
            eni_limited_pods(usable, spec.ipv4_per_interface)
        }
    }

    /// Pods the kubelet admits and why: `maxPods`, else the ENI limit (with `RESERVED_ENIS`),
    /// else 110; capped by `podsPerCore` x vCPUs where the family honours it.
    pub fn pods(&self, spec: &TypeSpec) -> PodsLimit {
        let base = match self.max_pods {
            Some(n) => PodsLimit::MaxPods(n),
            None if self.eni_limited_density() => {
                PodsLimit::EniLimited(self.eni_pods(spec, self.options.reserved_enis))
            }
            None => PodsLimit::Default(DEFAULT_MAX_PODS),
        };
        match self.pods_per_core {
            Some(per_core) if per_core > 0 && self.pods_per_core_enabled() => {
                let cap = per_core * spec.vcpus;
                if cap < base.pods() {
                    PodsLimit::PodsPerCore(cap)
                } else {
                    base
                }
            }
            _ => base,
        }
    }

    /// Memory capacity in bytes: the advertised MiB less 64 MiB on Graviton (reserved for
    /// CMA), less `VM_MEMORY_OVERHEAD_PERCENT` of that, rounded up to whole MiB.
    pub fn memory(&self, spec: &TypeSpec) -> i64 {
        let mut mib = spec.memory_mib;
        if spec.architectures.split(' ').next() == Some("arm64") {
            mib -= 64;
        }
        let overhead = (mib as f64 * self.options.vm_memory_overhead_percent).ceil() as i64;
        (mib - overhead) << 20
    }

    /// Capacity and overhead of one instance type under this node class.
    pub fn allocation(&self, spec: &TypeSpec) -> Allocation {
        let pods_limit = self.pods(spec);
        let pods = pods_limit.pods();
        let memory = self.memory(spec);
        let ephemeral = self.ephemeral_storage(spec);
        let mut capacity = Resources {
            cpu: spec.vcpus * 1000,
            memory,
            pods,
            ephemeral,
            ..Resources::default()
        };
        let gpus = |maker: &str| {
            if spec.gpu_manufacturer.eq_ignore_ascii_case(maker) {
                spec.gpu_count
            } else {
                0
            }
        };
        capacity.set(RESOURCE_NVIDIA_GPU, gpus("NVIDIA"));
        capacity.set(RESOURCE_AMD_GPU, gpus("AMD"));
        capacity.set(RESOURCE_HABANA_GAUDI, gpus("Habana"));
        capacity.set(RESOURCE_AWS_NEURON, spec.neuron_devices);
        capacity.set(RESOURCE_AWS_NEURON_CORE, spec.neuron_cores);
        capacity.set(
            RESOURCE_EFA,
            if self.network_interfaces_set {
                self.efa_only_interfaces
            } else {
                spec.efa_max_interfaces
            },
        );

        // kube-reserved: upstream's defaults, each replaced by the node class's value.
        let memory_pods = if self.eni_limited_memory_overhead() {
            self.eni_pods(spec, 0)
        } else {
            pods
        };
        let mut overhead = Resources {
            cpu: kube_reserved_cpu_milli(spec.vcpus),
            memory: kube_reserved_memory_mib(memory_pods) << 20,
            ephemeral: 1 << 30,
            ..Resources::default()
        };
        for (name, value) in &self.kube_reserved {
            overhead.set(name, *value);
        }
        for (name, value) in &self.system_reserved {
            overhead.set(name, overhead.get(name) + value);
        }
        // Hard eviction thresholds: 100Mi of memory and 10% of nodefs unless the node class
        // sets the signal. Soft thresholds do not reduce allocatable (the kubelet's rule, and
        // upstream's since it stopped counting them).
        let hard = |signal: &str, capacity: i64, default: Threshold| {
            self.eviction_hard
                .get(signal)
                .copied()
                .unwrap_or(default)
                .bytes(capacity)
        };
        overhead.memory += hard(MEMORY_AVAILABLE, memory, Threshold::Bytes(100 << 20));
        overhead.ephemeral += hard(NODEFS_AVAILABLE, ephemeral, Threshold::Percent(10.0));
        let sizing = self.sizing(spec, pods_limit, &capacity, &overhead);
        Allocation {
            capacity,
            overhead,
            pods_limit,
            sizing,
        }
    }
}

impl CapacityConfig {
    /// The words `why-pending` and `status -o wide` use for each resource's allocatable.
    fn sizing(
        &self,
        spec: &TypeSpec,
        pods: PodsLimit,
        capacity: &Resources,
        overhead: &Resources,
    ) -> BTreeMap<String, String> {
        let reserved = |name: &str| {
            let by_class =
                self.kube_reserved.contains_key(name) || self.system_reserved.contains_key(name);
            format!(
                "reserved {} ({})",
                format_quantity(name, overhead.get(name)),
                if by_class { "EC2NodeClass" } else { "default" }
            )
        };
        let storage = if self.raid0 && spec.instance_storage_gb.is_some() {
            "RAID0 instance store".to_string()
        } else if self.volumes.iter().any(|v| v.bytes.is_some()) {
            "blockDeviceMappings (EC2NodeClass)".to_string()
        } else {
            format!("the {} default volume", self.family.as_str())
        };
        [
            (PODS, pods.explain()),
            (CPU, format!("{} vCPUs, {}", spec.vcpus, reserved(CPU))),
            (
                MEMORY,
                format!(
                    "{} after VM overhead, {}",
                    format_quantity(MEMORY, capacity.memory),
                    reserved(MEMORY)
                ),
            ),
            (
                EPHEMERAL_STORAGE,
                format!(
                    "{} from {storage}, {}",
                    format_quantity(EPHEMERAL_STORAGE, capacity.ephemeral),
                    reserved(EPHEMERAL_STORAGE)
                ),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// A reserved-resources map in the scheduler's units; `pid` (not a schedulable resource) is
/// left out.
fn reserved(
    field: &'static str,
    map: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, i64>, ConfigError> {
    map.iter()
        .filter(|(k, _)| k.as_str() != "pid")
        .map(|(k, v)| {
            let quantity = |source| ConfigError::Quantity {
                field,
                key: k.clone(),
                source,
            };
            let value = if k == CPU {
                i64::try_from(parse_milli(v).map_err(quantity)?)
                    .map_err(|_| quantity(QuantityError(v.clone())))?
            } else {
                parse_units(v).map_err(quantity)?
            };
            Ok((k.clone(), value))
        })
        .collect()
}

/// Eviction thresholds by signal; signals other than `memory.available` and `nodefs.available`
/// are kept (they do not change allocatable).
fn thresholds(
    field: &'static str,
    map: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, Threshold>, ConfigError> {
    map.iter()
        .map(|(k, v)| {
            let t = match v.trim().strip_suffix('%') {
                Some(p) => match p.trim().parse::<f64>() {
                    Ok(p) if (0.0..=100.0).contains(&p) => Threshold::Percent(p),
                    _ => {
                        return Err(ConfigError::Percent {
                            field,
                            key: k.clone(),
                            value: v.clone(),
                        });
                    }
                },
                None => {
                    Threshold::Bytes(parse_units(v).map_err(|source| ConfigError::Quantity {
                        field,
                        key: k.clone(),
                        source,
                    })?)
                }
            };
            Ok((k.clone(), t))
        })
        .collect()
}
