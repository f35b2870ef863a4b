//! `karpenter`: the controller (`run`) and the all-in-one local cluster (`sandbox`).

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use controller::clock::SystemClock;
use controller::operator::cloud::{self, CloudOptions};
use controller::operator::leader::default_identity;
use controller::operator::options::LogFormat;
use controller::operator::sandbox::{SandboxAction, SandboxCommand};
use controller::operator::{
    self, ControllerOptions, RunOptions, RunSettings, Settings, http, logging,
};
use controller::simulate::SimulateArgs;
use tokio::net::TcpListener;

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

#[derive(clap::Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    cloud: CloudOptions,
    #[command(flatten)]
    controller: ControllerOptions,
    #[command(flatten)]
    run: RunOptions,
}

/// The `CLUSTER_NAME` placeholder `deploy/`'s Deployment ships; `karpenter run` warns when
/// it was left unchanged.
const DEPLOYMENT_CLUSTER_NAME: &str = "my-cluster";

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

/// SIGTERM (what the kubelet sends to stop a pod) or Ctrl-C.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// `karpenter run`: validate, connect, build the cloud, serve `/metrics`, `/healthz` and
/// `/readyz`, run the controllers while leading, and stop on SIGTERM (releasing the Lease).
/// Exit codes: 0 stopped by a signal, 1 leadership lost or a server failed, 2 bad settings or
/// startup failure.
async fn run(args: RunArgs, settings: Settings, run: RunSettings) -> Result<ExitCode, String> {
    if settings.cluster_name == DEPLOYMENT_CLUSTER_NAME {
        tracing::warn!(
            cluster_name = %settings.cluster_name,
            "CLUSTER_NAME is still the deployment's placeholder; set it to this cluster's name \
             (instances are tagged with it and discovery matches it)"
        );
    }
    let config = kube::Config::infer()
        .await
        .map_err(|e| format!("reading the kubeconfig: {e}"))?;
    let api_server = cloud::ApiServer::from_config(&config);
    // The elector gets a client of its own, outside the rate limit, so controller bursts
    // cannot delay Lease renewals past the renew deadline.
    let lease_client =
        operator::client(config.clone()).map_err(|e| format!("connecting to the cluster: {e}"))?;
    let client = operator::rate_limited_client(config, run.qps, run.burst)
        .map_err(|e| format!("connecting to the cluster: {e}"))?;
    let version = match client.apiserver_version().await {
        Ok(v) => cloud::minor_version(&v.git_version),
        Err(e) => return Err(format!("reading the cluster's version: {e}")),
    };
    let clock = Arc::new(SystemClock);
    let cloud = cloud::build(
        &args.cloud,
        &settings.cluster_name,
        &api_server,
        &version,
        clock.clone(),
    )
    .await?
    .provider;
    let bind = |addr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|e| format!("listening on {addr}: {e}"))
    };
    let (metrics, probes) = (bind(run.metrics_addr).await?, bind(run.health_addr).await?);
    if let Some(le) = &run.leader_election {
        tracing::info!(lease = %format!("{}/{}", le.namespace, le.name), identity = %le.identity, "starting leader election");
    }
    let elector = run
        .leader_election
        .map(|cfg| operator::leader::Elector::new(lease_client, cfg));
    let mut op = operator::start_operator(client, cloud, clock, settings, elector);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopping = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let mut servers = tokio::task::JoinSet::new();
    servers.spawn(http::serve_metrics(
        metrics,
        Arc::clone(&op.ctx),
        op.leading(),
        stopping(),
    ));
    servers.spawn(http::serve_probes(
        probes,
        Arc::clone(&op.probes),
        op.ctx.state.clone(),
        stopping(),
    ));
    let code = tokio::select! {
        () = shutdown_signal() => {
            tracing::info!("shutting down");
            op.shutdown().await;
            ExitCode::SUCCESS
        }
        stopped = op.stopped() => {
            tracing::error!(reason = ?stopped, "controllers stopped; exiting");
            ExitCode::from(1)
        }
        Some(served) = servers.join_next() => {
            tracing::error!(result = ?served, "an HTTP server stopped; exiting");
            op.shutdown().await;
            ExitCode::from(1)
        }
    };
    let _ = stop_tx.send(true);
    while servers.join_next().await.is_some() {}
    Ok(code)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => {
            // Validated before the logger starts, so a bad LOG_LEVEL is refused, not ignored.
            let settings = args.controller.settings();
            let (settings, run_settings) = match (settings, args.run.settings(default_identity())) {
                (Ok(s), Ok(r)) => (s, r),
                (Err(e), _) | (_, Err(e)) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            match run_settings.log_format {
                LogFormat::Json => logging::init_json(&args.controller.log_level),
                LogFormat::Text => logging::init_text(&args.controller.log_level),
            }
            run(*args, settings, run_settings)
                .await
                .unwrap_or_else(|e| {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                })
        }
        Command::Sandbox(cmd) => match cmd.action {
            Some(SandboxAction::PublishAmi(args)) => {
                logging::init_text(&std::env::var("LOG_LEVEL").unwrap_or_else(|_| "warn".into()));
                operator::sandbox::publish::run(&args).await
            }
            None => {
                // Validated before the logger starts, as for `run` (the sandbox checks again).
                if let Err(e) = cmd.start.controller.settings() {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
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
