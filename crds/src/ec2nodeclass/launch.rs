//! Launch settings of an EC2NodeClass: kubelet configuration, block devices, network
//! interfaces, instance metadata, connection tracking and CPU options
//! (`aws:pkg/apis/v1/ec2nodeclass.go`, `kubeletconfiguration.go`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema;

/// Kubelet settings for nodes. Fields Karpenter reads are typed; any other
/// KubeletConfiguration field is kept in `other` and passed through.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = schema::preserve_unknown_fields)]
pub struct KubeletConfiguration {
    /// DNS server IPs for pods; defaults to the cluster DNS service.
    #[serde(rename = "clusterDNS", default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
    /// Most pods per node: an integer, or a CEL expression evaluated per instance type.
    /// Defaults to the ENI-based limit (or 110).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<IntOrString>,
    /// Most pods per vCPU; the lower of this and `maxPods` wins. 0 disables it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_per_core: Option<i32>,
    /// Resources reserved for OS daemons (`cpu`, `memory`, `ephemeral-storage`, `pid`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::string_map")]
    pub system_reserved: BTreeMap<String, String>,
    /// Resources reserved for Kubernetes daemons (`cpu`, `memory`, `ephemeral-storage`, `pid`);
    /// defaults depend on the instance size.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::string_map")]
    pub kube_reserved: BTreeMap<String, String>,
    /// Hard eviction thresholds by signal (e.g. `memory.available: 100Mi` or `5%`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::string_map")]
    pub eviction_hard: BTreeMap<String, String>,
    /// Soft eviction thresholds by signal; each needs a grace period.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::string_map")]
    pub eviction_soft: BTreeMap<String, String>,
    /// How long each soft eviction threshold must hold before eviction (Go durations).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::string_map")]
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    /// Longest pod termination grace period (seconds) honoured on soft eviction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    /// Disk usage percent that always triggers image garbage collection.
    #[serde(
        rename = "imageGCHighThresholdPercent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Disk usage percent image garbage collection frees down to.
    #[serde(
        rename = "imageGCLowThresholdPercent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// Whether CPU CFS quota is enforced for containers with CPU limits.
    #[serde(
        rename = "cpuCFSQuota",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_cfs_quota: Option<bool>,
    /// Any other KubeletConfiguration field, passed through unchanged.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// A block device to attach at launch.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    /// Device name, e.g. `/dev/xvda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// The EBS volume to create for this device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
    /// Whether the kubelet root directory lives on this device; at most one may be set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub root_volume: bool,
}

/// An EBS volume created at launch.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"message": "snapshotID or volumeSize must be defined", "rule": "has(self.snapshotID) || has(self.volumeSize)"},
    {"message": "snapshotID must be set when volumeInitializationRate is set", "rule": "!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')"}
]))]
pub struct BlockDevice {
    /// Whether the volume is deleted when the instance terminates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    /// Whether the volume is encrypted (cannot be set when restoring a snapshot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// Provisioned IOPS (gp3: 3,000-16,000; io1/io2: 100-64,000); only for io1, io2 and gp3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    /// KMS key (id, alias or ARN) used to encrypt the volume.
    #[serde(rename = "kmsKeyID", default, skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    /// EBS snapshot to restore the volume from.
    #[serde(
        rename = "snapshotID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    /// gp3 throughput in MiB/s, 125 to 1,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    /// Rate in MiB/s (100 to 300) at which snapshot blocks are fetched; needs `snapshotID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 300))]
    pub volume_initialization_rate: Option<i32>,
    /// Volume size in Gi, G, Ti or T (e.g. `20Gi`); either this or `snapshotID` is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::volume_size")]
    pub volume_size: Option<Quantity>,
    /// EBS volume type (`gp3`, `gp2`, `io1`, `io2`, `st1`, `sc1`, `standard`); unset leaves the
    /// choice to EC2. Karpenter's default volumes (no `blockDeviceMappings`) are gp3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<VolumeType>,
}

