//! Leader election through a `coordination.k8s.io/v1` Lease, as upstream Karpenter elects one
//! active replica (controller-runtime's Lease lock): the holder writes its identity and renews
//! `renewTime` every retry period; a standby takes the Lease once it has seen the same record
//! unchanged for a whole lease duration; a leader that cannot renew within its renew deadline
//! gives up before its Lease can expire, so two replicas never act at once.
//!
//! Every write is a replace carrying the `resourceVersion` read just before (optimistic
//! concurrency): of two replicas racing for a free Lease, the API server accepts one write and
//! answers 409 Conflict to the other. Expiry is judged on this replica's monotonic clock from
//! when it last saw the record change, never by comparing another node's `renewTime` with the
//! local wall clock, so clock skew between nodes cannot elect two leaders (client-go's rule).
//!
//! This is written on `Api<Lease>` rather than taken from a crate: `kube-lease-manager` (the
//! one that supports kube 5) excludes concurrent acquirers through server-side-apply field
//! ownership conflicts and has no renew deadline.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::time::Instant;

/// Where and how to elect: the Lease, this replica's identity, and the timings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Lease name (upstream: `karpenter-leader-election`).
    pub name: String,
    /// Lease namespace (upstream: the pod's namespace).
    pub namespace: String,
    /// This replica's `holderIdentity`; unique per process.
    pub identity: String,
    /// How long a Lease stays valid after its last renewal (controller-runtime default 15s).
    pub lease_duration: Duration,
    /// A leader that has not renewed for this long stops leading (default 10s); shorter than
    /// the lease duration so it stops before a standby may take over.
    pub renew_deadline: Duration,
    /// How often the leader renews and a standby retries (default 2s).
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// The Lease `namespace/name` held as `identity`, with controller-runtime's timings
    /// (lease 15s, renew deadline 10s, retry period 2s).
    pub fn new(name: &str, namespace: &str, identity: &str) -> LeaseConfig {
        LeaseConfig {
            name: name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// The Lease replicas elect a leader through, unless `LEADER_ELECTION_NAME` says otherwise
/// (upstream's chart: `karpenter-leader-election`).
pub const DEFAULT_LEASE_NAME: &str = "karpenter-leader-election";

/// The Lease's namespace outside a pod, unless `LEADER_ELECTION_NAMESPACE` says otherwise.
pub const DEFAULT_LEASE_NAMESPACE: &str = "kube-system";

/// This process's identity in the Lease: the host (pod) name and a random suffix, so a
/// restarted pod with the same name is a new holder (controller-runtime: `hostname_uuid`).
pub fn default_identity() -> String {
    let host = hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "karpenter".into());
    format!("{host}_{:016x}", rand::random::<u64>())
}

/// Why a leader stopped leading.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Lost {
    /// Another replica holds the Lease (it was taken over or written by hand).
    #[error("the Lease is now held by {0:?}")]
    Stolen(String),
    /// No renewal succeeded within the renew deadline.
    #[error("the Lease was not renewed within the renew deadline ({0:?}): {1}")]
    RenewDeadline(Duration, String),
}

/// The Lease record as last seen, and when (on the local monotonic clock) it last changed.
struct Observed {
    spec: LeaseSpec,
    at: Instant,
}

/// One replica's side of the election.
pub struct Elector {
    api: Api<Lease>,
    cfg: LeaseConfig,
    observed: Option<Observed>,
}

/// What one acquire-or-renew attempt found.
#[derive(Debug)]
enum Attempt {
    /// We hold the Lease now.
    Held,
    /// Someone else holds a Lease that has not expired.
    HeldBy(String),
    /// Another write won the race (409), or the Lease appeared meanwhile; retry.
    Raced,
}

fn holder(spec: &LeaseSpec) -> Option<&str> {
    spec.holder_identity.as_deref().filter(|h| !h.is_empty())
}

impl Elector {
    /// An elector for `cfg`'s Lease through `client`.
    pub fn new(client: Client, cfg: LeaseConfig) -> Elector {
        Elector {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            observed: None,
        }
    }

