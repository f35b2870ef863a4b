//! Kubernetes Events Karpenter publishes, with every reason in one place and upstream's dedupe
//! and rate-limit rules (`pkg/events`): users learn why from `kubectl describe` alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::Semaphore;

/// Event reasons, as upstream names them.
pub mod reason {
    /// A pod was planned onto a NodeClaim or node.
    pub const NOMINATED: &str = karpenter_core::provisioning::NOMINATED_REASON;
    /// A pod cannot be provisioned for; the message says which NodePool rejected it and why.
    pub const FAILED_SCHEDULING: &str = "FailedScheduling";
    /// A NodePool's requirements admit none of its node class's instance types.
    pub const NO_COMPATIBLE_INSTANCE_TYPES: &str = "NoCompatibleInstanceTypes";
    /// A launch found no capacity; the NodeClaim is deleted and its pods re-provisioned.
    pub const INSUFFICIENT_CAPACITY_ERROR: &str = "InsufficientCapacityError";
    /// The node class is not ready; the NodeClaim is deleted.
    pub const NODE_CLASS_NOT_READY: &str = "NodeClassNotReady";
    /// A node registered without the `karpenter.sh/unregistered` taint.
    pub const UNREGISTERED_TAINT_MISSING: &str = "UnregisteredTaintMissing";
    /// An eviction was refused (PodDisruptionBudget) while draining.
    pub const FAILED_DRAINING: &str = "FailedDraining";
    /// A pod was evicted while draining its node.
    pub const EVICTED: &str = "Evicted";
    /// A NodeClaim is being terminated.
    pub const DISRUPTION_TERMINATING: &str = "DisruptionTerminating";
    /// A NodeClaim could not be launched for another reason.
    pub const LAUNCH_FAILED: &str = "LaunchFailed";
    /// A NodePool's limits stopped a NodeClaim from being created.
    pub const NODEPOOL_LIMIT_EXCEEDED: &str = "NodePoolLimitExceeded";
    /// A launched NodeClaim's instance no longer exists; the NodeClaim is deleted.
    pub const INSTANCE_GONE: &str = "InstanceTerminated";
    /// A NodeClaim's instance was launched.
    pub const LAUNCHED: &str = "Launched";
    /// A NodeClaim's node registered and was synced.
    pub const REGISTERED: &str = "Registered";
    /// A NodeClaim's node is initialized and ready for pods.
    pub const INITIALIZED: &str = "Initialized";
    /// A NodeClaim was not launched within the launch timeout; it is deleted.
    pub const LAUNCH_TIMEOUT: &str = "LaunchTimeout";
    /// A NodeClaim's node did not register within the registration TTL; it is deleted.
    pub const REGISTRATION_TIMEOUT: &str = "RegistrationTimeout";
    /// A NodeClaim reached its `expireAfter`; it is deleted.
    pub const EXPIRED: &str = "Expired";
    /// A deleting NodeClaim's `terminationGracePeriod` bounds its drain; the message says when.
    pub const TERMINATION_GRACE_PERIOD_EXPIRING: &str = "TerminationGracePeriodExpiring";
    /// A node's pods are being evicted.
    pub const DRAINING: &str = "Draining";
    /// A node has no pods left to evict.
    pub const DRAINED: &str = "Drained";
    /// A drained node's instance waits for its volumes to detach; the message names them.
    pub const AWAITING_VOLUME_DETACHMENT: &str =
        crds::conditions::reason::AWAITING_VOLUME_DETACHMENT;
    /// A pod was deleted because its node's termination time left no room for eviction.
    pub const DISRUPTED: &str = "Disrupted";
    /// A NodeClaim's instance is being terminated.
    pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
    /// A Node labelled with a NodePool has no NodeClaim; it is deleted after a grace period.
    pub const ORPHANED_NODE: &str = "OrphanedNode";
    /// A node class cannot be deleted while NodeClaims use it.
    pub const WAITING_ON_NODECLAIM_TERMINATION: &str = "WaitingOnNodeClaimTermination";
    /// A NodeClaim became drifted (the message names the changes), or stopped being drifted.
    pub const DRIFTED: &str = "Drifted";
    /// A NodeClaim stamped under another hash version was re-stamped instead of drifted.
    pub const HASH_RESTAMPED: &str = "HashRestamped";
    /// A NodePool's rollout of drifted nodes: a step started, drained, finished or paused.
    pub const UPGRADE: &str = "Upgrade";
    /// A drifted node an upgrade passes over for now (do-not-disrupt, a blocking PDB).
    pub const UPGRADE_BLOCKED: &str = "UpgradeBlocked";
    /// An upgrade step's replacement did not initialize in time and was deleted.
    pub const UPGRADE_ROLLED_BACK: &str = "UpgradeRolledBack";
    /// A node cannot be disrupted now; the message names the blocker (a do-not-disrupt pod or
    /// annotation, a PodDisruptionBudget).
    pub const DISRUPTION_BLOCKED: &str = "DisruptionBlocked";
    /// Node repair holds back: more than 20% of a NodePool's (or the cluster's) nodes are
    /// unhealthy; the message says how many of how many.
    pub const NODE_REPAIR_BLOCKED: &str = "NodeRepairBlocked";
    /// Consolidation looked at a node and left it; the message says why (its pods would not
    /// fit elsewhere, a replacement would not be cheaper, ...).
    pub const UNCONSOLIDATABLE: &str = "Unconsolidatable";
    /// A `Balanced` NodePool approved a consolidation move; the message gives its score, the
    /// threshold and the savings and disruption fractions (upstream `ConsolidationApproved`).
    pub const CONSOLIDATION_APPROVED: &str = "ConsolidationApproved";
    /// A disruption command launched a replacement for its nodes.
    pub const DISRUPTION_LAUNCHING: &str = "DisruptionLaunching";
    /// A disruption command waits for its replacement to initialize before draining.
    pub const DISRUPTION_WAITING_READINESS: &str = "DisruptionWaitingReadiness";
    /// An interruption message made Karpenter delete a NodeClaim (upstream's AWS reason). The
    /// Events of the message itself (`SpotInterrupted`, `SpotRebalanceRecommendation`,
    /// `InstanceUnhealthy`, `InstanceStopping`, `InstanceTerminating`) take their reasons from
    /// `karpenter_core::interruption::Kind::event_reason`.
    pub const TERMINATING_ON_INTERRUPTION: &str = "TerminatingOnInterruption";
    /// A static NodePool's `spec.replicas` went down and this NodeClaim is removed (upstream
    /// `static.deprovisioning` deletes without an Event).
    pub const STATIC_SCALE_DOWN: &str = "StaticScaleDown";
    /// An object uses a feature whose gate is off, so it is accepted but not acted on (a
    /// NodeOverlay without `FEATURE_GATES=NodeOverlay=true`); the message names the gate.
    /// This project's reason: upstream says nothing.
    pub const FEATURE_GATE_DISABLED: &str = "FeatureGateDisabled";
    /// A NodeClaim in a Capacity Block is deleted 40 minutes before the block ends, before EC2
    /// reclaims its instance (upstream `capacityreservation.expiration` only logs it).
    pub const CAPACITY_BLOCK_EXPIRING: &str = "CapacityBlockExpiring";
    /// A NodeClaim's capacity reservation ended and its instance runs on as on-demand: it is
    /// relabelled `karpenter.sh/capacity-type: on-demand` (upstream
    /// `capacityreservation.capacitytype` only logs it).
    pub const CAPACITY_RESERVATION_ENDED: &str = "CapacityReservationEnded";
}

