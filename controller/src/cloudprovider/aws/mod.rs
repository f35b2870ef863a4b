//! The AWS cloud provider (upstream `aws:pkg/cloudprovider`, `aws:pkg/providers/instance`):
//! NodeClaims become EC2 instances through CreateFleet, behind the narrow [`ec2api::Ec2`] trait.
//!
//! - **Instance types**: DescribeInstanceTypes + DescribeInstanceTypeOfferings, refreshed every
//!   5 minutes, with upstream's labels, capacity and overhead (shared with the simulated cloud);
//!   on-demand prices from the Pricing API ([`pricing`], refreshed every 12h) over the region's
//!   vendored table (us-east-1's, as an estimate, where none is vendored), spot prices from
//!   DescribeSpotPriceHistory, else derived as the simulated cloud does.
//! - **Launch**: at most 60 of the NodeClaim's instance types (cheapest first) x one subnet per
//!   allowed zone, spot with `price-capacity-optimized` when the NodeClaim allows spot and a
//!   spot offering is available, else on-demand with `lowest-price` (both `prioritized`, in the
//!   NodeClaim's order, when a NodeOverlay changed its prices); one launch template per
//!   image (see [`launchtemplate`]). The NodeClaim's name is the idempotency token, and an
//!   instance already tagged for the NodeClaim is returned instead of launching another.
//! - **Capacity errors** in the fleet's answer mark the offering (type, zone, capacity type)
//!   unavailable for [`INSUFFICIENT_CAPACITY_TTL`] (for a launch into a placement group, for
//!   launches into that group, and partition, only: [`placementgroup::Scope`]; a spread group's
//!   7-per-zone limit marks every type of the launch in that zone for the group); the launch
//!   then tries the offerings left,
//!   up to [`MAX_LAUNCH_ATTEMPTS`] requests. Errors next to a launched instance are returned as
//!   [`Launched::warnings`].
//! - **Get / list / delete** by providerID and by the cluster's tags, in batches of at most
//!   [`BATCH`] ids.
//! - **Interruption queue**: the SQS queue `--interruption-queue` names ([`sqs`]), offered to
//!   the interruption controller; an interrupted spot offering is marked unavailable as a
//!   capacity error marks it.
//! - **Capacity reservations** ([`reservation`]): the node class's
//!   `capacityReservationSelectorTerms` resolve through DescribeCapacityReservations into
//!   `status.capacityReservations` (the provider is not given the feature gates: the node
//!   class controller drops them with `ReservedCapacity` off); each resolved reservation still
//!   offered adds a `reserved` offering
//!   (price on-demand / 10,000,000, room its `AvailableInstanceCount`), tried before spot and
//!   on-demand. A reserved launch uses one launch template per reservation, targeting it
//!   (`capacity-reservations-only`; `MarketType=capacity-block` for a Capacity Block) and the
//!   NodeClaim is labelled with the reservation's id and type. An instance in a reservation
//!   reports `reserved` until EC2 says the reservation ended.
//! - **Placement groups** ([`placementgroup`]): the node class's `placementGroupSelector` is
//!   looked up with DescribePlacementGroups (its `PlacementGroupReady` condition); the node
//!   class's instance types require its id (and a partition group's partitions), launches go
//!   into it through the template's `Placement`, and the NodeClaim is labelled with its id and,
//!   in a partition group, its partition (asked for, else the instance's).
//!   The node class's `context` goes to CreateFleet as its `Context`.

pub mod alias;
#[cfg(test)]
mod alias_tests;
pub mod cluster;
pub mod launchtemplate;
pub mod nodeclass;
#[cfg(test)]
mod nodeclass_tests;
pub mod placementgroup;
pub mod pricing;
pub mod reservation;
pub mod sqs;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use crds::ec2nodeclass::AmiFamily;
use crds::labels as l;
use crds::{EC2NodeClass, NodeClaim};
use jiff::{SignedDuration, Timestamp};

use ec2api::{
    self as ec2, Ec2, Ec2Error, Filter, FleetConfig, FleetOverride, FleetRequest, InstanceInfo,
    PlacementGroupInfo, instance_id, provider_id,
};

use self::launchtemplate::ClusterInfo;
use self::pricing::OnDemandPrices;
use super::CloudProvider;
use super::queue::InterruptionQueue;
use karpenter_core::capacity::catalog::{self, Catalog, CatalogEntry, TypeSpec};
use karpenter_core::capacity::node_class::{CapacityConfig, CapacityOptions};
use karpenter_core::capacity::reservation::{
    self as reservations, RESERVED_PRICE_DIVISOR, Record, ReservedCapacity,
};
use karpenter_core::capacity::{InstanceType, launch_offerings};
use karpenter_core::clock::Clock;
use karpenter_core::cloud::compatible_ami;
use karpenter_core::cloud::{
    CloudError, Instance, Launched, NodeClassResolution, ordered_type_names,
};
use karpenter_core::scheduling::requirements::Requirements;

/// How long an offering that ran out of capacity stays unavailable (upstream's ICE cache, 3m).
pub const INSUFFICIENT_CAPACITY_TTL: SignedDuration = SignedDuration::from_secs(180);
/// How long instance types, offerings and spot prices are cached (upstream: 5m).
pub const INSTANCE_TYPE_TTL: SignedDuration = SignedDuration::from_secs(300);
/// Most instance types one fleet request names (upstream: 60).
pub const MAX_INSTANCE_TYPES: usize = 60;
/// Most CreateFleet requests one launch makes while offerings keep failing on capacity.
pub const MAX_LAUNCH_ATTEMPTS: usize = 3;
/// Most instance ids per DescribeInstances or TerminateInstances call.
pub const BATCH: usize = 1000;
/// `CapacityReservationsReady=False`: DescribeCapacityReservations failed (the reservations
/// found before stay in the status).
pub const CAPACITY_RESERVATIONS_RESOLUTION_FAILED: &str = "CapacityReservationsResolutionFailed";
/// `ValidationSucceeded=False` of an AL2023 node class while the cluster's service CIDR is not
/// known (upstream's reason).
pub const CLUSTER_CIDR_RESOLUTION_FAILED: &str = "ClusterCIDRResolutionFailed";
/// Instance states that still count as an instance (not terminated or terminating).
const LIVE_STATES: [&str; 4] = ["pending", "running", "stopping", "stopped"];

/// Settings of the AWS provider.
#[derive(Clone, Debug)]
pub struct AwsSettings {
    /// Cluster name: tags and discovery.
    pub cluster_name: String,
    /// API server URL and CA bundle written into user data.
    pub cluster: ClusterInfo,
    /// Region, e.g. `us-east-1`.
    pub region: String,
    /// Kubernetes minor version for AMI aliases, e.g. `1.32`.
    pub kubernetes_version: String,
}

/// Instance types as EC2 describes them, before zones and availability are applied.
struct TypeData {
    fetched: Timestamp,
    /// The [`OnDemandPrices::generation`] the entries were priced at.
    prices_generation: u64,
    entries: Vec<CatalogEntry>,
    spot: HashMap<(String, String), f64>,
    /// Each type's placement group strategies (`PlacementGroupInfo.SupportedStrategies`).
    strategies: HashMap<String, Vec<String>>,
}

type OfferingKey = (String, String, String);

/// An insufficient-capacity mark: the offering, and the placement group (and partition) the
/// failed launch went into, `None` for a launch into none (which marks it for everyone).
type UnavailableKey = (OfferingKey, Option<placementgroup::Scope>);

/// Instance types are listed per zone set, node class capacity settings and placement group
/// (its id and partition count).
type TypeCacheKey = (BTreeSet<String>, CapacityConfig, Option<(String, i32)>);

