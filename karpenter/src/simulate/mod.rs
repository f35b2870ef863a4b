//! `karpenter simulate`: what Karpenter would launch for a workload, without a cluster. Workloads
//! (YAML or Alibaba trace CSV, as for the sandbox) or a generated benchmark mix are expanded into
//! the cluster snapshot the live provisioner would see (pending pods, NodePools, node classes,
//! DaemonSets, ...), planned with the live provisioner's own pass
//! (`karpenter_core::provisioning::plan::plan`) against the real EC2 catalog or upstream's
//! synthetic one, and reported with the fleet's cost next to a lower bound on any fleet's cost.

pub mod bound;
pub mod diverse;
pub mod expand;
pub mod synthetic;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, ValueEnum};
use crds::conditions::{self, ConditionStatus, READY};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Namespace, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use self::bound::{Candidate, lower_bound};
use self::expand::Expanded;
use crate::ReportFormat;
use crate::workload::{self, Generated, WorkloadArgs};
use controller::cloudprovider::sim::network::SimNetwork;
use controller::cloudprovider::sim::zone_letters;
use controller::runtime::options::{
    FeatureGate, FeatureGates, MinValuesPolicy, parse_min_values_policy,
};
use karpenter_core::capacity::catalog::{Catalog, REGION};
use karpenter_core::capacity::node_class::{CapacityConfig, CapacityOptions};
use karpenter_core::capacity::reservation::{self, Record, ReservedCapacity};
use karpenter_core::pod_view::PodView;
use karpenter_core::provisioning::listing;
use karpenter_core::provisioning::plan::{self, Listing, Settings};
use karpenter_core::provisioning::template;
use karpenter_core::scheduling::pod::{PodInfo, PodKey};
use karpenter_core::scheduling::volumes::VolumeIndex;
use karpenter_core::snapshot::Snapshot;

/// Which instance types to solve against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum InstanceTypes {
    /// The vendored real EC2 catalog (us-east-1 types, zones and prices).
    Aws,
    /// Upstream's fake cloud provider's 400 types.
    #[value(name = "synthetic-400")]
    Synthetic400,
}

/// Flags of `karpenter simulate`.
#[derive(Args, Clone, Debug)]
pub struct SimulateArgs {
    /// The workload: `--workload FILE` (repeatable), `--scale`, `--max-pods`.
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Generate upstream's benchmark mix, e.g. `diverse:20000` (instead of the bundled
    /// workload; its pods count against --max-pods).
    #[arg(long, value_name = "diverse:N", value_parser = parse_generate)]
    pub generate: Option<usize>,
    /// Instance types to choose from.
    #[arg(long, value_enum, default_value = "aws")]
    pub instance_types: InstanceTypes,
    /// Report format (the JSON document is the only thing on stdout).
    #[arg(long, value_enum, default_value = "text")]
    pub report: ReportFormat,
    /// Cluster name the default EC2NodeClass discovers subnets by.
    #[arg(long, env = "CLUSTER_NAME", default_value = "sandbox")]
    pub cluster_name: String,
    /// Feature gates as `karpenter sandbox` and `karpenter run` take them: `Name=true,...`
    /// (validated the same way; upstream's defaults for the gates not named).
    #[arg(long, env = "FEATURE_GATES", default_value = "")]
    pub feature_gates: String,
    /// `Strict` leaves a pod pending when the instance types that fit cannot meet a
    /// `minValues`; `BestEffort` lowers it to what they offer (the NodeClaim is then counted
    /// in `nodeclaims.min_values_relaxed`), as `karpenter run` does.
    #[arg(long, env = "MIN_VALUES_POLICY", default_value = "Strict",
          value_parser = parse_min_values_policy)]
    pub min_values_policy: MinValuesPolicy,
    /// Capacity reservations to plan into: a YAML list in DescribeCapacityReservations' shape
    /// (`CapacityReservationId`, `InstanceType`, `AvailabilityZone`, `TotalInstanceCount`,
    /// `AvailableInstanceCount`, `InstanceMatchCriteria`, `ReservationType`, `EndDate`,
    /// `OwnerId`, `Tags`), selected by each EC2NodeClass's `capacityReservationSelectorTerms`.
    #[arg(long, value_name = "FILE")]
    pub capacity_reservations: Option<std::path::PathBuf>,
    /// The region simulated (`--instance-types aws`): its zones, instance-type offerings and
    /// on-demand prices (vendored for us-east-1; elsewhere the us-east-1 list prices stand in,
    /// and the report says the costs are approximate). Empty means us-east-1.
    #[arg(
        long,
        env = "AWS_REGION",
        value_name = "REGION",
        default_value = "us-east-1"
    )]
    pub region: String,
}

