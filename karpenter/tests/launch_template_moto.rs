//! Every EC2NodeClass launch setting reaches EC2, shown on moto's EC2 server on loopback: each
//! field is launched with and read back from what moto received. Launch templates are read with
//! DescribeLaunchTemplateVersions (moto stores their data as sent); CreateFleet's `Context`,
//! which moto 5.2.1 accepts but neither keeps nor reports (DescribeFleets has none), is read from
//! moto's request recording. moto 5.2.1 has no placement groups (no CreatePlacementGroup nor
//! DescribePlacementGroups), so [`Placing`] answers DescribePlacementGroups from a fixture at
//! the `Ec2` seam; the template's `Placement` is moto's. moto neither reports an instance's
//! `Placement.PartitionNumber` nor runs out of capacity, so [`Placing`] also stands in for EC2
//! there when a check asks it to: it reports the partition EC2 would have picked, and answers
//! one CreateFleet with given capacity errors.
//!
//! One moto server serves all fields (each start costs seconds): the test
//! [`every_launch_setting_reaches_moto`] runs one check per field, each on its own node class.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_sdk_ec2::types as t;
use controller::cloudprovider::CloudProvider;
use controller::cloudprovider::aws::placementgroup::Scope;
use controller::cloudprovider::aws::{AwsCloud, AwsSettings};
use crds::labels::{
    CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, PLACEMENT_GROUP_ID_LABEL,
    PLACEMENT_GROUP_PARTITION_LABEL, TOPOLOGY_ZONE_LABEL,
};
use crds::{EC2NodeClass, NodeClaim, Operator};
use ec2api::{
    Ec2, Ec2Error, Filter, FleetError, FleetRequest, FleetResult, ImageInfo, ImageQuery,
    InstanceInfo, InstanceTypeInfo, LaunchTemplateData, LaunchTemplateInfo, PlacementGroupInfo,
    PlacementGroupQuery, SdkEc2, SecurityGroupInfo, SubnetInfo,
};
use karpenter_core::cloud::Launched;
use testutil::{ec2nodeclass, nodeclaim};

use crate::moto_cloud::{CLUSTER, Moto, aws_settings};

/// The placement group the fixture holds.
const GROUP_ID: &str = "pg-0training0000001";
/// The fixture's partition placement group (3 partitions).
const SHARDS_ID: &str = "pg-0shards000000001";
/// The fixture's spread placement group.
const SPREAD_ID: &str = "pg-0spread000000001";

