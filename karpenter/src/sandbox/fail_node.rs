//! `karpenter sandbox fail-node NODE`: make a running sandbox's simulated kubelet report a bad
//! node condition (default `Ready=False`) and keep reporting it, to rehearse node repair. It
//! annotates the Node through the sandbox's API server (the kubelet reads
//! `fail.sandbox.karpenter.sh/<Type>`: a condition patched by hand would be overwritten, as a
//! real kubelet overwrites it) and waits until the kubelet reports the condition. `--for 31m`
//! dates the condition's `lastTransitionTime` 31 minutes back, so a 30-minute repair toleration
//! has run out at once; `--heal` removes the failures. Exit codes: 0 reported, 1 no such node
//! or not reported in time, 2 the sandbox could not be reached.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use sandbox::actors::kubelet::conditions::{FAIL_ANNOTATION_PREFIX, FAIL_REASON, Failure};
use serde_json::{Map, Value, json};

use controller::runtime::options::parse_duration;
use crds::duration::human_duration;
use karpenter_core::lifecycle::repair::aws_policies;

/// A node condition as `Type=Status`, e.g. `Ready=False`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    /// The condition's type, e.g. `Ready`, `AcceleratedHardwareReady`.
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
}

/// Parses `--condition`: `Type=Status` with a type of letters, digits, `.`, `-` or `_` and a
/// status of `True`, `False` or `Unknown`.
///
/// Errors: anything else, with the expected shape.
pub fn parse_condition(text: &str) -> Result<Condition, String> {
    let shape = "expected Type=Status with Status True, False or Unknown, e.g. Ready=False";
    let (type_, status) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: {shape}"))?;
    let valid_type = !type_.is_empty()
        && type_.len() <= 63
        && type_
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if !valid_type || !matches!(status, "True" | "False" | "Unknown") {
        return Err(format!("{text:?}: {shape}"));
    }
    Ok(Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
    })
}

/// Flags of `karpenter sandbox fail-node`.
#[derive(Args, Clone, Debug)]
pub struct FailNodeArgs {
    /// The Node to fail, by name (`kubectl get nodes`).
    pub node: String,
    /// The condition the node's kubelet reports, as `Type=Status`.
    #[arg(long, default_value = "Ready=False", value_parser = parse_condition)]
    pub condition: Condition,
    /// Date the condition's lastTransitionTime this far back (e.g. `31m`), as if the failure had
    /// begun that long ago: node repair tolerates `Ready=False` for 30 minutes, so `--for 31m`
    /// rehearses the repair without waiting.
    #[arg(long = "for", value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub held_for: Duration,
    /// Stop failing the node: its kubelet reports it healthy again.
    #[arg(long, conflicts_with_all = ["condition", "held_for"])]
    pub heal: bool,
    /// Kubeconfig of the running sandbox (the path `karpenter sandbox` printed). Default: the
    /// KUBECONFIG environment variable, else ~/.kube/config.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// How long to wait for the kubelet to report it.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// A `fail-node` that did not happen, with the exit code it maps to.
#[derive(Debug, thiserror::Error)]
pub enum FailNodeError {
    /// The sandbox could not be reached, or refused the request (exit 2).
    #[error("{0}")]
    Connect(String),
    /// No such node (exit 1).
    #[error("node {0:?} not found")]
    NotFound(String),
    /// The kubelet did not report it in time: not a sandbox node, or no sandbox (exit 1).
    #[error(
        "node {node} did not report {what} within {timeout:?}: is it a node of a running \
         `karpenter sandbox`? (only its simulated kubelets read {FAIL_ANNOTATION_PREFIX}* \
         annotations)"
    )]
    NotReported {
        /// The node's name.
        node: String,
        /// What it should have reported, e.g. `Ready=False`.
        what: String,
        /// How long we waited (`--timeout`).
        timeout: Duration,
    },
}

impl FailNodeError {
    /// The exit code: 2 when the sandbox could not be reached, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            FailNodeError::Connect(_) => 2,
            FailNodeError::NotFound(_) | FailNodeError::NotReported { .. } => 1,
        }
    }
}

/// What happened, for [`render`].
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The node reports `condition` since `since`.
    Failed {
        /// The node's name.
        node: String,
        /// What it reports.
        condition: Condition,
        /// Its lastTransitionTime.
        since: Timestamp,
    },
    /// The node's failures were removed and it reports Ready again.
    Healed {
        /// The node's name.
        node: String,
    },
}

/// The annotation key of a failed `type_`.
pub fn annotation_key(type_: &str) -> String {
    format!("{FAIL_ANNOTATION_PREFIX}{type_}")
}

/// The merge patch of the Node's annotations: the failure set, or (`heal`) every failure in
/// `current` removed.
pub fn patch(args: &FailNodeArgs, current: &Node, since: Timestamp) -> Value {
    let mut annotations = Map::new();
    if args.heal {
        for key in current
            .metadata
            .annotations
            .iter()
            .flatten()
            .map(|(k, _)| k)
        {
            if key.starts_with(FAIL_ANNOTATION_PREFIX) {
                annotations.insert(key.clone(), Value::Null);
            }
        }
    } else {
        let failure = Failure {
            status: args.condition.status.clone(),
            since,
        };
        annotations.insert(
            annotation_key(&args.condition.type_),
            json!(failure.annotation_value()),
        );
    }
    json!({"metadata": {"annotations": annotations}})
}

