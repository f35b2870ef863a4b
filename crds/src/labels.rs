//! Well-known strings Karpenter puts on or reads from Nodes, NodeClaims and EC2 instances:
//! labels, annotations, taints, finalizers, tags and resource names, plus the rules for which
//! label keys users may set (`pkg/apis/v1/labels.go`, `taints.go`, `aws:pkg/apis/v1/labels.go`).

use k8s_openapi::api::core::v1::Taint;

// ---------------------------------------------------------------------------------------------
// API groups

/// Karpenter's core API group; also the restricted label domain.
pub const KARPENTER_GROUP: &str = "karpenter.sh";
/// Group for compatibility annotations (`compatibility.karpenter.sh`).
pub const KARPENTER_COMPATIBILITY_GROUP: &str = "compatibility.karpenter.sh";
/// The AWS provider's API group (EC2NodeClass); also a restricted label domain.
pub const AWS_GROUP: &str = "karpenter.k8s.aws";
/// Group for the AWS provider's compatibility annotations.
pub const AWS_COMPATIBILITY_GROUP: &str = "compatibility.karpenter.k8s.aws";

// ---------------------------------------------------------------------------------------------
// Kubernetes well-known node labels

/// Availability zone of a node (GA key).
pub const TOPOLOGY_ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Region of a node (GA key).
pub const TOPOLOGY_REGION_LABEL: &str = "topology.kubernetes.io/region";
/// Instance type of a node (GA key).
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
/// CPU architecture of a node: `amd64` or `arm64`.
pub const ARCH_LABEL: &str = "kubernetes.io/arch";
/// Operating system of a node: `linux` or `windows`.
pub const OS_LABEL: &str = "kubernetes.io/os";
/// Windows build number (e.g. `10.0.20348`), only on Windows nodes.
pub const WINDOWS_BUILD_LABEL: &str = "node.kubernetes.io/windows-build";
/// Node hostname; restricted because Karpenter cannot know it before launch.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// Set to `karpenter` on a node while it drains so load balancers stop sending it traffic.
pub const EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS_LABEL: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";
/// Value Karpenter gives [`EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS_LABEL`].
pub const EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS_VALUE: &str = "karpenter";

/// Deprecated zone label, normalised to [`TOPOLOGY_ZONE_LABEL`].
pub const BETA_ZONE_LABEL: &str = "failure-domain.beta.kubernetes.io/zone";
/// Deprecated region label, normalised to [`TOPOLOGY_REGION_LABEL`].
pub const BETA_REGION_LABEL: &str = "failure-domain.beta.kubernetes.io/region";
/// Deprecated architecture label, normalised to [`ARCH_LABEL`].
pub const BETA_ARCH_LABEL: &str = "beta.kubernetes.io/arch";
/// Deprecated OS label, normalised to [`OS_LABEL`].
pub const BETA_OS_LABEL: &str = "beta.kubernetes.io/os";
/// Deprecated instance-type label, normalised to [`INSTANCE_TYPE_LABEL`].
pub const BETA_INSTANCE_TYPE_LABEL: &str = "beta.kubernetes.io/instance-type";

/// `kubernetes.io/arch` value for x86-64.
pub const ARCH_AMD64: &str = "amd64";
/// `kubernetes.io/arch` value for 64-bit ARM.
pub const ARCH_ARM64: &str = "arm64";
/// `kubernetes.io/os` value for Linux.
pub const OS_LINUX: &str = "linux";
/// `kubernetes.io/os` value for Windows.
pub const OS_WINDOWS: &str = "windows";

// ---------------------------------------------------------------------------------------------
// Karpenter core labels

