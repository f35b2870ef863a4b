//! Controller settings: every flag also reads the environment variable upstream Karpenter uses
//! (`BATCH_IDLE_DURATION`, `CLUSTER_NAME`, `FEATURE_GATES`, `METRICS_PORT`, ...), validated once
//! into [`Settings`] (what the controllers read) and, for `karpenter run`, [`RunSettings`] (the
//! process around them: API client limits, HTTP ports, logs, leader election).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use clap::{Args, ValueEnum};

pub use super::feature_gates::{FeatureGate, FeatureGates};
pub use karpenter_core::scheduling::choices::MinValuesPolicy;

/// Parse a Go-style duration such as `1s`, `10s`, `5m` or `1h30m`.
///
/// Errors: not a Go duration, or negative.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d: kube::core::Duration = s
        .parse()
        .map_err(|e| format!("invalid duration {s:?}: {e}"))?;
    if d.is_negative() {
        return Err(format!("invalid duration {s:?}: must not be negative"));
    }
    Ok(d.into())
}

/// Parse a boolean as Go's `strconv.ParseBool` does (upstream reads its boolean environment
/// variables with it): `1`, `t`, `T`, `TRUE`, `true`, `True` and `0`, `f`, `F`, `FALSE`,
/// `false`, `False`.
///
/// Errors: any other spelling.
pub fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "invalid boolean {s:?}: use one of 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False"
        )),
    }
}

/// Flags shared by `karpenter run` and `karpenter sandbox`.
#[derive(Args, Clone, Debug)]
pub struct ControllerOptions {
    /// Name of the cluster; tags instances and is matched by discovery tags. Required by
    /// `karpenter run` (as upstream requires it); the sandbox defaults it to `sandbox`.
    #[arg(long, env = "CLUSTER_NAME")]
    pub cluster_name: Option<String>,
    /// How long the provisioner waits without new pending pods before it solves a batch.
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = "1s", value_parser = parse_duration)]
    pub batch_idle_duration: Duration,
    /// The longest a batch window stays open while pods keep arriving.
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = "10s", value_parser = parse_duration)]
    pub batch_max_duration: Duration,
    /// A NodeClaim not launched this long after creation is deleted.
    #[arg(long, env = "LAUNCH_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    pub launch_timeout: Duration,
    /// A launched NodeClaim whose node has not registered this long is deleted.
    #[arg(long, env = "REGISTRATION_TTL", default_value = "15m", value_parser = parse_duration)]
    pub registration_ttl: Duration,
    /// A Node labelled `karpenter.sh/nodepool` that no NodeClaim owns is reported at once and
    /// deleted (its instance terminated) after this long.
    #[arg(long, env = "ORPHANED_NODE_GRACE", default_value = "2m", value_parser = parse_duration)]
    pub orphaned_node_grace: Duration,
    /// An upgrade step whose replacement NodeClaim has not initialized this long after the step
    /// started is rolled back (the replacement deleted) and the NodePool's rollout paused.
    #[arg(long, env = "UPGRADE_INITIALIZATION_TIMEOUT", default_value = "10m", value_parser = parse_duration)]
    pub upgrade_initialization_timeout: Duration,
    /// Feature gates as upstream writes them: `Name=true,Other=false`. Known gates:
    /// SpotToSpotConsolidation, NodeRepair, ReservedCapacity, StaticCapacity, NodeOverlay,
    /// CapacityBuffer; the ones not named keep upstream's defaults.
    #[arg(long, env = "FEATURE_GATES", default_value = "")]
    pub feature_gates: String,
    /// How `minValues` is enforced when the instance types that fit cannot meet it: `Strict`
    /// leaves the pod pending; `BestEffort` lowers it to what they offer and annotates the
    /// NodeClaim `karpenter.sh/nodeclaim-min-values-relaxed: "true"` (upstream v1.6).
    #[arg(long, env = "MIN_VALUES_POLICY", default_value = "Strict",
          value_parser = parse_min_values_policy)]
    pub min_values_policy: MinValuesPolicy,
    /// Run the cost re-pack after first fit in every provisioning pass (as `karpenter simulate`
    /// does), so the fleet launched is the cheapest the solver finds (default on; measured on the
    /// 6,282-pod trace in BENCHMARKS.md, "Live vs plan"). `false` launches first fit's
    /// NodeClaims. Not an upstream setting.
    #[arg(long, env = "COST_REPACK", num_args = 0..=1, default_value = "true",
          default_missing_value = "true", value_parser = parse_go_bool)]
    pub cost_repack: bool,
    /// Plan = binding: nominate the pods planned onto a NodeClaim to its node when it registers
    /// (`status.nominatedNodeName`, KEP-5278) and take back nominations the plan no longer
    /// holds (default on; without it kube-scheduler binds pods wherever they fit first and the
    /// live fleet drifts from the plan). Needs `patch` on `pods/status`. Not an upstream setting.
    #[arg(long, env = "NOMINATE_PLANNED_PODS", num_args = 0..=1, default_value = "true",
          default_missing_value = "true", value_parser = parse_go_bool)]
    pub nominate_planned_pods: bool,
    /// Log level filter (`error`, `warn`, `info`, `debug`, or a tracing filter).
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// CPU requests of the controller's container, in millicores: controllers scale their
    /// concurrent reconciles with it as upstream does (`LinearScaleReconciles`: the minimum at 1
    /// core, the maximum at 60).
    #[arg(long, env = "CPU_REQUESTS", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub cpu_requests: u32,
}

