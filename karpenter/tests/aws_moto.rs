//! The AWS provider on aws-sdk-ec2 against moto's EC2 and SSM server on loopback (PyPI
//! `moto[server]`; `./scripts/test.sh` installs it). Each test starts its own `moto_server`,
//! seeded with EKS-optimized AL2023 images (through `MOTO_AMIS_PATH`), subnets in three zones
//! and a security group tagged `karpenter.sh/discovery=<cluster>`; the server stops with the
//! test.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_ec2::types as t;
use controller::cloudprovider::CloudProvider;
use controller::cloudprovider::aws::AwsCloud;
use controller::cloudprovider::build::Cloud;
use crds::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, TOPOLOGY_ZONE_LABEL};
use crds::{EC2NodeClass, NodeClaim, Operator};
use ec2api::fault::FaultyEc2;
use ec2api::instance_id;
use ec2api::{Ec2, Filter, SdkEc2};
use jiff::{SignedDuration, Timestamp};
use karpenter::sandbox::{LocalCluster, start_cluster_with, with_defaults};
use karpenter::workload::{self, ONLINE_BOUTIQUE};
use karpenter_core::clock::{Clock, FakeClock, SystemClock};
use karpenter_core::cloud::CloudError;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use testutil::{ec2nodeclass, nodeclaim};

use crate::moto_cloud;
use moto_cloud::{CLUSTER, Moto, NEW_AMD64, NEW_ARM64, aws_settings, cluster_config};

impl Moto {
    /// The AWS provider over moto's EC2 behind a fault-injecting wrapper.
    async fn cloud(&self, clock: Arc<dyn Clock>) -> (Arc<AwsCloud>, Arc<FaultyEc2>) {
        self.cloud_of(CLUSTER, clock).await
    }

    /// The AWS provider of the cluster `name` (see [`Moto::cloud`]).
    async fn cloud_of(&self, name: &str, clock: Arc<dyn Clock>) -> (Arc<AwsCloud>, Arc<FaultyEc2>) {
        let faulty = Arc::new(FaultyEc2::new(Arc::new(SdkEc2::new(&self.config().await))));
        let mut settings = aws_settings("https://127.0.0.1:6443".into());
        settings.cluster_name = name.into();
        settings.cluster.name = name.into();
        let cloud = AwsCloud::new(Arc::clone(&faulty) as Arc<dyn Ec2>, settings, clock)
            .expect("embedded data");
        (Arc::new(cloud), faulty)
    }
}

/// The EC2NodeClass `default`: the cluster's role and security groups, subnets tagged
/// `karpenter.sh/discovery: subnet_discovery`.
fn node_class(subnet_discovery: &str) -> EC2NodeClass {
    ec2nodeclass("default")
        .role(format!("KarpenterNodeRole-{CLUSTER}"))
        .subnet_discovery(subnet_discovery)
        .security_group_discovery(CLUSTER)
        .build()
}

async fn resolved(cloud: &AwsCloud, mut nc: EC2NodeClass) -> EC2NodeClass {
    let r = cloud.resolve_node_class(&nc).await;
    assert_eq!(r.not_ready, None, "node class resolves");
    nc.status = Some(r.status);
    nc
}

