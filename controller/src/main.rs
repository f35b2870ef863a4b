//! `karpenter`: the controller (`run`) and the all-in-one local cluster (`sandbox`).

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use controller::clock::SystemClock;
use controller::operator::cloud::{self, CloudOptions};
use controller::operator::sandbox::{SandboxAction, SandboxCommand};
use controller::operator::{self, ControllerOptions};
use controller::simulate::SimulateArgs;
use tracing_subscriber::EnvFilter;

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
    Run(RunArgs),
    /// Start a local in-memory cluster with a simulated cloud, apply a workload and provision it
    /// (or, with a subcommand, act on a running one).
    #[command(args_conflicts_with_subcommands = true)]
    Sandbox(Box<SandboxCommand>),
    /// What Karpenter would launch for a workload, without a cluster: fleet, cost, lower bound.
    Simulate(SimulateArgs),
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    cloud: CloudOptions,
    #[command(flatten)]
    controller: ControllerOptions,
}

fn init_tracing(level: &str) {
    let filter = EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// On a terminal the sandbox redraws its progress line in place, so logs go to a file.
fn init_sandbox_tracing(level: &str) {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return init_tracing(level);
    }
    let path = std::env::temp_dir().join(format!("karpenter-sandbox-{}.log", std::process::id()));
    match std::fs::File::create(&path) {
        Ok(file) => {
            let filter = EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
            tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_ansi(false)
                .with_writer(std::sync::Mutex::new(file))
                .init();
            eprintln!("karpenter sandbox: logs in {}", path.display());
        }
        Err(_) => init_tracing(level),
    }
}

async fn run(args: RunArgs) -> ExitCode {
    let settings = match args.controller.settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let config = match kube::Config::infer().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: reading the kubeconfig: {e}");
            return ExitCode::from(2);
        }
    };
    let api_server = cloud::ApiServer::from_config(&config);
    let client = match operator::client(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: connecting to the cluster: {e}");
            return ExitCode::from(2);
        }
    };
    let version = match client.apiserver_version().await {
        Ok(v) => cloud::minor_version(&v.git_version),
        Err(e) => {
            eprintln!("error: reading the cluster's version: {e}");
            return ExitCode::from(2);
        }
    };
    let clock = Arc::new(SystemClock);
    let cloud = match cloud::build(
        &args.cloud,
        &settings.cluster_name,
        &api_server,
        &version,
        clock.clone(),
    )
    .await
    {
        Ok(c) => c.provider,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let (_ctx, tasks) = operator::start(client, cloud, clock, settings);
    let _ = tokio::signal::ctrl_c().await;
    for t in tasks {
        t.abort();
    }
    ExitCode::SUCCESS
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => {
            init_tracing(&args.controller.log_level);
            run(args).await
        }
        Command::Sandbox(cmd) => match cmd.action {
            Some(SandboxAction::PublishAmi(args)) => {
                init_tracing(&std::env::var("LOG_LEVEL").unwrap_or_else(|_| "warn".into()));
                operator::sandbox::publish::run(&args).await
            }
            None => {
                init_sandbox_tracing(&cmd.start.controller.log_level);
                operator::sandbox::run(cmd.start).await
            }
        },
        Command::Simulate(args) => controller::simulate::run(&args),
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
