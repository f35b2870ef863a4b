//! `karpenter`: the operator (`run`), the all-in-one local cluster (`sandbox`) and the planner
//! that needs no cluster (`simulate`). Parses, starts logging, hands over.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use controller::runtime::leader::default_identity;
use controller::runtime::logging;
use karpenter::run::RunArgs;
use karpenter::sandbox::{SandboxAction, SandboxCommand};
use karpenter::simulate::SimulateArgs;

/// mimalloc instead of glibc's allocator: the sandbox's many threads each allocate and free
/// large lists and watch lines, and glibc's per-thread arenas kept that memory after it was
/// freed (a 20,400-pod sandbox grew by gigabytes after a few `kubectl get pods -A -o json`;
/// BENCHMARKS.md, "Sandbox memory").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Karpenter in Rust: provisions right-sized nodes for pods that cannot be scheduled.
#[derive(Parser, Debug)]
#[command(name = "karpenter", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller against the cluster in KUBECONFIG (or in-cluster config).
    Run(Box<RunArgs>),
    /// Start a local in-memory cluster with a simulated cloud, apply a workload and provision it
    /// (or, with a subcommand, act on a running one).
    #[command(args_conflicts_with_subcommands = true)]
    Sandbox(Box<SandboxCommand>),
    /// What Karpenter would launch for a workload, without a cluster: fleet, cost, lower bound.
    Simulate(SimulateArgs),
}

/// On a terminal the sandbox redraws its progress line in place, so logs go to a file.
fn init_sandbox_tracing(level: &str) {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return logging::init_text(level);
    }
    let path = std::env::temp_dir().join(format!("karpenter-sandbox-{}.log", std::process::id()));
    match std::fs::File::create(&path) {
        Ok(file) => {
            logging::init_file(level, file);
            eprintln!("karpenter sandbox: logs in {}", path.display());
        }
        Err(_) => logging::init_text(level),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => {
            // Nothing is guessed for a real cluster: refused before any connection.
            if let Err(e) = args.check_explicit() {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
            // Validated before the logger starts, so a bad LOG_LEVEL is refused, not ignored.
            let settings = args.controller.settings();
            let (settings, run_settings) = match (settings, args.run.settings(default_identity())) {
                (Ok(s), Ok(r)) => (s, r),
                (Err(e), _) | (_, Err(e)) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            logging::init(run_settings.log_format, &args.controller.log_level);
            karpenter::run::run(*args, settings, run_settings)
                .await
                .unwrap_or_else(|e| {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                })
        }
        Command::Sandbox(cmd) => match cmd.action {
            Some(SandboxAction::PublishAmi(args)) => {
                logging::init_text(&std::env::var("LOG_LEVEL").unwrap_or_else(|_| "warn".into()));
                karpenter::sandbox::publish::run(&args).await
            }
            Some(SandboxAction::Interrupt(args)) => {
                logging::init_text(&std::env::var("LOG_LEVEL").unwrap_or_else(|_| "warn".into()));
                karpenter::sandbox::interrupt::run(&args).await
            }
            Some(SandboxAction::FailNode(args)) => {
                logging::init_text(&std::env::var("LOG_LEVEL").unwrap_or_else(|_| "warn".into()));
                karpenter::sandbox::fail_node::run(&args).await
            }
            None => {
                // Validated before the logger starts, as for `run` (the sandbox checks again).
                if let Err(e) = cmd.start.controller.settings() {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
                init_sandbox_tracing(&cmd.start.controller.log_level);
                karpenter::sandbox::run(cmd.start).await
            }
        },
        Command::Simulate(args) => karpenter::simulate::run(&args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