/// The reservations of a `--capacity-reservations` file.
///
/// Errors: the file cannot be read or is not a list of reservations, naming the file.
pub fn read_reservations(path: &std::path::Path) -> Result<Vec<Record>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--capacity-reservations {}: {e}", path.display()))?;
    reservation::parse(&text)
        .map_err(|e| format!("--capacity-reservations {}: {e}", path.display()))
}

/// Parse `diverse:N`.
///
/// Errors: another generator or a bad count.
pub fn parse_generate(s: &str) -> Result<usize, String> {
    let n = s
        .strip_prefix("diverse:")
        .ok_or_else(|| format!("unknown generator {s:?}; expected diverse:N"))?;
    n.parse::<usize>()
        .map_err(|_| format!("invalid pod count in {s:?}"))
}

/// A pod that could not be scheduled.
#[derive(Clone, Debug, Serialize)]
pub struct Unscheduled {
    /// `namespace/name`.
    pub name: String,
    /// The solver's reason, e.g. `incompatible with nodepool "default", ...`.
    pub reason: String,
}

/// Pod counts.
#[derive(Clone, Debug, Serialize)]
pub struct PodCounts {
    /// Every pod to schedule: the workload's (replicas times `--scale`) or the generated mix.
    pub total: usize,
    /// Pods placed on a NodeClaim.
    pub scheduled: usize,
    /// Pods placed nowhere, with the solver's reason.
    pub unschedulable: Vec<Unscheduled>,
}

/// NodeClaim counts.
#[derive(Clone, Debug, Serialize)]
pub struct ClaimCounts {
    /// NodeClaims the solve would create.
    pub total: usize,
    /// NodeClaims by the instance type they would launch (their cheapest option).
    pub by_instance_type: BTreeMap<String, usize>,
    /// NodeClaims by the capacity type they would launch as (their cheapest offering's:
    /// `spot`, `on-demand` or `reserved`).
    pub by_capacity_type: BTreeMap<String, usize>,
    /// NodeClaims by NodePool.
    pub by_nodepool: BTreeMap<String, usize>,
    /// NodeClaims whose `minValues` was lowered (`--min-values-policy BestEffort`; annotated
    /// `karpenter.sh/nodeclaim-min-values-relaxed: "true"`).
    pub min_values_relaxed: usize,
    /// Median serialised size of the NodeClaims, in bytes: the JSON object the provisioner
    /// sends to the API server on create (nearest rank; 0 with no NodeClaim).
    pub bytes_p50: usize,
    /// 99th-percentile serialised size of the NodeClaims, in bytes (nearest rank).
    pub bytes_p99: usize,
}

/// A NodePool the provisioner left out of the plan.
#[derive(Clone, Debug, Serialize)]
pub struct SkippedNodePool {
    /// The NodePool's name.
    pub name: String,
    /// Why, e.g. `NodePool requirements filtered out all compatible available instance types`.
    pub reason: String,
}

