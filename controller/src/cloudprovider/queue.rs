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
/// How long a received message stays hidden before it is delivered again unless deleted
/// (the visibility timeout upstream asks SQS for).
pub const VISIBILITY_TIMEOUT: Duration = Duration::from_secs(20);

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
    /// Received, not yet deleted, with when each becomes visible again (its visibility
    /// timeout), as SQS does: a message the controller failed to handle, or was stopped
    /// while handling, is delivered again with a new receipt.
    received: Vec<(QueueMessage, tokio::time::Instant)>,
    /// Receives so far, to make each receipt handle unique.
    receives: u64,
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
    visibility: Duration,
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
            visibility: VISIBILITY_TIMEOUT,
        }
    }

    /// The same queue with received messages hidden for `visibility` instead of
    /// [`VISIBILITY_TIMEOUT`].
    pub fn with_visibility_timeout(mut self, visibility: Duration) -> MemoryQueue {
        self.visibility = visibility;
        self
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

    /// Up to [`BATCH`] visible messages, oldest first (those whose visibility timeout ran out
    /// are visible again, ahead of newer ones), each with a new receipt and hidden until `now`
    /// plus the visibility timeout; and when the next hidden one becomes visible.
    fn take(&self, now: tokio::time::Instant) -> (Vec<QueueMessage>, Option<tokio::time::Instant>) {
        let mut inner = self.inner.lock().expect("queue lock");
        let (expired, hidden): (Vec<_>, Vec<_>) = std::mem::take(&mut inner.received)
            .into_iter()
            .partition(|(_, until)| *until <= now);
        inner.received = hidden;
        for (m, _) in expired.into_iter().rev() {
            inner.visible.push_front(m);
        }
        let n = inner.visible.len().min(BATCH);
        let mut batch: Vec<QueueMessage> = inner.visible.drain(..n).collect();
        inner.receives += 1;
        let until = now + self.visibility;
        for m in &mut batch {
            m.receipt = format!("receipt-{}-{}", inner.receives, m.id);
            inner.received.push((m.clone(), until));
        }
        let next = inner.received.iter().map(|(_, until)| *until).min();
        (batch, next)
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
            let now = tokio::time::Instant::now();
            let (batch, next_visible) = self.take(now);
            if !batch.is_empty() || now >= deadline {
                return Ok(batch);
            }
            // Until a message is sent, a hidden one is visible again, or the long poll ends.
            let wake = next_visible.map_or(deadline, |t| t.min(deadline));
            let _ = tokio::time::timeout_at(wake, notified).await;
        }
    }

    async fn delete(&self, receipt: &str) -> Result<(), QueueError> {
        let mut inner = self.inner.lock().expect("queue lock");
        let before = inner.received.len();
        inner.received.retain(|(m, _)| m.receipt != receipt);
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

    #[tokio::test(start_paused = true)]
    async fn a_message_not_deleted_is_delivered_again_after_its_visibility_timeout() {
        let q = MemoryQueue::new("q");
        let t: Timestamp = "2026-11-26T10:00:00Z".parse().expect("time");
        q.send("{\"n\":1}", t);
        let start = tokio::time::Instant::now();
        let first = q.receive().await.expect("receive");
        assert_eq!(first.len(), 1);
        // Hidden while it is being handled: the next receive waits for the timeout, then gets
        // it again, with a new receipt (the old one no longer deletes it).
        let again = q.receive().await.expect("receive");
        assert_eq!(start.elapsed(), VISIBILITY_TIMEOUT);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].id, first[0].id);
        assert_ne!(again[0].receipt, first[0].receipt);
        q.delete(&first[0].receipt).await.expect("delete");
        assert_eq!(q.len(), 1, "a stale receipt deletes nothing");
        q.delete(&again[0].receipt).await.expect("delete");
        assert!(q.is_empty());
        assert!(q.receive().await.expect("receive").is_empty());
        assert_eq!(q.totals(), (1, 1));
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
