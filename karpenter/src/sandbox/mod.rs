//! `karpenter sandbox`: in one process, the in-memory API server, the simulated kube-scheduler,
//! kubelets and workload controllers, the simulated EC2 cloud, and the controller itself; applies
//! a workload, shows progress, and reports what was launched and what it costs; and the
//! subcommands that act on a running sandbox: `karpenter sandbox publish-ami` publishes a new
//! AMI release, `karpenter sandbox interrupt` rehearses an EC2 interruption of one of its nodes,
//! `karpenter sandbox fail-node` makes a node report a bad condition.

pub mod amirelease;
pub mod ebs_limits;
#[cfg(feature = "aws")]
pub mod ec2_kubelets;
pub mod fail_node;
pub mod interrupt;
pub mod interruption;
pub mod kube_scheduler;
pub mod kubelets;
pub mod publish;
pub mod rehearsal;
pub mod report;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use sandbox::actors::ActorConfig;
use sandbox::registry::TypeKey;
use sandbox::{Sandbox, Store};
use serde_json::Value;

pub use crate::ReportFormat;
use crate::workload::{self, Manifest, WorkloadArgs};
use controller::cloudprovider::CloudProvider;
use controller::cloudprovider::build::{self as cloud, CloudOptions};
use controller::cloudprovider::sim::SimCloud;
use controller::runtime::leader::{self, LeaseConfig};
use controller::runtime::options::{ControllerOptions, parse_duration};
use controller::runtime::{Context, Settings};
use karpenter_core::clock::{Clock, SystemClock};
use kube_scheduler::placer::KubeScheduler;
use report::{Observation, Report, RunningInstance, observe};

/// The interruption queue a sandbox on the simulated cloud has unless `--interruption-queue`
/// names another (`karpenter run` has none unless told): `karpenter sandbox interrupt` sends
/// its events there and the controller reads it.
pub const DEFAULT_INTERRUPTION_QUEUE: &str = "karpenter-sandbox";

/// Flags of `karpenter sandbox`.
#[derive(Args, Clone, Debug)]
#[command(mut_arg("interruption_queue", |a| a
    .default_value(DEFAULT_INTERRUPTION_QUEUE)
    .default_value_if("cloud_provider", "aws", Some(""))
    .help("The interruption queue (upstream's --interruption-queue): EventBridge's EC2 and \
        AWS Health events, read by the controller. On the simulated cloud (the default) the \
        sandbox has one called karpenter-sandbox, which `karpenter sandbox interrupt` sends \
        to; an empty value turns interruption handling off. With --cloud-provider aws, off \
        unless named")))]
