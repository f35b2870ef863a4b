//! The interruption queue on SQS (aws-sdk-sqs) against moto's SQS server on loopback (PyPI
//! `moto[server]`; `./scripts/test.sh` installs it): EventBridge bodies as the builders in
//! `karpenter_core::interruption::event` write them and as EventBridge delivers them (raw JSON
//! in the shape of upstream's test fixtures) come back from a receive with their bodies and
//! `SentTimestamp`, deletes remove them (twice is no error), and a queue that does not exist is
//! named in the error together with the fix. Each test starts its own `moto_server`.

use std::collections::BTreeMap;
use std::time::Duration;

use controller::cloudprovider::aws::sqs::SqsQueue;
use controller::cloudprovider::queue::{InterruptionQueue, QueueMessage};
use ec2api::moto::MotoServer;
use ec2api::sqs::SdkSqs;
use jiff::{SignedDuration, Timestamp};
use karpenter_core::interruption::{self, Kind, event};

const ACCOUNT: &str = "123456789012";
const REGION: &str = "us-east-1";
/// A short long-poll, so that a receive from an empty queue returns soon.
const WAIT: Duration = Duration::from_secs(1);

struct Moto {
    server: MotoServer,
}

impl Moto {
    fn start() -> Moto {
        let server = MotoServer::start(std::iter::empty::<(&str, &str)>())
            .expect("moto_server starts (./scripts/test.sh installs it)");
        Moto { server }
    }

    async fn config(&self) -> aws_config::SdkConfig {
        ec2api::loader(Some(&self.server.url))
            .await
            .region(aws_config::Region::new(REGION))
            .credentials_provider(aws_sdk_ec2::config::Credentials::new(
                "testing", "testing", None, None, "test",
            ))
            .load()
            .await
    }

    /// The queue `name` as the controller reads it (not created).
    async fn queue(&self, name: &str) -> SqsQueue {
        SqsQueue::new(SdkSqs::new(&self.config().await, name).with_wait(WAIT))
    }

    /// A new queue `name`, as the controller reads it.
    async fn created(&self, name: &str) -> SqsQueue {
        let q = self.queue(name).await;
        q.sqs().create_queue().await.expect("CreateQueue");
        q
    }
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
    let q = moto.created("moto-interruptions").await;
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
    assert_eq!(got.len(), sent.len(), "11 messages in two receives at least");
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
    let mut expected: Vec<Result<Kind, ()>> = sent.iter().map(|(_, k)| k.clone()).collect();
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
    let q = moto.queue("no-such-queue").await;
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
    let e = q.delete("receipt").await.expect_err("delete without a queue");
    assert_eq!(e.operation, "GetQueueUrl", "{e}");

    // As upstream: the lookup is tried again, so a queue created later is read.
    let other = moto.queue("no-such-queue").await;
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
    let q = moto.created("moto-receipts").await;
    let e = q
        .delete("not-a-receipt-this-queue-gave")
        .await
        .expect_err("an invalid receipt");
    assert_eq!(e.operation, "DeleteMessage");
    assert!(e.message.contains("ReceiptHandleIsInvalid"), "{e}");
}
