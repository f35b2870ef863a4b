//! The node termination controller against the sandbox API server, with a recording cloud: a
//! drained node's instance is not terminated while a VolumeAttachment of the node remains, is
//! terminated once it is deleted, and is terminated anyway once the NodeClaim's termination
//! time has passed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use crds::conditions::{self, INSTANCE_TERMINATING, VOLUMES_DETACHED};
use crds::labels::{NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION, TERMINATION_FINALIZER};
use crds::{EC2NodeClass, NodeClaim, StatusConditions};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Event, Node};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::cloudprovider::CloudProvider;
use crate::runtime::{Context, Settings, events, metrics};
use crate::state::ClusterState;
use karpenter_core::capacity::InstanceType;
use karpenter_core::clock::SystemClock;
use karpenter_core::cloud::{CloudError, Instance, Launched, NodeClassResolution};

const PROVIDER_ID: &str = "aws:///us-east-1a/i-0123";
/// How long any one step may take before the test fails (the controller reacts to watch
/// events; this only bounds a hang).
const STEP: Duration = Duration::from_secs(20);

/// A cloud that records terminations: the first delete succeeds, later ones find the instance
/// gone.
#[derive(Default)]
struct RecordingCloud {
    deletes: AtomicUsize,
}

#[async_trait]
impl CloudProvider for RecordingCloud {
    fn name(&self) -> &str {
        "recording"
    }
    async fn create(&self, _: &NodeClaim, _: &EC2NodeClass) -> Result<Launched, CloudError> {
        Err(CloudError::Create {
            reason: "NotInThisTest".into(),
            message: "no launches".into(),
        })
    }
    async fn delete(&self, _: &NodeClaim) -> Result<(), CloudError> {
        match self.deletes.fetch_add(1, Ordering::SeqCst) {
            0 => Ok(()),
            _ => Err(CloudError::NodeClaimNotFound("terminated".into())),
        }
    }
    async fn get(&self, id: &str) -> Result<Instance, CloudError> {
        Err(CloudError::NodeClaimNotFound(id.into()))
    }
    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        Ok(Vec::new())
    }
    async fn instance_types(
        &self,
        _: &EC2NodeClass,
    ) -> Result<Arc<Vec<Arc<InstanceType>>>, CloudError> {
        Ok(Arc::new(Vec::new()))
    }
    async fn resolve_node_class(&self, _: &EC2NodeClass) -> NodeClassResolution {
        NodeClassResolution {
            status: Default::default(),
            not_ready: None,
        }
    }
}

struct Harness {
    _server: sandbox::runtime::Sandbox,
    client: Client,
    cloud: Arc<RecordingCloud>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The sandbox with a deleting NodeClaim (`Drained=True`, `terminationGracePeriod` stamped as
/// ending at `termination_time` when given) and its deleting, Ready node `n1`, which has a
/// VolumeAttachment `va-1` of volume `pv-a`; the node termination controller running.
async fn start(termination_time: Option<&str>) -> Harness {
    let server = sandbox::runtime::Sandbox::start(0).await.expect("sandbox");
    let store = server.store();
    let crd_type = store
        .resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .expect("CRDs are served");
    for crd in crds::generate::crds() {
        let crd = serde_json::to_value(&crd).expect("CRD as JSON");
        store.create(&crd_type, "", crd).expect("install the CRD");
    }
    let mut claim = testutil::nodeclaim("default-x")
        .finalizer(TERMINATION_FINALIZER)
        .provider_id(PROVIDER_ID)
        .node_name("n1")
        .condition("Drained", "True");
    if let Some(t) = termination_time {
        claim = claim.annotation(NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION, t);
    }
    let claims = store
        .resource("karpenter.sh", "v1", "nodeclaims")
        .expect("NodeClaims are served");
    let claim = claim.json();
    store
        .create(&claims, "", claim.clone())
        .expect("create the NodeClaim");
    let node = testutil::node("n1")
        .provider_id(PROVIDER_ID)
        .finalizer(TERMINATION_FINALIZER)
        .taint("karpenter.sh/disrupted:NoSchedule")
        .ready("True")
        .json();
    let nodes = store.resource("", "v1", "nodes").expect("nodes are served");
    store
        .create(&nodes, "", node.clone())
        .expect("create the node");
    let config = server.client_config();
    let client = Client::try_from(config).expect("client");
    let attachment: VolumeAttachment = serde_json::from_value(json!({
        "metadata": {"name": "va-1"},
        "spec": {"attacher": "ebs.csi.aws.com", "nodeName": "n1",
                 "source": {"persistentVolumeName": "pv-a"}}
    }))
    .expect("volume attachment");
    Api::<VolumeAttachment>::all(client.clone())
        .create(&PostParams::default(), &attachment)
        .await
        .expect("API call");
    // The status subresource: written apart from the object, as the API server requires.
    Api::<NodeClaim>::all(client.clone())
        .patch_status(
            "default-x",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": claim["status"]})),
        )
        .await
        .expect("NodeClaim status");
    Api::<Node>::all(client.clone())
        .patch_status(
            "n1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": node["status"]})),
        )
        .await
        .expect("node status: Ready");
    let cloud = Arc::new(RecordingCloud::default());
    let (state, mut tasks) = ClusterState::start(&client, false);
    let ctx = Arc::new(Context {
        recorder: events::Recorder::new(client.clone()),
        client: client.clone(),
        cloud: Arc::clone(&cloud) as Arc<dyn CloudProvider>,
        state,
        clock: Arc::new(SystemClock),
        clock_jumps: crate::runtime::clock_jumps(&SystemClock),
        settings: Settings::default(),
        evictions: Default::default(),
        metrics: Arc::new(metrics::Metrics::new()),
    });
    tasks.push(tokio::spawn(super::super::termination::run(ctx)));
    // Deleting both: the finalizers hold them for the controller.
    Api::<NodeClaim>::all(client.clone())
        .delete("default-x", &DeleteParams::default())
        .await
        .expect("API call");
    Api::<Node>::all(client.clone())
        .delete("n1", &DeleteParams::default())
        .await
        .expect("API call");
    Harness {
        _server: server,
        client,
        cloud,
        tasks,
    }
}

