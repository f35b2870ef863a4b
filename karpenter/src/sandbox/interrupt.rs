//! `karpenter sandbox interrupt NODE --kind ...`: rehearse an interruption of a node's
//! instance in a running sandbox, through its API server (an `Interruption` object the sandbox
//! acts on, see [`super::interruption`]), and print what the simulated EC2 and EventBridge sent
//! to the interruption queue and what happens to the instance next.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use sandbox::actors::instances::GROUP;
use serde_json::{Value, json};

use super::amirelease::VERSION;
use super::interruption::{KIND, PLURAL, SENT};
use super::publish::sandbox_client;
use super::rehearsal::InterruptionKind;
use controller::runtime::options::parse_duration;

/// Help text after `karpenter sandbox interrupt --help`.
pub const INTERRUPT_HELP: &str = "\
The sandbox acts as EC2 and EventBridge would and sends the event to its interruption queue
(`karpenter-sandbox` unless the sandbox was started with another --interruption-queue):
  spot-interruption  EC2 Spot Instance Interruption Warning; two minutes later EC2 reclaims the
                     instance if it still runs (state changes shutting-down, terminated)
  rebalance          EC2 Instance Rebalance Recommendation; the instance keeps running
  scheduled-change   AWS Health Event (instance retirement, scheduled now); it keeps running
  stopping           state change stopping: the instance stops (its kubelet and Node go), then
                     stopped; it stays listed by EC2 until it is terminated
  terminating        state change shutting-down: the instance terminates now, then terminated
Later state changes of the instance, whoever causes them, are sent too, and recorded in
`kubectl get interruption NAME -o yaml`. spot-interruption and rebalance need a spot instance.

Watch Karpenter react: kubectl get events -w, kubectl karpenter status, kubectl karpenter
history, kubectl get interruptions.
Exit status: 0 sent, 1 refused (no such node, no instance, not spot, not running, no queue),
2 the sandbox could not be reached or did not answer.

Examples:
  # The busiest spot node gets EC2's two-minute warning
  karpenter sandbox interrupt ip-10-0-16-2.ec2.internal --kind spot-interruption
  # The instance stops
  karpenter sandbox interrupt ip-10-0-16-2.ec2.internal --kind stopping --kubeconfig /tmp/k";

/// Flags of `karpenter sandbox interrupt`.
#[derive(Args, Clone, Debug)]
pub struct InterruptArgs {
    /// The Node whose instance is interrupted (a NodeClaim's name works too, for an instance
    /// whose Node has not joined).
    #[arg(value_name = "NODE")]
    pub node: String,
    /// What happens to the instance.
    #[arg(long, value_enum)]
    pub kind: InterruptionKind,
    /// Kubeconfig of the running sandbox (the path `karpenter sandbox` printed). Default: the
    /// KUBECONFIG environment variable, else ~/.kube/config.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// How long to wait for the sandbox to act.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// An interruption that was not sent, with the exit code it maps to.
#[derive(Debug, thiserror::Error)]
pub enum InterruptError {
    /// The sandbox could not be reached or does not serve `Interruption` (exit 2).
    #[error("{0}")]
    Connect(String),
    /// The sandbox refused (exit 1): the `Sent=False` condition's reason and message.
    #[error("{message} ({reason})")]
    Refused {
        /// CamelCase reason, e.g. `NodeNotFound`.
        reason: String,
        /// What went wrong.
        message: String,
    },
    /// No answer in time (exit 2).
    #[error(
        "the sandbox did not act on interruption/{name} within {timeout:?}: is it a \
         `karpenter sandbox` on the simulated cloud?"
    )]
    Timeout {
        /// The Interruption's name.
        name: String,
        /// How long we waited (`--timeout`).
        timeout: Duration,
    },
}

impl InterruptError {
    /// The exit code: 1 refused, 2 unreachable or no answer.
    pub fn exit_code(&self) -> u8 {
        match self {
            InterruptError::Refused { .. } => 1,
            InterruptError::Connect(_) | InterruptError::Timeout { .. } => 2,
        }
    }
}

/// The `Interruption` object the flags ask for, named after the node (made a valid name
/// prefix) plus a generated suffix.
pub fn interruption_object(args: &InterruptArgs) -> Value {
    let mut prefix: String = args
        .node
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(57)
        .collect();
    prefix = prefix.trim_matches(['-', '.']).to_owned();
    if prefix.is_empty() {
        prefix = "interruption".into();
    }
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "metadata": {"generateName": format!("{prefix}-")},
        "spec": {"node": args.node, "kind": args.kind.as_str()},
    })
}

