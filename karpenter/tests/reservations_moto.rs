//! The AWS provider's capacity reservations against moto's EC2 server on loopback. moto 5.2.1
//! does not serve DescribeCapacityReservations nor launch into reservations, so [`Reserving`]
//! stands in for that part of EC2 at the `Ec2` seam: it answers DescribeCapacityReservations
//! from a fixture (ids, `state`, `tag:`, `owner-id`, `instance-match-criteria` as EC2 filters),
//! reports an instance launched from a template targeting a reservation with that
//! `CapacityReservationId` (preference `capacity-reservations-only`), can refuse a reservation's
//! launches with `ReservationCapacityExceeded`, and forwards a `capacity-block` fleet as
//! on-demand (moto launches nothing for that target capacity type). Everything else (launch
//! templates, fleets, instances) is moto's; templates are read back with
//! DescribeLaunchTemplateVersions.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_sdk_ec2::types as t;
use controller::cloudprovider::CloudProvider;
use controller::cloudprovider::aws::AwsCloud;
use crds::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, TOPOLOGY_ZONE_LABEL};
use crds::{EC2NodeClass, NodeClaim, Operator};
use ec2api::{
    CapacityReservationInfo, CapacityReservationQuery, Ec2, Ec2Error, Filter, FleetError,
    FleetRequest, FleetResult, ImageInfo, ImageQuery, InstanceInfo, InstanceTypeInfo,
    LaunchTemplateData, LaunchTemplateInfo, SdkEc2, SecurityGroupInfo, SubnetInfo,
};
use jiff::{SignedDuration, Timestamp};
use karpenter_core::clock::{Clock, FakeClock};
use testutil::{ec2nodeclass, nodeclaim};

use crate::moto_cloud::{CLUSTER, Moto, aws_settings};

/// EC2's capacity reservations for an [`Ec2`] that has none (moto): see the module docs.
struct Reserving {
    inner: Arc<dyn Ec2>,
    reservations: Mutex<Vec<CapacityReservationInfo>>,
    /// Launch template name -> the reservation it targets.
    targets: Mutex<BTreeMap<String, String>>,
    /// Instance id -> the reservation it was launched into.
    launched_into: Mutex<BTreeMap<String, String>>,
    /// Reservations whose launches fail with `ReservationCapacityExceeded`.
    full: Mutex<BTreeSet<String>>,
    /// When set, DescribeCapacityReservations fails with this code.
    failing: Mutex<Option<String>>,
    fleets: Mutex<Vec<FleetRequest>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Reserving {
    fn new(inner: Arc<dyn Ec2>, reservations: Vec<CapacityReservationInfo>) -> Reserving {
        Reserving {
            inner,
            reservations: Mutex::new(reservations),
            targets: Mutex::default(),
            launched_into: Mutex::default(),
            full: Mutex::default(),
            failing: Mutex::default(),
            fleets: Mutex::default(),
        }
    }

    fn set_state(&self, id: &str, state: &str) {
        for r in lock(&self.reservations).iter_mut().filter(|r| r.id == id) {
            r.state = state.into();
        }
    }

    fn fleets(&self) -> Vec<FleetRequest> {
        lock(&self.fleets).clone()
    }

    fn matches(r: &CapacityReservationInfo, f: &Filter) -> bool {
        let has = |v: &str| f.values.iter().any(|x| x == v);
        match f.name.as_str() {
            "state" => has(&r.state),
            "owner-id" => has(&r.owner_id),
            "instance-match-criteria" => has(&r.instance_match_criteria),
            "tag-key" => r.tags.keys().any(|k| has(k)),
            name => match name.strip_prefix("tag:") {
                Some(key) => r.tags.get(key).is_some_and(|v| has(v)),
                None => false,
            },
        }
    }
}

/// An active reservation of m5.large in us-east-1a with room for `available`.
fn reservation(
    id: &str,
    kind: &str,
    available: i64,
    end: Option<Timestamp>,
) -> CapacityReservationInfo {
    CapacityReservationInfo {
        id: id.into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        total_instance_count: 2,
        available_instance_count: available,
        instance_match_criteria: "targeted".into(),
        reservation_type: kind.into(),
        end_date: end,
        owner_id: "111122223333".into(),
        state: "active".into(),
        tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
    }
}

#[async_trait]
impl Ec2 for Reserving {
    async fn describe_capacity_reservations(
        &self,
        query: CapacityReservationQuery,
    ) -> Result<Vec<CapacityReservationInfo>, Ec2Error> {
        if let Some(code) = lock(&self.failing).clone() {
            return Err(Ec2Error {
                code,
                message: "injected".into(),
            });
        }
        let all = lock(&self.reservations).clone();
        if let Some(unknown) = query
            .ids
            .iter()
            .find(|id| !all.iter().any(|r| &r.id == *id))
        {
            return Err(Ec2Error {
                code: "InvalidCapacityReservationId.NotFound".into(),
                message: format!("The capacity reservation ID '{unknown}' does not exist"),
            });
        }
        Ok(all
            .into_iter()
            .filter(|r| query.ids.is_empty() || query.ids.contains(&r.id))
            .filter(|r| query.filters.iter().all(|f| Reserving::matches(r, f)))
            .collect())
    }