#[derive(Default)]
struct State {
    types: Option<Arc<TypeData>>,
    unavailable: HashMap<UnavailableKey, Timestamp>,
    by_zones: HashMap<TypeCacheKey, Arc<Vec<Arc<InstanceType>>>>,
    templates: BTreeSet<String>,
    /// Capacity reservations as last described, by id.
    reservations: HashMap<String, reservation::Described>,
    /// The cluster's service CIDR once EKS DescribeCluster gave it.
    service_cidr: Option<String>,
    /// The cluster's IP family once EKS DescribeCluster gave it.
    ip_family: Option<String>,
    /// Placement groups as last looked up, by the selector that named them
    /// ([`placementgroup::shown`]), with when.
    placement_groups: HashMap<String, (Timestamp, PlacementGroupInfo)>,
    /// Selectors EC2 last answered with no available group, with when (upstream caches that
    /// answer for its TTL too: every instance-type listing asks for the group).
    placement_groups_missing: HashMap<String, Timestamp>,
}

/// The AWS cloud provider.
pub struct AwsCloud {
    ec2: Arc<dyn Ec2>,
    settings: AwsSettings,
    clock: Arc<dyn Clock>,
    catalog: Arc<Catalog>,
    /// On-demand prices of the region: its vendored table, then the Pricing API's answers.
    prices: Arc<OnDemandPrices>,
    capacity: CapacityOptions,
    state: Mutex<State>,
    /// Held by the one caller fetching the instance-type catalogue ([`AwsCloud::type_data`]):
    /// one fetch at a time, however many controllers ask at once.
    fetching_types: tokio::sync::Mutex<()>,
    /// The SQS interruption queue (`--interruption-queue`), if any.
    interruption_queue: Option<Arc<dyn InterruptionQueue>>,
    /// The `ReservedCapacity` gate: on-demand and spot launch templates then stay out of open
    /// capacity reservations ([`AwsCloud::with_reserved_capacity`]).
    reserved_capacity: bool,
}

impl AwsCloud {
    /// A provider over `ec2`, pricing on-demand offerings from the settings' region's vendored
    /// table until [`pricing::run`] refreshes [`AwsCloud::on_demand_prices`].
    ///
    /// Errors: the embedded price and ENI data are malformed (a build defect).
    pub fn new(
        ec2: Arc<dyn Ec2>,
        settings: AwsSettings,
        clock: Arc<dyn Clock>,
    ) -> Result<AwsCloud, Arc<catalog::CatalogError>> {
        let prices = Arc::new(OnDemandPrices::new(&settings.region)?);
        Ok(AwsCloud {
            ec2,
            settings,
            clock,
            catalog: Catalog::embedded()?,
            prices,
            capacity: CapacityOptions::default(),
            state: Mutex::new(State::default()),
            fetching_types: tokio::sync::Mutex::new(()),
            interruption_queue: None,
            reserved_capacity: false,
        })
    }

    /// What nodes join: the settings' cluster, with the service CIDR discovered by
    /// [`AwsCloud::resolve_service_cidr`] when the settings gave none.
    pub fn cluster(&self) -> ClusterInfo {
        let mut cluster = self.settings.cluster.clone();
        let state = self.lock();
        if cluster.service_cidr.is_none() {
            cluster.service_cidr = state.service_cidr.clone();
        }
        if cluster.ip_family.is_none() {
            cluster.ip_family = state.ip_family.clone();
        }
        cluster
    }

    /// The cluster's service CIDR: as the settings give it, else as EKS DescribeCluster reports
    /// it (`kubernetesNetworkConfig.serviceIpv4Cidr`, else `serviceIpv6Cidr`), asked until it
    /// answers and then kept (upstream `ResolveClusterCIDR`).
    ///
    /// Errors: DescribeCluster failed or reported no CIDR; the message names the cluster and
    /// what to fix.
    pub async fn resolve_service_cidr(&self) -> Result<String, String> {
        if let Some(cidr) = self.cluster().service_cidr {
            return Ok(cidr);
        }
        let name = &self.settings.cluster_name;
        let network = self.ec2.describe_cluster(name).await.map_err(|e| {
            format!(
                "Failed to detect the cluster CIDR: EKS DescribeCluster {name:?}: {e} (is \
                 CLUSTER_NAME the EKS cluster's name, and may the controller call \
                 eks:DescribeCluster?)"
            )
        })?;
        if let Some(family) = &network.ip_family {
            self.lock().ip_family = Some(family.clone());
        }
        let cidr = network
            .service_ipv4_cidr
            .or(network.service_ipv6_cidr)
            .ok_or_else(|| {
                format!(
                    "Failed to detect the cluster CIDR: EKS DescribeCluster {name:?} reports no \
                     service CIDR"
                )
            })?;
        tracing::info!(cluster = %name, cluster_cidr = %cidr, "discovered cluster CIDR");
        self.lock().service_cidr = Some(cidr.clone());
        Ok(cidr)
    }

    /// The same provider reading interruption events from `queue` (the SQS queue
    /// `--interruption-queue` names, see [`sqs::SqsQueue`]).
    pub fn with_interruption_queue(mut self, queue: Arc<dyn InterruptionQueue>) -> AwsCloud {
        self.interruption_queue = Some(queue);
        self
    }

    /// The same provider under the `ReservedCapacity` feature gate (`on`): as upstream's
    /// targeted launch mode (`aws:pkg/providers/launchtemplate/types.go`), templates that do not
    /// target a reservation set `CapacityReservationPreference: none`, so an on-demand or spot
    /// launch never lands in an open reservation Karpenter does not count. Off (the default
    /// here), they leave EC2's `open`.
    pub fn with_reserved_capacity(mut self, on: bool) -> AwsCloud {
        self.reserved_capacity = on;
        self
    }

    /// The same provider with `RESERVED_ENIS` and `VM_MEMORY_OVERHEAD_PERCENT` set.
    pub fn with_capacity_options(mut self, capacity: CapacityOptions) -> AwsCloud {
        self.capacity = capacity;
        self
    }

    /// `RESERVED_ENIS` and `VM_MEMORY_OVERHEAD_PERCENT` as this provider sizes instance types.
    pub fn capacity_options(&self) -> CapacityOptions {
        self.capacity
    }

    /// The capacity settings of a node class under this provider's options.
    ///
    /// Errors: [`CloudError::NodeClassNotReady`] naming the kubelet or block device setting
    /// that does not parse.
    pub fn capacity_config(&self, node_class: &EC2NodeClass) -> Result<CapacityConfig, CloudError> {
        CapacityConfig::from_node_class(node_class, self.capacity)
            .map_err(|e| CloudError::NodeClassNotReady(e.to_string()))
    }

    /// The on-demand prices it launches and reports with, for [`pricing::run`] to refresh.
    pub fn on_demand_prices(&self) -> &Arc<OnDemandPrices> {
        &self.prices
    }

    /// The EC2 API this provider calls.
    pub fn ec2(&self) -> &Arc<dyn Ec2> {
        &self.ec2
    }

    /// The cluster name, API server, region and Kubernetes version it launches with.
    pub fn settings(&self) -> &AwsSettings {
        &self.settings
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn cluster_tag(&self) -> String {
        format!(
            "{}{}",
            l::CLUSTER_TAG_KEY_PREFIX,
            self.settings.cluster_name
        )
    }

    /// Whether an offering is marked out of capacity now for everyone (a launch into no
    /// placement group failed on it).
    pub fn is_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str) -> bool {
        self.is_unavailable_in(instance_type, zone, capacity_type, None)
    }

    /// Whether an offering is marked out of capacity now exactly in `scope` (a placement
    /// group, and partition), or for everyone with `None`.
    pub fn is_unavailable_in(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: &str,
        scope: Option<&placementgroup::Scope>,
    ) -> bool {
        let now = self.clock.now();
        let key = (
            (instance_type.into(), zone.into(), capacity_type.into()),
            scope.cloned(),
        );
        self.lock()
            .unavailable
            .get(&key)
            .is_some_and(|until| *until > now)
    }

