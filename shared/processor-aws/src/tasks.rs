//! Background work that outlives the invocation: handed to SQS.
//!
//! In Lambda a processor's `run_in_background` work cannot be left running:
//! the process freezes when the invocation returns. So a processor hands the
//! work over as a [`Task`] (what to run, its idempotency key, the stream
//! that owes it): its background effect is the enqueue
//! ([`TaskQueue::enqueue`]), which settles in milliseconds, while the runner's
//! revival alarm covers the hand-off itself. The same function, with the
//! queue as an SQS event source, runs each task ([`TaskRunner`]):
//!
//! 1. the completion record `task/<key>` of the owing stream incarnation
//!    exists → already done, the message is acknowledged;
//! 2. otherwise the task's [`TaskHandler`] runs (it gets the key, so the
//!    effect itself dedupes if a crash repeats it), then the completion
//!    record is written (absent before; losing that race means another
//!    delivery recorded it).
//!
//! A failure leaves the message to SQS: it comes back after its visibility
//! timeout, and after `maxReceiveCount` receives the queue's redrive policy
//! moves it to the dead-letter queue. A message that is not a task, or names
//! no known handler, fails the same way (and so ends in the dead-letter
//! queue, kept, with an error logged).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use aws_lambda_events::streams::{SqsBatchItemFailure, SqsEventResponse};
use bytes::Bytes;
use ds_core::{Commit, Op, Record, RecordExpect, StoreError, StreamService};
use ds_processor::EffectError;
use serde::{Deserialize, Serialize};

use crate::queue::SqsQueue;

/// One piece of background work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// The [`TaskHandler`] that runs it.
    pub handler: String,
    /// The delivery's idempotency key (`Delivery::idempotency_key`).
    pub idempotency_key: String,
    /// The stream whose processor owes the work, and its incarnation: the
    /// completion record lives there (and goes with it).
    pub path: String,
    pub incarnation: String,
    /// The handler's own input.
    pub payload: serde_json::Value,
}

/// The record key of a task's completion.
pub fn completion_key(idempotency_key: &str) -> String {
    format!("task/{idempotency_key}")
}

/// Where processors hand background work to.
#[async_trait]
pub trait TaskQueue: Send + Sync {
    async fn enqueue(&self, task: &Task) -> Result<(), EffectError>;
}

/// [`TaskQueue`] on an SQS queue: one message per task.
#[async_trait]
impl TaskQueue for SqsQueue {
    async fn enqueue(&self, task: &Task) -> Result<(), EffectError> {
        let body = serde_json::to_string(task).map_err(|e| EffectError::new(format!("encoding task: {e}")))?;
        self.send(body, 0).await.map_err(|e| EffectError::new(format!("enqueueing task {}: {e}", task.idempotency_key)))
    }
}

/// Runs tasks of one kind.
#[async_trait]
pub trait TaskHandler: Send + Sync {
    async fn run(&self, task: &Task) -> Result<(), EffectError>;
}

/// Task handlers by name.
#[derive(Default, Clone)]
pub struct TaskHandlers {
    handlers: HashMap<String, Arc<dyn TaskHandler>>,
}

impl TaskHandlers {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, name: &str, handler: Arc<dyn TaskHandler>) -> &mut Self {
        self.handlers.insert(name.to_owned(), handler);
        self
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn TaskHandler>> {
        self.handlers.get(name)
    }
}

/// An SQS event as Lambda delivers it (the fields read here).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct SqsEvent {
    #[serde(rename = "Records")]
    pub records: Vec<SqsMessage>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SqsMessage {
    pub message_id: String,
    pub body: String,
    #[serde(default)]
    pub event_source_arn: Option<String>,
}

/// Runs delivered tasks (see module docs).
pub struct TaskRunner {
    service: StreamService,
    handlers: TaskHandlers,
}

/// How one message ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskOutcome {
    Ran,
    AlreadyDone,
    Failed(String),
}

impl TaskRunner {
    pub fn new(service: StreamService, handlers: TaskHandlers) -> Self {
        Self { service, handlers }
    }

    /// Runs every message of `event`; the failed ones are reported so SQS
    /// delivers them again (and dead-letters them after max receives).
    pub async fn handle(&self, event: &SqsEvent) -> SqsEventResponse {
        let mut response = SqsEventResponse::default();
        for message in &event.records {
            if let TaskOutcome::Failed(why) = self.run_message(message).await {
                tracing::error!(message_id = %message.message_id, error = %why, "background task failed");
                let mut failure = SqsBatchItemFailure::default();
                failure.item_identifier = Some(message.message_id.clone());
                response.batch_item_failures.push(failure);
            }
        }
        response
    }

    pub async fn run_message(&self, message: &SqsMessage) -> TaskOutcome {
        let task: Task = match serde_json::from_str(&message.body) {
            Ok(task) => task,
            Err(e) => return TaskOutcome::Failed(format!("not a task: {e}")),
        };
        let span = tracing::info_span!("task", handler = %task.handler, key = %task.idempotency_key, path = %task.path);
        tracing::Instrument::instrument(self.run(&task), span).await
    }

    async fn run(&self, task: &Task) -> TaskOutcome {
        let Some(handler) = self.handlers.get(&task.handler) else {
            return TaskOutcome::Failed(format!("no task handler {:?}", task.handler));
        };
        let stream = self.service.substrate().registry.enter(&task.path);
        let store = &self.service.substrate().store;
        let key = completion_key(&task.idempotency_key);
        match store.read_record(&stream, &task.incarnation, &key).await {
            Ok(Some(_)) => return TaskOutcome::AlreadyDone,
            Ok(None) => {}
            Err(e) => return TaskOutcome::Failed(format!("reading the completion record: {e}")),
        }
        if let Err(e) = handler.run(task).await {
            return TaskOutcome::Failed(e.to_string());
        }
        let op = Op::PutRecord {
            path: task.path.as_str().into(),
            incarnation: task.incarnation.as_str().into(),
            key,
            record: Record { revision: 1, value: Bytes::new() },
            expect: RecordExpect::Absent,
        };
        match store.commit(Commit { ops: vec![op] }).await {
            // Conflict: another delivery recorded it first; the work is done either way.
            Ok(()) | Err(StoreError::Conflict) => TaskOutcome::Ran,
            // The effect ran; a redelivery runs it again under the same key.
            Err(e) => TaskOutcome::Failed(format!("recording completion: {e}")),
        }
    }
}