    async fn create_launch_template(
        &self,
        name: &str,
        data: &LaunchTemplateData,
        tags: &BTreeMap<String, String>,
    ) -> Result<String, Ec2Error> {
        if let Some(id) = &data.capacity_reservation_id {
            lock(&self.targets).insert(name.to_string(), id.clone());
        }
        self.inner.create_launch_template(name, data, tags).await
    }

    async fn create_fleet(&self, request: &FleetRequest) -> Result<FleetResult, Ec2Error> {
        lock(&self.fleets).push(request.clone());
        let targets = lock(&self.targets).clone();
        let target = request
            .configs
            .iter()
            .find_map(|c| targets.get(&c.launch_template).cloned());
        if let Some(id) = &target
            && lock(&self.full).contains(id)
        {
            let errors = request
                .configs
                .iter()
                .flat_map(|c| &c.overrides)
                .map(|o| FleetError {
                    code: "ReservationCapacityExceeded".into(),
                    message: format!("Insufficient capacity in capacity reservation {id}"),
                    instance_type: Some(o.instance_type.clone()),
                    zone: Some(o.zone.clone()),
                    subnet_id: Some(o.subnet_id.clone()),
                })
                .collect();
            return Ok(FleetResult {
                instance_ids: vec![],
                errors,
            });
        }
        let mut forwarded = request.clone();
        if forwarded.capacity_type == ec2api::CAPACITY_BLOCK {
            forwarded.capacity_type = "on-demand".into();
        }
        let result = self.inner.create_fleet(&forwarded).await?;
        if let Some(id) = target {
            for i in &result.instance_ids {
                lock(&self.launched_into).insert(i.clone(), id.clone());
            }
            for r in lock(&self.reservations).iter_mut().filter(|r| r.id == id) {
                r.available_instance_count -= result.instance_ids.len() as i64;
            }
        }
        Ok(result)
    }