    fn mark_unavailable(&self, keys: impl IntoIterator<Item = UnavailableKey>) {
        let until = self.clock.now() + INSUFFICIENT_CAPACITY_TTL;
        let mut s = self.lock();
        let mut changed = false;
        for key in keys {
            let ((instance_type, zone, capacity_type), scope) = &key;
            tracing::info!(%instance_type, %zone, %capacity_type,
                placement_group = scope.as_ref().map_or("", |s| s.group_id.as_str()),
                placement_group_partition = scope.as_ref().and_then(|s| s.partition.as_deref()).unwrap_or(""),
                "offering out of capacity; skipping it for 3m");
            s.unavailable.insert(key, until);
            changed = true;
        }
        if changed {
            s.by_zones.clear();
        }
    }

    /// The instance-type catalogue (DescribeInstanceTypes, the offerings and spot prices),
    /// fetched at most once per [`INSTANCE_TYPE_TTL`] and one fetch at a time: while one
    /// caller refreshes expired data, the others are answered with the expired data at once;
    /// with no data yet, they wait for that fetch instead of starting their own (after a
    /// restart every controller asks at once; on EC2 each full fetch is several paged calls
    /// that throttle). A failed refresh keeps serving the expired data, with a warning.
    ///
    /// Errors: the first fetch failed (nothing to serve).
    async fn type_data(&self) -> Result<Arc<TypeData>, CloudError> {
        // Data priced before the last price refresh is stale as well: it is fetched again.
        let fresh = |t: &Arc<TypeData>| {
            self.clock.now().duration_since(t.fetched) < INSTANCE_TYPE_TTL
                && t.prices_generation == self.prices.generation()
        };
        let cached = self.lock().types.clone();
        if let Some(t) = &cached
            && fresh(t)
        {
            return Ok(Arc::clone(t));
        }
        let _fetching = match (self.fetching_types.try_lock(), &cached) {
            (Ok(guard), _) => guard,
            // Another caller is refreshing: the expired data serves meanwhile.
            (Err(_), Some(stale)) => return Ok(Arc::clone(stale)),
            (Err(_), None) => self.fetching_types.lock().await,
        };
        // Whoever held the fetch before may have just stored fresh data.
        let cached = self.lock().types.clone();
        if let Some(t) = &cached
            && fresh(t)
        {
            return Ok(Arc::clone(t));
        }
        match self.fetch_type_data().await {
            Ok(data) => Ok(data),
            Err(e) => match cached {
                Some(stale) => {
                    tracing::warn!(error = %e, "refreshing instance types failed; serving the previous catalogue");
                    Ok(stale)
                }
                None => Err(e),
            },
        }
    }

