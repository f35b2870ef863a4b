//! kube-scheduler's scheduling queue (`pkg/scheduler/backend/queue/scheduling_queue.go`,
//! `backoff_queue.go`) as a pure data structure: pending pods wait in activeQ (ready to try),
//! backoffQ (failed recently, waiting out a per-pod exponential backoff) or the unschedulable
//! pool (rejected; waiting for a cluster event one of the rejecting plugins' queueing hints
//! says may help, KEP-4247, or for the periodic flush). Time comes in as an argument (the
//! store's clock), so tests move it instead of sleeping.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;

use super::hints::{ClusterEvent, pod_changed, queue, registers};
use super::unschedulable::Plugin;

/// A pod's queue key: `namespace/name`.
pub type PodKey = String;

/// The queue's timing, kube-scheduler's defaults unless a test says otherwise.
#[derive(Clone, Copy, Debug)]
pub struct QueueConfig {
    /// Backoff after the first failure (`podInitialBackoffSeconds`, 1 s); it doubles per
    /// failure.
    pub initial_backoff: SignedDuration,
    /// Longest backoff (`podMaxBackoffSeconds`, 10 s).
    pub max_backoff: SignedDuration,
    /// How long a pod may stay in the unschedulable pool before the periodic flush retries it
    /// without an event (`podMaxInUnschedulablePodsDuration`, 5 min).
    pub max_in_unschedulable: SignedDuration,
    /// How often that flush runs (`flushUnschedulablePodsLeftover`, every 30 s).
    pub flush_interval: SignedDuration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            initial_backoff: SignedDuration::from_secs(1),
            max_backoff: SignedDuration::from_secs(10),
            max_in_unschedulable: SignedDuration::from_mins(5),
            flush_interval: SignedDuration::from_secs(30),
        }
    }
}

/// Where a pod is in the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueState {
    /// In activeQ: popped by the next cycle.
    Active,
    /// In backoffQ until the given time.
    Backoff(Timestamp),
    /// In the unschedulable pool.
    Unschedulable,
    /// Popped; its attempt's outcome is not reported yet.
    InFlight,
}

/// activeQ's order (upstream `PrioritySort`): higher priority first, then older. The
/// creation time stands in for upstream's queue timestamp, so equal pods keep a stable order.
type ActiveKey = (Reverse<i32>, Option<Timestamp>, PodKey);

struct Entry {
    pod: Arc<Pod>,
    state: QueueState,
    /// Failed attempts (upstream `UnschedulableCount`).
    unschedulable_count: u32,
    /// Attempts in a row that ended in an error (binding failed): `ConsecutiveErrorsCount`.
    consecutive_errors: u32,
    /// When the pod last entered the queue or failed (upstream `QueuedPodInfo.Timestamp`).
    timestamp: Timestamp,
    /// The plugins that rejected its last attempt.
    rejectors: BTreeSet<Plugin>,
}

/// The three queues and the pods they hold; see the module doc.
pub struct SchedulingQueue {
    config: QueueConfig,
    pods: HashMap<PodKey, Entry>,
    active: BTreeSet<ActiveKey>,
    backoff: BTreeSet<(Timestamp, PodKey)>,
    /// The unschedulable pool, by rejecting plugin; pods no plugin rejected are never kept
    /// here (they back off instead).
    pool: BTreeMap<Plugin, BTreeSet<PodKey>>,
    pool_len: usize,
    /// Queued pods with `status.nominatedNodeName`: they hold room on that node.
    nominated: BTreeSet<PodKey>,
    /// A nomination was released since the last [`SchedulingQueue::pop_all`].
    released: bool,
    next_flush: Option<Timestamp>,
}

