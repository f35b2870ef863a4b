//! `karpenter simulate`: what Karpenter would launch for a workload, without a cluster. Workloads
//! (YAML or Alibaba trace CSV, as for the sandbox) or a generated benchmark mix are expanded into
//! pods, solved against the real EC2 catalog or upstream's synthetic one, and reported with the
//! fleet's cost next to a lower bound on any fleet's cost.

pub mod bound;
pub mod diverse;
pub mod expand;
pub mod synthetic;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, ValueEnum};
use crds::labels::WELL_KNOWN_LABELS;
use serde::Serialize;

use self::bound::{Candidate, lower_bound};
use self::expand::Expanded;
use crate::sandbox::{ReportFormat, with_defaults};
use crate::workload::{self, ONLINE_BOUTIQUE};
use controller::cloudprovider::sim::network::SimNetwork;
use karpenter_core::capacity::InstanceType;
use karpenter_core::capacity::catalog::Catalog;
use karpenter_core::provisioning::template;
use karpenter_core::scheduling::pod::PodInfo;
use karpenter_core::scheduling::solver::{self, Input, NodePoolTemplate};

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
    /// A workload: multi-document Kubernetes YAML or an Alibaba openb_pod_list CSV. Repeatable.
    /// Without one (and without --generate), the bundled Online Boutique is used.
    #[arg(long = "workload", value_name = "FILE")]
    pub workloads: Vec<PathBuf>,
    /// Generate upstream's benchmark mix, e.g. `diverse:20000`.
    #[arg(long, value_name = "diverse:N", value_parser = parse_generate)]
    pub generate: Option<usize>,
    /// Instance types to choose from.
    #[arg(long, value_enum, default_value = "aws")]
    pub instance_types: InstanceTypes,
    /// Multiply the replicas of every Deployment, ReplicaSet and StatefulSet.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub scale: u32,
    /// Report format (the JSON document is the only thing on stdout).
    #[arg(long, value_enum, default_value = "text")]
    pub report: ReportFormat,
    /// Cluster name the default EC2NodeClass discovers subnets by.
    #[arg(long, env = "CLUSTER_NAME", default_value = "sandbox")]
    pub cluster_name: String,
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
}

/// The simulate report.
#[derive(Clone, Debug, Serialize)]
pub struct SimulateReport {
    /// `aws` or `synthetic-400`.
    pub instance_types: String,
    /// Pods: total, scheduled, and those that fit nowhere.
    pub pods: PodCounts,
    /// NodeClaims: how many, and by instance type.
    pub nodeclaims: ClaimCounts,
    /// Sum of each NodeClaim's cheapest offering, USD/hour.
    pub cost_per_hour_usd: f64,
    /// A lower bound on the cost of any fleet holding the scheduled pods (see `bound`), USD/hour.
    pub lower_bound_cost_per_hour_usd: f64,
    /// `cost_per_hour_usd / lower_bound_cost_per_hour_usd`.
    pub cost_over_bound: f64,
    /// Seconds spent in the solve alone.
    pub solve_seconds: f64,
}

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// A workload file that cannot be read or parsed.
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

/// A NodePool with the instance types it may launch.
type PoolTypes = (Arc<crds::NodePool>, Vec<Arc<InstanceType>>);

