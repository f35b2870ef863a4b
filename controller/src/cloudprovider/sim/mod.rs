//! The simulated EC2 cloud behind the sandbox: the same contract as the AWS provider, in memory.
//! It sells the vendored catalog's instance types in us-east-1, resolves EC2NodeClass
//! selectors against a simulated VPC and image catalog, launches the cheapest available
//! offering a NodeClaim allows (spot before on-demand, as upstream's capacity-type priority),
//! and keeps what each instance's kubelet will register with (labels, taints, capacity) as
//! user data would.

pub mod faults;
pub mod images;
pub mod network;
pub mod release;
pub mod states;

use karpenter_core::capacity::reservation::{
    CAPACITY_BLOCK_RECLAIM_LEAD, Record, ReservedCapacity,
};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use crds::labels as l;
use crds::{EC2NodeClass, NodeClaim};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Taint;
use rand::Rng;

use self::network::{SimAmi, SimNetwork};
use self::release::{ImageHealth, PublishError};
use super::CloudProvider;
use super::queue::{InterruptionQueue, MemoryQueue};
use karpenter_core::capacity::catalog::{Catalog, REGION};
use karpenter_core::capacity::node_class::{CapacityConfig, CapacityOptions};
use karpenter_core::capacity::{InstanceType, launch_offerings};
use karpenter_core::clock::Clock;
use karpenter_core::cloud::compatible_ami;
use karpenter_core::cloud::{
    CloudError, Instance, Launched, NodeClassResolution, ordered_type_names,
};
use karpenter_core::scheduling::requirements::Requirements;
use karpenter_core::scheduling::resources::Resources;

/// How long an offering that ran out of capacity stays unavailable (upstream's ICE cache TTL).
pub const INSUFFICIENT_CAPACITY_TTL: SignedDuration = SignedDuration::from_secs(180);

/// How long a terminated instance stays `shutting-down` before it is gone: while it is, a
/// delete succeeds again (termination in progress) and the instance is no longer listed as
/// running; afterwards a delete answers NodeClaimNotFound. (EC2 takes about a minute; the
/// sandbox keeps it short, long enough that callers really wait for "gone".)
pub const SHUTDOWN_DURATION: SignedDuration = SignedDuration::from_secs(2);

/// The simulated account's id, in the ARNs and EventBridge events it produces (the AWS
/// documentation's example account).
pub const ACCOUNT_ID: &str = "111122223333";

/// One simulated instance.
#[derive(Clone, Debug, PartialEq)]
pub struct SimInstance {
    /// `i-...`.
    pub id: String,
    /// `aws:///<zone>/<id>`, e.g. `aws:///us-east-1a/i-0123456789abcdef0`.
    pub provider_id: String,
    /// Instance type, e.g. `m5.large`.
    pub instance_type: String,
    /// Availability zone, e.g. `us-east-1a`.
    pub zone: String,
    /// `on-demand` or `spot`.
    pub capacity_type: String,
    /// Offering price, USD/hour.
    pub price: f64,
    /// The AMI it booted: the first resolved AMI compatible with the type (empty when none is).
    pub image_id: String,
    /// The subnet it was launched into (the node class's subnet in its zone).
    pub subnet_id: String,
    /// The security groups it was launched with (those the node class resolved).
    pub security_group_ids: Vec<String>,
    /// When it launched (the injected clock's time).
    pub launched_at: Timestamp,
    /// Private IPv4 address from its zone's subnet block, e.g. `10.0.16.2`.
    pub private_ip: String,
    /// Private DNS name, which the kubelet registers as the node name.
    pub hostname: String,
    /// EC2 tags as upstream writes them: `kubernetes.io/cluster/<cluster>=owned`,
    /// `eks:eks-cluster-name`, `karpenter.sh/nodepool`, `karpenter.sh/nodeclaim`,
    /// `karpenter.k8s.aws/ec2nodeclass` and `Name` (the NodeClaim's name).
    pub tags: BTreeMap<String, String>,
    /// Labels the launch resolved (instance type, zone, zone id, capacity type and the type's
    /// provider labels), copied onto the NodeClaim.
    pub labels: BTreeMap<String, String>,
    /// Labels the kubelet registers with (`--node-labels` from user data, plus its own).
    pub node_labels: BTreeMap<String, String>,
    /// Taints the kubelet registers with (`--register-with-taints`).
    pub node_taints: Vec<Taint>,
    /// The instance type's capacity, what its Node reports (cpu in millicores, memory in bytes).
    pub capacity: Resources,
    /// Capacity minus kube-reserved and eviction thresholds, what its Node reports.
    pub allocatable: Resources,
    /// The capacity reservation it was launched into (`cr-...`), if any.
    pub reservation_id: Option<String>,
}