    /// The Lease name and namespace, this replica's identity and the timings it elects with.
    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    /// The holder last seen in the Lease, if any.
    pub fn last_holder(&self) -> Option<&str> {
        self.observed.as_ref().and_then(|o| holder(&o.spec))
    }

    fn observe(&mut self, spec: LeaseSpec) {
        match &self.observed {
            Some(o) if o.spec == spec => {}
            _ => {
                self.observed = Some(Observed {
                    spec,
                    at: Instant::now(),
                })
            }
        }
    }

    /// When the record last seen expires: its lease duration after this replica saw it change.
    fn expiry(&self) -> Option<Instant> {
        let o = self.observed.as_ref()?;
        let secs = o
            .spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .unwrap_or(self.cfg.lease_duration.as_secs());
        Some(o.at + Duration::from_secs(secs))
    }

    /// Whether the record last seen has been unchanged for longer than its lease duration.
    fn expired(&self) -> bool {
        self.expiry().is_none_or(|e| Instant::now() > e)
    }

    /// How long until the record seen expires (a little after, so the check then finds it
    /// expired), or `None` when nothing was seen.
    fn until_expiry(&self) -> Option<Duration> {
        let at = self.expiry()? + Duration::from_millis(10);
        Some(at.saturating_duration_since(Instant::now()))
    }

