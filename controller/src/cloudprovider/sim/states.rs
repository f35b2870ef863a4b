//! EC2 instance states in the simulated account, named as EC2's state-change notifications
//! name them, and StopInstances. An instance runs from launch; a terminated one is
//! `shutting-down` for [`SHUTDOWN_DURATION`], then gone (the account forgets it, as
//! DescribeInstances does after a while); a stopped one is `stopping` for [`STOP_DURATION`],
//! then `stopped` until it is terminated. Neither a stopping nor a stopped instance runs a
//! kubelet ([`SimCloud::instances`] leaves them out), but both are still listed
//! ([`CloudProvider::list`](super::CloudProvider::list)) and can be terminated, as in EC2.
//! The simulated account never starts a stopped instance again.

use jiff::SignedDuration;

use super::{SHUTDOWN_DURATION, SimCloud, SimInstance};

/// How long a stopped instance stays `stopping` before it is `stopped` (EC2 takes a minute or
/// so; the sandbox keeps it as short as a shutdown).
pub const STOP_DURATION: SignedDuration = SHUTDOWN_DURATION;

/// An instance's state, as EC2 names it in `detail.state` of an `EC2 Instance State-change
/// Notification` (`pending` is not modelled: a launch runs at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InstanceState {
    /// Launched and not stopped or terminated.
    Running,
    /// Stopping: its OS is shutting down (within [`STOP_DURATION`] of the stop).
    Stopping,
    /// Stopped: it exists, runs nothing and costs nothing but its volumes.
    Stopped,
    /// Terminated, shutting down (within [`SHUTDOWN_DURATION`] of the termination).
    ShuttingDown,
    /// Gone.
    Terminated,
}

impl InstanceState {
    /// EC2's name: `running`, `stopping`, `stopped`, `shutting-down`, `terminated`.
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Running => "running",
            InstanceState::Stopping => "stopping",
            InstanceState::Stopped => "stopped",
            InstanceState::ShuttingDown => "shutting-down",
            InstanceState::Terminated => "terminated",
        }
    }
}

impl std::fmt::Display for InstanceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl SimCloud {
    /// The instance behind `provider_id` and its state now (DescribeInstances, past any
    /// injected faults); `None` when the account has no such instance (never launched, or
    /// terminated and gone).
    pub fn describe(&self, provider_id: &str) -> Option<(SimInstance, InstanceState)> {
        let now = self.clock.now();
        let state = self.lock();
        let instance = state
            .instances
            .values()
            .find(|i| i.provider_id == provider_id)?;
        let current = if state.shutting_down.contains_key(&instance.id) {
            InstanceState::ShuttingDown
        } else if let Some(since) = state.stopped.get(&instance.id) {
            if now.duration_since(*since) >= STOP_DURATION {
                InstanceState::Stopped
            } else {
                InstanceState::Stopping
            }
        } else {
            InstanceState::Running
        };
        Some((instance.clone(), current))
    }

    /// Stop the running instance behind `provider_id` (EC2 StopInstances): it is `stopping`,
    /// then `stopped` after [`STOP_DURATION`]; its kubelet stops at once. Returns whether it
    /// was running.
    pub fn stop(&self, provider_id: &str) -> bool {
        let now = self.clock.now();
        let mut state = self.lock();
        let Some(id) = state
            .instances
            .values()
            .find(|i| i.provider_id == provider_id)
            .map(|i| i.id.clone())
        else {
            return false;
        };
        if state.shutting_down.contains_key(&id) {
            return false;
        }
        state.stopped.insert(id, now).is_none()
    }
}