/// Parse `MIN_VALUES_POLICY` (`Strict` or `BestEffort`, case-sensitive as upstream's).
///
/// Errors: any other value, naming the variable and the accepted values.
pub fn parse_min_values_policy(s: &str) -> Result<MinValuesPolicy, String> {
    s.parse()
}

/// Validated settings the controllers read.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The cluster's name (`CLUSTER_NAME`): instances are tagged
    /// `kubernetes.io/cluster/<name>` with it and discovery matches it.
    pub cluster_name: String,
    /// A provisioning batch closes after this long without a new pending pod
    /// (`BATCH_IDLE_DURATION`, 1s).
    pub batch_idle: Duration,
    /// A provisioning batch closes after this long in all (`BATCH_MAX_DURATION`, 10s).
    pub batch_max: Duration,
    /// A NodeClaim not launched this long after its creation is deleted (`LAUNCH_TIMEOUT`, 5m).
    pub launch_timeout: Duration,
    /// A launched NodeClaim whose node has not registered this long after launch is deleted
    /// (`REGISTRATION_TTL`, 15m).
    pub registration_ttl: Duration,
    /// How long a Node without a NodeClaim is reported before it is deleted.
    pub orphaned_node_grace: Duration,
    /// The drift hash versions stamped and compared (this project's current ones; not a flag:
    /// tests change them to prove a version change re-stamps instead of drifting).
    pub hash_versions: karpenter_core::lifecycle::drift::HashVersions,
    /// How long an upgrade step waits for its replacement to initialize before it rolls back.
    pub upgrade_initialization_timeout: Duration,
    /// How often consolidation looks for a command (upstream: 10s). Not a flag: tests shorten it.
    pub disruption_poll: Duration,
    /// How long a consolidation decision waits before it is decided again and carried out
    /// (upstream: 15s). Not a flag: tests shorten it.
    pub consolidation_validation_delay: Duration,
    /// The gates `FEATURE_GATES` names; every other gate keeps upstream's default (only
    /// `ReservedCapacity` is on).
    pub feature_gates: FeatureGates,
    /// Whether provisioning runs the cost re-pack after first fit (`COST_REPACK`, default on).
    pub cost_repack: bool,
    /// `MIN_VALUES_POLICY` (default `Strict`): what provisioning and consolidation's
    /// replacements do with a `minValues` the fitting instance types cannot meet.
    pub min_values_policy: MinValuesPolicy,
    /// Whether planned pods are nominated to their NodeClaim's node (`NOMINATE_PLANNED_PODS`,
    /// default on).
    pub nominate_planned_pods: bool,
    /// The namespace of the disruption history ConfigMap (`crds::history::CONFIGMAP_NAME`):
    /// `karpenter run` sets the leader Lease's namespace ([`RunSettings::namespace`]); default
    /// `kube-system`. Not a flag of its own.
    pub system_namespace: String,
    /// The controller container's CPU requests in millicores (`CPU_REQUESTS`, default 1000):
    /// the concurrency of launches and NodeClaim creates scales with it
    /// ([`crate::runtime::reconcile::linear_scale_reconciles`]).
    pub cpu_requests: u32,
}

