//! One replica of the operator: its caches always run; its controllers run only while it
//! holds the leader Lease (upstream: controller-runtime's manager with leader election), and
//! stop, without releasing anything, when it is killed, or, releasing the Lease, when it shuts
//! down.

use std::sync::Arc;

use kube::Client;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::cloudprovider::CloudProvider;
use crate::controllers::{start_caches, start_controllers};
use crate::runtime::{Context, Settings, http, leader};
use karpenter_core::clock::Clock;

/// Tasks that are aborted together when dropped, watched by `/healthz` while they run.
struct TaskSet {
    probes: Arc<http::Probes>,
    tasks: Vec<(u64, JoinHandle<()>)>,
}

impl TaskSet {
    fn new(probes: &Arc<http::Probes>) -> TaskSet {
        TaskSet {
            probes: Arc::clone(probes),
            tasks: Vec::new(),
        }
    }

    fn adopt(&mut self, name: &str, task: JoinHandle<()>) {
        let key = self.probes.watch(name, task.abort_handle());
        self.tasks.push((key, task));
    }

    /// Stop watching the tasks and abort them; returns their handles.
    fn abort(&mut self) -> Vec<JoinHandle<()>> {
        let tasks = std::mem::take(&mut self.tasks);
        let keys: Vec<u64> = tasks.iter().map(|(k, _)| *k).collect();
        self.probes.forget(&keys);
        tasks
            .into_iter()
            .map(|(_, t)| {
                t.abort();
                t
            })
            .collect()
    }

    /// Abort every task and wait until each has stopped (so none writes afterwards).
    async fn stop(mut self) {
        for t in self.abort() {
            let _ = t.await;
        }
    }
}

impl Drop for TaskSet {
    fn drop(&mut self) {
        self.abort();
    }
}

/// Why an operator stopped acting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// [`Operator::shutdown`] was called: controllers stopped, the Lease released.
    Shutdown,
    /// Leadership was lost; the controllers were stopped before the Lease could expire.
    /// `karpenter run` exits non-zero, as upstream does, and the pod restarts as a standby.
    LostLeadership(leader::Lost),
    /// The supervising task panicked, or the operator was dropped without a shutdown.
    Failed(String),
}

/// A running operator: caches always, controllers only while it leads (or always, without
/// leader election). Dropping it stops everything at once without releasing the Lease, as a
/// killed process does; [`Operator::shutdown`] stops gracefully.
pub struct Operator {
    /// The shared context (caches, client, cloud, metrics).
    pub ctx: Arc<Context>,
    /// What `/healthz` watches.
    pub probes: Arc<http::Probes>,
    leading: watch::Receiver<bool>,
    stop: Option<oneshot::Sender<()>>,
    supervisor: Option<JoinHandle<Stopped>>,
    outcome: Option<Stopped>,
    _caches: Caches,
}

/// The cache tasks, aborted when dropped.
struct Caches(Vec<tokio::task::AbortHandle>);

