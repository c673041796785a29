//! The AWS side of the processor function, played against the emulator,
//! for the processor function's tests (`ds-processor-aws`) and the
//! `lambda-pump` tool. moto runs no event source mappings and fires no
//! schedules, so these pumps do what Lambda and Scheduler would, and are
//! the only stand-ins; everything they invoke is the real function:
//!
//! - [`StreamPump`]: reads the table's DynamoDB Stream (`DescribeStream`,
//!   `GetShardIterator`, `GetRecords`), keeps only the records the
//!   template's `FilterCriteria` let through (parsed from template.yaml, see
//!   [`template`]), builds the Lambda event and invokes the function, with
//!   `ReportBatchItemFailures` semantics (a failed record and everything
//!   after it is delivered again). It also plays the table's TTL.
//! - [`SchedulePump`]: fires revival schedules into the function, as
//!   Lambda's asynchronous invocation ([`AsyncInvoke`]: retries, then the
//!   on-failure destination with Lambda's invocation record).
//! - [`SqsPump`]: delivers a queue's messages as Lambda's SQS event source
//!   does (reported failures come back; the queue's redrive policy
//!   dead-letters them).
//!
//! The pumps invoke anything that is [`Invoke`]: a [`ProcessorFunction`]
//! in the test's process, or the function binary behind a Lambda runtime
//! emulator (the `lambda-pump` test tool).
//!
//! [`ProcessorEnv`] gives each test its own table (so its own stream
//! shard), bucket, schedule groups and queues on the shared emulator.

mod asynchronous;
mod env;
mod scheduler;
mod sqs;
mod streams;
pub mod template;

pub use asynchronous::{AsyncInvoke, AsyncOutcome};
pub use env::{ProcessorEnv, TEST_MAX_RECEIVES, TEST_VISIBILITY_SECS};
pub use scheduler::SchedulePump;
pub use sqs::{SqsDelivery, SqsPump};
pub use streams::{StreamDelivery, StreamPump};

use ds_processor_aws::function::ProcessorFunction;

/// What a pump hands events to: the function, wherever it runs.
#[async_trait::async_trait]
pub trait Invoke: Sync {
    /// One invocation; `Err` is a failed invocation (the whole batch
    /// comes again).
    async fn invoke(&self, payload: serde_json::Value, deadline_ms: u64) -> Result<serde_json::Value, String>;
}

#[async_trait::async_trait]
impl Invoke for ProcessorFunction {
    async fn invoke(&self, payload: serde_json::Value, deadline_ms: u64) -> Result<serde_json::Value, String> {
        self.handle(payload, deadline_ms).await.map_err(|e| e.to_string())
    }
}

#[async_trait::async_trait]
impl<T: Invoke + Send> Invoke for std::sync::Arc<T> {
    async fn invoke(&self, payload: serde_json::Value, deadline_ms: u64) -> Result<serde_json::Value, String> {
        T::invoke(self, payload, deadline_ms).await
    }
}
