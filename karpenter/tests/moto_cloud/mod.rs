//! moto's EC2, SSM, IAM, EKS and SQS server for the AWS provider's tests (`aws_moto`,
//! `interruption_moto`, `launch_template_moto`, ...): started on a free loopback port, seeded
//! with EKS-optimized AL2023 images (through `MOTO_AMIS_PATH`), given the network and node role
//! of a cluster, and, when asked, recording the requests it receives (moto's recorder). Each
//! test binary uses a part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aws_sdk_ec2::types as t;
use base64::Engine as _;
use controller::cloudprovider::aws::AwsSettings;
use controller::cloudprovider::aws::launchtemplate::ClusterInfo;
use controller::cloudprovider::build::CloudOptions;
use controller::runtime::Settings;
use ec2api::moto::MotoServer;
use karpenter::sandbox::ClusterConfig;
use serde_json::json;

/// The file moto's recorder writes, in the server's temporary directory.
const RECORDING: &str = "recording.jsonl";

/// The cluster the tests launch for.
pub const CLUSTER: &str = "moto-demo";
/// The older amd64 image.
pub const OLD_AMD64: &str = "ami-0a11023000000001";
/// The newest amd64 image (what `al2023@latest` resolves to).
pub const NEW_AMD64: &str = "ami-0a11023000000002";
/// The newest arm64 image.
pub const NEW_ARM64: &str = "ami-0a11023000000004";

/// A moto server on a free loopback port, killed on drop.
pub struct Moto {
    _server: MotoServer,
    /// The endpoint URL.
    pub url: String,
    _dir: tempfile::TempDir,
}

/// An Amazon-owned (EKS account) public image `name` for `arch` (`x86_64`, `arm64`), created
/// at `date` (ISO 8601), as `MOTO_AMIS_PATH` lists images.
pub fn amazon_image(id: &str, name: &str, arch: &str, date: &str) -> serde_json::Value {
    json!({
        "ami_id": id, "state": "available", "public": true, "owner_id": "602401143452",
        "image_location": format!("amazon/{name}"),
        "sriov": "simple", "root_device_type": "ebs", "root_device_name": "/dev/xvda",
        "description": format!("EKS-optimized image {name}"),
        "image_type": "machine", "architecture": arch, "name": name,
        "virtualization_type": "hvm", "hypervisor": "xen", "creation_date": date,
    })
}

fn image(id: &str, arch: &str, version: &str, date: &str) -> serde_json::Value {
    let name = format!("amazon-eks-node-al2023-{arch}-standard-1.32-{version}");
    amazon_image(id, &name, arch, date)
}

impl Moto {
    /// Start `moto_server` seeded with the images.
    pub fn start() -> Moto {
        Self::start_with(Self::images(), &[])
    }

    /// Start `moto_server` seeded with the images, recording every request it receives (moto's
    /// recorder, `MOTO_ENABLE_RECORDING`) for [`Moto::recorded`].
    pub fn start_recording() -> Moto {
        Self::launch(Self::images(), &[], true)
    }

    /// The EKS-optimized AL2023 images [`Moto::start`] serves.
    fn images() -> Vec<serde_json::Value> {
        vec![
            image(OLD_AMD64, "x86_64", "v20260101", "2026-01-01T00:00:00.000Z"),
            image(NEW_AMD64, "x86_64", "v20260301", "2026-03-01T00:00:00.000Z"),
            image(
                "ami-0a11023000000003",
                "arm64",
                "v20260101",
                "2026-01-01T00:00:00.000Z",
            ),
            image(NEW_ARM64, "arm64", "v20260301", "2026-03-01T00:00:00.000Z"),
        ]
    }

    /// Start `moto_server` serving `images` (see [`amazon_image`]) and, when `parameters` is
    /// not empty, also those SSM parameters `(name, value)`: moto ships none of the EKS or
    /// Windows AMI parameters under `/aws/service/` and refuses to create them, so they are
    /// seeded at start ([`MotoServer::start_with_public_parameters`]).
    pub fn start_with(images: Vec<serde_json::Value>, parameters: &[(&str, &str)]) -> Moto {
        Self::launch(images, parameters, false)
    }

    fn launch(
        images: Vec<serde_json::Value>,
        parameters: &[(&str, &str)],
        recording: bool,
    ) -> Moto {
        let dir = tempfile::tempdir().expect("temp dir");
        let amis = dir.path().join("amis.json");
        std::fs::write(&amis, serde_json::Value::from(images).to_string()).expect("write amis");
        let mut envs = vec![
            ("MOTO_AMIS_PATH", amis.into_os_string()),
            (
                "MOTO_RECORDER_FILEPATH",
                dir.path().join(RECORDING).into_os_string(),
            ),
        ];
        if recording {
            envs.push(("MOTO_ENABLE_RECORDING", "true".into()));
        }
        let server = if parameters.is_empty() {
            MotoServer::start(envs)
        } else {
            MotoServer::start_with_public_parameters(envs, parameters)
        }
        .expect("moto_server starts (./scripts/test.sh installs it)");
        Moto {
            url: server.url.clone(),
            _server: server,
            _dir: dir,
        }
    }

    /// The parameters of every `action` request (e.g. `CreateFleet`) moto received, as sent on
    /// the wire (the EC2 query protocol's form fields, e.g. `Context`), oldest first; empty
    /// unless started with [`Moto::start_recording`].
    pub fn recorded(&self, action: &str) -> Vec<BTreeMap<String, String>> {
        let Ok(log) = std::fs::read_to_string(self._dir.path().join(RECORDING)) else {
            return Vec::new();
        };
        log.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter_map(|entry| {
                let body = entry["body"].as_str()?.to_string();
                let body = if entry["body_encoded"] == true {
                    String::from_utf8(
                        base64::engine::general_purpose::STANDARD
                            .decode(body)
                            .ok()?,
                    )
                    .ok()?
                } else {
                    body
                };
                Some(
                    form_urlencoded::parse(body.as_bytes())
                        .into_owned()
                        .collect::<BTreeMap<String, String>>(),
                )
            })
            .filter(|params| params.get("Action").map(String::as_str) == Some(action))
            .collect()
    }

