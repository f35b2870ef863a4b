//! Choosing and building the cloud provider for `karpenter run` and `karpenter sandbox`:
//! `sim` (the simulated EC2 cloud over real data, the default) or `aws` (EC2 through
//! aws-sdk-ec2, in builds with the `aws` feature; region and credentials from the standard AWS
//! chain).

use std::sync::Arc;

use clap::Args;

use crate::cloudprovider::CloudProvider;
use crate::cloudprovider::sim::SimCloud;
use karpenter_core::capacity::node_class::CapacityOptions;
use karpenter_core::clock::Clock;

/// Cloud flags shared by `karpenter run` and `karpenter sandbox`.
#[derive(Args, Clone, Debug, Default)]
pub struct CloudOptions {
    /// Cloud provider: `sim` (simulated EC2 over real instance data) or `aws` (EC2 through
    /// aws-sdk-ec2; needs a binary built with `--features aws`). Required by `karpenter run`,
    /// which never guesses a simulated cloud; the sandbox defaults it to `sim`.
    #[arg(long, env = "CLOUD_PROVIDER", value_parser = ["sim", "aws"])]
    pub cloud_provider: Option<String>,
    /// Endpoint URL of every AWS API the provider calls (EC2, SSM, IAM, SQS, Pricing), e.g. a
    /// local moto server (default: AWS's endpoints for the region).
    #[arg(long, env = "AWS_ENDPOINT_URL", value_name = "URL")]
    pub aws_endpoint_url: Option<String>,
    /// The simulated cloud's region (`--cloud-provider sim`): its zones, instance-type
    /// offerings and on-demand prices (vendored for us-east-1 and GovCloud; elsewhere the
    /// us-east-1 list prices stand in, marked approximate). The AWS provider takes its region from the AWS
    /// SDK's configuration, which reads the same `AWS_REGION`.
    #[arg(
        long,
        env = "AWS_REGION",
        value_name = "REGION",
        default_value = "us-east-1"
    )]
    pub region: String,
    /// API server URL written into nodes' user data. Default: with `--cloud-provider aws`, the
    /// endpoint EKS DescribeCluster reports for `CLUSTER_NAME` (upstream's discovery; a start-up
    /// error when it cannot be read); in the sandbox, the sandbox's own URL.
    #[arg(long, env = "CLUSTER_ENDPOINT", value_name = "URL")]
    pub cluster_endpoint: Option<String>,
    /// The cluster's CA bundle (base64 of PEM) written into nodes' user data. Default: the CA
    /// the controller's own connection trusts, else the one EKS DescribeCluster reports.
    #[arg(long, env = "CLUSTER_CA_BUNDLE", value_name = "BASE64")]
    pub cluster_ca_bundle: Option<String>,
    /// ENIs kept out of the VPC CNI's pod addressing when sizing ENI-limited max pods
    /// (upstream's `RESERVED_ENIS`; default 0).
    #[arg(long, env = "RESERVED_ENIS", value_name = "COUNT", default_value_t = 0)]
    pub reserved_enis: i64,
    /// Fraction of each instance type's memory the hypervisor keeps, taken off capacity
    /// (upstream's `VM_MEMORY_OVERHEAD_PERCENT`; default 0.075).
    #[arg(long, env = "VM_MEMORY_OVERHEAD_PERCENT", value_name = "FRACTION")]
    pub vm_memory_overhead_percent: Option<f64>,
    /// The SQS queue EventBridge sends EC2 interruption events to (upstream's
    /// `--interruption-queue`): spot interruption warnings, rebalance recommendations, AWS
    /// Health scheduled changes and instance state changes. Empty: interruption handling is
    /// off. With the simulated cloud, a queue of that name in the simulated account.
    #[arg(
        long,
        env = "INTERRUPTION_QUEUE",
        value_name = "NAME",
        default_value = ""
    )]
    pub interruption_queue: String,
    /// The controller cannot reach AWS services that have no VPC endpoint (upstream's
    /// `--isolated-vpc`): the AWS provider never calls the Pricing API and prices on-demand
    /// offerings from the vendored table of its region. Accepts Go's `strconv.ParseBool`
    /// spellings as upstream does; the bare flag means true.
    #[arg(long, env = "ISOLATED_VPC", num_args = 0..=1, default_value = "false",
          default_missing_value = "true", value_parser = crate::runtime::options::parse_go_bool)]
    pub isolated_vpc: bool,
    /// Capacity reservations the simulated cloud holds (`karpenter sandbox
    /// --capacity-reservations FILE`, DescribeCapacityReservations' shape); not a flag of its
    /// own here, and ignored by the AWS provider, which asks EC2.
    #[arg(skip)]
    pub capacity_reservations: Vec<karpenter_core::capacity::reservation::Record>,
    /// Whether the `ReservedCapacity` feature gate is on (from `FEATURE_GATES`, set by the
    /// caller): the AWS provider then keeps on-demand and spot launches out of open capacity
    /// reservations ([`crate::cloudprovider::aws::AwsCloud::with_reserved_capacity`]).
    #[arg(skip)]
    pub reserved_capacity: bool,
}

