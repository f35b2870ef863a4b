//! Launch (upstream `lifecycle/launch.go`): ask the cloud for an instance, copy providerID,
//! image, capacity and allocatable onto the NodeClaim and its resolved labels onto its metadata
//! (in memory: the lifecycle controller writes them). Capacity and node-class errors ask for the
//! NodeClaim's deletion so its pods are provisioned again.

use crds::conditions::LAUNCHED;
use crds::{NodeClaim, StatusConditions};

use crate::runtime::Context;
use crate::runtime::events::{DEFAULT_DEDUPE, EventSpec, EventType, reason, reference};
use karpenter_core::cloud::CloudError;
use karpenter_core::lifecycle::stamp::launch_stamp;

/// What a launch attempt led to. The launch only asks the cloud; the lifecycle controller
/// writes what comes back, once: the NodeClaim's metadata and status, or its deletion.
#[derive(Debug)]
pub enum Outcome {
    /// The instance exists. `claim` now carries it in memory: labels resolved by the launch,
    /// the node class's drift stamp in its annotations, providerID, image, capacity,
    /// allocatable and `Launched=True`.
    Launched {
        /// Events to publish (the `Launched` Event, and warnings about offerings the launch
        /// passed over).
        events: Vec<EventSpec>,
    },
    /// The NodeClaim must be deleted so its pods are provisioned again: no offering had
    /// capacity, or the node class is not ready.
    Delete {
        /// The `karpenter_nodeclaims_disrupted_total` reason (`insufficient_capacity`,
        /// `nodeclass_not_ready`).
        metric_reason: &'static str,
        /// The Event that says why.
        event: Box<EventSpec>,
    },
    /// Retry later; `Launched` is Unknown with the reason in `claim`'s conditions.
    Retry {
        /// Events to publish (`LaunchFailed`, for errors that are not the cloud's verdict on
        /// the request).
        events: Vec<EventSpec>,
    },
}

/// Upstream truncates launch failure messages on the condition to this many characters.
const MAX_MESSAGE: usize = 300;