/// Name of the NodePool that owns a NodeClaim/Node. Users may not set it.
pub const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";
/// Purchase option of a node: [`CAPACITY_TYPE_ON_DEMAND`], [`CAPACITY_TYPE_SPOT`] or
/// [`CAPACITY_TYPE_RESERVED`].
pub const CAPACITY_TYPE_LABEL: &str = "karpenter.sh/capacity-type";
/// Set to `true` on a node once Karpenter has registered it.
pub const NODE_REGISTERED_LABEL: &str = "karpenter.sh/registered";
/// Set to `true` on a node once Karpenter considers it initialized.
pub const NODE_INITIALIZED_LABEL: &str = "karpenter.sh/initialized";
/// A user sets this to `true` on a node to stop Karpenter syncing NodeClaim taints onto it.
pub const NODE_DO_NOT_SYNC_TAINTS_LABEL: &str = "karpenter.sh/do-not-sync-taints";

/// `karpenter.sh/capacity-type` value for on-demand instances.
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
/// `karpenter.sh/capacity-type` value for spot instances.
pub const CAPACITY_TYPE_SPOT: &str = "spot";
/// `karpenter.sh/capacity-type` value for capacity reservations.
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";
/// All capacity types Karpenter knows, in the order upstream lists them.
pub const CAPACITY_TYPES: &[&str] = &[
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_SPOT,
    CAPACITY_TYPE_RESERVED,
];

/// The label marking a Node as managed through a node class: `<group>/<lowercase kind>`, e.g.
/// `karpenter.k8s.aws/ec2nodeclass` (`NodeClassLabelKey` in `pkg/apis/v1/labels.go`).
pub fn node_class_label_key(group: &str, kind: &str) -> String {
    format!("{group}/{}", kind.to_lowercase())
}

// ---------------------------------------------------------------------------------------------
// Karpenter core annotations

/// On a pod: `"true"`, or a positive Go duration measured from pod start, blocks voluntary
/// disruption of its node. On a node: only `"true"`.
pub const DO_NOT_DISRUPT_ANNOTATION: &str = "karpenter.sh/do-not-disrupt";
/// Names the cloud provider that created a resource (`compatibility.karpenter.sh/provider`).
pub const PROVIDER_COMPATIBILITY_ANNOTATION: &str = "compatibility.karpenter.sh/provider";
/// Hash of a NodePool's `spec.template`, stamped on the NodePool and its NodeClaims for drift.
pub const NODEPOOL_HASH_ANNOTATION: &str = "karpenter.sh/nodepool-hash";
/// Version of the NodePool hash algorithm a hash was computed with.
pub const NODEPOOL_HASH_VERSION_ANNOTATION: &str = "karpenter.sh/nodepool-hash-version";
/// Upstream Karpenter's current NodePool hash version (`NodePoolHashVersion`; v1 Mar 2024 → v2
/// Apr 2024 → v3 with the v1 API). A mismatch makes Karpenter re-stamp non-drifted NodeClaims.
/// This project hashes differently and uses [`crate::hash::NODEPOOL_HASH_VERSION`].
pub const UPSTREAM_NODEPOOL_HASH_VERSION: &str = "v3";
/// RFC 3339 time by which a deleting NodeClaim's node is forcibly drained: deletion time plus
/// `terminationGracePeriod`.
pub const NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION: &str =
    "karpenter.sh/nodeclaim-termination-timestamp";
/// `true` when the scheduler relaxed `minValues` to launch this NodeClaim, else `false`.
pub const NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION: &str =
    "karpenter.sh/nodeclaim-min-values-relaxed";
/// Comma-separated DRA driver names whose devices were allocated to pods on this NodeClaim.
pub const REQUESTED_DRA_DRIVERS_ANNOTATION: &str = "karpenter.sh/requested-dra-drivers";
/// Set on a NodeClaim when a NodeOverlay changed its price (`pkg/apis/v1alpha1/labels.go`).
pub const PRICE_OVERLAY_APPLIED_ANNOTATION: &str = "karpenter.sh/price-overlay-applied";
/// Set on a NodeClaim when a NodeOverlay changed its capacity (`pkg/apis/v1alpha1/labels.go`).
pub const CAPACITY_OVERLAY_APPLIED_ANNOTATION: &str = "karpenter.sh/capacity-overlay-applied";

// ---------------------------------------------------------------------------------------------
// Taints