/// Instance types per NodePool: the real catalog in the pool's node-class zones, or synthetic.
fn pool_types(
    x: &Expanded,
    choice: InstanceTypes,
    cluster: &str,
) -> Result<Vec<PoolTypes>, SimulateError> {
    let synthetic =
        matches!(choice, InstanceTypes::Synthetic400).then(|| synthetic::instance_types(400));
    let catalog = match choice {
        InstanceTypes::Aws => {
            Some(Catalog::embedded().map_err(|e| SimulateError::Manifest(e.to_string()))?)
        }
        InstanceTypes::Synthetic400 => None,
    };
    let network = SimNetwork::new(cluster);
    let mut out = Vec::new();
    for pool in &x.nodepools {
        if let Err(msg) = karpenter_core::provisioning::template::validate(pool) {
            return Err(SimulateError::Manifest(format!(
                "NodePool {:?} is invalid: {msg}",
                pool.metadata.name.as_deref().unwrap_or("")
            )));
        }
        let types = match (&synthetic, &catalog) {
            (Some(s), _) => s.clone(),
            (None, Some(c)) => {
                let class_name = &pool.spec.template.spec.node_class_ref.name;
                let class = x.nodeclasses.iter().find(|nc| nc.metadata.name.as_deref() == Some(class_name.as_str())).ok_or_else(|| {
                    SimulateError::Manifest(format!("NodePool {:?} references EC2NodeClass {class_name:?}, which the workload does not define", pool.metadata.name.as_deref().unwrap_or("")))
                })?;
                let resolved = network.resolve(cluster, class);
                if let Some((_, reason, message)) = resolved.not_ready {
                    return Err(SimulateError::Manifest(format!(
                        "EC2NodeClass {class_name:?} is not ready: {reason}: {message}"
                    )));
                }
                let zones: BTreeSet<String> = resolved
                    .status
                    .subnets
                    .iter()
                    .map(|s| s.zone.clone())
                    .collect();
                c.instance_types(&zones, |_, _, _| false)
            }
            (None, None) => Vec::new(),
        };
        out.push((Arc::clone(pool), types));
    }
    Ok(out)
}

/// Build the solver input from expanded manifests.
///
/// Errors: invalid NodePools or node classes.
pub fn prepare(
    x: &Expanded,
    choice: InstanceTypes,
    cluster: &str,
) -> Result<(Input, Vec<Candidate>), SimulateError> {
    let allow = |k: &str| WELL_KNOWN_LABELS.contains(&k);
    let mut templates: Vec<NodePoolTemplate> = Vec::new();
    let mut candidates = Vec::new();
    for (pool, types) in pool_types(x, choice, cluster)? {
        let reqs = template::pool_requirements(&pool)
            .map_err(|e| SimulateError::Manifest(e.to_string()))?;
        let overhead = template::daemon_overhead(&reqs, &pool, &x.daemonsets, &allow);
        let remaining = template::remaining_limits(&pool, &Default::default(), 0);
        candidates.extend(types.iter().map(|t| Candidate {
            instance_type: Arc::clone(t),
            requirements: reqs.clone(),
        }));
        templates.push(template::template(&pool, reqs, &types, overhead, remaining));
    }
    let mut pods = Vec::with_capacity(x.pods.len());
    for p in &x.pods {
        let info = PodInfo::from_pod(p).map_err(|e| {
            SimulateError::Manifest(format!(
                "pod {}: {e}",
                p.metadata.name.as_deref().unwrap_or("")
            ))
        })?;
        pods.push(info);
    }
    let input = Input {
        pods,
        nodepools: templates,
        well_known_labels: WELL_KNOWN_LABELS.iter().map(|s| s.to_string()).collect(),
        namespaces: x.namespaces.clone(),
        repack: true,
        ..Input::default()
    };
    Ok((input, candidates))
}

/// Solve and report.
///
/// Errors: a lower bound cannot be computed.
pub fn simulate(
    input: &Input,
    candidates: &[Candidate],
    choice: InstanceTypes,
) -> Result<SimulateReport, SimulateError> {
    let start = Instant::now();
    let out = solver::solve(input);
    let solve_seconds = start.elapsed().as_secs_f64();
    let failed: BTreeSet<(String, String)> = out
        .errors
        .iter()
        .map(|e| (e.pod.namespace.clone(), e.pod.name.clone()))
        .collect();
    let scheduled: Vec<&PodInfo> = input
        .pods
        .iter()
        .filter(|p| !failed.contains(&(p.key.namespace.clone(), p.key.name.clone())))
        .collect();
    let mut by_type: BTreeMap<String, usize> = BTreeMap::new();
    let mut cost = 0.0;
    for c in &out.new_claims {
        if let Some(t) = c.instance_types.first() {
            *by_type.entry(t.name.clone()).or_default() += 1;
        }
        cost += c.cheapest_price().unwrap_or(0.0);
    }
    let bound = if scheduled.is_empty() {
        0.0
    } else {
        lower_bound(&scheduled, candidates)?
    };
    let round = |x: f64| (x * 10_000.0).round() / 10_000.0;
    Ok(SimulateReport {
        instance_types: match choice {
            InstanceTypes::Aws => "aws".into(),
            InstanceTypes::Synthetic400 => "synthetic-400".into(),
        },
        pods: PodCounts {
            total: input.pods.len(),
            scheduled: scheduled.len(),
            unschedulable: out
                .errors
                .iter()
                .map(|e| Unscheduled {
                    name: e.pod.to_string(),
                    reason: e.to_string(),
                })
                .collect(),
        },
        nodeclaims: ClaimCounts {
            total: out.new_claims.len(),
            by_instance_type: by_type,
        },
        cost_per_hour_usd: round(cost),
        lower_bound_cost_per_hour_usd: round(bound),
        cost_over_bound: if bound > 0.0 {
            (cost / bound * 10_000.0).round() / 10_000.0
        } else {
            0.0
        },
        solve_seconds: (solve_seconds * 1_000_000.0).round() / 1_000_000.0,
    })
}

