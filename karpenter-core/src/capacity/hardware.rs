//! One instance type's hardware as EC2 describes it (DescribeInstanceTypes, and the vendored
//! CSV taken from it): what the capacity model in [`super::node_class`] sizes and the catalog in
//! [`super::catalog`] lists. Kept apart from both so neither imports the other back.

use serde::Deserialize;

/// One instance type's hardware, as the vendored CSV (and DescribeInstanceTypes) describe it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct TypeSpec {
    /// Name, e.g. `m5.large`.
    pub instance_type: String,
    /// Default vCPUs.
    pub vcpus: i64,
    /// Memory, MiB.
    pub memory_mib: i64,
    /// Space-separated architectures (`x86_64`, `arm64`, `i386`, ...).
    pub architectures: String,
    /// `nitro`, `xen` or empty.
    pub hypervisor: String,
    /// Total GPUs.
    pub gpu_count: i64,
    /// GPU manufacturer, e.g. `NVIDIA`.
    pub gpu_manufacturer: String,
    /// GPU name, e.g. `T4`.
    pub gpu_name: String,
    /// Total GPU memory, MiB.
    pub gpu_memory_mib: Option<i64>,
    /// Total Neuron accelerators.
    pub accelerator_count: i64,
    /// Accelerator name, e.g. `Inferentia2`.
    pub accelerator_name: String,
    /// Local instance storage, GB.
    pub instance_storage_gb: Option<i64>,
    /// `ssd`, `nvme` or `hdd`.
    pub instance_storage_type: String,
    /// Maximum network interfaces.
    pub max_network_interfaces: i64,
    /// IPv4 addresses per interface.
    pub ipv4_per_interface: i64,
    /// Baseline network bandwidth, Gbit/s.
    pub baseline_bandwidth_gbps: Option<f64>,
    /// Space-separated usage classes (`on-demand spot`).
    pub usage_classes: String,
    /// Neuron devices (`aws.amazon.com/neuron`; EC2's `NeuronInfo`).
    #[serde(default)]
    pub neuron_devices: i64,
    /// Neuron cores: devices x cores per device (`aws.amazon.com/neuroncore`).
    #[serde(default)]
    pub neuron_cores: i64,
    /// Most EFA interfaces (`vpc.amazonaws.com/efa`; EC2's `EfaInfo`).
    #[serde(default)]
    pub efa_max_interfaces: i64,
    /// EBS volumes the type can attach, root volume included (`EbsInfo`); `None` if unknown.
    #[serde(default)]
    pub ebs_max_attachments: Option<i64>,
}
