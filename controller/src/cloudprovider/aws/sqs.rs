//! The AWS provider's interruption queue (upstream `pkg/providers/sqs`): the SQS queue named by
//! `--interruption-queue`, which EventBridge rules feed with EC2 and AWS Health events, read
//! through [`ec2api::sqs::SdkSqs`] as an [`InterruptionQueue`].
//!
//! As upstream, a queue that cannot be found does not stop the controller: provisioning goes
//! on, [`SqsQueue::check`] says so at startup and every receive tries the lookup again (and
//! fails with the same explanation) until the queue exists.

use async_trait::async_trait;
use ec2api::sqs::{SdkSqs, SqsError, SqsMessage};

use crate::cloudprovider::queue::{InterruptionQueue, QueueError, QueueMessage};

/// The interruption queue on SQS.
#[derive(Debug)]
pub struct SqsQueue {
    sqs: SdkSqs,
}

impl SqsQueue {
    /// The queue `sqs` names.
    pub fn new(sqs: SdkSqs) -> SqsQueue {
        SqsQueue { sqs }
    }

    /// The SQS calls behind the queue (tests send and count messages through it).
    pub fn sqs(&self) -> &SdkSqs {
        &self.sqs
    }

    /// Look the queue's URL up now.
    ///
    /// Errors: as [`InterruptionQueue::receive`]'s, e.g. the queue does not exist (the message
    /// names the queue, the region and what to do).
    pub async fn check(&self) -> Result<String, QueueError> {
        self.sqs.url().await.map_err(|e| self.error(e))
    }

    fn error(&self, e: SqsError) -> QueueError {
        let mut message = format!("{}: {}", e.code, e.message);
        if e.is_queue_missing() {
            let region = self.sqs.region().unwrap_or("the configured region");
            message.push_str(&format!(
                " (no SQS queue named {:?} in {region}: create it and its EventBridge rules \
                 (deploy/cloudformation/interruption-queue.yaml), or set --interruption-queue \
                 (INTERRUPTION_QUEUE) to an existing queue's name, or to \"\" to turn \
                 interruption handling off)",
                self.sqs.name()
            ));
        } else if e.code.contains("AccessDenied") {
            message.push_str(&format!(
                " (the controller's IAM role needs {} on the queue)",
                ec2api::sqs::CONTROLLER_ACTIONS.join(", ")
            ));
        }
        QueueError {
            queue: self.sqs.name().to_string(),
            operation: e.operation.to_string(),
            message,
        }
    }
}

fn queue_message(m: SqsMessage) -> QueueMessage {
    QueueMessage {
        id: m.id,
        receipt: m.receipt,
        body: m.body,
        sent: m.sent,
    }
}

#[async_trait]
impl InterruptionQueue for SqsQueue {
    fn name(&self) -> &str {
        self.sqs.name()
    }

    async fn receive(&self) -> Result<Vec<QueueMessage>, QueueError> {
        let got = self.sqs.receive().await.map_err(|e| self.error(e))?;
        Ok(got.into_iter().map(queue_message).collect())
    }

    async fn delete(&self, receipt: &str) -> Result<(), QueueError> {
        self.sqs.delete(receipt).await.map_err(|e| self.error(e))
    }
}

#[cfg(test)]
mod tests {
    use crate::cloudprovider::queue::{BATCH, LONG_POLL};

    #[test]
    fn sqs_receives_as_the_queue_contract_says() {
        assert_eq!(usize::try_from(ec2api::sqs::MAX_MESSAGES).ok(), Some(BATCH));
        assert_eq!(ec2api::sqs::WAIT, LONG_POLL);
    }
}