pub struct SandboxArgs {
    /// The workload: `--workload FILE` (repeatable), `--scale`, `--max-pods`.
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Where to write the kubeconfig (default: a file in the system temp directory).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig_out: Option<PathBuf>,
    /// API server port on 127.0.0.1 (0 picks a free port).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Exit 0 once every pod is bound (or reported unschedulable by Karpenter) and every
    /// NodeClaim is initialized.
    #[arg(long)]
    pub until_settled: bool,
    /// With --until-settled, give up after this long and exit 1 listing what is pending.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Print a report on exit.
    #[arg(long, value_enum)]
    pub report: Option<ReportFormat>,
    /// How long after launch a simulated kubelet registers its node.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub registration_delay: Duration,
    /// Settings shared with `karpenter run`: cluster name, batch windows, timeouts, feature
    /// gates, log level.
    #[command(flatten)]
    pub controller: ControllerOptions,
    /// `--cloud-provider sim|aws` and its endpoints (default: the simulated cloud).
    #[command(flatten)]
    pub cloud: CloudOptions,
    /// Run no controller: only the API server, the actors (kube-scheduler, kubelets, workload
    /// controllers) and the cloud. Run `karpenter run` against the kubeconfig as a process of
    /// its own (or several, which elect a leader), so a crash or failover test can kill the
    /// controller without killing the cluster. Without it the sandbox's own controller takes
    /// part in the same leader election (Lease `kube-system/karpenter-leader-election`), so a
    /// `karpenter run` pointed at the sandbox stands by instead of fighting it.
    #[arg(long)]
    pub no_controller: bool,
    /// Inject API faults into clients' requests (comma-separated `key=value`: `all=<‰>` or a
    /// kind `conflict|too-many-requests|internal-error|slow|drop-watch|expired|lost-response=<‰>`,
    /// `seed=`, `budget=`, `slow-max-ms=`, `drop-watch-max-ms=`, `except-agent=<prefix>`,
    /// `only-agent=<prefix>`), e.g. `all=20,seed=7,budget=300,except-agent=kubectl`.
    #[arg(long, value_name = "SPEC", value_parser = sandbox::faults::FaultConfig::parse)]
    pub api_faults: Option<sandbox::faults::FaultConfig>,
    /// Inject faults into the simulated cloud (comma-separated `key=value`: `all=<‰>`,
    /// `throttle=`, `capacity=`, `slow-launch=` in ‰, `slow-launch-max-ms=`, `budget=`,
    /// `seed=`), e.g. `throttle=100,capacity=200,seed=7`.
    #[arg(long, value_name = "SPEC", value_parser = controller::cloudprovider::sim::faults::SimFaultConfig::parse)]
    pub cloud_faults: Option<controller::cloudprovider::sim::faults::SimFaultConfig>,
    /// Capacity reservations the simulated cloud holds: a YAML list in
    /// DescribeCapacityReservations' shape (`CapacityReservationId`, `InstanceType`,
    /// `AvailabilityZone`, `TotalInstanceCount`, `AvailableInstanceCount`,
    /// `InstanceMatchCriteria`, `ReservationType`, `EndDate`, `OwnerId`, `Tags`); an
    /// EC2NodeClass selects them with `capacityReservationSelectorTerms`.
    #[arg(long, value_name = "FILE")]
    pub capacity_reservations: Option<PathBuf>,
}

/// `karpenter sandbox [FLAGS]` starts a sandbox; `karpenter sandbox publish-ami ...` (or
/// `fail-node ...`) acts on a running one (the flags of the first and the subcommand exclude
/// each other).
#[derive(Args, Clone, Debug)]
pub struct SandboxCommand {
    /// What to do with a running sandbox, instead of starting one.
    #[command(subcommand)]
    pub action: Option<SandboxAction>,
    /// Flags of the sandbox to start.
    #[command(flatten)]
    pub start: SandboxArgs,
}

/// Subcommands of `karpenter sandbox`.
#[derive(Subcommand, Clone, Debug)]
pub enum SandboxAction {
    /// Publish a new AMI release into a running sandbox's simulated cloud (an AMIRelease object
    /// the sandbox fulfils) and print its images: `<family>@latest` aliases move to them.
    PublishAmi(publish::PublishAmiArgs),
    /// Rehearse an EC2 interruption of a running sandbox's node (an Interruption object the
    /// sandbox acts on): the event goes to the interruption queue and the instance does what
    /// EC2 would do to it.
    #[command(after_help = interrupt::INTERRUPT_HELP)]
    Interrupt(interrupt::InterruptArgs),
    /// Make a node's simulated kubelet report a bad condition (default Ready=False) and keep
    /// reporting it, to rehearse node repair; `--for 31m` dates the failure back, `--heal`
    /// ends it.
    FailNode(fail_node::FailNodeArgs),
}

/// A sandbox that cannot start or apply its workload.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A workload that cannot be used: unreadable, malformed, over the pod cap, or an object
    /// the API server refuses (the same errors as `karpenter simulate`).
    #[error(transparent)]
    Workload(#[from] workload::WorkloadError),
    /// `--until-settled` with a workload that creates no pod: nothing would ever settle.
    #[error(
        "nothing to run: the workload creates no pods (no Pod, and no Deployment, ReplicaSet, \
         StatefulSet or Job with replicas), so --until-settled would only wait out its --timeout"
    )]
    NothingToRun,
    /// The sandbox could not start: the API server, its kubeconfig, the CRDs or the cloud.
    #[error("{0}")]
    Startup(String),
}

/// The default NodePool and EC2NodeClass for workloads that bring none (see
/// [`workload::with_defaults`]; here for callers that start clusters from manifests).
pub use crate::workload::with_defaults;