impl CloudOptions {
    /// `RESERVED_ENIS` and `VM_MEMORY_OVERHEAD_PERCENT` as the capacity model reads them.
    ///
    /// Errors: a negative ENI count, or an overhead fraction outside 0 to 1.
    pub fn capacity_options(&self) -> Result<CapacityOptions, String> {
        let defaults = CapacityOptions::default();
        let vm = self
            .vm_memory_overhead_percent
            .unwrap_or(defaults.vm_memory_overhead_percent);
        if self.reserved_enis < 0 {
            return Err(format!(
                "--reserved-enis (RESERVED_ENIS) must be 0 or more, not {}",
                self.reserved_enis
            ));
        }
        if !(0.0..1.0).contains(&vm) {
            return Err(format!(
                "--vm-memory-overhead-percent (VM_MEMORY_OVERHEAD_PERCENT) is a fraction \
                 from 0 up to 1 (0.075 for 7.5%), not {vm}"
            ));
        }
        Ok(CapacityOptions {
            reserved_enis: self.reserved_enis,
            vm_memory_overhead_percent: vm,
        })
    }

    /// The provider named, else `sim` (the sandbox's default; `karpenter run` requires one).
    pub fn provider(&self) -> &str {
        self.cloud_provider.as_deref().unwrap_or("sim")
    }

    /// The simulated cloud's region: `--region`, or us-east-1 when none is set (options built
    /// in code rather than parsed).
    pub fn sim_region(&self) -> &str {
        if self.region.is_empty() {
            karpenter_core::capacity::catalog::REGION
        } else {
            &self.region
        }
    }

    /// The simulated cloud (what the sandbox's `--cloud-provider` defaults to).
    pub fn default_sim() -> CloudOptions {
        CloudOptions {
            cloud_provider: Some("sim".into()),
            ..CloudOptions::default()
        }
    }
}

/// A built cloud: the provider the controller uses and, for the sandbox's simulated kubelets
/// and tests, the concrete provider behind it.
pub struct Cloud {
    /// The provider the controller uses.
    pub provider: Arc<dyn CloudProvider>,
    /// The simulated cloud, when `--cloud-provider sim`.
    pub sim: Option<Arc<SimCloud>>,
    /// The AWS provider, when `--cloud-provider aws`.
    #[cfg(feature = "aws")]
    pub aws: Option<Arc<crate::cloudprovider::aws::AwsCloud>>,
}

/// The API server as the controller reaches it: its URL and CA bundle (base64 of PEM; empty
/// for the sandbox's plain HTTP), whether nodes join that same URL, and the cluster DNS address
/// it serves.
#[derive(Clone, Debug, Default)]
pub struct ApiServer {
    /// The API server URL of the client configuration, e.g. `https://10.0.0.1:6443`.
    pub endpoint: String,
    /// CA bundle, base64 of PEM.
    pub ca_bundle: String,
    /// Whether nodes join [`ApiServer::endpoint`] as it is (the sandbox, whose kubelets use
    /// its URL). A kube client's URL inside a pod is the `kubernetes` Service's address,
    /// which an instance cannot reach, so `karpenter run` discovers the endpoint instead.
    pub joinable: bool,
    /// The `kube-dns` Service's cluster IP in `kube-system`, if there is one (upstream
    /// `operator.KubeDNSIP`): the cluster DNS address nodes get.
    pub kube_dns_ip: Option<String>,
}

impl ApiServer {
    /// From a kube client configuration: its URL and root certificates (DER, turned into PEM).
    pub fn from_config(config: &kube::Config) -> ApiServer {
        let pem: String = config
            .root_cert
            .iter()
            .flatten()
            .map(|der| {
                let body = base64_std(der);
                let lines: Vec<&str> = body
                    .as_bytes()
                    .chunks(64)
                    .filter_map(|c| std::str::from_utf8(c).ok())
                    .collect();
                format!(
                    "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
                    lines.join("\n")
                )
            })
            .collect();
        ApiServer {
            joinable: false,
            kube_dns_ip: None,
            endpoint: config.cluster_url.to_string(),
            ca_bundle: if pem.is_empty() {
                String::new()
            } else {
                base64_std(pem.as_bytes())
            },
        }
    }
}

fn base64_std(bytes: &[u8]) -> String {
    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes)
}

/// Build the cloud for nodes that join `api_server`; `kubernetes_version` is the cluster's
/// `major.minor` (AMI aliases).
///
/// Errors: an unknown provider, `aws` in a build without the feature, bad embedded data.
pub async fn build(
    opts: &CloudOptions,
    cluster_name: &str,
    api_server: &ApiServer,
    kubernetes_version: &str,
    clock: Arc<dyn Clock>,
) -> Result<Cloud, String> {
    match opts.provider() {
        "sim" => {
            let mut sim = SimCloud::in_region(cluster_name, clock, opts.sim_region())
                .map_err(|e| e.to_string())?
                .with_capacity_options(opts.capacity_options()?);
            if !opts.interruption_queue.is_empty() {
                sim = sim.with_interruption_queue(&opts.interruption_queue);
            }
            if !opts.capacity_reservations.is_empty() {
                sim.with_network(|n| n.reservations = opts.capacity_reservations.clone());
            }
            let sim = Arc::new(sim);
            Ok(Cloud {
                provider: Arc::clone(&sim) as Arc<dyn CloudProvider>,
                sim: Some(sim),
                #[cfg(feature = "aws")]
                aws: None,
            })
        }
        "aws" => build_aws(opts, cluster_name, api_server, kubernetes_version, clock).await,
        other => Err(format!(
            "unknown --cloud-provider {other:?} (supported: sim, aws)"
        )),
    }
}