impl SimInstance {
    fn as_instance(&self) -> Instance {
        Instance {
            provider_id: self.provider_id.clone(),
            id: self.id.clone(),
            nodeclaim: self.tags.get(l::NODECLAIM_TAG_KEY).cloned(),
            nodepool: self.tags.get(l::NODEPOOL_TAG_KEY).cloned(),
            instance_type: self.instance_type.clone(),
            zone: self.zone.clone(),
            capacity_type: self.capacity_type.clone(),
            price: self.price,
            launched_at: self.launched_at,
            image_id: self.image_id.clone(),
            subnet_id: self.subnet_id.clone(),
            security_group_ids: self.security_group_ids.clone(),
        }
    }
}

type OfferingKey = (String, String, String);

/// Instance types are listed per zone set and node class capacity settings.
type TypeCacheKey = (BTreeSet<String>, CapacityConfig);

struct State {
    network: SimNetwork,
    instances: BTreeMap<String, SimInstance>,
    /// Instances shutting down, by id, with when their termination began.
    shutting_down: HashMap<String, Timestamp>,
    /// Instances stopping or stopped (StopInstances), by id, with when the stop began (see
    /// [`states`]).
    stopped: HashMap<String, Timestamp>,
    /// Offerings out of capacity until the given time.
    unavailable: HashMap<OfferingKey, Timestamp>,
    /// Offerings that fail every launch (fault injection for tests and demos).
    shortages: HashSet<OfferingKey>,
    /// Images published broken: instances booted from them never register a Node.
    broken_images: HashSet<String>,
    next_host: HashMap<String, u32>,
    /// Instance types per zone set and node class capacity settings, invalidated when
    /// availability changes.
    type_cache: HashMap<TypeCacheKey, Arc<Vec<Arc<InstanceType>>>>,
}

/// The simulated EC2 account.
pub struct SimCloud {
    cluster_name: String,
    /// The region it runs in, e.g. `us-east-1`.
    region: String,
    catalog: Arc<Catalog>,
    capacity: CapacityOptions,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    launches: std::sync::atomic::AtomicUsize,
    /// Bumped whenever the network or the images change (see
    /// [`CloudProvider::resolution_changes`]).
    changes: tokio::sync::watch::Sender<u64>,
    /// Injected throttling, capacity errors and slow launches (off by default).
    faults: Arc<faults::SimFaults>,
    /// The interruption queue EventBridge would feed (`--interruption-queue`), if any.
    interruption_queue: Option<Arc<MemoryQueue>>,
}

/// The letters of the zones any instance type of `catalog` is offered in (`['a', 'b', 'c']` for
/// eu-west-1), sorted: the zones a simulated account in its region has a subnet in.
pub fn zone_letters(catalog: &Catalog) -> Vec<char> {
    let region = catalog.region();
    let letters: BTreeSet<char> = catalog
        .entries()
        .iter()
        .flat_map(|e| e.zones.iter())
        .filter_map(|z| z.strip_prefix(region)?.chars().next())
        .collect();
    letters.into_iter().collect()
}

impl SimCloud {
    /// The region it runs in, e.g. `us-east-1`.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// A simulated account for `cluster_name` with the default network and images.
    ///
    /// Errors: the embedded catalog is malformed (a build defect).
    pub fn new(
        cluster_name: &str,
        clock: Arc<dyn Clock>,
    ) -> Result<SimCloud, Arc<karpenter_core::capacity::catalog::CatalogError>> {
        SimCloud::in_region(cluster_name, clock, REGION)
    }