/// Taint key Karpenter uses to cordon a node it is disrupting or terminating.
pub const DISRUPTED_TAINT_KEY: &str = "karpenter.sh/disrupted";
/// Taint key a node must register with; Karpenter removes it once the node is registered.
pub const UNREGISTERED_TAINT_KEY: &str = "karpenter.sh/unregistered";
/// Taint effect `NoSchedule`.
pub const TAINT_EFFECT_NO_SCHEDULE: &str = "NoSchedule";
/// Taint effect `PreferNoSchedule`.
pub const TAINT_EFFECT_PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";
/// Taint effect `NoExecute`.
pub const TAINT_EFFECT_NO_EXECUTE: &str = "NoExecute";
/// All valid taint effects.
pub const TAINT_EFFECTS: &[&str] = &[
    TAINT_EFFECT_NO_SCHEDULE,
    TAINT_EFFECT_PREFER_NO_SCHEDULE,
    TAINT_EFFECT_NO_EXECUTE,
];
/// Taint the node lifecycle controller sets while a node is not ready.
pub const NODE_NOT_READY_TAINT_KEY: &str = "node.kubernetes.io/not-ready";
/// Taint the node lifecycle controller sets while a node is unreachable.
pub const NODE_UNREACHABLE_TAINT_KEY: &str = "node.kubernetes.io/unreachable";
/// Taint (value `true`) the kubelet sets until an external cloud controller initializes the node.
pub const EXTERNAL_CLOUD_PROVIDER_TAINT_KEY: &str =
    "node.cloudprovider.kubernetes.io/uninitialized";
/// Taint keys with this prefix (Node Readiness Controller) are expected to go away by themselves.
pub const READINESS_TAINT_KEY_PREFIX: &str = "readiness.k8s.io/";

/// `karpenter.sh/disrupted:NoSchedule`, applied while a node is disrupted or terminated.
pub fn disrupted_no_schedule_taint() -> Taint {
    Taint {
        key: DISRUPTED_TAINT_KEY.to_string(),
        effect: TAINT_EFFECT_NO_SCHEDULE.to_string(),
        ..Taint::default()
    }
}

/// `karpenter.sh/unregistered:NoExecute`, which a node carries until Karpenter registers it.
pub fn unregistered_no_execute_taint() -> Taint {
    Taint {
        key: UNREGISTERED_TAINT_KEY.to_string(),
        effect: TAINT_EFFECT_NO_EXECUTE.to_string(),
        ..Taint::default()
    }
}

/// Taints expected while a node initializes, which therefore do not block initialization
/// (`KnownEphemeralTaints` in `pkg/scheduling/taints.go`), as `(key, value, effect)`.
pub const KNOWN_EPHEMERAL_TAINTS: &[(&str, Option<&str>, &str)] = &[
    (NODE_NOT_READY_TAINT_KEY, None, TAINT_EFFECT_NO_SCHEDULE),
    (NODE_NOT_READY_TAINT_KEY, None, TAINT_EFFECT_NO_EXECUTE),
    (NODE_UNREACHABLE_TAINT_KEY, None, TAINT_EFFECT_NO_SCHEDULE),
    (
        EXTERNAL_CLOUD_PROVIDER_TAINT_KEY,
        Some("true"),
        TAINT_EFFECT_NO_SCHEDULE,
    ),
    (UNREGISTERED_TAINT_KEY, None, TAINT_EFFECT_NO_EXECUTE),
];

/// Whether a taint is one of [`KNOWN_EPHEMERAL_TAINTS`] (matching key, value and effect, as
/// `Taint.MatchTaint` does: key and effect, plus value) or has the
/// [`READINESS_TAINT_KEY_PREFIX`].
pub fn is_known_ephemeral_taint(taint: &Taint) -> bool {
    let value = taint.value.as_deref().unwrap_or("");
    KNOWN_EPHEMERAL_TAINTS
        .iter()
        .any(|(key, want_value, effect)| {
            taint.key == *key && taint.effect == *effect && value == want_value.unwrap_or("")
        })
        || taint.key.starts_with(READINESS_TAINT_KEY_PREFIX)
}

// ---------------------------------------------------------------------------------------------
// Finalizers