/// moto's EC2 with placement groups from a fixture (see the module docs), recording the fleet
/// requests and placement group queries it forwards.
struct Placing {
    inner: Arc<dyn Ec2>,
    groups: Vec<PlacementGroupInfo>,
    queries: Mutex<Vec<PlacementGroupQuery>>,
    fleets: Mutex<Vec<FleetRequest>>,
    /// The partition DescribeInstances reports instances in (EC2's pick), when set.
    placed_partition: Mutex<Option<i32>>,
    /// Capacity errors the next CreateFleet answers with, launching nothing, when set.
    capacity_errors: Mutex<Option<Vec<FleetError>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl Ec2 for Placing {
    async fn describe_placement_groups(
        &self,
        query: PlacementGroupQuery,
    ) -> Result<Vec<PlacementGroupInfo>, Ec2Error> {
        lock(&self.queries).push(query.clone());
        let state_ok = |g: &PlacementGroupInfo| {
            query
                .filters
                .iter()
                .filter(|f| f.name == "state")
                .all(|f| f.values.contains(&g.state))
        };
        if let Some(unknown) = query
            .names
            .iter()
            .find(|n| !self.groups.iter().any(|g| &g.name == *n))
        {
            return Err(Ec2Error {
                code: "InvalidPlacementGroup.Unknown".into(),
                message: format!("The placement group '{unknown}' is unknown."),
            });
        }
        Ok(self
            .groups
            .iter()
            .filter(|g| query.ids.is_empty() || query.ids.contains(&g.id))
            .filter(|g| query.names.is_empty() || query.names.contains(&g.name))
            .filter(|g| state_ok(g))
            .cloned()
            .collect())
    }

    async fn create_fleet(&self, request: &FleetRequest) -> Result<FleetResult, Ec2Error> {
        lock(&self.fleets).push(request.clone());
        if let Some(errors) = lock(&self.capacity_errors).take() {
            return Ok(FleetResult {
                instance_ids: vec![],
                errors,
            });
        }
        self.inner.create_fleet(request).await
    }

    async fn describe_subnets(&self, filters: Vec<Filter>) -> Result<Vec<SubnetInfo>, Ec2Error> {
        self.inner.describe_subnets(filters).await
    }
    async fn describe_security_groups(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<SecurityGroupInfo>, Ec2Error> {
        self.inner.describe_security_groups(filters).await
    }
    async fn describe_images(&self, query: ImageQuery) -> Result<Vec<ImageInfo>, Ec2Error> {
        self.inner.describe_images(query).await
    }
    async fn ssm_parameter(&self, name: &str) -> Result<Option<String>, Ec2Error> {
        self.inner.ssm_parameter(name).await
    }
    async fn describe_cluster(&self, name: &str) -> Result<ec2api::ClusterNetwork, Ec2Error> {
        self.inner.describe_cluster(name).await
    }
    async fn describe_instance_types(&self) -> Result<Vec<InstanceTypeInfo>, Ec2Error> {
        self.inner.describe_instance_types().await
    }
    async fn describe_instance_type_offerings(&self) -> Result<Vec<(String, String)>, Ec2Error> {
        self.inner.describe_instance_type_offerings().await
    }
    async fn spot_prices(&self) -> Result<Vec<(String, String, f64)>, Ec2Error> {
        self.inner.spot_prices().await
    }
    async fn describe_launch_templates(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<LaunchTemplateInfo>, Ec2Error> {
        self.inner.describe_launch_templates(filters).await
    }
    async fn create_launch_template(
        &self,
        name: &str,
        data: &LaunchTemplateData,
        tags: &BTreeMap<String, String>,
    ) -> Result<String, Ec2Error> {
        self.inner.create_launch_template(name, data, tags).await
    }
    async fn delete_launch_template(&self, id: &str) -> Result<(), Ec2Error> {
        self.inner.delete_launch_template(id).await
    }
    async fn describe_instances(
        &self,
        ids: &[String],
        filters: Vec<Filter>,
    ) -> Result<Vec<InstanceInfo>, Ec2Error> {
        let mut found = self.inner.describe_instances(ids, filters).await?;
        if let Some(p) = *lock(&self.placed_partition) {
            for i in &mut found {
                i.partition_number = Some(p);
            }
        }
        Ok(found)
    }
    async fn terminate_instances(&self, ids: &[String]) -> Result<(), Ec2Error> {
        self.inner.terminate_instances(ids).await
    }
    async fn describe_capacity_reservations(
        &self,
        query: ec2api::CapacityReservationQuery,
    ) -> Result<Vec<ec2api::CapacityReservationInfo>, Ec2Error> {
        self.inner.describe_capacity_reservations(query).await
    }
    async fn user_data(&self, instance_id: &str) -> Result<Option<String>, Ec2Error> {
        self.inner.user_data(instance_id).await
    }
    async fn instance_profile_roles(&self, name: &str) -> Result<Option<Vec<String>>, Ec2Error> {
        self.inner.instance_profile_roles(name).await
    }
    async fn create_instance_profile(
        &self,
        name: &str,
        role: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), Ec2Error> {
        self.inner.create_instance_profile(name, role, tags).await
    }
    async fn delete_instance_profile(&self, name: &str, roles: &[String]) -> Result<(), Ec2Error> {
        self.inner.delete_instance_profile(name, roles).await
    }
}

struct Setup {
    moto: Moto,
    ec2: Arc<Placing>,
    cloud: AwsCloud,
}

impl Setup {
    /// A provider over the same moto and fixture with other settings (an IPv6 cluster).
    fn cloud_with(&self, settings: AwsSettings) -> AwsCloud {
        AwsCloud::new(
            Arc::clone(&self.ec2) as Arc<dyn Ec2>,
            settings,
            Arc::new(karpenter_core::clock::SystemClock),
        )
        .expect("embedded data")
    }

    /// The node class `name` with `spec` merged into a discovering AL2023 one, resolved by
    /// `cloud`.
    async fn node_class(
        &self,
        cloud: &AwsCloud,
        name: &str,
        spec: serde_json::Value,
    ) -> EC2NodeClass {
        let mut nc = ec2nodeclass(name)
            .role(format!("KarpenterNodeRole-{CLUSTER}"))
            .subnet_discovery(CLUSTER)
            .security_group_discovery(CLUSTER)
            .merge(serde_json::json!({ "spec": spec }))
            .build();
        let r = cloud.resolve_node_class(&nc).await;
        assert_eq!(r.not_ready, None, "{name} resolves");
        nc.status = Some(r.status);
        nc
    }

    /// Launch the NodeClaim `claim` (m5.large, us-east-1a, on-demand) of `nc` through `cloud`:
    /// what it gave the NodeClaim, and the data of the one launch template its fleet used, as
    /// moto stored it.
    async fn launch(
        &self,
        cloud: &AwsCloud,
        nc: &EC2NodeClass,
        claim: &str,
    ) -> (Launched, t::ResponseLaunchTemplateData) {
        let launched = cloud
            .create(&on_demand(claim), nc)
            .await
            .unwrap_or_else(|e| panic!("{claim} launches: {e}"));
        let fleets = lock(&self.ec2.fleets).clone();
        let fleet = fleets.last().expect("a fleet request");
        assert_eq!(fleet.configs.len(), 1, "one template");
        let template = self.template(&fleet.configs[0].launch_template).await;
        (launched, template)
    }

    /// The newest version's data of the launch template `name`, as moto stored it.
    async fn template(&self, name: &str) -> t::ResponseLaunchTemplateData {
        self.moto
            .client()
            .await
            .describe_launch_template_versions()
            .launch_template_name(name)
            .versions("$Latest")
            .send()
            .await
            .expect("describe launch template versions")
            .launch_template_versions()
            .first()
            .and_then(|v| v.launch_template_data())
            .cloned()
            .expect("template data")
    }

    /// The ids of the security groups the node classes resolve (moto's one group).
    async fn security_groups(&self) -> Vec<String> {
        self.ec2
            .describe_security_groups(vec![Filter::new("tag:karpenter.sh/discovery", CLUSTER)])
            .await
            .expect("security groups")
            .into_iter()
            .map(|g| g.id)
            .collect()
    }
}

/// A NodeClaim for m5.large in us-east-1a on-demand.
fn on_demand(name: &str) -> NodeClaim {
    nodeclaim(name)
        .nodepool("default")
        .requirement(INSTANCE_TYPE_LABEL, Operator::In, ["m5.large"])
        .requirement(CAPACITY_TYPE_LABEL, Operator::In, ["on-demand"])
        .requirement(TOPOLOGY_ZONE_LABEL, Operator::In, ["us-east-1a"])
        .request("cpu", "1")
        .request("memory", "1Gi")
        .build()
}

/// The one (primary) interface of a template, checked to carry the node class's security
/// groups in place of the template's own.
fn primary(
    lt: &t::ResponseLaunchTemplateData,
    groups: &[String],
) -> t::LaunchTemplateInstanceNetworkInterfaceSpecification {
    let interfaces = lt.network_interfaces();
    assert_eq!(interfaces.len(), 1, "{interfaces:?}");
    let primary = interfaces[0].clone();
    assert_eq!(primary.device_index(), Some(0));
    assert_eq!(primary.groups(), groups, "the interface has the groups");
    assert!(
        lt.security_group_ids().is_empty(),
        "no top-level groups next to interfaces: {:?}",
        lt.security_group_ids()
    );
    primary
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_launch_setting_reaches_moto() {
    let moto = Moto::start_recording();
    moto.seed_network(CLUSTER).await;
    let ec2 = Arc::new(Placing {
        inner: Arc::new(SdkEc2::new(&moto.config().await)),
        groups: vec![
            PlacementGroupInfo {
                id: GROUP_ID.into(),
                name: "training".into(),
                strategy: "cluster".into(),
                partition_count: 0,
                spread_level: None,
                state: "available".into(),
            },
            PlacementGroupInfo {
                id: SHARDS_ID.into(),
                name: "shards".into(),
                strategy: "partition".into(),
                partition_count: 3,
                spread_level: None,
                state: "available".into(),
            },
            PlacementGroupInfo {
                id: SPREAD_ID.into(),
                name: "spread".into(),
                strategy: "spread".into(),
                partition_count: 0,
                spread_level: Some("rack".into()),
                state: "available".into(),
            },
        ],
        queries: Mutex::default(),
        fleets: Mutex::default(),
        placed_partition: Mutex::default(),
        capacity_errors: Mutex::default(),
    });
    let cloud = AwsCloud::new(
        Arc::clone(&ec2) as Arc<dyn Ec2>,
        aws_settings("https://127.0.0.1:6443".into()),
        Arc::new(karpenter_core::clock::SystemClock),
    )
    .expect("embedded data");
    let s = Setup { moto, ec2, cloud };
    a_plain_node_class_keeps_the_default_interface(&s).await;
    associate_public_ip_address_reaches_the_primary_interface(&s).await;
    ip_prefix_count_gives_ipv4_prefixes_or_ipv6_prefixes_on_an_ipv6_cluster(&s).await;
    network_interfaces_reach_the_template_as_listed(&s).await;
    requested_efa_attaches_one_interface_per_card(&s).await;
    connection_tracking_reaches_the_primary_interface(&s).await;
    cpu_options_reach_the_template(&s).await;
    volume_initialization_rate_reaches_the_template(&s).await;
    placement_group_selector_places_and_labels_the_launch(&s).await;
    a_partition_group_offers_its_partitions_and_labels_the_partition(&s).await;
    capacity_errors_in_a_placement_group_are_scoped_to_it(&s).await;
    a_spread_groups_zone_limit_closes_the_zone_for_that_group(&s).await;
    context_reaches_create_fleet(&s).await;
}

/// A node class that sets none of the network settings: the template has the security groups
/// at the top level and no interfaces, CPU options or placement (as before these fields).
async fn a_plain_node_class_keeps_the_default_interface(s: &Setup) {
    let nc = s.node_class(&s.cloud, "plain", serde_json::json!({})).await;
    let (_, lt) = s.launch(&s.cloud, &nc, "plain-a").await;
    assert!(lt.network_interfaces().is_empty(), "{lt:?}");
    assert_eq!(lt.security_group_ids(), s.security_groups().await);
    assert_eq!(lt.cpu_options(), None);
    assert_eq!(lt.placement(), None);
}

async fn associate_public_ip_address_reaches_the_primary_interface(s: &Setup) {
    let nc = s
        .node_class(
            &s.cloud,
            "public",
            serde_json::json!({"associatePublicIPAddress": true}),
        )
        .await;
    let (_, lt) = s.launch(&s.cloud, &nc, "public-a").await;
    let primary = primary(&lt, &s.security_groups().await);
    assert_eq!(primary.associate_public_ip_address(), Some(true));
    assert_eq!(primary.ipv4_prefix_count(), None);
    // `false` is a choice too.
    let private = s
        .node_class(
            &s.cloud,
            "private",
            serde_json::json!({"associatePublicIPAddress": false}),
        )
        .await;
    let (_, lt) = s.launch(&s.cloud, &private, "private-a").await;
    assert_eq!(
        primary_of(&lt).associate_public_ip_address(),
        Some(false),
        "{lt:?}"
    );
}

fn primary_of(
    lt: &t::ResponseLaunchTemplateData,
) -> t::LaunchTemplateInstanceNetworkInterfaceSpecification {
    lt.network_interfaces()
        .first()
        .cloned()
        .expect("a primary interface")
}

async fn ip_prefix_count_gives_ipv4_prefixes_or_ipv6_prefixes_on_an_ipv6_cluster(s: &Setup) {
    let spec = serde_json::json!({"ipPrefixCount": 2});
    let nc = s.node_class(&s.cloud, "prefixes", spec.clone()).await;
    let (_, lt) = s.launch(&s.cloud, &nc, "prefixes-a").await;
    let v4 = primary(&lt, &s.security_groups().await);
    assert_eq!(v4.ipv4_prefix_count(), Some(2));
    assert_eq!(v4.ipv6_prefix_count(), None);
    assert_eq!(v4.primary_ipv6(), None);
    // The same node class on an IPv6 cluster.
    let mut settings = aws_settings("https://127.0.0.1:6443".into());
    settings.cluster.ip_family = Some("ipv6".into());
    settings.cluster.service_cidr = Some("fd30:1c53:5f8a::/108".into());
    let six = s.cloud_with(settings);
    let nc = s.node_class(&six, "prefixes-v6", spec).await;
    let (_, lt) = s.launch(&six, &nc, "prefixes-v6-a").await;
    let v6 = primary(&lt, &s.security_groups().await);
    assert_eq!(v6.ipv4_prefix_count(), None);
    assert_eq!(v6.ipv6_prefix_count(), Some(2));
    assert_eq!(v6.primary_ipv6(), Some(true));
    assert_eq!(v6.ipv6_address_count(), Some(1));
    // A node class setting no network field: on an IPv6 cluster its nodes still get their
    // primary IPv6 address (upstream writes the primary interface on every IPv6 template).
    let nc = s.node_class(&six, "plain-v6", serde_json::json!({})).await;
    let (_, lt) = s.launch(&six, &nc, "plain-v6-a").await;
    let plain = primary(&lt, &s.security_groups().await);
    assert_eq!(plain.primary_ipv6(), Some(true));
    assert_eq!(plain.ipv6_address_count(), Some(1));
    assert_eq!(plain.ipv4_prefix_count(), None);
}

async fn network_interfaces_reach_the_template_as_listed(s: &Setup) {
    let nc = s
        .node_class(
            &s.cloud,
            "efa",
            serde_json::json!({"networkInterfaces": [
                {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"}]}),
        )
        .await;
    let (_, lt) = s.launch(&s.cloud, &nc, "efa-a").await;
    let groups = s.security_groups().await;
    let interfaces = lt.network_interfaces();
    let seen: Vec<_> = interfaces
        .iter()
        .map(|n| (n.network_card_index(), n.device_index(), n.interface_type()))
        .collect();
    assert_eq!(
        seen,
        [
            (Some(0), Some(0), Some("interface")),
            (Some(1), Some(1), Some("efa-only")),
        ]
    );
    for n in interfaces {
        assert_eq!(n.groups(), groups, "every interface has the groups");
    }
    assert!(lt.security_group_ids().is_empty());
}

/// A NodeClaim requesting `vpc.amazonaws.com/efa` on a node class without
/// `networkInterfaces`: its type's EFA devices (c6in.32xlarge: 2, as counted in its capacity)
/// each become an `efa` interface on their own card.
async fn requested_efa_attaches_one_interface_per_card(s: &Setup) {
    let nc = s
        .node_class(&s.cloud, "efa-requested", serde_json::json!({}))
        .await;
    let claim = nodeclaim("efa-requested-a")
        .nodepool("default")
        .requirement(INSTANCE_TYPE_LABEL, Operator::In, ["c6in.32xlarge"])
        .requirement(CAPACITY_TYPE_LABEL, Operator::In, ["on-demand"])
        .request("cpu", "1")
        .request("vpc.amazonaws.com/efa", "1")
        .build();
    let launched = s
        .cloud
        .create(&claim, &nc)
        .await
        .unwrap_or_else(|e| panic!("efa-requested-a launches: {e}"));
    assert_eq!(launched.capacity.get("vpc.amazonaws.com/efa"), 2);
    let fleets = lock(&s.ec2.fleets).clone();
    let fleet = fleets.last().expect("a fleet request");
    let lt = s.template(&fleet.configs[0].launch_template).await;
    let seen: Vec<_> = lt
        .network_interfaces()
        .iter()
        .map(|n| (n.network_card_index(), n.device_index(), n.interface_type()))
        .collect();
    assert_eq!(
        seen,
        [
            (Some(0), Some(0), Some("efa")),
            (Some(1), Some(1), Some("efa")),
        ]
    );
}

async fn connection_tracking_reaches_the_primary_interface(s: &Setup) {
    let nc = s
        .node_class(
            &s.cloud,
            "conntrack",
            serde_json::json!({"connectionTracking": {
                "tcpEstablishedTimeout": 3600, "udpStreamTimeout": 90, "udpTimeout": 45}}),
        )
        .await;
    let (_, lt) = s.launch(&s.cloud, &nc, "conntrack-a").await;
    let primary = primary(&lt, &s.security_groups().await);
    let tracking = primary
        .connection_tracking_specification()
        .expect("ConnectionTrackingSpecification");
    assert_eq!(
        (
            tracking.tcp_established_timeout(),
            tracking.udp_stream_timeout(),
            tracking.udp_timeout()
        ),
        (Some(3600), Some(90), Some(45))
    );
}

async fn cpu_options_reach_the_template(s: &Setup) {
    let nc = s
        .node_class(
            &s.cloud,
            "nested",
            serde_json::json!({"cpuOptions": {"nestedVirtualization": "enabled"}}),
        )
        .await;
    let (_, lt) = s.launch(&s.cloud, &nc, "nested-a").await;
    assert_eq!(
        lt.cpu_options().and_then(|c| c.nested_virtualization()),
        Some(&t::NestedVirtualizationSpecification::Enabled),
        "{lt:?}"
    );
}

async fn volume_initialization_rate_reaches_the_template(s: &Setup) {
    // The rate needs a snapshot to restore from; moto has one once asked.
    let ec2 = s.moto.client().await;
    let volume = ec2
        .create_volume()
        .availability_zone("us-east-1a")
        .size(20)
        .send()
        .await
        .expect("volume");
    let snapshot = ec2
        .create_snapshot()
        .volume_id(volume.volume_id().expect("volume id"))
        .send()
        .await
        .expect("snapshot");
    let snapshot_id = snapshot.snapshot_id().expect("snapshot id").to_string();
    let nc = s
        .node_class(
            &s.cloud,
            "restored",
            serde_json::json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda",
                "rootVolume": true,
                "ebs": {"snapshotID": snapshot_id, "volumeSize": "20Gi",
                        "volumeInitializationRate": 250}}]}),
        )
        .await;
    let (_, lt) = s.launch(&s.cloud, &nc, "restored-a").await;
    let ebs = lt
        .block_device_mappings()
        .iter()
        .find(|b| b.device_name() == Some("/dev/xvda"))
        .and_then(|b| b.ebs())
        .expect("the root volume");
    assert_eq!(ebs.snapshot_id(), Some(snapshot_id.as_str()));
    assert_eq!(ebs.volume_initialization_rate(), Some(250));
}

async fn placement_group_selector_places_and_labels_the_launch(s: &Setup) {
    let nc = s
        .node_class(
            &s.cloud,
            "placed",
            serde_json::json!({"placementGroupSelector": {"name": "training"}}),
        )
        .await;
    let asked = lock(&s.ec2.queries).last().cloned().expect("looked up");
    assert_eq!(asked.names, ["training"]);
    assert_eq!(asked.filters, [Filter::new("state", "available")]);
    let (launched, lt) = s.launch(&s.cloud, &nc, "placed-a").await;
    assert_eq!(
        lt.placement().and_then(|p| p.group_id()),
        Some(GROUP_ID),
        "{lt:?}"
    );
    assert_eq!(lt.placement().and_then(|p| p.partition_number()), None);
    assert_eq!(
        launched
            .labels
            .get("karpenter.k8s.aws/placement-group-id")
            .map(String::as_str),
        Some(GROUP_ID)
    );
    // By id too.
    let by_id = s
        .node_class(
            &s.cloud,
            "placed-by-id",
            serde_json::json!({"placementGroupSelector": {"id": GROUP_ID}}),
        )
        .await;
    let (_, lt) = s.launch(&s.cloud, &by_id, "placed-by-id-a").await;
    assert_eq!(lt.placement().and_then(|p| p.group_id()), Some(GROUP_ID));
    // A group EC2 does not have: the node class says so and nothing launches.
    let mut missing = ec2nodeclass("unplaced")
        .role(format!("KarpenterNodeRole-{CLUSTER}"))
        .subnet_discovery(CLUSTER)
        .security_group_discovery(CLUSTER)
        .merge(serde_json::json!({"spec": {"placementGroupSelector": {"name": "gone"}}}))
        .build();
    let r = s.cloud.resolve_node_class(&missing).await;
    let (condition, reason, message) = r.not_ready.clone().expect("not ready");
    assert_eq!(
        (condition.as_str(), reason.as_str()),
        ("PlacementGroupReady", "PlacementGroupNotFound")
    );
    assert!(message.contains("\"gone\""), "{message}");
    missing.status = Some(r.status);
    let fleets_before = lock(&s.ec2.fleets).len();
    assert!(
        s.cloud
            .create(&on_demand("unplaced-a"), &missing)
            .await
            .is_err()
    );
    assert_eq!(lock(&s.ec2.fleets).len(), fleets_before, "no fleet");
    // The missing group is not asked for again within the minute (every instance-type listing
    // asks for the node class's group).
    let queries_before = lock(&s.ec2.queries).len();
    s.cloud
        .instance_types(&missing)
        .await
        .expect("instance types");
    assert!(
        s.cloud
            .create(&on_demand("unplaced-b"), &missing)
            .await
            .is_err()
    );
    assert_eq!(
        lock(&s.ec2.queries).len(),
        queries_before,
        "answered from the cache"
    );
}

/// A partition group's node class: its instance types require the group's id and offer its
/// partitions 1..3 to the scheduler; a NodeClaim asking for partition 2 launches into it and
/// is labelled 2; one asking for none is labelled with the partition EC2 placed it in.
async fn a_partition_group_offers_its_partitions_and_labels_the_partition(s: &Setup) {
    let nc = s
        .node_class(
            &s.cloud,
            "sharded",
            serde_json::json!({"placementGroupSelector": {"name": "shards"}}),
        )
        .await;
    let types = s.cloud.instance_types(&nc).await.expect("instance types");
    let m5 = types
        .iter()
        .find(|t| t.name == "m5.large")
        .expect("m5.large");
    let values = |key: &str| {
        m5.requirements
            .get(key)
            .and_then(|r| r.values().cloned())
            .map(|v| v.into_iter().collect::<Vec<_>>())
    };
    assert_eq!(
        values(PLACEMENT_GROUP_ID_LABEL),
        Some(vec![SHARDS_ID.to_string()])
    );
    assert_eq!(
        values(PLACEMENT_GROUP_PARTITION_LABEL),
        Some(vec!["1".to_string(), "2".into(), "3".into()])
    );
    // Asked for partition 2: the template places there and the NodeClaim says so.
    let claim = nodeclaim("sharded-a")
        .nodepool("default")
        .requirement(INSTANCE_TYPE_LABEL, Operator::In, ["m5.large"])
        .requirement(CAPACITY_TYPE_LABEL, Operator::In, ["on-demand"])
        .requirement(TOPOLOGY_ZONE_LABEL, Operator::In, ["us-east-1a"])
        .requirement(PLACEMENT_GROUP_PARTITION_LABEL, Operator::In, ["2"])
        .request("cpu", "1")
        .request("memory", "1Gi")
        .build();
    let launched = s.cloud.create(&claim, &nc).await.expect("launches");
    let fleet = lock(&s.ec2.fleets).last().cloned().expect("a fleet");
    let lt = s.template(&fleet.configs[0].launch_template).await;
    assert_eq!(lt.placement().and_then(|p| p.group_id()), Some(SHARDS_ID));
    assert_eq!(lt.placement().and_then(|p| p.partition_number()), Some(2));
    assert_eq!(
        launched
            .labels
            .get(PLACEMENT_GROUP_PARTITION_LABEL)
            .map(String::as_str),
        Some("2")
    );
    // Asked for none: EC2 picks (here partition 3) and the label follows the instance.
    *lock(&s.ec2.placed_partition) = Some(3);
    let (launched, lt) = s.launch(&s.cloud, &nc, "sharded-b").await;
    *lock(&s.ec2.placed_partition) = None;
    assert_eq!(lt.placement().and_then(|p| p.partition_number()), None);
    assert_eq!(
        launched
            .labels
            .get(PLACEMENT_GROUP_ID_LABEL)
            .map(String::as_str),
        Some(SHARDS_ID)
    );
    assert_eq!(
        launched
            .labels
            .get(PLACEMENT_GROUP_PARTITION_LABEL)
            .map(String::as_str),
        Some("3")
    );
}

/// An `InsufficientInstanceCapacity` for m5.large in us-east-1a in a launch into the cluster
/// group `training` marks that offering out of capacity for launches into `training` only: the
/// group's node class no longer offers it, a node class without a group still does. A type
/// that cannot launch into a cluster group is not offered to the group's node class at all.
async fn capacity_errors_in_a_placement_group_are_scoped_to_it(s: &Setup) {
    let placed = s
        .node_class(
            &s.cloud,
            "iced",
            serde_json::json!({"placementGroupSelector": {"name": "training"}}),
        )
        .await;
    let plain = s
        .node_class(&s.cloud, "iced-plain", serde_json::json!({}))
        .await;
    *lock(&s.ec2.capacity_errors) = Some(vec![capacity_error(
        "m5.large",
        "We currently do not have sufficient m5.large capacity in the Availability Zone you requested.",
    )]);
    let failed = s.cloud.create(&on_demand("iced-a"), &placed).await;
    assert!(failed.is_err(), "{failed:?}");
    let in_group = Scope::group(GROUP_ID);
    assert!(
        s.cloud
            .is_unavailable_in("m5.large", "us-east-1a", "on-demand", Some(&in_group))
    );
    assert!(
        !s.cloud
            .is_unavailable("m5.large", "us-east-1a", "on-demand")
    );
    assert!(!offered(&s.cloud, &placed, "m5.large").await);
    assert!(offered(&s.cloud, &plain, "m5.large").await);
    // A launch without the group still goes ahead.
    s.launch(&s.cloud, &plain, "iced-plain-a").await;
    // t3.large cannot launch into a cluster group (its PlacementGroupInfo lists partition and
    // spread only): the group's node class does not offer it.
    assert!(offered(&s.cloud, &plain, "t3.large").await);
    assert!(!offered(&s.cloud, &placed, "t3.large").await);
}

/// EC2's spread-group limit (7 instances per zone) answered for one type of a launch into the
/// spread group closes us-east-1a to every type of that launch, for that group only.
async fn a_spread_groups_zone_limit_closes_the_zone_for_that_group(s: &Setup) {
    let nc = s
        .node_class(
            &s.cloud,
            "spread",
            serde_json::json!({"placementGroupSelector": {"name": "spread"}}),
        )
        .await;
    *lock(&s.ec2.capacity_errors) = Some(vec![capacity_error(
        "m5.large",
        "You've reached the limit of instances in this spread placement group. A spread \
         placement group can have up to seven instances per Availability Zone.",
    )]);
    let claim = nodeclaim("spread-a")
        .nodepool("default")
        .requirement(INSTANCE_TYPE_LABEL, Operator::In, ["m5.large", "m5.xlarge"])
        .requirement(CAPACITY_TYPE_LABEL, Operator::In, ["on-demand"])
        .requirement(TOPOLOGY_ZONE_LABEL, Operator::In, ["us-east-1a"])
        .request("cpu", "1")
        .request("memory", "1Gi")
        .build();
    let failed = s.cloud.create(&claim, &nc).await;
    assert!(failed.is_err(), "{failed:?}");
    let in_group = Scope::group(SPREAD_ID);
    for t in ["m5.large", "m5.xlarge"] {
        assert!(
            s.cloud
                .is_unavailable_in(t, "us-east-1a", "on-demand", Some(&in_group)),
            "{t}"
        );
        assert!(!s.cloud.is_unavailable(t, "us-east-1a", "on-demand"), "{t}");
    }
    assert!(!offered(&s.cloud, &nc, "m5.xlarge").await);
}

/// An `InsufficientInstanceCapacity` fleet error for `instance_type` in us-east-1a.
fn capacity_error(instance_type: &str, message: &str) -> FleetError {
    FleetError {
        code: "InsufficientInstanceCapacity".into(),
        message: message.into(),
        instance_type: Some(instance_type.into()),
        zone: Some("us-east-1a".into()),
        subnet_id: None,
    }
}

/// Whether `nc`'s instance types offer `instance_type` on-demand in us-east-1a as available.
async fn offered(cloud: &AwsCloud, nc: &EC2NodeClass, instance_type: &str) -> bool {
    cloud
        .instance_types(nc)
        .await
        .expect("instance types")
        .iter()
        .find(|t| t.name == instance_type)
        .is_some_and(|t| {
            t.offerings
                .iter()
                .any(|o| o.zone == "us-east-1a" && o.capacity_type == "on-demand" && o.available)
        })
}

async fn context_reaches_create_fleet(s: &Setup) {
    let nc = s
        .node_class(
            &s.cloud,
            "context",
            serde_json::json!({"context": "ctx-ml-team"}),
        )
        .await;
    s.launch(&s.cloud, &nc, "context-a").await;
    let fleets = s.moto.recorded("CreateFleet");
    let with_context: Vec<&str> = fleets
        .iter()
        .filter_map(|f| f.get("Context").map(String::as_str))
        .collect();
    assert_eq!(
        with_context,
        ["ctx-ml-team"],
        "only this node class's fleet"
    );
    assert_eq!(
        fleets
            .last()
            .and_then(|f| f.get("Context"))
            .map(String::as_str),
        Some("ctx-ml-team"),
        "the newest fleet is this node class's"
    );
    assert!(fleets.len() > 1, "the other launches were recorded too");
}