impl Settings {
    /// The launch timeout and registration TTL as liveness checks them.
    pub fn liveness_timeouts(&self) -> karpenter_core::lifecycle::liveness::Timeouts {
        karpenter_core::lifecycle::liveness::Timeouts {
            launch: self.launch_timeout,
            registration: self.registration_ttl,
        }
    }
}

impl Default for Settings {
    /// The flags' defaults: upstream's timings (batch idle 1s, max 10s, launch timeout 5m,
    /// registration TTL 15m), an orphaned-node grace period of 2m (ours), cluster `sandbox`,
    /// upstream's default feature gates.
    fn default() -> Self {
        Settings {
            cluster_name: "sandbox".into(),
            batch_idle: Duration::from_secs(1),
            batch_max: Duration::from_secs(10),
            launch_timeout: Duration::from_secs(300),
            registration_ttl: Duration::from_secs(900),
            orphaned_node_grace: Duration::from_secs(120),
            hash_versions: Default::default(),
            upgrade_initialization_timeout: Duration::from_secs(600),
            disruption_poll: Duration::from_secs(10),
            consolidation_validation_delay: Duration::from_secs(15),
            feature_gates: FeatureGates::default(),
            cost_repack: true,
            min_values_policy: MinValuesPolicy::Strict,
            nominate_planned_pods: true,
            system_namespace: "kube-system".into(),
            cpu_requests: 1000,
        }
    }
}

/// Invalid settings. Each message names the flag and its environment variable and shows the
/// value that was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    /// The maximum batch window is shorter than the idle window.
    #[error(
        "--batch-max-duration/BATCH_MAX_DURATION ({max:?}) must not be shorter than \
         --batch-idle-duration/BATCH_IDLE_DURATION ({idle:?})"
    )]
    BatchWindows {
        /// `--batch-idle-duration` as given.
        idle: Duration,
        /// `--batch-max-duration` as given, shorter than `idle`.
        max: Duration,
    },
    /// The cluster name is empty.
    #[error("--cluster-name/CLUSTER_NAME must not be empty")]
    ClusterName,
    /// `FEATURE_GATES` does not parse.
    #[error("--feature-gates/FEATURE_GATES ({value:?}): {reason}")]
    FeatureGates {
        /// The `FEATURE_GATES` string as given, e.g. `NodeRepair=maybe`.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Two servers on one port.
    #[error(
        "--metrics-port/METRICS_PORT ({0}) and --health-probe-port/HEALTH_PROBE_PORT ({0}) must differ"
    )]
    SamePort(u16),
    /// A duration that must be positive is zero.
    #[error("{flag} ({value:?}) must be longer than zero")]
    Zero {
        /// `--flag/ENV_VAR`.
        flag: &'static str,
        /// The value given (zero).
        value: Duration,
    },
    /// Leader election timings out of order.
    #[error("{longer} ({longer_value:?}) must be longer than {shorter} ({shorter_value:?})")]
    Order {
        /// `--flag/ENV_VAR` that must be the longer.
        longer: &'static str,
        /// The value given for `longer`.
        longer_value: Duration,
        /// `--flag/ENV_VAR` that must be the shorter.
        shorter: &'static str,
        /// The value given for `shorter`.
        shorter_value: Duration,
    },
    /// `LOG_LEVEL` is not a level or a tracing filter directive.
    #[error("--log-level/LOG_LEVEL ({value:?}) is not a log level or filter: {reason}")]
    LogLevel {
        /// The `LOG_LEVEL` string as given.
        value: String,
        /// Why tracing's filter parser refused it.
        reason: String,
    },
    /// A duration written to the Lease in whole seconds (`leaseDurationSeconds`) has a fraction.
    #[error("{flag} ({value:?}) must be a whole number of seconds (the Lease stores seconds)")]
    WholeSeconds {
        /// `--flag/ENV_VAR`.
        flag: &'static str,
        /// The value given, e.g. `1.5s`.
        value: Duration,
    },
    /// A Kubernetes object name that the API server would refuse.
    #[error("{flag} ({value:?}) is not a valid {what}: {rule}")]
    Name {
        /// `--flag/ENV_VAR`.
        flag: &'static str,
        /// The name given.
        value: String,
        /// `Lease name` or `namespace`.
        what: &'static str,
        /// The rule broken, e.g. `lowercase letters, digits and '-', ..., at most 63
        /// characters` (Kubernetes' DNS-1123 label rule for a namespace).
        rule: &'static str,
    },
}

