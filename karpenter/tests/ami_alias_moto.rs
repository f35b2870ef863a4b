//! AMI aliases on the AWS provider against moto: an alias resolves through the SSM public
//! parameters upstream reads (`aws:pkg/providers/amifamily/`), and each instance type boots
//! the image its hardware needs. moto 5.2 ships no EKS or Windows AMI parameters (its
//! `ssm/resources` hold Amazon Linux, ECS and region parameters only) and refuses PutParameter
//! under `/aws/`, so each test seeds the parameters at start
//! ([`Moto::start_with`]) next to the images they name.

use std::sync::Arc;

use controller::cloudprovider::CloudProvider;
use controller::cloudprovider::aws::AwsCloud;
use crds::EC2NodeClass;
use crds::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, OS_LABEL, WINDOWS_BUILD_LABEL};
use crds::{NodeClaim, Operator};
use ec2api::{Ec2, SdkEc2, instance_id};
use karpenter::sandbox::ec2_kubelets::Ec2Kubelets;
use karpenter_core::clock::SystemClock;
use sandbox::actors::InstanceSource;
use testutil::{ec2nodeclass, nodeclaim};

use crate::moto_cloud::{CLUSTER, Moto, amazon_image, aws_settings};

const STANDARD_AMD64: &str = "ami-0b11023000000001";
const NVIDIA_AMD64: &str = "ami-0b11023000000002";
const NEURON_AMD64: &str = "ami-0b11023000000003";
const STANDARD_ARM64: &str = "ami-0b11023000000004";
const PINNED_AMD64: &str = "ami-0b11023000000005";
const WINDOWS_2022: &str = "ami-0c02022000000001";

const DATE: &str = "2026-03-01T00:00:00.000Z";

/// The EKS AL2023 parameter of `arch`/`variant` at `leaf` (`recommended` or a release name).
fn al2023(arch: &str, variant: &str, leaf: &str) -> String {
    format!(
        "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/{arch}/{variant}/{leaf}/image_id"
    )
}

/// moto serving AL2023's standard (amd64, arm64), NVIDIA and Neuron (amd64) images under the
/// parameters `al2023@latest` reads, one pinned release, and Windows Server 2022's image under
/// its `ami-windows-latest` parameter; the network of [`CLUSTER`] is seeded.
async fn moto() -> Moto {
    let release = |arch: &str, variant: &str, version: &str| {
        format!("amazon-eks-node-al2023-{arch}-{variant}-1.32-{version}")
    };
    let images = vec![
        amazon_image(
            STANDARD_AMD64,
            &release("x86_64", "standard", "v20260301"),
            "x86_64",
            DATE,
        ),
        amazon_image(
            NVIDIA_AMD64,
            &release("x86_64", "nvidia", "v20260301"),
            "x86_64",
            DATE,
        ),
        amazon_image(
            NEURON_AMD64,
            &release("x86_64", "neuron", "v20260301"),
            "x86_64",
            DATE,
        ),
        amazon_image(
            STANDARD_ARM64,
            &release("arm64", "standard", "v20260301"),
            "arm64",
            DATE,
        ),
        amazon_image(
            PINNED_AMD64,
            &release("x86_64", "standard", "v20260101"),
            "x86_64",
            "2026-01-01T00:00:00.000Z",
        ),
        amazon_image(
            WINDOWS_2022,
            "Windows_Server-2022-English-Core-EKS_Optimized-1.32-2026.03.01",
            "x86_64",
            DATE,
        ),
    ];
    let parameters = [
        (al2023("x86_64", "standard", "recommended"), STANDARD_AMD64),
        (al2023("x86_64", "nvidia", "recommended"), NVIDIA_AMD64),
        (al2023("x86_64", "neuron", "recommended"), NEURON_AMD64),
        (al2023("arm64", "standard", "recommended"), STANDARD_ARM64),
        (
            al2023(
                "x86_64",
                "standard",
                &release("x86_64", "standard", "v20260101"),
            ),
            PINNED_AMD64,
        ),
        (
            "/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.32/image_id"
                .to_string(),
            WINDOWS_2022,
        ),
    ];
    let parameters: Vec<(&str, &str)> = parameters
        .iter()
        .map(|(name, value)| (name.as_str(), *value))
        .collect();
    let moto = Moto::start_with(images, &parameters);
    moto.seed_network(CLUSTER).await;
    moto
}

