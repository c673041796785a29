//! The SQS queues the function sends to, behind one sender: background
//! tasks ([`crate::tasks::TaskQueue`]), subscriptions' delayed times
//! ([`crate::subscriptions::DelayedQueue`]) and parked records
//! ([`crate::function::RecordParking`]) are each a message on a queue.

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{DisplayErrorContext, SdkError};
use aws_sdk_sqs::operation::send_message::SendMessageError;

/// One SQS queue, by URL.
#[derive(Clone)]
pub struct SqsQueue {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
}

/// A message SQS did not take. Nothing was queued as far as the caller can
/// tell: retry later, or leave the work where it is (the record, the alarm)
/// so a later look finds it again.
#[derive(Debug, thiserror::Error)]
#[error("sending to {queue_url}: {}", DisplayErrorContext(source))]
pub struct SendError {
    pub queue_url: String,
    #[source]
    pub source: SdkError<SendMessageError, HttpResponse>,
}

impl SqsQueue {
    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        Self { sqs, queue_url: queue_url.into() }
    }

    /// Sends `body`, delivered after `delay_secs` (0: at once).
    pub async fn send(&self, body: String, delay_secs: i32) -> Result<(), SendError> {
        let message = self.sqs.send_message().queue_url(&self.queue_url).message_body(body);
        let message = if delay_secs > 0 { message.delay_seconds(delay_secs) } else { message };
        message.send().await.map(|_| ()).map_err(|source| SendError { queue_url: self.queue_url.clone(), source })
    }
}