/// The cluster name the sandbox and `simulate` use when `CLUSTER_NAME` is not set.
pub const SANDBOX_CLUSTER_NAME: &str = "sandbox";

impl ControllerOptions {
    /// `--cluster-name`/`CLUSTER_NAME`, else [`SANDBOX_CLUSTER_NAME`] (`karpenter run` refuses
    /// to start without one, before it gets here).
    pub fn cluster_name(&self) -> &str {
        self.cluster_name.as_deref().unwrap_or(SANDBOX_CLUSTER_NAME)
    }

    /// Validate into settings.
    ///
    /// Errors: contradictory batch windows, an empty cluster name, bad feature gates, a
    /// `LOG_LEVEL` that tracing's `EnvFilter` refuses.
    pub fn settings(&self) -> Result<Settings, SettingsError> {
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log_level) {
            return Err(SettingsError::LogLevel {
                value: self.log_level.clone(),
                reason: e.to_string(),
            });
        }
        if self.batch_max_duration < self.batch_idle_duration {
            return Err(SettingsError::BatchWindows {
                idle: self.batch_idle_duration,
                max: self.batch_max_duration,
            });
        }
        if self.cluster_name().trim().is_empty() {
            return Err(SettingsError::ClusterName);
        }
        let feature_gates =
            self.feature_gates
                .parse()
                .map_err(|reason| SettingsError::FeatureGates {
                    value: self.feature_gates.clone(),
                    reason,
                })?;
        Ok(Settings {
            cluster_name: self.cluster_name().to_string(),
            batch_idle: self.batch_idle_duration,
            batch_max: self.batch_max_duration,
            launch_timeout: self.launch_timeout,
            registration_ttl: self.registration_ttl,
            orphaned_node_grace: self.orphaned_node_grace,
            hash_versions: Default::default(),
            upgrade_initialization_timeout: self.upgrade_initialization_timeout,
            feature_gates,
            cost_repack: self.cost_repack,
            min_values_policy: self.min_values_policy,
            nominate_planned_pods: self.nominate_planned_pods,
            cpu_requests: self.cpu_requests,
            ..Settings::default()
        })
    }
}

/// Log line formats of `karpenter run`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line (upstream's only format; the default).
    Json,
    /// tracing's human-readable lines (`LOG_FORMAT=text`), as the sandbox writes them.
    Text,
}

