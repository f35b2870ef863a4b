//! Controller settings: every flag also reads the environment variable upstream Karpenter uses
//! (`BATCH_IDLE_DURATION`, `CLUSTER_NAME`, ...), validated once into [`Settings`].

use std::time::Duration;

use clap::Args;

/// Parse a Go-style duration such as `1s`, `10s`, `5m` or `1h30m`.
///
/// Errors: not a Go duration, or negative.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d: kube::core::Duration = s
        .parse()
        .map_err(|e| format!("invalid duration {s:?}: {e}"))?;
    if d.is_negative() {
        return Err(format!("invalid duration {s:?}: must not be negative"));
    }
    Ok(d.into())
}

/// Flags shared by `karpenter run` and `karpenter sandbox`.
#[derive(Args, Clone, Debug)]
pub struct ControllerOptions {
    /// Name of the cluster; tags instances and is matched by discovery tags.
    #[arg(long, env = "CLUSTER_NAME", default_value = "sandbox")]
    pub cluster_name: String,
    /// How long the provisioner waits without new pending pods before it solves a batch.
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = "1s", value_parser = parse_duration)]
    pub batch_idle_duration: Duration,
    /// The longest a batch window stays open while pods keep arriving.
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = "10s", value_parser = parse_duration)]
    pub batch_max_duration: Duration,
    /// A NodeClaim not launched this long after creation is deleted.
    #[arg(long, env = "LAUNCH_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    pub launch_timeout: Duration,
    /// A launched NodeClaim whose node has not registered this long is deleted.
    #[arg(long, env = "REGISTRATION_TTL", default_value = "15m", value_parser = parse_duration)]
    pub registration_ttl: Duration,
    /// A Node labelled `karpenter.sh/nodepool` that no NodeClaim owns is reported at once and
    /// deleted (its instance terminated) after this long.
    #[arg(long, env = "ORPHANED_NODE_GRACE", default_value = "2m", value_parser = parse_duration)]
    pub orphaned_node_grace: Duration,
    /// An upgrade step whose replacement NodeClaim has not initialized this long after the step
    /// started is rolled back (the replacement deleted) and the NodePool's rollout paused.
    #[arg(long, env = "UPGRADE_INITIALIZATION_TIMEOUT", default_value = "10m", value_parser = parse_duration)]
    pub upgrade_initialization_timeout: Duration,
    /// Log level filter (`error`, `warn`, `info`, `debug`, or a tracing filter).
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

/// Validated settings the controllers read.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Cluster name.
    pub cluster_name: String,
    /// Batch idle window.
    pub batch_idle: Duration,
    /// Batch maximum window.
    pub batch_max: Duration,
    /// Launch timeout.
    pub launch_timeout: Duration,
    /// Registration timeout.
    pub registration_ttl: Duration,
    /// How long a Node without a NodeClaim is reported before it is deleted.
    pub orphaned_node_grace: Duration,
    /// The drift hash versions stamped and compared (this project's current ones; not a flag:
    /// tests change them to prove a version change re-stamps instead of drifting).
    pub hash_versions: crate::disruption::drift::HashVersions,
    /// How long an upgrade step waits for its replacement to initialize before it rolls back.
    pub upgrade_initialization_timeout: Duration,
}

impl Default for Settings {
    /// The flags' defaults: upstream's timings (batch idle 1s, max 10s, launch timeout 5m,
    /// registration TTL 15m), an orphaned-node grace period of 2m (ours), cluster `sandbox`.
    fn default() -> Self {
        Settings {
            cluster_name: "sandbox".into(),
            batch_idle: Duration::from_secs(1),
            batch_max: Duration::from_secs(10),
            launch_timeout: Duration::from_secs(300),
            registration_ttl: Duration::from_secs(900),
            orphaned_node_grace: Duration::from_secs(120),
            hash_versions: Default::default(),
            upgrade_initialization_timeout: Duration::from_secs(600),
        }
    }
}

/// Invalid settings.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The idle window must be shorter than the maximum window.
    #[error("--batch-idle-duration ({idle:?}) must not exceed --batch-max-duration ({max:?})")]
    BatchWindows {
        /// Idle window.
        idle: Duration,
        /// Max window.
        max: Duration,
    },
    /// The cluster name is empty.
    #[error("--cluster-name must not be empty")]
    ClusterName,
}

impl ControllerOptions {
    /// Validate into settings.
    ///
    /// Errors: contradictory batch windows, an empty cluster name.
    pub fn settings(&self) -> Result<Settings, SettingsError> {
        if self.batch_idle_duration > self.batch_max_duration {
            return Err(SettingsError::BatchWindows {
                idle: self.batch_idle_duration,
                max: self.batch_max_duration,
            });
        }
        if self.cluster_name.trim().is_empty() {
            return Err(SettingsError::ClusterName);
        }
        Ok(Settings {
            cluster_name: self.cluster_name.clone(),
            batch_idle: self.batch_idle_duration,
            batch_max: self.batch_max_duration,
            launch_timeout: self.launch_timeout,
            registration_ttl: self.registration_ttl,
            orphaned_node_grace: self.orphaned_node_grace,
            hash_versions: Default::default(),
            upgrade_initialization_timeout: self.upgrade_initialization_timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
