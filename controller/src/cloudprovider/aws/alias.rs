//! AMI aliases (`amiSelectorTerms[].alias`, `family@version`) as upstream resolves them
//! (`aws:pkg/providers/amifamily/{al2023,al2,bottlerocket,windows,ami}.go`): which SSM public
//! parameters an alias reads, and which instance types the image behind each may boot.
//!
//! An alias names several images: per architecture, a standard image and the accelerated
//! variants AWS publishes (NVIDIA, Neuron). Each image carries requirements on the instance
//! type's labels, so that a launch ([`karpenter_core::cloud::compatible_ami`]) boots the NVIDIA
//! image on a type with `karpenter.k8s.aws/instance-gpu-count`, the Neuron image on a type with
//! `karpenter.k8s.aws/instance-accelerator-count`, and the standard image on every other type.
//! Windows aliases read one parameter, for the newest image only (the CRD allows no pinned
//! Windows version), and require `kubernetes.io/os=windows` and the family's Windows build.

use crds::ec2nodeclass::{Alias, AmiFamily};
use crds::labels::{
    ARCH_LABEL, INSTANCE_ACCELERATOR_COUNT_LABEL, INSTANCE_GPU_COUNT_LABEL, OS_LABEL, OS_WINDOWS,
    WINDOWS_BUILD_LABEL,
};
use k8s_openapi::api::core::v1::NodeSelectorRequirement;

/// An image build of an alias family: what it was built for (upstream `amifamily.Variant`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// For instance types with neither GPUs nor accelerators.
    Standard,
    /// With NVIDIA drivers, for instance types with GPUs.
    Nvidia,
    /// With the AWS Neuron driver, for instance types with Inferentia/Trainium accelerators.
    Neuron,
}

impl Variant {
    /// The variant's name in AL2023's SSM paths and image names: `standard`, `nvidia`, `neuron`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Standard => "standard",
            Self::Nvidia => "nvidia",
            Self::Neuron => "neuron",
        }
    }

    /// What an instance type must meet to boot this variant: `Standard` needs neither
    /// [`INSTANCE_GPU_COUNT_LABEL`] nor [`INSTANCE_ACCELERATOR_COUNT_LABEL`], `Nvidia` needs
    /// the GPU count label, `Neuron` the accelerator count label.
    pub fn requirements(self) -> Vec<NodeSelectorRequirement> {
        match self {
            Self::Standard => vec![
                requirement(INSTANCE_ACCELERATOR_COUNT_LABEL, "DoesNotExist", &[]),
                requirement(INSTANCE_GPU_COUNT_LABEL, "DoesNotExist", &[]),
            ],
            Self::Nvidia => vec![requirement(INSTANCE_GPU_COUNT_LABEL, "Exists", &[])],
            Self::Neuron => vec![requirement(INSTANCE_ACCELERATOR_COUNT_LABEL, "Exists", &[])],
        }
    }
}