/// Where the pod's service account says it runs (`/var/run/secrets/...`), mounted in every pod.
pub const SERVICE_ACCOUNT_NAMESPACE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Flags of `karpenter run` only: the process around the controllers.
#[derive(Args, Clone, Debug)]
pub struct RunOptions {
    /// Port of the Prometheus endpoint `GET /metrics`.
    #[arg(long, env = "METRICS_PORT", default_value_t = 8080)]
    pub metrics_port: u16,
    /// Port of the probes `GET /healthz` (liveness) and `GET /readyz` (readiness).
    #[arg(long, env = "HEALTH_PROBE_PORT", default_value_t = 8081)]
    pub health_probe_port: u16,
    /// Address both HTTP servers listen on.
    #[arg(long, env = "BIND_ADDRESS", default_value_t = IpAddr::V4(Ipv4Addr::UNSPECIFIED))]
    pub bind_address: IpAddr,
    /// Log line format: `json` (one object per line, as upstream) or `text`.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,
    /// Average API requests per second this client sends (client-side rate limit).
    #[arg(long, env = "KUBE_CLIENT_QPS", default_value_t = 200,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub kube_client_qps: u32,
    /// API requests the client may send at once above the average rate.
    #[arg(long, env = "KUBE_CLIENT_BURST", default_value_t = 300,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub kube_client_burst: u32,
    /// Run the controllers without taking the leader Lease (only safe with one replica).
    /// Accepts Go's `strconv.ParseBool` spellings as upstream does (`1`, `t`, `true`, `TRUE`,
    /// `0`, `f`, `false`, ...); the bare flag means true.
    #[arg(long, env = "DISABLE_LEADER_ELECTION", num_args = 0..=1, default_value = "false",
          default_missing_value = "true", value_parser = parse_go_bool)]
    pub disable_leader_election: bool,
    /// Name of the `coordination.k8s.io/v1` Lease replicas elect a leader through.
    #[arg(
        long,
        env = "LEADER_ELECTION_NAME",
        default_value = super::leader::DEFAULT_LEASE_NAME
    )]
    pub leader_election_name: String,
    /// Namespace of the Lease (default: the pod's own namespace, else `kube-system`).
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// How long a leader's Lease stays valid after its last renewal: a standby takes over at
    /// most this long after the leader died.
    #[arg(long, env = "LEADER_ELECTION_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub leader_election_lease_duration: Duration,
    /// A leader that has not renewed its Lease for this long stops its controllers and exits.
    #[arg(long, env = "LEADER_ELECTION_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    pub leader_election_renew_deadline: Duration,
    /// How often the leader renews and a standby tries to acquire.
    #[arg(long, env = "LEADER_ELECTION_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
    pub leader_election_retry_period: Duration,
}

/// Validated settings of the `karpenter run` process.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSettings {
    /// Where `/metrics` listens.
    pub metrics_addr: std::net::SocketAddr,
    /// Where `/healthz` and `/readyz` listen.
    pub health_addr: std::net::SocketAddr,
    /// `json` or `text` lines (`LOG_FORMAT`).
    pub log_format: LogFormat,
    /// Client-side rate limit: average requests per second.
    pub qps: u32,
    /// Client-side rate limit: requests allowed at once above `qps` (`KUBE_CLIENT_BURST`).
    pub burst: u32,
    /// Leader election, or `None` when disabled.
    pub leader_election: Option<super::leader::LeaseConfig>,
    /// Karpenter's own namespace: the Lease's (`LEADER_ELECTION_NAMESPACE`, else the pod's,
    /// else `kube-system`), also when leader election is disabled. The disruption history
    /// ConfigMap lives there.
    pub namespace: String,
}

/// A Kubernetes name rule (`apimachinery/pkg/util/validation`): lowercase alphanumerics and
/// `-` (and `.` for a subdomain), starting and ending alphanumeric, at most `max` characters.
fn valid_name(s: &str, max: usize, dots: bool) -> bool {
    let ok_char =
        |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (dots && c == '.');
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    !s.is_empty()
        && s.len() <= max
        && s.chars().all(ok_char)
        && edge(s.chars().next())
        && edge(s.chars().last())
}