/// What happens next, after the events sent at once.
fn next(kind: InterruptionKind, status: &Value) -> String {
    match kind {
        InterruptionKind::SpotInterruption => format!(
            "EC2 reclaims the instance at {} (two minutes after the warning) unless it is gone \
             by then.",
            status["reclaimAt"].as_str().unwrap_or("<unknown>")
        ),
        InterruptionKind::Rebalance => {
            "The instance keeps running (a rebalance recommendation is advice).".into()
        }
        InterruptionKind::ScheduledChange => {
            "The instance keeps running (EC2 would retire it at the scheduled time).".into()
        }
        InterruptionKind::Stopping => {
            "The instance is stopping: its kubelet stopped; `stopped` follows.".into()
        }
        InterruptionKind::Terminating => {
            "The instance is terminating: its kubelet stopped; `terminated` follows.".into()
        }
    }
}

/// What was sent: the interruption, the instance, each event, what happens next and what to
/// watch.
///
/// Errors: writing failed.
pub fn render(
    out: &mut dyn Write,
    name: &str,
    args: &InterruptArgs,
    status: &Value,
) -> std::io::Result<()> {
    let text = |k: &str| status[k].as_str().unwrap_or("<unknown>");
    writeln!(
        out,
        "interruption/{name}: {} of node {}",
        args.kind.as_str(),
        args.node
    )?;
    writeln!(
        out,
        "  instance {} ({} {} in {})",
        text("instanceID"),
        text("capacityType"),
        text("instanceType"),
        text("zone")
    )?;
    writeln!(out, "  sent to queue {}:", text("queue"))?;
    for e in status["events"].as_array().into_iter().flatten() {
        let what = match e["state"].as_str() {
            Some(state) => format!("{} ({state})", e["detailType"].as_str().unwrap_or_default()),
            None => e["detailType"].as_str().unwrap_or_default().to_owned(),
        };
        writeln!(
            out,
            "    {}  {what}  event {}",
            e["time"].as_str().unwrap_or_default(),
            e["id"].as_str().unwrap_or_default()
        )?;
    }
    writeln!(out, "  {}", next(args.kind, status))?;
    writeln!(
        out,
        "Watch: kubectl get events -w; kubectl karpenter status; kubectl karpenter history; \
         kubectl get interruption {name} -o yaml"
    )
}

/// The `Sent` condition: whether True, its reason and message.
fn sent(obj: &DynamicObject) -> Option<(bool, String, String)> {
    let c = obj
        .data
        .get("status")?
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == SENT)?;
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((c["status"] == "True", text("reason"), text("message")))
}

