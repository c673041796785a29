//! [`SqsPump`]: Lambda's SQS event source, played against the emulator.

use aws_sdk_sqs::types::MessageSystemAttributeName;
use serde_json::{json, Value};

use super::Invoke;

/// What one delivery did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SqsDelivery {
    pub delivered: usize,
    pub failed: usize,
}

/// See the module docs.
pub struct SqsPump {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsPump {
    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: &str) -> Self {
        Self { sqs, queue_url: queue_url.to_owned() }
    }

    /// Receives up to 10 messages and builds the Lambda event for them;
    /// `(event, receipt handles by message id)`.
    pub async fn receive(&self) -> (Value, Vec<(String, String)>) {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .expect("receive");
        let mut records = Vec::new();
        let mut handles = Vec::new();
        for m in out.messages() {
            let id = m.message_id().unwrap_or_default().to_owned();
            let attributes: serde_json::Map<String, Value> = m
                .attributes()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.as_str().to_owned(), Value::String(v.clone())))
                .collect();
            records.push(json!({
                "messageId": id,
                "receiptHandle": m.receipt_handle().unwrap_or_default(),
                "body": m.body().unwrap_or_default(),
                "attributes": attributes,
                "messageAttributes": {},
                "md5OfBody": m.md5_of_body().unwrap_or_default(),
                "eventSource": "aws:sqs",
                "eventSourceARN": format!("arn:aws:sqs:us-east-1:000000000000:{}", self.queue_url.rsplit('/').next().unwrap_or("")),
                "awsRegion": "us-east-1",
            }));
            handles.push((id, m.receipt_handle().unwrap_or_default().to_owned()));
        }
        (json!({ "Records": records }), handles)
    }

    /// Receives and delivers one batch: succeeded messages are deleted,
    /// reported failures made visible again at once (the test need not wait
    /// out the visibility timeout; the redrive policy counts receives).
    pub async fn deliver(&self, function: &impl Invoke, deadline_ms: u64) -> SqsDelivery {
        let (event, handles) = self.receive().await;
        if handles.is_empty() {
            return SqsDelivery::default();
        }
        let answer = function.invoke(event, deadline_ms).await;
        let failed: Vec<String> = match &answer {
            Ok(v) => v["batchItemFailures"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_owned))
                .collect(),
            Err(_) => handles.iter().map(|(id, _)| id.clone()).collect(),
        };
        for (id, handle) in &handles {
            if failed.contains(id) {
                let _ = self
                    .sqs
                    .change_message_visibility()
                    .queue_url(&self.queue_url)
                    .receipt_handle(handle)
                    .visibility_timeout(0)
                    .send()
                    .await;
            } else {
                self.sqs
                    .delete_message()
                    .queue_url(&self.queue_url)
                    .receipt_handle(handle)
                    .send()
                    .await
                    .expect("delete");
            }
        }
        SqsDelivery { delivered: handles.len(), failed: failed.len() }
    }

    /// Delivers until the queue is empty or `rounds` deliveries ran.
    pub async fn deliver_all(&self, function: &impl Invoke, deadline_ms: u64, rounds: usize) -> SqsDelivery {
        let mut total = SqsDelivery::default();
        for _ in 0..rounds {
            let d = self.deliver(function, deadline_ms).await;
            if d.delivered == 0 {
                break;
            }
            total.delivered += d.delivered;
            total.failed += d.failed;
        }
        total
    }
}