/// Dedupe window for most events (upstream default).
pub const DEFAULT_DEDUPE: Duration = Duration::from_secs(120);
/// Dedupe window of FailedScheduling events.
pub const FAILED_SCHEDULING_DEDUPE: Duration = Duration::from_secs(300);
/// Dedupe window of NodePool-blocked and NoCompatibleInstanceTypes events.
pub const NODEPOOL_DEDUPE: Duration = Duration::from_secs(60);
/// Dedupe window of Unconsolidatable and DisruptionBlocked events (upstream: 15 minutes).
pub const UNCONSOLIDATABLE_DEDUPE: Duration = Duration::from_secs(900);
/// Dedupe window of NodeRepairBlocked events (upstream: 15 minutes).
pub const NODE_REPAIR_BLOCKED_DEDUPE: Duration = Duration::from_secs(900);

/// `Normal` or `Warning`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// `Normal`: something happened as it should (a launch, a nomination, a registration).
    Normal,
    /// `Warning`: something failed or is blocked and may need the operator (e.g.
    /// `FailedScheduling`).
    Warning,
}

/// One event to publish.
#[derive(Clone, Debug)]
pub struct EventSpec {
    /// The object the event is about.
    pub regarding: ObjectReference,
    /// The Event's `type`: [`EventType::Normal`] or [`EventType::Warning`].
    pub type_: EventType,
    /// One of [`reason`].
    pub reason: &'static str,
    /// The Event's `message`, as `kubectl describe` shows it; with the object and reason it is
    /// the dedupe key.
    pub message: String,
    /// Identical events within this window are dropped.
    pub dedupe: Duration,
}