/// Whether `node` reports what was asked: the condition with its status and time, or (healed)
/// no failed condition and `Ready=True`.
pub fn reported(node: &Node, args: &FailNodeArgs, since: Timestamp) -> bool {
    let conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    if args.heal {
        return conditions
            .iter()
            .all(|c| c.reason.as_deref() != Some(FAIL_REASON))
            && conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
    }
    conditions.iter().any(|c| {
        c.type_ == args.condition.type_
            && c.status == args.condition.status
            && c.last_transition_time.as_ref().map(|t| t.0) == Some(since)
    })
}

async fn client(args: &FailNodeArgs) -> Result<kube::Client, FailNodeError> {
    super::publish::sandbox_client(args.kubeconfig.as_deref())
        .await
        .map_err(FailNodeError::Connect)
}

/// Annotate the node and wait until its kubelet reports the failure (or, `--heal`, health);
/// `now` is the time `--for` counts back from.
///
/// Errors: see [`FailNodeError`].
pub async fn fail(args: &FailNodeArgs, now: Timestamp) -> Result<Outcome, FailNodeError> {
    let api: Api<Node> = Api::all(client(args).await?);
    let name = args.node.as_str();
    let unreachable = |e: kube::Error| FailNodeError::Connect(format!("reading node {name}: {e}"));
    let current = match api.get(name).await {
        Ok(n) => n,
        Err(kube::Error::Api(e)) if e.code == 404 => {
            return Err(FailNodeError::NotFound(name.to_owned()));
        }
        Err(e) => return Err(unreachable(e)),
    };
    let back = SignedDuration::try_from(args.held_for).unwrap_or(SignedDuration::MAX);
    let since = now
        .checked_sub(back)
        .ok()
        .and_then(|t| Timestamp::from_second(t.as_second()).ok())
        .unwrap_or(now);
    let body = patch(args, &current, since);
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {
            return Err(FailNodeError::NotFound(name.to_owned()));
        }
        Err(e) => {
            return Err(FailNodeError::Connect(format!(
                "annotating node {name}: {e}"
            )));
        }
    }
    let start = Instant::now();
    loop {
        let node = match api.get(name).await {
            Ok(n) => n,
            Err(kube::Error::Api(e)) if e.code == 404 => {
                return Err(FailNodeError::NotFound(name.to_owned()));
            }
            Err(e) => return Err(unreachable(e)),
        };
        if reported(&node, args, since) {
            return Ok(if args.heal {
                Outcome::Healed {
                    node: name.to_owned(),
                }
            } else {
                Outcome::Failed {
                    node: name.to_owned(),
                    condition: args.condition.clone(),
                    since,
                }
            });
        }
        if start.elapsed() >= args.timeout {
            let what = if args.heal {
                "Ready=True".to_owned()
            } else {
                format!("{}={}", args.condition.type_, args.condition.status)
            };
            return Err(FailNodeError::NotReported {
                node: name.to_owned(),
                what,
                timeout: args.timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What `fail-node` prints: what the node reports since when, how to undo it, and when node
/// repair would replace it (the AWS repair policy that matches, if any).
///
/// Errors: writing failed.
pub fn render(out: &mut dyn Write, outcome: &Outcome, now: Timestamp) -> std::io::Result<()> {
    match outcome {
        Outcome::Healed { node } => writeln!(
            out,
            "node/{node} healed: its kubelet reports Ready=True and no failed condition"
        ),
        Outcome::Failed {
            node,
            condition,
            since,
        } => {
            let text = format!("{}={}", condition.type_, condition.status);
            let ago = human_duration(now.duration_since(*since));
            writeln!(out, "node/{node} reports {text} since {since} ({ago} ago)")?;
            writeln!(
                out,
                "Its simulated kubelet keeps reporting it until `karpenter sandbox fail-node \
                 {node} --heal`."
            )?;
            let policy = aws_policies().into_iter().find(|p| {
                p.condition_type == condition.type_ && p.condition_status == condition.status
            });
            match policy {
                Some(p) => {
                    let toleration =
                        human_duration(SignedDuration::try_from(p.toleration).unwrap_or_default());
                    writeln!(
                        out,
                        "Node repair (FEATURE_GATES=NodeRepair=true) replaces the node once \
                         {text} has held for {toleration}."
                    )
                }
                None => writeln!(
                    out,
                    "No repair policy matches {text}: node repair leaves the node alone."
                ),
            }
        }
    }
}

/// Run `karpenter sandbox fail-node`. Exit code: 0 reported, 1 no such node or not reported in
/// time, 2 the sandbox could not be reached.
pub async fn run(args: &FailNodeArgs) -> ExitCode {
    let now = Timestamp::now();
    match fail(args, now).await {
        Ok(outcome) => {
            let mut out = std::io::stdout().lock();
            match render(&mut out, &outcome, now) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: writing the output: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests;
