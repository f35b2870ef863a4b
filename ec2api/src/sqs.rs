//! The SQS calls of the interruption queue (upstream `pkg/providers/sqs`): EventBridge sends EC2
//! and AWS Health events to a queue, and the controller long-polls it. [`SdkSqs`] looks the
//! queue's URL up from its name once (GetQueueUrl), then receives (ReceiveMessage, with
//! upstream's batch, wait and visibility settings) and deletes (DeleteMessage) messages. The
//! controller needs `sqs:GetQueueUrl`, `sqs:ReceiveMessage` and `sqs:DeleteMessage` on the
//! queue and nothing else ([`CONTROLLER_ACTIONS`]); the other calls here
//! ([`SdkSqs::create_queue`], [`SdkSqs::send`], [`SdkSqs::message_counts`]) are for tests and
//! tools that play EventBridge.

use std::sync::OnceLock;
use std::time::Duration;

use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use jiff::Timestamp;

use crate::sdk_error_parts;

/// Most messages one receive asks for (SQS's maximum; upstream's setting).
pub const MAX_MESSAGES: i32 = 10;
/// How long a receive waits for a first message (SQS's long-poll maximum; upstream's setting).
pub const WAIT: Duration = Duration::from_secs(20);
/// How long a received message stays hidden from other receivers unless deleted (upstream's
/// setting): a controller that dies mid-message lets the next leader see it 20 s later.
pub const VISIBILITY_TIMEOUT: Duration = Duration::from_secs(20);
/// The IAM actions the controller's calls need on the queue (what `deploy/` grants).
pub const CONTROLLER_ACTIONS: [&str; 3] =
    ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"];

/// An SQS API error: the operation that failed, AWS's error code and message.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{operation}: {code}: {message}")]
pub struct SqsError {
    /// `GetQueueUrl`, `ReceiveMessage`, `DeleteMessage`, ...
    pub operation: &'static str,
    /// AWS error code, e.g. `AWS.SimpleQueueService.NonExistentQueue`, `AccessDenied`;
    /// `Transport` when the request never got an answer.
    pub code: String,
    /// AWS's message.
    pub message: String,
}

impl SqsError {
    fn from_sdk<E, R>(operation: &'static str, e: aws_sdk_sqs::error::SdkError<E, R>) -> SqsError
    where
        E: aws_sdk_sqs::error::ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        let (code, message) = sdk_error_parts(&e);
        SqsError {
            operation,
            code,
            message,
        }
    }

    /// Whether the error says there is no queue of that name (or URL) in the region.
    pub fn is_queue_missing(&self) -> bool {
        matches!(
            self.code.as_str(),
            "AWS.SimpleQueueService.NonExistentQueue" | "QueueDoesNotExist"
        )
    }
}

/// One received message.
#[derive(Clone, Debug, PartialEq)]
pub struct SqsMessage {
    /// `MessageId`.
    pub id: String,
    /// `ReceiptHandle`: what [`SdkSqs::delete`] takes.
    pub receipt: String,
    /// `Body`; `None` when SQS returned none.
    pub body: Option<String>,
    /// The `SentTimestamp` system attribute: when the queue received the message.
    pub sent: Option<Timestamp>,
}

/// One SQS queue, named at construction, over aws-sdk-sqs.
#[derive(Debug)]
pub struct SdkSqs {
    client: aws_sdk_sqs::Client,
    name: String,
    region: Option<String>,
    url: OnceLock<String>,
    wait: Duration,
}

impl SdkSqs {
    /// The queue called `name` in the configuration's region. Nothing is called yet: the URL
    /// is looked up by the first call that needs it, and again by later calls until a lookup
    /// succeeds (a queue created after the controller started is found).
    pub fn new(config: &aws_config::SdkConfig, name: &str) -> SdkSqs {
        SdkSqs {
            client: aws_sdk_sqs::Client::new(config),
            name: name.to_string(),
            region: config.region().map(|r| r.to_string()),
            url: OnceLock::new(),
            wait: WAIT,
        }
    }

