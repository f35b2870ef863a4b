//! The command line of `orphans`, `orphans list` and `orphans delete`: output flags, the
//! thresholds that make something an orphan, and where cloud instances come from.

use std::time::Duration;

use clap::{ArgGroup, Args, Subcommand, ValueEnum};

/// Help text after `orphans --help` (and `orphans list --help`).
pub const ORPHANS_HELP: &str = "\
Cloud instances are read from the sandbox's instances.sandbox.karpenter.sh objects when the
server serves them, else from EC2 (builds with the aws feature; credentials and region from the
standard AWS chain, cluster from --cluster-name, CLUSTER_NAME or an EKS cluster ARN in the
kubeconfig). Exit status: 0 no orphans, 1 orphans found, 2 error.

Examples:
  # List orphans, with instance type, zone and price
  kubectl karpenter orphans -o wide
  # The same list spelled out, as JSON, without looking at cloud instances
  kubectl karpenter orphans list -o json --no-cloud
  # Count NodeClaims as not registered after 5 minutes instead of 15
  kubectl karpenter orphans --registration-ttl 5m
  # Preview cleaning up everything listed, then do it without a prompt
  kubectl karpenter orphans delete --all --dry-run
  kubectl karpenter orphans delete --all --yes
  # Clean up one NodeClaim and one instance (NAME column), asking first
  kubectl karpenter orphans delete default-x7k2p i-0123456789abcdef0";

/// Help text after `orphans delete --help`.
pub const DELETE_HELP: &str = "\
What is done per kind: NotLaunched, NotRegistered and InstanceGone delete the NodeClaim (and its
Node); StuckTerminating deletes its Node; NodeWithoutNodeClaim deletes the Node; every kind
terminates the instance it involves when the cloud lists it. Karpenter's finalizer
(karpenter.sh/termination) is then removed from those Nodes and NodeClaims, but only when the
cloud was checked: without a cloud view the finalizers are left for the controller, which
terminates the instance. Other finalizers are never removed. DuplicateProviderID is left alone:
deleting that NodeClaim would make Karpenter terminate the instance another NodeClaim runs on.

The plan is printed first; on a terminal you are asked to confirm. Without a terminal the command
refuses (exit 2) unless --yes is given. Exit status: 0 cleaned up or nothing to do, 1 orphans
left (--dry-run, or declined), 2 error.

Examples:
  kubectl karpenter orphans delete --all --dry-run
  kubectl karpenter orphans delete default-x7k2p ip-10-0-1-7.ec2.internal
  kubectl karpenter orphans delete --all --yes";

/// `orphans` flags and its subcommands (`list` is the default).
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct OrphansArgs {
    /// `list` (the default) or `delete`.
    #[command(subcommand)]
    pub action: Option<OrphansAction>,
    /// Flags of the default `list`.
    #[command(flatten)]
    pub list: OrphansListArgs,
}

impl OrphansArgs {
    /// The list flags in effect: `orphans list …`'s, else `orphans …`'s.
    pub fn list_args(&self) -> &OrphansListArgs {
        match &self.action {
            Some(OrphansAction::List(args)) => args,
            _ => &self.list,
        }
    }
}

/// `orphans` subcommands.
#[derive(Debug, Subcommand)]
pub enum OrphansAction {
    /// List orphans (what `kubectl karpenter orphans` does without a subcommand).
    #[command(after_help = ORPHANS_HELP)]
    List(OrphansListArgs),
    /// Clean up orphans: terminate their instances, delete their Nodes and NodeClaims and
    /// remove Karpenter's finalizer, after a preview and a confirmation.
    #[command(after_help = DELETE_HELP)]
    Delete(OrphansDeleteArgs),
}

/// `orphans [list]` flags.
#[derive(Clone, Debug, Args)]
pub struct OrphansListArgs {
    /// Output format: table, wide (adds INSTANCE-TYPE, CAPACITY-TYPE, ZONE, PRICE/HOUR,
    /// PROVIDER-ID), json, yaml (an OrphanList document) or name.
    #[arg(short, long, value_enum, default_value_t = OrphansOutput::Table)]
    pub output: OrphansOutput,
    /// Print rows only: no header line and no summary line.
    #[arg(long)]
    pub no_headers: bool,
    /// When something counts as an orphan, and where instances come from.
    #[command(flatten)]
    pub detect: DetectArgs,
}

/// `orphans delete` flags.
#[derive(Clone, Debug, Args)]
#[command(group(ArgGroup::new("targets").required(true).args(["names", "all"])))]
pub struct OrphansDeleteArgs {
    /// Orphans to clean up, as the NAME column shows them (NodeClaim, Node or instance id), or
    /// as `-o name` prints them.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
    /// Clean up every orphan listed.
    #[arg(long, conflicts_with = "names")]
    pub all: bool,
    /// Print what would be done and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask for confirmation (required when not on a terminal).
    #[arg(short = 'y', long)]
    pub yes: bool,
    /// When something counts as an orphan, and where instances come from.
    #[command(flatten)]
    pub detect: DetectArgs,
}

/// How `orphans` decides and where it reads instances from.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Detection options")]
pub struct DetectArgs {
    /// A NodeClaim not launched this long after its creation is NotLaunched (Go duration).
    #[arg(long, default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    pub launch_timeout: Duration,
    /// A NodeClaim launched this long ago but not registered is NotRegistered.
    #[arg(long, default_value = "15m", value_parser = parse_duration, value_name = "DURATION")]
    pub registration_ttl: Duration,
    /// A NodeClaim deleted this long ago and still present is StuckTerminating.
    #[arg(long, default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    pub stuck_after: Duration,
    /// Instances launched more recently than this are never orphans (a launch may be in flight;
    /// upstream's garbage collection waits as long).
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub min_instance_age: Duration,
    /// Do not read cloud instances: only NodeClaims and Nodes are checked.
    #[arg(long)]
    pub no_cloud: bool,
    /// Cluster name EC2 instances are tagged with (kubernetes.io/cluster/<name>); default: the
    /// EKS cluster ARN of the kubeconfig's cluster.
    #[arg(long, env = "CLUSTER_NAME", value_name = "NAME")]
    pub cluster_name: Option<String>,
    /// EC2 endpoint URL (e.g. a local moto server); default: AWS's endpoint for the region.
    #[arg(long, env = "AWS_ENDPOINT_URL", value_name = "URL")]
    pub aws_endpoint_url: Option<String>,
}

impl DetectArgs {
    /// The thresholds these flags set.
    pub fn thresholds(&self) -> crate::orphans::Thresholds {
        crate::orphans::Thresholds {
            launch_timeout: self.launch_timeout,
            registration_ttl: self.registration_ttl,
            stuck_after: self.stuck_after,
            min_instance_age: self.min_instance_age,
        }
    }
}

/// `orphans -o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OrphansOutput {
    /// A kubectl-style table with a summary line.
    Table,
    /// The table with instance columns.
    Wide,
    /// An `OrphanList` document as JSON.
    Json,
    /// An `OrphanList` document as YAML.
    Yaml,
    /// `nodeclaim.karpenter.sh/<name>`, `node/<name>` or `instance/<id>` per line.
    Name,
}

/// Parses a Go duration such as `30s`, `5m` or `1h30m`.
///
/// Errors: not a Go duration, or negative.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d: kube::core::Duration = s
        .parse()
        .map_err(|e| format!("{s:?} is not a duration like 30s, 5m or 1h30m: {e}"))?;
    if d.is_negative() {
        return Err(format!("{s:?} is negative"));
    }
    Ok(d.into())
}