async fn cloud(moto: &Moto) -> AwsCloud {
    let ec2: Arc<dyn Ec2> = Arc::new(SdkEc2::new(&moto.config().await));
    AwsCloud::new(
        ec2,
        aws_settings("https://127.0.0.1:6443".into()),
        Arc::new(SystemClock),
    )
    .expect("embedded data")
}

/// The node class `default` of [`CLUSTER`] selecting images by `alias`, resolved.
async fn resolved(cloud: &AwsCloud, alias: &str) -> EC2NodeClass {
    let mut nc = ec2nodeclass("default")
        .role(format!("KarpenterNodeRole-{CLUSTER}"))
        .discovery(CLUSTER)
        .ami_alias(alias)
        .build();
    let r = cloud.resolve_node_class(&nc).await;
    assert_eq!(r.not_ready, None, "{alias} resolves");
    nc.status = Some(r.status);
    nc
}

/// The ids in the node class's `status.amis`, each with its requirements as `key op values`.
fn amis(nc: &EC2NodeClass) -> Vec<(String, Vec<String>)> {
    let status = nc.status.as_ref().expect("resolved");
    let mut listed: Vec<(String, Vec<String>)> = status
        .amis
        .iter()
        .map(|a| {
            let reqs = a
                .requirements
                .iter()
                .map(|r| {
                    let values = r.values.clone().unwrap_or_default().join(",");
                    format!("{} {} {values}", r.key, r.operator)
                        .trim_end()
                        .to_string()
                })
                .collect();
            (a.id.clone(), reqs)
        })
        .collect();
    listed.sort();
    listed
}

/// An on-demand NodeClaim of `default` for `instance_type`, asking a cpu and 1Gi.
fn claim(name: &str, instance_type: &str) -> NodeClaim {
    nodeclaim(name)
        .nodepool("default")
        .requirement(INSTANCE_TYPE_LABEL, Operator::In, [instance_type])
        .requirement(CAPACITY_TYPE_LABEL, Operator::In, ["on-demand"])
        .request("cpu", "1")
        .request("memory", "1Gi")
        .build()
}

