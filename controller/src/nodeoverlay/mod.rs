//! The NodeOverlay status controller (upstream `pkg/controllers/nodeoverlay`, registered only
//! with the `NodeOverlay` feature gate): whenever a NodeOverlay, NodePool or node class
//! changes, and every minute, every overlay is evaluated against every NodePool's listed
//! instance types (`karpenter_core::provisioning::listing::pool_types`, the evaluation the
//! provisioner applies) and each overlay whose verdict changed gets one status patch:
//! `ValidationSucceeded` True, or False with reason `RuntimeValidation` (what is invalid) or
//! `Conflict`, and the root `Ready`. With the gate off, [`warn_gate_off`] tells the owner of
//! each overlay, once, that it is not applied.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crds::conditions::VALIDATION_SUCCEEDED;
use crds::{NodeOverlay, NodeOverlayStatus, StatusConditions};
use futures::StreamExt;
use jiff::Timestamp;
use karpenter_core::capacity::overlay::Verdict;
use karpenter_core::provisioning::listing;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::runtime::Context;
use crate::runtime::events::{DEFAULT_DEDUPE, EventSpec, EventType, reason, reference};
use crate::runtime::feature_gates::FeatureGate;

/// Overlays are evaluated again at least this often: offerings and prices listed by the
/// cloud change without any object changing.
pub const RESYNC: Duration = Duration::from_secs(60);
/// With the gate off, how often NodeOverlays are listed again to warn about new ones (sooner
/// when a test moves the clock on).
pub const GATE_OFF_RECHECK: Duration = Duration::from_secs(300);

/// Run the controller until the task is aborted (a no-op when the caches do not watch
/// NodeOverlays, i.e. the gate is off).
pub async fn run(ctx: Arc<Context>) {
    if ctx.state.wait_synced().await.is_err() {
        tracing::error!("nodeoverlay controller not started: the cluster state never synced");
        return;
    }
    let Some(overlays) = &ctx.state.nodeoverlay_changes else {
        return;
    };
    let triggers = vec![
        overlays.subscribe().map(|_| ()).boxed(),
        ctx.state.nodepool_changes.subscribe().map(|_| ()).boxed(),
        ctx.state.nodeclass_changes.subscribe().map(|_| ()).boxed(),
        ctx.clock_jumped().boxed(),
    ];
    // A burst of changes (a relist announces every object) is one evaluation.
    let mut triggers = futures::stream::select_all(triggers).ready_chunks(1024);
    loop {
        match reconcile(&ctx).await {
            Ok(written) if written > 0 => {
                tracing::info!(written, "nodeoverlay statuses updated")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "nodeoverlay status update failed"),
        }
        tokio::select! {
            _ = triggers.next() => {}
            _ = tokio::time::sleep(RESYNC) => {}
        }
    }
}

/// One evaluation: list the instance types of every NodePool's node class, evaluate the
/// cached overlays over them and patch the statuses that changed. Returns how many were
/// written.
///
/// Errors: the first failed status patch (the others are still attempted); an overlay deleted
/// meanwhile (404) is not an error.
async fn reconcile(ctx: &Context) -> Result<usize, kube::Error> {
    let snap = ctx.state.snapshot();
    if snap.nodeoverlays.is_empty() {
        return Ok(0);
    }
    let listings = crate::provisioning::list_instance_types(ctx, &snap).await;
    let listed = listing::pool_types(&snap, &listings);
    let patches = status_patches(&snap.nodeoverlays, &listed.verdicts, ctx.clock.now());
    let api: Api<NodeOverlay> = Api::all(ctx.client.clone());
    let mut written = 0;
    let mut first_error = None;
    for (name, status) in patches {
        let patch = Patch::Merge(json!({"status": status}));
        match api
            .patch_status(&name, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => written += 1,
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                tracing::warn!(nodeoverlay = %name, error = %e, "writing NodeOverlay status");
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(written), Err)
}

/// The status each overlay should have for its verdict at `now`, for the overlays whose
/// status differs (name, new status): `ValidationSucceeded` True for [`Verdict::Applied`],
/// else False with the verdict's reason and message; `Ready` follows it. Conditions that do
/// not change keep their `lastTransitionTime`. Overlays without a verdict are left alone.
pub fn status_patches(
    overlays: &[Arc<NodeOverlay>],
    verdicts: &BTreeMap<String, Verdict>,
    now: Timestamp,
) -> Vec<(String, NodeOverlayStatus)> {
    let mut out = Vec::new();
    for overlay in overlays {
        let name = overlay.name_any();
        let Some(verdict) = verdicts.get(&name) else {
            continue;
        };
        let mut updated = (**overlay).clone();
        {
            let mut set = updated.condition_set(now);
            match verdict.reason() {
                None => set.set_true(VALIDATION_SUCCEEDED),
                Some(why) => set.set_false(VALIDATION_SUCCEEDED, why, verdict.message()),
            };
        }
        if updated.status != overlay.status {
            out.push((name, updated.status.unwrap_or_default()));
        }
    }
    out
}

/// The Warning every NodeOverlay gets while the gate is off.
pub fn gate_off_message(overlay: &str) -> String {
    format!(
        "NodeOverlay {overlay} is not applied: the {gate} feature gate is off (set FEATURE_GATES={gate}=true to apply NodeOverlays)",
        gate = FeatureGate::NodeOverlay.name()
    )
}

/// With the gate off, NodeOverlays are accepted by the API but never applied: list them now
/// and every [`GATE_OFF_RECHECK`], and publish a `FeatureGateDisabled` Warning on each one
/// this replica has not warned about yet, so an accepted field is never silently ignored. A
/// cluster without the NodeOverlay CRD (404) has nothing to warn about.
pub async fn warn_gate_off(ctx: Arc<Context>) {
    let api: Api<NodeOverlay> = Api::all(ctx.client.clone());
    let mut warned: HashSet<String> = HashSet::new();
    loop {
        match api.list(&ListParams::default()).await {
            Ok(list) => {
                for overlay in &list.items {
                    let key = overlay.uid().unwrap_or_else(|| overlay.name_any());
                    if !warned.insert(key) {
                        continue;
                    }
                    tracing::warn!(nodeoverlay = %overlay.name_any(), "NodeOverlay ignored: the NodeOverlay feature gate is off");
                    ctx.recorder.publish(EventSpec {
                        regarding: reference(overlay),
                        type_: EventType::Warning,
                        reason: reason::FEATURE_GATE_DISABLED,
                        message: gate_off_message(&overlay.name_any()),
                        dedupe: DEFAULT_DEDUPE,
                    });
                }
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => tracing::debug!(error = %e, "listing NodeOverlays"),
        }
        ctx.pause(GATE_OFF_RECHECK).await;
    }
}

#[cfg(test)]
mod tests;