impl RunOptions {
    /// Validate into run settings; the Lease namespace defaults to the pod's namespace read
    /// from [`SERVICE_ACCOUNT_NAMESPACE`], else `kube-system`. `identity` names this replica in
    /// the Lease.
    ///
    /// Errors: as [`RunOptions::settings_with`].
    pub fn settings(&self, identity: String) -> Result<RunSettings, SettingsError> {
        let pod_namespace = std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty());
        self.settings_with(identity, pod_namespace)
    }

    /// [`RunOptions::settings`] with the pod's namespace given (`None` outside a pod).
    ///
    /// Errors: both servers on one port; a zero lease duration, renew deadline or retry period;
    /// a renew deadline not shorter than the lease duration or a retry period not shorter than
    /// the renew deadline (client-go's rules); a Lease name that is not a DNS subdomain or a
    /// namespace that is not a DNS label.
    pub fn settings_with(
        &self,
        identity: String,
        pod_namespace: Option<String>,
    ) -> Result<RunSettings, SettingsError> {
        if self.metrics_port == self.health_probe_port && self.metrics_port != 0 {
            return Err(SettingsError::SamePort(self.metrics_port));
        }
        let lease = "--leader-election-lease-duration/LEADER_ELECTION_LEASE_DURATION";
        let renew = "--leader-election-renew-deadline/LEADER_ELECTION_RENEW_DEADLINE";
        let retry = "--leader-election-retry-period/LEADER_ELECTION_RETRY_PERIOD";
        for (flag, value) in [
            (lease, self.leader_election_lease_duration),
            (renew, self.leader_election_renew_deadline),
            (retry, self.leader_election_retry_period),
        ] {
            if value.is_zero() {
                return Err(SettingsError::Zero { flag, value });
            }
        }
        let lease_duration = self.leader_election_lease_duration;
        if lease_duration.subsec_nanos() != 0 {
            return Err(SettingsError::WholeSeconds {
                flag: lease,
                value: lease_duration,
            });
        }
        for (longer, longer_value, shorter, shorter_value) in [
            (
                lease,
                self.leader_election_lease_duration,
                renew,
                self.leader_election_renew_deadline,
            ),
            (
                renew,
                self.leader_election_renew_deadline,
                retry,
                self.leader_election_retry_period,
            ),
        ] {
            if longer_value <= shorter_value {
                return Err(SettingsError::Order {
                    longer,
                    longer_value,
                    shorter,
                    shorter_value,
                });
            }
        }
        if !valid_name(&self.leader_election_name, 253, true) {
            return Err(SettingsError::Name {
                flag: "--leader-election-name/LEADER_ELECTION_NAME",
                value: self.leader_election_name.clone(),
                what: "Lease name",
                rule: "lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters",
            });
        }
        let namespace = self
            .leader_election_namespace
            .clone()
            .or(pod_namespace)
            .unwrap_or_else(|| super::leader::DEFAULT_LEASE_NAMESPACE.into());
        if !valid_name(&namespace, 63, false) {
            return Err(SettingsError::Name {
                flag: "--leader-election-namespace/LEADER_ELECTION_NAMESPACE",
                value: namespace,
                what: "namespace",
                rule: "lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters",
            });
        }
        Ok(RunSettings {
            metrics_addr: (self.bind_address, self.metrics_port).into(),
            health_addr: (self.bind_address, self.health_probe_port).into(),
            log_format: self.log_format,
            qps: self.kube_client_qps,
            burst: self.kube_client_burst,
            leader_election: (!self.disable_leader_election).then(|| super::leader::LeaseConfig {
                name: self.leader_election_name.clone(),
                namespace: namespace.clone(),
                identity,
                lease_duration: self.leader_election_lease_duration,
                renew_deadline: self.leader_election_renew_deadline,
                retry_period: self.leader_election_retry_period,
            }),
            namespace,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        controller: ControllerOptions,
        #[command(flatten)]
        run: RunOptions,
    }

    fn parse(args: &[&str]) -> Cli {
        let argv = std::iter::once("karpenter").chain(args.iter().copied());
        match Cli::try_parse_from(argv) {
            Ok(cli) => cli,
            Err(e) => panic!("{args:?} should parse: {e}"),
        }
    }

    fn run_settings(args: &[&str]) -> Result<RunSettings, SettingsError> {
        parse(args).run.settings_with("me".into(), None)
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn every_flag_reads_upstreams_environment_variable() {
        let cmd = Cli::command();
        let envs: Vec<String> = cmd
            .get_arguments()
            .filter_map(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned())
            .collect();
        for name in [
            "CLUSTER_NAME",
            "BATCH_IDLE_DURATION",
            "BATCH_MAX_DURATION",
            "FEATURE_GATES",
            "KUBE_CLIENT_QPS",
            "KUBE_CLIENT_BURST",
            "METRICS_PORT",
            "HEALTH_PROBE_PORT",
            "LOG_LEVEL",
            "DISABLE_LEADER_ELECTION",
            "LEADER_ELECTION_NAME",
            "LEADER_ELECTION_NAMESPACE",
            "CPU_REQUESTS",
        ] {
            assert!(envs.iter().any(|e| e == name), "no flag reads {name}");
        }
        let flags = cmd.get_arguments().count();
        assert_eq!(envs.len(), flags, "every flag has an environment variable");
    }

    #[test]
    fn defaults_are_upstreams() {
        let cli = parse(&[]);
        let s = cli.controller.settings().expect("defaults are valid");
        assert_eq!(s.batch_idle, Duration::from_secs(1));
        assert_eq!(s.batch_max, Duration::from_secs(10));
        assert_eq!(s.feature_gates, FeatureGates::default());
        assert_eq!(s.cpu_requests, 1000);
        let r = cli
            .run
            .settings_with("me".into(), None)
            .expect("defaults are valid");
        assert_eq!(r.metrics_addr.to_string(), "0.0.0.0:8080");
        assert_eq!(r.health_addr.to_string(), "0.0.0.0:8081");
        assert_eq!((r.qps, r.burst), (200, 300));
        assert_eq!(r.log_format, LogFormat::Json);
        let le = r.leader_election.expect("leader election is on by default");
        assert_eq!(le.name, "karpenter-leader-election");
        assert_eq!(le.namespace, "kube-system");
        assert_eq!(le.lease_duration, Duration::from_secs(15));
        assert_eq!(le.renew_deadline, Duration::from_secs(10));
        assert_eq!(le.retry_period, Duration::from_secs(2));
    }

    #[test]
    fn lease_namespace_comes_from_the_flag_then_the_pod() {
        let cli = parse(&[]);
        let pod = cli
            .run
            .settings_with("me".into(), Some("karpenter".into()))
            .expect("valid");
        assert_eq!(
            pod.leader_election.map(|l| l.namespace).as_deref(),
            Some("karpenter")
        );
        let cli = parse(&["--leader-election-namespace", "ops"]);
        let flag = cli
            .run
            .settings_with("me".into(), Some("karpenter".into()))
            .expect("valid");
        assert_eq!(
            flag.leader_election.map(|l| l.namespace).as_deref(),
            Some("ops")
        );
        assert_eq!(
            run_settings(&["--disable-leader-election"])
                .expect("valid")
                .leader_election,
            None
        );
    }

    #[test]
    fn batch_windows_error_names_both_variables_and_values() {
        let cli = parse(&[
            "--batch-max-duration",
            "10ms",
            "--batch-idle-duration",
            "1s",
        ]);
        let err = cli
            .controller
            .settings()
            .expect_err("max < idle is refused");
        assert_eq!(
            err.to_string(),
            "--batch-max-duration/BATCH_MAX_DURATION (10ms) must not be shorter than \
             --batch-idle-duration/BATCH_IDLE_DURATION (1s)"
        );
        let cli = parse(&["--cluster-name", " "]);
        assert_eq!(
            cli.controller.settings().err(),
            Some(SettingsError::ClusterName)
        );
    }

    #[test]
    fn bad_feature_gates_are_refused_with_the_known_names() {
        let cli = parse(&["--feature-gates", "NodeRepair=true,Drift=false"]);
        let err = cli
            .controller
            .settings()
            .expect_err("unknown gate")
            .to_string();
        assert!(err.starts_with("--feature-gates/FEATURE_GATES (\"NodeRepair=true,Drift=false\"): unknown feature gate \"Drift\""), "{err}");
        for g in FeatureGate::ALL {
            assert!(err.contains(g.name()), "{err} lists {g}");
        }
        let err = "NodeRepair=yes"
            .parse::<FeatureGates>()
            .expect_err("not a bool");
        assert_eq!(err, "NodeRepair=yes: the value must be true or false");
        let err = "NodeRepair".parse::<FeatureGates>().expect_err("no value");
        assert_eq!(err, "\"NodeRepair\" is not Name=true|false");
    }

    #[test]
    fn ports_must_differ() {
        let err = run_settings(&["--metrics-port", "9000", "--health-probe-port", "9000"])
            .expect_err("same port");
        assert_eq!(
            err.to_string(),
            "--metrics-port/METRICS_PORT (9000) and --health-probe-port/HEALTH_PROBE_PORT (9000) must differ"
        );
        let ok = run_settings(&["--metrics-port", "0", "--health-probe-port", "0"]);
        assert!(ok.is_ok(), "port 0 (any free port) may repeat");
    }

    #[test]
    fn client_limits_must_be_positive() {
        let argv = ["karpenter", "--kube-client-qps", "0"];
        let err = Cli::try_parse_from(argv).expect_err("qps 0");
        assert!(err.to_string().contains("--kube-client-qps"), "{err}");
        assert_eq!(
            run_settings(&["--kube-client-burst", "7"]).map(|r| r.burst),
            Ok(7)
        );
    }

    #[test]
    fn leader_election_timings_follow_client_go_rules() {
        let err =
            run_settings(&["--leader-election-renew-deadline", "15s"]).expect_err("renew = lease");
        assert_eq!(
            err.to_string(),
            "--leader-election-lease-duration/LEADER_ELECTION_LEASE_DURATION (15s) must be longer \
             than --leader-election-renew-deadline/LEADER_ELECTION_RENEW_DEADLINE (15s)"
        );
        let err =
            run_settings(&["--leader-election-retry-period", "12s"]).expect_err("retry > renew");
        assert!(err.to_string().contains("RETRY_PERIOD (12s)"), "{err}");
        let err = run_settings(&["--leader-election-retry-period", "0s"]).expect_err("zero");
        assert_eq!(
            err.to_string(),
            "--leader-election-retry-period/LEADER_ELECTION_RETRY_PERIOD (0ns) must be longer than zero"
        );
    }

    #[test]
    fn lease_durations_are_whole_seconds() {
        let err = run_settings(&["--leader-election-lease-duration", "1500ms"])
            .expect_err("the Lease stores seconds");
        assert_eq!(
            err.to_string(),
            "--leader-election-lease-duration/LEADER_ELECTION_LEASE_DURATION (1.5s) must be a \
             whole number of seconds (the Lease stores seconds)"
        );
        let ok = run_settings(&[
            "--leader-election-lease-duration",
            "2s",
            "--leader-election-renew-deadline",
            "1500ms",
            "--leader-election-retry-period",
            "300ms",
        ])
        .expect("only the lease duration is written in seconds");
        assert_eq!(
            ok.leader_election.map(|l| l.lease_duration),
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn an_invalid_log_level_is_refused() {
        let err = parse(&["--log-level", "info,="])
            .controller
            .settings()
            .expect_err("not a filter");
        assert!(
            err.to_string()
                .starts_with("--log-level/LOG_LEVEL (\"info,=\") is not a log level or filter"),
            "{err}"
        );
        for ok in ["debug", "warn", "controller=debug,info"] {
            assert!(
                parse(&["--log-level", ok]).controller.settings().is_ok(),
                "{ok}"
            );
        }
    }

    #[test]
    fn disable_leader_election_takes_go_booleans() {
        for (value, disabled) in [
            ("1", true),
            ("t", true),
            ("true", true),
            ("TRUE", true),
            ("0", false),
            ("f", false),
            ("false", false),
            ("False", false),
        ] {
            let arg = format!("--disable-leader-election={value}");
            let r = run_settings(&[arg.as_str()]).expect("valid");
            assert_eq!(r.leader_election.is_none(), disabled, "{value}");
        }
        let argv = ["karpenter", "--disable-leader-election=yes"];
        assert!(Cli::try_parse_from(argv).is_err(), "yes is not a Go bool");
        assert!(
            run_settings(&["--disable-leader-election"])
                .expect("bare flag")
                .leader_election
                .is_none()
        );
    }

    #[test]
    fn lease_names_follow_kubernetes_rules() {
        let err =
            run_settings(&["--leader-election-name", "Karpenter_Leader"]).expect_err("bad name");
        assert!(err.to_string().starts_with("--leader-election-name/LEADER_ELECTION_NAME (\"Karpenter_Leader\") is not a valid Lease name"), "{err}");
        let err = run_settings(&["--leader-election-namespace", "a.b"]).expect_err("bad namespace");
        assert!(err.to_string().contains("not a valid namespace"), "{err}");
        assert!(run_settings(&["--leader-election-name", "karpenter.leader-1"]).is_ok());
    }
}
