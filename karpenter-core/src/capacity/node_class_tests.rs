//! Table tests of the capacity model against upstream's documented cases. Sources: the AWS
//! provider's `pkg/providers/instancetype/types.go` (formulas) and `suite_test.go` (cases),
//! `pkg/providers/amifamily/{al2,al2023,bottlerocket,windows,custom,resolver}.go` (default
//! block devices, feature flags), EKS's `max-pods-calculator.sh` (ENI formula).

use crds::EC2NodeClass;
use crds::labels as l;
use serde_json::{Value, json};

use crate::capacity::catalog::{Catalog, TypeSpec};
use crate::capacity::node_class::{
    Allocation, CapacityConfig, CapacityOptions, ConfigError, DEFAULT_VOLUME_BYTES, PodsLimit,
};

const MI: i64 = 1 << 20;
const GI: i64 = 1 << 30;

fn spec(name: &str) -> TypeSpec {
    Catalog::embedded()
        .expect("embedded catalog")
        .get(name)
        .unwrap_or_else(|| panic!("{name} in the catalog"))
        .spec
        .clone()
}

/// A node class with the given `spec` fields (selectors filled in).
fn node_class(extra: Value) -> EC2NodeClass {
    let mut spec = json!({
        "role": "KarpenterNodeRole",
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
    });
    if let (Some(base), Some(more)) = (spec.as_object_mut(), extra.as_object()) {
        base.extend(more.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "test"}, "spec": spec,
    }))
    .expect("valid EC2NodeClass")
}

fn config(extra: Value) -> CapacityConfig {
    CapacityConfig::from_node_class(&node_class(extra), CapacityOptions::default())
        .expect("capacity settings parse")
}

fn size(extra: Value, instance_type: &str) -> Allocation {
    config(extra).allocation(&spec(instance_type))
}

fn allocatable(a: &Allocation) -> crate::scheduling::resources::Resources {
    let mut r = a.capacity.clone();
    r.sub(&a.overhead);
    r
}

#[test]
fn default_kube_reserved_cpu_follows_upstream_ranges_per_size() {
    // types.go kubeReservedResources: 6% of core 1, 1% of core 2, 0.5% of cores 3-4, 0.25% after.
    for (instance_type, millicores) in [
        ("t3.micro", 70),     // 2 vCPUs: 60 + 10
        ("m5.xlarge", 80),    // 4: 60 + 10 + 10
        ("m5.2xlarge", 90),   // 8: 80 + 4 x 2.5
        ("m5.12xlarge", 190), // 48: 80 + 44 x 2.5
        ("m5.24xlarge", 310), // 96: 80 + 92 x 2.5
    ] {
        assert_eq!(
            size(json!({}), instance_type).overhead.cpu,
            millicores,
            "{instance_type}"
        );
    }
}

#[test]
fn m5_large_on_al2023_defaults() {
    // ENIs 3 x (10 IPv4 - 1) + 2 = 29 pods; kube-reserved memory 11Mi x 29 + 255Mi = 574Mi;
    // eviction 100Mi; VM overhead ceil(8192 x 7.5%) = 615Mi; root volume 20Gi (DefaultEBS).
    let a = size(json!({}), "m5.large");
    assert_eq!(a.pods_limit, PodsLimit::EniLimited(29));
    assert_eq!(a.capacity.memory, (8192 - 615) * MI);
    assert_eq!(a.capacity.ephemeral, DEFAULT_VOLUME_BYTES);
    assert_eq!(a.overhead.memory, (574 + 100) * MI);
    // kube-reserved 1Gi plus the 10% nodefs threshold.
    assert_eq!(a.overhead.ephemeral, GI + 2 * GI);
    assert_eq!(allocatable(&a).cpu, 2000 - 70);
}

#[test]
fn graviton_loses_64_mib_before_the_vm_overhead() {
    // types.go memory(): arm64 types keep 64 MiB for CMA; 8128 x 7.5% = 609.6 -> 610.
    assert_eq!(
        size(json!({}), "m7g.large").capacity.memory,
        (8192 - 64 - 610) * MI
    );
}