/// Wait (by watch) until the NodeClaim's condition `type_` has `status` and `reason`.
async fn claim_condition(h: &Harness, type_: &str, status: &str, reason: Option<&str>) {
    let api: Api<NodeClaim> = Api::all(h.client.clone());
    let (t, s, r) = (
        type_.to_string(),
        status.to_string(),
        reason.map(String::from),
    );
    let wanted = move |c: Option<&NodeClaim>| {
        c.and_then(|c| conditions::get(c.status_conditions(), &t))
            .is_some_and(|c| c.status == s && r.as_ref().is_none_or(|r| &c.reason == r))
    };
    if tokio::time::timeout(STEP, await_condition(api.clone(), "default-x", wanted))
        .await
        .is_err()
    {
        let now = api.get_opt("default-x").await.ok().flatten();
        panic!("timed out waiting for {type_}={status} {reason:?}: {now:#?}");
    }
}

/// Wait (by watch) until the node object is gone (its finalizer released).
async fn node_gone(h: &Harness) {
    let api: Api<Node> = Api::all(h.client.clone());
    tokio::time::timeout(
        STEP,
        await_condition(api, "n1", |n: Option<&Node>| n.is_none()),
    )
    .await
    .expect("the node's finalizer is released")
    .expect("watch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_is_terminated_only_after_the_volume_attachment_is_gone() {
    let h = start(None).await;
    claim_condition(
        &h,
        VOLUMES_DETACHED,
        "Unknown",
        Some(conditions::reason::AWAITING_VOLUME_DETACHMENT),
    )
    .await;
    // The Event says which volume holds the node.
    let events: Api<Event> = Api::all(h.client.clone());
    let awaiting = watcher(events, watcher::Config::default())
        .applied_objects()
        .try_filter(|e| {
            futures::future::ready(
                e.reason.as_deref() == Some(events::reason::AWAITING_VOLUME_DETACHMENT)
                    && e.message.as_deref().is_some_and(|m| m.contains("pv-a")),
            )
        });
    let mut awaiting = std::pin::pin!(awaiting);
    tokio::time::timeout(STEP, awaiting.next())
        .await
        .expect("an AwaitingVolumeDetachment event")
        .expect("event stream")
        .expect("event");
    // The reconcile that said so stops before the instance; every later one while the
    // attachment exists does too (it requeues on the same decision).
    assert_eq!(h.cloud.deletes.load(Ordering::SeqCst), 0);

    Api::<VolumeAttachment>::all(h.client.clone())
        .delete("va-1", &DeleteParams::default())
        .await
        .expect("API call");
    let deleted = std::time::Instant::now();
    claim_condition(&h, VOLUMES_DETACHED, "True", None).await;
    // Triggered by the deletion, not found by the periodic look (milliseconds, not seconds).
    assert!(
        deleted.elapsed() < super::DETACH_POLL,
        "the detachment was seen after {:?}",
        deleted.elapsed()
    );
    claim_condition(&h, INSTANCE_TERMINATING, "True", None).await;
    node_gone(&h).await;
    assert!(h.cloud.deletes.load(Ordering::SeqCst) >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_termination_grace_period_ends_the_wait_for_volumes() {
    let h = start(Some("2020-01-01T00:00:00Z")).await;
    claim_condition(
        &h,
        VOLUMES_DETACHED,
        "False",
        Some(conditions::reason::TERMINATION_GRACE_PERIOD_ELAPSED),
    )
    .await;
    node_gone(&h).await;
    assert!(h.cloud.deletes.load(Ordering::SeqCst) >= 1);
    // The attachment is still there: the instance went without waiting for it.
    let still = Api::<VolumeAttachment>::all(h.client.clone())
        .get_opt("va-1")
        .await
        .expect("get");
    assert!(still.is_some());
}
