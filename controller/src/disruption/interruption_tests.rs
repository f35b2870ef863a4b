//! Interruption commands against the sandbox API server while it answers writes with 409
//! Conflicts, as kube-apiserver does when another controller wrote the NodeClaim in between:
//! the command is decided again on the fresh NodeClaim and nothing is lost.

use std::sync::Arc;

use crds::NodeClaim;
use crds::disruption::{COMMAND_ANNOTATION, REASON_ANNOTATION};
use k8s_openapi::api::core::v1::Node;
use karpenter_core::clock::{Clock, SystemClock};
use karpenter_core::interruption::{Kind, Message};
use karpenter_core::snapshot::Snapshot;
use kube::{Api, Client};
use sandbox::faults::{FaultConfig, FaultKind};

use super::{CONFLICT_ATTEMPTS, start};
use crate::cloudprovider::sim::SimCloud;
use crate::runtime::{Context, Settings, events, metrics};
use crate::state::ClusterState;

const PROVIDER_ID: &str = "aws:///us-east-1a/i-0123456789abcdef0";

/// A sandbox API server with Karpenter's CRDs, and a controller context on it (system clock,
/// simulated cloud); the returned tasks are its cache watches.
async fn world() -> (
    sandbox::runtime::Sandbox,
    Context,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let server = sandbox::runtime::Sandbox::start(0).await.expect("sandbox");
    let store = server.store();
    let crd_type = store
        .resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .expect("CRDs are served");
    for crd in crds::generate::crds() {
        let crd = serde_json::to_value(&crd).expect("CRD as JSON");
        store.create(&crd_type, "", crd).expect("install the CRD");
    }
    let client = Client::try_from(server.client_config()).expect("client");
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (state, tasks) = ClusterState::start(&client, false);
    let ctx = Context {
        recorder: events::Recorder::new(client.clone()),
        client,
        cloud: Arc::new(SimCloud::new("demo", Arc::clone(&clock)).expect("catalog")),
        state,
        clock_jumps: crate::runtime::clock_jumps(clock.as_ref()),
        clock,
        settings: Settings::default(),
        evictions: Default::default(),
        metrics: Arc::new(metrics::Metrics::new()),
    };
    (server, ctx, tasks)
}

/// An interruption message of `kind` for the instance of [`PROVIDER_ID`].
fn message(kind: Kind, detail_type: &str) -> Message {
    Message {
        kind,
        instance_ids: vec!["i-0123456789abcdef0".into()],
        time: Some(jiff::Timestamp::now()),
        id: "e-1".into(),
        detail_type: detail_type.into(),
    }
}