#[test]
fn max_pods_overrides_the_eni_limit_but_al2023_memory_follows_the_eni_limit() {
    // suite_test "should override max-pods value"; UsesENILimitedMemoryOverhead (AL2023).
    let a = size(json!({"kubelet": {"maxPods": 8}}), "m5.xlarge");
    assert_eq!(a.pods_limit, PodsLimit::MaxPods(8));
    assert_eq!(a.capacity.pods, 8);
    // m5.xlarge: 4 ENIs x 14 + 2 = 58 pods for the memory formula.
    assert_eq!(a.overhead.memory, (11 * 58 + 255 + 100) * MI);
    assert_eq!(a.pods_limit.explain(), "maxPods 8 (EC2NodeClass capped)");
}

#[test]
fn bottlerocket_memory_follows_the_configured_pods_and_ignores_pods_per_core() {
    let br = json!({"amiSelectorTerms": [{"alias": "bottlerocket@latest"}],
                    "kubelet": {"maxPods": 8, "podsPerCore": 1}});
    let a = size(br, "m5.xlarge");
    assert_eq!(a.capacity.pods, 8, "podsPerCore x 4 vCPUs would be 4");
    assert_eq!(a.overhead.memory, (11 * 8 + 255 + 100) * MI);
}

#[test]
fn pods_per_core_caps_the_pod_count() {
    // suite_test "should take the minimum of pods-per-core and max-pods".
    let a = size(json!({"kubelet": {"podsPerCore": 1}}), "m5.large");
    assert_eq!(a.pods_limit, PodsLimit::PodsPerCore(2));
    let a = size(json!({"kubelet": {"podsPerCore": 0}}), "m5.large");
    assert_eq!(a.pods_limit, PodsLimit::EniLimited(29), "0 disables it");
    let a = size(
        json!({"kubelet": {"maxPods": 20, "podsPerCore": 20}}),
        "m5.large",
    );
    assert_eq!(a.pods_limit, PodsLimit::MaxPods(20));
}

#[test]
fn windows_defaults_to_110_pods_and_a_50_gib_root() {
    // windows.go: no ENI-limited pod density, /dev/sda1 50Gi.
    let a = size(
        json!({"amiSelectorTerms": [{"alias": "windows2022@latest"}]}),
        "m5.large",
    );
    assert_eq!(a.pods_limit, PodsLimit::Default(110));
    assert_eq!(a.capacity.ephemeral, 50 * GI);
}

#[test]
fn windows_families_offer_amd64_types_as_windows_nodes_of_their_build() {
    // types.go getOS: a Windows family's types are `windows` (amd64 only) with its build.
    let catalog = Catalog::embedded().expect("embedded catalog");
    let zones = ["us-east-1a".to_string()].into_iter().collect();
    let types = |alias: &str| {
        let class = node_class(json!({"amiSelectorTerms": [{"alias": alias}]}));
        let config =
            CapacityConfig::from_node_class(&class, CapacityOptions::default()).expect("parses");
        catalog.instance_types(&zones, &config, |_, _, _| false)
    };
    let label = |types: &[std::sync::Arc<crate::capacity::InstanceType>], name: &str, key: &str| {
        types
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.labels.get(key).cloned())
    };
    let windows = types("windows2022@latest");
    assert_eq!(
        label(&windows, "m5.large", l::OS_LABEL),
        Some(Some("windows".to_string()))
    );
    assert_eq!(
        label(&windows, "m5.large", l::WINDOWS_BUILD_LABEL),
        Some(Some("10.0.20348".to_string()))
    );
    assert_eq!(label(&windows, "m6g.large", l::OS_LABEL), None);
    let linux = types("al2023@latest");
    assert_eq!(
        label(&linux, "m6g.large", l::OS_LABEL),
        Some(Some("linux".to_string()))
    );
    assert_eq!(
        label(&linux, "m5.large", l::WINDOWS_BUILD_LABEL),
        Some(None)
    );
}