/// Create the `Interruption` and wait until the sandbox acted on it; returns its name and
/// status.
///
/// Errors: see [`InterruptError`].
pub async fn interrupt(args: &InterruptArgs) -> Result<(String, Value), InterruptError> {
    let client = sandbox_client(args.kubeconfig.as_deref())
        .await
        .map_err(InterruptError::Connect)?;
    let resource = ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: KIND.into(),
        plural: PLURAL.into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let obj: DynamicObject = serde_json::from_value(interruption_object(args))
        .map_err(|e| InterruptError::Connect(format!("building the Interruption: {e}")))?;
    let created = api
        .create(&PostParams::default(), &obj)
        .await
        .map_err(|e| match e {
            kube::Error::Api(s) if s.code == 404 => InterruptError::Connect(format!(
                "this API server does not serve {PLURAL}.{GROUP}: is it a `karpenter sandbox` \
                 on the simulated cloud (--cloud-provider sim)?"
            )),
            kube::Error::Api(s) if s.code == 422 => InterruptError::Refused {
                reason: "Invalid".into(),
                message: s.message,
            },
            other => InterruptError::Connect(format!("creating the Interruption: {other}")),
        })?;
    let name = created.metadata.name.clone().unwrap_or_default();
    let start = Instant::now();
    loop {
        let current = api
            .get(&name)
            .await
            .map_err(|e| InterruptError::Connect(format!("reading interruption/{name}: {e}")))?;
        match sent(&current) {
            Some((true, _, _)) => {
                let status = current.data.get("status").cloned().unwrap_or_default();
                return Ok((name, status));
            }
            Some((false, reason, message)) => {
                return Err(InterruptError::Refused { reason, message });
            }
            None if start.elapsed() >= args.timeout => {
                return Err(InterruptError::Timeout {
                    name,
                    timeout: args.timeout,
                });
            }
            None => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Run `karpenter sandbox interrupt`. Exit code: 0 sent, 1 refused, 2 the sandbox could not be
/// reached or did not answer.
pub async fn run(args: &InterruptArgs) -> ExitCode {
    match interrupt(args).await {
        Ok((name, status)) => {
            let mut out = std::io::stdout().lock();
            match render(&mut out, &name, args, &status) {
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
mod tests {
    use super::*;

    fn args(node: &str, kind: InterruptionKind) -> InterruptArgs {
        InterruptArgs {
            node: node.into(),
            kind,
            kubeconfig: None,
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_object_names_the_node_and_kind() {
        let o = interruption_object(&args(
            "ip-10-0-1-2.ec2.internal",
            InterruptionKind::SpotInterruption,
        ));
        assert_eq!(o["apiVersion"], "sandbox.karpenter.sh/v1");
        assert_eq!(o["kind"], "Interruption");
        assert_eq!(
            o["metadata"],
            json!({"generateName": "ip-10-0-1-2.ec2.internal-"})
        );
        assert_eq!(
            o["spec"],
            json!({"node": "ip-10-0-1-2.ec2.internal", "kind": "spot-interruption"})
        );
        let odd = interruption_object(&args("_Node_1_", InterruptionKind::Stopping));
        assert_eq!(odd["metadata"]["generateName"], "node-1-");
        assert_eq!(odd["spec"]["node"], "_Node_1_");
        let long = interruption_object(&args(&"n".repeat(300), InterruptionKind::Rebalance));
        let prefix = long["metadata"]["generateName"].as_str().expect("prefix");
        assert_eq!(prefix.len(), 58);
    }

    #[test]
    fn output_lists_the_events_and_what_comes_next() {
        let status = json!({
            "instanceID": "i-0abc", "instanceType": "m5.large", "capacityType": "spot",
            "zone": "us-east-1a", "queue": "karpenter-sandbox",
            "reclaimAt": "2026-11-26T10:02:00Z",
            "events": [{"time": "2026-11-26T10:00:00Z",
                "detailType": "EC2 Spot Instance Interruption Warning", "id": "00000001-x"}],
        });
        let mut out = Vec::new();
        let a = args(
            "ip-10-0-1-2.ec2.internal",
            InterruptionKind::SpotInterruption,
        );
        render(&mut out, "ip-10-0-1-2.ec2.internal-x7k2p", &a, &status).expect("render");
        assert_eq!(
            String::from_utf8_lossy(&out),
            "interruption/ip-10-0-1-2.ec2.internal-x7k2p: spot-interruption of node \
             ip-10-0-1-2.ec2.internal\n  \
             instance i-0abc (spot m5.large in us-east-1a)\n  \
             sent to queue karpenter-sandbox:\n    \
             2026-11-26T10:00:00Z  EC2 Spot Instance Interruption Warning  event 00000001-x\n  \
             EC2 reclaims the instance at 2026-11-26T10:02:00Z (two minutes after the warning) \
             unless it is gone by then.\n\
             Watch: kubectl get events -w; kubectl karpenter status; kubectl karpenter history; \
             kubectl get interruption ip-10-0-1-2.ec2.internal-x7k2p -o yaml\n"
        );
        let stop = json!({"events": [{"time": "t", "detailType": "EC2 Instance State-change Notification",
            "state": "stopping", "id": "2"}]});
        let mut out = Vec::new();
        render(
            &mut out,
            "n-1",
            &args("n", InterruptionKind::Stopping),
            &stop,
        )
        .expect("render");
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.contains("t  EC2 Instance State-change Notification (stopping)  event 2\n"),
            "{text}"
        );
        assert!(text.contains("instance <unknown>"), "{text}");
        assert!(text.contains("`stopped` follows"), "{text}");
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        action: crate::sandbox::SandboxAction,
    }

    #[test]
    fn flags_parse_and_help_lists_the_kinds() {
        use clap::{CommandFactory, Parser};
        let cli = Cli::try_parse_from(["sandbox", "interrupt", "ip-a", "--kind", "stopping"])
            .expect("parses");
        let crate::sandbox::SandboxAction::Interrupt(a) = cli.action else {
            panic!("interrupt expected");
        };
        assert_eq!(
            (a.node.as_str(), a.kind),
            ("ip-a", InterruptionKind::Stopping)
        );
        assert_eq!(a.timeout, Duration::from_secs(30));
        let err = Cli::try_parse_from(["sandbox", "interrupt", "ip-a", "--kind", "reboot"])
            .err()
            .expect("an unknown kind");
        assert!(err.to_string().contains("spot-interruption"), "{err}");
        assert!(Cli::try_parse_from(["sandbox", "interrupt", "ip-a"]).is_err());
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("interrupt")
            .expect("interrupt")
            .render_long_help()
            .to_string();
        for want in [
            "Examples:",
            "Exit status: 0 sent",
            "scheduled-change",
            "<NODE>",
        ] {
            assert!(help.contains(want), "missing {want:?} in\n{help}");
        }
    }

    #[test]
    fn refusals_exit_1_and_an_unreachable_sandbox_2() {
        let refused = InterruptError::Refused {
            reason: "NodeNotFound".into(),
            message: "no node or nodeclaim named x".into(),
        };
        assert_eq!(refused.exit_code(), 1);
        assert_eq!(
            refused.to_string(),
            "no node or nodeclaim named x (NodeNotFound)"
        );
        assert_eq!(InterruptError::Connect("down".into()).exit_code(), 2);
        let late = InterruptError::Timeout {
            name: "n-1".into(),
            timeout: Duration::from_secs(1),
        };
        assert_eq!(late.exit_code(), 2);
    }
}
