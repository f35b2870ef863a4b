//! The interruption queue on SQS (aws-sdk-sqs) against moto's EC2 and SQS server on loopback
//! (PyPI `moto[server]`; `./scripts/test.sh` installs it). The queue alone: EventBridge bodies
//! as the builders in `karpenter_core::interruption::event` write them and as EventBridge
//! delivers them (raw JSON in the shape of upstream's test fixtures) come back from a receive
//! with their bodies and `SentTimestamp`, deletes remove them (twice is no error), and a queue
//! that does not exist is named in the error together with the fix. End to end: the
//! interruption controller reads every kind of message from SQS and acts on the instances
//! moto's EC2 launched for a sandbox cluster. Each test starts its own `moto_server`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use controller::cloudprovider::CloudProvider;
use controller::cloudprovider::aws::AwsCloud;
use controller::cloudprovider::aws::sqs::SqsQueue;
use controller::cloudprovider::build::Cloud;
use controller::cloudprovider::queue::{InterruptionQueue, QueueMessage};
use controller::runtime::metrics::parse_samples;
use ec2api::SdkEc2;
use ec2api::sqs::SdkSqs;
use jiff::{SignedDuration, Timestamp};
use karpenter::sandbox::{LocalCluster, start_cluster_with, with_defaults};
use karpenter::workload;
use karpenter_core::clock::{Clock, ShiftedClock};
use karpenter_core::interruption::{self, Kind, event};
use sandbox::registry::TypeKey;
use serde_json::Value;

use crate::moto_cloud;
use moto_cloud::{CLUSTER, Moto, aws_settings, cluster_config};

const ACCOUNT: &str = "123456789012";
const REGION: &str = "us-east-1";
/// A short long-poll, so that a receive from an empty queue returns soon.
const WAIT: Duration = Duration::from_secs(1);

/// The queue `name` as the controller reads it (not created).
async fn queue(moto: &Moto, name: &str) -> SqsQueue {
    SqsQueue::new(SdkSqs::new(&moto.config().await, name).with_wait(WAIT))
}

/// A new queue `name`, as the controller reads it.
async fn created(moto: &Moto, name: &str) -> SqsQueue {
    let q = queue(moto, name).await;
    q.sqs().create_queue().await.expect("CreateQueue");
    q
}

/// Receive until `n` messages came or a receive comes back empty.
async fn receive_all(q: &SqsQueue, n: usize) -> Vec<QueueMessage> {
    let mut got = Vec::new();
    while got.len() < n {
        let batch = q.receive().await.expect("receive");
        assert!(batch.len() <= 10, "at most 10 a receive: {}", batch.len());
        if batch.is_empty() {
            break;
        }
        got.extend(batch);
    }
    got
}

/// A spot interruption warning as EventBridge delivers it (the shape of upstream's
/// `spotInterruptionMessage` fixture), written out rather than built.
fn raw_spot_warning(instance: &str) -> String {
    format!(
        r#"{{"version":"0","id":"1e5527d7-bb36-4607-3370-4164db56a40e","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"{ACCOUNT}","time":"2026-11-26T10:00:00Z","region":"{REGION}","resources":["arn:aws:ec2:{REGION}:instance/{instance}"],"detail":{{"instance-id":"{instance}","instance-action":"terminate"}}}}"#
    )
}