    async fn describe_instances(
        &self,
        ids: &[String],
        filters: Vec<Filter>,
    ) -> Result<Vec<InstanceInfo>, Ec2Error> {
        let into = lock(&self.launched_into).clone();
        let mut found = self.inner.describe_instances(ids, filters).await?;
        for i in &mut found {
            if let Some(id) = into.get(&i.id) {
                i.capacity_reservation_id = Some(id.clone());
                i.capacity_reservation_preference = Some("capacity-reservations-only".into());
            }
        }
        Ok(found)
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
    async fn delete_launch_template(&self, id: &str) -> Result<(), Ec2Error> {
        self.inner.delete_launch_template(id).await
    }
    async fn terminate_instances(&self, ids: &[String]) -> Result<(), Ec2Error> {
        self.inner.terminate_instances(ids).await
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
    cloud: AwsCloud,
    ec2: Arc<Reserving>,
    clock: Arc<FakeClock>,
}

async fn setup(reservations: Vec<CapacityReservationInfo>) -> Setup {
    let moto = Moto::start();
    moto.seed_network(CLUSTER).await;
    let clock = Arc::new(FakeClock::new(Timestamp::now()));
    let ec2 = Arc::new(Reserving::new(
        Arc::new(SdkEc2::new(&moto.config().await)),
        reservations,
    ));
    let cloud = AwsCloud::new(
        Arc::clone(&ec2) as Arc<dyn Ec2>,
        aws_settings("https://127.0.0.1:6443".into()),
        Arc::clone(&clock) as Arc<dyn Clock>,
    )
    .expect("embedded data")
    // The `ReservedCapacity` gate is on (upstream's default, and `run`'s).
    .with_reserved_capacity(true);
    Setup {
        moto,
        cloud,
        ec2,
        clock,
    }
}

/// The EC2NodeClass `default` selecting reservations with `terms`, resolved.
async fn node_class(cloud: &AwsCloud, terms: serde_json::Value) -> EC2NodeClass {
    let mut nc = ec2nodeclass("default")
        .role(format!("KarpenterNodeRole-{CLUSTER}"))
        .subnet_discovery(CLUSTER)
        .security_group_discovery(CLUSTER)
        .build();
    nc.spec.capacity_reservation_selector_terms = serde_json::from_value(terms).expect("terms");
    let r = cloud.resolve_node_class(&nc).await;
    assert_eq!(r.not_ready, None, "node class resolves");
    nc.status = Some(r.status);
    nc
}

/// A NodeClaim for m5.large in us-east-1a with the capacity types `capacity`.
fn claim(name: &str, capacity: &[&str]) -> NodeClaim {
    nodeclaim(name)
        .nodepool("default")
        .requirement(INSTANCE_TYPE_LABEL, Operator::In, ["m5.large"])
        .requirement(CAPACITY_TYPE_LABEL, Operator::In, capacity)
        .requirement(TOPOLOGY_ZONE_LABEL, Operator::In, ["us-east-1a"])
        .request("cpu", "1")
        .request("memory", "1Gi")
        .build()
}

/// The newest version's data of the launch template `name`, as moto stored it.
async fn template(moto: &Moto, name: &str) -> t::ResponseLaunchTemplateData {
    moto.client()
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

fn reserved_room(
    types: &[Arc<karpenter_core::capacity::InstanceType>],
    id: &str,
) -> Option<(bool, i64)> {
    types
        .iter()
        .flat_map(|t| &t.offerings)
        .find(|o| o.reservation_id.as_deref() == Some(id))
        .map(|o| (o.available, o.reservation_capacity))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodeclaim_whose_only_offering_is_reserved_launches_into_the_reservation() {
    let s = setup(vec![
        reservation("cr-0odcr00000000001", "default", 1, None),
        // Not selected: another team's.
        CapacityReservationInfo {
            tags: BTreeMap::from([("team".to_string(), "web".to_string())]),
            ..reservation("cr-0other0000000002", "default", 5, None)
        },
    ])
    .await;
    let nc = node_class(&s.cloud, serde_json::json!([{"tags": {"team": "ml"}}])).await;
    let resolved = &nc.status.as_ref().expect("status").capacity_reservations;
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(resolved[0].id, "cr-0odcr00000000001");
    assert_eq!(resolved[0].available_instance_count, Some(1));
    let types = s.cloud.instance_types(&nc).await.expect("types");
    assert_eq!(
        reserved_room(&types, "cr-0odcr00000000001"),
        Some((true, 1))
    );

    let launched = s
        .cloud
        .create(&claim("default-reserved", &["reserved"]), &nc)
        .await
        .expect("launches into the reservation");
    assert_eq!(launched.labels[CAPACITY_TYPE_LABEL], "reserved");
    assert_eq!(
        launched.labels["karpenter.k8s.aws/capacity-reservation-id"],
        "cr-0odcr00000000001"
    );
    assert_eq!(
        launched.labels["karpenter.k8s.aws/capacity-reservation-type"],
        "default"
    );
    // An On-Demand Capacity Reservation is launched as on-demand capacity through a template
    // that names it.
    let fleets = s.ec2.fleets();
    assert_eq!(fleets.len(), 1);
    assert_eq!(fleets[0].capacity_type, "on-demand");
    let lt = template(&s.moto, &fleets[0].configs[0].launch_template).await;
    let spec = lt
        .capacity_reservation_specification()
        .expect("CapacityReservationSpecification");
    assert_eq!(
        spec.capacity_reservation_preference(),
        Some(&t::CapacityReservationPreference::CapacityReservationsOnly)
    );
    assert_eq!(
        spec.capacity_reservation_target()
            .and_then(|t| t.capacity_reservation_id()),
        Some("cr-0odcr00000000001")
    );
    assert_eq!(lt.instance_market_options(), None);
    // The launch took the reservation's one place.
    let types = s.cloud.instance_types(&nc).await.expect("types");
    assert_eq!(
        reserved_room(&types, "cr-0odcr00000000001"),
        Some((false, 0))
    );

    // The instance counts as reserved while its reservation is active ...
    let running = s.cloud.get(&launched.provider_id).await.expect("get");
    assert_eq!(running.capacity_type, "reserved");
    // ... also when EC2 cannot be asked (never demoted on a guess) ...
    *lock(&s.ec2.failing) = Some("RequestLimitExceeded".into());
    s.clock.advance(SignedDuration::from_secs(61));
    assert_eq!(
        s.cloud
            .get(&launched.provider_id)
            .await
            .expect("get")
            .capacity_type,
        "reserved"
    );
    let listed = s.cloud.list().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].capacity_type, "reserved");
    // ... and on-demand once EC2 reports the reservation cancelled.
    *lock(&s.ec2.failing) = None;
    s.ec2.set_state("cr-0odcr00000000001", "cancelled");
    s.clock.advance(SignedDuration::from_secs(61));
    assert_eq!(
        s.cloud
            .get(&launched.provider_id)
            .await
            .expect("get")
            .capacity_type,
        "on-demand"
    );
    let described = s
        .cloud
        .capacity_reservations(&["cr-0odcr00000000001".into(), "cr-0nosuch000000009".into()])
        .await
        .expect("described by id");
    assert_eq!(described.len(), 1, "an unknown id is left out");
    assert_eq!(described[0].state, "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_block_launches_with_the_capacity_block_market() {
    let end = Timestamp::now() + SignedDuration::from_hours(24);
    let s = setup(vec![reservation(
        "cr-0block0000000001",
        "capacity-block",
        2,
        Some(end),
    )])
    .await;
    let nc = node_class(&s.cloud, serde_json::json!([{"id": "cr-0block0000000001"}])).await;
    let launched = s
        .cloud
        .create(&claim("default-block", &["reserved"]), &nc)
        .await
        .expect("launches into the block");
    assert_eq!(launched.labels[CAPACITY_TYPE_LABEL], "reserved");
    assert_eq!(
        launched.labels["karpenter.k8s.aws/capacity-reservation-type"],
        "capacity-block"
    );
    let fleets = s.ec2.fleets();
    assert_eq!(fleets.len(), 1);
    assert_eq!(fleets[0].capacity_type, "capacity-block");
    let lt = template(&s.moto, &fleets[0].configs[0].launch_template).await;
    assert_eq!(
        lt.instance_market_options().and_then(|m| m.market_type()),
        Some(&t::MarketType::CapacityBlock)
    );
    assert_eq!(
        lt.capacity_reservation_specification()
            .and_then(|s| s.capacity_reservation_target())
            .and_then(|t| t.capacity_reservation_id()),
        Some("cr-0block0000000001")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_reservation_falls_back_to_on_demand_and_a_failed_lookup_keeps_what_was_found() {
    let s = setup(vec![reservation("cr-0full00000000001", "default", 1, None)]).await;
    let nc = node_class(&s.cloud, serde_json::json!([{"id": "cr-0full00000000001"}])).await;
    // Someone else took the place after the describe.
    lock(&s.ec2.full).insert("cr-0full00000000001".into());
    let launched = s
        .cloud
        .create(&claim("default-fallback", &["reserved", "on-demand"]), &nc)
        .await
        .expect("falls back to on-demand");
    assert_eq!(launched.labels[CAPACITY_TYPE_LABEL], "on-demand");
    assert!(
        !launched
            .labels
            .contains_key("karpenter.k8s.aws/capacity-reservation-id")
    );
    assert!(
        launched
            .warnings
            .iter()
            .any(|w| w.contains("ReservationCapacityExceeded")),
        "{:?}",
        launched.warnings
    );
    let fleets = s.ec2.fleets();
    assert_eq!(fleets.len(), 2, "the reservation, then on-demand");
    assert_ne!(
        fleets[0].configs[0].launch_template, fleets[1].configs[0].launch_template,
        "on-demand does not use the reservation's template"
    );
    // With the gate on, the on-demand template keeps out of open reservations (upstream's
    // targeted launch mode), so no launch uses reserved capacity Karpenter does not count.
    let on_demand = template(&s.moto, &fleets[1].configs[0].launch_template).await;
    assert_eq!(
        on_demand
            .capacity_reservation_specification()
            .and_then(|c| c.capacity_reservation_preference()),
        Some(&t::CapacityReservationPreference::None)
    );
    // With the gate off, templates leave EC2's default (`open`) as before.
    let gate_off = AwsCloud::new(
        Arc::clone(&s.ec2) as Arc<dyn Ec2>,
        aws_settings("https://127.0.0.1:6443".into()),
        Arc::clone(&s.clock) as Arc<dyn Clock>,
    )
    .expect("embedded data");
    gate_off
        .create(&claim("default-open", &["on-demand"]), &nc)
        .await
        .expect("on-demand launch");
    let fleets = s.ec2.fleets();
    let open = template(
        &s.moto,
        &fleets[fleets.len() - 1].configs[0].launch_template,
    )
    .await;
    assert_eq!(open.capacity_reservation_specification(), None);
    assert!(s.cloud.is_unavailable("m5.large", "us-east-1a", "reserved"));
    let types = s.cloud.instance_types(&nc).await.expect("types");
    assert_eq!(
        reserved_room(&types, "cr-0full00000000001").map(|r| r.0),
        Some(false)
    );

    // DescribeCapacityReservations failing: the reservations found before stay, and the
    // resolution says why, as CapacityReservationsReady.
    *lock(&s.ec2.failing) = Some("RequestLimitExceeded".into());
    let r = s.cloud.resolve_node_class(&nc).await;
    let (condition, reason, message) = r.not_ready.clone().expect("reported");
    assert_eq!(
        (condition.as_str(), reason.as_str()),
        (
            "CapacityReservationsReady",
            "CapacityReservationsResolutionFailed"
        )
    );
    assert!(message.contains("RequestLimitExceeded"), "{message}");
    assert_eq!(
        r.status.capacity_reservations,
        nc.status.as_ref().expect("status").capacity_reservations
    );
}