    /// SDK configuration for the server: region `us-east-1`, test credentials.
    pub async fn config(&self) -> aws_config::SdkConfig {
        ec2api::loader(Some(&self.url))
            .await
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_ec2::config::Credentials::new(
                "testing", "testing", None, None, "test",
            ))
            .load()
            .await
    }

    /// An EC2 client of the server.
    pub async fn client(&self) -> aws_sdk_ec2::Client {
        aws_sdk_ec2::Client::new(&self.config().await)
    }

    /// A VPC with a subnet in each of three zones and a security group, tagged for discovery by
    /// `cluster`, and the node role `KarpenterNodeRole-<cluster>` in IAM.
    pub async fn seed_network(&self, cluster: &str) {
        aws_sdk_iam::Client::new(&self.config().await)
            .create_role()
            .role_name(format!("KarpenterNodeRole-{cluster}"))
            .assume_role_policy_document(
                r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#,
            )
            .send()
            .await
            .expect("node role");
        let ec2 = self.client().await;
        let vpc = ec2
            .create_vpc()
            .cidr_block("10.0.0.0/16")
            .send()
            .await
            .expect("vpc");
        let vpc_id = vpc
            .vpc()
            .and_then(|v| v.vpc_id())
            .expect("vpc id")
            .to_string();
        let tag = t::Tag::builder()
            .key("karpenter.sh/discovery")
            .value(cluster)
            .build();
        for (i, zone) in ["us-east-1a", "us-east-1b", "us-east-1c"]
            .iter()
            .enumerate()
        {
            ec2.create_subnet()
                .vpc_id(&vpc_id)
                .cidr_block(format!("10.0.{}.0/20", i * 16))
                .availability_zone(*zone)
                .tag_specifications(
                    t::TagSpecification::builder()
                        .resource_type(t::ResourceType::Subnet)
                        .tags(tag.clone())
                        .build(),
                )
                .send()
                .await
                .expect("subnet");
        }
        ec2.create_security_group()
            .group_name(format!("{cluster}-node"))
            .description("nodes")
            .vpc_id(&vpc_id)
            .tag_specifications(
                t::TagSpecification::builder()
                    .resource_type(t::ResourceType::SecurityGroup)
                    .tags(tag)
                    .build(),
            )
            .send()
            .await
            .expect("security group");
        self.create_cluster(cluster, None).await;
    }

    /// The EKS cluster `name` in moto (DescribeCluster answers for it): with moto's default
    /// network (service CIDR `172.20.0.0/16`, as EKS picks in a 10.0.0.0/8 VPC), or `network`.
    pub async fn create_cluster(
        &self,
        name: &str,
        network: Option<aws_sdk_eks::types::KubernetesNetworkConfigRequest>,
    ) {
        aws_sdk_eks::Client::new(&self.config().await)
            .create_cluster()
            .name(name)
            .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
            .resources_vpc_config(aws_sdk_eks::types::VpcConfigRequest::builder().build())
            .set_kubernetes_network_config(network)
            .send()
            .await
            .expect("EKS cluster");
    }

    /// The instance's state name (`running`, `shutting-down`, `terminated`, ...).
    pub async fn state(&self, id: &str) -> String {
        self.instance(id)
            .await
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str().to_string())
            .unwrap_or_default()
    }

    /// Poll until the instance is shutting down or terminated, or panic after `timeout`.
    pub async fn wait_terminating(&self, id: &str, timeout: Duration) {
        let begin = Instant::now();
        loop {
            let s = self.state(id).await;
            if s == "terminated" || s == "shutting-down" {
                return;
            }
            assert!(begin.elapsed() < timeout, "instance {id} still {s}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The instance as DescribeInstances reports it.
    pub async fn instance(&self, id: &str) -> t::Instance {
        let out = self
            .client()
            .await
            .describe_instances()
            .instance_ids(id)
            .send()
            .await
            .expect("describe instance");
        out.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .next()
            .cloned()
            .expect("instance exists")
    }
}

/// The AWS provider's settings for [`CLUSTER`] in `us-east-1`, nodes joining `endpoint`.
pub fn aws_settings(endpoint: String) -> AwsSettings {
    AwsSettings {
        cluster_name: CLUSTER.into(),
        cluster: ClusterInfo {
            name: CLUSTER.into(),
            endpoint,
            ca_bundle: String::new(),
            // Discovered from moto's EKS (`Moto::seed_network` creates the cluster).
            ..ClusterInfo::default()
        },
        region: "us-east-1".into(),
        kubernetes_version: "1.32".into(),
    }
}

/// A sandbox for [`CLUSTER`] with its kubeconfig in `dir`, nodes registering after a second.
pub fn cluster_config(dir: &std::path::Path) -> ClusterConfig {
    ClusterConfig {
        port: 0,
        registration_delay: Duration::from_secs(1),
        settings: Settings {
            cluster_name: CLUSTER.into(),
            batch_idle: Duration::from_secs(1),
            ..Settings::default()
        },
        kubeconfig: Some(dir.join("kubeconfig")),
        cloud: CloudOptions::default(),
        clock: std::sync::Arc::new(karpenter_core::clock::SystemClock),
        controller: true,
    }
}