/// Finalizer on NodeClaims and Nodes; removed once the instance is gone.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";
/// Finalizer on EC2NodeClasses; removed once no NodeClaim uses the class and its instance
/// profiles and launch templates are deleted.
pub const EC2NODECLASS_TERMINATION_FINALIZER: &str = "karpenter.k8s.aws/termination";

// ---------------------------------------------------------------------------------------------
// AWS labels (aws:pkg/apis/v1/labels.go)

/// Capacity reservation an instance launched into.
pub const CAPACITY_RESERVATION_ID_LABEL: &str = "karpenter.k8s.aws/capacity-reservation-id";
/// Capacity reservation type: `default` or `capacity-block`.
pub const CAPACITY_RESERVATION_TYPE_LABEL: &str = "karpenter.k8s.aws/capacity-reservation-type";
/// Whether the capacity reservation is interruptible.
pub const CAPACITY_RESERVATION_INTERRUPTIBLE_LABEL: &str =
    "karpenter.k8s.aws/capacity-reservation-interruptible";
/// Hypervisor: `nitro` or `xen` (empty for bare metal).
pub const INSTANCE_HYPERVISOR_LABEL: &str = "karpenter.k8s.aws/instance-hypervisor";
/// Whether the instance encrypts traffic in transit.
pub const INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED_LABEL: &str =
    "karpenter.k8s.aws/instance-encryption-in-transit-supported";
/// Whether Nitro Enclaves (nitro-sandbox) are supported.
pub const INSTANCE_NITRO_ENCLAVES_SUPPORTED_LABEL: &str = "karpenter.k8s.aws/nitro-sandbox";
/// Instance category, e.g. `c`, `m`, `r`.
pub const INSTANCE_CATEGORY_LABEL: &str = "karpenter.k8s.aws/instance-category";
/// Whether the instance is a flex instance.
pub const INSTANCE_CAPABILITY_FLEX_LABEL: &str = "karpenter.k8s.aws/instance-capability-flex";
/// Instance family, e.g. `m5`.
pub const INSTANCE_FAMILY_LABEL: &str = "karpenter.k8s.aws/instance-family";
/// Instance generation, e.g. `5`.
pub const INSTANCE_GENERATION_LABEL: &str = "karpenter.k8s.aws/instance-generation";
/// Local NVMe storage in GiB.
pub const INSTANCE_LOCAL_NVME_LABEL: &str = "karpenter.k8s.aws/instance-local-nvme";
/// Instance size, e.g. `2xlarge`.
pub const INSTANCE_SIZE_LABEL: &str = "karpenter.k8s.aws/instance-size";
/// Number of vCPUs as an integer, e.g. `2` for `m5.large` (works with `Gt`/`Lt`).
pub const INSTANCE_CPU_LABEL: &str = "karpenter.k8s.aws/instance-cpu";
/// CPU manufacturer: `intel`, `amd`, `aws`.
pub const INSTANCE_CPU_MANUFACTURER_LABEL: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
/// Sustained clock speed in MHz.
pub const INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ_LABEL: &str =
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz";
/// Memory in MiB as an integer, e.g. `8192` for `m5.large`.
pub const INSTANCE_MEMORY_LABEL: &str = "karpenter.k8s.aws/instance-memory";
/// EBS bandwidth in Mbps.
pub const INSTANCE_EBS_BANDWIDTH_LABEL: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
/// Network bandwidth in Mbps.
pub const INSTANCE_NETWORK_BANDWIDTH_LABEL: &str = "karpenter.k8s.aws/instance-network-bandwidth";
/// GPU model name, e.g. `t4`.
pub const INSTANCE_GPU_NAME_LABEL: &str = "karpenter.k8s.aws/instance-gpu-name";
/// GPU manufacturer, e.g. `nvidia`.
pub const INSTANCE_GPU_MANUFACTURER_LABEL: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
/// Number of GPUs, e.g. `1`; absent on instance types without GPUs.
pub const INSTANCE_GPU_COUNT_LABEL: &str = "karpenter.k8s.aws/instance-gpu-count";
/// GPU memory in MiB.
pub const INSTANCE_GPU_MEMORY_LABEL: &str = "karpenter.k8s.aws/instance-gpu-memory";
/// Accelerator (e.g. Inferentia) name.
pub const INSTANCE_ACCELERATOR_NAME_LABEL: &str = "karpenter.k8s.aws/instance-accelerator-name";
/// Accelerator manufacturer, `aws` for Inferentia and Trainium; absent without accelerators.
pub const INSTANCE_ACCELERATOR_MANUFACTURER_LABEL: &str =
    "karpenter.k8s.aws/instance-accelerator-manufacturer";