/// Install Karpenter's CRDs and create the manifests, in order, as `karpenter simulate`'s
/// reader admits them.
fn apply(store: &Store, manifests: &[Manifest]) -> Result<(), SandboxError> {
    workload::install_crds(store).map_err(SandboxError::Startup)?;
    workload::create_all(store, manifests)?;
    Ok(())
}

fn read(store: &Store, group: &str, plural: &str) -> Vec<Arc<Value>> {
    let key = TypeKey {
        group: group.into(),
        plural: plural.into(),
    };
    store.objects(&key)
}

/// Every stored object of a type as the view `T` of it (the few fields the report reads),
/// decoded from the stored JSON outside the store's lock; an object the view cannot read is
/// skipped.
fn views<T: serde::de::DeserializeOwned>(store: &Store, group: &str, plural: &str) -> Vec<T> {
    let key = TypeKey {
        group: group.into(),
        plural: plural.into(),
    };
    store
        .snapshot_encoded(&key)
        .iter()
        .filter_map(|json| serde_json::from_slice(json).ok())
        .collect()
}

async fn observe_now(
    store: &Store,
    cloud: &dyn CloudProvider,
    sim: Option<&SimCloud>,
) -> Observation {
    let listed = match sim {
        // The simulated account is read directly: its API may be injecting faults into calls.
        Some(sim) => Ok(sim
            .instances()
            .into_iter()
            .map(|i| RunningInstance {
                instance_type: i.instance_type,
                capacity_type: i.capacity_type,
                price: i.price,
            })
            .collect()),
        None => cloud.list().await.map(|list| {
            list.into_iter()
                .map(|i| RunningInstance {
                    instance_type: i.instance_type,
                    capacity_type: i.capacity_type,
                    price: i.price,
                })
                .collect()
        }),
    };
    let instances: Vec<RunningInstance> = match listed {
        Ok(list) => list,
        Err(e) => {
            tracing::warn!(error = %e, "listing instances for the report");
            vec![]
        }
    };
    observe(
        &views(store, "", "pods"),
        &views(store, "", "events"),
        &read(store, "karpenter.sh", "nodeclaims"),
        &instances,
        // The simulated cloud estimates spot prices; EC2 quotes them.
        sim.is_some(),
    )
}

/// Run the sandbox command. Exit code: 0 settled (or stopped by Ctrl-C without
/// --until-settled), 1 not settled before the timeout, 2 bad input or startup failure.
pub async fn run(args: SandboxArgs) -> ExitCode {
    match run_inner(&args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// How long the sandbox's elected controller waits before it starts again as a standby after
/// it stopped leading.
const RESTART_DELAY: Duration = Duration::from_secs(1);

/// Everything a local cluster needs besides its workload.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// API server port (0 = any free port).
    pub port: u16,
    /// How long after an instance launches its simulated kubelet registers the Node
    /// (`--registration-delay`, default 3s).
    pub registration_delay: Duration,
    /// The controller's validated settings.
    pub settings: Settings,
    /// Where to write the kubeconfig (default: the system temp directory).
    pub kubeconfig: Option<PathBuf>,
    /// Which cloud the controller launches into.
    pub cloud: CloudOptions,
    /// The clock the whole cluster reads (API server, simulated cloud and kubelets,
    /// controller): the system clock, or a test's [`karpenter_core::clock::ShiftedClock`].
    pub clock: Arc<dyn Clock>,
    /// Start the controller with the cluster, without leader election (tests that stage a
    /// world by hand turn it off and start it later with [`LocalCluster::start_controller`];
    /// `karpenter sandbox` turns it off and starts an elected one with
    /// [`LocalCluster::start_elected_controller`]).
    pub controller: bool,
}

/// A running local cluster: API server and actors, simulated cloud, and the controller.
/// Dropping it stops everything.
pub struct LocalCluster {
    /// The API server and actors.
    pub sandbox: Sandbox,
    /// The cloud provider the controller launches into.
    pub cloud: Arc<dyn CloudProvider>,
    /// The simulated cloud, when the sandbox runs on it (the default).
    pub sim: Option<Arc<SimCloud>>,
    /// The context of the controller started last (its client stays usable after a stop).
    pub ctx: Arc<Context>,
    /// The kubeconfig written for clients.
    pub kubeconfig: PathBuf,
    /// Whether the kubeconfig is in the system temp directory by default (removed on drop).
    temporary_kubeconfig: bool,
    client: kube::Client,
    clock: Arc<dyn Clock>,
    /// The settings the next [`LocalCluster::start_controller`] uses (tests change them between
    /// restarts, e.g. the drift hash versions).
    pub settings: Settings,
    controller: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop_controller();
        // A kubeconfig the sandbox chose the place of goes with it (its token and port are
        // useless once the API server is gone); one written where the user asked stays.
        if self.temporary_kubeconfig {
            let _ = std::fs::remove_file(&self.kubeconfig);
        }
    }
}