#[test]
fn reserved_enis_never_go_below_zero() {
    // suite_test "should reserve ENIs when aws.reservedENIs is set": t3.large gives 0 pods.
    let options = CapacityOptions {
        reserved_enis: 1_000_000,
        ..CapacityOptions::default()
    };
    let c = CapacityConfig::from_node_class(&node_class(json!({})), options).expect("parses");
    assert_eq!(c.allocation(&spec("t3.large")).capacity.pods, 0);
    let one = CapacityOptions {
        reserved_enis: 1,
        ..CapacityOptions::default()
    };
    let c = CapacityConfig::from_node_class(&node_class(json!({})), one).expect("parses");
    assert_eq!(c.allocation(&spec("m5.large")).capacity.pods, 2 * 9 + 2);
}

#[test]
fn ephemeral_storage_comes_from_the_family_device_or_the_root_volume() {
    // amifamily: AL2023 /dev/xvda 20Gi; Bottlerocket's data volume /dev/xvdb 20Gi.
    let cases = [
        (json!({}), 20 * GI),
        (
            json!({"amiSelectorTerms": [{"alias": "bottlerocket@latest"}]}),
            20 * GI,
        ),
        (
            json!({"amiSelectorTerms": [{"alias": "bottlerocket@latest"}],
                   "blockDeviceMappings": [
                       {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "4Gi"}},
                       {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "100Gi"}}]}),
            100 * GI,
        ),
        (
            json!({"blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "300Gi"}}]}),
            300 * GI,
        ),
        (
            json!({"blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "80Gi"}}]}),
            80 * GI,
        ),
        // A mapping without a size falls back to the family default (suite_test "should
        // default to EBS defaults when volumeSize is not defined").
        (
            json!({"blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "ebs": {"snapshotID": "snap-1"}}]}),
            20 * GI,
        ),
        // Custom: the last mapping's size.
        (
            json!({"amiFamily": "Custom", "amiSelectorTerms": [{"id": "ami-123"}],
                   "blockDeviceMappings": [
                       {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "10Gi"}},
                       {"deviceName": "/dev/xvdc", "ebs": {"volumeSize": "40Gi"}}]}),
            40 * GI,
        ),
    ];
    for (extra, bytes) in cases {
        let shown = extra.to_string();
        assert_eq!(size(extra, "m5.large").capacity.ephemeral, bytes, "{shown}");
    }
}

#[test]
fn raid0_uses_the_instance_store_in_decimal_gigabytes() {
    let a = size(json!({"instanceStorePolicy": "RAID0"}), "m5d.large");
    assert_eq!(a.capacity.ephemeral, 75 * 1_000_000_000);
    // Without instance storage the root volume stays.
    let a = size(json!({"instanceStorePolicy": "RAID0"}), "m5.large");
    assert_eq!(a.capacity.ephemeral, 20 * GI);
}

#[test]
fn reserved_and_eviction_settings_override_the_defaults() {
    // suite_test "should override kube reserved when specified", "system reserved", and the
    // eviction threshold cases (quantity, percentage, 100% disables).
    let a = size(
        json!({"kubelet": {
            "kubeReserved": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "2Gi", "pid": "100"},
            "systemReserved": {"cpu": "500m", "memory": "512Mi"},
            "evictionHard": {"memory.available": "5%", "nodefs.available": "100%"},
            "evictionSoft": {"memory.available": "50%"}}}),
        "m5.xlarge",
    );
    let memory = a.capacity.memory;
    assert_eq!(a.overhead.cpu, 1500);
    let five_percent = (memory as f64 / 100.0 * 5.0).ceil() as i64;
    assert_eq!(a.overhead.memory, GI + 512 * MI + five_percent);
    assert_eq!(
        a.overhead.ephemeral,
        2 * GI,
        "nodefs 100% disables the threshold"
    );
    let a = size(
        json!({"kubelet": {"evictionHard": {"memory.available": "1Gi"}}}),
        "m5.large",
    );
    assert_eq!(a.overhead.memory, (574 * MI) + GI);
}

#[test]
fn accelerators_and_efa_become_capacity() {
    let cases: [(&str, &[(&str, i64)]); 6] = [
        ("g4ad.xlarge", &[(l::RESOURCE_AMD_GPU, 1)]),
        ("g4dn.xlarge", &[(l::RESOURCE_NVIDIA_GPU, 1)]),
        (
            "inf2.xlarge",
            &[
                (l::RESOURCE_AWS_NEURON, 1),
                (l::RESOURCE_AWS_NEURON_CORE, 2),
            ],
        ),
        (
            "trn1.32xlarge",
            &[
                (l::RESOURCE_AWS_NEURON, 16),
                (l::RESOURCE_AWS_NEURON_CORE, 32),
                (l::RESOURCE_EFA, 8),
            ],
        ),
        (
            "dl1.24xlarge",
            &[(l::RESOURCE_HABANA_GAUDI, 8), (l::RESOURCE_EFA, 4)],
        ),
        (
            "p4d.24xlarge",
            &[(l::RESOURCE_NVIDIA_GPU, 8), (l::RESOURCE_EFA, 4)],
        ),
    ];
    for (instance_type, expected) in cases {
        let a = size(json!({}), instance_type);
        for (resource, n) in expected {
            assert_eq!(a.capacity.get(resource), *n, "{instance_type} {resource}");
        }
    }
    assert_eq!(size(json!({}), "m5.large").capacity.extended.len(), 0);
}

#[test]
fn efa_only_interfaces_count_as_efa_and_take_eni_slots() {
    // suite_test "should calculate max pods according to EFA-only interfaces used".
    let nics = json!({"networkInterfaces": [
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"}]});
    let a = size(nics, "p4d.24xlarge");
    assert_eq!(a.capacity.get(l::RESOURCE_EFA), 1);
    let full = size(json!({}), "p4d.24xlarge").capacity.pods;
    assert_eq!(
        a.capacity.pods,
        full - 49,
        "one ENI of 50 IPv4 addresses fewer"
    );
}

#[test]
fn unreadable_settings_are_errors_not_guesses() {
    let bad = |extra: Value| {
        CapacityConfig::from_node_class(&node_class(extra), CapacityOptions::default())
            .expect_err("rejected")
    };
    assert!(matches!(
        bad(json!({"kubelet": {"maxPods": "max_pods * 2"}})),
        ConfigError::MaxPods(_)
    ));
    assert!(matches!(
        bad(json!({"kubelet": {"kubeReserved": {"cpu": "lots"}}})),
        ConfigError::Quantity {
            field: "kubeReserved",
            ..
        }
    ));
    assert!(matches!(
        bad(json!({"kubelet": {"evictionHard": {"memory.available": "150%"}}})),
        ConfigError::Percent { .. }
    ));
    assert_eq!(
        config(json!({"kubelet": {"maxPods": "12"}})).max_pods,
        Some(12),
        "an integer string is an integer"
    );
}

#[test]
fn vm_memory_overhead_percent_takes_that_share_of_memory() {
    let with = |fraction: f64| {
        CapacityConfig::from_node_class(
            &node_class(json!({})),
            CapacityOptions {
                vm_memory_overhead_percent: fraction,
                ..CapacityOptions::default()
            },
        )
        .expect("capacity settings parse")
        .allocation(&spec("m5.large"))
        .capacity
        .memory
    };
    // m5.large has 8 GiB: 7.5% keeps 614.4 MiB, 10% keeps 819.2 MiB.
    let (default, more) = (with(0.075), with(0.10));
    assert!(default > more, "{default} {more}");
    assert!(
        (default - more - (8 * GI) / 40).abs() <= 2 * MI,
        "{default} {more}"
    );
}