/// Number of accelerator chips (Inferentia, Trainium); absent without accelerators.
pub const INSTANCE_ACCELERATOR_COUNT_LABEL: &str = "karpenter.k8s.aws/instance-accelerator-count";
/// Tenancy: `default` or `dedicated`.
pub const INSTANCE_TENANCY_LABEL: &str = "karpenter.k8s.aws/instance-tenancy";
/// Id of the placement group the instance launched into, e.g. `pg-0123456789abcdef0`.
pub const PLACEMENT_GROUP_ID_LABEL: &str = "karpenter.k8s.aws/placement-group-id";
/// Placement group partition number.
pub const PLACEMENT_GROUP_PARTITION_LABEL: &str = "karpenter.k8s.aws/placement-group-partition";
/// Name of the EC2NodeClass a node was launched from.
pub const EC2NODECLASS_LABEL: &str = "karpenter.k8s.aws/ec2nodeclass";
/// Availability zone id, e.g. `use1-az1`.
pub const TOPOLOGY_ZONE_ID_LABEL: &str = "topology.k8s.aws/zone-id";

// ---------------------------------------------------------------------------------------------
// KWOK provider labels (kwok/apis/v1alpha1), for simulated clusters

/// API group of upstream's simulated (KWOK) provider.
pub const KWOK_GROUP: &str = "karpenter.kwok.sh";
/// Node-class label of KWOK nodes (`<group>/<lowercase kind>`).
pub const KWOK_NODECLASS_LABEL: &str = "karpenter.kwok.sh/kwoknodeclass";
/// KWOK instance size, `<vCPUs>x`, e.g. `4x` for `c-4x-amd64-linux` (`kwok/cloudprovider`).
pub const KWOK_INSTANCE_SIZE_LABEL: &str = "karpenter.kwok.sh/instance-size";
/// KWOK instance family: `c`, `s` or `m`.
pub const KWOK_INSTANCE_FAMILY_LABEL: &str = "karpenter.kwok.sh/instance-family";
/// KWOK instance vCPUs: the type's cpu quantity as written, e.g. `4`.
pub const KWOK_INSTANCE_CPU_LABEL: &str = "karpenter.kwok.sh/instance-cpu";
/// KWOK instance memory: the type's memory quantity as written, e.g. `8Gi`.
pub const KWOK_INSTANCE_MEMORY_LABEL: &str = "karpenter.kwok.sh/instance-memory";

// ---------------------------------------------------------------------------------------------
// AWS annotations and tags

/// Hash of an EC2NodeClass spec, stamped on the class and its NodeClaims for drift.
pub const EC2NODECLASS_HASH_ANNOTATION: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
/// Version of the EC2NodeClass hash algorithm a hash was computed with.
pub const EC2NODECLASS_HASH_VERSION_ANNOTATION: &str =
    "karpenter.k8s.aws/ec2nodeclass-hash-version";
/// Upstream Karpenter's current EC2NodeClass hash version (`EC2NodeClassHashVersion`; v6
/// hashes the kubelet config as a string and includes the CA bundle). This project hashes
/// differently and uses [`crate::hash::EC2NODECLASS_HASH_VERSION`].
pub const UPSTREAM_EC2NODECLASS_HASH_VERSION: &str = "v6";
/// `true` once the instance has its `Name` and `karpenter.sh/nodeclaim` tags.
pub const INSTANCE_TAGGED_ANNOTATION: &str = "karpenter.k8s.aws/tagged";
/// Name of the instance profile Karpenter created for an EC2NodeClass.
pub const INSTANCE_PROFILE_ANNOTATION: &str = "karpenter.k8s.aws/instance-profile-name";
/// Records that instances were tagged with the cluster name (compatibility migration).
pub const CLUSTER_NAME_TAGGED_COMPATIBILITY_ANNOTATION: &str =
    "compatibility.karpenter.k8s.aws/cluster-name-tagged";