impl LocalCluster {
    /// What the cluster looks like now (the instances of the simulated cloud are read directly,
    /// past any injected faults; another cloud is listed through its provider).
    pub async fn observe(&self) -> Observation {
        observe_now(
            self.sandbox.store(),
            self.cloud.as_ref(),
            self.sim.as_deref(),
        )
        .await
    }

    /// A client for the API server.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Stop the controller at once, as a killed process stops: its tasks are aborted wherever
    /// they are, and nothing it held in memory survives. The API server, actors and cloud keep
    /// running.
    pub fn stop_controller(&mut self) {
        for task in self.controller.drain(..) {
            task.abort();
        }
    }

    /// Start a fresh controller (new caches, new context) on `cloud`, stopping any running one
    /// first: a restart after [`LocalCluster::stop_controller`]. Tests pass a wrapper of
    /// [`LocalCluster::cloud`] to inject faults.
    pub fn start_controller(&mut self, cloud: Arc<dyn CloudProvider>) {
        self.start_controller_with(cloud, self.client());
    }

    /// Start the controller as one replica of the leader election on `lease`, stopping any
    /// running one first: its caches start at once, its controllers only once it holds the
    /// Lease, so it never acts beside a `karpenter run` that leads (issue 21's split brain).
    /// Whenever it loses the Lease it starts again as a standby, as upstream's pod restarts
    /// after its process exits. [`LocalCluster::ctx`] is the first replica's context.
    pub fn start_elected_controller(&mut self, lease: LeaseConfig) {
        self.stop_controller();
        let client = self.client();
        let (cloud, clock) = (Arc::clone(&self.cloud), Arc::clone(&self.clock));
        let settings = self.settings.clone();
        let replica = move || {
            let elector = leader::Elector::new(client.clone(), lease.clone());
            controller::operator::start_operator(
                client.clone(),
                Arc::clone(&cloud),
                Arc::clone(&clock),
                settings.clone(),
                Some(elector),
            )
        };
        let first = replica();
        self.ctx = Arc::clone(&first.ctx);
        self.controller.push(tokio::spawn(async move {
            let mut operator = first;
            loop {
                let stopped = operator.stopped().await;
                tracing::warn!(reason = ?stopped, "the sandbox's controller stopped; it restarts as a standby");
                // Stop every task of the old replica before the new one starts.
                drop(operator);
                // Not at once: a replica that fails as it starts would otherwise spin.
                tokio::time::sleep(RESTART_DELAY).await;
                operator = replica();
            }
        }));
    }

    /// [`LocalCluster::start_controller`] with the API client the controller uses (tests pass
    /// one with a fault-injecting layer).
    pub fn start_controller_with(&mut self, cloud: Arc<dyn CloudProvider>, client: kube::Client) {
        self.stop_controller();
        let (ctx, tasks) = controller::controllers::start(
            client,
            cloud,
            Arc::clone(&self.clock),
            self.settings.clone(),
        );
        self.ctx = ctx;
        self.controller = tasks;
    }
}

/// Start the API server, install the CRDs, apply `manifests`, and start the actors and the
/// controller on the cloud `cfg.cloud` names.
///
/// Errors: the port cannot be bound, the kubeconfig cannot be written, the cloud cannot be
/// built, or a manifest is refused.
pub async fn start_cluster(
    cfg: &ClusterConfig,
    manifests: &[Manifest],
) -> Result<LocalCluster, SandboxError> {
    let mut cloud_options = cfg.cloud.clone();
    cloud_options.reserved_capacity = cfg
        .settings
        .feature_gates
        .enabled(controller::runtime::options::FeatureGate::ReservedCapacity);
    let cloud_options = &cloud_options;
    start_cluster_with(cfg, manifests, |endpoint, clock| async move {
        cloud::build(
            cloud_options,
            &cfg.settings.cluster_name,
            &cloud::ApiServer {
                endpoint,
                ca_bundle: String::new(),
                joinable: true,
                kube_dns_ip: None,
            },
            &cloud::minor_version(sandbox::server::KUBERNETES_VERSION),
            clock,
        )
        .await
    })
    .await
}