/// The simulate report.
#[derive(Clone, Debug, Serialize)]
pub struct SimulateReport {
    /// `aws` or `synthetic-400`.
    pub instance_types: String,
    /// The region simulated, e.g. `us-east-1`.
    pub region: String,
    /// True when no on-demand table is vendored for the region and its costs are the
    /// us-east-1 list prices (an estimate; see `price_note`).
    pub on_demand_prices_approximate: bool,
    /// Pods: total, scheduled, and those that fit nowhere.
    pub pods: PodCounts,
    /// NodeClaims: how many, by instance type, and their serialised sizes.
    pub nodeclaims: ClaimCounts,
    /// NodePools the provisioner left out, with the reason (empty when all were used).
    pub skipped_nodepools: Vec<SkippedNodePool>,
    /// Sum of each NodeClaim's cheapest offering, USD/hour. Spot offerings are priced by
    /// estimate (see `price_note`).
    pub cost_per_hour_usd: f64,
    /// A lower bound on the cost of any fleet holding the scheduled pods (see `bound`), USD/hour.
    pub lower_bound_cost_per_hour_usd: f64,
    /// `cost_per_hour_usd / lower_bound_cost_per_hour_usd`.
    pub cost_over_bound: f64,
    /// Always true: no spot price shown is a real market price (the vendored EC2 data has
    /// on-demand prices only; spot prices are derived estimates).
    pub spot_prices_estimated: bool,
    /// Where the prices come from, in one sentence.
    pub price_note: String,
    /// Seconds spent in the provisioning pass (`plan`: compiling the pending pods, the solve
    /// with its cost re-pack, and building the NodeClaim objects); the bound is not included.
    pub solve_seconds: f64,
}

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// A workload that cannot be used: unreadable, malformed, over the pod cap, or an object
    /// the API server refuses (the same errors as `karpenter sandbox`).
    #[error(transparent)]
    Workload(#[from] workload::WorkloadError),
    /// A manifest cannot be used.
    #[error("{0}")]
    Manifest(String),
    /// No bound could be computed.
    #[error("lower bound: {0}")]
    Bound(#[from] bound::BoundError),
}

impl From<expand::ManifestError> for SimulateError {
    fn from(e: expand::ManifestError) -> Self {
        SimulateError::Manifest(e.0)
    }
}

/// Everything one simulation decides from: the cluster as the live provisioner would see it
/// once the workload is applied, and what the cloud would list for each node class.
#[derive(Clone, Debug)]
pub struct Simulation {
    /// The cluster with no nodes or NodeClaims yet: every pod pending and marked unschedulable
    /// (`PodScheduled=False`, reason `Unschedulable`, as kube-scheduler leaves it), the
    /// NodePools (validated and `Ready=True`), the EC2NodeClasses (status resolved from the
    /// simulated network), DaemonSets, Namespaces and volume objects.
    pub snapshot: Snapshot,
    /// Instance types by EC2NodeClass name: the real catalog in the class's subnet zones (as
    /// the sandbox's simulated cloud lists them) or the synthetic types.
    pub listings: HashMap<String, Listing>,
    /// Which instance types were listed.
    pub instance_types: InstanceTypes,
    /// The region simulated, e.g. `us-east-1`.
    pub region: String,
    /// Whether on-demand prices are the us-east-1 list prices standing in for the region's.
    pub prices_approximate: bool,
    /// `--min-values-policy`, as the live provisioner takes `MIN_VALUES_POLICY`.
    pub min_values_policy: MinValuesPolicy,
    /// `--feature-gates`, validated.
    pub feature_gates: FeatureGates,
    /// What the user should know before the report, printed on stderr (e.g. NodeOverlays
    /// given while their feature gate is off).
    pub warnings: Vec<String>,
}

/// A UID shaped like the API server's (36 characters), stable per name: NodeClaims carry their
/// NodePool's UID in `ownerReferences`, so their serialised size counts one.
fn stable_uid(kind: &str, name: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in kind.bytes().chain(name.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        h >> 32,
        (h >> 16) & 0xffff,
        h & 0xfff,
        (h >> 20) & 0xfff,
        h & 0xffff_ffff_ffff
    )
}

/// The pod as the provisioner finds it after kube-scheduler failed to place it.
fn unschedulable(mut pod: Pod) -> Pod {
    let status = pod.status.get_or_insert_with(PodStatus::default);
    status.phase = Some("Pending".into());
    status.conditions = Some(vec![PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        reason: Some("Unschedulable".into()),
        message: Some("0/0 nodes are available".into()),
        ..PodCondition::default()
    }]);
    pod
}

