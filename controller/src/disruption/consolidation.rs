//! Consolidation's tick and validation (upstream `disruption/controller.go`, `validation.go`):
//! writes the pass's pod events ([`super::pod_events`]), sweeps stale taints and advances the
//! commands in progress ([`super::queue`]), asks
//! `karpenter_core::disruption::consolidation::decide` for a command, reports what the pass
//! found as Events and metrics, and starts the command ([`super::queue::start`]) only when the
//! same command is decided again `Settings::consolidation_validation_delay` (15 s) later.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use karpenter_core::disruption::consolidation::{self as decide, Action, Command, Settings};

use super::pod_events::PodEvents;
use super::queue;
use crate::runtime::Context;
use crate::runtime::feature_gates::FeatureGate;
use crate::runtime::metrics;

pub use karpenter_core::disruption::consolidation::{MULTI_NODE_TIMEOUT, SINGLE_NODE_TIMEOUT};

/// What identifies a decision across passes: the candidates and the replacement's options.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Fingerprint {
    candidates: Vec<String>,
    replacement: Option<Vec<String>>,
}

impl Fingerprint {
    fn of(command: &Command) -> Fingerprint {
        Fingerprint {
            candidates: command
                .candidates
                .iter()
                .map(|c| c.name().to_string())
                .collect(),
            replacement: match &command.action {
                Action::Delete => None,
                Action::Replace(r) => Some(
                    r.planned
                        .decision
                        .instance_types
                        .iter()
                        .map(|t| t.name.clone())
                        .collect(),
                ),
            },
        }
    }
}

/// Consolidation's memory between passes (nothing here is needed for correctness after a
/// restart: pod events start counting again, and a pending decision is decided again).
#[derive(Debug, Default)]
pub struct Consolidation {
    /// Each NodeClaim's node's pod-event count at the last pass.
    pod_events: PodEvents,
    /// The decision waiting for validation, and when it was made (on the context's clock).
    pending: Option<(Timestamp, Fingerprint)>,
}

impl Consolidation {
    /// One consolidation pass. Returns how soon to look again: at once (`None`) while a command
    /// is in progress or was just started (upstream re-runs immediately), when the decision
    /// waiting for validation is due, or after `Settings::disruption_poll` when idle.
    pub async fn tick(&mut self, ctx: &Context) -> Option<Duration> {
        let idle = Some(ctx.settings.disruption_poll);
        let mut snap = ctx.state.snapshot();
        let now = ctx.clock.now();
        // This pass decides with the pod events it just wrote, which the cache may not show yet.
        for written in self.pod_events.write(ctx, &snap, now).await {
            if let Some(c) = snap
                .nodeclaims
                .iter_mut()
                .find(|c| c.metadata.name == written.metadata.name)
            {
                *c = Arc::new(written);
            }
        }
        let snap = Arc::new(snap);
        super::marks::sweep_stale_taints(ctx, &snap).await;
        if queue::advance_all(ctx, &snap, now).await {
            self.pending = None;
            return None;
        }
        let listings = crate::provisioning::list_instance_types(ctx, &snap).await;
        let settings = Settings {
            now,
            spot_to_spot: ctx
                .settings
                .feature_gates
                .enabled(FeatureGate::SpotToSpotConsolidation),
            hash_versions: ctx.settings.hash_versions.clone(),
            min_values_policy: ctx.settings.min_values_policy,
        };
        let started = Instant::now();
        let decision = {
            let snap = Arc::clone(&snap);
            match tokio::task::spawn_blocking(move || decide::decide(&snap, &listings, &settings))
                .await
            {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(error = %e, "consolidation decision failed");
                    return idle;
                }
            }
        };
        ctx.metrics
            .scheduling_simulated(metrics::DISRUPTION, started.elapsed());
        super::report::pass(ctx, &snap, &decision);
        let Some(command) = decision.command else {
            self.pending = None;
            return idle;
        };
        let fingerprint = Fingerprint::of(&command);
        let delay = ctx.settings.consolidation_validation_delay;
        // How long the pending decision has waited, on the clock (a decision "made in the
        // future", by a clock that was moved back, has waited nothing).
        let waited = |at: &Timestamp| {
            Duration::try_from(ctx.clock.now().duration_since(*at)).unwrap_or(Duration::ZERO)
        };
        match &self.pending {
            Some((at, f)) if *f == fingerprint && waited(at) >= delay => {
                self.pending = None;
                if let Err(e) = queue::start(ctx, &snap, &command).await {
                    tracing::warn!(error = %e, "starting a consolidation command failed");
                }
                None
            }
            Some((at, f)) if *f == fingerprint => Some(delay.saturating_sub(waited(at))),
            _ => {
                tracing::info!(method = command.method.as_str(), nodeclaims = ?fingerprint.candidates,
                    replacement = ?fingerprint.replacement, savings = command.savings(),
                    "consolidation decided; validating");
                self.pending = Some((ctx.clock.now(), fingerprint));
                Some(delay)
            }
        }
    }
}
