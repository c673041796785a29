//! The queues themselves: listing without consuming, and redriving.

use std::collections::HashMap;

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use ds_store_aws::schedules::{self, OneShot, OVERDUE_DELAY_MS};
use serde_json::{json, Value};

use crate::letter::{Letter, QueueRole};

/// How long a listed or redriven message stays invisible to others while
/// this command holds it.
const HOLD_SECS: i32 = 60;
/// Most messages one listing or redrive looks at per queue.
const MAX_MESSAGES: usize = 1_000;

/// A failed SQS or Scheduler call.
#[derive(Debug, thiserror::Error)]
pub enum DeadLetterError {
    #[error("{queue} queue: {what}")]
    Queue { queue: QueueRole, what: String },
    #[error("re-running {concerns}: {what}")]
    Rerun { concerns: String, what: String },
    #[error("no URL configured for the {0} queue")]
    NotConfigured(QueueRole),
}

/// One message, read.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub queue: QueueRole,
    pub message_id: String,
    /// Epoch ms it was first sent (to its source, for a dead-lettered task).
    pub sent_ms: Option<i64>,
    pub letter: Letter,
    receipt_handle: String,
}

/// What a redrive did with one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redriven {
    /// Sent back to the queue it came from.
    Requeued,
    /// A one-shot schedule (this name) invokes the function again.
    Rerun { schedule: String },
    /// Left in the queue, with the reason.
    Left(String),
}

/// How a re-run reaches a function: one-shot schedules in `group`, as the
/// functions' own alarms are (the same role and dead-letter queue).
#[derive(Debug, Clone)]
pub struct RerunTarget {
    pub schedule_group: String,
    pub role_arn: String,
    pub dead_letter_arn: String,
    /// Where a parked record is re-run.
    pub processor_function_arn: String,
}

/// The deployment's queues (URLs; `None`: not deployed or not configured)
/// and how to re-run what they hold.
#[derive(Clone)]
pub struct DeadLetterQueues {
    pub sqs: aws_sdk_sqs::Client,
    pub scheduler: aws_sdk_scheduler::Client,
    pub urls: HashMap<QueueRole, String>,
    /// Where dead-lettered tasks go back to.
    pub task_queue_url: Option<String>,
    pub rerun: Option<RerunTarget>,
    /// When a re-run schedule fires (`Clock::system()` outside tests).
    pub clock: ds_clock::Clock,
}

/// The name of the re-run schedule of `event` to `target_arn`: the same
/// letter redriven twice names the same schedule (created or replaced).
pub fn rerun_schedule_name(target_arn: &str, event: &Value) -> String {
    schedules::name("dsr-", target_arn, &event.to_string())
}

impl DeadLetterQueues {
    fn url(&self, queue: QueueRole) -> Result<&str, DeadLetterError> {
        self.urls.get(&queue).map(String::as_str).ok_or(DeadLetterError::NotConfigured(queue))
    }

    async fn receive(&self, queue: QueueRole, hold_secs: i32) -> Result<Vec<DeadLetter>, DeadLetterError> {
        let url = self.url(queue)?;
        let out = self
            .sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(hold_secs)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(|e| DeadLetterError::Queue {
                queue,
                what: aws_sdk_sqs::error::DisplayErrorContext(e).to_string(),
            })?;
        Ok(out.messages().iter().map(|m| read(queue, m)).collect())
    }