/// `namespace/name` of a pod.
pub fn pod_key(pod: &Pod) -> PodKey {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

fn active_key(key: &str, pod: &Pod) -> ActiveKey {
    let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    (Reverse(priority), created, key.to_string())
}

fn is_nominated(pod: &Pod) -> bool {
    nomination(pod).is_some()
}

/// The node `pod` is nominated to (`status.nominatedNodeName`), if set and not empty.
fn nomination(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// The plugins whose rejections a nominated pod's held room can cause: its requests
/// (NodeResourcesFit) and host ports (NodePorts) are taken on its node for every other pod.
const HELD_BY_NOMINATIONS: [Plugin; 2] = [Plugin::NodeResourcesFit, Plugin::NodePorts];

impl SchedulingQueue {
    /// An empty queue with `config`'s timing.
    pub fn new(config: QueueConfig) -> SchedulingQueue {
        SchedulingQueue {
            config,
            pods: HashMap::new(),
            active: BTreeSet::new(),
            backoff: BTreeSet::new(),
            pool: BTreeMap::new(),
            pool_len: 0,
            nominated: BTreeSet::new(),
            released: false,
            next_flush: None,
        }
    }

    /// Where the pod with `key` is, if queued.
    pub fn state(&self, key: &str) -> Option<QueueState> {
        self.pods.get(key).map(|e| e.state)
    }

    /// How many pods wait in (activeQ, backoffQ, the unschedulable pool).
    pub fn lengths(&self) -> (usize, usize, usize) {
        (self.active.len(), self.backoff.len(), self.pool_len)
    }

    /// The backoff after `count` failures: `initial * 2^(count-1)`, at most the maximum
    /// (`backoffQueue.calculateBackoffDuration`); none before the first failure.
    pub fn backoff_duration(&self, count: u32) -> SignedDuration {
        if count == 0 {
            return SignedDuration::ZERO;
        }
        let mut d = self.config.initial_backoff;
        for _ in 1..count {
            if d >= self.config.max_backoff {
                break;
            }
            d = d.checked_mul(2).unwrap_or(self.config.max_backoff);
        }
        d.min(self.config.max_backoff)
    }

    /// A pending pod appeared (upstream `Add`): into activeQ.
    pub fn add(&mut self, pod: Arc<Pod>, now: Timestamp) {
        let key = pod_key(&pod);
        self.delete(&key);
        if is_nominated(&pod) {
            self.nominated.insert(key.clone());
        }
        self.active.insert(active_key(&key, &pod));
        self.pods.insert(
            key,
            Entry {
                pod,
                state: QueueState::Active,
                unschedulable_count: 0,
                consecutive_errors: 0,
                timestamp: now,
                rejectors: BTreeSet::new(),
            },
        );
    }

    /// A queued pod changed (upstream `Update`): the new version is kept, and a pod in the
    /// unschedulable pool whose spec, labels or annotations changed is moved to backoffQ or
    /// activeQ; status-only changes (the scheduler's own condition) leave it where it is.
    pub fn update(&mut self, new: Arc<Pod>, now: Timestamp) {
        let key = pod_key(&new);
        let Some(entry) = self.pods.get_mut(&key) else {
            self.add(new, now);
            return;
        };
        let changed = pod_changed(&entry.pod, &new);
        if entry.state == QueueState::Active {
            self.active.remove(&active_key(&key, &entry.pod));
            self.active.insert(active_key(&key, &new));
        }
        let released = nomination(&entry.pod).is_some_and(|n| nomination(&new) != Some(n));
        if is_nominated(&new) {
            self.nominated.insert(key.clone());
        } else {
            self.nominated.remove(&key);
        }
        entry.pod = new;
        if changed && entry.state == QueueState::Unschedulable {
            self.requeue(&key, now);
        }
        if released {
            self.released = true;
        }
    }

    /// The pod is no longer pending (deleted, bound, gated): it leaves every queue. The room
    /// its nomination held is released at the next [`Self::pop_all`]
    /// ([`Self::nomination_released`]).
    pub fn delete(&mut self, key: &str) {
        let Some(entry) = self.pods.remove(key) else {
            return;
        };
        if self.nominated.remove(key) {
            self.released = true;
        }
        match entry.state {
            QueueState::Active => {
                self.active.remove(&active_key(key, &entry.pod));
            }
            QueueState::Backoff(at) => {
                self.backoff.remove(&(at, key.to_string()));
            }
            QueueState::Unschedulable => self.leave_pool(key, &entry.rejectors),
            QueueState::InFlight => {}
        }
    }

    /// Every pod ready for a cycle, in activeQ's order, after moving the pods whose backoff
    /// has ended (`flushBackoffQCompleted`) and, at most every flush interval, the pods
    /// unschedulable for longer than the maximum (`flushUnschedulablePodsLeftover`). Each pod
    /// popped is in flight until [`Self::done`], [`Self::unschedulable`] or [`Self::error`].
    /// The scheduler places them in this order, each seeing the ones before it as assumed
    /// (upstream's one pod per cycle with the assume cache).
    pub fn pop_all(&mut self, now: Timestamp) -> Vec<Arc<Pod>> {
        if std::mem::take(&mut self.released) {
            self.nomination_released(now);
        }
        self.flush(now);
        let mut out = Vec::with_capacity(self.active.len());
        for (_, _, key) in std::mem::take(&mut self.active) {
            if let Some(e) = self.pods.get_mut(&key) {
                e.state = QueueState::InFlight;
                out.push(Arc::clone(&e.pod));
            }
        }
        out
    }

    fn flush(&mut self, now: Timestamp) {
        while let Some((at, key)) = self.backoff.first().cloned() {
            if at > now {
                break;
            }
            self.backoff.pop_first();
            if let Some(e) = self.pods.get_mut(&key) {
                e.state = QueueState::Active;
                self.active.insert(active_key(&key, &e.pod));
            }
        }
        if self.next_flush.is_some_and(|t| t > now) {
            return;
        }
        self.next_flush = now.checked_add(self.config.flush_interval).ok();
        let stale: Vec<PodKey> = self
            .pool
            .values()
            .flatten()
            .filter(|k| {
                self.pods.get(*k).is_some_and(|e| {
                    e.state == QueueState::Unschedulable
                        && now.duration_since(e.timestamp) > self.config.max_in_unschedulable
                })
            })
            .cloned()
            .collect();
        for key in stale {
            self.requeue(&key, now);
        }
    }

    /// The pod was bound: it leaves the queue.
    pub fn done(&mut self, key: &str) {
        self.delete(key);
    }

    /// The attempt found no node; `rejectors` are the plugins that rejected the pod
    /// (`AddUnschedulableIfNotPresent`). It waits in the unschedulable pool for an event its
    /// rejectors' hints accept; with no rejector (no nodes, a spec that cannot be evaluated)
    /// it backs off instead, since no event is known to help.
    pub fn unschedulable(&mut self, key: &str, rejectors: BTreeSet<Plugin>, now: Timestamp) {
        let Some(e) = self.pods.get_mut(key) else {
            return;
        };
        if e.state != QueueState::InFlight {
            return;
        }
        e.unschedulable_count += 1;
        e.consecutive_errors = 0;
        e.timestamp = now;
        if rejectors.is_empty() {
            e.rejectors.clear();
            self.enqueue_after_backoff(key, now);
            return;
        }
        for p in &rejectors {
            self.pool.entry(*p).or_default().insert(key.to_string());
        }
        e.rejectors = rejectors;
        e.state = QueueState::Unschedulable;
        self.pool_len += 1;
    }

    /// The attempt failed with an error (the binding was refused): back off and retry.
    pub fn error(&mut self, key: &str, now: Timestamp) {
        let Some(e) = self.pods.get_mut(key) else {
            return;
        };
        if e.state != QueueState::InFlight {
            return;
        }
        e.consecutive_errors += 1;
        e.timestamp = now;
        self.enqueue_after_backoff(key, now);
    }

    /// A cluster event (`MoveAllToActiveOrBackoffQueue`): each pod in the unschedulable pool
    /// whose rejecting plugins' hints say the event may help moves to backoffQ, or activeQ if
    /// its backoff is over. Only pods rejected by a plugin registered for the event are
    /// looked at. Returns how many pods moved.
    pub fn on_event(&mut self, event: &ClusterEvent, now: Timestamp) -> usize {
        let mut moving: BTreeSet<PodKey> = BTreeSet::new();
        for (plugin, keys) in &self.pool {
            if !registers(*plugin, event) {
                continue;
            }
            for key in keys {
                if moving.contains(key) {
                    continue;
                }
                if let Some(e) = self.pods.get(key)
                    && queue(*plugin, &e.pod, event)
                {
                    moving.insert(key.clone());
                }
            }
        }
        let moved = moving.len();
        for key in moving {
            self.requeue(&key, now);
        }
        moved
    }

    /// A nomination was taken back, moved to another node, or its pod left the queue (bound,
    /// deleted): the room it held on its node is free. Pods NodeResourcesFit or NodePorts
    /// rejected may have been rejected for that room alone, and none of those plugins' events
    /// (a node added, allocatable changed, a pod deleted) says so, so they move to backoffQ or
    /// activeQ now instead of waiting for the periodic flush. Coarser than it could be (every
    /// such pod, whatever node it was rejected on): a needless retry costs one attempt, a
    /// missed one five minutes.
    pub fn nomination_released(&mut self, now: Timestamp) {
        let waiting: BTreeSet<PodKey> = HELD_BY_NOMINATIONS
            .iter()
            .filter_map(|p| self.pool.get(p))
            .flatten()
            .cloned()
            .collect();
        for key in waiting {
            self.requeue(&key, now);
        }
    }

    /// Queued pods, not in flight, that hold a nomination (their room is kept on that node).
    pub fn nominated(&self) -> Vec<Arc<Pod>> {
        self.nominated
            .iter()
            .filter_map(|k| self.pods.get(k))
            .filter(|e| e.state != QueueState::InFlight)
            .map(|e| Arc::clone(&e.pod))
            .collect()
    }

    /// When the queue next has work without an event: the first backoff to end, or the next
    /// leftover flush while the pool holds pods.
    pub fn next_wakeup(&self) -> Option<Timestamp> {
        let backoff = self.backoff.first().map(|(t, _)| *t);
        let flush = self.next_flush.filter(|_| self.pool_len > 0);
        match (backoff, flush) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Out of the pool, into backoffQ or activeQ.
    fn requeue(&mut self, key: &str, now: Timestamp) {
        let Some(e) = self.pods.get(key) else {
            return;
        };
        if e.state != QueueState::Unschedulable {
            return;
        }
        let rejectors = e.rejectors.clone();
        self.leave_pool(key, &rejectors);
        self.enqueue_after_backoff(key, now);
    }

    fn leave_pool(&mut self, key: &str, rejectors: &BTreeSet<Plugin>) {
        for p in rejectors {
            if let Some(keys) = self.pool.get_mut(p) {
                keys.remove(key);
            }
        }
        self.pool_len = self.pool_len.saturating_sub(1);
    }

    fn enqueue_after_backoff(&mut self, key: &str, now: Timestamp) {
        let Some(e) = self.pods.get(key) else {
            return;
        };
        let count = if e.consecutive_errors > 0 {
            e.consecutive_errors
        } else {
            e.unschedulable_count
        };
        let until = e
            .timestamp
            .checked_add(self.backoff_duration(count))
            .unwrap_or(e.timestamp);
        let state = if until > now {
            self.backoff.insert((until, key.to_string()));
            QueueState::Backoff(until)
        } else {
            self.active.insert(active_key(key, &e.pod));
            QueueState::Active
        };
        if let Some(e) = self.pods.get_mut(key) {
            e.state = state;
        }
    }
}
