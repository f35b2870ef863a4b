//! The narrow EC2 (and SSM, IAM, SQS) surface Karpenter calls (upstream's `sdk.EC2API` and
//! `sdk.SQSAPI`), in this project's own types: the [`Ec2`] trait, its implementation over
//! aws-sdk-ec2, aws-sdk-ssm and aws-sdk-iam ([`SdkEc2`]), the interruption queue's SQS calls
//! ([`sqs::SdkSqs`]), the on-demand price lookups ([`pricing::SdkPricing`]), the SDK
//! configuration loader, and AWS providerIDs. The controller's AWS
//! cloud provider and the plugin's orphan listing both stand on it, so the AWS SDK is built in
//! one crate. Everything above the trait is testable with a wrapper that injects faults
//! ([`fault::FaultyEc2`]) and runs against any EC2 API endpoint (AWS, or moto's EC2 server,
//! started by [`moto`], in the tests).
//!
//! Paginated calls return every page. Throttling (`RequestLimitExceeded`, ...) is retried with
//! exponential backoff by the SDK's standard retry mode (see [`SdkEc2::new`]); what still fails
//! comes back as an [`Ec2Error`].

pub mod fault;
pub mod moto;
pub mod pricing;
pub mod sqs;

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types as t;
use jiff::Timestamp;

/// An EC2 or SSM API error: its code (e.g. `InsufficientInstanceCapacity`,
/// `InvalidInstanceID.NotFound`, `RequestLimitExceeded`) and message.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Ec2Error {
    /// AWS error code; `Transport` when the request never got an answer.
    pub code: String,
    /// AWS's message; without one, the SDK's error context cut to 500 characters.
    pub message: String,
}

impl Ec2Error {
    fn from_sdk<E, R>(e: aws_sdk_ec2::error::SdkError<E, R>) -> Ec2Error
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        let (code, message) = sdk_error_parts(&e);
        Ec2Error { code, message }
    }

    /// Whether the error says the requested resource does not exist.
    pub fn is_not_found(&self) -> bool {
        self.code.ends_with(".NotFound")
            || self.code.ends_with("NotFoundException")
            || self.code == "ParameterNotFound"
    }
}

/// The code and message of any AWS SDK error (every service's `SdkError` is the same type):
/// `Transport` when the request never got an answer; without a message, the SDK's error
/// context cut to 500 characters.
pub(crate) fn sdk_error_parts<E, R>(e: &aws_sdk_ec2::error::SdkError<E, R>) -> (String, String)
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = e.code().unwrap_or("Transport").to_string();
    let message = e.message().map(str::to_string).unwrap_or_else(|| {
        aws_sdk_ec2::error::DisplayErrorContext(e)
            .to_string()
            .chars()
            .take(500)
            .collect()
    });
    (code, message)
}

/// `capacity-block`: a Capacity Block's `ReservationType`, the `MarketType` its launches use and
/// the fleet's `DefaultTargetCapacityType` for them.
pub const CAPACITY_BLOCK: &str = "capacity-block";

/// Whether a fleet error code means the offering has no capacity now (upstream's
/// `unfulfillableCapacityErrorCodes`, `aws:pkg/errors/errors.go`; `ReservationCapacityExceeded`
/// is a capacity reservation with no room left): the offering is marked unavailable for a while.
pub fn is_capacity_error(code: &str) -> bool {
    matches!(
        code,
        "InsufficientInstanceCapacity"
            | "InsufficientCapacityOnHost"
            | "InsufficientFreeAddressesInSubnet"
            | "MaxSpotInstanceCountExceeded"
            | "SpotMaxPriceTooLow"
            | "UnfulfillableCapacity"
            | "ReservationCapacityExceeded"
            | "Unsupported"
            | "VcpuLimitExceeded"
    )
}

/// An EC2 `Filter`: name (`tag:Key`, `tag-key`, `subnet-id`, ...) and accepted values.
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    /// Filter name, e.g. `tag:karpenter.sh/discovery`, `subnet-id`, `instance-state-name`.
    pub name: String,
    /// Values, any of which matches.
    pub values: Vec<String>,
}

impl Filter {
    /// A filter with one value.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Filter {
        Filter {
            name: name.into(),
            values: vec![value.into()],
        }
    }
}

/// A subnet as DescribeSubnets reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct SubnetInfo {
    /// `subnet-...`.
    pub id: String,
    /// Availability zone, e.g. `us-east-1a`.
    pub zone: String,
    /// Zone id, e.g. `use1-az1`.
    pub zone_id: Option<String>,
    /// Free IPv4 addresses (`AvailableIpAddressCount`); node class resolution lists subnets
    /// with more first.
    pub available_ips: i64,
}

/// A security group.
#[derive(Clone, Debug, PartialEq)]
pub struct SecurityGroupInfo {
    /// `sg-...`.
    pub id: String,
    /// `GroupName` (not the `Name` tag).
    pub name: String,
}

/// What to ask DescribeImages for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImageQuery {
    /// Image ids (exclusive with filters in practice).
    pub ids: Vec<String>,
    /// Owner account ids or aliases (`self`, `amazon`).
    pub owners: Vec<String>,
    /// Filters (`name`, `tag:Key`, ...).
    pub filters: Vec<Filter>,
}

/// A machine image.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageInfo {
    /// `ami-...`.
    pub id: String,
    /// The image's `Name` (not a tag), what `amiSelectorTerms[].name` matches.
    pub name: String,
    /// `x86_64` or `arm64`.
    pub architecture: String,
    /// Creation date as EC2 reports it (ISO 8601, sorts chronologically).
    pub creation_date: String,
    /// Deprecation time, if one is set.
    pub deprecation_time: Option<Timestamp>,
}

/// An instance type's hardware as DescribeInstanceTypes reports it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstanceTypeInfo {
    /// Name, e.g. `m5.large`.
    pub name: String,
    /// Default vCPU count (`VCpuInfo.DefaultVCpus`).
    pub vcpus: i64,
    /// Memory, MiB (`MemoryInfo.SizeInMiB`), before any VM overhead.
    pub memory_mib: i64,
    /// Supported architectures (`x86_64`, `arm64`, `i386`, ...).
    pub architectures: Vec<String>,
    /// `nitro`, `xen` or empty (bare metal).
    pub hypervisor: String,
    /// Total GPUs, their manufacturer, name and total memory (MiB).
    pub gpu: Option<(i64, String, String, i64)>,
    /// Total accelerators (Inferentia, Trainium) and their name.
    pub accelerator: Option<(i64, String)>,
    /// Local instance storage, GB, and its type (`ssd`, `hdd`).
    pub instance_storage: Option<(i64, String)>,
    /// Maximum network interfaces.
    pub max_network_interfaces: i64,
    /// IPv4 addresses per interface.
    pub ipv4_per_interface: i64,
    /// Baseline network bandwidth, Gbit/s.
    pub baseline_bandwidth_gbps: Option<f64>,
    /// `on-demand`, `spot`, `capacity-block`.
    pub usage_classes: Vec<String>,
    /// `PlacementGroupInfo.SupportedStrategies`: the placement group strategies the type can
    /// launch into (`cluster`, `partition`, `spread`); empty when EC2 does not say.
    pub placement_group_strategies: Vec<String>,
}