struct TokenBucket {
    tokens: f64,
    last: Instant,
}

/// Publishes core/v1 Events in the background, deduplicated and (for Nominated) rate-limited.
pub struct Recorder {
    client: Client,
    seen: Mutex<HashMap<String, Instant>>,
    nominated: Mutex<TokenBucket>,
    in_flight: Arc<Semaphore>,
}

/// Nominated events are rate-limited by a token bucket, as upstream does (5/s, burst 10 there).
/// Ours is wider so that a typical batch tells every pod where it goes: 100/s, burst 1000.
const NOMINATED_RATE: f64 = 100.0;
const NOMINATED_BURST: f64 = 1000.0;

impl Recorder {
    /// A recorder writing through `client`.
    pub fn new(client: Client) -> Recorder {
        Recorder {
            client,
            seen: Mutex::new(HashMap::new()),
            nominated: Mutex::new(TokenBucket {
                tokens: NOMINATED_BURST,
                last: Instant::now(),
            }),
            in_flight: Arc::new(Semaphore::new(32)),
        }
    }

    fn admit(&self, ev: &EventSpec) -> bool {
        let now = Instant::now();
        let key = format!(
            "{}/{}/{}/{}",
            ev.regarding.uid.as_deref().unwrap_or_default(),
            ev.regarding.name.as_deref().unwrap_or_default(),
            ev.reason,
            ev.message
        );
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if seen
                .get(&key)
                .is_some_and(|at| now.duration_since(*at) < ev.dedupe)
            {
                return false;
            }
            if seen.len() > 50_000 {
                seen.retain(|_, at| now.duration_since(*at) < FAILED_SCHEDULING_DEDUPE);
            }
            seen.insert(key, now);
        }
        if ev.reason == reason::NOMINATED {
            let mut b = self.nominated.lock().unwrap_or_else(|e| e.into_inner());
            let refill = now.duration_since(b.last).as_secs_f64() * NOMINATED_RATE;
            b.tokens = (b.tokens + refill).min(NOMINATED_BURST);
            b.last = now;
            if b.tokens < 1.0 {
                return false;
            }
            b.tokens -= 1.0;
        }
        true
    }

    /// Publish an event about `obj` with the default dedupe window.
    pub fn about<K>(&self, obj: &K, type_: EventType, reason: &'static str, message: String)
    where
        K: kube::Resource<DynamicType = ()>,
    {
        self.publish(EventSpec {
            regarding: reference(obj),
            type_,
            reason,
            message,
            dedupe: DEFAULT_DEDUPE,
        });
    }

    /// Publish an event unless it duplicates a recent one; failures are logged, never returned
    /// (events are best effort).
    pub fn publish(&self, ev: EventSpec) {
        if !self.admit(&ev) {
            return;
        }
        let Ok(permit) = Arc::clone(&self.in_flight).try_acquire_owned() else {
            tracing::debug!(reason = ev.reason, "dropping event: too many in flight");
            return;
        };
        let client = self.client.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let namespace = ev
                .regarding
                .namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "default".into());
            let now = jiff::Timestamp::now();
            let event = Event {
                metadata: ObjectMeta {
                    name: Some(format!(
                        "{}.{:x}",
                        ev.regarding.name.as_deref().unwrap_or("object"),
                        now.as_nanosecond()
                    )),
                    namespace: Some(namespace.clone()),
                    ..ObjectMeta::default()
                },
                involved_object: ev.regarding.clone(),
                reason: Some(ev.reason.to_string()),
                message: Some(ev.message.clone()),
                type_: Some(match ev.type_ {
                    EventType::Normal => "Normal".into(),
                    EventType::Warning => "Warning".into(),
                }),
                first_timestamp: Some(Time(now)),
                last_timestamp: Some(Time(now)),
                event_time: Some(MicroTime(now)),
                count: Some(1),
                source: Some(EventSource {
                    component: Some("karpenter".into()),
                    host: None,
                }),
                reporting_component: Some("karpenter".into()),
                reporting_instance: Some("karpenter".into()),
                action: Some(ev.reason.to_string()),
                ..Event::default()
            };
            if let Err(e) = Api::<Event>::namespaced(client, &namespace)
                .create(&PostParams::default(), &event)
                .await
            {
                tracing::debug!(reason = ev.reason, error = %e, "publishing event failed");
            }
        });
    }
}

/// An ObjectReference to any object.
pub fn reference<K>(obj: &K) -> ObjectReference
where
    K: kube::Resource<DynamicType = ()>,
{
    obj.object_ref(&())
}