impl SimulateReport {
    /// The report as text: pods scheduled, NodeClaims, cost per hour against the lower bound,
    /// solve time, the 15 commonest instance types and up to 10 unscheduled pods.
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(s, "Instance types: {}", self.instance_types);
        let _ = writeln!(
            s,
            "Pods: {} scheduled of {}",
            self.pods.scheduled, self.pods.total
        );
        let _ = writeln!(s, "NodeClaims: {}", self.nodeclaims.total);
        let _ = writeln!(
            s,
            "Cost: ${:.4}/hour; lower bound ${:.4}/hour (x{:.3})",
            self.cost_per_hour_usd, self.lower_bound_cost_per_hour_usd, self.cost_over_bound
        );
        let _ = writeln!(s, "Solve: {:.3}s", self.solve_seconds);
        let mut types: Vec<(&String, &usize)> = self.nodeclaims.by_instance_type.iter().collect();
        types.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (t, n) in types.iter().take(15) {
            let _ = writeln!(s, "  {n:>6}  {t}");
        }
        for u in self.pods.unschedulable.iter().take(10) {
            let _ = writeln!(s, "  unschedulable {}: {}", u.name, u.reason);
        }
        s
    }
}

/// Run the command. Exit codes: 0 ok, 2 bad input.
pub fn run(args: &SimulateArgs) -> ExitCode {
    match run_inner(args) {
        Ok(report) => {
            match args.report {
                ReportFormat::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                ),
                ReportFormat::Text => print!("{}", report.text()),
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_inner(args: &SimulateArgs) -> Result<SimulateReport, SimulateError> {
    let (input, candidates) = build(args)?;
    simulate(&input, &candidates, args.instance_types)
}

/// The solver input and lower-bound candidates for the command's arguments (`report` is not
/// used): workloads expanded (the bundled Online Boutique when none is given and nothing is
/// generated), scaled, defaulted with a NodePool and node class, plus the generated mix. The
/// API objects are dropped before returning (only the compiled pods are kept).
///
/// Errors: unreadable or invalid workloads, invalid NodePools or node classes.
pub fn build(args: &SimulateArgs) -> Result<(Input, Vec<Candidate>), SimulateError> {
    let mut manifests = Vec::new();
    for path in &args.workloads {
        manifests.extend(workload::load(path)?);
    }
    if args.workloads.is_empty() && args.generate.is_none() {
        manifests.extend(workload::parse_yaml(
            &PathBuf::from("<bundled online-boutique.yaml>"),
            ONLINE_BOUTIQUE,
        )?);
    }
    workload::scale(&mut manifests, args.scale);
    let manifests = with_defaults(manifests, &args.cluster_name)
        .map_err(|e| SimulateError::Manifest(e.to_string()))?;
    let mut expanded = expand::expand(&manifests)?;
    if let Some(n) = args.generate {
        expanded.pods.extend(diverse::diverse_pods(n));
    }
    prepare(&expanded, args.instance_types, &args.cluster_name)
}
