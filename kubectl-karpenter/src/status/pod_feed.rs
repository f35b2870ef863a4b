//! The pods `status --watch` sums on each node, kept up to date by one watch instead of a list
//! of every pod on each refresh: kube's reflector over the pods that are not Succeeded or Failed
//! (the same field selector the one-off read lists with). The watcher lists once, then follows
//! the watch from that resourceVersion; when the server answers 410 Gone (the version is too
//! old) it lists again, and it backs off and retries after any other error. Until the first list
//! has completed, or while the watch is failing, [`PodFeed::pods`] says so and the caller lists
//! the pods itself (so a failure shows as the usual warning instead of numbers going stale).

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::task::JoinHandle;

/// Pods kube-scheduler counts on their nodes: the phases it leaves out, left out by the server
/// (a field selector), for the watch here and the list `status` makes without it.
pub const ACTIVE_PODS: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// The state of the watch, shared with the task that drives it.
#[derive(Debug, Default)]
struct Health {
    /// The first list has completed (the store holds every pod).
    listed: bool,
    /// The last error of the watch, until an event arrives after it.
    failing: Option<String>,
}

/// A running pod watch; dropping it stops the watch.
pub struct PodFeed {
    store: Store<Pod>,
    health: Arc<Mutex<Health>>,
    task: JoinHandle<()>,
}

impl PodFeed {
    /// Starts watching the active pods of every namespace through `client` (on the tokio
    /// runtime; the first list runs in the background).
    pub fn start(client: Client) -> PodFeed {
        let api: Api<Pod> = Api::all(client);
        let (store, writer) = reflector::store();
        let health = Arc::new(Mutex::new(Health::default()));
        let shared = Arc::clone(&health);
        let config = watcher::Config::default().fields(ACTIVE_PODS);
        let events = watcher(api, config).default_backoff().reflect(writer);
        let task = tokio::spawn(events.for_each(move |event| {
            if let Ok(mut h) = shared.lock() {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        h.listed = true;
                        h.failing = None;
                    }
                    Ok(_) => h.failing = None,
                    Err(e) => h.failing = Some(e.to_string()),
                }
            }
            std::future::ready(())
        }));
        PodFeed {
            store,
            health,
            task,
        }
    }

    /// The pods as the watch has them now (shared with its store, not copied), or `None` while
    /// the first list has not completed or the watch is failing (list them instead).
    pub fn pods(&self) -> Option<Vec<Arc<Pod>>> {
        let usable = self
            .health
            .lock()
            .is_ok_and(|h| h.listed && h.failing.is_none());
        if !usable {
            return None;
        }
        Some(self.store.state())
    }
}

impl Drop for PodFeed {
    fn drop(&mut self) {
        self.task.abort();
    }
}