#[cfg(feature = "aws")]
async fn build_aws(
    opts: &CloudOptions,
    cluster_name: &str,
    api_server: &ApiServer,
    kubernetes_version: &str,
    clock: Arc<dyn Clock>,
) -> Result<Cloud, String> {
    use crate::cloudprovider::aws::{self, AwsCloud, AwsSettings};
    use tracing::Instrument;
    let config = ec2api::load_config(opts.aws_endpoint_url.as_deref()).await;
    let region = config
        .region()
        .map(|r| r.to_string())
        .ok_or("no AWS region: set AWS_REGION (or a profile's region)")?;
    let ec2: Arc<dyn ec2api::Ec2> = Arc::new(ec2api::SdkEc2::new(&config));
    let given = aws::cluster::Given {
        endpoint: opts
            .cluster_endpoint
            .clone()
            .or_else(|| api_server.joinable.then(|| api_server.endpoint.clone())),
        ca_bundle: opts.cluster_ca_bundle.clone(),
        client_ca_bundle: api_server.ca_bundle.clone(),
        kube_dns_ip: api_server.kube_dns_ip.clone(),
    };
    // The service CIDR, if this answer did not give it, is asked for when a node class first
    // needs it.
    let cluster = aws::cluster::discover(ec2.as_ref(), cluster_name, given).await?;
    let settings = AwsSettings {
        cluster_name: cluster_name.to_string(),
        cluster,
        region,
        kubernetes_version: kubernetes_version.to_string(),
    };
    let mut cloud = AwsCloud::new(ec2, settings, clock)
        .map_err(|e| e.to_string())?
        .with_capacity_options(opts.capacity_options()?)
        .with_reserved_capacity(opts.reserved_capacity);
    if !opts.interruption_queue.is_empty() {
        let queue =
            aws::sqs::SqsQueue::new(ec2api::sqs::SdkSqs::new(&config, &opts.interruption_queue));
        // As upstream: a queue that is missing or unreadable now is logged and looked up again
        // on every receive; provisioning does not wait for it.
        match queue.check().await {
            Ok(url) => {
                tracing::info!(queue = %opts.interruption_queue, %url, "interruption queue found")
            }
            Err(e) => {
                tracing::error!(error = %e, "interruption queue unavailable; interruption handling retries until it is")
            }
        }
        cloud = cloud.with_interruption_queue(Arc::new(queue));
    }
    // Upstream's `providers.pricing` controller: it only reads AWS, so every replica runs it,
    // leader or not, for as long as the process lives.
    let pricing: Arc<dyn ec2api::pricing::Pricing> = Arc::new(ec2api::pricing::SdkPricing::new(
        &config,
        &cloud.settings().region,
    ));
    tokio::spawn(
        aws::pricing::run(
            Arc::clone(cloud.on_demand_prices()),
            pricing,
            opts.isolated_vpc,
        )
        .instrument(tracing::info_span!(
            "controller",
            controller = "providers.pricing"
        )),
    );
    let cloud = Arc::new(cloud);
    Ok(Cloud {
        provider: Arc::clone(&cloud) as Arc<dyn CloudProvider>,
        sim: None,
        aws: Some(cloud),
    })
}

#[cfg(not(feature = "aws"))]
async fn build_aws(
    _opts: &CloudOptions,
    _cluster_name: &str,
    _api_server: &ApiServer,
    _kubernetes_version: &str,
    _clock: Arc<dyn Clock>,
) -> Result<Cloud, String> {
    Err(
        "this karpenter was built without the AWS provider; rebuild with \
         `cargo build --features aws` (or `cargo run -p karpenter --features aws ...`)"
            .into(),
    )
}

/// `major.minor` of a Kubernetes version string such as `v1.32.0` or `1.32.0-eks-abc`.
pub fn minor_version(version: &str) -> String {
    let v = version.trim_start_matches('v');
    let mut parts = v.split(['.', '-', '+']);
    match (parts.next(), parts.next()) {
        (Some(major), Some(minor)) => {
            let minor: String = minor.chars().take_while(char::is_ascii_digit).collect();
            format!("{major}.{minor}")
        }
        _ => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minor_versions_parse_from_server_versions() {
        assert_eq!(minor_version("v1.32.0"), "1.32");
        assert_eq!(minor_version("v1.31.4-eks-2d5f260"), "1.31");
        assert_eq!(minor_version("1.30+"), "1.30");
    }
}