    fn our_spec(&self, old: Option<&LeaseSpec>) -> LeaseSpec {
        let now = MicroTime(jiff::Timestamp::now());
        let ours = old.is_some_and(|o| holder(o) == Some(&self.cfg.identity));
        let transitions = old.and_then(|o| o.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.cfg.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX),
            ),
            acquire_time: if ours {
                old.and_then(|o| o.acquire_time.clone())
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(match old {
                None => 0,
                Some(_) if ours => transitions,
                Some(_) => transitions + 1,
            }),
            ..LeaseSpec::default()
        }
    }

    /// One round of client-go's `tryAcquireOrRenew`: read the Lease, and write ourselves into
    /// it when it is ours, free, or expired.
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let pp = PostParams::default();
        let lease = match self.api.get_opt(&self.cfg.name).await? {
            Some(lease) => lease,
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.cfg.name.clone()),
                        namespace: Some(self.cfg.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(self.our_spec(None)),
                };
                return match self.api.create(&pp, &lease).await {
                    Ok(created) => {
                        self.observe(created.spec.unwrap_or_default());
                        Ok(Attempt::Held)
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Raced),
                    Err(e) => Err(e),
                };
            }
        };
        let old = lease.spec.clone().unwrap_or_default();
        self.observe(old.clone());
        match holder(&old) {
            Some(h) if h != self.cfg.identity && !self.expired() => {
                return Ok(Attempt::HeldBy(h.to_owned()));
            }
            _ => {}
        }
        let mut next = lease;
        next.spec = Some(self.our_spec(Some(&old)));
        match self.api.replace(&self.cfg.name, &pp, &next).await {
            Ok(written) => {
                self.observe(written.spec.unwrap_or_default());
                Ok(Attempt::Held)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Raced),
            Err(e) => Err(e),
        }
    }

    /// How long [`Elector::acquire`] sleeps after `attempt`: until the observed record expires
    /// when another replica holds it and that comes before the next retry, else one retry
    /// period. Never zero, so an unreachable API server or a record that expired while the
    /// writes fail cannot spin the loop.
    fn acquire_wait(&self, attempt: &Result<Attempt, kube::Error>) -> Duration {
        let retry = self.cfg.retry_period;
        match attempt {
            Ok(Attempt::HeldBy(_)) => self
                .until_expiry()
                .map_or(retry, |e| e.min(retry))
                .max(Duration::from_millis(10)),
            _ => retry,
        }
    }

    /// Wait until this replica holds the Lease, trying every retry period, and right when the
    /// record seen would expire if that comes sooner, so a standby takes over at most one
    /// retry period (plus a request) after the lease duration from the leader's last renewal.
    /// API errors are logged and retried.
    pub async fn acquire(&mut self) {
        let mut last_holder = None;
        loop {
            let attempt = self.try_acquire_or_renew().await;
            let wait = self.acquire_wait(&attempt);
            match attempt {
                Ok(Attempt::Held) => {
                    tracing::info!(
                        lease = %format!("{}/{}", self.cfg.namespace, self.cfg.name),
                        identity = %self.cfg.identity,
                        "successfully acquired lease"
                    );
                    return;
                }
                Ok(Attempt::HeldBy(h)) => {
                    if last_holder.as_ref() != Some(&h) {
                        tracing::info!(holder = %h, "waiting for the leader's lease to expire");
                        last_holder = Some(h);
                    }
                }
                Ok(Attempt::Raced) => {}
                Err(e) => tracing::warn!(error = %e, "reading or writing the leader lease"),
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// Keep the Lease while leading: renew every retry period. Returns why leadership ended:
    /// another holder appeared (at once), or no renewal succeeded for the renew deadline
    /// (each attempt is cut off at the deadline, so this returns before the Lease that others
    /// see can expire).
    ///
    /// A renewal counts from when its request was sent, not from when the answer came back
    /// (client-go's rule): the standby measures the lease duration from when it saw the
    /// record change, which is after the write was sent, so a slow answer cannot stretch this
    /// replica's belief that it leads past the moment a standby may take over.
    pub async fn hold(&mut self) -> Lost {
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(self.cfg.retry_period).await;
            let deadline = renewed + self.cfg.renew_deadline;
            let started = Instant::now();
            let attempt = tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await;
            let why = match attempt {
                Ok(Ok(Attempt::Held)) => {
                    renewed = started;
                    continue;
                }
                Ok(Ok(Attempt::HeldBy(h))) => return Lost::Stolen(h),
                Ok(Ok(Attempt::Raced)) => "a concurrent write changed the Lease".to_owned(),
                Ok(Err(e)) => e.to_string(),
                Err(_) => "the renewal did not finish in time".to_owned(),
            };
            if Instant::now() + self.cfg.retry_period >= deadline {
                return Lost::RenewDeadline(self.cfg.renew_deadline, why);
            }
            tracing::warn!(reason = %why, "failed to renew the leader lease; retrying");
        }
    }

    /// Give the Lease up (graceful shutdown), so a standby takes over at its next retry
    /// instead of after the lease duration: the holder is cleared, as client-go's
    /// `ReleaseOnCancel` does. Does nothing when another replica holds it.
    ///
    /// Errors: the Lease cannot be read or written (a conflict included).
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if holder(&spec) != Some(&self.cfg.identity) {
            return Ok(());
        }
        let now = MicroTime(jiff::Timestamp::now());
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            ..spec
        });
        self.api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await?;
        tracing::info!(identity = %self.cfg.identity, "released the leader lease");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    use kube::client::Body;
    use serde_json::{Value, json};

    /// A fake Lease endpoint on tokio's paused clock: what `respond` answers to each request
    /// (method, request body) is returned after its delay; `None` never answers.
    fn fake_api(
        respond: impl Fn(&::http::Method, Option<Value>) -> Option<(u16, Value, Duration)>
        + Send
        + Sync
        + 'static,
    ) -> Client {
        let respond = Arc::new(respond);
        let svc = tower::service_fn(move |req: ::http::Request<Body>| {
            let respond = Arc::clone(&respond);
            async move {
                let method = req.method().clone();
                let bytes = req.into_body().collect_bytes().await.unwrap_or_default();
                let body = serde_json::from_slice(&bytes).ok();
                let Some((status, answer, delay)) = respond(&method, body) else {
                    return std::future::pending().await;
                };
                tokio::time::sleep(delay).await;
                let mut res = ::http::Response::new(Body::from(answer.to_string().into_bytes()));
                *res.status_mut() =
                    ::http::StatusCode::from_u16(status).unwrap_or(::http::StatusCode::OK);
                Ok::<_, std::convert::Infallible>(res)
            }
        });
        Client::new(svc, "default")
    }

    fn lease_held_by(holder: &str, rv: &str) -> Value {
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l", "namespace": "default", "resourceVersion": rv},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 1,
                     "renewTime": "2026-01-01T00:00:00.000000Z"}
        })
    }

    fn unavailable() -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": "unavailable", "reason": "ServiceUnavailable", "code": 503})
    }

    fn cfg(lease: u64, renew: u64, retry: u64) -> LeaseConfig {
        LeaseConfig {
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_secs(retry),
            ..LeaseConfig::new("l", "default", "me")
        }
    }

    /// The record seen once, then the API goes down after that record expired: the standby
    /// retries once per retry period, it does not spin.
    #[tokio::test(start_paused = true)]
    async fn an_expired_record_with_the_api_down_is_retried_per_retry_period() {
        let requests = Arc::new(Mutex::new(0usize));
        let counted = Arc::clone(&requests);
        let client = fake_api(move |_, _| {
            let mut n = counted.lock().unwrap_or_else(|e| e.into_inner());
            *n += 1;
            if *n > 1000 {
                return None; // spinning: stop answering so the test ends and reports it
            }
            if *n == 1 {
                Some((200, lease_held_by("other", "1"), Duration::ZERO))
            } else {
                Some((503, unavailable(), Duration::ZERO))
            }
        });
        let mut elector = Elector::new(client, cfg(15, 10, 2));
        let waited = tokio::time::timeout(Duration::from_secs(20), elector.acquire()).await;
        assert!(waited.is_err(), "never acquired: the API is down");
        let n = *requests.lock().unwrap_or_else(|e| e.into_inner());
        // One read that saw the record, then one attempt per 2s retry period in 20s.
        assert!((2..=12).contains(&n), "{n} requests in 20s");
    }

    /// Renewals answered slowly, then not at all: the leader gives up a renew deadline after
    /// it SENT its last successful renewal, not after that renewal's answer arrived.
    #[tokio::test(start_paused = true)]
    async fn the_renew_deadline_counts_from_when_the_renewal_was_sent() {
        let start = Instant::now();
        let stored = Arc::new(Mutex::new(lease_held_by("me", "1")));
        let renewals_sent = Arc::new(Mutex::new(Vec::new()));
        let (lease, sent) = (Arc::clone(&stored), Arc::clone(&renewals_sent));
        let client = fake_api(move |method, body| {
            let mut lease = lease.lock().unwrap_or_else(|e| e.into_inner());
            if method == ::http::Method::GET {
                return Some((200, lease.clone(), Duration::ZERO));
            }
            let mut sent = sent.lock().unwrap_or_else(|e| e.into_inner());
            if sent.len() == 2 {
                return None; // partitioned: the third renewal never returns
            }
            sent.push(Instant::now());
            let mut written = body.unwrap_or_default();
            written["metadata"]["resourceVersion"] = json!((sent.len() + 1).to_string());
            *lease = written.clone();
            Some((200, written, Duration::from_secs(1)))
        });
        let mut elector = Elector::new(client, cfg(10, 4, 1));
        let lost = elector.hold().await;
        assert!(matches!(lost, Lost::RenewDeadline(..)), "{lost:?}");
        let sent = renewals_sent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        assert_eq!(sent.len(), 2, "two renewals succeeded");
        let last_sent = sent[1];
        let gave_up = Instant::now();
        assert!(
            gave_up <= last_sent + Duration::from_secs(4),
            "gave up {:?} after start, the last renewal was sent at {:?}",
            gave_up - start,
            last_sent - start
        );
    }

    #[test]
    fn identities_are_unique_per_process_start() {
        let a = default_identity();
        let b = default_identity();
        assert_ne!(a, b);
        assert!(a.contains('_'), "{a}");
    }

    #[test]
    fn defaults_are_controller_runtimes() {
        let c = LeaseConfig::new("karpenter-leader-election", "kube-system", "me");
        assert_eq!(c.lease_duration, Duration::from_secs(15));
        assert_eq!(c.renew_deadline, Duration::from_secs(10));
        assert_eq!(c.retry_period, Duration::from_secs(2));
    }
}