/// EC2 tag holding the NodeClaim name.
pub const NODECLAIM_TAG_KEY: &str = "karpenter.sh/nodeclaim";
/// EC2 tag holding the node name.
pub const NAME_TAG_KEY: &str = "Name";
/// EC2 tag holding the NodePool name.
pub const NODEPOOL_TAG_KEY: &str = NODEPOOL_LABEL;
/// EC2 tag holding the EC2NodeClass name.
pub const EC2NODECLASS_TAG_KEY: &str = EC2NODECLASS_LABEL;
/// EC2 tag holding the EKS cluster name.
pub const EKS_CLUSTER_NAME_TAG_KEY: &str = "eks:eks-cluster-name";
/// Prefix of the `kubernetes.io/cluster/<name>=owned` tag.
pub const CLUSTER_TAG_KEY_PREFIX: &str = "kubernetes.io/cluster/";

// ---------------------------------------------------------------------------------------------
// Resource names

/// Pseudo-resource in NodePool `limits` and `status.resources`: the node count.
pub const RESOURCE_NODES: &str = "nodes";
/// CPU, as a quantity of cores (`500m`, `2`); the scheduler counts it in millicores.
pub const RESOURCE_CPU: &str = "cpu";
/// Memory, in bytes.
pub const RESOURCE_MEMORY: &str = "memory";
/// Local ephemeral storage, in bytes.
pub const RESOURCE_EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// How many pods a node can run (kubelet `maxPods`); every pod requests one.
pub const RESOURCE_PODS: &str = "pods";
/// NVIDIA GPUs.
pub const RESOURCE_NVIDIA_GPU: &str = "nvidia.com/gpu";
/// AMD GPUs.
pub const RESOURCE_AMD_GPU: &str = "amd.com/gpu";
/// AWS Neuron (Inferentia/Trainium) devices.
pub const RESOURCE_AWS_NEURON: &str = "aws.amazon.com/neuron";
/// AWS Neuron cores.
pub const RESOURCE_AWS_NEURON_CORE: &str = "aws.amazon.com/neuroncore";
/// Habana Gaudi accelerators.
pub const RESOURCE_HABANA_GAUDI: &str = "habana.ai/gaudi";
/// Branch ENIs for security groups for pods.
pub const RESOURCE_AWS_POD_ENI: &str = "vpc.amazonaws.com/pod-eni";
/// Private IPv4 addresses (Windows).
pub const RESOURCE_PRIVATE_IPV4_ADDRESS: &str = "vpc.amazonaws.com/PrivateIPv4Address";
/// Elastic Fabric Adapters.
pub const RESOURCE_EFA: &str = "vpc.amazonaws.com/efa";
/// Nitro Enclaves sandboxes.
pub const RESOURCE_NITRO_SANDBOX: &str = "eks.amazonaws.com/nitro-sandbox";
/// Resources every instance type reports (core `WellKnownResources` plus the AWS additions).
pub const WELL_KNOWN_RESOURCES: &[&str] = &[
    RESOURCE_CPU,
    RESOURCE_MEMORY,
    RESOURCE_EPHEMERAL_STORAGE,
    RESOURCE_PODS,
    RESOURCE_AWS_POD_ENI,
    RESOURCE_NVIDIA_GPU,
    RESOURCE_AMD_GPU,
    RESOURCE_AWS_NEURON,
    RESOURCE_AWS_NEURON_CORE,
    RESOURCE_HABANA_GAUDI,
    RESOURCE_EFA,
];

// ---------------------------------------------------------------------------------------------
// Label rules