/// [`start_cluster`] with a cloud the caller builds, given the API server URL nodes join and
/// the clock (tests use it to run the AWS provider with explicit credentials).
///
/// Errors: as [`start_cluster`].
pub async fn start_cluster_with<F, Fut>(
    cfg: &ClusterConfig,
    manifests: &[Manifest],
    make_cloud: F,
) -> Result<LocalCluster, SandboxError>
where
    F: FnOnce(String, Arc<dyn Clock>) -> Fut,
    Fut: std::future::Future<Output = Result<cloud::Cloud, String>>,
{
    let clock = Arc::clone(&cfg.clock);
    let now = Arc::clone(&clock);
    let store = sandbox::Store::with_clock(Arc::new(move || now.now()));
    let mut sb = Sandbox::start_with(store, cfg.port)
        .await
        .map_err(|e| SandboxError::Startup(format!("starting the API server: {e}")))?;
    let kubeconfig = cfg.kubeconfig.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("karpenter-sandbox-{}.kubeconfig", sb.addr().port()))
    });
    let built = make_cloud(sb.url(), Arc::clone(&clock))
        .await
        .map_err(SandboxError::Startup)?;
    if let Some(sim) = &built.sim {
        let releases = amirelease::start(sb.store(), Arc::clone(sim), Arc::clone(&clock))
            .map_err(|e| SandboxError::Startup(format!("installing the AMIRelease CRD: {e}")))?;
        sb.adopt(releases);
        let interruptions = interruption::start(sb.store(), Arc::clone(sim), Arc::clone(&clock))
            .map_err(|e| SandboxError::Startup(format!("installing the Interruption CRD: {e}")))?;
        sb.adopt(interruptions);
    }
    apply(sb.store(), manifests)?;
    let actors = ActorConfig {
        registration_delay: cfg.registration_delay,
        ebs_attach_limit: ebs_limits::attach_limit,
        ..ActorConfig::default()
    };
    let instances = kubelets::for_cloud(&built).map_err(SandboxError::Startup)?;
    // One placer: the scheduler places pods with it and the DaemonSet controller asks it which
    // nodes a DaemonSet's pods belong on.
    let placer = Arc::new(KubeScheduler::new());
    for task in sandbox::actors::spawn_all(sb.store(), &actors, placer.clone(), instances) {
        sb.adopt(task);
    }
    sb.adopt(tokio::spawn(kube_scheduler::run(
        Arc::clone(sb.store()),
        placer,
    )));
    let client = controller::runtime::client(sb.client_config())
        .map_err(|e| SandboxError::Startup(format!("kube client: {e}")))?;
    // Written last, once nothing can fail any more: a kubeconfig in the temp directory is removed
    // with the LocalCluster, and a start that fails earlier must not leave one (with its token)
    // behind. Clients that wait for the file find a cluster with its workload applied.
    sb.write_kubeconfig(&kubeconfig)
        .map_err(|e| SandboxError::Startup(format!("writing {}: {e}", kubeconfig.display())))?;
    let (ctx, tasks) = if cfg.controller {
        controller::controllers::start(
            client.clone(),
            Arc::clone(&built.provider),
            Arc::clone(&clock),
            cfg.settings.clone(),
        )
    } else {
        // A context for callers to read (its caches stopped at once), and no controller.
        let (ctx, watches) = controller::controllers::start_caches(
            client.clone(),
            Arc::clone(&built.provider),
            Arc::clone(&clock),
            cfg.settings.clone(),
        );
        watches.iter().for_each(tokio::task::JoinHandle::abort);
        (ctx, Vec::new())
    };
    let cluster = LocalCluster {
        sandbox: sb,
        cloud: built.provider,
        sim: built.sim,
        ctx,
        kubeconfig,
        temporary_kubeconfig: cfg.kubeconfig.is_none(),
        client,
        clock,
        settings: cfg.settings.clone(),
        controller: tasks,
    };
    Ok(cluster)
}