/// What a launch template holds (`LaunchTemplateData`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LaunchTemplateData {
    /// AMI id, e.g. `ami-0123456789abcdef0`.
    pub image_id: String,
    /// User data, base64.
    pub user_data: String,
    /// Security group ids (`sg-...`) the node class resolved.
    pub security_group_ids: Vec<String>,
    /// IAM instance profile nodes run as, by name.
    pub instance_profile: Option<String>,
    /// EBS volumes created at launch.
    pub block_devices: Vec<BlockDevice>,
    /// IMDS endpoint `enabled|disabled`, IPv6 endpoint, hop limit, tokens `required|optional`.
    pub metadata: MetadataOptions,
    /// Detailed CloudWatch monitoring.
    pub monitoring: bool,
    /// The capacity reservation (`cr-...`) every launch from the template goes into: its
    /// `CapacityReservationSpecification` targets that id with preference
    /// `capacity-reservations-only` (upstream `aws:pkg/providers/launchtemplate/types.go`, one
    /// template per reservation). `None` (not serialized, so the names of templates without one
    /// do not change) leaves EC2's default, `open`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_id: Option<String>,
    /// Without a `capacity_reservation_id`: keep launches out of open capacity reservations
    /// (`CapacityReservationPreference: none`), as upstream does for on-demand and spot
    /// templates while the `ReservedCapacity` gate is on, so reserved capacity is used only
    /// where Karpenter targets it and counts it. False (not serialized, so existing template
    /// names stay) leaves EC2's default, `open`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_open_reservations: bool,
    /// `InstanceMarketOptions.MarketType`: `capacity-block` for a template that launches into a
    /// Capacity Block; `None` (not serialized) for on-demand and spot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub market_type: Option<String>,
    /// `NetworkInterfaces`, in order. When any is given, the security groups go on each of them
    /// (`Groups`) and the template sets no top-level `SecurityGroupIds`, as EC2 requires. Empty
    /// (not serialized) leaves EC2's default primary interface.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub network_interfaces: Vec<NetworkInterface>,
    /// `CpuOptions.NestedVirtualization`: `enabled` or `disabled`; `None` (not serialized) sets
    /// no CPU options.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nested_virtualization: Option<String>,
    /// `Placement`: the placement group instances launch into; `None` (not serialized) for
    /// none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
}

/// One network interface of a launch template (`LaunchTemplateInstanceNetworkInterface
/// SpecificationRequest`); `None` fields are left out of the request and of the template's
/// content hash.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct NetworkInterface {
    /// `NetworkCardIndex`; `None` for the default card.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_card_index: Option<i32>,
    /// `DeviceIndex`: 0 is the primary interface.
    pub device_index: i32,
    /// `InterfaceType`: `interface`, `efa` or `efa-only`; `None` for an ENA interface.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface_type: Option<String>,
    /// `AssociatePublicIpAddress`; `None` follows the subnet's setting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub associate_public_ip_address: Option<bool>,
    /// `Ipv4PrefixCount`: /28 IPv4 prefixes assigned to the interface.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv4_prefix_count: Option<i32>,
    /// `Ipv6PrefixCount`: /80 IPv6 prefixes assigned to the interface.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6_prefix_count: Option<i32>,
    /// `PrimaryIpv6`: the first IPv6 address is the interface's primary one (IPv6 clusters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary_ipv6: Option<bool>,
    /// `Ipv6AddressCount`: IPv6 addresses assigned to the interface.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6_address_count: Option<i32>,
    /// `ConnectionTrackingSpecification`: idle timeouts in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
}

/// Idle connection-tracking timeouts of a network interface, in seconds
/// (`ConnectionTrackingSpecificationRequest`); `None` keeps EC2's default.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConnectionTracking {
    /// `TcpEstablishedTimeout`, 60 to 432,000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_established_timeout: Option<i32>,
    /// `UdpStreamTimeout`, 60 to 180.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_stream_timeout: Option<i32>,
    /// `UdpTimeout`, 30 to 60.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_timeout: Option<i32>,
}

/// Where a launch template places instances (`LaunchTemplatePlacementRequest`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Placement {
    /// `GroupId` of the placement group, `pg-...`.
    pub group_id: String,
    /// `PartitionNumber` within a partition placement group (1-based); `None` lets EC2 pick.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition_number: Option<i32>,
}

/// What to ask DescribePlacementGroups for: group ids or group names (one of them), and
/// filters (`state`, `strategy`, ...).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlacementGroupQuery {
    /// `GroupIds`, `pg-...`.
    pub ids: Vec<String>,
    /// `GroupNames`.
    pub names: Vec<String>,
    /// Filters, ANDed.
    pub filters: Vec<Filter>,
}

/// A placement group as DescribePlacementGroups reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementGroupInfo {
    /// `GroupId`, `pg-...`.
    pub id: String,
    /// `GroupName`.
    pub name: String,
    /// `Strategy`: `cluster`, `partition` or `spread`.
    pub strategy: String,
    /// `PartitionCount` of a partition group (0 otherwise).
    pub partition_count: i32,
    /// `SpreadLevel` of a spread group: `rack` or `host`.
    pub spread_level: Option<String>,
    /// `State`: `pending`, `available`, `deleting` or `deleted`.
    pub state: String,
}

/// One EBS block device mapping.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BlockDevice {
    /// Device name, e.g. `/dev/xvda`.
    pub device_name: String,
    /// Size, GiB.
    pub volume_size_gib: Option<i32>,
    /// `gp3`, `io2`, ...
    pub volume_type: Option<String>,
    /// Provisioned IOPS.
    pub iops: Option<i32>,
    /// Throughput, MiB/s.
    pub throughput: Option<i32>,
    /// Encrypt the volume.
    pub encrypted: Option<bool>,
    /// KMS key id, alias or ARN to encrypt with; `None` leaves EC2's default key.
    pub kms_key_id: Option<String>,
    /// EBS snapshot (`snap-...`) to restore the volume from.
    pub snapshot_id: Option<String>,
    /// Delete with the instance.
    pub delete_on_termination: Option<bool>,
    /// `VolumeInitializationRate`, MiB/s (100 to 300): how fast a volume restored from
    /// `snapshot_id` is filled; `None` (not serialized) leaves EC2's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_initialization_rate: Option<i32>,
}

/// Instance metadata service options.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct MetadataOptions {
    /// `enabled` or `disabled`.
    pub http_endpoint: String,
    /// `enabled` or `disabled`.
    pub http_protocol_ipv6: String,
    /// `HttpPutResponseHopLimit`, 1 to 64: how many network hops an IMDS response may travel.
    pub http_put_response_hop_limit: i32,
    /// `required` or `optional`.
    pub http_tokens: String,
}

/// A launch template as listed.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchTemplateInfo {
    /// `lt-...`.
    pub id: String,
    /// Launch template name, e.g. `karpenter.k8s.aws/<hash>`.
    pub name: String,
    /// Its tags; Karpenter finds a node class's templates by their cluster and
    /// `karpenter.k8s.aws/ec2nodeclass` tags.
    pub tags: BTreeMap<String, String>,
}

/// One override of a fleet request: an instance type in a subnet (zone).
#[derive(Clone, Debug, PartialEq)]
pub struct FleetOverride {
    /// Instance type, e.g. `m5.large`.
    pub instance_type: String,
    /// Subnet to launch into (`subnet-...`).
    pub subnet_id: String,
    /// The subnet's zone.
    pub zone: String,
    /// Priority for `prioritized` strategies (lower first); the order we rank offerings in.
    pub priority: f64,
}