/// Label keys Karpenter understands in requirements and on nodes: the core `WellKnownLabels`
/// plus what the AWS provider registers in its `init()`.
pub const WELL_KNOWN_LABELS: &[&str] = &[
    NODEPOOL_LABEL,
    TOPOLOGY_ZONE_LABEL,
    TOPOLOGY_REGION_LABEL,
    INSTANCE_TYPE_LABEL,
    ARCH_LABEL,
    OS_LABEL,
    CAPACITY_TYPE_LABEL,
    WINDOWS_BUILD_LABEL,
    CAPACITY_RESERVATION_ID_LABEL,
    CAPACITY_RESERVATION_TYPE_LABEL,
    CAPACITY_RESERVATION_INTERRUPTIBLE_LABEL,
    INSTANCE_HYPERVISOR_LABEL,
    INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED_LABEL,
    INSTANCE_NITRO_ENCLAVES_SUPPORTED_LABEL,
    INSTANCE_CATEGORY_LABEL,
    INSTANCE_CAPABILITY_FLEX_LABEL,
    INSTANCE_FAMILY_LABEL,
    INSTANCE_GENERATION_LABEL,
    INSTANCE_SIZE_LABEL,
    INSTANCE_LOCAL_NVME_LABEL,
    INSTANCE_CPU_LABEL,
    INSTANCE_CPU_MANUFACTURER_LABEL,
    INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ_LABEL,
    INSTANCE_MEMORY_LABEL,
    INSTANCE_EBS_BANDWIDTH_LABEL,
    INSTANCE_NETWORK_BANDWIDTH_LABEL,
    INSTANCE_GPU_NAME_LABEL,
    INSTANCE_GPU_MANUFACTURER_LABEL,
    INSTANCE_GPU_COUNT_LABEL,
    INSTANCE_GPU_MEMORY_LABEL,
    INSTANCE_ACCELERATOR_NAME_LABEL,
    INSTANCE_ACCELERATOR_MANUFACTURER_LABEL,
    INSTANCE_ACCELERATOR_COUNT_LABEL,
    TOPOLOGY_ZONE_ID_LABEL,
    INSTANCE_TENANCY_LABEL,
    PLACEMENT_GROUP_ID_LABEL,
    PLACEMENT_GROUP_PARTITION_LABEL,
];

/// Label domains reserved for Karpenter and its provider; only well-known keys in them (or in
/// their subdomains) may be used.
pub const RESTRICTED_LABEL_DOMAINS: &[&str] = &[KARPENTER_GROUP, AWS_GROUP];

/// Individual label keys users may not set because they would interfere with provisioning.
pub const RESTRICTED_LABELS: &[&str] = &[HOSTNAME_LABEL];

/// Deprecated label keys and the GA keys Karpenter translates them to (`NormalizedLabels`).
pub const NORMALIZED_LABELS: &[(&str, &str)] = &[
    (BETA_ZONE_LABEL, TOPOLOGY_ZONE_LABEL),
    (BETA_ARCH_LABEL, ARCH_LABEL),
    (BETA_OS_LABEL, OS_LABEL),
    (BETA_INSTANCE_TYPE_LABEL, INSTANCE_TYPE_LABEL),
    (BETA_REGION_LABEL, TOPOLOGY_REGION_LABEL),
];

/// Label keys whose values must come from a known set (`WellKnownValuesForRequirements`).
pub const WELL_KNOWN_VALUES: &[(&str, &[&str])] = &[
    (CAPACITY_TYPE_LABEL, CAPACITY_TYPES),
    (INSTANCE_TENANCY_LABEL, &["dedicated", "default"]),
];

/// Labels that Karpenter's offerings carry (`WellKnownLabelsForOfferings`).
pub const WELL_KNOWN_LABELS_FOR_OFFERINGS: &[&str] = &[TOPOLOGY_ZONE_LABEL, CAPACITY_TYPE_LABEL];

/// Whether `key` is in [`WELL_KNOWN_LABELS`].
pub fn is_well_known_label(key: &str) -> bool {
    WELL_KNOWN_LABELS.contains(&key)
}

