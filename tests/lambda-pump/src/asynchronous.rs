//! [`AsyncInvoke`]: Lambda's asynchronous invocation, as EventBridge
//! Scheduler uses it, with the function's `EventInvokeConfig` from
//! template.yaml. What is modelled (Lambda developer guide, "Asynchronous
//! invocation" and "Capturing records of asynchronous invocations"):
//!
//! - the event is accepted at once (Scheduler's part ends there: the
//!   schedule counts as delivered and, with `ActionAfterCompletion=DELETE`,
//!   is deleted);
//! - a function error is retried `MaximumRetryAttempts` times (Lambda waits
//!   1 then 2 minutes between attempts; the pump does not wait);
//! - when every attempt failed, an invocation record goes to the
//!   `OnFailure` destination (an SQS queue): `version`, `timestamp`,
//!   `requestContext` (`requestId`, `functionArn` with its `$LATEST`
//!   qualifier, `condition: RetriesExhausted`, `approximateInvokeCount`),
//!   `requestPayload` (the event), `responseContext` (`statusCode`,
//!   `executedVersion`, `functionError: Unhandled`) and `responsePayload`
//!   (the function's error).
//!
//! Not modelled: the event age limit (`MaximumEventAgeInSeconds`, whose
//! `EventAgeExceeded` records the pump never produces since it does not
//! wait), throttling, and Scheduler's own retries and dead-letter queue,
//! which apply only when Scheduler cannot hand the event to Lambda at all
//! (an invoke API error: the function or role missing, throttling).

use serde_json::{json, Value};

use super::Invoke;

/// The function's asynchronous invocation settings (template.yaml's
/// `EventInvokeConfig`) and where its failures go.
#[derive(Debug, Clone)]
pub struct AsyncInvoke {
    pub function_arn: String,
    pub maximum_retry_attempts: u32,
    /// The on-failure destination queue's URL.
    pub on_failure_url: String,
    pub sqs: aws_sdk_sqs::Client,
}

/// How one asynchronous invocation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum AsyncOutcome {
    /// Succeeded at attempt `n` (1 is the first).
    Succeeded(u32),
    /// Every attempt failed; the record sent to the destination.
    Failed(Value),
}

fn timestamp() -> String {
    let now = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    now.format(&fmt).unwrap_or_default()
}

impl AsyncInvoke {
    /// The invocation record of `payload` after `attempts` failed attempts
    /// (the last answered `error`).
    pub fn failure_record(&self, payload: &Value, attempts: u32, error: &str) -> Value {
        json!({
            "version": "1.0",
            "timestamp": timestamp(),
            "requestContext": {
                "requestId": uuid::Uuid::new_v4().to_string(),
                "functionArn": format!("{}:$LATEST", self.function_arn),
                "condition": "RetriesExhausted",
                "approximateInvokeCount": attempts,
            },
            "requestPayload": payload,
            "responseContext": { "statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled" },
            "responsePayload": { "errorType": "FunctionError", "errorMessage": error },
        })
    }

    /// Invokes `function` with `payload` as Lambda's asynchronous invocation
    /// would (see module docs).
    pub async fn invoke(&self, function: &impl Invoke, payload: Value, deadline_ms: u64) -> AsyncOutcome {
        let attempts = 1 + self.maximum_retry_attempts;
        let mut error = String::new();
        for attempt in 1..=attempts {
            match function.invoke(payload.clone(), deadline_ms).await {
                Ok(_) => return AsyncOutcome::Succeeded(attempt),
                Err(e) => error = e,
            }
        }
        let record = self.failure_record(&payload, attempts, &error);
        self.sqs
            .send_message()
            .queue_url(&self.on_failure_url)
            .message_body(record.to_string())
            .send()
            .await
            .expect("the on-failure destination takes the record");
        AsyncOutcome::Failed(record)
    }
}