fn requirement(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: operator.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

/// One image an alias resolves: where AWS publishes its id, and which instance types it is for.
#[derive(Clone, Debug, PartialEq)]
pub struct AliasSource {
    /// The SSM public parameter holding the image id, e.g.
    /// `/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/nvidia/recommended/image_id`.
    pub parameter: String,
    /// The image's EC2 architecture, `x86_64` or `arm64`.
    pub arch: &'static str,
    /// The EC2 `name` filter matching this image's releases (`*` for any version), used only
    /// where SSM has no such parameter (an EC2 emulator, a partition without EKS parameters).
    pub name_pattern: String,
    /// The requirement sets the image is for, without the architecture (the status adds the
    /// image's own): one set per variant, so AL2's GPU image (NVIDIA and Neuron) has two.
    pub requirements: Vec<Vec<NodeSelectorRequirement>>,
}

impl AliasSource {
    fn new(
        parameter: String,
        arch: &'static str,
        name_pattern: String,
        requirements: Vec<Vec<NodeSelectorRequirement>>,
    ) -> Self {
        Self {
            parameter,
            arch,
            name_pattern,
            requirements,
        }
    }

    fn variants(
        parameter: String,
        arch: &'static str,
        name_pattern: String,
        variants: &[Variant],
    ) -> Self {
        let requirements = variants.iter().map(|v| v.requirements()).collect();
        Self::new(parameter, arch, name_pattern, requirements)
    }
}

/// Every image `alias` names for Kubernetes `k8s` (`1.32`), in upstream's order of paths:
/// - AL2023: `.../amazon-linux-2023/<arch>/<variant>/{recommended | amazon-eks-node-al2023-<arch>-<variant>-<k8s>-<version>}/image_id`,
///   standard, NVIDIA and Neuron for `x86_64`, standard and NVIDIA for `arm64`;
/// - AL2: `amazon-linux-2`, `amazon-linux-2-arm64` (standard) and `amazon-linux-2-gpu`
///   (NVIDIA and Neuron), a pinned version as `amazon-eks{,-arm64,-gpu}-node-<k8s>-<version>`;
/// - Bottlerocket: `/aws/service/bottlerocket/aws-k8s-<k8s>[-nvidia]/<arch>/<version>/image_id`,
///   the version without its leading `v` (`latest` as is); the `x86_64` standard image also
///   serves Neuron types;
/// - Windows: `/aws/service/ami-windows-latest/Windows_Server-<year>-English-Core-EKS_Optimized-<k8s>/image_id`
///   whatever the version (only `latest` passes the CRD).
///
/// Empty for families without aliases (Custom).
pub fn alias_sources(alias: &Alias, k8s: &str) -> Vec<AliasSource> {
    let version = alias.version.as_str();
    let latest = version == crds::ec2nodeclass::ALIAS_VERSION_LATEST;
    let any_or = |v: &str| {
        if latest {
            "*".to_string()
        } else {
            v.to_string()
        }
    };
    match alias.family {
        AmiFamily::Al2023 => {
            let images = [
                ("x86_64", Variant::Standard),
                ("x86_64", Variant::Nvidia),
                ("x86_64", Variant::Neuron),
                ("arm64", Variant::Standard),
                ("arm64", Variant::Nvidia),
            ];
            images
                .into_iter()
                .map(|(arch, variant)| {
                    let v = variant.as_str();
                    let release = format!("amazon-eks-node-al2023-{arch}-{v}-{k8s}-");
                    let leaf = if latest {
                        "recommended".to_string()
                    } else {
                        format!("{release}{version}")
                    };
                    AliasSource::variants(
                        format!(
                            "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/{v}/{leaf}/image_id"
                        ),
                        arch,
                        format!("{release}{}", any_or(version)),
                        &[variant],
                    )
                })
                .collect()
        }
        AmiFamily::Al2 => {
            let images: [(&str, &str, &'static str, &[Variant]); 3] = [
                (
                    "amazon-linux-2",
                    "amazon-eks-node",
                    "x86_64",
                    &[Variant::Standard],
                ),
                (
                    "amazon-linux-2-arm64",
                    "amazon-eks-arm64-node",
                    "arm64",
                    &[Variant::Standard],
                ),
                (
                    "amazon-linux-2-gpu",
                    "amazon-eks-gpu-node",
                    "x86_64",
                    &[Variant::Neuron, Variant::Nvidia],
                ),
            ];
            images
                .into_iter()
                .map(|(dir, node, arch, variants)| {
                    let leaf = if latest {
                        "recommended".to_string()
                    } else {
                        format!("{node}-{k8s}-{version}")
                    };
                    AliasSource::variants(
                        format!("/aws/service/eks/optimized-ami/{k8s}/{dir}/{leaf}/image_id"),
                        arch,
                        format!("{node}-{k8s}-{}", any_or(version)),
                        variants,
                    )
                })
                .collect()
        }
        AmiFamily::Bottlerocket => {
            // Bottlerocket releases are tagged `v1.2.3` on GitHub but published without the `v`.
            let release = version.trim_start_matches('v');
            let pattern_release = if latest { "" } else { release };
            let images: [(&str, &'static str, &[Variant]); 4] = [
                ("", "x86_64", &[Variant::Standard, Variant::Neuron]),
                ("", "arm64", &[Variant::Standard]),
                ("-nvidia", "x86_64", &[Variant::Nvidia]),
                ("-nvidia", "arm64", &[Variant::Nvidia]),
            ];
            images
                .into_iter()
                .map(|(flavour, arch, variants)| {
                    AliasSource::variants(
                        format!(
                            "/aws/service/bottlerocket/aws-k8s-{k8s}{flavour}/{arch}/{release}/image_id"
                        ),
                        arch,
                        format!("bottlerocket-aws-k8s-{k8s}{flavour}-{arch}-v{pattern_release}*"),
                        variants,
                    )
                })
                .collect()
        }
        family => {
            let (Some(year), Some(build)) = (family.windows_year(), family.windows_build()) else {
                return Vec::new();
            };
            let name = format!("Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}");
            vec![AliasSource::new(
                format!("/aws/service/ami-windows-latest/{name}/image_id"),
                "x86_64",
                format!("{name}-*"),
                vec![vec![
                    requirement(OS_LABEL, "In", &[OS_WINDOWS]),
                    requirement(WINDOWS_BUILD_LABEL, "In", &[build]),
                ]],
            )]
        }
    }
}

/// Why `alias` cannot be used with Kubernetes `k8s` (`1.33`), as upstream refuses it before
/// reading any parameter: AL2 aliases on 1.33 and later (EKS publishes no AL2 images for them),
/// Windows Server 2025 aliases before 1.35. `None` when the alias may be resolved, or the
/// version does not parse as `<major>.<minor>`.
pub fn unsupported(alias: &Alias, k8s: &str) -> Option<String> {
    let minor: u32 = k8s.split('.').nth(1)?.parse().ok()?;
    match alias.family {
        AmiFamily::Al2 if minor >= 33 => Some(format!(
            "AL2 aliases are not supported on Kubernetes 1.33 and later (the cluster runs {k8s})"
        )),
        AmiFamily::Windows2025 if minor < 35 => Some(format!(
            "Windows Server 2025 aliases need Kubernetes 1.35 or later (the cluster runs {k8s})"
        )),
        _ => None,
    }
}

/// The requirements of one resolved image as the status lists them: the image's architecture
/// (`x86_64` → `amd64`) and `extra`, ordered by key length, then key, as upstream orders them.
pub fn image_requirements(
    ec2_arch: &str,
    extra: &[NodeSelectorRequirement],
) -> Vec<NodeSelectorRequirement> {
    let arch = if ec2_arch == "arm64" {
        "arm64"
    } else {
        "amd64"
    };
    let mut all = vec![requirement(ARCH_LABEL, "In", &[arch])];
    all.extend(extra.iter().cloned());
    all.sort_by(|a, b| a.key.len().cmp(&b.key.len()).then(a.key.cmp(&b.key)));
    all
}