/// An EBS volume type.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum VolumeType {
    /// `standard`: previous-generation magnetic volumes.
    Standard,
    /// Provisioned IOPS SSD, first generation.
    Io1,
    /// Provisioned IOPS SSD.
    Io2,
    /// General purpose SSD, burstable.
    Gp2,
    /// Cold HDD.
    Sc1,
    /// Throughput-optimized HDD.
    St1,
    /// General purpose SSD with provisioned performance.
    Gp3,
}

/// How instance-store disks are used.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, JsonSchema, PartialEq, Eq, Hash)]
pub enum InstanceStorePolicy {
    /// Combine all NVMe instance-store disks into a RAID-0 array for kubelet and containerd
    /// state, so pods and images get fast ephemeral storage.
    #[serde(rename = "RAID0")]
    Raid0,
}

/// Kind of a network interface.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, JsonSchema, PartialEq, Eq, Hash)]
pub enum InterfaceType {
    /// A standard ENA interface.
    #[serde(rename = "interface")]
    Interface,
    /// An Elastic Fabric Adapter without IP networking.
    #[serde(rename = "efa-only")]
    EfaOnly,
}

/// A network interface to attach at launch.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    /// Index of the network card.
    #[schemars(range(min = 0))]
    pub network_card_index: i32,
    /// Device index of the attachment on that card.
    #[schemars(range(min = 0))]
    pub device_index: i32,
    /// `interface` or `efa-only`.
    pub interface_type: InterfaceType,
}

/// `enabled` or `disabled`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Toggle {
    /// `enabled`: the setting is on.
    Enabled,
    /// `disabled`: the setting is off.
    Disabled,
}

/// Whether instance metadata requests need a session token.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum HttpTokens {
    /// IMDSv2 only: every request needs a token.
    Required,
    /// IMDSv1 and IMDSv2.
    Optional,
}

/// Instance Metadata Service settings.
#[derive(Serialize, Deserialize, Clone, Debug, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    /// Whether the metadata endpoint is reachable at all (default `enabled`).
    #[serde(default = "enabled", skip_serializing_if = "Option::is_none")]
    pub http_endpoint: Option<Toggle>,
    /// Whether the IPv6 metadata endpoint is on (default `disabled`).
    #[serde(
        rename = "httpProtocolIPv6",
        default = "disabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub http_protocol_ipv6: Option<Toggle>,
    /// How many network hops a metadata PUT response may travel, 1 to 64 (default 1, so pods
    /// behind a bridge cannot reach it).
    #[serde(default = "hop_limit", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub http_put_response_hop_limit: Option<i64>,
    /// `required` (IMDSv2 only, the default) or `optional`.
    #[serde(default = "tokens_required", skip_serializing_if = "Option::is_none")]
    pub http_tokens: Option<HttpTokens>,
}

fn enabled() -> Option<Toggle> {
    Some(Toggle::Enabled)
}
fn disabled() -> Option<Toggle> {
    Some(Toggle::Disabled)
}
fn hop_limit() -> Option<i64> {
    Some(1)
}
fn tokens_required() -> Option<HttpTokens> {
    Some(HttpTokens::Required)
}

impl Default for MetadataOptions {
    fn default() -> Self {
        Self {
            http_endpoint: enabled(),
            http_protocol_ipv6: disabled(),
            http_put_response_hop_limit: hop_limit(),
            http_tokens: tokens_required(),
        }
    }
}

/// Idle connection-tracking timeouts, in seconds; at least one must be set. Needs Nitro.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"message": "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set", "rule": "has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)"}
]))]
pub struct ConnectionTracking {
    /// Idle timeout of established TCP connections, 60 to 432,000 seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 432000))]
    pub tcp_established_timeout: Option<i32>,
    /// Idle timeout of UDP flows with more than one request-response, 60 to 180 seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 180))]
    pub udp_stream_timeout: Option<i32>,
    /// Idle timeout of one-way or single request-response UDP flows, 30 to 60 seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 60))]
    pub udp_timeout: Option<i32>,
}

/// CPU options for instances.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CpuOptions {
    /// Nested virtualization; when enabled only instance types that support it are used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested_virtualization: Option<Toggle>,
}