    async fn release(&self, letter: &DeadLetter) -> Result<(), DeadLetterError> {
        let queue = letter.queue;
        self.sqs
            .change_message_visibility()
            .queue_url(self.url(queue)?)
            .receipt_handle(&letter.receipt_handle)
            .visibility_timeout(0)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| DeadLetterError::Queue { queue, what: aws_sdk_sqs::error::DisplayErrorContext(e).to_string() })
    }

    /// Every message of `queue` (up to 1000), left in place: each is held
    /// while the listing runs, so the next receive returns the next ones,
    /// then made visible again.
    pub async fn list(&self, queue: QueueRole) -> Result<Vec<DeadLetter>, DeadLetterError> {
        let mut all = Vec::new();
        while all.len() < MAX_MESSAGES {
            let batch = self.receive(queue, HOLD_SECS).await?;
            if batch.is_empty() {
                break;
            }
            all.extend(batch);
        }
        for letter in &all {
            self.release(letter).await?;
        }
        Ok(all)
    }

    /// Redrives every message of `queue` (or only `only`, a message id):
    /// each is requeued or re-run, then deleted; one that cannot be is made
    /// visible again and reported. Returns what happened to each.
    pub async fn redrive(
        &self,
        queue: QueueRole,
        only: Option<&str>,
    ) -> Result<Vec<(DeadLetter, Redriven)>, DeadLetterError> {
        let mut done = Vec::new();
        let mut held = Vec::new();
        while done.len() + held.len() < MAX_MESSAGES {
            let batch = self.receive(queue, HOLD_SECS).await?;
            if batch.is_empty() {
                break;
            }
            for letter in batch {
                if only.is_some_and(|id| id != letter.message_id) {
                    held.push(letter);
                    continue;
                }
                let outcome = self.redrive_one(&letter).await?;
                if matches!(outcome, Redriven::Left(_)) {
                    held.push(letter.clone());
                } else {
                    self.delete(&letter).await?;
                }
                done.push((letter, outcome));
            }
        }
        for letter in &held {
            self.release(letter).await?;
        }
        Ok(done)
    }

    async fn delete(&self, letter: &DeadLetter) -> Result<(), DeadLetterError> {
        let queue = letter.queue;
        self.sqs
            .delete_message()
            .queue_url(self.url(queue)?)
            .receipt_handle(&letter.receipt_handle)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| DeadLetterError::Queue { queue, what: aws_sdk_sqs::error::DisplayErrorContext(e).to_string() })
    }

    /// What a redrive does with one letter (see the crate docs), without
    /// deleting it: running it twice has the effect of once.
    pub async fn redrive_one(&self, letter: &DeadLetter) -> Result<Redriven, DeadLetterError> {
        match &letter.letter {
            Letter::Task { body, .. } => {
                let Some(url) = &self.task_queue_url else {
                    return Ok(Redriven::Left("no task queue configured to send it back to".into()));
                };
                self.sqs.send_message().queue_url(url).message_body(body).send().await.map_err(|e| {
                    DeadLetterError::Queue {
                        queue: QueueRole::TaskDeadLetters,
                        what: format!("sending back: {}", aws_sdk_sqs::error::DisplayErrorContext(e)),
                    }
                })?;
                Ok(Redriven::Requeued)
            }
            Letter::FailedInvocation { function_arn, event, .. }
            | Letter::UndeliveredSchedule { target_arn: function_arn, event, .. } => {
                self.rerun(function_arn, event, &letter.letter.concerns()).await
            }
            Letter::ParkedRecord { record, .. } => match &self.rerun {
                Some(target) => {
                    let arn = target.processor_function_arn.clone();
                    self.rerun(&arn, &json!({ "Records": [record] }), &letter.letter.concerns()).await
                }
                None => Ok(Redriven::Left("no re-run target configured".into())),
            },
            Letter::GivenUpBatch { .. } => Ok(Redriven::Left(
                "batch metadata only: the records are read from the table's stream (kept 24 h) by shard and sequence number"
                    .into(),
            )),
            Letter::Unknown { why } => Ok(Redriven::Left(format!("not redrivable: {why}"))),
        }
    }

    /// A one-shot schedule that invokes `target_arn` with `event` a second
    /// from now.
    async fn rerun(&self, target_arn: &str, event: &Value, concerns: &str) -> Result<Redriven, DeadLetterError> {
        let Some(target) = &self.rerun else { return Ok(Redriven::Left("no re-run target configured".into())) };
        let name = rerun_schedule_name(target_arn, event);
        let at = self.clock.now_ms() + OVERDUE_DELAY_MS;
        let schedule = OneShot {
            group: &target.schedule_group,
            name: &name,
            target_arn,
            role_arn: &target.role_arn,
            dead_letter_arn: &target.dead_letter_arn,
            input: event.to_string(),
        };
        schedules::upsert(&self.scheduler, schedule, at)
            .await
            .map_err(|e| DeadLetterError::Rerun { concerns: concerns.to_owned(), what: e.to_string() })?;
        tracing::info!(schedule = %name, target = target_arn, concerns, "re-run scheduled");
        Ok(Redriven::Rerun { schedule: name })
    }
}

fn read(queue: QueueRole, m: &Message) -> DeadLetter {
    let mut attributes: HashMap<String, String> =
        m.attributes().into_iter().flatten().map(|(k, v)| (k.as_str().to_owned(), v.clone())).collect();
    for (k, v) in m.message_attributes().into_iter().flatten() {
        if let Some(s) = v.string_value() {
            attributes.insert(k.clone(), s.to_owned());
        }
    }
    DeadLetter {
        queue,
        message_id: m.message_id().unwrap_or_default().to_owned(),
        sent_ms: attributes.get("SentTimestamp").and_then(|t| t.parse().ok()),
        letter: Letter::read(queue, m.body().unwrap_or_default(), &attributes),
        receipt_handle: m.receipt_handle().unwrap_or_default().to_owned(),
    }
}