    /// One fetch of the instance-type catalogue, stored for [`AwsCloud::type_data`].
    ///
    /// Errors: DescribeInstanceTypes or DescribeInstanceTypeOfferings failed.
    async fn fetch_type_data(&self) -> Result<Arc<TypeData>, CloudError> {
        let now = self.clock.now();
        let prices_generation = self.prices.generation();
        let table = self.prices.table();
        let infos = self.ec2.describe_instance_types().await.map_err(other)?;
        let offerings = self
            .ec2
            .describe_instance_type_offerings()
            .await
            .map_err(other)?;
        let spot: HashMap<(String, String), f64> = match self.ec2.spot_prices().await {
            // A spot price above on-demand or under 5% of it is not a market price (emulators
            // answer with a constant); such offerings get the derived estimate instead.
            Ok(prices) => prices
                .into_iter()
                .filter(|(t, _, p)| table.get(t).is_some_and(|od| *p >= 0.05 * od && *p <= od))
                .map(|(t, z, p)| ((t, z), p))
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "spot price history unavailable; deriving spot prices");
                HashMap::new()
            }
        };
        let mut zones: HashMap<String, BTreeSet<String>> = HashMap::new();
        for (t, z) in offerings {
            zones.entry(t).or_default().insert(z);
        }
        let mut entries = Vec::new();
        let mut strategies = HashMap::new();
        for info in infos {
            // No price known: upstream leaves such types out too. (The vendored data also gives
            // the ENI, Neuron and EFA figures below.)
            let (Some(known), Some(on_demand)) =
                (self.catalog.get(&info.name), table.get(&info.name))
            else {
                continue;
            };
            let spec = TypeSpec {
                instance_type: info.name.clone(),
                vcpus: info.vcpus,
                memory_mib: info.memory_mib,
                architectures: info.architectures.join(" "),
                hypervisor: info.hypervisor.clone(),
                gpu_count: info.gpu.as_ref().map_or(0, |g| g.0),
                gpu_manufacturer: info.gpu.as_ref().map(|g| g.1.clone()).unwrap_or_default(),
                gpu_name: info.gpu.as_ref().map(|g| g.2.clone()).unwrap_or_default(),
                gpu_memory_mib: info.gpu.as_ref().map(|g| g.3),
                accelerator_count: info.accelerator.as_ref().map_or(0, |a| a.0),
                accelerator_name: info
                    .accelerator
                    .as_ref()
                    .map(|a| a.1.clone())
                    .unwrap_or_default(),
                instance_storage_gb: info.instance_storage.as_ref().map(|s| s.0),
                instance_storage_type: info
                    .instance_storage
                    .as_ref()
                    .map(|s| s.1.clone())
                    .unwrap_or_default(),
                max_network_interfaces: info.max_network_interfaces,
                ipv4_per_interface: info.ipv4_per_interface,
                baseline_bandwidth_gbps: info.baseline_bandwidth_gbps,
                usage_classes: info.usage_classes.join(" "),
                ..TypeSpec::default()
            };
            strategies.insert(info.name.clone(), info.placement_group_strategies.clone());
            let type_zones = zones.remove(&info.name).unwrap_or_default();
            if let Some(mut entry) = catalog::entry(&spec, on_demand, None, type_zones) {
                entry.labels.insert(
                    l::TOPOLOGY_REGION_LABEL.to_string(),
                    self.settings.region.clone(),
                );
                // The vendored ENI table decides max pods where it knows the type; Neuron and
                // EFA counts come from the vendored data (the EC2 client does not read them).
                entry.spec.max_network_interfaces = known.spec.max_network_interfaces;
                entry.spec.ipv4_per_interface = known.spec.ipv4_per_interface;
                entry.spec.neuron_devices = known.spec.neuron_devices;
                entry.spec.neuron_cores = known.spec.neuron_cores;
                entry.spec.efa_max_interfaces = known.spec.efa_max_interfaces;
                // DescribeInstanceTypes' EbsInfo is not read: the vendored limit stands.
                entry.spec.ebs_max_attachments = known.spec.ebs_max_attachments;
                entries.push(entry);
            }
        }
        let data = Arc::new(TypeData {
            fetched: now,
            prices_generation,
            entries,
            spot,
            strategies,
        });
        let mut s = self.lock();
        s.types = Some(Arc::clone(&data));
        s.by_zones.clear();
        Ok(data)
    }

    /// The instance types offered in `zones`, sized by a node class's `config` (cached per
    /// zone set and config), as [`CloudProvider::instance_types`] lists them for a node class
    /// in those zones that names no placement group.
    ///
    /// Errors: DescribeInstanceTypes or the offerings calls failed.
    pub async fn types_in(
        &self,
        zones: &BTreeSet<String>,
        config: &CapacityConfig,
    ) -> Result<Arc<Vec<Arc<InstanceType>>>, CloudError> {
        self.types_for(zones, config, None).await
    }

    /// [`AwsCloud::types_in`] for a node class launching into `group`: an offering is
    /// unavailable when marked for everyone or for the whole group (upstream's base offering
    /// resolver reads those two scopes; a partition's marks are not read, as upstream), and
    /// every offering of a type that cannot launch into the group's strategy is unavailable
    /// ([`placementgroup::supports`]); every type carries the group's requirements
    /// ([`placementgroup::with_requirements`]).
    ///
    /// Errors: DescribeInstanceTypes or the offerings calls failed.
    pub async fn types_for(
        &self,
        zones: &BTreeSet<String>,
        config: &CapacityConfig,
        group: Option<&PlacementGroupInfo>,
    ) -> Result<Arc<Vec<Arc<InstanceType>>>, CloudError> {
        let data = self.type_data().await?;
        let now = self.clock.now();
        let mut s = self.lock();
        let before = s.unavailable.len();
        s.unavailable.retain(|_, until| *until > now);
        if s.unavailable.len() != before {
            s.by_zones.clear();
        }
        let key = (
            zones.clone(),
            config.clone(),
            group.map(|g| (g.id.clone(), g.partition_count)),
        );
        if let Some(cached) = s.by_zones.get(&key) {
            return Ok(Arc::clone(cached));
        }
        let unavailable = &s.unavailable;
        let in_group = group.map(|g| placementgroup::Scope::group(&g.id));
        let types = catalog::instance_types(
            &data.entries,
            zones,
            config,
            |e, zone| {
                data.spot
                    .get(&(e.name.clone(), zone.to_string()))
                    .copied()
                    .unwrap_or_else(|| catalog::spot_price(e.on_demand_price, &e.name, zone))
            },
            |t, z, ct| {
                if let Some(g) = group
                    && let Some(strategies) = data.strategies.get(t)
                    && !placementgroup::supports(strategies, g)
                {
                    return true;
                }
                let offering = (t.to_string(), z.to_string(), ct.to_string());
                unavailable.contains_key(&(offering.clone(), None))
                    || in_group
                        .as_ref()
                        .is_some_and(|g| unavailable.contains_key(&(offering, Some(g.clone()))))
            },
        );
        let types = match group {
            Some(g) => placementgroup::with_requirements(&types, g),
            None => types,
        };
        let types = Arc::new(types);
        s.by_zones.insert(key, Arc::clone(&types));
        Ok(types)
    }

    /// The reservations `node_class` resolved, as its instance types offer them now
    /// ([`reservation::reserved_for`]); one whose offering is marked out of capacity has no room.
    fn reserved_for(&self, node_class: &EC2NodeClass) -> Vec<ReservedCapacity> {
        let now = self.clock.now();
        let resolved = node_class
            .status
            .as_ref()
            .map(|s| s.capacity_reservations.clone())
            .unwrap_or_default();
        if resolved.is_empty() {
            return vec![];
        }
        let s = self.lock();
        let mut reserved = reservation::reserved_for(
            &resolved,
            |id| s.reservations.get(id).map(|d| d.record.clone()),
            now,
        );
        for r in &mut reserved {
            let key = (
                (
                    r.instance_type.clone(),
                    r.zone.clone(),
                    l::CAPACITY_TYPE_RESERVED.to_string(),
                ),
                None,
            );
            if s.unavailable.get(&key).is_some_and(|until| *until > now) {
                r.available = 0;
            }
        }
        reserved
    }

    /// `types` with a `reserved` offering per reservation of `reserved` in `zones`
    /// ([`catalog::with_reservations`]); never cached, as their room changes with every launch.
    fn with_reserved(
        &self,
        types: Arc<Vec<Arc<InstanceType>>>,
        zones: &BTreeSet<String>,
        reserved: &[ReservedCapacity],
    ) -> Arc<Vec<Arc<InstanceType>>> {
        if reserved.is_empty() {
            return types;
        }
        Arc::new(catalog::with_reservations(
            (*types).clone(),
            zones,
            reserved,
            |name| self.prices.get(name),
        ))
    }

    /// Remember reservations as described now: `found`, and every id of `asked` not among them
    /// as unknown to EC2.
    fn remember_reservations(&self, asked: &[String], found: &[Record]) {
        let at = self.clock.now();
        let mut s = self.lock();
        for id in asked {
            s.reservations
                .insert(id.clone(), reservation::Described { record: None, at });
        }
        for r in found {
            s.reservations.insert(
                r.capacity_reservation_id.clone(),
                reservation::Described {
                    record: Some(r.clone()),
                    at,
                },
            );
        }
    }

    /// One instance launched into reservation `id`: its remembered room shrinks by one until
    /// the next describe (upstream `MarkLaunched`).
    fn mark_launched(&self, id: &str) {
        if let Some(r) = self
            .lock()
            .reservations
            .get_mut(id)
            .and_then(|d| d.record.as_mut())
        {
            r.available_instance_count = (r.available_instance_count - 1).max(0);
        }
    }

    /// Describe (by id) the reservations `instances` were launched into that were not described
    /// within [`reservation::RESERVATION_TTL`], so their capacity type is current. A failed
    /// describe is logged and leaves them as last known (never described: still `reserved`).
    async fn refresh_reservations_of(&self, instances: &[InstanceInfo]) {
        let now = self.clock.now();
        let stale: Vec<String> = {
            let s = self.lock();
            instances
                .iter()
                .filter(|i| !i.is_terminated())
                .filter_map(reservation::targeted_reservation)
                .filter(|id| {
                    s.reservations
                        .get(*id)
                        .is_none_or(|d| now.duration_since(d.at) >= reservation::RESERVATION_TTL)
                })
                .map(str::to_string)
                .collect::<BTreeSet<String>>()
                .into_iter()
                .collect()
        };
        if stale.is_empty() {
            return;
        }
        match reservation::describe_ids(self.ec2.as_ref(), &stale).await {
            Ok(found) => self.remember_reservations(&stale, &found),
            Err(e) => {
                tracing::warn!(error = %e, reservations = ?stale,
                    "describing the capacity reservations of instances failed; their capacity type stays as last known")
            }
        }
    }

    /// The capacity type of a described instance ([`reservation::capacity_type`]) from the
    /// reservations as last described.
    fn capacity_type_of(&self, i: &InstanceInfo) -> &'static str {
        let known = reservation::targeted_reservation(i)
            .and_then(|id| self.lock().reservations.get(id).map(|d| d.record.clone()));
        reservation::capacity_type(i, known.as_ref().map(Option::as_ref), self.clock.now())
    }

    /// The reservation (id, type) an instance counts against, when it is `reserved`: its type
    /// from the last describe, else the node class's status, else `default`.
    fn reservation_of(
        &self,
        node_class: &EC2NodeClass,
        i: &InstanceInfo,
    ) -> Option<(String, String)> {
        if self.capacity_type_of(i) != l::CAPACITY_TYPE_RESERVED {
            return None;
        }
        let id = reservation::targeted_reservation(i)?.to_string();
        let described = self
            .lock()
            .reservations
            .get(&id)
            .and_then(|d| d.record.as_ref().map(|r| r.reservation_type.clone()));
        let kind = described
            .or_else(|| {
                node_class
                    .status
                    .as_ref()?
                    .capacity_reservations
                    .iter()
                    .find(|c| c.id == id)
                    .map(|c| reservation::record_from_status(c).reservation_type)
            })
            .unwrap_or_else(|| "default".into());
        Some((id, kind))
    }

    /// Instances tagged for `claim_name` in this cluster that are not terminated.
    async fn instances_for_claim(&self, claim_name: &str) -> Result<Vec<InstanceInfo>, CloudError> {
        let found = self
            .ec2
            .describe_instances(
                &[],
                vec![
                    Filter::new(format!("tag:{}", l::NODECLAIM_TAG_KEY), claim_name),
                    Filter::new(format!("tag:{}", self.cluster_tag()), "owned"),
                    Filter {
                        name: "instance-state-name".into(),
                        values: LIVE_STATES.iter().map(|s| s.to_string()).collect(),
                    },
                ],
            )
            .await
            .map_err(other)?;
        Ok(found.into_iter().filter(|i| !i.is_terminated()).collect())
    }

    /// The placement group the node class's `placementGroupSelector` names, `None` without a
    /// selector: the one looked up within [`placementgroup::PLACEMENT_GROUP_TTL`] (a group
    /// found missing stays missing that long), else looked up now. A failed lookup falls back to
    /// the last group found (upstream keeps a day-long copy for that).
    ///
    /// Errors: no such available group (`NodeClassNotReady`), or the lookup failed and none was
    /// found before.
    async fn placement_group(
        &self,
        node_class: &EC2NodeClass,
    ) -> Result<Option<PlacementGroupInfo>, CloudError> {
        let Some(selector) = &node_class.spec.placement_group_selector else {
            return Ok(None);
        };
        let key = placementgroup::shown(selector);
        let now = self.clock.now();
        let fresh = |at: &Timestamp| now.duration_since(*at) < placementgroup::PLACEMENT_GROUP_TTL;
        let not_found = || {
            CloudError::NodeClassNotReady(format!(
                "EC2NodeClass {:?}: placement group {key:?} not found",
                node_class.metadata.name.clone().unwrap_or_default()
            ))
        };
        let (cached, missing) = {
            let state = self.lock();
            (
                state.placement_groups.get(&key).cloned(),
                state.placement_groups_missing.get(&key).is_some_and(fresh),
            )
        };
        if let Some((at, group)) = &cached
            && fresh(at)
        {
            return Ok(Some(group.clone()));
        }
        if missing {
            return Err(not_found());
        }
        let found = placementgroup::describe(self.ec2.as_ref(), selector).await;
        self.remember_placement_group(&key, &found);
        match found {
            Ok(Some(group)) => Ok(Some(group)),
            Ok(None) => Err(not_found()),
            Err(e) => cached.map(|(_, g)| Some(g)).ok_or_else(|| other(e)),
        }
    }

    /// Keep what a placement group lookup found (forget a group EC2 no longer has; keep the
    /// last one found through a failed lookup).
    fn remember_placement_group(
        &self,
        key: &str,
        found: &Result<Option<PlacementGroupInfo>, Ec2Error>,
    ) {
        let now = self.clock.now();
        let mut state = self.lock();
        match found {
            Ok(Some(group)) => {
                state
                    .placement_groups
                    .insert(key.to_string(), (now, group.clone()));
                state.placement_groups_missing.remove(key);
            }
            Ok(None) => {
                state.placement_groups.remove(key);
                state.placement_groups_missing.insert(key.to_string(), now);
            }
            Err(_) => {}
        }
    }

    /// Make sure a launch template exists; returns its name. With a `reservation`, the
    /// template launches into that reservation only ([`launchtemplate::for_reservation`]); with
    /// a `placement` (group, partition asked for), into that placement group
    /// ([`launchtemplate::for_placement`]); with `efa` devices, one EFA interface per card
    /// ([`launchtemplate::for_efa`]).
    async fn ensure_template(
        &self,
        node_class: &EC2NodeClass,
        image_id: &str,
        user_data: &str,
        reservation: Option<&ReservedCapacity>,
        placement: Option<(&PlacementGroupInfo, Option<i32>)>,
        efa: i64,
    ) -> Result<String, CloudError> {
        let family = node_class.ami_family();
        let ipv6 = self.cluster().ipv6();
        let mut data = launchtemplate::data(node_class, family, image_id, user_data, ipv6);
        match reservation {
            Some(r) => launchtemplate::for_reservation(&mut data, &r.id, &r.reservation_type),
            None => data.no_open_reservations = self.reserved_capacity,
        }
        if let Some((group, partition)) = placement {
            launchtemplate::for_placement(&mut data, group, partition);
        }
        launchtemplate::for_efa(&mut data, &node_class.spec, efa, ipv6);
        let name = launchtemplate::name(&self.settings.cluster_name, &data);
        if self.lock().templates.contains(&name) {
            return Ok(name);
        }
        let existing = self
            .ec2
            .describe_launch_templates(vec![Filter::new("launch-template-name", name.clone())])
            .await
            .map_err(other)?;
        if existing.is_empty() {
            let tags = launchtemplate::tags(
                &self.settings.cluster_name,
                node_class.metadata.name.as_deref().unwrap_or_default(),
            );
            match self.ec2.create_launch_template(&name, &data, &tags).await {
                Ok(id) => {
                    tracing::info!(launch_template = %name, id = %id, "created launch template")
                }
                Err(e) if e.code.contains("AlreadyExists") => {}
                Err(e) => return Err(other(e)),
            }
        }
        self.lock().templates.insert(name.clone());
        Ok(name)
    }

    /// The hourly price (USD) of `instance_type` in `zone`: on-demand from
    /// [`AwsCloud::on_demand_prices`], spot from the cached spot price history or else derived
    /// from on-demand; 0 when no on-demand price is known.
    pub fn price_of(&self, instance_type: &str, zone: &str, spot: bool) -> f64 {
        let data = self.lock().types.clone();
        let on_demand = self.prices.get(instance_type).unwrap_or(0.0);
        if !spot {
            return on_demand;
        }
        data.and_then(|d| {
            d.spot
                .get(&(instance_type.to_string(), zone.to_string()))
                .copied()
        })
        .unwrap_or_else(|| catalog::spot_price(on_demand, instance_type, zone))
    }

    fn as_instance(&self, i: &InstanceInfo) -> Instance {
        let capacity_type = self.capacity_type_of(i);
        let price = if capacity_type == l::CAPACITY_TYPE_RESERVED {
            self.price_of(&i.instance_type, &i.zone, false) / RESERVED_PRICE_DIVISOR
        } else {
            self.price_of(&i.instance_type, &i.zone, i.spot)
        };
        Instance {
            provider_id: provider_id(&i.zone, &i.id),
            id: i.id.clone(),
            nodeclaim: i.tags.get(l::NODECLAIM_TAG_KEY).cloned(),
            nodepool: i.tags.get(l::NODEPOOL_TAG_KEY).cloned(),
            instance_type: i.instance_type.clone(),
            zone: i.zone.clone(),
            capacity_type: capacity_type.to_string(),
            price,
            launched_at: i.launched_at,
            image_id: i.image_id.clone(),
            subnet_id: i.subnet_id.clone(),
            security_group_ids: i.security_group_ids.clone(),
        }
    }

    /// What a launched instance gives the NodeClaim; `reservation` (id, type) is the capacity
    /// reservation it was launched into, which labels it `reserved` with the reservation's id and
    /// type.
    async fn launched(
        &self,
        node_class: &EC2NodeClass,
        info: &InstanceInfo,
        warnings: Vec<String>,
        reservation: Option<(String, String)>,
    ) -> Result<Launched, CloudError> {
        let zones: BTreeSet<String> = [info.zone.clone()].into();
        let config = self.capacity_config(node_class)?;
        let types = self.types_in(&zones, &config).await?;
        let it = types.iter().find(|t| t.name == info.instance_type);
        let mut labels = it.map(|t| t.labels.clone()).unwrap_or_default();
        labels.insert(l::INSTANCE_TYPE_LABEL.into(), info.instance_type.clone());
        labels.insert(l::TOPOLOGY_ZONE_LABEL.into(), info.zone.clone());
        labels.insert(
            l::TOPOLOGY_REGION_LABEL.into(),
            self.settings.region.clone(),
        );
        if let Some(zone_id) = node_class
            .status
            .as_ref()
            .and_then(|s| s.subnets.iter().find(|s| s.zone == info.zone))
            .and_then(|s| s.zone_id.clone())
        {
            labels.insert(l::TOPOLOGY_ZONE_ID_LABEL.into(), zone_id);
        }
        let capacity_type = match &reservation {
            Some(_) => l::CAPACITY_TYPE_RESERVED,
            None if info.spot => l::CAPACITY_TYPE_SPOT,
            None => l::CAPACITY_TYPE_ON_DEMAND,
        };
        labels.insert(l::CAPACITY_TYPE_LABEL.into(), capacity_type.into());
        if let Some((id, kind)) = reservation {
            labels.insert(l::CAPACITY_RESERVATION_ID_LABEL.into(), id);
            labels.insert(l::CAPACITY_RESERVATION_TYPE_LABEL.into(), kind);
        }
        Ok(Launched {
            provider_id: provider_id(&info.zone, &info.id),
            image_id: info.image_id.clone(),
            labels,
            capacity: it.map(|t| t.capacity.clone()).unwrap_or_default(),
            allocatable: it.map(|t| t.allocatable.clone()).unwrap_or_default(),
            warnings,
        })
    }
}

