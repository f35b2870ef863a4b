//! Pacing of eviction API calls while nodes drain (upstream's eviction queue): refused
//! evictions (a PodDisruptionBudget's 429) are retried per pod with an exponential backoff.
//! Executor state shared by the termination controller's reconciles; it decides nothing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// Per-pod eviction backoff (upstream's eviction queue: 100ms doubling to 10s): a pod whose
/// eviction was refused is not asked again until its delay has passed. Keyed by pod UID; an
/// entry is dropped once its pod is evicted or deleted by the drain, or after [`Self::IDLE`]
/// without a refusal (its pod went away some other way). Measured on the monotonic clock: it
/// paces API calls, it decides nothing.
#[derive(Default)]
pub struct EvictionBackoff {
    pods: Mutex<HashMap<String, (Instant, ExponentialBackoff)>>,
}

impl EvictionBackoff {
    /// The first retry delay.
    pub const MIN: Duration = Duration::from_millis(100);
    /// The longest retry delay.
    pub const MAX: Duration = Duration::from_secs(10);
    /// An entry not refused again for this long is forgotten.
    pub const IDLE: Duration = Duration::from_secs(300);

    /// Whether the pod may be asked now.
    pub fn ready(&self, uid: &str, now: Instant) -> bool {
        self.lock().get(uid).is_none_or(|(at, _)| *at <= now)
    }

    /// Record a refused eviction; returns the delay before the next attempt.
    pub fn refused(&self, uid: &str, now: Instant) -> Duration {
        let mut pods = self.lock();
        pods.retain(|_, (at, _)| now.saturating_duration_since(*at) < Self::IDLE);
        let entry = pods.entry(uid.to_string()).or_insert_with(|| {
            let backoff = ExponentialBuilder::default()
                .with_min_delay(Self::MIN)
                .with_max_delay(Self::MAX)
                .with_factor(2.0)
                .without_max_times()
                .build();
            (now, backoff)
        });
        let delay = entry.1.next().unwrap_or(Self::MAX);
        entry.0 = now + delay;
        delay
    }

    /// Forget a pod (evicted, deleted, or gone).
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, ExponentialBackoff)>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_evictions_back_off_exponentially_to_ten_seconds() {
        let backoff = EvictionBackoff::default();
        let now = Instant::now();
        assert!(backoff.ready("p", now));
        let delays: Vec<Duration> = (0..10).map(|_| backoff.refused("p", now)).collect();
        let millis: Vec<u128> = delays.iter().map(Duration::as_millis).collect();
        assert_eq!(
            millis,
            vec![100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000]
        );
        assert!(!backoff.ready("p", now + Duration::from_secs(9)));
        assert!(backoff.ready("p", now + Duration::from_secs(10)));
        backoff.forget("p");
        assert!(backoff.ready("p", now));
    }
}
