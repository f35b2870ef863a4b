//! `karpenter run`: the operator against a real cluster. Validates its settings, connects,
//! builds the cloud provider, serves `/metrics`, `/healthz` and `/readyz`, runs the controllers
//! while this replica leads (`controller::operator`), and stops on SIGTERM, releasing the Lease.

use std::process::ExitCode;
use std::sync::Arc;

use controller::cloudprovider::build::{self as cloud, CloudOptions};
use controller::runtime::{self, ControllerOptions, RunOptions, RunSettings, Settings, http};
use karpenter_core::clock::SystemClock;

/// Flags of `karpenter run`: the cloud provider, the controller settings shared with the
/// sandbox, and the operator's own (ports, leader election, client rate limits, log format).
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// `--cloud-provider sim|aws` and its endpoints.
    #[command(flatten)]
    pub cloud: CloudOptions,
    /// Settings shared with the sandbox: cluster name, batch windows, timeouts, feature gates,
    /// log level.
    #[command(flatten)]
    pub controller: ControllerOptions,
    /// The operator process's own: ports, bind address, leader election, client rate limits,
    /// log format.
    #[command(flatten)]
    pub run: RunOptions,
}

impl RunArgs {
    /// What `karpenter run` refuses to guess, checked before anything touches a cluster: the
    /// cloud provider (a simulated cloud pointed at a real cluster would garbage-collect its
    /// NodeClaims, finding none of their instances) and the cluster name (instances are tagged
    /// with it; upstream requires it too).
    ///
    /// Errors: one line per missing setting, naming the flag and the environment variable.
    pub fn check_explicit(&self) -> Result<(), String> {
        let mut missing = Vec::new();
        if self.cloud.cloud_provider.is_none() {
            missing.push(
                "no cloud provider: set --cloud-provider aws (or CLOUD_PROVIDER=aws);                  `sim` launches nothing real and is meant for `karpenter sandbox`",
            );
        }
        if self
            .controller
            .cluster_name
            .as_deref()
            .is_none_or(|n| n.trim().is_empty())
        {
            missing.push(
                "no cluster name: set --cluster-name NAME (or CLUSTER_NAME=NAME) to the EKS                  cluster's name; instances are tagged with it and discovery tags match it",
            );
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(missing.join("\nerror: "))
        }
    }
}

/// The `CLUSTER_NAME` placeholder `deploy/`'s Deployment ships; `karpenter run` warns when
/// it was left unchanged.
const DEPLOYMENT_CLUSTER_NAME: &str = "my-cluster";

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
pub async fn run(
    args: RunArgs,
    mut settings: Settings,
    run: RunSettings,
) -> Result<ExitCode, String> {
    // The disruption history lives beside the Lease, in Karpenter's own namespace.
    settings.system_namespace = run.namespace.clone();
    if settings.cluster_name == DEPLOYMENT_CLUSTER_NAME {
        tracing::warn!(
            cluster_name = %settings.cluster_name,
            "CLUSTER_NAME is still the deployment's placeholder; set it to this cluster's name \
             (instances are tagged with it and discovery matches it)"
        );
    }
    let config = crate::kubeconfig::client_config(None)
        .await
        .map_err(|e| e.to_string())?;
    let api_server = cloud::ApiServer::from_config(&config);
    // The elector gets a client of its own, outside the rate limit, so controller bursts
    // cannot delay Lease renewals past the renew deadline.
    let lease_client =
        runtime::client(config.clone()).map_err(|e| format!("connecting to the cluster: {e}"))?;
    let client = runtime::rate_limited_client(config, run.qps, run.burst)
        .map_err(|e| format!("connecting to the cluster: {e}"))?;
    let version = match client.apiserver_version().await {
        Ok(v) => cloud::minor_version(&v.git_version),
        Err(e) => return Err(format!("reading the cluster's version: {e}")),
    };
    let mut api_server = api_server;
    api_server.kube_dns_ip = kube_dns_ip(&client).await;
    let clock = Arc::new(SystemClock);
    let mut cloud_options = args.cloud.clone();
    cloud_options.reserved_capacity = settings
        .feature_gates
        .enabled(controller::runtime::options::FeatureGate::ReservedCapacity);
    let cloud = cloud::build(
        &cloud_options,
        &settings.cluster_name,
        &api_server,
        &version,
        clock.clone(),
    )
    .await?
    .provider;
    let (metrics, probes) = http::listen(&run).await?;
    if let Some(le) = &run.leader_election {
        tracing::info!(lease = %format!("{}/{}", le.namespace, le.name), identity = %le.identity, "starting leader election");
    }
    let elector = run
        .leader_election
        .map(|cfg| runtime::leader::Elector::new(lease_client, cfg));
    let mut op = controller::operator::start_operator(client, cloud, clock, settings, elector);
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

/// The `kube-dns` Service's cluster IP in `kube-system` (upstream `operator.KubeDNSIP`): the
/// cluster DNS address nodes get. `None`, logged, when the Service is missing, has no cluster
/// IP or cannot be read: nodes then get the address the service CIDR implies.
async fn kube_dns_ip(client: &kube::Client) -> Option<String> {
    use k8s_openapi::api::core::v1::Service;
    let services: kube::Api<Service> = kube::Api::namespaced(client.clone(), "kube-system");
    match services.get_opt("kube-dns").await {
        Ok(Some(svc)) => {
            let ip = svc
                .spec
                .and_then(|s| s.cluster_ip)
                .filter(|ip| ip.parse::<std::net::IpAddr>().is_ok());
            if ip.is_none() {
                tracing::warn!(
                    "the kube-dns Service has no cluster IP; nodes get the DNS address the service CIDR implies"
                );
            }
            ip
        }
        Ok(None) => {
            tracing::info!(
                "no kube-dns Service in kube-system; nodes get the DNS address the service CIDR implies"
            );
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "reading the kube-dns Service; nodes get the DNS address the service CIDR implies");
            None
        }
    }
}