/// A launch template and the overrides that use it.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetConfig {
    /// Launch template name.
    pub launch_template: String,
    /// Overrides, cheapest first.
    pub overrides: Vec<FleetOverride>,
}

/// A CreateFleet request of type `instant` for one instance.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetRequest {
    /// `DefaultTargetCapacityType`: `spot`, `on-demand` (also for an On-Demand Capacity
    /// Reservation, whose target the launch template names) or `capacity-block` (a Capacity
    /// Block; the request then carries no on-demand options, upstream
    /// `aws:pkg/providers/instance/types.go`).
    pub capacity_type: String,
    /// Launch template configurations, each with the overrides that use it.
    pub configs: Vec<FleetConfig>,
    /// Tags for the instance, its volumes and the fleet.
    pub tags: BTreeMap<String, String>,
    /// Idempotency token (at most 64 ASCII characters).
    pub client_token: String,
    /// Launch by the overrides' priorities (`prioritized` on-demand,
    /// `capacity-optimized-prioritized` spot) instead of EC2's prices (`lowest-price`,
    /// `price-capacity-optimized`): the NodeClaim's types were ranked by prices a NodeOverlay
    /// changed (upstream `CreateFleetInputBuilder.WithOverlay`).
    pub prioritized: bool,
    /// CreateFleet's reserved `Context` (the node class's `spec.context`); `None` sends none.
    pub context: Option<String>,
}

/// An error CreateFleet reported for one override.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetError {
    /// Error code, e.g. `InsufficientInstanceCapacity`.
    pub code: String,
    /// EC2's message for that override.
    pub message: String,
    /// The override's instance type, if reported.
    pub instance_type: Option<String>,
    /// The override's zone, if reported (or derived from its subnet).
    pub zone: Option<String>,
    /// The override's subnet, if reported.
    pub subnet_id: Option<String>,
}

/// What CreateFleet launched and what failed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetResult {
    /// Launched instance ids.
    pub instance_ids: Vec<String>,
    /// Per-override errors (may accompany a launch: a partial fleet error).
    pub errors: Vec<FleetError>,
}

/// An instance as DescribeInstances reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceInfo {
    /// `i-...`.
    pub id: String,
    /// Instance type, e.g. `m5.large`.
    pub instance_type: String,
    /// Availability zone, e.g. `us-east-1a`.
    pub zone: String,
    /// `pending`, `running`, `shutting-down`, `terminated`, `stopping`, `stopped`.
    pub state: String,
    /// `spot` when a spot instance, else on-demand.
    pub spot: bool,
    /// The AMI it booted (`ami-...`).
    pub image_id: String,
    /// `LaunchTime`.
    pub launched_at: Timestamp,
    /// Private IPv4 address.
    pub private_ip: String,
    /// Private DNS name, e.g. `ip-10-0-1-7.ec2.internal`: the Node name its kubelet registers.
    pub private_dns: String,
    /// The subnet it runs in (`subnet-...`).
    pub subnet_id: String,
    /// Security group ids.
    pub security_group_ids: Vec<String>,
    /// Architecture, e.g. `x86_64`.
    pub architecture: String,
    /// Its tags, e.g. `karpenter.sh/nodeclaim`, `kubernetes.io/cluster/<name>: owned`.
    pub tags: BTreeMap<String, String>,
    /// The capacity reservation it runs in (`CapacityReservationId`, `cr-...`), if any.
    pub capacity_reservation_id: Option<String>,
    /// `CapacityReservationSpecification.CapacityReservationPreference`: `open`, `none` or
    /// `capacity-reservations-only` (launched into a named reservation); `None` when EC2 (or an
    /// emulator) does not say.
    pub capacity_reservation_preference: Option<String>,
    /// `Placement.PartitionNumber`: the partition (1-based) of a partition placement group the
    /// instance runs in; `None` outside one (or while EC2 does not report it yet).
    pub partition_number: Option<i32>,
}

impl InstanceInfo {
    /// Whether the instance is gone or going (terminated or shutting down).
    pub fn is_terminated(&self) -> bool {
        matches!(self.state.as_str(), "terminated" | "shutting-down")
    }
}

/// What to ask DescribeCapacityReservations for: reservation ids (`CapacityReservationIds`) and
/// filters (`state`, `tag:KEY`, `tag-key`, `owner-id`, `instance-match-criteria`, ...), both
/// optional; the answer matches all of them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CapacityReservationQuery {
    /// Reservation ids (`cr-...`).
    pub ids: Vec<String>,
    /// Filters, ANDed.
    pub filters: Vec<Filter>,
}

/// A capacity reservation as DescribeCapacityReservations reports it (the fields Karpenter
/// reads): an On-Demand Capacity Reservation (`default`) or a Capacity Block for ML.
#[derive(Clone, Debug, PartialEq)]
pub struct CapacityReservationInfo {
    /// `CapacityReservationId`, `cr-...`.
    pub id: String,
    /// The one instance type it holds, e.g. `p5.48xlarge`.
    pub instance_type: String,
    /// `AvailabilityZone`, e.g. `us-east-1a`.
    pub zone: String,
    /// `TotalInstanceCount`: instances it holds in all.
    pub total_instance_count: i64,
    /// `AvailableInstanceCount`: instances that can still launch into it.
    pub available_instance_count: i64,
    /// `InstanceMatchCriteria`: `open` or `targeted` (`open` when EC2 does not say).
    pub instance_match_criteria: String,
    /// `ReservationType`: `default` or `capacity-block` (`default` when EC2 does not say).
    pub reservation_type: String,
    /// `EndDate`: when it ends; `None` for an open-ended reservation.
    pub end_date: Option<Timestamp>,
    /// `OwnerId`: the 12-digit owning account.
    pub owner_id: String,
    /// `State`: `active`, `expired`, `cancelled`, `pending`, `failed`, `scheduled`, ...
    pub state: String,
    /// Its tags (`tagSet`).
    pub tags: BTreeMap<String, String>,
}

/// What EKS DescribeCluster says of a cluster's network (`cluster.kubernetesNetworkConfig`) and
/// endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterNetwork {
    /// `serviceIpv4Cidr`, e.g. `172.20.0.0/16` (EKS's default when the VPC uses 10.0.0.0/8).
    pub service_ipv4_cidr: Option<String>,
    /// `serviceIpv6Cidr` of an IPv6 cluster, e.g. `fd30:1c53:5f8a::/108`.
    pub service_ipv6_cidr: Option<String>,
    /// `ipFamily`: `ipv4` or `ipv6`.
    pub ip_family: Option<String>,
    /// The API server endpoint, e.g. `https://ABCD.gr7.us-east-1.eks.amazonaws.com`.
    pub endpoint: Option<String>,
    /// `certificateAuthority.data`: the cluster CA bundle, base64 of PEM.
    pub ca_bundle: Option<String>,
}