fn other(e: Ec2Error) -> CloudError {
    CloudError::Other(e.to_string())
}

/// The idempotency token for a NodeClaim's launch attempt: the NodeClaim's name for the first
/// request (at most 64 characters, else a hash of it), then a distinct token per retry so a
/// retry with fewer offerings is not refused as a mismatched repeat.
pub fn client_token(claim_name: &str, attempt: usize) -> String {
    let base = if claim_name.len() <= 60 && claim_name.is_ascii() {
        claim_name.to_string()
    } else {
        format!("nodeclaim-{:016x}", launchtemplate::fnv(claim_name))
    };
    if attempt == 0 {
        base
    } else {
        format!("{base}-{attempt}")
    }
}

fn node_class_ready(node_class: &EC2NodeClass) -> Result<(), CloudError> {
    let name = node_class.metadata.name.clone().unwrap_or_default();
    let Some(status) = node_class.status.as_ref() else {
        return Err(CloudError::NodeClassNotReady(format!(
            "EC2NodeClass {name:?} has not been resolved yet"
        )));
    };
    if let Some(c) = status
        .conditions
        .iter()
        .find(|c| c.type_ == crds::conditions::READY)
        && c.status != "True"
    {
        return Err(CloudError::NodeClassNotReady(format!(
            "EC2NodeClass {name:?} is not ready ({}): {}",
            c.reason, c.message
        )));
    }
    if status.subnets.is_empty() || status.amis.is_empty() {
        return Err(CloudError::NodeClassNotReady(format!(
            "EC2NodeClass {name:?} resolved no subnets or no AMIs"
        )));
    }
    Ok(())
}