/// Translates a deprecated beta label key to its GA key; other keys are returned unchanged.
pub fn normalize_label_key(key: &str) -> &str {
    NORMALIZED_LABELS
        .iter()
        .find(|(beta, _)| *beta == key)
        .map_or(key, |(_, ga)| ga)
}

/// The known values for `key` when Karpenter restricts them (see [`WELL_KNOWN_VALUES`]).
pub fn well_known_values(key: &str) -> Option<&'static [&'static str]> {
    WELL_KNOWN_VALUES
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, values)| *values)
}

/// The domain (prefix before `/`) of a label key, or `""` when it has none.
pub fn label_domain(key: &str) -> &str {
    key.split_once('/').map_or("", |(domain, _)| domain)
}

/// Whether users may not use `key` in NodePool labels or requirements (`IsRestrictedLabel`):
/// well-known keys are allowed; keys whose domain is, or is a subdomain of, a
/// [`RESTRICTED_LABEL_DOMAINS`] entry are restricted, as are [`RESTRICTED_LABELS`].
///
/// Note that `karpenter.sh/nodepool` is well-known and therefore not restricted here; NodePool
/// validation forbids it separately.
pub fn is_restricted_label(key: &str) -> bool {
    if is_well_known_label(key) {
        return false;
    }
    let domain = label_domain(key);
    let in_restricted_domain = RESTRICTED_LABEL_DOMAINS.iter().any(|restricted| {
        domain == *restricted
            || domain
                .strip_suffix(restricted)
                .is_some_and(|prefix| prefix.ends_with('.'))
    });
    in_restricted_domain || RESTRICTED_LABELS.contains(&key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restricted_labels() {
        let cases: &[(&str, bool)] = &[
            ("karpenter.sh/nodepool", false),
            ("karpenter.sh/capacity-type", false),
            ("karpenter.sh/custom", true),
            ("foo.karpenter.sh/custom", true),
            ("notkarpenter.sh/custom", false),
            ("karpenter.k8s.aws/instance-family", false),
            ("karpenter.k8s.aws/ec2nodeclass", true),
            ("karpenter.k8s.aws/custom", true),
            ("kubernetes.io/hostname", true),
            ("topology.kubernetes.io/zone", false),
            ("topology.k8s.aws/zone-id", false),
            ("example.com/team", false),
            ("team", false),
        ];
        for (key, want) in cases {
            assert_eq!(is_restricted_label(key), *want, "{key}");
        }
    }

    #[test]
    fn normalizes_beta_keys() {
        assert_eq!(normalize_label_key(BETA_ZONE_LABEL), TOPOLOGY_ZONE_LABEL);
        assert_eq!(
            normalize_label_key(BETA_INSTANCE_TYPE_LABEL),
            INSTANCE_TYPE_LABEL
        );
        assert_eq!(normalize_label_key("example.com/x"), "example.com/x");
    }

    #[test]
    fn ephemeral_taints() {
        let mut t = unregistered_no_execute_taint();
        assert!(is_known_ephemeral_taint(&t));
        t.effect = TAINT_EFFECT_NO_SCHEDULE.into();
        assert!(!is_known_ephemeral_taint(&t));
        let cloud = Taint {
            key: EXTERNAL_CLOUD_PROVIDER_TAINT_KEY.into(),
            value: Some("true".into()),
            effect: TAINT_EFFECT_NO_SCHEDULE.into(),
            ..Taint::default()
        };
        assert!(is_known_ephemeral_taint(&cloud));
        let readiness = Taint {
            key: "readiness.k8s.io/cni".into(),
            effect: TAINT_EFFECT_NO_EXECUTE.into(),
            ..Taint::default()
        };
        assert!(is_known_ephemeral_taint(&readiness));
        assert!(!is_known_ephemeral_taint(&disrupted_no_schedule_taint()));
    }

    #[test]
    fn node_class_label() {
        assert_eq!(
            node_class_label_key(AWS_GROUP, "EC2NodeClass"),
            EC2NODECLASS_LABEL
        );
    }
}