async fn run_inner(args: &SandboxArgs) -> Result<ExitCode, SandboxError> {
    let settings = args
        .controller
        .settings()
        .map_err(|e| SandboxError::Startup(e.to_string()))?;
    let workload = args.workload.read(args.controller.cluster_name(), None)?;
    if args.until_settled && workload.pods == 0 {
        return Err(SandboxError::NothingToRun);
    }
    let manifests = workload.manifests;
    // kubectl would apply such a pool too; say now why its pods will wait, not after minutes.
    for (pool, class) in crate::workload::missing_node_classes(&manifests) {
        eprintln!(
            "warning: NodePool {pool:?} references EC2NodeClass {class:?}, which the workload \
             does not define; it launches nothing until one is applied"
        );
    }
    let mut cloud = args.cloud.clone();
    if let Some(path) = &args.capacity_reservations {
        cloud.capacity_reservations =
            crate::simulate::read_reservations(path).map_err(SandboxError::Startup)?;
    }
    let cfg = ClusterConfig {
        port: args.port,
        registration_delay: args.registration_delay,
        settings,
        kubeconfig: args.kubeconfig_out.clone(),
        cloud,
        clock: Arc::new(SystemClock),
        controller: false,
    };
    let mut cluster = start_cluster(&cfg, &manifests).await?;
    if !args.no_controller {
        let identity = format!("sandbox_{}", leader::default_identity());
        cluster.start_elected_controller(LeaseConfig::new(
            leader::DEFAULT_LEASE_NAME,
            leader::DEFAULT_LEASE_NAMESPACE,
            &identity,
        ));
    }
    if let Some(faults) = &args.api_faults {
        cluster.sandbox.faults().configure(faults.clone());
        cluster.sandbox.faults().enable();
    }
    if let Some(faults) = &args.cloud_faults {
        let sim = cluster.sim.as_ref().ok_or_else(|| {
            SandboxError::Startup("--cloud-faults needs the simulated cloud".into())
        })?;
        sim.faults().configure(faults.clone());
        sim.faults().enable();
    }
    eprintln!(
        "karpenter sandbox: API server at {}; kubeconfig written to {}",
        cluster.sandbox.url(),
        cluster.kubeconfig.display()
    );
    eprintln!("  export KUBECONFIG={}", cluster.kubeconfig.display());
    let (settled, elapsed, last) = watch_progress(args, &cluster).await;
    if args.api_faults.is_some() {
        eprintln!("{}", cluster.sandbox.faults().counts());
    }
    if let (Some(_), Some(sim)) = (&args.cloud_faults, &cluster.sim) {
        eprintln!("{}", sim.faults().counts());
    }
    if let Some(format) = args.report {
        let report = Report::new(
            &last,
            elapsed.as_secs_f64(),
            settled,
            claim_writes(&cluster.sandbox),
        );
        match format {
            ReportFormat::Json => println!(
                "{}",
                serde_json::to_string_pretty(&report).unwrap_or_default()
            ),
            ReportFormat::Text => print!("{}", report.text()),
        }
    }
    if args.until_settled && !settled {
        eprintln!("error: not settled after {:?}", args.timeout);
        for p in last.pending.iter().take(20) {
            eprintln!("  pending {}: {}", p.name, p.reason);
        }
        if last.claims_total > last.claims_initialized {
            eprintln!(
                "  {} of {} nodeclaims not initialized",
                last.claims_total - last.claims_initialized,
                last.claims_total
            );
        }
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// Show progress until settled (with --until-settled), the timeout, or Ctrl-C. Returns whether
/// it settled, when, and the last observation.
async fn watch_progress(
    args: &SandboxArgs,
    cluster: &LocalCluster,
) -> (bool, Duration, Observation) {
    let start = Instant::now();
    let tty = std::io::stderr().is_terminal();
    let mut last_line = Instant::now();
    let mut stable = 0;
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        let o = cluster.observe().await;
        let elapsed = start.elapsed();
        let line = o.progress_line(elapsed.as_secs());
        if tty {
            let mut err = std::io::stderr();
            let _ = crossterm::execute!(
                err,
                crossterm::cursor::MoveToColumn(0),
                crossterm::terminal::Clear(crossterm::terminal::ClearType::CurrentLine)
            );
            let _ = write!(err, "{line}");
            let _ = err.flush();
        } else if last_line.elapsed() >= Duration::from_secs(5) {
            eprintln!("{line}");
            last_line = Instant::now();
        }
        stable = if o.settled() && o.pods_total > 0 {
            stable + 1
        } else {
            0
        };
        if args.until_settled && stable >= 3 {
            if tty {
                eprintln!();
            }
            return (true, elapsed.saturating_sub(Duration::from_secs(2)), o);
        }
        if args.until_settled && elapsed >= args.timeout {
            if tty {
                eprintln!();
            }
            return (false, elapsed, o);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = &mut ctrl_c => {
                if tty {
                    eprintln!();
                }
                return (o.settled(), elapsed, o);
            }
        }
    }
}

/// The controller's API writes per initialized NodeClaim, from the sandbox's audit log.
fn claim_writes(sandbox: &sandbox::Sandbox) -> report::ClaimWrites {
    let store = sandbox.store();
    let claims: Vec<(String, Option<String>)> = store
        .resource("karpenter.sh", "v1", "nodeclaims")
        .map(|rt| {
            store
                .list(&rt, None, &Default::default(), &Default::default())
                .items
        })
        .unwrap_or_default()
        .iter()
        .filter(|c| {
            c["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["type"] == "Initialized" && k["status"] == "True")
        })
        .filter_map(|c| {
            let name = c["metadata"]["name"].as_str()?.to_owned();
            let node = c["status"]["nodeName"].as_str().map(str::to_owned);
            Some((name, node))
        })
        .collect();
    report::ClaimWrites::count(&sandbox.audit(), controller::runtime::USER_AGENT, &claims)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use controller::cloudprovider::sim::faults::SimFaultConfig;
    use sandbox::faults::{FaultConfig, FaultKind};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SandboxArgs,
    }

    #[test]
    fn fault_flags_parse_into_configs_and_bad_specs_are_refused() {
        let cli = Cli::try_parse_from([
            "sandbox",
            "--api-faults",
            "all=20,slow=50,seed=7",
            "--cloud-faults",
            "capacity=200,seed=3",
        ])
        .expect("flags parse");
        let api = cli.args.api_faults.expect("api faults");
        assert_eq!(api.rate(FaultKind::Conflict), 20);
        assert_eq!(api.rate(FaultKind::Slow), 50);
        assert_eq!(api.seed, 7);
        let cloud = cli.args.cloud_faults.expect("cloud faults");
        assert_eq!(
            cloud,
            SimFaultConfig::parse("capacity=200,seed=3").expect("spec")
        );
        assert!(Cli::try_parse_from(["sandbox", "--api-faults", "conflict=2000"]).is_err());
        assert!(Cli::try_parse_from(["sandbox", "--cloud-faults", "quota=1"]).is_err());
        let none = Cli::try_parse_from(["sandbox"]).expect("no faults");
        assert_eq!(none.args.api_faults, None::<FaultConfig>);
    }

    #[test]
    fn the_sandbox_has_an_interruption_queue_unless_told_otherwise() {
        let queue = |argv: &[&str]| {
            let mut all = vec!["sandbox"];
            all.extend_from_slice(argv);
            Cli::try_parse_from(all)
                .expect("flags parse")
                .args
                .cloud
                .interruption_queue
        };
        assert_eq!(queue(&[]), DEFAULT_INTERRUPTION_QUEUE);
        assert_eq!(queue(&["--interruption-queue", ""]), "");
        assert_eq!(queue(&["--interruption-queue", "q"]), "q");
        assert_eq!(
            queue(&["--cloud-provider", "aws"]),
            "",
            "a real account's queue must be named"
        );
        let mut cmd = <Cli as clap::CommandFactory>::command();
        let help = cmd.render_long_help().to_string();
        assert!(help.contains("karpenter sandbox interrupt"), "{help}");
    }
}