/// An on-demand NodeClaim of `default` for one of `types` in one of `zones`, asking a cpu and
/// 1Gi.
fn claim(name: &str, types: &[&str], zones: &[&str]) -> NodeClaim {
    nodeclaim(name)
        .nodepool("default")
        .requirement(INSTANCE_TYPE_LABEL, Operator::In, types)
        .requirement(CAPACITY_TYPE_LABEL, Operator::In, ["on-demand"])
        .requirement(TOPOLOGY_ZONE_LABEL, Operator::In, zones)
        .request("cpu", "1")
        .request("memory", "1Gi")
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_class_resolves_subnets_groups_and_the_newest_alias_images() {
    let moto = Moto::start();
    moto.seed_network(CLUSTER).await;
    let (cloud, _) = moto.cloud(Arc::new(SystemClock)).await;
    let nc = resolved(&cloud, node_class(CLUSTER)).await;
    let status = nc.status.expect("status");
    assert_eq!(status.subnets.len(), 3);
    assert_eq!(status.security_groups.len(), 1);
    let ids: Vec<&str> = status.amis.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids.len(), 2, "newest image per architecture: {ids:?}");
    assert!(
        ids.contains(&NEW_AMD64) && ids.contains(&NEW_ARM64),
        "{ids:?}"
    );
    let profile = status.instance_profile.expect("instance profile");
    let iam = aws_sdk_iam::Client::new(&moto.config().await);
    let got = iam
        .get_instance_profile()
        .instance_profile_name(&profile)
        .send()
        .await
        .expect("the instance profile exists in IAM");
    let roles: Vec<&str> = got
        .instance_profile()
        .map(|p| p.roles().iter().map(|r| r.role_name()).collect())
        .unwrap_or_default();
    assert_eq!(roles, vec![format!("KarpenterNodeRole-{CLUSTER}").as_str()]);
    // A role that does not exist makes the class not ready, with the reason.
    let mut missing = node_class(CLUSTER);
    missing.spec.role = Some("NoSuchRole".into());
    let r = cloud.resolve_node_class(&missing).await;
    let (condition, reason, _) = r.not_ready.expect("not ready");
    assert_eq!(
        (condition.as_str(), reason.as_str()),
        ("InstanceProfileReady", "InstanceProfileCreationFailed")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_class_matching_nothing_is_not_ready_and_launches_nothing() {
    let moto = Moto::start();
    moto.seed_network(CLUSTER).await;
    let (cloud, faulty) = moto.cloud(Arc::new(SystemClock)).await;
    let mut nc = node_class("no-such-cluster");
    let r = cloud.resolve_node_class(&nc).await;
    let (condition, reason, _) = r.not_ready.clone().expect("not ready");
    assert_eq!(
        (condition.as_str(), reason.as_str()),
        ("SubnetsReady", "SubnetsNotFound")
    );
    nc.status = Some(r.status);
    let err = cloud
        .create(
            &claim("default-nomatch", &["m5.large"], &["us-east-1a"]),
            &nc,
        )
        .await
        .expect_err("no launch");
    assert!(matches!(err, CloudError::NodeClassNotReady(_)), "{err:?}");
    assert_eq!(faulty.calls("CreateFleet"), 0);
    assert_eq!(faulty.calls("CreateLaunchTemplate"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relaunching_the_same_nodeclaim_creates_no_second_instance() {
    let moto = Moto::start();
    moto.seed_network(CLUSTER).await;
    let (cloud, faulty) = moto.cloud(Arc::new(SystemClock)).await;
    let mut with_tags = node_class(CLUSTER);
    with_tags.spec.tags.insert("team".into(), "web".into());
    let nc = resolved(&cloud, with_tags).await;
    let c = claim(
        "default-once",
        &["m5.large", "c5.large"],
        &["us-east-1a", "us-east-1b"],
    );
    let first = cloud.create(&c, &nc).await.expect("launch");
    let second = cloud.create(&c, &nc).await.expect("relaunch");
    assert_eq!(first.provider_id, second.provider_id);
    assert_eq!(faulty.calls("CreateFleet"), 1);
    // The instance reports the subnet and security groups EC2 says it runs with (drift
    // compares them with the node class's). moto's CreateFleet leaves the launch template's
    // groups off the instance, so the groups are compared with DescribeInstances' only.
    let status = nc.status.as_ref().expect("resolved");
    let running = cloud.get(&first.provider_id).await.expect("get");
    assert!(
        status.subnets.iter().any(|s| s.id == running.subnet_id),
        "{} is one of the node class's subnets",
        running.subnet_id
    );
    let described = moto.instance(&running.id).await;
    assert_eq!(Some(running.subnet_id.as_str()), described.subnet_id());
    let groups: Vec<&str> = described
        .security_groups()
        .iter()
        .filter_map(|g| g.group_id())
        .collect();
    assert_eq!(running.security_group_ids, groups);
    let tagged = faulty
        .describe_instances(
            &[],
            vec![Filter::new("tag:karpenter.sh/nodeclaim", "default-once")],
        )
        .await
        .expect("describe");
    assert_eq!(tagged.len(), 1);
    let i = &tagged[0];
    assert_eq!(i.image_id, NEW_AMD64);
    for (k, v) in [
        ("kubernetes.io/cluster/moto-demo", "owned"),
        ("karpenter.sh/nodepool", "default"),
        ("karpenter.sh/nodeclaim", "default-once"),
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
        ("Name", "default-once"),
        ("eks:eks-cluster-name", CLUSTER),
        // The node class's own tags.
        ("team", "web"),
    ] {
        assert_eq!(i.tags.get(k).map(String::as_str), Some(v), "tag {k}");
    }
    // One launch template, reused; deleting the node class removes it.
    assert_eq!(faulty.calls("CreateLaunchTemplate"), 1);
    cloud.node_class_deleted(&nc).await.expect("cleanup");
    let profile = nc
        .status
        .as_ref()
        .and_then(|s| s.instance_profile.clone())
        .expect("instance profile");
    assert_eq!(
        faulty.instance_profile_roles(&profile).await.expect("iam"),
        None,
        "the instance profile goes with its node class"
    );
    let left = faulty
        .describe_launch_templates(vec![Filter::new("tag:karpenter.k8s.aws/cluster", CLUSTER)])
        .await
        .expect("describe templates");
    assert!(left.is_empty(), "{left:?}");
    // Deleting terminates; once gone the provider says so.
    let gone = c.clone();
    let mut gone = gone;
    gone.status = Some(crds::NodeClaimStatus {
        provider_id: Some(first.provider_id.clone()),
        ..Default::default()
    });
    cloud.delete(&gone).await.expect("terminate");
    assert!(matches!(
        cloud.delete(&gone).await,
        Err(CloudError::NodeClaimNotFound(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_error_falls_back_and_the_offering_is_skipped_until_the_cache_expires() {
    let moto = Moto::start();
    moto.seed_network(CLUSTER).await;
    let clock = Arc::new(FakeClock::new(Timestamp::now()));
    let (cloud, faulty) = moto.cloud(Arc::clone(&clock) as Arc<dyn Clock>).await;
    let nc = resolved(&cloud, node_class(CLUSTER)).await;
    let zones = ["us-east-1a", "us-east-1b"];
    let c = claim("default-ice", &["m5.large", "m5.xlarge"], &zones);
    // The cheapest offering this NodeClaim allows.
    let types = cloud.instance_types(&nc).await.expect("types");
    let m5 = types
        .iter()
        .find(|t| t.name == "m5.large")
        .expect("m5.large");
    let cheapest = m5
        .offerings
        .iter()
        .filter(|o| o.capacity_type == "on-demand" && zones.contains(&o.zone.as_str()))
        .min_by(|a, b| a.price.total_cmp(&b.price).then(a.zone.cmp(&b.zone)))
        .expect("offering")
        .zone
        .clone();
    faulty.add_capacity_shortage("m5.large", &cheapest);
    let launched = cloud.create(&c, &nc).await.expect("falls back");
    let (ty, zone) = (
        launched.labels["node.kubernetes.io/instance-type"].clone(),
        launched.labels["topology.kubernetes.io/zone"].clone(),
    );
    assert_ne!(
        (ty.as_str(), zone.as_str()),
        ("m5.large", cheapest.as_str())
    );
    assert!(
        launched
            .warnings
            .iter()
            .any(|w| w.contains("InsufficientInstanceCapacity")),
        "the partial fleet error is reported: {:?}",
        launched.warnings
    );
    let offering_available = |types: &[Arc<karpenter_core::capacity::InstanceType>]| {
        types
            .iter()
            .find(|t| t.name == "m5.large")
            .and_then(|t| {
                t.offerings
                    .iter()
                    .find(|o| o.zone == cheapest && o.capacity_type == "on-demand")
            })
            .map(|o| o.available)
    };
    assert!(cloud.is_unavailable("m5.large", &cheapest, "on-demand"));
    let types = cloud.instance_types(&nc).await.expect("types");
    assert_eq!(offering_available(&types), Some(false));
    clock.advance(SignedDuration::from_secs(181));
    assert!(!cloud.is_unavailable("m5.large", &cheapest, "on-demand"));
    let types = cloud.instance_types(&nc).await.expect("types");
    assert_eq!(offering_available(&types), Some(true));
}

async fn start(
    moto: &Moto,
    manifests: &[workload::Manifest],
    dir: &std::path::Path,
) -> LocalCluster {
    let config = moto.config().await;
    start_cluster_with(
        &cluster_config(dir),
        manifests,
        |endpoint, clock| async move {
            let cloud = Arc::new(
                AwsCloud::new(
                    Arc::new(SdkEc2::new(&config)),
                    aws_settings(endpoint),
                    clock,
                )
                .map_err(|e| e.to_string())?,
            );
            Ok(Cloud {
                provider: Arc::clone(&cloud) as Arc<dyn CloudProvider>,
                sim: None,
                aws: Some(cloud),
            })
        },
    )
    .await
    .expect("cluster starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn online_boutique_x10_provisions_through_create_fleet() {
    let moto = Moto::start();
    moto.seed_network(CLUSTER).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut manifests = workload::parse_yaml(
        std::path::Path::new("online-boutique.yaml"),
        ONLINE_BOUTIQUE,
    )
    .expect("bundled workload");
    workload::scale(&mut manifests, 10);
    let manifests = with_defaults(manifests, CLUSTER).expect("defaults");
    let cluster = start(&moto, &manifests, dir.path()).await;
    let begin = Instant::now();
    let observed = loop {
        let o = cluster.observe().await;
        if o.settled() && o.pods_total > 0 {
            break o;
        }
        assert!(
            begin.elapsed() < Duration::from_secs(480),
            "not settled: {} of {} pods bound, {} of {} nodeclaims initialized",
            o.pods_bound,
            o.pods_total,
            o.claims_initialized,
            o.claims_total
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert!(observed.claims_total >= 1, "{observed:?}");
    let claims: Api<NodeClaim> = Api::all(cluster.client());
    let list = claims.list(&Default::default()).await.expect("nodeclaims");
    assert_eq!(list.items.len(), observed.claims_total);
    for c in &list.items {
        let name = c.metadata.name.clone().expect("name");
        let labels = c.metadata.labels.clone().unwrap_or_default();
        let status = c.status.clone().expect("status");
        let pid = status.provider_id.clone().expect("providerID");
        let i = moto
            .instance(instance_id(&pid).expect("aws providerID"))
            .await;
        assert_eq!(
            i.instance_type().map(|t| t.as_str()),
            labels
                .get("node.kubernetes.io/instance-type")
                .map(String::as_str),
            "{name}: instance type"
        );
        assert_eq!(
            i.placement().and_then(|p| p.availability_zone()),
            labels
                .get("topology.kubernetes.io/zone")
                .map(String::as_str),
            "{name}: zone"
        );
        let expected_ami = if labels.get("kubernetes.io/arch").map(String::as_str) == Some("arm64")
        {
            NEW_ARM64
        } else {
            NEW_AMD64
        };
        assert_eq!(i.image_id(), Some(expected_ami), "{name}: AMI");
        assert_eq!(status.image_id.as_deref(), Some(expected_ami));
        let tags: BTreeMap<&str, &str> = i
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?, t.value()?)))
            .collect();
        assert_eq!(
            tags.get("kubernetes.io/cluster/moto-demo"),
            Some(&"owned"),
            "{name}"
        );
        assert_eq!(
            tags.get("karpenter.sh/nodepool"),
            Some(&"default"),
            "{name}"
        );
        assert_eq!(tags.get("karpenter.sh/nodeclaim"), Some(&name.as_str()));
        assert_eq!(tags.get("karpenter.k8s.aws/ec2nodeclass"), Some(&"default"));
        assert_eq!(tags.get("Name"), Some(&name.as_str()));
    }
    // Deleting a NodeClaim terminates its instance.
    let victim = list.items[0].clone();
    let victim_name = victim.metadata.name.clone().expect("name");
    let pid = victim
        .status
        .and_then(|s| s.provider_id)
        .expect("providerID");
    let id = instance_id(&pid).expect("instance id").to_string();
    claims
        .delete(&victim_name, &DeleteParams::default())
        .await
        .expect("delete nodeclaim");
    moto.wait_terminating(&id, Duration::from_secs(120)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn garbage_collection_terminates_this_clusters_orphans_only() {
    let moto = Moto::start();
    moto.seed_network(CLUSTER).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let manifests = with_defaults(vec![], CLUSTER).expect("defaults");
    let mut cluster = start(&moto, &manifests, dir.path()).await;
    let ec2 = moto.client().await;
    let run = |cluster_name: &'static str| {
        let ec2 = ec2.clone();
        async move {
            let tags = [
                (format!("kubernetes.io/cluster/{cluster_name}"), "owned"),
                ("karpenter.sh/nodepool".to_string(), "default"),
            ];
            let mut spec = t::TagSpecification::builder().resource_type(t::ResourceType::Instance);
            for (k, v) in tags {
                spec = spec.tags(t::Tag::builder().key(k).value(v).build());
            }
            let out = ec2
                .run_instances()
                .image_id(NEW_AMD64)
                .instance_type(t::InstanceType::M5Large)
                .min_count(1)
                .max_count(1)
                .tag_specifications(spec.build())
                .send()
                .await
                .expect("run instance");
            out.instances()[0].instance_id().expect("id").to_string()
        }
    };
    let ours = run(CLUSTER).await;
    let theirs = run("someone-else").await;
    // The node class that matches nothing says why.
    let classes: Api<EC2NodeClass> = Api::all(cluster.client());
    let mut bad = node_class("no-such-cluster");
    bad.metadata.name = Some("nomatch".into());
    classes
        .create(&PostParams::default(), &bad)
        .await
        .expect("create node class");
    moto.wait_terminating(&ours, Duration::from_secs(90)).await;
    assert_eq!(
        moto.state(&theirs).await,
        "running",
        "another cluster's instance is left alone"
    );
    let nc = classes.get("nomatch").await.expect("node class");
    let condition = |t: &str| {
        nc.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == t))
            .cloned()
            .unwrap_or_else(|| panic!("{t} condition"))
    };
    assert_eq!(condition("Ready").status, "False");
    let subnets = condition("SubnetsReady");
    assert_eq!(
        (subnets.status.as_str(), subnets.reason.as_str()),
        ("False", "SubnetsNotFound")
    );
    // The sandbox mirrors this cluster's instances as Instance objects; deleting one terminates
    // the instance through EC2 (the controller is stopped, so its GC cannot be the one).
    cluster.stop_controller();
    let mirrored = run(CLUSTER).await;
    let instances: Api<kube::api::DynamicObject> = Api::all_with(
        cluster.client(),
        &kube::api::ApiResource {
            group: "sandbox.karpenter.sh".into(),
            version: "v1".into(),
            api_version: "sandbox.karpenter.sh/v1".into(),
            kind: "Instance".into(),
            plural: "instances".into(),
        },
    );
    let begin = Instant::now();
    while instances.get_opt(&mirrored).await.expect("get").is_none() {
        assert!(
            begin.elapsed() < Duration::from_secs(30),
            "{mirrored} never mirrored"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    instances
        .delete(&mirrored, &DeleteParams::default())
        .await
        .expect("delete Instance object");
    moto.wait_terminating(
        &mirrored,
        Duration::from_secs(60).saturating_sub(begin.elapsed()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_command_runs_on_ec2_with_credentials_from_the_environment() {
    let moto = Moto::start();
    moto.seed_network(CLUSTER).await;
    // moto's CreateFleet gives instances the VPC's default security group instead of the launch
    // template's, so every node would be SecurityGroupDrifted at once and serially replaced for
    // as long as the sandbox runs. This test is about launching on EC2, not drift: the default
    // NodePool comes in with its upgrades paused (its first document; the sandbox adds the
    // default EC2NodeClass, with discovery tags for this cluster, as the workload has none).
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    let defaults = std::fs::read_to_string(format!("{examples}/nodepools/default.yaml"))
        .expect("default NodePool");
    let default_pool = defaults.split("\n---\n").next().expect("a first document");
    let paused = default_pool.replacen(
        "metadata:\n  name: default\n",
        "metadata:\n  name: default\n  annotations:\n    upgrades.karpenter.sh/paused: \"true\"\n",
        1,
    );
    assert_ne!(
        paused, default_pool,
        "the default NodePool's metadata moved"
    );
    let dir = tempfile::tempdir().expect("temporary directory");
    let pool_file = dir.path().join("nodepool.yaml");
    std::fs::write(&pool_file, paused).expect("write the NodePool");
    let boutique = format!("{examples}/workloads/online-boutique.yaml");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args([
            "sandbox",
            "--workload",
            pool_file.to_str().expect("UTF-8 path"),
            "--workload",
            &boutique,
            "--cloud-provider",
            "aws",
            "--aws-endpoint-url",
            &moto.url,
            "--cluster-name",
            CLUSTER,
            "--until-settled",
            "--timeout",
            "4m",
            "--report",
            "json",
            "--registration-delay",
            "1s",
        ])
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env_remove("AWS_PROFILE")
        .env("LOG_LEVEL", "warn")
        .output()
        .await
        .expect("karpenter runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["settled"], true);
    let claims = report["nodeclaims"]["total"]
        .as_u64()
        .expect("nodeclaim count");
    assert!(claims >= 1);
    // The instances it launched are in EC2, tagged for the cluster, after the sandbox is gone.
    let running = moto
        .client()
        .await
        .describe_instances()
        .filters(
            t::Filter::builder()
                .name("tag:kubernetes.io/cluster/moto-demo")
                .values("owned")
                .build(),
        )
        .send()
        .await
        .expect("describe");
    let count = running
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter(|i| i.state().and_then(|s| s.name()) == Some(&t::InstanceStateName::Running))
        .count();
    assert_eq!(count as u64, claims, "one instance per NodeClaim");
}
/// Issue 21: after a failover every controller asks for instance types at once. Sixteen
/// concurrent requests on a fresh provider make one DescribeInstanceTypes; once the catalogue
/// expires, sixteen more are answered while one refresh runs (two fetches in all, never two
/// at once).
#[tokio::test]
async fn concurrent_instance_type_requests_share_one_fetch_and_expired_data_serves_meanwhile() {
    let moto = Moto::start();
    moto.seed_network(CLUSTER).await;
    let clock = Arc::new(FakeClock::new(Timestamp::now()));
    let (cloud, faulty) = moto.cloud(Arc::clone(&clock) as Arc<dyn Clock>).await;
    let nc = resolved(&cloud, node_class(CLUSTER)).await;
    let ask_all = || {
        futures::future::join_all((0..16).map(|_| {
            let cloud = Arc::clone(&cloud);
            let nc = nc.clone();
            async move { cloud.instance_types(&nc).await.map(|t| t.len()) }
        }))
    };
    let first = ask_all().await;
    assert!(
        first.iter().all(|r| matches!(r, Ok(n) if *n > 0)),
        "{first:?}"
    );
    assert_eq!(faulty.calls("DescribeInstanceTypes"), 1);
    clock.advance(SignedDuration::from_secs(301));
    let after_expiry = ask_all().await;
    assert!(
        after_expiry.iter().all(|r| matches!(r, Ok(n) if *n > 0)),
        "{after_expiry:?}"
    );
    assert_eq!(faulty.calls("DescribeInstanceTypes"), 2);
    assert_eq!(faulty.max_concurrent("DescribeInstanceTypes"), 1);
}

/// Cluster discovery (issue 35): the service CIDR comes from EKS DescribeCluster, never a guess.
/// moto's default cluster gives nodes of every family the cluster DNS `172.20.0.10` (AL2023's
/// NodeConfig by its `cidr`, read back from the launched instance); a custom CIDR and an IPv6
/// cluster are followed; the endpoint and CA bundle come from EKS when no setting gives them;
/// without a cluster an AL2023 node class is not valid, and the start-up discovery says what to
/// set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_discovery_gives_nodes_the_clusters_dns_or_says_what_is_missing() {
    use aws_sdk_eks::types::{IpFamily, KubernetesNetworkConfigRequest};
    use controller::cloudprovider::aws::cluster::{Given, discover};
    use controller::cloudprovider::aws::launchtemplate::user_data;
    use crds::ec2nodeclass::AmiFamily;
    let moto = Moto::start();
    moto.seed_network(CLUSTER).await;
    let (cloud, faulty) = moto.cloud(Arc::new(SystemClock)).await;
    let nc = resolved(&cloud, node_class(CLUSTER)).await;
    assert_eq!(
        cloud.cluster().service_cidr.as_deref(),
        Some("172.20.0.0/16")
    );
    let launched = cloud
        .create(&claim("default-dns", &["m5.large"], &["us-east-1a"]), &nc)
        .await
        .expect("launch");
    let id = instance_id(&launched.provider_id).expect("instance id");
    let booted = faulty
        .user_data(id)
        .await
        .expect("user data")
        .expect("an AL2023 NodeConfig");
    assert!(booted.contains("    cidr: 172.20.0.0/16\n"), "{booted}");
    for (family, want) in [
        (AmiFamily::Al2, "--dns-cluster-ip '172.20.0.10'"),
        (AmiFamily::Bottlerocket, "cluster-dns-ip = \"172.20.0.10\""),
    ] {
        let ud = user_data(family, &cloud.cluster(), &nc, &BTreeMap::new(), &[]);
        assert!(ud.contains(want), "{family:?}: {ud}");
    }
    // A cluster with its own service CIDR, and an IPv6 one.
    let custom = KubernetesNetworkConfigRequest::builder()
        .service_ipv4_cidr("10.96.0.0/16")
        .build();
    moto.create_cluster("custom", Some(custom)).await;
    let (cloud, _) = moto.cloud_of("custom", Arc::new(SystemClock)).await;
    cloud.resolve_service_cidr().await.expect("discovered");
    assert_eq!(cloud.cluster().dns_ip().as_deref(), Some("10.96.0.10"));
    let v6 = KubernetesNetworkConfigRequest::builder()
        .ip_family(IpFamily::Ipv6)
        .build();
    moto.create_cluster("six", Some(v6)).await;
    let (cloud, _) = moto.cloud_of("six", Arc::new(SystemClock)).await;
    match cloud.resolve_service_cidr().await {
        // moto 5.2.1 echoes the request, which names no IPv6 range (EKS assigns one): the
        // provider says so rather than guessing, and still knows the family.
        Err(why) => assert!(why.contains("reports no service CIDR"), "{why}"),
        Ok(cidr) => assert!(cidr.contains(':'), "{cidr}"),
    }
    assert!(cloud.cluster().ipv6());
    // Discovery at start: EKS's endpoint and CA bundle when the settings give none, and the
    // IPv6 family; with the kube-dns Service's address (as `karpenter run` reads it), AL2
    // nodes get IPv6 settings and that DNS address, Bottlerocket the same address.
    let given = Given {
        kube_dns_ip: Some("fd7e:4c2a:1b::a".into()),
        ..Given::default()
    };
    let six = discover(cloud.ec2().as_ref(), "six", given)
        .await
        .expect("discovered");
    assert!(six.endpoint.starts_with("https://"), "{six:?}");
    assert!(!six.ca_bundle.is_empty(), "{six:?}");
    assert!(six.ipv6(), "{six:?}");
    let al2 = user_data(AmiFamily::Al2, &six, &nc, &BTreeMap::new(), &[]);
    assert!(
        al2.contains("--dns-cluster-ip 'fd7e:4c2a:1b::a'") && al2.contains("--ip-family ipv6"),
        "{al2}"
    );
    let br = user_data(AmiFamily::Bottlerocket, &six, &nc, &BTreeMap::new(), &[]);
    assert!(br.contains("cluster-dns-ip = \"fd7e:4c2a:1b::a\""), "{br}");
    let default = discover(cloud.ec2().as_ref(), CLUSTER, Given::default())
        .await
        .expect("discovered");
    assert_eq!(default.service_cidr.as_deref(), Some("172.20.0.0/16"));
    assert!(!default.ipv6());
    // Neither CLUSTER_ENDPOINT nor a cluster: the start-up error says what to set.
    let err = discover(cloud.ec2().as_ref(), "absent", Given::default())
        .await
        .expect_err("no endpoint");
    assert!(
        err.contains("CLUSTER_ENDPOINT") && err.contains("\"absent\""),
        "{err}"
    );
    // No such cluster: an AL2023 node class is not valid, and the message says what to fix.
    let (cloud, _) = moto.cloud_of("absent", Arc::new(SystemClock)).await;
    let r = cloud.resolve_node_class(&node_class(CLUSTER)).await;
    let (condition, reason, message) = r.not_ready.expect("not ready");
    assert_eq!(
        (condition.as_str(), reason.as_str()),
        ("ValidationSucceeded", "ClusterCIDRResolutionFailed")
    );
    assert!(
        message.contains("\"absent\"") && message.contains("CLUSTER_NAME"),
        "{message}"
    );
}