/// An AWS Health scheduled change for two instances, as EventBridge delivers it.
fn raw_scheduled_change(a: &str, b: &str) -> String {
    format!(
        r#"{{"version":"0","id":"7fb65329-1628-4cf3-a740-95fg457h1402","detail-type":"AWS Health Event","source":"aws.health","account":"{ACCOUNT}","time":"2026-11-26T10:00:00Z","region":"{REGION}","resources":["arn:aws:ec2:{REGION}:instance/{a}","arn:aws:ec2:{REGION}:instance/{b}"],"detail":{{"eventArn":"arn:aws:health:{REGION}::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/1","service":"EC2","eventTypeCode":"AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED","eventTypeCategory":"scheduledChange","startTime":"Thu, 26 Nov 2026 12:00:00 GMT","affectedEntities":[{{"entityValue":"{a}"}},{{"entityValue":"{b}"}}]}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eventbridge_bodies_come_back_with_their_sent_time_and_deleted_ones_are_gone() {
    let moto = Moto::start();
    let q = created(&moto, "moto-interruptions").await;
    assert_eq!(q.name(), "moto-interruptions");
    let raised: Timestamp = "2026-11-26T10:00:00Z".parse().expect("time");
    // Every kind the controller reads, a no-op, and a body that is no event at all.
    let sent: Vec<(String, Result<Kind, ()>)> = vec![
        (
            event::spot_interruption("e1", ACCOUNT, REGION, "i-0000000000000001", raised),
            Ok(Kind::SpotInterrupted),
        ),
        (
            event::rebalance_recommendation("e2", ACCOUNT, REGION, "i-0000000000000002", raised),
            Ok(Kind::RebalanceRecommendation),
        ),
        (
            event::scheduled_change("e3", ACCOUNT, REGION, &["i-0000000000000003"], raised),
            Ok(Kind::ScheduledChange),
        ),
        (
            event::state_change(
                "e4",
                ACCOUNT,
                REGION,
                "i-0000000000000004",
                "stopping",
                raised,
            ),
            Ok(Kind::InstanceStopped),
        ),
        (
            event::state_change(
                "e5",
                ACCOUNT,
                REGION,
                "i-0000000000000005",
                "shutting-down",
                raised,
            ),
            Ok(Kind::InstanceTerminated),
        ),
        (
            event::state_change(
                "e6",
                ACCOUNT,
                REGION,
                "i-0000000000000006",
                "running",
                raised,
            ),
            Ok(Kind::NoOp),
        ),
        (
            raw_spot_warning("i-0000000000000007"),
            Ok(Kind::SpotInterrupted),
        ),
        (
            raw_scheduled_change("i-0000000000000008", "i-0000000000000009"),
            Ok(Kind::ScheduledChange),
        ),
        ("{\"version\":\"0\",\"source\":".to_string(), Err(())),
        ("not an event".to_string(), Err(())),
        // A duplicate: EventBridge delivers at least once.
        (
            event::spot_interruption("e1", ACCOUNT, REGION, "i-0000000000000001", raised),
            Ok(Kind::SpotInterrupted),
        ),
    ];
    let before = Timestamp::now();
    let mut ids = BTreeMap::new();
    for (body, _) in &sent {
        let id = q.sqs().send(body).await.expect("SendMessage");
        ids.insert(id, body.clone());
    }
    let after = Timestamp::now();
    assert_eq!(ids.len(), sent.len(), "every send has its own message id");

    let got = receive_all(&q, sent.len()).await;
    assert_eq!(
        got.len(),
        sent.len(),
        "11 messages in two receives at least"
    );
    let slack = SignedDuration::from_secs(2);
    for m in &got {
        let body = m.body.clone().expect("a body");
        assert_eq!(ids.get(&m.id), Some(&body), "message {} is as sent", m.id);
        let at = m.sent.expect("SentTimestamp");
        assert!(
            at >= before - slack && at <= after + slack,
            "sent at {at}, between {before} and {after}"
        );
        assert!(!m.receipt.is_empty());
    }
    let mut kinds: Vec<Result<Kind, ()>> = got
        .iter()
        .map(|m| interruption::parse(m.body.as_deref().unwrap_or_default()).map(|p| p.kind))
        .map(|r| r.map_err(|_| ()))
        .collect();
    let mut expected: Vec<Result<Kind, ()>> = sent.iter().map(|(_, k)| *k).collect();
    kinds.sort_by_key(|k| format!("{k:?}"));
    expected.sort_by_key(|k| format!("{k:?}"));
    assert_eq!(kinds, expected);
    let scheduled = got
        .iter()
        .filter_map(|m| interruption::parse(m.body.as_deref()?).ok())
        .find(|p| p.instance_ids.len() == 2)
        .expect("the raw scheduled change");
    assert_eq!(
        scheduled.instance_ids,
        ["i-0000000000000008", "i-0000000000000009"]
    );

    // Received messages are hidden from other receivers until deleted.
    assert!(q.receive().await.expect("receive").is_empty());
    assert_eq!(
        q.sqs().message_counts().await.expect("counts"),
        (0, 11),
        "(visible, in flight)"
    );
    for m in &got {
        q.delete(&m.receipt).await.expect("DeleteMessage");
    }
    for m in &got {
        q.delete(&m.receipt)
            .await
            .expect("deleting a deleted message is no error");
    }
    assert_eq!(q.sqs().message_counts().await.expect("counts"), (0, 0));
    assert!(q.receive().await.expect("receive").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_that_does_not_exist_is_named_with_the_fix_and_found_once_created() {
    let moto = Moto::start();
    let q = queue(&moto, "no-such-queue").await;
    let e = q.check().await.expect_err("no queue yet");
    assert_eq!(e.queue, "no-such-queue");
    assert_eq!(e.operation, "GetQueueUrl");
    let text = e.to_string();
    for needed in [
        "no-such-queue",
        "NonExistentQueue",
        REGION,
        "deploy/cloudformation/interruption-queue.yaml",
        "--interruption-queue",
        "INTERRUPTION_QUEUE",
    ] {
        assert!(text.contains(needed), "{text:?} names {needed:?}");
    }
    let e = q.receive().await.expect_err("receive without a queue");
    assert_eq!(e.operation, "GetQueueUrl", "{e}");
    let e = q
        .delete("receipt")
        .await
        .expect_err("delete without a queue");
    assert_eq!(e.operation, "GetQueueUrl", "{e}");

    // As upstream: the lookup is tried again, so a queue created later is read.
    let other = queue(&moto, "no-such-queue").await;
    other.sqs().create_queue().await.expect("CreateQueue");
    let url = q.check().await.expect("found now");
    assert!(url.ends_with("/no-such-queue"), "{url}");
    other.sqs().send("{}").await.expect("SendMessage");
    let got = receive_all(&q, 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body.as_deref(), Some("{}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_receipt_is_an_error_not_a_silent_success() {
    let moto = Moto::start();
    let q = created(&moto, "moto-receipts").await;
    let e = q
        .delete("not-a-receipt-this-queue-gave")
        .await
        .expect_err("an invalid receipt");
    assert_eq!(e.operation, "DeleteMessage");
    assert!(e.message.contains("ReceiptHandleIsInvalid"), "{e}");
}

/// A spot NodePool of two instance types that fit one `web` pod each (upgrades paused: moto
/// gives instances the VPC's default security group, so every node would look drifted), its
/// EC2NodeClass, and five `web` pods.
const SPOT_WORKLOAD: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
  annotations: {upgrades.karpenter.sh/paused: "true"}
spec:
  disruption: {consolidateAfter: Never}
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      expireAfter: 720h
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
      - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, c5.large]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: KarpenterNodeRole-moto-demo
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: moto-demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: moto-demo}}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 5
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx
        resources:
          requests: {cpu: 1200m, memory: 1Gi}
"#;

/// The objects of a kind in the sandbox's store, as JSON.
fn objects(cluster: &LocalCluster, group: &str, plural: &str) -> Vec<Value> {
    let key = TypeKey {
        group: group.into(),
        plural: plural.into(),
    };
    cluster
        .sandbox
        .store()
        .objects(&key)
        .iter()
        .map(|v| (**v).clone())
        .collect()
}

fn name(o: &Value) -> String {
    o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn label(o: &Value, key: &str) -> String {
    o["metadata"]["labels"][key]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn instance_of(claim: &Value) -> String {
    claim["status"]["providerID"]
        .as_str()
        .and_then(ec2api::instance_id)
        .unwrap_or_default()
        .to_string()
}

fn nodeclaim_names(cluster: &LocalCluster) -> BTreeSet<String> {
    objects(cluster, "karpenter.sh", "nodeclaims")
        .iter()
        .map(name)
        .collect()
}

/// Events about `object` with `reason`.
fn events(cluster: &LocalCluster, object: &str, reason: &str) -> usize {
    objects(cluster, "", "events")
        .iter()
        .filter(|e| e["involvedObject"]["name"] == object && e["reason"] == reason)
        .count()
}

/// The sum of the controller's samples `name{labels}` (0 when absent).
fn counter(cluster: &LocalCluster, name: &str, labels: &[(&str, &str)]) -> f64 {
    let text = cluster.ctx.metrics.encode(&cluster.ctx.state, true);
    parse_samples(&text)
        .expect("metrics parse")
        .iter()
        .filter(|s| s.matches(name, labels))
        .map(|s| s.value)
        .sum()
}

/// Poll `cond` every half second until it holds, or panic naming `what` after `timeout`.
async fn eventually(what: &str, timeout: Duration, mut cond: impl AsyncFnMut() -> bool) {
    let begin = Instant::now();
    while !cond().await {
        assert!(begin.elapsed() < timeout, "{what}: not within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The whole path on moto's EC2 and SQS: the AWS provider offers the SQS queue
/// (`AwsCloud::interruption_queue`), the operator starts the interruption controller
/// (`controller::interruption_queue::run`) on it, and the controller's `process` handles each message
/// EventBridge would deliver: a spot interruption warning (and its duplicate), a rebalance
/// recommendation, an AWS Health scheduled change, instances stopping and shutting down, a
/// warning for an instance Karpenter does not know, and a body that is no event.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_controller_acts_on_every_kind_from_sqs_and_leaves_the_queue_empty() {
    let moto = Moto::start();
    moto.seed_network(CLUSTER).await;
    let config = moto.config().await;
    // The queue is named after the cluster, as deploy/cloudformation names it; receives wait
    // the real 20 s.
    let sqs = SdkSqs::new(&config, CLUSTER);
    sqs.create_queue().await.expect("CreateQueue");
    let queue = Arc::new(SqsQueue::new(sqs));
    // The AWS provider's clock: real time, moved on by the test so that the capacity-error
    // cache can be read 3 minutes on without waiting for them.
    let clock = Arc::new(ShiftedClock::new());
    let dir = tempfile::tempdir().expect("temp dir");
    let manifests = with_defaults(
        workload::parse_yaml(Path::new("spot.yaml"), SPOT_WORKLOAD).expect("workload"),
        CLUSTER,
    )
    .expect("defaults");
    let cluster = start_cluster_with(&cluster_config(dir.path()), &manifests, {
        let (queue, clock) = (Arc::clone(&queue), Arc::clone(&clock));
        move |endpoint, _| async move {
            let cloud = Arc::new(
                AwsCloud::new(
                    Arc::new(SdkEc2::new(&config)),
                    aws_settings(endpoint),
                    clock,
                )
                .map_err(|e| e.to_string())?
                .with_interruption_queue(queue),
            );
            Ok(Cloud {
                provider: Arc::clone(&cloud) as Arc<dyn CloudProvider>,
                sim: None,
                aws: Some(cloud),
            })
        }
    })
    .await
    .expect("cluster starts");
    eventually(
        "five web pods run on five spot nodes",
        Duration::from_secs(300),
        async || {
            let o = cluster.observe().await;
            o.settled() && o.pods_total == 5 && o.pods_bound == 5 && o.claims_initialized == 5
        },
    )
    .await;
    let claims = objects(&cluster, "karpenter.sh", "nodeclaims");
    assert_eq!(claims.len(), 5);
    for c in &claims {
        assert_eq!(
            label(c, "karpenter.sh/capacity-type"),
            "spot",
            "{}",
            name(c)
        );
    }
    let [spot, retired, stopping, terminating, rebalanced] = [0, 1, 2, 3, 4].map(|i| {
        let c = &claims[i];
        (name(c), instance_of(c))
    });

    let now = Timestamp::now();
    let bodies = [
        "{this is not an event".to_string(),
        event::spot_interruption("e-unknown", ACCOUNT, REGION, "i-00000000000000000", now),
        event::rebalance_recommendation("e-rebalance", ACCOUNT, REGION, &rebalanced.1, now),
        event::spot_interruption("e-spot", ACCOUNT, REGION, &spot.1, now),
        event::spot_interruption("e-spot-again", ACCOUNT, REGION, &spot.1, now),
        event::scheduled_change("e-health", ACCOUNT, REGION, &[retired.1.as_str()], now),
        event::state_change("e-stop", ACCOUNT, REGION, &stopping.1, "stopping", now),
        event::state_change(
            "e-term",
            ACCOUNT,
            REGION,
            &terminating.1,
            "shutting-down",
            now,
        ),
    ];
    for body in &bodies {
        queue.sqs().send(body).await.expect("SendMessage");
    }

    eventually(
        "every message is handled and deleted",
        Duration::from_secs(60),
        async || {
            queue.sqs().message_counts().await.expect("counts") == (0, 0)
                && counter(
                    &cluster,
                    "karpenter_interruption_deleted_messages_total",
                    &[],
                ) == 8.0
        },
    )
    .await;
    // The offering was marked between the send and now: the checks below are timed from these.
    let handled = Timestamp::now();
    let received = |t: &str| {
        counter(
            &cluster,
            "karpenter_interruption_received_messages_total",
            &[("message_type", t)],
        )
    };
    assert_eq!(
        received("spot_interrupted"),
        3.0,
        "two warnings and the unknown one"
    );
    assert_eq!(received("rebalance_recommendation"), 1.0);
    assert_eq!(received("scheduled_change"), 1.0);
    assert_eq!(received("instance_stopped"), 1.0);
    assert_eq!(received("instance_terminated"), 1.0);

    for ((claim, _), reason) in [
        (&spot, "SpotInterrupted"),
        (&retired, "InstanceUnhealthy"),
        (&stopping, "InstanceStopping"),
        (&terminating, "InstanceTerminating"),
        (&rebalanced, "SpotRebalanceRecommendation"),
    ] {
        assert!(events(&cluster, claim, reason) > 0, "{reason} on {claim}");
    }
    // The interrupted spot offering is out of the provider's offerings for the cache period.
    let (itype, zone) = (
        label(&claims[0], "node.kubernetes.io/instance-type"),
        label(&claims[0], "topology.kubernetes.io/zone"),
    );
    let class = cluster
        .ctx
        .state
        .nodeclasses
        .state()
        .into_iter()
        .next()
        .expect("the node class");
    let available = async || {
        let types = cluster
            .cloud
            .instance_types(&class)
            .await
            .expect("instance types");
        types
            .iter()
            .find(|t| t.name == itype)
            .and_then(|t| {
                t.offerings
                    .iter()
                    .find(|o| o.zone == zone && o.capacity_type == "spot")
            })
            .map(|o| o.available)
            .expect("the offering is listed")
    };
    assert!(!available().await, "{itype} spot in {zone} is unavailable");

    eventually(
        "the interrupted, retired, stopping and terminating NodeClaims are deleted",
        Duration::from_secs(110),
        async || {
            let left = nodeclaim_names(&cluster);
            [&spot, &retired, &stopping, &terminating]
                .iter()
                .all(|(n, _)| !left.contains(n))
        },
    )
    .await;
    assert!(
        nodeclaim_names(&cluster).contains(&rebalanced.0),
        "a rebalance recommendation is an Event only"
    );
    eventually(
        "every pod runs again",
        Duration::from_secs(120),
        async || {
            let o = cluster.observe().await;
            o.pods_total == 5 && o.pods_bound == 5
        },
    )
    .await;
    for (_, id) in [&spot, &retired, &stopping, &terminating] {
        let state = moto.state(id).await;
        assert!(
            state == "terminated" || state == "shutting-down",
            "{id} is {state}"
        );
    }
    assert_eq!(moto.state(&rebalanced.1).await, "running");
    assert_eq!(queue.sqs().message_counts().await.expect("counts"), (0, 0));

    // However long the scenario took, look at 170 s after the send (the mark is younger than
    // 3 minutes then) and at 181 s after the last possible mark.
    let advance_to = |at: Timestamp| clock.advance(at.duration_since(clock.now()));
    advance_to(now + SignedDuration::from_secs(170));
    assert!(!available().await, "still unavailable before 3 minutes");
    advance_to(handled + SignedDuration::from_secs(181));
    assert!(available().await, "available again after 3 minutes");
}