/// Launch `instance_type` for `nc` and return the image EC2 says the instance runs.
async fn booted(moto: &Moto, cloud: &AwsCloud, nc: &EC2NodeClass, instance_type: &str) -> String {
    let name = format!("default-{}", instance_type.replace('.', "-"));
    let launched = cloud
        .create(&claim(&name, instance_type), nc)
        .await
        .unwrap_or_else(|e| panic!("{instance_type} launches: {e:?}"));
    let id = instance_id(&launched.provider_id).expect("an instance id in the provider id");
    let described = moto.instance(id).await;
    let image = described.image_id().unwrap_or_default().to_string();
    assert_eq!(launched.image_id, image, "the launch reports what EC2 runs");
    image
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn al2023_latest_boots_the_nvidia_image_on_gpu_types_and_the_standard_image_elsewhere() {
    let moto = moto().await;
    let cloud = cloud(&moto).await;
    let nc = resolved(&cloud, "al2023@latest").await;
    let standard = [
        "karpenter.k8s.aws/instance-gpu-count DoesNotExist",
        "karpenter.k8s.aws/instance-accelerator-count DoesNotExist",
    ];
    let listed = |id: &str, arch: &str, variant: &[&str]| {
        let mut reqs = vec![format!("kubernetes.io/arch In {arch}")];
        reqs.extend(variant.iter().map(|r| r.to_string()));
        (id.to_string(), reqs)
    };
    assert_eq!(
        amis(&nc),
        vec![
            listed(STANDARD_AMD64, "amd64", &standard),
            listed(
                NVIDIA_AMD64,
                "amd64",
                &["karpenter.k8s.aws/instance-gpu-count Exists"]
            ),
            listed(
                NEURON_AMD64,
                "amd64",
                &["karpenter.k8s.aws/instance-accelerator-count Exists"]
            ),
            listed(STANDARD_ARM64, "arm64", &standard),
        ],
        "each variant published for 1.32 (no arm64 NVIDIA parameter is seeded)"
    );
    for (instance_type, image) in [
        ("g4dn.xlarge", NVIDIA_AMD64),
        ("g5.xlarge", NVIDIA_AMD64),
        ("m5.large", STANDARD_AMD64),
        ("m6g.large", STANDARD_ARM64),
        ("inf2.xlarge", NEURON_AMD64),
    ] {
        assert_eq!(
            booted(&moto, &cloud, &nc, instance_type).await,
            image,
            "{instance_type} boots its variant"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_al2023_alias_reads_the_release_parameter() {
    let moto = moto().await;
    let cloud = cloud(&moto).await;
    let nc = resolved(&cloud, "al2023@v20260101").await;
    let ids: Vec<String> = amis(&nc).into_iter().map(|(id, _)| id).collect();
    assert_eq!(
        ids,
        [PINNED_AMD64],
        "only the pinned release's parameter is seeded"
    );
    assert_eq!(booted(&moto, &cloud, &nc, "m5.large").await, PINNED_AMD64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows2022_latest_resolves_the_eks_optimized_core_image_for_windows_nodes() {
    let moto = moto().await;
    let cloud = cloud(&moto).await;
    let nc = resolved(&cloud, "windows2022@latest").await;
    assert_eq!(
        amis(&nc),
        vec![(
            WINDOWS_2022.to_string(),
            vec![
                "kubernetes.io/os In windows".to_string(),
                "kubernetes.io/arch In amd64".to_string(),
                "node.kubernetes.io/windows-build In 10.0.20348".to_string(),
            ]
        )]
    );
    // Instance types under a Windows family are Windows nodes of its build, so the launch
    // picks the Windows image for them.
    let name = "default-windows";
    let launched = cloud
        .create(&claim(name, "m5.large"), &nc)
        .await
        .expect("m5.large launches");
    assert_eq!(launched.image_id, WINDOWS_2022);
    assert_eq!(
        launched.labels.get(OS_LABEL).map(String::as_str),
        Some("windows")
    );
    assert_eq!(
        launched.labels.get(WINDOWS_BUILD_LABEL).map(String::as_str),
        Some("10.0.20348")
    );
    // The instance boots the EKS Windows bootstrap script with the node's labels.
    let id = instance_id(&launched.provider_id).expect("an instance id in the provider id");
    let user_data = SdkEc2::new(&moto.config().await)
        .user_data(id)
        .await
        .expect("DescribeInstanceAttribute")
        .unwrap_or_default();
    assert!(
        user_data.starts_with("<powershell>")
            && user_data.contains("& $EKSBootstrapScriptFile -EKSClusterName 'moto-demo'")
            && user_data.contains("karpenter.sh/nodepool=default"),
        "{user_data}"
    );
    // The sandbox's kubelet on that instance registers a Windows node of the image's build.
    let kubelets = Ec2Kubelets::new(Arc::new(cloud));
    let booted = kubelets.running().await.expect("DescribeInstances");
    let node = booted
        .iter()
        .find(|b| b.provider_id == launched.provider_id)
        .expect("the launched instance boots a kubelet");
    assert_eq!(
        node.labels.get(OS_LABEL).map(String::as_str),
        Some("windows")
    );
    assert_eq!(
        node.labels.get(WINDOWS_BUILD_LABEL).map(String::as_str),
        Some("10.0.20348")
    );
}
