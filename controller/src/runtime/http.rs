//! The operator's HTTP endpoints, on the ports upstream Karpenter's chart probes and scrapes:
//! `GET /metrics` (Prometheus scrape, `METRICS_PORT`, 8080) and `GET /healthz` (liveness) and
//! `GET /readyz` (readiness) (`HEALTH_PROBE_PORT`, 8081).
//!
//! Liveness answers 200 while every task the operator started (watches, elector, controllers)
//! is running, and 500 naming the ones that stopped, so the kubelet restarts a replica whose
//! controller died. Readiness answers 200 once the cluster-state caches have synced; standbys
//! (which keep their caches warm) are ready too, as upstream's are.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use futures::FutureExt;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use super::Context;
use super::options::RunSettings;
use crate::state::ClusterState;

/// The content type of the OpenMetrics text prometheus-client encodes.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The tasks `/healthz` watches: named, and forgotten again when the operator stops them on
/// purpose (a standby's controllers are not started; a stopped leader's are aborted).
#[derive(Debug, Default)]
pub struct Probes {
    next: AtomicU64,
    tasks: Mutex<BTreeMap<u64, (String, AbortHandle)>>,
    failed: Mutex<Vec<String>>,
}

impl Probes {
    /// Watch `task` under `name`; returns a key for [`Probes::forget`].
    pub fn watch(&self, name: &str, task: AbortHandle) -> u64 {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(key, (name.to_owned(), task));
        key
    }

    /// Stop watching the tasks with these keys.
    pub fn forget(&self, keys: &[u64]) {
        let mut tasks = self.lock();
        for k in keys {
            tasks.remove(k);
        }
    }

    /// Report a task that failed (for tasks allowed to finish, which [`Probes::watch`] would
    /// report as soon as they end): `/healthz` fails from now on.
    pub fn fail(&self, name: &str) {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(name.to_owned());
    }

    /// The names of watched tasks that have finished (returned or panicked) and of tasks
    /// reported failed, sorted.
    pub fn dead(&self) -> Vec<String> {
        let mut dead: Vec<String> = self
            .lock()
            .values()
            .filter(|(_, t)| t.is_finished())
            .map(|(n, _)| n.clone())
            .collect();
        dead.extend(
            self.failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned(),
        );
        dead.sort();
        dead.dedup();
        dead
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, (String, AbortHandle)>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether every cache has completed its initial list (without waiting).
pub fn synced(state: &ClusterState) -> bool {
    matches!(state.wait_synced().now_or_never(), Some(Ok(())))
}

#[derive(Clone)]
struct MetricsState {
    ctx: Arc<Context>,
    leading: watch::Receiver<bool>,
}

async fn metrics(State(m): State<MetricsState>) -> impl IntoResponse {
    let leading = *m.leading.borrow();
    let ctx = m.ctx;
    // Refreshing the gauges walks every cached object: off the async workers.
    let encoded =
        tokio::task::spawn_blocking(move || ctx.metrics.encode(&ctx.state, leading)).await;
    match encoded {
        Ok(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
            text,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("encoding the metrics failed: {e}\n"),
        ),
    }
}

/// The router of `GET /metrics`. `leading` is the replica's
/// [`crate::operator::Operator::leading`]: a standby exports its counters but not the
/// cluster-state gauges (see [`super::metrics::Metrics::encode`]).
pub fn metrics_router(ctx: Arc<Context>, leading: watch::Receiver<bool>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(MetricsState { ctx, leading })
}

#[derive(Clone)]
struct ProbeState {
    probes: Arc<Probes>,
    state: ClusterState,
}

async fn healthz(State(p): State<ProbeState>) -> (StatusCode, String) {
    let dead = p.probes.dead();
    if dead.is_empty() {
        (StatusCode::OK, "ok\n".into())
    } else {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("stopped: {}\n", dead.join(", ")),
        )
    }
}

async fn readyz(State(p): State<ProbeState>) -> (StatusCode, &'static str) {
    if synced(&p.state) {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "cluster state not synced yet\n",
        )
    }
}

/// The router of `GET /healthz` and `GET /readyz`.
pub fn probes_router(probes: Arc<Probes>, state: ClusterState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(ProbeState { probes, state })
}

/// Bind the listeners of `karpenter run`'s two servers: `/metrics` on
/// [`RunSettings::metrics_addr`] (`BIND_ADDRESS`:`METRICS_PORT`) and the probes on
/// [`RunSettings::health_addr`] (`BIND_ADDRESS`:`HEALTH_PROBE_PORT`), in that order.
///
/// Errors: an address cannot be bound; the message names it.
pub async fn listen(run: &RunSettings) -> Result<(TcpListener, TcpListener), String> {
    let bind = |addr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|e| format!("listening on {addr}: {e}"))
    };
    Ok((bind(run.metrics_addr).await?, bind(run.health_addr).await?))
}

/// Serve `router` on `listener` until `shutdown` completes (then finish in-flight requests).
/// Tests bind `127.0.0.1:0` and read the port from the listener.
///
/// Errors: accepting connections failed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Serve `GET /metrics` for `ctx` on `listener` until `shutdown`; `leading` as for
/// [`metrics_router`].
///
/// Errors: as [`serve`].
pub async fn serve_metrics(
    listener: TcpListener,
    ctx: Arc<Context>,
    leading: watch::Receiver<bool>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve(listener, metrics_router(ctx, leading), shutdown).await
}

/// Serve `GET /healthz` and `GET /readyz` on `listener` until `shutdown`.
///
/// Errors: as [`serve`].
pub async fn serve_probes(
    listener: TcpListener,
    probes: Arc<Probes>,
    state: ClusterState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve(listener, probes_router(probes, state), shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn healthz_names_the_tasks_that_stopped() {
        let probes = Probes::default();
        let alive = tokio::spawn(std::future::pending::<()>());
        let done = tokio::spawn(async {});
        probes.watch("provisioner", alive.abort_handle());
        let key = probes.watch("disruption", done.abort_handle());
        let _ = done.await;
        assert_eq!(probes.dead(), vec!["disruption".to_owned()]);
        probes.forget(&[key]);
        assert!(probes.dead().is_empty());
        alive.abort();
        let _ = alive.await;
        assert_eq!(probes.dead(), vec!["provisioner".to_owned()]);
        probes.fail("cluster-state");
        assert_eq!(
            probes.dead(),
            vec!["cluster-state".to_owned(), "provisioner".to_owned()]
        );
    }
}