impl Drop for Caches {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Start the caches at once and the controllers once this replica leads: with `elector`,
/// after it acquires the Lease (and until it loses it); without, immediately.
///
/// The elector should have a client of its own without the client-side rate limit (build it
/// with [`crate::runtime::client`]): Lease renewals queued behind a burst of controller
/// requests could miss the renew deadline and depose a healthy leader.
pub fn start_operator(
    client: Client,
    cloud: Arc<dyn CloudProvider>,
    clock: Arc<dyn Clock>,
    settings: Settings,
    elector: Option<leader::Elector>,
) -> Operator {
    let probes = Arc::new(http::Probes::default());
    let (ctx, watches) = start_caches(client, cloud, clock, settings);
    let caches = Caches(watches.iter().map(JoinHandle::abort_handle).collect());
    for w in watches {
        // One of the cache tasks ends by design (it publishes "synced" once), so a cache task
        // is unhealthy only when it panics; the watches themselves retry forever.
        let probes = Arc::clone(&probes);
        tokio::spawn(async move {
            if let Err(e) = w.await
                && e.is_panic()
            {
                tracing::error!(error = %e, "a cluster-state watch panicked");
                probes.fail("cluster-state");
            }
        });
    }
    let (leading_tx, leading) = watch::channel(false);
    let (stop_tx, stop) = oneshot::channel();
    let (key_tx, key_rx) = oneshot::channel();
    let name = if elector.is_some() {
        "leader-election"
    } else {
        "operator"
    };
    let supervisor = tokio::spawn(supervise(
        Arc::clone(&ctx),
        Arc::clone(&probes),
        elector,
        leading_tx,
        Shutdown {
            stop,
            probe: key_rx,
        },
    ));
    // The supervisor forgets this key when it is told to stop, so a graceful shutdown does
    // not fail `/healthz` while it is under way or after it finished.
    let _ = key_tx.send(probes.watch(name, supervisor.abort_handle()));
    Operator {
        ctx,
        probes,
        leading,
        stop: Some(stop_tx),
        supervisor: Some(supervisor),
        outcome: None,
        _caches: caches,
    }
}

/// How the supervisor learns it should stop, and its own `/healthz` key to forget then.
struct Shutdown {
    stop: oneshot::Receiver<()>,
    probe: oneshot::Receiver<u64>,
}

async fn supervise(
    ctx: Arc<Context>,
    probes: Arc<http::Probes>,
    elector: Option<leader::Elector>,
    leading: watch::Sender<bool>,
    shutdown: Shutdown,
) -> Stopped {
    let Shutdown {
        mut stop,
        probe: probe_key,
    } = shutdown;
    let stopping = || async {
        if let Ok(key) = probe_key.await {
            probes.forget(&[key]);
        }
    };
    let spawn = || {
        let mut set = TaskSet::new(&probes);
        for (name, task) in start_controllers(&ctx) {
            set.adopt(name, task);
        }
        set
    };
    // The operator dropped without a shutdown (a kill): stop at once, release nothing.
    let dropped = || Stopped::Failed("the operator was dropped".into());
    let Some(mut elector) = elector else {
        let controllers = spawn();
        leading.send_replace(true);
        if stop.await.is_err() {
            return dropped();
        }
        stopping().await;
        controllers.stop().await;
        leading.send_replace(false);
        return Stopped::Shutdown;
    };
    tokio::select! {
        () = elector.acquire() => {}
        r = &mut stop => {
            if r.is_err() {
                return dropped();
            }
            stopping().await;
            return Stopped::Shutdown;
        }
    }
    let controllers = spawn();
    leading.send_replace(true);
    let outcome = tokio::select! {
        lost = elector.hold() => Stopped::LostLeadership(lost),
        r = &mut stop => {
            if r.is_err() {
                return dropped();
            }
            stopping().await;
            Stopped::Shutdown
        }
    };
    controllers.stop().await;
    leading.send_replace(false);
    match &outcome {
        Stopped::Shutdown => {
            // Bounded, so an unreachable API server cannot hang the shutdown: unreleased,
            // the Lease simply expires.
            let limit = elector.config().renew_deadline;
            match tokio::time::timeout(limit, elector.release()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "releasing the leader lease"),
                Err(_) => tracing::warn!(
                    timeout = ?limit,
                    "releasing the leader lease did not finish in time; it will expire"
                ),
            }
        }
        Stopped::LostLeadership(why) => {
            tracing::error!(reason = %why, "leader election lost; controllers stopped");
        }
        Stopped::Failed(_) => {}
    }
    outcome
}

impl Operator {
    /// Whether this replica's controllers are running (it leads).
    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    /// Changes of [`Operator::is_leader`].
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Wait until the operator stops acting by itself (leadership lost) and say why. Waits
    /// forever while it keeps leading or standing by.
    pub async fn stopped(&mut self) -> Stopped {
        if let Some(outcome) = &self.outcome {
            return outcome.clone();
        }
        let outcome = match self.supervisor.as_mut() {
            Some(task) => match task.await {
                Ok(s) => s,
                Err(e) => Stopped::Failed(e.to_string()),
            },
            None => std::future::pending().await,
        };
        self.supervisor = None;
        self.outcome = Some(outcome.clone());
        outcome
    }

    /// Stop gracefully: abort the controllers, wait until they stopped, release the Lease
    /// (a standby takes over at its next retry), then stop the caches.
    pub async fn shutdown(mut self) -> Stopped {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.stopped().await
    }

    /// Stop at once without releasing anything, as a crash does (same as dropping).
    pub fn kill(self) {}
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Some(task) = &self.supervisor {
            task.abort();
        }
    }
}
