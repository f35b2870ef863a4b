//! The SSM parameters and image requirements of each alias family, against the paths AWS
//! publishes (`aws:pkg/providers/amifamily/*.go`).

use crds::ec2nodeclass::Alias;

use super::alias::*;

fn alias(s: &str) -> Alias {
    Alias::parse(s).expect("a well-formed alias")
}

/// `(parameter, requirement sets as "key op" strings)` of each source.
fn described(sources: &[AliasSource]) -> Vec<(String, Vec<Vec<String>>)> {
    sources
        .iter()
        .map(|s| {
            let sets = s
                .requirements
                .iter()
                .map(|set| {
                    set.iter()
                        .map(|r| {
                            let values = r.values.clone().unwrap_or_default().join(",");
                            format!("{} {} {values}", r.key, r.operator)
                                .trim_end()
                                .to_string()
                        })
                        .collect()
                })
                .collect();
            (s.parameter.clone(), sets)
        })
        .collect()
}

const STANDARD: [&str; 2] = [
    "karpenter.k8s.aws/instance-accelerator-count DoesNotExist",
    "karpenter.k8s.aws/instance-gpu-count DoesNotExist",
];
const NVIDIA: [&str; 1] = ["karpenter.k8s.aws/instance-gpu-count Exists"];
const NEURON: [&str; 1] = ["karpenter.k8s.aws/instance-accelerator-count Exists"];

fn sets(sets: &[&[&str]]) -> Vec<Vec<String>> {
    sets.iter()
        .map(|s| s.iter().map(|r| r.to_string()).collect())
        .collect()
}

#[test]
fn al2023_latest_reads_each_variant_recommended_per_architecture() {
    let got = described(&alias_sources(&alias("al2023@latest"), "1.32"));
    let path = |arch: &str, v: &str| {
        format!(
            "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/{arch}/{v}/recommended/image_id"
        )
    };
    assert_eq!(
        got,
        vec![
            (path("x86_64", "standard"), sets(&[&STANDARD])),
            (path("x86_64", "nvidia"), sets(&[&NVIDIA])),
            (path("x86_64", "neuron"), sets(&[&NEURON])),
            (path("arm64", "standard"), sets(&[&STANDARD])),
            (path("arm64", "nvidia"), sets(&[&NVIDIA])),
        ]
    );
}

#[test]
fn al2023_pin_names_the_release_of_each_variant() {
    let sources = alias_sources(&alias("al2023@v20260301"), "1.32");
    let nvidia_arm = sources
        .iter()
        .find(|s| s.arch == "arm64" && s.parameter.contains("/nvidia/"))
        .expect("an arm64 NVIDIA image");
    assert_eq!(
        nvidia_arm.parameter,
        "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/arm64/nvidia/amazon-eks-node-al2023-arm64-nvidia-1.32-v20260301/image_id"
    );
    assert_eq!(
        nvidia_arm.name_pattern,
        "amazon-eks-node-al2023-arm64-nvidia-1.32-v20260301"
    );
    let latest = alias_sources(&alias("al2023@latest"), "1.32");
    assert_eq!(
        latest[0].name_pattern,
        "amazon-eks-node-al2023-x86_64-standard-1.32-*"
    );
}

#[test]
fn al2_gpu_image_serves_both_nvidia_and_neuron_types() {
    let got = described(&alias_sources(&alias("al2@v20260301"), "1.32"));
    let path = |dir: &str, leaf: &str| {
        format!("/aws/service/eks/optimized-ami/1.32/{dir}/{leaf}/image_id")
    };
    assert_eq!(
        got,
        vec![
            (
                path("amazon-linux-2", "amazon-eks-node-1.32-v20260301"),
                sets(&[&STANDARD])
            ),
            (
                path(
                    "amazon-linux-2-arm64",
                    "amazon-eks-arm64-node-1.32-v20260301"
                ),
                sets(&[&STANDARD])
            ),
            (
                path("amazon-linux-2-gpu", "amazon-eks-gpu-node-1.32-v20260301"),
                sets(&[&NEURON, &NVIDIA])
            ),
        ]
    );
    let latest = alias_sources(&alias("al2@latest"), "1.32");
    assert!(
        latest
            .iter()
            .all(|s| s.parameter.ends_with("/recommended/image_id"))
    );
}

#[test]
fn bottlerocket_reads_the_nvidia_flavour_and_drops_the_version_v() {
    let got = described(&alias_sources(&alias("bottlerocket@v1.30.0"), "1.32"));
    let path = |flavour: &str, arch: &str| {
        format!("/aws/service/bottlerocket/aws-k8s-1.32{flavour}/{arch}/1.30.0/image_id")
    };
    assert_eq!(
        got,
        vec![
            (path("", "x86_64"), sets(&[&STANDARD, &NEURON])),
            (path("", "arm64"), sets(&[&STANDARD])),
            (path("-nvidia", "x86_64"), sets(&[&NVIDIA])),
            (path("-nvidia", "arm64"), sets(&[&NVIDIA])),
        ]
    );
    let latest = alias_sources(&alias("bottlerocket@latest"), "1.32");
    assert_eq!(
        latest[2].parameter,
        "/aws/service/bottlerocket/aws-k8s-1.32-nvidia/x86_64/latest/image_id"
    );
    assert_eq!(latest[1].name_pattern, "bottlerocket-aws-k8s-1.32-arm64-v*");
}

#[test]
fn windows_reads_the_latest_core_image_and_requires_windows_nodes_of_its_build() {
    for (family, year, build) in [
        ("windows2019", "2019", "10.0.17763"),
        ("windows2022", "2022", "10.0.20348"),
        ("windows2025", "2025", "10.0.26100"),
    ] {
        let got = described(&alias_sources(&alias(&format!("{family}@latest")), "1.35"));
        assert_eq!(
            got,
            vec![(
                format!(
                    "/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-1.35/image_id"
                ),
                vec![vec![
                    "kubernetes.io/os In windows".to_string(),
                    format!("node.kubernetes.io/windows-build In {build}"),
                ]]
            )]
        );
    }
}

#[test]
fn al2_after_1_32_and_windows2025_before_1_35_are_refused() {
    assert_eq!(unsupported(&alias("al2@latest"), "1.32"), None);
    assert!(
        unsupported(&alias("al2@latest"), "1.33").is_some_and(|m| m.contains("1.33 and later"))
    );
    assert!(unsupported(&alias("windows2025@latest"), "1.34").is_some());
    assert_eq!(unsupported(&alias("windows2025@latest"), "1.35"), None);
    assert_eq!(unsupported(&alias("windows2022@latest"), "1.28"), None);
    assert_eq!(unsupported(&alias("al2023@latest"), "1.40"), None);
}

#[test]
fn status_requirements_put_the_architecture_with_the_variant_in_upstream_order() {
    let reqs = image_requirements("x86_64", &Variant::Standard.requirements());
    let keys: Vec<(&str, &str)> = reqs
        .iter()
        .map(|r| (r.key.as_str(), r.operator.as_str()))
        .collect();
    assert_eq!(
        keys,
        vec![
            ("kubernetes.io/arch", "In"),
            ("karpenter.k8s.aws/instance-gpu-count", "DoesNotExist"),
            (
                "karpenter.k8s.aws/instance-accelerator-count",
                "DoesNotExist"
            ),
        ]
    );
    assert_eq!(reqs[0].values, Some(vec!["amd64".to_string()]));
    assert_eq!(
        image_requirements("arm64", &[])[0].values,
        Some(vec!["arm64".to_string()])
    );
}