    /// A simulated account for `cluster_name` in `region` (e.g. `eu-west-1`): that region's
    /// zones and instance-type offerings ([`Catalog::for_region`]), a subnet per zone, and
    /// on-demand prices from its table, or the us-east-1 list prices where none is vendored
    /// ([`Catalog::prices_approximate`]).
    ///
    /// Errors: no EC2 data is vendored for `region` (the message lists the regions that are).
    pub fn in_region(
        cluster_name: &str,
        clock: Arc<dyn Clock>,
        region: &str,
    ) -> Result<SimCloud, Arc<karpenter_core::capacity::catalog::CatalogError>> {
        let catalog = Catalog::for_region(region)?;
        let letters = zone_letters(&catalog);
        Ok(SimCloud {
            cluster_name: cluster_name.to_string(),
            region: region.to_string(),
            catalog,
            capacity: CapacityOptions::default(),
            clock,
            state: Mutex::new(State {
                network: SimNetwork::in_region(cluster_name, region, &letters),
                instances: BTreeMap::new(),
                shutting_down: HashMap::new(),
                stopped: HashMap::new(),
                unavailable: HashMap::new(),
                shortages: HashSet::new(),
                broken_images: HashSet::new(),
                next_host: HashMap::new(),
                type_cache: HashMap::new(),
            }),
            launches: Default::default(),
            changes: tokio::sync::watch::Sender::new(0),
            faults: Arc::default(),
            interruption_queue: None,
        })
    }

    /// The same account with an interruption queue called `name`, which
    /// [`SimCloud::interruption_queue`] returns for the simulated EventBridge to send to.
    pub fn with_interruption_queue(mut self, name: &str) -> SimCloud {
        self.interruption_queue = Some(Arc::new(MemoryQueue::new(name)));
        self
    }

    /// The account's interruption queue, if it has one: the simulated EventBridge sends its
    /// events here (see `karpenter_core::interruption::event`).
    pub fn interruption_queue(&self) -> Option<&Arc<MemoryQueue>> {
        self.interruption_queue.as_ref()
    }