/// Launch the instance for a NodeClaim that is not Launched yet and record the result on the
/// in-memory `claim`; nothing is written to the API here. A launch made for the same NodeClaim
/// within the last minute that the cache does not show yet is taken as it is
/// ([`crate::state::LifecycleMemory::launch`]): no second cloud call, log line or Event.
pub async fn launch(ctx: &Context, claim: &mut NodeClaim) -> Outcome {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let class_name = claim.spec.node_class_ref.name.clone();
    // A reference of another group or kind names none of our node classes, whatever its name.
    let unsupported = claim.spec.node_class_ref.unsupported();
    let node_class = match unsupported {
        Some(_) => None,
        None => ctx
            .state
            .nodeclasses
            .state()
            .into_iter()
            .find(|nc| nc.metadata.name.as_deref() == Some(class_name.as_str())),
    };
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let cached = match uid.is_empty() {
        true => None,
        false => ctx.state.lifecycle_memory().launch(&uid, ctx.clock.now()),
    };
    let fresh = cached.is_none();
    let result = match (cached, &node_class, unsupported) {
        (Some(launched), _, _) => Ok(launched),
        (None, Some(nc), _) => ctx.cloud.create(claim, nc).await,
        (None, None, Some(why)) => Err(CloudError::NodeClassNotReady(why)),
        (None, None, None) => Err(CloudError::NodeClassNotReady(format!(
            "{} {class_name:?} not found",
            claim.spec.node_class_ref.kind
        ))),
    };
    let now = ctx.clock.now();
    match result {
        Ok(launched) => {
            if fresh && !uid.is_empty() {
                ctx.state
                    .lifecycle_memory()
                    .remember_launch(&uid, &launched, now);
            }
            let mut labels = launched.labels.clone();
            labels.extend(claim.metadata.labels.clone().unwrap_or_default());
            let stamp = node_class
                .as_ref()
                .map(|nc| launch_stamp(nc, &launched.image_id, &ctx.settings.hash_versions))
                .unwrap_or_default();
            let mut annotations = claim.metadata.annotations.clone().unwrap_or_default();
            annotations.extend(stamp);
            claim.metadata.labels = Some(labels);
            claim.metadata.annotations = Some(annotations);
            let status = claim.status.get_or_insert_with(Default::default);
            status.provider_id = Some(launched.provider_id.clone());
            status.image_id = Some(launched.image_id.clone());
            status.capacity = launched.capacity.to_list();
            status.allocatable = launched.allocatable.to_list();
            claim.condition_set(now).set_true(LAUNCHED);
            let label = |k: &str| launched.labels.get(k).map(String::as_str).unwrap_or("");
            let mut events = vec![EventSpec {
                regarding: reference(claim),
                type_: EventType::Normal,
                reason: reason::LAUNCHED,
                message: format!(
                    "Launched instance {}: {} {} in {}",
                    launched.provider_id,
                    label(crds::labels::INSTANCE_TYPE_LABEL),
                    label(crds::labels::CAPACITY_TYPE_LABEL),
                    label(crds::labels::TOPOLOGY_ZONE_LABEL)
                ),
                dedupe: DEFAULT_DEDUPE,
            }];
            events.extend(launched.warnings.iter().map(|warning| EventSpec {
                regarding: reference(claim),
                type_: EventType::Warning,
                reason: reason::LAUNCH_FAILED,
                message: truncate(&format!("launched after offering errors: {warning}")),
                dedupe: DEFAULT_DEDUPE,
            }));
            // A remembered launch was logged and announced when it was made.
            if !fresh {
                return Outcome::Launched { events: Vec::new() };
            }
            tracing::info!(nodeclaim = %name, provider_id = %launched.provider_id,
                instance_type = label(crds::labels::INSTANCE_TYPE_LABEL),
                zone = label(crds::labels::TOPOLOGY_ZONE_LABEL),
                capacity_type = label(crds::labels::CAPACITY_TYPE_LABEL),
                "launched nodeclaim");
            Outcome::Launched { events }
        }
        Err(e @ (CloudError::InsufficientCapacity(_) | CloudError::NodeClassNotReady(_))) => {
            let reason = if matches!(e, CloudError::InsufficientCapacity(_)) {
                reason::INSUFFICIENT_CAPACITY_ERROR
            } else {
                reason::NODE_CLASS_NOT_READY
            };
            tracing::info!(nodeclaim = %name, error = %e, "deleting nodeclaim that could not launch");
            Outcome::Delete {
                metric_reason: launch_failure_reason(&e),
                event: Box::new(EventSpec {
                    regarding: reference(claim),
                    type_: EventType::Warning,
                    reason,
                    message: format!("NodeClaim {name} event: {e}"),
                    dedupe: DEFAULT_DEDUPE,
                }),
            }
        }
        Err(CloudError::Create { reason, message }) => {
            claim.condition_set(now).set_unknown_with_reason(
                LAUNCHED,
                &reason,
                &truncate(&message),
            );
            Outcome::Retry { events: Vec::new() }
        }
        Err(e) => {
            let event = EventSpec {
                regarding: reference(claim),
                type_: EventType::Warning,
                reason: reason::LAUNCH_FAILED,
                message: truncate(&e.to_string()),
                dedupe: DEFAULT_DEDUPE,
            };
            claim.condition_set(now).set_unknown_with_reason(
                LAUNCHED,
                "LaunchFailed",
                &truncate(&e.to_string()),
            );
            Outcome::Retry {
                events: vec![event],
            }
        }
    }
}

/// The disruption metric reason of a NodeClaim deleted because it could not launch.
fn launch_failure_reason(e: &CloudError) -> &'static str {
    match e {
        CloudError::InsufficientCapacity(_) => {
            crate::runtime::metrics::reason::INSUFFICIENT_CAPACITY
        }
        _ => crate::runtime::metrics::reason::NODECLASS_NOT_READY,
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(MAX_MESSAGE).collect()
}
