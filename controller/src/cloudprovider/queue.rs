//! The interruption queue the controller reads (upstream `pkg/providers/sqs`): an SQS queue fed
//! by EventBridge rules on a real cluster (`aws` feature), or the simulated cloud's
//! [`MemoryQueue`], which holds the same EventBridge bodies.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;

/// The longest a receive waits for a message (SQS's long-poll maximum, upstream's setting).
pub const LONG_POLL: Duration = Duration::from_secs(20);
/// The most messages one receive returns (SQS's maximum, upstream's setting).
pub const BATCH: usize = 10;

/// One message received from the queue.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueMessage {
    /// The queue's message id.
    pub id: String,
    /// The handle [`InterruptionQueue::delete`] takes (SQS's receipt handle).
    pub receipt: String,
    /// The body: an EventBridge event as JSON (see `karpenter_core::interruption`); `None`
    /// when the queue returned no body.
    pub body: Option<String>,
    /// When the queue received it (SQS's `SentTimestamp`), for
    /// `karpenter_interruption_message_queue_duration_seconds`.
    pub sent: Option<Timestamp>,
}

/// A queue error: the operation and the cloud's message.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("interruption queue {queue}: {operation}: {message}")]
pub struct QueueError {
    /// The queue's name.
    pub queue: String,
    /// `ReceiveMessage`, `DeleteMessage`, `GetQueueUrl`, ...
    pub operation: String,
    /// What failed, e.g. `AWS.SimpleQueueService.NonExistentQueue: ...`.
    pub message: String,
}

/// Where interruption messages come from.
#[async_trait]
pub trait InterruptionQueue: Send + Sync {
    /// The queue's name (`--interruption-queue`).
    fn name(&self) -> &str;

    /// Up to [`BATCH`] messages, waiting up to [`LONG_POLL`] for the first. A received
    /// message is hidden from other receivers until it is deleted or its visibility timeout
    /// (20 s) passes.
    ///
    /// Errors: the queue cannot be reached or read.
    async fn receive(&self) -> Result<Vec<QueueMessage>, QueueError>;

    /// Delete a received message by its receipt handle (handled, or unreadable).
    ///
    /// Errors: the queue cannot be reached; deleting an already deleted message is not one.
    async fn delete(&self, receipt: &str) -> Result<(), QueueError>;
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    /// Visible messages, oldest first.
    visible: VecDeque<QueueMessage>,
    /// Received, not yet deleted (receipt -> message). They do not come back: the simulated
    /// queue has no visibility timeout, a controller that dies mid-message loses it, which
    /// the garbage collection of NodeClaims without instances covers.
    received: Vec<QueueMessage>,
    sent_total: u64,
    deleted_total: u64,
}

/// An in-memory interruption queue: the simulated cloud sends EventBridge bodies to it
/// ([`MemoryQueue::send`]) and the controller reads them as it reads SQS.
#[derive(Debug)]
pub struct MemoryQueue {
    name: String,
    inner: Mutex<Inner>,
    changed: tokio::sync::Notify,
    poll: Duration,
}

impl MemoryQueue {
    /// An empty queue called `name`, whose receives wait up to [`LONG_POLL`].
    pub fn new(name: &str) -> MemoryQueue {
        MemoryQueue::with_long_poll(name, LONG_POLL)
    }

    /// An empty queue whose receives wait up to `poll` (tests use a short one).
    pub fn with_long_poll(name: &str, poll: Duration) -> MemoryQueue {
        MemoryQueue {
            name: name.to_string(),
            inner: Mutex::new(Inner::default()),
            changed: tokio::sync::Notify::new(),
            poll,
        }
    }

    /// Send `body`, received by the queue at `sent`. Returns the message id.
    pub fn send(&self, body: &str, sent: Timestamp) -> String {
        let id = {
            let mut inner = self.inner.lock().expect("queue lock");
            inner.next += 1;
            inner.sent_total += 1;
            let id = format!("{:08x}-sim-{}", inner.next, self.name);
            inner.visible.push_back(QueueMessage {
                id: id.clone(),
                receipt: format!("receipt-{id}"),
                body: Some(body.to_string()),
                sent: Some(sent),
            });
            id
        };
        self.changed.notify_waiters();
        id
    }

    /// Messages sent and not yet deleted (visible or received).
    pub fn len(&self) -> usize {
        let inner = self.inner.lock().expect("queue lock");
        inner.visible.len() + inner.received.len()
    }

    /// Whether every message sent has been deleted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `(sent, deleted)`: messages sent and deleted since the queue was made.
    pub fn totals(&self) -> (u64, u64) {
        let inner = self.inner.lock().expect("queue lock");
        (inner.sent_total, inner.deleted_total)
    }

    fn take(&self) -> Vec<QueueMessage> {
        let mut inner = self.inner.lock().expect("queue lock");
        let n = inner.visible.len().min(BATCH);
        let batch: Vec<QueueMessage> = inner.visible.drain(..n).collect();
        inner.received.extend(batch.iter().cloned());
        batch
    }
}

#[async_trait]
impl InterruptionQueue for MemoryQueue {
    fn name(&self) -> &str {
        &self.name
    }

    async fn receive(&self) -> Result<Vec<QueueMessage>, QueueError> {
        let deadline = tokio::time::Instant::now() + self.poll;
        loop {
            let notified = self.changed.notified();
            let batch = self.take();
            if !batch.is_empty() {
                return Ok(batch);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Ok(vec![]);
            }
        }
    }

    async fn delete(&self, receipt: &str) -> Result<(), QueueError> {
        let mut inner = self.inner.lock().expect("queue lock");
        let before = inner.received.len();
        inner.received.retain(|m| m.receipt != receipt);
        if inner.received.len() != before {
            inner.deleted_total += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_are_received_once_and_gone_when_deleted() {
        let q = MemoryQueue::with_long_poll("q", Duration::from_millis(50));
        assert!(q.receive().await.expect("receive").is_empty());
        let t: Timestamp = "2026-11-26T10:00:00Z".parse().expect("time");
        for i in 0..12 {
            q.send(&format!("{{\"n\":{i}}}"), t);
        }
        let first = q.receive().await.expect("receive");
        assert_eq!(first.len(), BATCH);
        assert_eq!(first[0].sent, Some(t));
        let second = q.receive().await.expect("receive");
        assert_eq!(second.len(), 2);
        assert_eq!(q.len(), 12);
        for m in first.iter().chain(&second) {
            q.delete(&m.receipt).await.expect("delete");
            q.delete(&m.receipt)
                .await
                .expect("a second delete is no error");
        }
        assert!(q.is_empty());
        assert_eq!(q.totals(), (12, 12));
    }

    #[tokio::test]
    async fn a_receive_wakes_when_a_message_arrives() {
        let q = std::sync::Arc::new(MemoryQueue::with_long_poll("q", Duration::from_secs(5)));
        let waiting = tokio::spawn({
            let q = std::sync::Arc::clone(&q);
            async move { q.receive().await }
        });
        tokio::task::yield_now().await;
        q.send("{}", Timestamp::UNIX_EPOCH);
        let got = waiting.await.expect("join").expect("receive");
        assert_eq!(got.len(), 1);
    }
}