/// The simulation's snapshot and listings from expanded manifests. Every NodePool is validated
/// and must reference an EC2NodeClass of the workload whose selectors resolve (with
/// `--instance-types aws`); it then gets `Ready=True`, as the controller's readiness check
/// would give it.
///
/// Errors: an invalid NodePool, a missing or not-ready node class.
pub fn prepare(
    x: Expanded,
    choice: InstanceTypes,
    cluster: &str,
    reservations: &[Record],
    region: &str,
) -> Result<Simulation, SimulateError> {
    let region = if region.is_empty() { REGION } else { region };
    let catalog = match choice {
        InstanceTypes::Aws => {
            Some(Catalog::for_region(region).map_err(|e| SimulateError::Manifest(e.to_string()))?)
        }
        InstanceTypes::Synthetic400 => None,
    };
    let synthetic = Arc::new(synthetic::instance_types(400));
    let mut network = match &catalog {
        Some(c) => SimNetwork::in_region(cluster, region, &zone_letters(c)),
        None => SimNetwork::new(cluster),
    };
    network.reservations = reservations.to_vec();
    let mut classes = Vec::new();
    let mut listings: HashMap<String, Listing> = HashMap::new();
    let mut not_ready = HashMap::new();
    // Reservations as they stand now: ended ones are not selected, an expiring Capacity
    // Block is shown but takes no launch.
    let now = jiff::Timestamp::now();
    for class in &x.nodeclasses {
        let name = class.metadata.name.clone().unwrap_or_default();
        let resolved = network.resolve(cluster, class, now);
        let zones: BTreeSet<String> = resolved
            .status
            .subnets
            .iter()
            .map(|s| s.zone.clone())
            .collect();
        let types = match &catalog {
            Some(c) => {
                let config = CapacityConfig::from_node_class(class, CapacityOptions::default())
                    .map_err(|e| SimulateError::Manifest(format!("EC2NodeClass {name:?}: {e}")))?;
                // Each reservation the class selects, with its room as EC2 reports it.
                let reserved: Vec<ReservedCapacity> = network
                    .reservations
                    .iter()
                    .filter(|r| {
                        resolved
                            .status
                            .capacity_reservations
                            .iter()
                            .any(|s| s.id == r.capacity_reservation_id)
                    })
                    .map(|r| r.reserved_capacity(r.available_instance_count, now))
                    .collect();
                Arc::new(c.instance_types_with(&zones, &config, &reserved, |_, _, _| false))
            }
            None => Arc::clone(&synthetic),
        };
        if let (Some(_), Some((_, reason, message))) = (&catalog, resolved.not_ready) {
            not_ready.insert(name.clone(), format!("{reason}: {message}"));
        }
        listings.insert(name.clone(), Ok(types));
        let mut class = (**class).clone();
        class.metadata.uid = Some(stable_uid("EC2NodeClass", &name));
        class.status = Some(resolved.status);
        classes.push(Arc::new(class));
    }
    let mut pools = Vec::new();
    for pool in &x.nodepools {
        let name = pool.metadata.name.clone().unwrap_or_default();
        if let Err(msg) = template::validate(pool) {
            return Err(SimulateError::Manifest(format!(
                "NodePool {name:?} is invalid: {msg}"
            )));
        }
        let class_name = &pool.spec.template.spec.node_class_ref.name;
        if !listings.contains_key(class_name) {
            return Err(SimulateError::Manifest(format!(
                "NodePool {name:?} references EC2NodeClass {class_name:?}, which the workload does not define"
            )));
        }
        if let Some(why) = not_ready.get(class_name) {
            return Err(SimulateError::Manifest(format!(
                "EC2NodeClass {class_name:?} is not ready: {why}"
            )));
        }
        let mut pool = (**pool).clone();
        pool.metadata.uid = Some(stable_uid("NodePool", &name));
        let status = pool.status.get_or_insert_with(Default::default);
        conditions::set(
            &mut status.conditions,
            conditions::new_condition(
                READY,
                ConditionStatus::True,
                "",
                "",
                0,
                Timestamp::UNIX_EPOCH,
            ),
            Timestamp::UNIX_EPOCH,
        );
        pools.push(Arc::new(pool));
    }
    let namespaces = x
        .namespaces
        .into_iter()
        .map(|(name, labels)| {
            Arc::new(Namespace {
                metadata: ObjectMeta {
                    name: Some(name),
                    labels: Some(labels),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            })
        })
        .collect();
    // Collected into a buffer of its own: an in-place collect would keep the `Vec<Pod>`'s
    // allocation (about 2.5 KB a pod, 49 MB for 20,000) alive behind the 8-byte `Arc`s.
    let mut pods = Vec::with_capacity(x.pods.len());
    pods.extend(
        x.pods
            .into_iter()
            .map(|p| Arc::new(PodView::from(unschedulable(p)))),
    );
    let snapshot = Snapshot {
        pods,
        nodepools: pools,
        nodeclasses: classes,
        daemonsets: x.daemonsets,
        namespaces,
        pvcs: x.pvcs,
        pvs: x.pvs,
        storage_classes: x.storage_classes,
        ..Snapshot::default()
    };
    let prices_approximate = catalog.as_ref().is_some_and(|c| c.prices_approximate());
    Ok(Simulation {
        snapshot,
        listings,
        region: region.to_string(),
        prices_approximate,
        instance_types: choice,
        min_values_policy: MinValuesPolicy::Strict,
        feature_gates: FeatureGates::default(),
        warnings: Vec::new(),
    })
}

/// The lower bound's candidates: every instance type of each NodePool the provisioner uses
/// (the same checks as `plan`: ready, node class listed, requirements leave a type), as the
/// pool lists it (NodeOverlays applied, so the bound prices what the plan prices), under the
/// pool's requirements.
fn candidates(sim: &Simulation) -> Vec<Candidate> {
    let mut out = Vec::new();
    for (pool, types) in listing::pool_types(&sim.snapshot, &sim.listings).pools {
        let Ok(types) = types else {
            continue;
        };
        let Ok(reqs) = template::usable_requirements(&pool, &types) else {
            continue;
        };
        out.extend(types.iter().map(|t| Candidate {
            instance_type: Arc::clone(t),
            requirements: reqs.clone(),
        }));
    }
    out
}

/// The value at quantile `q` (0..=1, nearest rank) of sorted `xs`; 0 when empty.
fn quantile(xs: &[usize], q: f64) -> usize {
    if xs.is_empty() {
        return 0;
    }
    let rank = (q * xs.len() as f64).ceil() as usize;
    xs[rank.clamp(1, xs.len()) - 1]
}

/// What the report says about prices for each choice of instance types.
fn price_note(sim: &Simulation) -> String {
    const SPOT: &str = "spot: estimated at 35-70% of on-demand per type and zone (the vendored \
                        data has no spot prices)";
    match sim.instance_types {
        InstanceTypes::Aws if sim.prices_approximate => format!(
            "on-demand: APPROXIMATE, the us-east-1 list prices (no table is vendored for {}; \
             upstream also falls back to them until its Pricing API answers); {SPOT}",
            sim.region
        ),
        InstanceTypes::Aws => format!("on-demand: {} list prices (vendored); {SPOT}", sim.region),
        InstanceTypes::Synthetic400 => "synthetic: upstream's fake cloud provider formula \
                                        (0.1 x vCPU + 0.1 x GB), spot and on-demand alike"
            .into(),
    }
}

/// Plan with the live provisioner's code (`karpenter_core::provisioning::plan::plan`, cost
/// re-pack on) and report: pods scheduled and unschedulable, NodeClaims by instance type with
/// their serialised sizes, the fleet's cost and the lower bound over the same listings.
///
/// Errors: a pod whose spec cannot be read, or no lower bound can be computed.
pub fn simulate(sim: &Simulation) -> Result<SimulateReport, SimulateError> {
    let settings = Settings {
        repack: true,
        min_values_policy: sim.min_values_policy,
        ..Settings::default()
    };
    let start = Instant::now();
    let plan = plan::plan(&sim.snapshot, &sim.listings, &settings);
    let solve_seconds = start.elapsed().as_secs_f64();
    let mut by_type: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_capacity_type: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_nodepool: BTreeMap<String, usize> = BTreeMap::new();
    let mut min_values_relaxed = 0;
    let mut cost = 0.0;
    let mut sizes = Vec::with_capacity(plan.nodeclaims.len());
    for c in &plan.nodeclaims {
        if let Some(t) = c.decision.instance_types.first() {
            *by_type.entry(t.name.clone()).or_default() += 1;
            if let Some(o) = t.cheapest_offering(&c.decision.requirements) {
                *by_capacity_type.entry(o.capacity_type.clone()).or_default() += 1;
            }
        }
        *by_nodepool.entry(c.decision.nodepool.clone()).or_default() += 1;
        min_values_relaxed += usize::from(c.decision.min_values_relaxed);
        cost += c.decision.cheapest_price().unwrap_or(0.0);
        sizes.push(serde_json::to_vec(&c.nodeclaim).map_or(0, |b| b.len()));
    }
    sizes.sort_unstable();
    let claims = plan.nodeclaims.len();
    let unschedulable: Vec<Unscheduled> = plan
        .failures
        .iter()
        .map(|f| Unscheduled {
            name: f.pod.to_string(),
            reason: f.reason.clone(),
        })
        .collect();
    let skipped: Vec<SkippedNodePool> = plan
        .skipped
        .iter()
        .map(|(name, why)| SkippedNodePool {
            name: name.clone(),
            reason: why.to_string(),
        })
        .collect();
    let failed: HashSet<PodKey> = plan.failures.iter().map(|f| f.pod.clone()).collect();
    // The NodeClaims (each listing up to 60 instance types) are summarised above; free them
    // before the lower bound reads every pod again, so the two never peak together.
    drop(plan);
    let volumes = VolumeIndex::new(
        &sim.snapshot.pvcs,
        &sim.snapshot.pvs,
        &sim.snapshot.storage_classes,
    );
    let mut scheduled = Vec::new();
    for p in &sim.snapshot.pods {
        let mut info = PodInfo::from_pod(p).map_err(|e| {
            SimulateError::Manifest(format!(
                "pod {}: {e}",
                p.metadata.name.as_deref().unwrap_or("")
            ))
        })?;
        if failed.contains(&info.key) {
            continue;
        }
        info.add_volume_requirements(&volumes.requirements(p));
        info.volumes = volumes.attachments(p);
        scheduled.push(info);
    }
    let bound = if scheduled.is_empty() {
        0.0
    } else {
        let refs: Vec<&PodInfo> = scheduled.iter().collect();
        lower_bound(&refs, &candidates(sim))?
    };
    let round = |x: f64| (x * 10_000.0).round() / 10_000.0;
    Ok(SimulateReport {
        instance_types: match sim.instance_types {
            InstanceTypes::Aws => "aws".into(),
            InstanceTypes::Synthetic400 => "synthetic-400".into(),
        },
        region: sim.region.clone(),
        on_demand_prices_approximate: sim.prices_approximate,
        pods: PodCounts {
            total: sim.snapshot.pods.len(),
            scheduled: scheduled.len(),
            unschedulable,
        },
        nodeclaims: ClaimCounts {
            total: claims,
            by_instance_type: by_type,
            by_capacity_type,
            by_nodepool,
            min_values_relaxed,
            bytes_p50: quantile(&sizes, 0.5),
            bytes_p99: quantile(&sizes, 0.99),
        },
        skipped_nodepools: skipped,
        cost_per_hour_usd: round(cost),
        lower_bound_cost_per_hour_usd: round(bound),
        cost_over_bound: if bound > 0.0 {
            (cost / bound * 10_000.0).round() / 10_000.0
        } else {
            0.0
        },
        spot_prices_estimated: true,
        price_note: price_note(sim),
        solve_seconds: (solve_seconds * 1_000_000.0).round() / 1_000_000.0,
    })
}

impl SimulateReport {
    /// The report as text: pods scheduled, NodeClaims and their serialised sizes, cost per hour
    /// against the lower bound, where prices come from, solve time, the 15 commonest instance
    /// types, NodePools left out and up to 10 unscheduled pods.
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Instance types: {} ({})",
            self.instance_types, self.region
        );
        let _ = writeln!(
            s,
            "Pods: {} scheduled of {}",
            self.pods.scheduled, self.pods.total
        );
        let _ = writeln!(
            s,
            "NodeClaims: {} (serialised size p50 {} B, p99 {} B)",
            self.nodeclaims.total, self.nodeclaims.bytes_p50, self.nodeclaims.bytes_p99
        );
        if self.pods.scheduled == 0 {
            let _ = writeln!(
                s,
                "Cost: ${:.4}/hour; no lower bound: no pod was scheduled",
                self.cost_per_hour_usd
            );
        } else {
            let _ = writeln!(
                s,
                "Cost: ${:.4}/hour; lower bound ${:.4}/hour (x{:.3})",
                self.cost_per_hour_usd, self.lower_bound_cost_per_hour_usd, self.cost_over_bound
            );
        }
        let _ = writeln!(s, "Prices: {}", self.price_note);
        let _ = writeln!(s, "Solve: {:.3}s", self.solve_seconds);
        let mut types: Vec<(&String, &usize)> = self.nodeclaims.by_instance_type.iter().collect();
        types.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (t, n) in types.iter().take(15) {
            let _ = writeln!(s, "  {n:>6}  {t}");
        }
        let counts = |m: &BTreeMap<String, usize>| {
            m.iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !self.nodeclaims.by_nodepool.is_empty() {
            let _ = writeln!(
                s,
                "By capacity type: {}; by NodePool: {}",
                counts(&self.nodeclaims.by_capacity_type),
                counts(&self.nodeclaims.by_nodepool)
            );
        }
        if self.nodeclaims.min_values_relaxed > 0 {
            let _ = writeln!(
                s,
                "minValues relaxed (BestEffort) on {} NodeClaim(s)",
                self.nodeclaims.min_values_relaxed
            );
        }
        for p in &self.skipped_nodepools {
            let _ = writeln!(s, "  NodePool {} left out: {}", p.name, p.reason);
        }
        for u in self.pods.unschedulable.iter().take(10) {
            let _ = writeln!(s, "  unschedulable {}: {}", u.name, u.reason);
        }
        s
    }
}