/// The EC2 and SSM calls the provider makes.
#[async_trait]
pub trait Ec2: Send + Sync {
    /// DescribeSubnets (all pages).
    async fn describe_subnets(&self, filters: Vec<Filter>) -> Result<Vec<SubnetInfo>, Ec2Error>;
    /// DescribeSecurityGroups (all pages).
    async fn describe_security_groups(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<SecurityGroupInfo>, Ec2Error>;
    /// DescribeImages, deprecated images included.
    async fn describe_images(&self, query: ImageQuery) -> Result<Vec<ImageInfo>, Ec2Error>;
    /// SSM GetParameter; `None` when the parameter does not exist.
    async fn ssm_parameter(&self, name: &str) -> Result<Option<String>, Ec2Error>;
    /// EKS DescribeCluster of the cluster `name`: its service CIDR and IP family (what nodes'
    /// cluster DNS is derived from). An account without that API answers
    /// `UnsupportedOperation`.
    ///
    /// Errors: the cluster does not exist (`ResourceNotFoundException`), or the call failed.
    async fn describe_cluster(&self, name: &str) -> Result<ClusterNetwork, Ec2Error> {
        Err(Ec2Error {
            code: "UnsupportedOperation".into(),
            message: format!("DescribeCluster {name}: this account has no EKS API"),
        })
    }
    /// DescribeInstanceTypes (all pages).
    async fn describe_instance_types(&self) -> Result<Vec<InstanceTypeInfo>, Ec2Error>;
    /// DescribeInstanceTypeOfferings by availability zone (all pages): `(type, zone)`.
    async fn describe_instance_type_offerings(&self) -> Result<Vec<(String, String)>, Ec2Error>;
    /// DescribeSpotPriceHistory for Linux, the newest price per `(type, zone)`, USD/hour.
    async fn spot_prices(&self) -> Result<Vec<(String, String, f64)>, Ec2Error>;
    /// DescribeLaunchTemplates matching the filters (all pages).
    async fn describe_launch_templates(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<LaunchTemplateInfo>, Ec2Error>;
    /// CreateLaunchTemplate; returns its id. Errors: `InvalidLaunchTemplateName.AlreadyExistsException`.
    async fn create_launch_template(
        &self,
        name: &str,
        data: &LaunchTemplateData,
        tags: &BTreeMap<String, String>,
    ) -> Result<String, Ec2Error>;
    /// DeleteLaunchTemplate by id.
    async fn delete_launch_template(&self, id: &str) -> Result<(), Ec2Error>;
    /// CreateFleet of type `instant` for one instance.
    async fn create_fleet(&self, request: &FleetRequest) -> Result<FleetResult, Ec2Error>;
    /// DescribeInstances by ids and/or filters (all pages).
    async fn describe_instances(
        &self,
        ids: &[String],
        filters: Vec<Filter>,
    ) -> Result<Vec<InstanceInfo>, Ec2Error>;
    /// TerminateInstances (at most 1,000 ids per call).
    async fn terminate_instances(&self, ids: &[String]) -> Result<(), Ec2Error>;
    /// DescribeCapacityReservations (all pages) by ids and/or filters. Errors:
    /// `InvalidCapacityReservationId.NotFound` when an id does not exist (see
    /// [`Ec2Error::is_not_found`]).
    async fn describe_capacity_reservations(
        &self,
        query: CapacityReservationQuery,
    ) -> Result<Vec<CapacityReservationInfo>, Ec2Error>;
    /// DescribePlacementGroups (one page: EC2 does not paginate it). An account or emulator
    /// without that API answers `UnsupportedOperation`.
    ///
    /// Errors: `InvalidPlacementGroup.Unknown` when a named group does not exist, or the call
    /// failed.
    async fn describe_placement_groups(
        &self,
        query: PlacementGroupQuery,
    ) -> Result<Vec<PlacementGroupInfo>, Ec2Error> {
        Err(Ec2Error {
            code: "UnsupportedOperation".into(),
            message: format!("DescribePlacementGroups {query:?}: not served here"),
        })
    }
    /// The instance's user data, decoded from base64, if it has any.
    async fn user_data(&self, instance_id: &str) -> Result<Option<String>, Ec2Error>;
    /// IAM GetInstanceProfile: the names of its roles, or `None` when it does not exist.
    async fn instance_profile_roles(&self, name: &str) -> Result<Option<Vec<String>>, Ec2Error>;
    /// IAM CreateInstanceProfile (with tags) then AddRoleToInstanceProfile.
    /// Errors: `NoSuchEntity` when the role does not exist.
    async fn create_instance_profile(
        &self,
        name: &str,
        role: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), Ec2Error>;
    /// IAM RemoveRoleFromInstanceProfile for each role, then DeleteInstanceProfile.
    async fn delete_instance_profile(&self, name: &str, roles: &[String]) -> Result<(), Ec2Error>;
}

/// [`Ec2`] over aws-sdk-ec2, aws-sdk-ssm and aws-sdk-iam.
pub struct SdkEc2 {
    ec2: aws_sdk_ec2::Client,
    eks: aws_sdk_eks::Client,
    ssm: aws_sdk_ssm::Client,
    iam: aws_sdk_iam::Client,
}

impl SdkEc2 {
    /// Clients from a loaded AWS configuration (region and credentials from the standard chain;
    /// standard retry mode with up to 5 attempts, which backs off on throttling).
    pub fn new(config: &aws_config::SdkConfig) -> SdkEc2 {
        SdkEc2 {
            ec2: aws_sdk_ec2::Client::new(config),
            eks: aws_sdk_eks::Client::new(config),
            ssm: aws_sdk_ssm::Client::new(config),
            iam: aws_sdk_iam::Client::new(config),
        }
    }
}

fn sdk_filters(filters: Vec<Filter>) -> Option<Vec<t::Filter>> {
    if filters.is_empty() {
        return None;
    }
    Some(
        filters
            .into_iter()
            .map(|f| {
                t::Filter::builder()
                    .name(f.name)
                    .set_values(Some(f.values))
                    .build()
            })
            .collect(),
    )
}

fn tag_map(tags: &[t::Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
        .collect()
}

fn sdk_tags(tags: &BTreeMap<String, String>) -> Vec<t::Tag> {
    tags.iter()
        .map(|(k, v)| t::Tag::builder().key(k).value(v).build())
        .collect()
}

/// One interface of a launch template request, with the node class's security groups.
fn sdk_network_interface(
    n: &NetworkInterface,
    groups: &[String],
) -> t::LaunchTemplateInstanceNetworkInterfaceSpecificationRequest {
    t::LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
        .set_network_card_index(n.network_card_index)
        .device_index(n.device_index)
        .set_interface_type(n.interface_type.clone())
        .set_associate_public_ip_address(n.associate_public_ip_address)
        .set_ipv4_prefix_count(n.ipv4_prefix_count)
        .set_ipv6_prefix_count(n.ipv6_prefix_count)
        .set_primary_ipv6(n.primary_ipv6)
        .set_ipv6_address_count(n.ipv6_address_count)
        .set_groups(Some(groups.to_vec()))
        .set_connection_tracking_specification(n.connection_tracking.as_ref().map(|c| {
            t::ConnectionTrackingSpecificationRequest::builder()
                .set_tcp_established_timeout(c.tcp_established_timeout)
                .set_udp_stream_timeout(c.udp_stream_timeout)
                .set_udp_timeout(c.udp_timeout)
                .build()
        }))
        .build()
}

fn timestamp(dt: Option<&aws_sdk_ec2::primitives::DateTime>) -> Option<Timestamp> {
    dt.and_then(|d| Timestamp::new(d.secs(), d.subsec_nanos() as i32).ok())
}

fn instance_info(i: &t::Instance) -> InstanceInfo {
    InstanceInfo {
        id: i.instance_id().unwrap_or_default().to_string(),
        instance_type: i
            .instance_type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_default(),
        zone: i
            .placement()
            .and_then(|p| p.availability_zone())
            .unwrap_or_default()
            .to_string(),
        state: i
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str().to_string())
            .unwrap_or_default(),
        spot: i.instance_lifecycle() == Some(&t::InstanceLifecycleType::Spot),
        image_id: i.image_id().unwrap_or_default().to_string(),
        launched_at: timestamp(i.launch_time()).unwrap_or(Timestamp::UNIX_EPOCH),
        private_ip: i.private_ip_address().unwrap_or_default().to_string(),
        private_dns: i.private_dns_name().unwrap_or_default().to_string(),
        subnet_id: i.subnet_id().unwrap_or_default().to_string(),
        security_group_ids: i
            .security_groups()
            .iter()
            .filter_map(|g| g.group_id().map(str::to_string))
            .collect(),
        architecture: i
            .architecture()
            .map(|a| a.as_str().to_string())
            .unwrap_or_default(),
        tags: tag_map(i.tags()),
        capacity_reservation_id: i.capacity_reservation_id().map(str::to_string),
        capacity_reservation_preference: i
            .capacity_reservation_specification()
            .and_then(|c| c.capacity_reservation_preference())
            .map(|p| p.as_str().to_string()),
        partition_number: i.placement().and_then(|p| p.partition_number()),
    }
}

fn reservation_info(r: &t::CapacityReservation) -> CapacityReservationInfo {
    CapacityReservationInfo {
        id: r.capacity_reservation_id().unwrap_or_default().to_string(),
        instance_type: r.instance_type().unwrap_or_default().to_string(),
        zone: r.availability_zone().unwrap_or_default().to_string(),
        total_instance_count: i64::from(r.total_instance_count().unwrap_or(0)),
        available_instance_count: i64::from(r.available_instance_count().unwrap_or(0)),
        instance_match_criteria: r
            .instance_match_criteria()
            .map_or("open", |c| c.as_str())
            .to_string(),
        reservation_type: r
            .reservation_type()
            .map_or("default", |c| c.as_str())
            .to_string(),
        end_date: timestamp(r.end_date()),
        owner_id: r.owner_id().unwrap_or_default().to_string(),
        state: r
            .state()
            .map(|s| s.as_str().to_string())
            .unwrap_or_default(),
        tags: tag_map(r.tags()),
    }
}

fn type_info(i: &t::InstanceTypeInfo) -> InstanceTypeInfo {
    let gpu = i.gpu_info().and_then(|g| {
        let first = g.gpus().first()?;
        let count: i64 = g
            .gpus()
            .iter()
            .map(|x| i64::from(x.count().unwrap_or(0)))
            .sum();
        Some((
            count,
            first.manufacturer().unwrap_or_default().to_string(),
            first.name().unwrap_or_default().to_string(),
            i64::from(g.total_gpu_memory_in_mib().unwrap_or(0)),
        ))
    });
    let accelerator = i.neuron_info().and_then(|n| {
        let first = n.neuron_devices().first()?;
        let count: i64 = n
            .neuron_devices()
            .iter()
            .map(|d| i64::from(d.count().unwrap_or(0)))
            .sum();
        Some((count, first.name().unwrap_or_default().to_string()))
    });
    InstanceTypeInfo {
        name: i
            .instance_type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_default(),
        vcpus: i64::from(i.v_cpu_info().and_then(|v| v.default_v_cpus()).unwrap_or(0)),
        memory_mib: i.memory_info().and_then(|m| m.size_in_mib()).unwrap_or(0),
        architectures: i
            .processor_info()
            .map(|p| {
                p.supported_architectures()
                    .iter()
                    .map(|a| a.as_str().to_string())
                    .collect()
            })
            .unwrap_or_default(),
        hypervisor: i
            .hypervisor()
            .map(|h| h.as_str().to_string())
            .unwrap_or_default(),
        gpu,
        accelerator,
        instance_storage: i.instance_storage_info().map(|s| {
            (
                s.total_size_in_gb().unwrap_or(0),
                s.disks()
                    .first()
                    .and_then(|d| d.r#type())
                    .map(|t| t.as_str().to_string())
                    .unwrap_or_default(),
            )
        }),
        max_network_interfaces: i64::from(
            i.network_info()
                .and_then(|n| n.maximum_network_interfaces())
                .unwrap_or(0),
        ),
        ipv4_per_interface: i64::from(
            i.network_info()
                .and_then(|n| n.ipv4_addresses_per_interface())
                .unwrap_or(0),
        ),
        baseline_bandwidth_gbps: i
            .network_info()
            .and_then(|n| n.network_cards().first())
            .and_then(|c| c.baseline_bandwidth_in_gbps()),
        usage_classes: i
            .supported_usage_classes()
            .iter()
            .map(|u| u.as_str().to_string())
            .collect(),
        placement_group_strategies: i
            .placement_group_info()
            .map(|p| {
                p.supported_strategies()
                    .iter()
                    .map(|s| s.as_str().to_string())
                    .collect()
            })
            .unwrap_or_default(),
    }
}

#[async_trait]
impl Ec2 for SdkEc2 {
    async fn describe_subnets(&self, filters: Vec<Filter>) -> Result<Vec<SubnetInfo>, Ec2Error> {
        let pages: Vec<_> = self
            .ec2
            .describe_subnets()
            .set_filters(sdk_filters(filters))
            .into_paginator()
            .items()
            .send()
            .collect::<Result<_, _>>()
            .await
            .map_err(Ec2Error::from_sdk)?;
        Ok(pages
            .iter()
            .map(|s: &t::Subnet| SubnetInfo {
                id: s.subnet_id().unwrap_or_default().to_string(),
                zone: s.availability_zone().unwrap_or_default().to_string(),
                zone_id: s.availability_zone_id().map(str::to_string),
                available_ips: i64::from(s.available_ip_address_count().unwrap_or(0)),
            })
            .collect())
    }

    async fn describe_security_groups(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<SecurityGroupInfo>, Ec2Error> {
        let groups: Vec<t::SecurityGroup> = self
            .ec2
            .describe_security_groups()
            .set_filters(sdk_filters(filters))
            .into_paginator()
            .items()
            .send()
            .collect::<Result<_, _>>()
            .await
            .map_err(Ec2Error::from_sdk)?;
        Ok(groups
            .iter()
            .map(|g| SecurityGroupInfo {
                id: g.group_id().unwrap_or_default().to_string(),
                name: g.group_name().unwrap_or_default().to_string(),
            })
            .collect())
    }

    async fn describe_images(&self, query: ImageQuery) -> Result<Vec<ImageInfo>, Ec2Error> {
        let images: Vec<t::Image> = self
            .ec2
            .describe_images()
            .set_image_ids((!query.ids.is_empty()).then_some(query.ids))
            .set_owners((!query.owners.is_empty()).then_some(query.owners))
            .set_filters(sdk_filters(query.filters))
            .include_deprecated(true)
            .into_paginator()
            .items()
            .send()
            .collect::<Result<_, _>>()
            .await
            .map_err(Ec2Error::from_sdk)?;
        Ok(images
            .iter()
            .map(|i| ImageInfo {
                id: i.image_id().unwrap_or_default().to_string(),
                name: i.name().unwrap_or_default().to_string(),
                architecture: i
                    .architecture()
                    .map(|a| a.as_str().to_string())
                    .unwrap_or_default(),
                creation_date: i.creation_date().unwrap_or_default().to_string(),
                deprecation_time: i.deprecation_time().and_then(|d| d.parse().ok()),
            })
            .collect())
    }

    async fn describe_cluster(&self, name: &str) -> Result<ClusterNetwork, Ec2Error> {
        let out = self
            .eks
            .describe_cluster()
            .name(name)
            .send()
            .await
            .map_err(|e| {
                let (code, message) = sdk_error_parts(&e);
                Ec2Error { code, message }
            })?;
        let cluster = out.cluster();
        let network = cluster.and_then(|c| c.kubernetes_network_config());
        Ok(ClusterNetwork {
            service_ipv4_cidr: network
                .and_then(|n| n.service_ipv4_cidr())
                .map(str::to_string),
            service_ipv6_cidr: network
                .and_then(|n| n.service_ipv6_cidr())
                .map(str::to_string),
            ip_family: network
                .and_then(|n| n.ip_family())
                .map(|f| f.as_str().to_string()),
            endpoint: cluster.and_then(|c| c.endpoint()).map(str::to_string),
            ca_bundle: cluster
                .and_then(|c| c.certificate_authority())
                .and_then(|a| a.data())
                .map(str::to_string),
        })
    }

    async fn ssm_parameter(&self, name: &str) -> Result<Option<String>, Ec2Error> {
        match self.ssm.get_parameter().name(name).send().await {
            Ok(out) => Ok(out.parameter().and_then(|p| p.value()).map(str::to_string)),
            Err(e) => {
                let code = e.code().unwrap_or("Transport").to_string();
                if code == "ParameterNotFound" {
                    return Ok(None);
                }
                let message = e.message().unwrap_or_default().to_string();
                Err(Ec2Error { code, message })
            }
        }
    }

    async fn describe_instance_types(&self) -> Result<Vec<InstanceTypeInfo>, Ec2Error> {
        let types: Vec<t::InstanceTypeInfo> = self
            .ec2
            .describe_instance_types()
            .into_paginator()
            .items()
            .send()
            .collect::<Result<_, _>>()
            .await
            .map_err(Ec2Error::from_sdk)?;
        Ok(types.iter().map(type_info).collect())
    }

    async fn describe_instance_type_offerings(&self) -> Result<Vec<(String, String)>, Ec2Error> {
        let offerings: Vec<t::InstanceTypeOffering> = self
            .ec2
            .describe_instance_type_offerings()
            .location_type(t::LocationType::AvailabilityZone)
            .into_paginator()
            .items()
            .send()
            .collect::<Result<_, _>>()
            .await
            .map_err(Ec2Error::from_sdk)?;
        Ok(offerings
            .iter()
            .filter_map(|o| {
                Some((
                    o.instance_type()?.as_str().to_string(),
                    o.location()?.to_string(),
                ))
            })
            .collect())
    }

    async fn spot_prices(&self) -> Result<Vec<(String, String, f64)>, Ec2Error> {
        let history: Vec<t::SpotPrice> = self
            .ec2
            .describe_spot_price_history()
            .product_descriptions("Linux/UNIX")
            .product_descriptions("Linux/UNIX (Amazon VPC)")
            .start_time(aws_sdk_ec2::primitives::DateTime::from_secs(
                Timestamp::now().as_second(),
            ))
            .into_paginator()
            .items()
            .send()
            .collect::<Result<_, _>>()
            .await
            .map_err(Ec2Error::from_sdk)?;
        // Newest entry per (type, zone).
        let mut newest: BTreeMap<(String, String), (i64, f64)> = BTreeMap::new();
        for p in &history {
            let (Some(ty), Some(zone), Some(price)) = (
                p.instance_type(),
                p.availability_zone(),
                p.spot_price().and_then(|s| s.parse::<f64>().ok()),
            ) else {
                continue;
            };
            let at = p.timestamp().map_or(0, |d| d.secs());
            let key = (ty.as_str().to_string(), zone.to_string());
            if newest.get(&key).is_none_or(|(t0, _)| at >= *t0) {
                newest.insert(key, (at, price));
            }
        }
        Ok(newest
            .into_iter()
            .map(|((ty, zone), (_, price))| (ty, zone, price))
            .collect())
    }

    async fn describe_launch_templates(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<LaunchTemplateInfo>, Ec2Error> {
        let templates: Vec<t::LaunchTemplate> = self
            .ec2
            .describe_launch_templates()
            .set_filters(sdk_filters(filters))
            .into_paginator()
            .items()
            .send()
            .collect::<Result<_, _>>()
            .await
            .map_err(Ec2Error::from_sdk)?;
        Ok(templates
            .iter()
            .map(|lt| LaunchTemplateInfo {
                id: lt.launch_template_id().unwrap_or_default().to_string(),
                name: lt.launch_template_name().unwrap_or_default().to_string(),
                tags: tag_map(lt.tags()),
            })
            .collect())
    }

    async fn create_launch_template(
        &self,
        name: &str,
        data: &LaunchTemplateData,
        tags: &BTreeMap<String, String>,
    ) -> Result<String, Ec2Error> {
        let block_devices = data
            .block_devices
            .iter()
            .map(|b| {
                t::LaunchTemplateBlockDeviceMappingRequest::builder()
                    .device_name(&b.device_name)
                    .ebs(
                        t::LaunchTemplateEbsBlockDeviceRequest::builder()
                            .set_volume_size(b.volume_size_gib)
                            .set_volume_type(b.volume_type.as_deref().map(t::VolumeType::from))
                            .set_iops(b.iops)
                            .set_throughput(b.throughput)
                            .set_encrypted(b.encrypted)
                            .set_kms_key_id(b.kms_key_id.clone())
                            .set_snapshot_id(b.snapshot_id.clone())
                            .set_delete_on_termination(b.delete_on_termination)
                            .set_volume_initialization_rate(b.volume_initialization_rate)
                            .build(),
                    )
                    .build()
            })
            .collect();
        let m = &data.metadata;
        // With interfaces given, EC2 takes the security groups on them and refuses them at the
        // top level as well.
        let interfaces: Vec<t::LaunchTemplateInstanceNetworkInterfaceSpecificationRequest> = data
            .network_interfaces
            .iter()
            .map(|n| sdk_network_interface(n, &data.security_group_ids))
            .collect();
        let request = t::RequestLaunchTemplateData::builder()
            .image_id(&data.image_id)
            .user_data(&data.user_data)
            .set_security_group_ids(
                interfaces
                    .is_empty()
                    .then(|| data.security_group_ids.clone()),
            )
            .set_network_interfaces((!interfaces.is_empty()).then_some(interfaces))
            .set_cpu_options(data.nested_virtualization.as_deref().map(|n| {
                t::LaunchTemplateCpuOptionsRequest::builder()
                    .nested_virtualization(t::NestedVirtualizationSpecification::from(n))
                    .build()
            }))
            .set_placement(data.placement.as_ref().map(|p| {
                t::LaunchTemplatePlacementRequest::builder()
                    .group_id(&p.group_id)
                    .set_partition_number(p.partition_number)
                    .build()
            }))
            .set_iam_instance_profile(data.instance_profile.as_ref().map(|p| {
                t::LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                    .name(p)
                    .build()
            }))
            .set_block_device_mappings(Some(block_devices))
            .metadata_options(
                t::LaunchTemplateInstanceMetadataOptionsRequest::builder()
                    .http_endpoint(t::LaunchTemplateInstanceMetadataEndpointState::from(
                        m.http_endpoint.as_str(),
                    ))
                    .http_protocol_ipv6(t::LaunchTemplateInstanceMetadataProtocolIpv6::from(
                        m.http_protocol_ipv6.as_str(),
                    ))
                    .http_put_response_hop_limit(m.http_put_response_hop_limit)
                    .http_tokens(t::LaunchTemplateHttpTokensState::from(
                        m.http_tokens.as_str(),
                    ))
                    .build(),
            )
            .monitoring(
                t::LaunchTemplatesMonitoringRequest::builder()
                    .enabled(data.monitoring)
                    .build(),
            )
            .set_capacity_reservation_specification(match &data.capacity_reservation_id {
                Some(id) => Some(
                    t::LaunchTemplateCapacityReservationSpecificationRequest::builder()
                        .capacity_reservation_preference(
                            t::CapacityReservationPreference::CapacityReservationsOnly,
                        )
                        .capacity_reservation_target(
                            t::CapacityReservationTarget::builder()
                                .capacity_reservation_id(id)
                                .build(),
                        )
                        .build(),
                ),
                None if data.no_open_reservations => Some(
                    t::LaunchTemplateCapacityReservationSpecificationRequest::builder()
                        .capacity_reservation_preference(t::CapacityReservationPreference::None)
                        .build(),
                ),
                None => None,
            })
            .set_instance_market_options(data.market_type.as_deref().map(|m| {
                t::LaunchTemplateInstanceMarketOptionsRequest::builder()
                    .market_type(t::MarketType::from(m))
                    .build()
            }))
            .build();
        let out = self
            .ec2
            .create_launch_template()
            .launch_template_name(name)
            .launch_template_data(request)
            .tag_specifications(
                t::TagSpecification::builder()
                    .resource_type(t::ResourceType::LaunchTemplate)
                    .set_tags(Some(sdk_tags(tags)))
                    .build(),
            )
            .send()
            .await
            .map_err(Ec2Error::from_sdk)?;
        Ok(out
            .launch_template()
            .and_then(|lt| lt.launch_template_id())
            .unwrap_or_default()
            .to_string())
    }

    async fn delete_launch_template(&self, id: &str) -> Result<(), Ec2Error> {
        self.ec2
            .delete_launch_template()
            .launch_template_id(id)
            .send()
            .await
            .map_err(Ec2Error::from_sdk)?;
        Ok(())
    }

    async fn create_fleet(&self, request: &FleetRequest) -> Result<FleetResult, Ec2Error> {
        let spot = request.capacity_type == crds::labels::CAPACITY_TYPE_SPOT;
        let capacity_block = request.capacity_type == CAPACITY_BLOCK;
        let capacity = t::TargetCapacitySpecificationRequest::builder()
            .total_target_capacity(1)
            .default_target_capacity_type(if spot {
                t::DefaultTargetCapacityType::Spot
            } else if capacity_block {
                t::DefaultTargetCapacityType::CapacityBlock
            } else {
                t::DefaultTargetCapacityType::OnDemand
            })
            .build();
        let configs = request
            .configs
            .iter()
            .map(|c| {
                t::FleetLaunchTemplateConfigRequest::builder()
                    .launch_template_specification(
                        t::FleetLaunchTemplateSpecificationRequest::builder()
                            .launch_template_name(&c.launch_template)
                            .version("$Latest")
                            .build(),
                    )
                    .set_overrides(Some(
                        c.overrides
                            .iter()
                            .map(|o| {
                                t::FleetLaunchTemplateOverridesRequest::builder()
                                    .instance_type(t::InstanceType::from(o.instance_type.as_str()))
                                    .subnet_id(&o.subnet_id)
                                    .availability_zone(&o.zone)
                                    .priority(o.priority)
                                    .build()
                            })
                            .collect(),
                    ))
                    .build()
            })
            .collect();
        let tags = sdk_tags(&request.tags);
        let tag_specs = [
            t::ResourceType::Instance,
            t::ResourceType::Volume,
            t::ResourceType::Fleet,
        ]
        .into_iter()
        .map(|rt| {
            t::TagSpecification::builder()
                .resource_type(rt)
                .set_tags(Some(tags.clone()))
                .build()
        })
        .collect();
        let mut call = self
            .ec2
            .create_fleet()
            .r#type(t::FleetType::Instant)
            .target_capacity_specification(capacity)
            .set_launch_template_configs(Some(configs))
            .set_tag_specifications(Some(tag_specs))
            .set_context(request.context.clone())
            .client_token(&request.client_token);
        call = if spot {
            call.spot_options(
                t::SpotOptionsRequest::builder()
                    .allocation_strategy(if request.prioritized {
                        t::SpotAllocationStrategy::CapacityOptimizedPrioritized
                    } else {
                        t::SpotAllocationStrategy::PriceCapacityOptimized
                    })
                    .build(),
            )
        } else if capacity_block {
            call
        } else {
            call.on_demand_options(
                t::OnDemandOptionsRequest::builder()
                    .allocation_strategy(if request.prioritized {
                        t::FleetOnDemandAllocationStrategy::Prioritized
                    } else {
                        t::FleetOnDemandAllocationStrategy::LowestPrice
                    })
                    .build(),
            )
        };
        let out = call.send().await.map_err(Ec2Error::from_sdk)?;
        Ok(FleetResult {
            instance_ids: out
                .instances()
                .iter()
                .flat_map(|i| i.instance_ids().iter().cloned())
                .collect(),
            errors: out
                .errors()
                .iter()
                .map(|e| {
                    let o = e
                        .launch_template_and_overrides()
                        .and_then(|l| l.overrides());
                    FleetError {
                        code: e.error_code().unwrap_or_default().to_string(),
                        message: e.error_message().unwrap_or_default().to_string(),
                        instance_type: o
                            .and_then(|o| o.instance_type())
                            .map(|t| t.as_str().to_string()),
                        zone: o.and_then(|o| o.availability_zone()).map(str::to_string),
                        subnet_id: o.and_then(|o| o.subnet_id()).map(str::to_string),
                    }
                })
                .collect(),
        })
    }

    async fn describe_instances(
        &self,
        ids: &[String],
        filters: Vec<Filter>,
    ) -> Result<Vec<InstanceInfo>, Ec2Error> {
        let reservations: Vec<t::Reservation> = self
            .ec2
            .describe_instances()
            .set_instance_ids((!ids.is_empty()).then(|| ids.to_vec()))
            .set_filters(sdk_filters(filters))
            .into_paginator()
            .items()
            .send()
            .collect::<Result<_, _>>()
            .await
            .map_err(Ec2Error::from_sdk)?;
        Ok(reservations
            .iter()
            .flat_map(|r| r.instances().iter().map(instance_info))
            .collect())
    }

    async fn terminate_instances(&self, ids: &[String]) -> Result<(), Ec2Error> {
        self.ec2
            .terminate_instances()
            .set_instance_ids(Some(ids.to_vec()))
            .send()
            .await
            .map_err(Ec2Error::from_sdk)?;
        Ok(())
    }

    async fn describe_capacity_reservations(
        &self,
        query: CapacityReservationQuery,
    ) -> Result<Vec<CapacityReservationInfo>, Ec2Error> {
        let by_id = !query.ids.is_empty();
        let reservations: Vec<t::CapacityReservation> = self
            .ec2
            .describe_capacity_reservations()
            .set_capacity_reservation_ids(by_id.then_some(query.ids))
            .set_filters(sdk_filters(query.filters))
            // EC2 refuses MaxResults next to ids; otherwise the largest page it allows.
            .set_max_results((!by_id).then_some(1000))
            .into_paginator()
            .items()
            .send()
            .collect::<Result<_, _>>()
            .await
            .map_err(Ec2Error::from_sdk)?;
        Ok(reservations.iter().map(reservation_info).collect())
    }

    async fn describe_placement_groups(
        &self,
        query: PlacementGroupQuery,
    ) -> Result<Vec<PlacementGroupInfo>, Ec2Error> {
        let out = self
            .ec2
            .describe_placement_groups()
            .set_group_ids((!query.ids.is_empty()).then_some(query.ids))
            .set_group_names((!query.names.is_empty()).then_some(query.names))
            .set_filters(sdk_filters(query.filters))
            .send()
            .await
            .map_err(Ec2Error::from_sdk)?;
        Ok(out
            .placement_groups()
            .iter()
            .map(|g| PlacementGroupInfo {
                id: g.group_id().unwrap_or_default().to_string(),
                name: g.group_name().unwrap_or_default().to_string(),
                strategy: g
                    .strategy()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
                partition_count: g.partition_count().unwrap_or(0),
                spread_level: g.spread_level().map(|l| l.as_str().to_string()),
                state: g
                    .state()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
            })
            .collect())
    }

    async fn user_data(&self, instance_id: &str) -> Result<Option<String>, Ec2Error> {
        let out = self
            .ec2
            .describe_instance_attribute()
            .instance_id(instance_id)
            .attribute(t::InstanceAttributeName::UserData)
            .send()
            .await
            .map_err(Ec2Error::from_sdk)?;
        let Some(encoded) = out.user_data().and_then(|v| v.value()) else {
            return Ok(None);
        };
        Ok(
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, encoded)
                .ok()
                .and_then(|b| String::from_utf8(b).ok()),
        )
    }

    async fn instance_profile_roles(&self, name: &str) -> Result<Option<Vec<String>>, Ec2Error> {
        match self
            .iam
            .get_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
        {
            Ok(out) => Ok(Some(
                out.instance_profile()
                    .map(|p| {
                        p.roles()
                            .iter()
                            .map(|r| r.role_name().to_string())
                            .collect()
                    })
                    .unwrap_or_default(),
            )),
            Err(e) if e.code() == Some("NoSuchEntity") => Ok(None),
            Err(e) => Err(Ec2Error::from_sdk(e)),
        }
    }

    async fn create_instance_profile(
        &self,
        name: &str,
        role: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), Ec2Error> {
        let tags: Vec<aws_sdk_iam::types::Tag> = tags
            .iter()
            .filter_map(|(k, v)| {
                aws_sdk_iam::types::Tag::builder()
                    .key(k)
                    .value(v)
                    .build()
                    .ok()
            })
            .collect();
        match self
            .iam
            .create_instance_profile()
            .instance_profile_name(name)
            .set_tags(Some(tags))
            .send()
            .await
        {
            Ok(_) => {}
            Err(e) if e.code() == Some("EntityAlreadyExists") => {}
            Err(e) => return Err(Ec2Error::from_sdk(e)),
        }
        self.iam
            .add_role_to_instance_profile()
            .instance_profile_name(name)
            .role_name(role)
            .send()
            .await
            .map_err(Ec2Error::from_sdk)?;
        Ok(())
    }

    async fn delete_instance_profile(&self, name: &str, roles: &[String]) -> Result<(), Ec2Error> {
        for role in roles {
            self.iam
                .remove_role_from_instance_profile()
                .instance_profile_name(name)
                .role_name(role)
                .send()
                .await
                .map_err(Ec2Error::from_sdk)?;
        }
        self.iam
            .delete_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
            .map_err(Ec2Error::from_sdk)?;
        Ok(())
    }
}

/// Load the AWS configuration from the standard chain (environment, profile, web identity,
/// container and instance metadata), with `endpoint_url` overriding every service's endpoint.
pub async fn load_config(endpoint_url: Option<&str>) -> aws_config::SdkConfig {
    loader(endpoint_url).await.load().await
}

/// The configuration loader [`load_config`] uses, for callers that set more (tests give
/// explicit region and credentials).
pub async fn loader(endpoint_url: Option<&str>) -> aws_config::ConfigLoader {
    // rustls with ring, as kube uses: no second TLS stack to build.
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(http)
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(5));
    if let Some(url) = endpoint_url {
        loader = loader.endpoint_url(url);
    }
    loader
}

/// The providerID of an EC2 instance, `aws:///<zone>/<instance-id>` (e.g.
/// `aws:///us-east-1a/i-0123456789abcdef0`), as the AWS cloud provider and kubelet set it.
pub fn provider_id(zone: &str, id: &str) -> String {
    format!("aws:///{zone}/{id}")
}

/// The instance id in a providerID, if it is an AWS one.
pub fn instance_id(provider_id: &str) -> Option<&str> {
    provider_id
        .strip_prefix("aws:///")
        .and_then(|rest| rest.rsplit('/').next())
        .filter(|id| id.starts_with("i-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn described_instances_carry_their_subnet_and_security_groups() {
        let described = t::Instance::builder()
            .instance_id("i-0abc")
            .subnet_id("subnet-0a")
            .security_groups(
                t::GroupIdentifier::builder()
                    .group_id("sg-1")
                    .group_name("node")
                    .build(),
            )
            .security_groups(t::GroupIdentifier::builder().group_id("sg-2").build())
            .build();
        let info = instance_info(&described);
        assert_eq!(info.id, "i-0abc");
        assert_eq!(info.subnet_id, "subnet-0a");
        assert_eq!(info.security_group_ids, ["sg-1", "sg-2"]);
        assert_eq!(info.capacity_reservation_id, None);
        assert_eq!(info.capacity_reservation_preference, None);
        assert_eq!(info.partition_number, None);
        let partitioned = t::Instance::builder()
            .placement(
                t::Placement::builder()
                    .availability_zone("us-east-1a")
                    .group_id("pg-0abc")
                    .partition_number(3)
                    .build(),
            )
            .build();
        assert_eq!(instance_info(&partitioned).partition_number, Some(3));
    }

    #[test]
    fn described_instances_carry_their_capacity_reservation() {
        let described = t::Instance::builder()
            .instance_id("i-0def")
            .capacity_reservation_id("cr-0123")
            .capacity_reservation_specification(
                t::CapacityReservationSpecificationResponse::builder()
                    .capacity_reservation_preference(
                        t::CapacityReservationPreference::CapacityReservationsOnly,
                    )
                    .build(),
            )
            .build();
        let info = instance_info(&described);
        assert_eq!(info.capacity_reservation_id.as_deref(), Some("cr-0123"));
        assert_eq!(
            info.capacity_reservation_preference.as_deref(),
            Some("capacity-reservations-only")
        );
    }
}