    /// The same queue whose receives wait at most `wait` (whole seconds, up to 20; tests use a
    /// short one so that a receive from an empty queue returns soon).
    pub fn with_wait(mut self, wait: Duration) -> SdkSqs {
        self.wait = wait.min(WAIT);
        self
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The region the queue is looked up in, when the configuration has one.
    pub fn region(&self) -> Option<&str> {
        self.region.as_deref()
    }

    /// The queue's URL (GetQueueUrl the first time).
    ///
    /// Errors: the lookup failed; [`SqsError::is_queue_missing`] when there is no such queue.
    pub async fn url(&self) -> Result<String, SqsError> {
        if let Some(url) = self.url.get() {
            return Ok(url.clone());
        }
        let out = self
            .client
            .get_queue_url()
            .queue_name(&self.name)
            .send()
            .await
            .map_err(|e| SqsError::from_sdk("GetQueueUrl", e))?;
        let url = out.queue_url().unwrap_or_default().to_string();
        Ok(self.url.get_or_init(|| url).clone())
    }

    /// Up to [`MAX_MESSAGES`] messages, waiting up to [`WAIT`] for the first; each is hidden
    /// from other receivers for [`VISIBILITY_TIMEOUT`] unless deleted first.
    ///
    /// Errors: the URL lookup or ReceiveMessage failed.
    pub async fn receive(&self) -> Result<Vec<SqsMessage>, SqsError> {
        let url = self.url().await?;
        let out = self
            .client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(MAX_MESSAGES)
            .wait_time_seconds(seconds(self.wait))
            .visibility_timeout(seconds(VISIBILITY_TIMEOUT))
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .send()
            .await
            .map_err(|e| SqsError::from_sdk("ReceiveMessage", e))?;
        Ok(out
            .messages()
            .iter()
            .map(|m| SqsMessage {
                id: m.message_id().unwrap_or_default().to_string(),
                receipt: m.receipt_handle().unwrap_or_default().to_string(),
                body: m.body().map(str::to_string),
                sent: m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
                    .and_then(|ms| sent_timestamp(ms)),
            })
            .collect())
    }

    /// Delete a received message by its receipt handle. Deleting a message already deleted
    /// succeeds, as SQS answers it.
    ///
    /// Errors: the URL lookup or DeleteMessage failed (e.g. `ReceiptHandleIsInvalid` for a
    /// handle this queue never gave out).
    pub async fn delete(&self, receipt: &str) -> Result<(), SqsError> {
        let url = self.url().await?;
        self.client
            .delete_message()
            .queue_url(url)
            .receipt_handle(receipt)
            .send()
            .await
            .map_err(|e| SqsError::from_sdk("DeleteMessage", e))?;
        Ok(())
    }
}

/// Calls the controller never makes (its IAM policy does not allow them): for tests and tools
/// that create the queue and play EventBridge.
impl SdkSqs {
    /// CreateQueue with this queue's name and upstream's 300 s message retention; the URL is
    /// kept. Creating a queue that exists with the same attributes returns it.
    ///
    /// Errors: CreateQueue failed.
    pub async fn create_queue(&self) -> Result<String, SqsError> {
        let out = self
            .client
            .create_queue()
            .queue_name(&self.name)
            .attributes(QueueAttributeName::MessageRetentionPeriod, "300")
            .send()
            .await
            .map_err(|e| SqsError::from_sdk("CreateQueue", e))?;
        let url = out.queue_url().unwrap_or_default().to_string();
        Ok(self.url.get_or_init(|| url).clone())
    }

    /// Send `body` (an EventBridge event, as EventBridge sends it). Returns the message id.
    ///
    /// Errors: the URL lookup or SendMessage failed.
    pub async fn send(&self, body: &str) -> Result<String, SqsError> {
        let url = self.url().await?;
        let out = self
            .client
            .send_message()
            .queue_url(url)
            .message_body(body)
            .send()
            .await
            .map_err(|e| SqsError::from_sdk("SendMessage", e))?;
        Ok(out.message_id().unwrap_or_default().to_string())
    }

    /// `(visible, in flight)`: SQS's approximate counts of messages waiting to be received and
    /// of messages received but neither deleted nor visible again.
    ///
    /// Errors: the URL lookup or GetQueueAttributes failed.
    pub async fn message_counts(&self) -> Result<(u64, u64), SqsError> {
        let url = self.url().await?;
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .map_err(|e| SqsError::from_sdk("GetQueueAttributes", e))?;
        let count = |n: QueueAttributeName| {
            out.attributes()
                .and_then(|a| a.get(&n))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        Ok((
            count(QueueAttributeName::ApproximateNumberOfMessages),
            count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        ))
    }
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX)
}

/// `SentTimestamp` (milliseconds since the epoch, as a decimal string) as a time; `None` when it
/// is not one.
fn sent_timestamp(millis: &str) -> Option<Timestamp> {
    Timestamp::from_millisecond(millis.trim().parse().ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sent_timestamps_are_epoch_milliseconds() {
        assert_eq!(
            sent_timestamp("1764151200123"),
            Some("2025-11-26T10:00:00.123Z".parse().expect("time"))
        );
        assert_eq!(sent_timestamp(""), None);
        assert_eq!(sent_timestamp("yesterday"), None);
    }

    #[test]
    fn both_spellings_of_a_missing_queue_are_recognised() {
        let e = |code: &str| SqsError {
            operation: "GetQueueUrl",
            code: code.into(),
            message: String::new(),
        };
        assert!(e("AWS.SimpleQueueService.NonExistentQueue").is_queue_missing());
        assert!(e("QueueDoesNotExist").is_queue_missing());
        assert!(!e("AccessDenied").is_queue_missing());
        assert_eq!(e("AccessDenied").to_string(), "GetQueueUrl: AccessDenied: ");
    }
}