/// Run the command: the simulation's warnings on stderr, the report on stdout. Exit codes:
/// 0 every pod scheduled, 1 some pod unschedulable (the report is printed all the same, and
/// stderr says how many), 2 bad input.
pub fn run(args: &SimulateArgs) -> ExitCode {
    let report = build(args).and_then(|sim| {
        for w in &sim.warnings {
            eprintln!("warning: {w}");
        }
        simulate(&sim)
    });
    match report {
        Ok(report) => {
            match args.report {
                ReportFormat::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                ),
                ReportFormat::Text => print!("{}", report.text()),
            }
            let unschedulable = report.pods.unschedulable.len();
            if unschedulable == 0 {
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "error: {unschedulable} of {} pod(s) unschedulable (listed in the report)",
                    report.pods.total
                );
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// The simulation for the command's arguments (`report` is not used): the workload as the
/// sandbox reads it ([`WorkloadArgs::read`]: the bundled Online Boutique when none is given
/// and nothing is generated, scaled, within the pod cap, defaulted with a NodePool and node
/// class, admitted), expanded, plus the generated mix, as a snapshot with listings
/// ([`prepare`]). The workload's NodeOverlays go into the snapshot only with
/// `--feature-gates NodeOverlay=true`, as the controller watches them only then; without it
/// they are left out with a warning naming the gate.
///
/// Errors: a workload the reader refuses (see [`workload::WorkloadError`]), invalid NodePools
/// or node classes.
pub fn build(args: &SimulateArgs) -> Result<Simulation, SimulateError> {
    let generated = args.generate.map(|n| Generated {
        flag: format!("--generate diverse:{n}"),
        pods: n as u64,
    });
    let workload = args.workload.read(&args.cluster_name, generated.as_ref())?;
    let mut expanded = expand::expand(&workload.manifests)?;
    if let Some(n) = args.generate {
        expanded.pods.extend(diverse::diverse_pods(n));
    }
    let feature_gates = args
        .feature_gates
        .parse()
        .map_err(|e| SimulateError::Manifest(format!("--feature-gates (FEATURE_GATES): {e}")))?;
    let overlays = std::mem::take(&mut expanded.nodeoverlays);
    let reservations = match &args.capacity_reservations {
        Some(path) => read_reservations(path).map_err(SimulateError::Manifest)?,
        None => Vec::new(),
    };
    let mut sim = prepare(
        expanded,
        args.instance_types,
        &args.cluster_name,
        &reservations,
        &args.region,
    )?;
    sim.min_values_policy = args.min_values_policy;
    sim.feature_gates = feature_gates;
    if sim.feature_gates.enabled(FeatureGate::NodeOverlay) {
        sim.snapshot.nodeoverlays = overlays;
    } else if !overlays.is_empty() {
        sim.warnings.push(overlays_ignored(overlays.len()));
    }
    Ok(sim)
}

/// The warning for `count` NodeOverlays given while their feature gate is off.
fn overlays_ignored(count: usize) -> String {
    let gate = FeatureGate::NodeOverlay.name();
    format!(
        "{count} NodeOverlay(s) in the workload are not applied: the {gate} feature gate is off (pass --feature-gates {gate}=true)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boutique(scale: u32) -> Expanded {
        let args = WorkloadArgs {
            scale,
            ..WorkloadArgs::default()
        };
        let w = args.read("sandbox", None).expect("the bundled workload");
        expand::expand(&w.manifests).expect("expands")
    }

    #[test]
    fn the_snapshot_is_what_the_live_provisioner_plans_from() {
        let sim = prepare(boutique(2), InstanceTypes::Aws, "sandbox", &[], "").expect("prepares");
        // Every pod is provisionable and every NodePool usable, as in a live cluster.
        assert_eq!(sim.snapshot.provisionable_pods().len(), 24);
        let plan = plan::plan(
            &sim.snapshot,
            &sim.listings,
            &Settings {
                repack: true,
                ..Settings::default()
            },
        );
        assert!(plan.skipped.is_empty(), "{:?}", plan.skipped);
        assert!(plan.failures.is_empty(), "{:?}", plan.failures);
        // The report is the plan's: same NodeClaims, sizes of the objects sent on create.
        let report = simulate(&sim).expect("simulates");
        assert_eq!(report.pods.scheduled, 24);
        assert_eq!(report.nodeclaims.total, plan.nodeclaims.len());
        let mut sizes: Vec<usize> = plan
            .nodeclaims
            .iter()
            .map(|c| serde_json::to_vec(&c.nodeclaim).expect("serialises").len())
            .collect();
        sizes.sort_unstable();
        assert_eq!(report.nodeclaims.bytes_p99, sizes[sizes.len() - 1]);
        assert!(report.nodeclaims.bytes_p50 > 0);
        // The NodeClaims name their NodePool's UID, as ones created against an API server do.
        let owner = &plan.nodeclaims[0].nodeclaim.metadata.owner_references;
        assert_eq!(owner.as_ref().map(|o| o[0].uid.len()), Some(36));
        assert!(report.spot_prices_estimated);
        assert!(report.text().contains("spot: estimated"));
    }

    #[test]
    fn a_nodepool_without_its_node_class_is_a_clear_error() {
        let mut x = boutique(1);
        x.nodeclasses.clear();
        let err =
            prepare(x, InstanceTypes::Synthetic400, "sandbox", &[], "").expect_err("no class");
        assert!(
            err.to_string().contains(
                "references EC2NodeClass \"default\", which the workload does not define"
            ),
            "{err}"
        );
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let xs: Vec<usize> = (1..=100).collect();
        assert_eq!(quantile(&xs, 0.5), 50);
        assert_eq!(quantile(&xs, 0.99), 99);
        assert_eq!(quantile(&[7], 0.99), 7);
        assert_eq!(quantile(&[], 0.5), 0);
    }
}
