//! What the NodeClaim lifecycle did that the NodeClaim cache may not show yet. The lifecycle
//! controller writes a step's metadata (labels, the node's taints) before the NodeClaim's
//! status, and each write triggers a reconcile; one that runs before the cache holds the status
//! write reaches the same step again. Upstream keeps the launch's result for a minute by UID
//! (`lifecycle/launch.go`, "due to eventual consistency on the cache"); this memory does that,
//! and also keeps which steps were announced, so each is logged, counted and announced once.

use std::collections::HashMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use karpenter_core::cloud::Launched;

/// How long a launch or an announcement is remembered: upstream's one-minute launch cache.
pub const MEMORY: Duration = Duration::from_secs(60);

/// Launches and announced steps by NodeClaim UID, each with when it happened.
#[derive(Debug, Default)]
pub struct LifecycleMemory {
    launches: HashMap<String, (Timestamp, Launched)>,
    announced: HashMap<(String, &'static str), Timestamp>,
}

/// Whether `at` is less than [`MEMORY`] before `now`.
fn fresh(at: Timestamp, now: Timestamp) -> bool {
    now.duration_since(at) < SignedDuration::try_from(MEMORY).unwrap_or_default()
}

impl LifecycleMemory {
    /// The launch made for the NodeClaim with UID `uid` less than [`MEMORY`] before `now`, if
    /// any: a reconcile that finds the NodeClaim not `Launched` in the cache takes it instead of
    /// asking the cloud again. Forgets what is older.
    pub fn launch(&mut self, uid: &str, now: Timestamp) -> Option<Launched> {
        self.launches.retain(|_, (at, _)| fresh(*at, now));
        self.launches.get(uid).map(|(_, l)| l.clone())
    }

    /// Remember `launched`, made at `now` for the NodeClaim with UID `uid`.
    pub fn remember_launch(&mut self, uid: &str, launched: &Launched, now: Timestamp) {
        self.launches
            .insert(uid.to_string(), (now, launched.clone()));
    }

    /// Whether this is the first time, within [`MEMORY`] of `now`, that lifecycle step `step`
    /// (a condition type: `Registered`, `Initialized`) is reached for the NodeClaim with UID
    /// `uid`: its log line, Event and registration-health outcome are for the first time only.
    pub fn first_announcement(&mut self, uid: &str, step: &'static str, now: Timestamp) -> bool {
        self.announced.retain(|_, at| fresh(*at, now));
        self.announced
            .insert((uid.to_string(), step), now)
            .is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::scheduling::resources::Resources;

    fn launched(id: &str) -> Launched {
        Launched {
            provider_id: format!("aws:///us-east-1a/{id}"),
            image_id: "ami-1".into(),
            labels: Default::default(),
            capacity: Resources::default(),
            allocatable: Resources::default(),
            warnings: Vec::new(),
        }
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).expect("timestamp")
    }

    #[test]
    fn a_launch_is_taken_again_within_a_minute_and_forgotten_after() {
        let mut m = LifecycleMemory::default();
        assert_eq!(m.launch("u1", at(0)), None);
        m.remember_launch("u1", &launched("i-1"), at(0));
        assert_eq!(m.launch("u1", at(59)), Some(launched("i-1")));
        assert_eq!(m.launch("u2", at(59)), None);
        assert_eq!(m.launch("u1", at(60)), None);
    }

    #[test]
    fn each_step_of_a_nodeclaim_is_announced_once() {
        let mut m = LifecycleMemory::default();
        assert!(m.first_announcement("u1", "Registered", at(0)));
        assert!(!m.first_announcement("u1", "Registered", at(2)));
        assert!(m.first_announcement("u1", "Initialized", at(3)));
        assert!(m.first_announcement("u2", "Registered", at(3)));
        assert!(!m.first_announcement("u1", "Initialized", at(4)));
    }
}
