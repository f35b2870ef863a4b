//! Test builders: NodeClaims in every lifecycle state (as the API server would return them), a
//! fixed `now` and a fixed price book, shared by the row, table and list-output tests.

use crds::NodeClaim;
use jiff::Timestamp;
use testutil::{condition, nodeclaim};

use crate::status::PriceBook;

/// The instant every snapshot is taken at.
pub fn now() -> Timestamp {
    "2025-06-01T12:00:00Z".parse().expect("fixed now")
}

/// A NodeClaim of `pool` created at `created`, with uid `uid-<name>`, no labels beyond the
/// NodePool's and no status.
pub fn claim(name: &str, pool: &str, created: &str) -> NodeClaim {
    nodeclaim(name)
        .uid(format!("uid-{name}"))
        .created(created)
        .nodepool(pool)
        .build()
}

/// Sets the offering labels a launched NodeClaim carries.
pub fn set_offering(claim: &mut NodeClaim, instance_type: &str, capacity_type: &str, zone: &str) {
    let labels = claim.metadata.labels.get_or_insert_with(Default::default);
    labels.insert(
        "node.kubernetes.io/instance-type".into(),
        instance_type.into(),
    );
    labels.insert("karpenter.sh/capacity-type".into(), capacity_type.into());
    labels.insert("topology.kubernetes.io/zone".into(), zone.into());
}

/// Sets `type` to `status` ("True", "False" or "Unknown"), adding the condition if needed.
pub fn set_status(claim: &mut NodeClaim, type_: &str, status: &str) {
    let conds = &mut claim.status.get_or_insert_with(Default::default).conditions;
    conds.retain(|c| c.type_ != type_);
    conds.push(
        serde_json::from_value(condition(type_, status).at("2025-06-01T11:00:00Z").json())
            .expect("valid condition"),
    );
}

/// Sets every condition in `types` to True.
pub fn set_true(claim: &mut NodeClaim, types: &[&str]) {
    for t in types {
        set_status(claim, t, "True");
    }
}

/// Gives the NodeClaim a deletionTimestamp and Karpenter's termination finalizer.
pub fn mark_deleting(claim: &mut NodeClaim) {
    claim.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2025-06-01T11:59:00Z".parse().expect("time"),
    ));
    claim.metadata.finalizers = Some(vec!["karpenter.sh/termination".into()]);
}

/// Marks the NodeClaim as the candidate of a disruption command for `reason` (e.g.
/// `Underutilized`, `SpotInterrupted`) started at 11:59:40, replaced by `<name>-r`, with the
/// drain due at `drain_by` when given (as the controller annotates interrupted NodeClaims).
pub fn mark_disrupted(claim: &mut NodeClaim, reason: &str, drain_by: Option<&str>) {
    use crds::disruption::{
        COMMAND_ANNOTATION, DRAIN_BY_ANNOTATION, REASON_ANNOTATION, REPLACEMENT_ANNOTATION,
        STARTED_ANNOTATION,
    };
    let name = claim.metadata.name.clone().unwrap_or_default();
    let annotations = claim
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(
        COMMAND_ANNOTATION.into(),
        format!("{}-x7k2p", reason.to_ascii_lowercase()),
    );
    annotations.insert(REASON_ANNOTATION.into(), reason.into());
    annotations.insert(REPLACEMENT_ANNOTATION.into(), format!("{name}-r"));
    annotations.insert(STARTED_ANNOTATION.into(), "2025-06-01T11:59:40Z".into());
    if let Some(at) = drain_by {
        annotations.insert(DRAIN_BY_ANNOTATION.into(), at.into());
    }
}

fn registered(claim: &mut NodeClaim, node: Option<&str>, instance: &str, zone: &str) {
    let status = claim.status.get_or_insert_with(Default::default);
    status.provider_id = Some(format!("aws:///{zone}/{instance}"));
    status.node_name = node.map(str::to_owned);
}

/// Six NodeClaims: two ready (one without any labels or creation time), one in each in-flight
/// state and one terminating, in scrambled order.
pub fn sample() -> Vec<NodeClaim> {
    let all = ["Launched", "Registered", "Initialized", "Ready"];

    let mut ready = claim("default-abcde", "default", "2025-06-01T06:47:30Z");
    set_offering(&mut ready, "m5.large", "on-demand", "us-east-1a");
    set_true(&mut ready, &all);
    registered(
        &mut ready,
        Some("ip-10-0-1-17.ec2.internal"),
        "i-0a1b2c3d4e5f60001",
        "us-east-1a",
    );

    let mut registering = claim("default-fghij", "default", "2025-06-01T11:58:25Z");
    set_offering(&mut registering, "c5.xlarge", "spot", "us-east-1b");
    set_true(&mut registering, &["Launched"]);
    set_status(&mut registering, "Registered", "Unknown");
    registered(&mut registering, None, "i-0a1b2c3d4e5f60002", "us-east-1b");

    let launching = claim("default-klmno", "default", "2025-06-01T11:59:55Z");

    let mut initializing = claim("gpu-pqrst", "gpu", "2025-06-01T11:57:00Z");
    set_offering(&mut initializing, "g5.xlarge", "on-demand", "us-east-1c");
    set_true(&mut initializing, &["Launched", "Registered"]);
    registered(
        &mut initializing,
        Some("ip-10-0-3-9.ec2.internal"),
        "i-0a1b2c3d4e5f60003",
        "us-east-1c",
    );

    let mut terminating = claim("gpu-uvwxy", "gpu", "2025-05-31T06:00:00Z");
    set_offering(&mut terminating, "g5.xlarge", "spot", "us-east-1a");
    set_true(&mut terminating, &all);
    registered(
        &mut terminating,
        Some("ip-10-0-1-200.ec2.internal"),
        "i-0a1b2c3d4e5f60004",
        "us-east-1a",
    );
    mark_deleting(&mut terminating);

    let mut stray = claim("stray", "unused", "2025-06-01T11:00:00Z");
    stray.metadata.labels = None;
    stray.metadata.creation_timestamp = None;
    set_true(&mut stray, &all);

    vec![
        terminating,
        stray,
        launching,
        ready,
        initializing,
        registering,
    ]
}

/// Round prices for the sample's offerings; they add up to $1.2345/hour.
#[derive(Clone, Copy, Debug)]
pub struct FixedPrices;

impl PriceBook for FixedPrices {
    fn hourly_price(
        &self,
        instance_type: &str,
        _region: Option<&str>,
        _zone: Option<&str>,
        capacity_type: Option<&str>,
    ) -> Option<f64> {
        match (instance_type, capacity_type?) {
            ("m5.large", "on-demand") => Some(0.096),
            ("c5.xlarge", "spot") => Some(0.0685),
            ("g5.xlarge", "on-demand") => Some(1.006),
            ("g5.xlarge", "spot") => Some(0.064),
            _ => None,
        }
    }
}