    /// Mark an offering out of capacity for [`INSUFFICIENT_CAPACITY_TTL`] (a spot
    /// interruption of it, or a launch that found none).
    pub fn mark_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str) {
        let until = self.clock.now() + INSUFFICIENT_CAPACITY_TTL;
        let mut state = self.lock();
        state.unavailable.insert(
            (instance_type.into(), zone.into(), capacity_type.into()),
            until,
        );
        state.type_cache.clear();
    }

    /// The same account with `RESERVED_ENIS` and `VM_MEMORY_OVERHEAD_PERCENT` set.
    pub fn with_capacity_options(mut self, capacity: CapacityOptions) -> SimCloud {
        self.capacity = capacity;
        self
    }

    /// The capacity settings of a node class under this account's options.
    ///
    /// Errors: [`CloudError::NodeClassNotReady`] naming the kubelet or block device setting
    /// that does not parse.
    pub fn capacity_config(&self, node_class: &EC2NodeClass) -> Result<CapacityConfig, CloudError> {
        CapacityConfig::from_node_class(node_class, self.capacity)
            .map_err(|e| CloudError::NodeClassNotReady(e.to_string()))
    }

    /// How many instances this account has launched since it was created (idempotent repeats
    /// of a launch not counted).
    pub fn launches(&self) -> usize {
        self.launches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The account's state at the clock's now: reservations that ended have had their effect
    /// on their instances ([`SimCloud::settle_reservations`]), and instances whose shutdown
    /// finished are removed. A reserved instance gone (its place free again) counts as a
    /// change for node classes, whose `status.capacityReservations` show the room.
    fn lock(&self) -> MutexGuard<'_, State> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.clock.now();
        self.settle_reservations(&mut state, now);
        let done: Vec<String> = state
            .shutting_down
            .iter()
            .filter(|(_, since)| now.duration_since(**since) >= SHUTDOWN_DURATION)
            .map(|(id, _)| id.clone())
            .collect();
        let mut freed = false;
        for id in done {
            state.shutting_down.remove(&id);
            state.stopped.remove(&id);
            let gone = state.instances.remove(&id);
            freed |= gone.is_some_and(|i| i.reservation_id.is_some());
        }
        if freed {
            self.changed();
        }
        state
    }

    /// The account's fault injector (off until configured and enabled).
    pub fn faults(&self) -> &Arc<faults::SimFaults> {
        &self.faults
    }

    /// The instance-type catalog it sells from (real us-east-1 EC2 data).
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Every running instance, with what its kubelet registers (the sandbox kubelet reads this,
    /// leaving out those booted from [`SimCloud::broken_images`]). Stopped and stopping ones
    /// are not running.
    pub fn instances(&self) -> Vec<SimInstance> {
        let state = self.lock();
        state
            .instances
            .values()
            .filter(|i| !state.shutting_down.contains_key(&i.id))
            .filter(|i| !state.stopped.contains_key(&i.id))
            .cloned()
            .collect()
    }

    /// Terminate the instance behind `provider_id` at once (EC2 TerminateInstances); returns
    /// whether it was running.
    pub fn terminate(&self, provider_id: &str) -> bool {
        let now = self.clock.now();
        let mut state = self.lock();
        let Some(id) = state
            .instances
            .values()
            .find(|i| i.provider_id == provider_id)
            .map(|i| i.id.clone())
        else {
            return false;
        };
        state.shutting_down.insert(id, now).is_none()
    }

    /// Make every launch of this offering fail with insufficient capacity.
    pub fn add_capacity_shortage(&self, instance_type: &str, zone: &str, capacity_type: &str) {
        let mut s = self.lock();
        s.shortages
            .insert((instance_type.into(), zone.into(), capacity_type.into()));
    }

    /// Every image of the account, oldest first (a read: node classes are not re-resolved).
    pub fn amis(&self) -> Vec<SimAmi> {
        self.lock().network.amis.clone()
    }

    /// The ids of the images published [`ImageHealth::Broken`]: the simulated kubelet never
    /// starts on instances booted from them.
    pub fn broken_images(&self) -> HashSet<String> {
        self.lock().broken_images.clone()
    }

    /// Run a closure over the simulated network (e.g. to add a subnet). Every call counts as a
    /// change: node classes are re-resolved (see [`CloudProvider::resolution_changes`]).
    pub fn with_network<T>(&self, f: impl FnOnce(&mut SimNetwork) -> T) -> T {
        let result = f(&mut self.lock().network);
        self.changed();
        result
    }

    /// Publish a new image release of `family` (what AWS does to `@latest` aliases): one image
    /// per architecture in `architectures` (empty: `amd64` and `arm64`), at `version` or,
    /// without one, the day after the family's newest release. Node classes are re-resolved at
    /// once, so their `status.amis` show the new images when an alias or selector matches them.
    /// A [`ImageHealth::Broken`] release's images are listed in [`SimCloud::broken_images`]:
    /// instances launched from them run, but never register a Node.
    ///
    /// Errors: see [`SimNetwork::publish_release`]; nothing is published then.
    pub fn publish_release(
        &self,
        family: &str,
        version: Option<&str>,
        architectures: &[&str],
        health: ImageHealth,
    ) -> Result<Vec<SimAmi>, PublishError> {
        let amis = {
            let mut state = self.lock();
            let amis = state
                .network
                .publish_release(family, version, architectures)?;
            if health == ImageHealth::Broken {
                state
                    .broken_images
                    .extend(amis.iter().map(|a| a.id.clone()));
            }
            amis
        };
        self.changed();
        Ok(amis)
    }

    /// Tell watchers of [`CloudProvider::resolution_changes`] that resolutions may differ.
    fn changed(&self) {
        self.changes.send_modify(|generation| *generation += 1);
    }

    fn zones_of(node_class: &EC2NodeClass) -> BTreeSet<String> {
        node_class
            .status
            .as_ref()
            .map(|s| s.subnets.iter().map(|s| s.zone.clone()).collect())
            .unwrap_or_default()
    }

    /// How many more instances the reservation `id` takes at `now`: its recorded
    /// `AvailableInstanceCount` less the simulated instances running in it (a terminated one
    /// gives its place back); 0 once it has ended or is not known.
    fn room(state: &State, id: &str, now: Timestamp) -> i64 {
        let Some(r) = state
            .network
            .reservations
            .iter()
            .find(|r| r.capacity_reservation_id == id && r.usable(now))
        else {
            return 0;
        };
        let used = state
            .instances
            .values()
            .filter(|i| {
                i.reservation_id.as_deref() == Some(id) && !state.shutting_down.contains_key(&i.id)
            })
            .count() as i64;
        (r.available_instance_count - used).max(0)
    }

    /// What EC2 does to instances in reservations that end, at `now`: an On-Demand Capacity
    /// Reservation that expired, was cancelled or is gone leaves its instances running as
    /// plain on-demand ones (capacity type, labels and price follow); a Capacity Block's
    /// instances are reclaimed (terminated) from [`CAPACITY_BLOCK_RECLAIM_LEAD`] before its end.
    fn settle_reservations(&self, state: &mut State, now: Timestamp) {
        let State {
            instances,
            network,
            shutting_down,
            ..
        } = state;
        for i in instances.values_mut() {
            let Some(id) = i.reservation_id.clone() else {
                continue;
            };
            let record = network
                .reservations
                .iter()
                .find(|r| r.capacity_reservation_id == id);
            match record {
                Some(r) if r.is_capacity_block() => {
                    let reclaimed = !r.usable(now)
                        || r.end_date
                            .is_some_and(|end| now >= end - CAPACITY_BLOCK_RECLAIM_LEAD);
                    if reclaimed {
                        shutting_down.entry(i.id.clone()).or_insert(now);
                    }
                }
                Some(r) if r.usable(now) => {}
                _ => {
                    i.reservation_id = None;
                    i.capacity_type = l::CAPACITY_TYPE_ON_DEMAND.to_string();
                    i.price = self
                        .catalog
                        .get(&i.instance_type)
                        .map(|e| e.on_demand_price)
                        .unwrap_or(i.price);
                    for labels in [&mut i.labels, &mut i.node_labels] {
                        labels.remove(l::CAPACITY_RESERVATION_ID_LABEL);
                        labels.remove(l::CAPACITY_RESERVATION_TYPE_LABEL);
                        labels.insert(
                            l::CAPACITY_TYPE_LABEL.into(),
                            l::CAPACITY_TYPE_ON_DEMAND.into(),
                        );
                    }
                }
            }
        }
    }

    /// The room left in each reservation the node class resolved (`status.capacityReservations`)
    /// in its zones ([`SimCloud::room`]); 0 once it has ended or, for a Capacity Block, is
    /// expiring.
    fn reserved_for(
        state: &State,
        node_class: &EC2NodeClass,
        now: Timestamp,
    ) -> Vec<ReservedCapacity> {
        let selected: BTreeSet<&str> = node_class
            .status
            .as_ref()
            .map(|s| {
                s.capacity_reservations
                    .iter()
                    .map(|r| r.id.as_str())
                    .collect()
            })
            .unwrap_or_default();
        state
            .network
            .reservations
            .iter()
            .filter(|r| selected.contains(r.capacity_reservation_id.as_str()))
            .map(|r| {
                r.reserved_capacity(SimCloud::room(state, &r.capacity_reservation_id, now), now)
            })
            .collect()
    }

    fn types_for(
        &self,
        state: &mut State,
        zones: &BTreeSet<String>,
        config: &CapacityConfig,
        reserved: &[ReservedCapacity],
    ) -> Arc<Vec<Arc<InstanceType>>> {
        let now = self.clock.now();
        let before = state.unavailable.len();
        state.unavailable.retain(|_, until| *until > now);
        if state.unavailable.len() != before {
            state.type_cache.clear();
        }
        if !reserved.is_empty() {
            // Reserved offerings change with every launch into them: never cached.
            let unavailable = &state.unavailable;
            return Arc::new(self.catalog.instance_types_with(
                zones,
                config,
                reserved,
                |t, z, ct| {
                    unavailable.contains_key(&(t.to_string(), z.to_string(), ct.to_string()))
                },
            ));
        }
        let key = (zones.clone(), config.clone());
        if let Some(cached) = state.type_cache.get(&key) {
            return Arc::clone(cached);
        }
        let unavailable = &state.unavailable;
        let types = Arc::new(self.catalog.instance_types(zones, config, |t, z, ct| {
            unavailable.contains_key(&(t.to_string(), z.to_string(), ct.to_string()))
        }));
        state.type_cache.insert(key, Arc::clone(&types));
        types
    }

    fn allocate_ip(state: &mut State, zone: &str) -> (String, String) {
        let octet = state
            .network
            .subnets
            .iter()
            .find(|s| s.zone == zone)
            .map_or(0, |s| s.octet);
        let n = state.next_host.entry(zone.to_string()).or_insert(0);
        *n += 1;
        let ip = format!("10.0.{}.{}", octet + *n / 254, *n % 254 + 1);
        let hostname = format!("ip-{}.ec2.internal", ip.replace('.', "-"));
        (ip, hostname)
    }
}