#[async_trait]
impl CloudProvider for AwsCloud {
    fn name(&self) -> &str {
        "aws"
    }

    fn interruption_queue(&self) -> Option<Arc<dyn InterruptionQueue>> {
        self.interruption_queue.clone()
    }

    fn mark_offering_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str) {
        self.mark_unavailable([(
            (
                instance_type.to_string(),
                zone.to_string(),
                capacity_type.to_string(),
            ),
            None,
        )]);
    }

    async fn create(
        &self,
        claim: &NodeClaim,
        node_class: &EC2NodeClass,
    ) -> Result<Launched, CloudError> {
        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        let partition = placementgroup::partition(claim);
        // The placement group's labels on what a launch gives the NodeClaim (upstream sets them
        // in `instanceToNodeClaim`, its registration hook the partition EC2 picked).
        let placed = |mut launched: Launched,
                      group: Option<&PlacementGroupInfo>,
                      info: &InstanceInfo| {
            if let Some(g) = group {
                launched
                    .labels
                    .extend(placementgroup::labels(g, partition, info.partition_number));
            }
            launched
        };
        let existing = self.instances_for_claim(&claim_name).await?;
        if let Some(existing) = existing.first() {
            self.refresh_reservations_of(std::slice::from_ref(existing))
                .await;
            let reservation = self.reservation_of(node_class, existing);
            let group = self.placement_group(node_class).await.ok().flatten();
            return self
                .launched(node_class, existing, vec![], reservation)
                .await
                .map(|l| placed(l, group.as_ref(), existing));
        }
        node_class_ready(node_class)?;
        let group = self.placement_group(node_class).await?;
        let scope = group.as_ref().map(|g| placementgroup::scope(g, claim));
        let efa_requested = claim.spec.resources.requests.contains_key(l::RESOURCE_EFA);
        let status = node_class.status.clone().unwrap_or_default();
        let reqs = Requirements::from_api(&claim.spec.requirements);
        let requests = karpenter_core::cloud::launch_requests(claim);
        // One subnet per zone: the first listed (status is ordered by free addresses).
        let mut subnet_of: BTreeMap<String, String> = BTreeMap::new();
        for s in &status.subnets {
            subnet_of
                .entry(s.zone.clone())
                .or_insert_with(|| s.id.clone());
        }
        let zones: BTreeSet<String> = subnet_of.keys().cloned().collect();
        let user_data = launchtemplate::for_claim(&self.cluster(), node_class, claim);
        let mut warnings = Vec::new();
        let prioritized = karpenter_core::cloud::price_overlaid(claim);
        let mut tried: BTreeSet<OfferingKey> = BTreeSet::new();
        let mut last_errors: Vec<String> = Vec::new();
        let config = self.capacity_config(node_class)?;
        for attempt in 0..MAX_LAUNCH_ATTEMPTS {
            let reserved = self.reserved_for(node_class);
            let types = self.with_reserved(
                self.types_for(&zones, &config, group.as_ref()).await?,
                &zones,
                &reserved,
            );
            let by_name: HashMap<&str, &Arc<InstanceType>> =
                types.iter().map(|t| (t.name.as_str(), t)).collect();
            let candidates: Vec<&Arc<InstanceType>> = ordered_type_names(claim)
                .iter()
                .filter_map(|n| by_name.get(n.as_str()).copied())
                .filter(|t| t.compatible(&reqs) && requests.fits_in(&t.allocatable))
                .take(MAX_INSTANCE_TYPES)
                .collect();
            let offers = launch_offerings(
                &candidates,
                &reqs,
                |t, z, ct| tried.contains(&(t.to_string(), z.to_string(), ct.to_string())),
                prioritized,
            );
            let capacity_type = match offers.first() {
                Some(o) => o.3.clone(),
                None => break,
            };
            // A reserved launch goes into one reservation per (type, zone), all of one
            // reservation type.
            let (offers, into) = if capacity_type == l::CAPACITY_TYPE_RESERVED {
                reservation::into_reservations(offers, &reserved)
            } else {
                (offers, BTreeMap::new())
            };
            let Some(fleet_capacity_type) = (match into.values().next() {
                Some(r) => Some(reservation::fleet_capacity_type(&r.reservation_type)),
                None if capacity_type == l::CAPACITY_TYPE_RESERVED => None,
                None => Some(capacity_type.as_str()),
            }) else {
                break;
            };
            // One launch template per image (and reservation, and EFA count); each type boots
            // the newest image for its arch.
            let mut configs: BTreeMap<(String, Option<String>, i64), FleetConfig> = BTreeMap::new();
            for (rank, (_, t, zone, ct)) in offers.iter().enumerate() {
                let Some(image) = compatible_ami(&status.amis, &t.labels) else {
                    continue;
                };
                let target = into.get(&(t.name.clone(), zone.clone()));
                // A NodeClaim asking for EFA gets each type's EFA devices as interfaces
                // (upstream's `EFACount`): one template per count.
                let efa = if efa_requested {
                    t.capacity.get(l::RESOURCE_EFA)
                } else {
                    0
                };
                let key = (image.id.clone(), target.map(|r| r.id.clone()), efa);
                let template = match configs.get(&key) {
                    Some(c) => c.launch_template.clone(),
                    None => {
                        self.ensure_template(
                            node_class,
                            &image.id,
                            &user_data,
                            target,
                            group.as_ref().map(|g| (g, partition)),
                            efa,
                        )
                        .await?
                    }
                };
                let Some(subnet) = subnet_of.get(zone) else {
                    continue;
                };
                tried.insert((t.name.clone(), zone.clone(), ct.clone()));
                configs
                    .entry(key)
                    .or_insert_with(|| FleetConfig {
                        launch_template: template,
                        overrides: vec![],
                    })
                    .overrides
                    .push(FleetOverride {
                        instance_type: t.name.clone(),
                        subnet_id: subnet.clone(),
                        zone: zone.clone(),
                        priority: rank as f64,
                    });
            }
            if configs.is_empty() {
                return Err(CloudError::NodeClassNotReady(format!(
                    "EC2NodeClass {:?} has no AMI for the NodeClaim's architectures",
                    node_class.metadata.name.clone().unwrap_or_default()
                )));
            }
            let mut tags = self.tags_for(claim, node_class);
            tags.insert(l::NAME_TAG_KEY.into(), claim_name.clone());
            let request = FleetRequest {
                capacity_type: fleet_capacity_type.to_string(),
                configs: configs.into_values().collect(),
                tags,
                client_token: client_token(&claim_name, attempt),
                prioritized,
                context: node_class.spec.context.clone().filter(|c| !c.is_empty()),
            };
            let result = match self.ec2.create_fleet(&request).await {
                Ok(r) => r,
                Err(e) if e.code == "IdempotentParameterMismatch" => {
                    if let Some(existing) = self.instances_for_claim(&claim_name).await?.first() {
                        self.refresh_reservations_of(std::slice::from_ref(existing))
                            .await;
                        let reservation = self.reservation_of(node_class, existing);
                        return self
                            .launched(node_class, existing, warnings, reservation)
                            .await
                            .map(|l| placed(l, group.as_ref(), existing));
                    }
                    return Err(other(e));
                }
                Err(e) => return Err(other(e)),
            };
            let subnet_zone: HashMap<&str, &str> = subnet_of
                .iter()
                .map(|(z, s)| (s.as_str(), z.as_str()))
                .collect();
            let mut exhausted = Vec::new();
            for e in &result.errors {
                let zone = e
                    .zone
                    .clone()
                    .or_else(|| {
                        e.subnet_id
                            .as_deref()
                            .and_then(|s| subnet_zone.get(s))
                            .map(|z| z.to_string())
                    })
                    .unwrap_or_default();
                let what = format!(
                    "{}/{}/{}: {}: {}",
                    e.instance_type.as_deref().unwrap_or("?"),
                    zone,
                    capacity_type,
                    e.code,
                    e.message
                );
                if ec2::is_capacity_error(&e.code)
                    && let Some(t) = &e.instance_type
                {
                    let spread_limit = placementgroup::is_spread_limit(&e.message);
                    if capacity_type == l::CAPACITY_TYPE_RESERVED {
                        // A reservation's room is not the group's (upstream skips the spread
                        // limit here and marks other errors for everyone).
                        if !spread_limit {
                            exhausted.push(((t.clone(), zone, capacity_type.clone()), None));
                        }
                    } else if spread_limit && let Some(g) = &group {
                        // The group holds its 7 instances in the zone: no type launches there
                        // into it (upstream marks every type of the launch for the group).
                        tracing::info!(placement_group = %g.id, %zone,
                            "spread placement group's zone limit reached");
                        let in_group = placementgroup::Scope::group(&g.id);
                        exhausted.extend(candidates.iter().map(|c| {
                            (
                                (c.name.clone(), zone.clone(), capacity_type.clone()),
                                Some(in_group.clone()),
                            )
                        }));
                    } else {
                        exhausted.push(((t.clone(), zone, capacity_type.clone()), scope.clone()));
                    }
                }
                warnings.push(what.clone());
                last_errors.push(what);
            }
            self.mark_unavailable(exhausted.clone());
            if let Some(id) = result.instance_ids.first() {
                let found = self
                    .ec2
                    .describe_instances(std::slice::from_ref(id), vec![])
                    .await
                    .map_err(other)?;
                let info = found.into_iter().next().ok_or_else(|| {
                    CloudError::Other(format!("instance {id} launched but not described"))
                })?;
                let target = into
                    .get(&(info.instance_type.clone(), info.zone.clone()))
                    .map(|r| (r.id.clone(), r.reservation_type.clone()));
                if let Some((reservation_id, _)) = &target {
                    self.mark_launched(reservation_id);
                }
                tracing::info!(nodeclaim = %claim_name, instance = %id,
                    instance_type = %info.instance_type, zone = %info.zone,
                    capacity_type = %capacity_type,
                    capacity_reservation = target.as_ref().map_or("", |r| r.0.as_str()),
                    "launched instance");
                return self
                    .launched(node_class, &info, warnings, target)
                    .await
                    .map(|l| placed(l, group.as_ref(), &info));
            }
            let all_capacity = !result.errors.is_empty()
                && result
                    .errors
                    .iter()
                    .all(|e| ec2::is_capacity_error(&e.code));
            if !all_capacity {
                let first = result.errors.first();
                return Err(CloudError::Create {
                    reason: first.map_or("FleetLaunchFailed".into(), |e| e.code.clone()),
                    message: if last_errors.is_empty() {
                        "CreateFleet launched no instance and reported no error".into()
                    } else {
                        last_errors.join("; ")
                    },
                });
            }
        }
        Err(CloudError::InsufficientCapacity(
            if last_errors.is_empty() {
                "no compatible instance type with an available offering in the node class's zones"
                    .into()
            } else {
                format!("all offerings failed: {}", last_errors.join("; "))
            },
        ))
    }

    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudError> {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let id = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .and_then(instance_id)
            .map(str::to_string);
        let live: Vec<InstanceInfo> = match id {
            Some(id) => match self.ec2.describe_instances(&[id], vec![]).await {
                Ok(found) => found.into_iter().filter(|i| !i.is_terminated()).collect(),
                Err(e) if e.is_not_found() => vec![],
                Err(e) => return Err(other(e)),
            },
            None => self.instances_for_claim(&name).await?,
        };
        if live.is_empty() {
            return Err(CloudError::NodeClaimNotFound(format!(
                "no running instance for nodeclaim {name}"
            )));
        }
        let ids: Vec<String> = live.into_iter().map(|i| i.id).collect();
        self.ec2.terminate_instances(&ids).await.map_err(other)?;
        tracing::info!(nodeclaim = %name, instances = ?ids, "terminating instance");
        Ok(())
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        let Some(id) = instance_id(provider_id) else {
            return Err(CloudError::NodeClaimNotFound(format!(
                "{provider_id:?} is not an AWS providerID"
            )));
        };
        let found = match self.ec2.describe_instances(&[id.to_string()], vec![]).await {
            Ok(found) => found,
            Err(e) if e.is_not_found() => vec![],
            Err(e) => return Err(other(e)),
        };
        self.refresh_reservations_of(&found).await;
        found
            .iter()
            .find(|i| !i.is_terminated())
            .map(|i| self.as_instance(i))
            .ok_or_else(|| CloudError::NodeClaimNotFound(format!("instance {id} not found")))
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        let found = self
            .ec2
            .describe_instances(
                &[],
                vec![
                    Filter::new(format!("tag:{}", self.cluster_tag()), "owned"),
                    Filter::new("tag-key", l::NODEPOOL_TAG_KEY),
                    Filter {
                        name: "instance-state-name".into(),
                        values: LIVE_STATES.iter().map(|s| s.to_string()).collect(),
                    },
                ],
            )
            .await
            .map_err(other)?;
        self.refresh_reservations_of(&found).await;
        Ok(found
            .iter()
            .filter(|i| !i.is_terminated())
            .map(|i| self.as_instance(i))
            .collect())
    }

    async fn instance_types(
        &self,
        node_class: &EC2NodeClass,
    ) -> Result<Arc<Vec<Arc<InstanceType>>>, CloudError> {
        let zones: BTreeSet<String> = node_class
            .status
            .as_ref()
            .map(|s| s.subnets.iter().map(|s| s.zone.clone()).collect())
            .unwrap_or_default();
        let config = self.capacity_config(node_class)?;
        // As upstream, a placement group that cannot be looked up adds nothing here (the node
        // class's PlacementGroupReady condition reports it; launches refuse it).
        let group = self.placement_group(node_class).await.ok().flatten();
        let types = self.types_for(&zones, &config, group.as_ref()).await?;
        Ok(self.with_reserved(types, &zones, &self.reserved_for(node_class)))
    }

    async fn capacity_reservations(&self, ids: &[String]) -> Result<Vec<Record>, CloudError> {
        let found = reservation::describe_ids(self.ec2.as_ref(), ids)
            .await
            .map_err(other)?;
        self.remember_reservations(ids, &found);
        Ok(found)
    }

    /// Subnets, security groups, AMIs and the instance profile ([`nodeclass::resolve`]), then
    /// the capacity reservations the selector terms find (usable ones, an expiring Capacity
    /// Block included), each with EC2's `AvailableInstanceCount`, whatever the
    /// `ReservedCapacity` gate says (the node class controller drops them with the gate off). A
    /// failed DescribeCapacityReservations keeps the reservations found before and, when nothing
    /// else is wrong, makes `CapacityReservationsReady` False with reason
    /// `CapacityReservationsResolutionFailed` and the error. A `placementGroupSelector` is
    /// looked up too: a group EC2 does not have (or not `available`) makes
    /// `PlacementGroupReady` False with `PlacementGroupNotFound`, a failed lookup with
    /// `PlacementGroupResolutionFailed` ([`placementgroup::not_ready`]).
    async fn resolve_node_class(&self, node_class: &EC2NodeClass) -> NodeClassResolution {
        let now = self.clock.now();
        let mut resolution = nodeclass::resolve(
            self.ec2.as_ref(),
            &self.settings.cluster_name,
            &self.settings.region,
            &self.settings.kubernetes_version,
            node_class,
            now,
        )
        .await;
        // Nodes need the cluster's service CIDR: AL2023's NodeConfig carries it (an AL2023
        // node class is not valid without it, as upstream's validation says), and AL2,
        // Bottlerocket and Windows derive their cluster DNS address from it when it is known.
        let family = node_class.ami_family();
        let bootstraps = family != AmiFamily::Custom;
        if bootstraps
            && let Err(why) = self.resolve_service_cidr().await
            && family == AmiFamily::Al2023
        {
            resolution.not_ready = resolution.not_ready.or_else(|| {
                Some((
                    crds::conditions::VALIDATION_SUCCEEDED.into(),
                    CLUSTER_CIDR_RESOLUTION_FAILED.into(),
                    why,
                ))
            });
        }
        if let Some(selector) = &node_class.spec.placement_group_selector {
            let found = placementgroup::describe(self.ec2.as_ref(), selector).await;
            self.remember_placement_group(&placementgroup::shown(selector), &found);
            if let Some(why) = placementgroup::not_ready(selector, &found) {
                resolution.not_ready = resolution.not_ready.or(Some(why));
            }
        }
        let terms = &node_class.spec.capacity_reservation_selector_terms;
        if terms.is_empty() {
            resolution.status.capacity_reservations.clear();
            return resolution;
        }
        match reservation::describe(self.ec2.as_ref(), terms).await {
            Ok(found) => {
                self.remember_reservations(&[], &found);
                resolution.status.capacity_reservations = reservations::select(terms, &found, now)
                    .into_iter()
                    .map(|r| reservations::status(r, now, r.available_instance_count))
                    .collect();
            }
            Err(e) => {
                tracing::warn!(ec2nodeclass = node_class.metadata.name.as_deref().unwrap_or_default(),
                    error = %e, "resolving capacity reservations failed; keeping the ones found before");
                resolution.not_ready = resolution.not_ready.or_else(|| {
                    Some((
                        crds::conditions::CAPACITY_RESERVATIONS_READY.into(),
                        CAPACITY_RESERVATIONS_RESOLUTION_FAILED.into(),
                        e.to_string(),
                    ))
                });
            }
        }
        resolution
    }

    /// Upstream's AWS policies (`aws:pkg/cloudprovider/cloudprovider.go`).
    fn repair_policies(&self) -> Vec<karpenter_core::lifecycle::repair::RepairPolicy> {
        karpenter_core::lifecycle::repair::aws_policies()
    }

    async fn delete_instances(&self, instances: &[Instance]) -> Result<(), CloudError> {
        let ids: Vec<String> = instances.iter().map(|i| i.id.clone()).collect();
        self.terminate(&ids).await
    }

    async fn node_class_deleted(&self, node_class: &EC2NodeClass) -> Result<(), CloudError> {
        let name = node_class.metadata.name.clone().unwrap_or_default();
        if let (None, Some(role)) = (&node_class.spec.instance_profile, &node_class.spec.role) {
            let profile = nodeclass::role_profile_name(
                &self.settings.cluster_name,
                &self.settings.region,
                role,
            );
            if let Some(roles) = self
                .ec2
                .instance_profile_roles(&profile)
                .await
                .map_err(other)?
            {
                self.ec2
                    .delete_instance_profile(&profile, &roles)
                    .await
                    .map_err(other)?;
                tracing::info!(ec2nodeclass = %name, instance_profile = %profile, "deleted instance profile");
            }
        }
        let templates = self
            .ec2
            .describe_launch_templates(vec![
                Filter::new(
                    format!("tag:{}", launchtemplate::CLUSTER_TAG),
                    self.settings.cluster_name.clone(),
                ),
                Filter::new(format!("tag:{}", l::EC2NODECLASS_TAG_KEY), name.clone()),
            ])
            .await
            .map_err(other)?;
        for lt in templates {
            match self.ec2.delete_launch_template(&lt.id).await {
                Ok(()) => {
                    tracing::info!(ec2nodeclass = %name, launch_template = %lt.name, "deleted launch template");
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(other(e)),
            }
            self.lock().templates.remove(&lt.name);
        }
        Ok(())
    }
}