#[tokio::test]
async fn a_conflicting_write_is_decided_again_and_the_node_still_goes() {
    let (server, ctx, tasks) = world().await;
    let store = server.store();
    // A spot NodeClaim whose node runs no pods: nothing to replace, so it is deleted at once.
    let claim = testutil::nodeclaim("default-x")
        .provider_id(PROVIDER_ID)
        .node_name("n1")
        .json();
    let claims = store
        .resource("karpenter.sh", "v1", "nodeclaims")
        .expect("NodeClaims are served");
    let claim = store.create(&claims, "", claim).expect("the NodeClaim");
    let node = testutil::node("n1")
        .provider_id(PROVIDER_ID)
        .ready("True")
        .json();
    let nodes = store.resource("", "v1", "nodes").expect("nodes are served");
    let node = store.create(&nodes, "", node).expect("the node");
    let claim: NodeClaim = serde_json::from_value((*claim).clone()).expect("a NodeClaim");
    let node: Node = serde_json::from_value((*node).clone()).expect("a Node");

    let client = ctx.client.clone();
    let snap = Arc::new(Snapshot {
        nodes: vec![Arc::new(node)],
        nodeclaims: vec![Arc::new(claim.clone())],
        ..Snapshot::default()
    });
    let message = message(
        Kind::SpotInterrupted,
        "EC2 Spot Instance Interruption Warning",
    );

    // Every write conflicts until all but one of the attempts have failed.
    let conflicts = u64::from(CONFLICT_ATTEMPTS - 1);
    let faults = server.faults();
    let mut config = FaultConfig::default().with_rate(FaultKind::Conflict, 1000);
    config.budget = Some(conflicts);
    faults.configure(config);
    faults.enable();
    start(&ctx, &snap, &message, &claim)
        .await
        .expect("decided again after each conflict");
    assert_eq!(faults.counts().of(FaultKind::Conflict), conflicts);
    faults.disable();

    // The command was written, and the NodeClaim deleted with the interruption's reason (it
    // has no finalizer here, so it is gone).
    let left = Api::<NodeClaim>::all(client.clone())
        .get_opt("default-x")
        .await
        .expect("API call");
    assert!(left.is_none(), "deleted: {left:?}");

    // With more conflicts than attempts, the error comes back (the message stays queued).
    let again = testutil::nodeclaim("default-y")
        .provider_id("aws:///us-east-1a/i-0fedcba9876543210")
        .json();
    let again: NodeClaim =
        serde_json::from_value((*store.create(&claims, "", again).expect("NodeClaim")).clone())
            .expect("a NodeClaim");
    faults.configure(FaultConfig::default().with_rate(FaultKind::Conflict, 1000));
    faults.enable();
    let err = start(&ctx, &snap, &message, &again)
        .await
        .expect_err("conflicts on every attempt");
    assert!(
        matches!(&err, kube::Error::Api(e) if e.code == 409),
        "{err}"
    );
    faults.disable();
    let kept = Api::<NodeClaim>::all(client)
        .get_opt("default-y")
        .await
        .expect("API call")
        .expect("kept");
    let annotations = kept.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.contains_key(COMMAND_ANNOTATION),
        "{annotations:?}"
    );
    assert!(!annotations.contains_key(REASON_ANNOTATION));
    tasks.iter().for_each(tokio::task::JoinHandle::abort);
}

/// Issue 33: an instance that EC2 terminated took its node with it, and the node's deletion
/// deleted the NodeClaim before the `terminating` message was read; the disruption history
/// then said `Deleted`, as for a user's `kubectl delete`. The message, read late, still gives
/// the deletion its reason.
#[tokio::test]
async fn an_interruption_read_after_the_nodeclaim_went_is_still_its_reason() {
    let (server, ctx, tasks) = world().await;
    let store = server.store();
    let claims = store
        .resource("karpenter.sh", "v1", "nodeclaims")
        .expect("NodeClaims are served");
    let claim = testutil::nodeclaim("default-gone")
        .provider_id(PROVIDER_ID)
        .finalizer(crds::labels::TERMINATION_FINALIZER)
        .json();
    store.create(&claims, "", claim).expect("the NodeClaim");
    // Deleted as the node termination does it, without a reason; its finalizer holds it.
    let api = Api::<NodeClaim>::all(ctx.client.clone());
    api.delete("default-gone", &Default::default())
        .await
        .expect("delete");
    let deleting = api
        .get("default-gone")
        .await
        .expect("held by its finalizer");
    assert_eq!(crds::history::disruption_reason(&deleting), "Deleted");
    let snap = Arc::new(Snapshot::default());
    let terminating = message(
        Kind::InstanceTerminated,
        "EC2 Instance State-change Notification",
    );
    start(&ctx, &snap, &terminating, &deleting)
        .await
        .expect("handled");
    let after = api.get("default-gone").await.expect("still held");
    assert_eq!(
        crds::history::disruption_reason(&after),
        "InstanceTerminated"
    );
    // A user's deletion read by no interruption keeps saying so.
    let other = testutil::nodeclaim("default-user")
        .finalizer(crds::labels::TERMINATION_FINALIZER)
        .json();
    store.create(&claims, "", other).expect("the NodeClaim");
    api.delete("default-user", &Default::default())
        .await
        .expect("delete");
    let user = api.get("default-user").await.expect("held");
    assert_eq!(crds::history::disruption_reason(&user), "Deleted");
    tasks.iter().for_each(tokio::task::JoinHandle::abort);
}