#[async_trait]
impl CloudProvider for SimCloud {
    fn name(&self) -> &str {
        "sim"
    }

    fn interruption_queue(&self) -> Option<Arc<dyn InterruptionQueue>> {
        self.interruption_queue
            .as_ref()
            .map(|q| Arc::clone(q) as Arc<dyn InterruptionQueue>)
    }

    fn mark_offering_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str) {
        tracing::info!(
            instance_type,
            zone,
            capacity_type,
            "interrupted offering marked unavailable for 3m"
        );
        self.mark_unavailable(instance_type, zone, capacity_type);
    }

    async fn create(
        &self,
        claim: &NodeClaim,
        node_class: &EC2NodeClass,
    ) -> Result<Launched, CloudError> {
        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        if let Some(delay) = self.faults.launch_delay() {
            tokio::time::sleep(delay).await;
        }
        self.faults.throttle("CreateFleet")?;
        let mut state = self.lock();
        if let Some(existing) = state
            .instances
            .values()
            .find(|i| i.tags.get(l::NODECLAIM_TAG_KEY) == Some(&claim_name))
        {
            return Ok(launched(existing));
        }
        let resolution = state
            .network
            .resolve(&self.cluster_name, node_class, self.clock.now());
        if let Some((_, reason, message)) = resolution.not_ready {
            return Err(CloudError::NodeClassNotReady(format!(
                "{reason}: {message}"
            )));
        }
        let zones: BTreeSet<String> = resolution
            .status
            .subnets
            .iter()
            .map(|s| s.zone.clone())
            .collect();
        let reqs = Requirements::from_api(&claim.spec.requirements);
        let requests = karpenter_core::cloud::launch_requests(claim);
        let config = self.capacity_config(node_class)?;
        let mut resolved = node_class.clone();
        resolved.status = Some(resolution.status.clone());
        let reserved = SimCloud::reserved_for(&state, &resolved, self.clock.now());
        let types = self.types_for(&mut state, &zones, &config, &reserved);
        let by_name: HashMap<&str, &Arc<InstanceType>> =
            types.iter().map(|t| (t.name.as_str(), t)).collect();
        let candidates: Vec<&Arc<InstanceType>> = ordered_type_names(claim)
            .iter()
            .filter_map(|n| by_name.get(n.as_str()).copied())
            .filter(|t| t.compatible(&reqs) && requests.fits_in(&t.allocatable))
            .collect();
        if candidates.is_empty() {
            return Err(CloudError::InsufficientCapacity(
                "no compatible instance type with an available offering in the node class's zones"
                    .into(),
            ));
        }
        let prioritized = karpenter_core::cloud::price_overlaid(claim);
        let offerings = launch_offerings(&candidates, &reqs, |_, _, _| false, prioritized);
        let now = self.clock.now();
        let mut chosen = None;
        let mut exhausted = Vec::new();
        for (price, t, zone, ct) in offerings {
            let key = (t.name.clone(), zone.clone(), ct.clone());
            if state.shortages.contains(&key) || self.faults.out_of_capacity() {
                exhausted.push(format!("{}/{zone}/{ct}", t.name));
                state
                    .unavailable
                    .insert(key, now + INSUFFICIENT_CAPACITY_TTL);
                continue;
            }
            chosen = Some((price, Arc::clone(t), zone, ct));
            break;
        }
        if !exhausted.is_empty() {
            state.type_cache.clear();
        }
        let Some((price, it, zone, capacity_type)) = chosen else {
            return Err(CloudError::InsufficientCapacity(format!(
                "all offerings are out of capacity: {}",
                exhausted.join(", ")
            )));
        };
        let image_id = compatible_ami(&resolution.status.amis, &it.labels)
            .map(|a| a.id.clone())
            .unwrap_or_default();
        let zone_id = state
            .network
            .subnets
            .iter()
            .find(|s| s.zone == zone)
            .map(|s| s.zone_id.clone())
            .unwrap_or_default();
        let subnet_id = resolution
            .status
            .subnets
            .iter()
            .find(|s| s.zone == zone)
            .map(|s| s.id.clone())
            .unwrap_or_default();
        let security_group_ids = resolution
            .status
            .security_groups
            .iter()
            .map(|g| g.id.clone())
            .collect();
        // A reserved launch goes into the reservation of that type and zone with room.
        let reservation = (capacity_type == l::CAPACITY_TYPE_RESERVED)
            .then(|| {
                reserved
                    .iter()
                    .find(|r| r.instance_type == it.name && r.zone == zone && r.available > 0)
            })
            .flatten()
            .cloned();
        let (private_ip, hostname) = SimCloud::allocate_ip(&mut state, &zone);
        let id = format!("i-0{:016x}", rand::rng().random::<u64>());
        let mut instance_labels = it.labels.clone();
        instance_labels.insert(l::TOPOLOGY_ZONE_LABEL.into(), zone.clone());
        instance_labels.insert(l::TOPOLOGY_ZONE_ID_LABEL.into(), zone_id);
        instance_labels.insert(l::TOPOLOGY_REGION_LABEL.into(), self.region.clone());
        instance_labels.insert(l::CAPACITY_TYPE_LABEL.into(), capacity_type.clone());
        if let Some(r) = &reservation {
            instance_labels.insert(l::CAPACITY_RESERVATION_ID_LABEL.into(), r.id.clone());
            instance_labels.insert(
                l::CAPACITY_RESERVATION_TYPE_LABEL.into(),
                r.reservation_type.clone(),
            );
        }
        let mut node_labels = reqs.labels();
        node_labels.extend(claim.metadata.labels.clone().unwrap_or_default());
        node_labels.extend(instance_labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        node_labels.insert(l::HOSTNAME_LABEL.into(), hostname.clone());
        let mut node_taints = claim.spec.taints.clone();
        node_taints.extend(claim.spec.startup_taints.iter().cloned());
        node_taints.push(l::unregistered_no_execute_taint());
        let nodepool = claim
            .metadata
            .labels
            .as_ref()
            .and_then(|m| m.get(l::NODEPOOL_LABEL))
            .cloned()
            .unwrap_or_default();
        let tags: BTreeMap<String, String> = [
            (
                format!("{}{}", l::CLUSTER_TAG_KEY_PREFIX, self.cluster_name),
                "owned".to_string(),
            ),
            (
                l::EKS_CLUSTER_NAME_TAG_KEY.to_string(),
                self.cluster_name.clone(),
            ),
            (l::NODEPOOL_TAG_KEY.to_string(), nodepool),
            (l::NODECLAIM_TAG_KEY.to_string(), claim_name.clone()),
            (
                l::EC2NODECLASS_TAG_KEY.to_string(),
                node_class.metadata.name.clone().unwrap_or_default(),
            ),
            (l::NAME_TAG_KEY.to_string(), claim_name),
        ]
        .into_iter()
        .collect();
        let instance = SimInstance {
            provider_id: format!("aws:///{zone}/{id}"),
            id: id.clone(),
            instance_type: it.name.clone(),
            zone,
            capacity_type,
            price,
            image_id,
            subnet_id,
            security_group_ids,
            launched_at: now,
            private_ip,
            hostname,
            tags,
            labels: instance_labels,
            node_labels,
            node_taints,
            capacity: it.capacity.clone(),
            allocatable: it.allocatable.clone(),
            reservation_id: reservation.map(|r| r.id),
        };
        let result = launched(&instance);
        let reserved = instance.reservation_id.is_some();
        state.instances.insert(id, instance);
        if reserved {
            // The reservation's room changed: node classes show it.
            self.changed();
        }
        self.launches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(result)
    }

    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudError> {
        self.faults.throttle("TerminateInstances")?;
        let name = claim.metadata.name.clone().unwrap_or_default();
        let provider_id = claim.status.as_ref().and_then(|s| s.provider_id.clone());
        let now = self.clock.now();
        let mut state = self.lock();
        let id = state
            .instances
            .values()
            .find(|i| {
                Some(&i.provider_id) == provider_id.as_ref()
                    || i.tags.get(l::NODECLAIM_TAG_KEY) == Some(&name)
            })
            .map(|i| i.id.clone());
        match id {
            Some(id) => {
                state.shutting_down.entry(id).or_insert(now);
                Ok(())
            }
            None => Err(CloudError::NodeClaimNotFound(format!(
                "no instance for nodeclaim {name}"
            ))),
        }
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        self.faults.throttle("DescribeInstances")?;
        self.lock()
            .instances
            .values()
            .find(|i| i.provider_id == provider_id)
            .map(SimInstance::as_instance)
            .ok_or_else(|| {
                CloudError::NodeClaimNotFound(format!("instance {provider_id} not found"))
            })
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        self.faults.throttle("DescribeInstances")?;
        let state = self.lock();
        Ok(state
            .instances
            .values()
            .filter(|i| !state.shutting_down.contains_key(&i.id))
            .map(SimInstance::as_instance)
            .collect())
    }

    async fn instance_types(
        &self,
        node_class: &EC2NodeClass,
    ) -> Result<Arc<Vec<Arc<InstanceType>>>, CloudError> {
        let zones = SimCloud::zones_of(node_class);
        let config = self.capacity_config(node_class)?;
        let mut state = self.lock();
        let reserved = SimCloud::reserved_for(&state, node_class, self.clock.now());
        Ok(self.types_for(&mut state, &zones, &config, &reserved))
    }

    async fn resolve_node_class(&self, node_class: &EC2NodeClass) -> NodeClassResolution {
        let now = self.clock.now();
        let state = self.lock();
        let mut resolution = state.network.resolve(&self.cluster_name, node_class, now);
        for r in &mut resolution.status.capacity_reservations {
            r.available_instance_count = Some(SimCloud::room(&state, &r.id, now));
        }
        resolution
    }

    async fn capacity_reservations(&self, ids: &[String]) -> Result<Vec<Record>, CloudError> {
        self.faults.throttle("DescribeCapacityReservations")?;
        let now = self.clock.now();
        let state = self.lock();
        Ok(state
            .network
            .reservations
            .iter()
            .filter(|r| ids.contains(&r.capacity_reservation_id))
            .map(|r| Record {
                available_instance_count: SimCloud::room(&state, &r.capacity_reservation_id, now),
                ..r.clone()
            })
            .collect())
    }

    /// The AWS provider's policies: the sandbox repairs what a real cluster would.
    fn repair_policies(&self) -> Vec<karpenter_core::lifecycle::repair::RepairPolicy> {
        karpenter_core::lifecycle::repair::aws_policies()
    }

    fn resolution_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.changes.subscribe())
    }
}

fn launched(i: &SimInstance) -> Launched {
    Launched {
        provider_id: i.provider_id.clone(),
        image_id: i.image_id.clone(),
        labels: i.labels.clone(),
        capacity: i.capacity.clone(),
        allocatable: i.allocatable.clone(),
        warnings: vec![],
    }
}

#[cfg(test)]
mod tests;