impl AwsCloud {
    /// Tags every instance, volume and fleet gets: the node class's `tags`, then the ones
    /// Karpenter owns (cluster, `eks:eks-cluster-name`, NodePool, NodeClaim, node class).
    fn tags_for(&self, claim: &NodeClaim, node_class: &EC2NodeClass) -> BTreeMap<String, String> {
        let mut tags = node_class.spec.tags.clone();
        let nodepool = claim
            .metadata
            .labels
            .as_ref()
            .and_then(|m| m.get(l::NODEPOOL_LABEL))
            .cloned()
            .unwrap_or_default();
        tags.insert(self.cluster_tag(), "owned".into());
        tags.insert(
            l::EKS_CLUSTER_NAME_TAG_KEY.into(),
            self.settings.cluster_name.clone(),
        );
        tags.insert(l::NODEPOOL_TAG_KEY.into(), nodepool);
        tags.insert(
            l::NODECLAIM_TAG_KEY.into(),
            claim.metadata.name.clone().unwrap_or_default(),
        );
        tags.insert(
            l::EC2NODECLASS_TAG_KEY.into(),
            node_class.metadata.name.clone().unwrap_or_default(),
        );
        tags
    }

    /// Terminate instances by id, in batches of at most [`BATCH`].
    ///
    /// Errors: the first failed call.
    pub async fn terminate(&self, ids: &[String]) -> Result<(), CloudError> {
        for chunk in ids.chunks(BATCH) {
            self.ec2.terminate_instances(chunk).await.map_err(other)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_round_trip() {
        let pid = provider_id("us-east-1a", "i-0abc");
        assert_eq!(pid, "aws:///us-east-1a/i-0abc");
        assert_eq!(instance_id(&pid), Some("i-0abc"));
        assert_eq!(instance_id("kwok://node-1"), None);
    }

    #[test]
    fn client_tokens_are_the_nodeclaim_name_then_distinct_per_retry() {
        assert_eq!(client_token("default-abcde", 0), "default-abcde");
        assert_eq!(client_token("default-abcde", 1), "default-abcde-1");
        let long = "x".repeat(100);
        assert!(client_token(&long, 0).len() <= 64);
        assert!(client_token(&long, 2).len() <= 64);
    }
}
