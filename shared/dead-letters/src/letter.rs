//! One queued message, read: what it is, why it is there, and what a
//! redrive does with it. No I/O.

use std::collections::HashMap;
use std::fmt;

use serde_json::Value;

/// Which queue a message sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QueueRole {
    TaskDeadLetters,
    FailedInvocations,
    ScheduleDeadLetters,
    ParkedRecords,
}

impl QueueRole {
    pub const ALL: [QueueRole; 4] =
        [Self::TaskDeadLetters, Self::FailedInvocations, Self::ScheduleDeadLetters, Self::ParkedRecords];

    /// The name an operator types (`--queue`).
    pub fn name(self) -> &'static str {
        match self {
            Self::TaskDeadLetters => "tasks",
            Self::FailedInvocations => "failed-invocations",
            Self::ScheduleDeadLetters => "schedules",
            Self::ParkedRecords => "parked",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }
}

impl fmt::Display for QueueRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a message is.
#[derive(Debug, Clone, PartialEq)]
pub enum Letter {
    /// A background task (`ds_processor_aws::Task`) dead-lettered after
    /// `receives` receives.
    Task { handler: String, key: String, path: String, receives: Option<u32>, body: String },
    /// Lambda's record of an asynchronous invocation that failed
    /// (`condition`: `RetriesExhausted` or `EventAgeExceeded`).
    FailedInvocation { function_arn: String, condition: String, attempts: u64, error: String, event: Value },
    /// An event EventBridge Scheduler could not deliver (body: the
    /// schedule's input; the error in the message attributes).
    UndeliveredSchedule { target_arn: String, schedule_arn: String, error: String, event: Value },
    /// A table-stream record the processor function could not read.
    ParkedRecord { reason: String, record: Value },
    /// The stream event source's on-failure record: the batch it gave up on
    /// (shard and sequence numbers, not the records).
    GivenUpBatch { condition: String, batch: Value },
    /// Not a message any of the above writes.
    Unknown { why: String },
}

/// The function's ARN without a version or alias qualifier (`...:function:NAME`).
fn unqualified(arn: &str) -> String {
    let parts: Vec<&str> = arn.split(':').collect();
    if parts.len() > 7 && parts[5] == "function" {
        parts[..7].join(":")
    } else {
        arn.to_owned()
    }
}

fn text(v: &Value, pointer: &str) -> String {
    match v.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

impl Letter {
    /// Reads `body` (with the message's `attributes`: system attributes and
    /// string message attributes by name) as found in a queue of `role`.
    pub fn read(role: QueueRole, body: &str, attributes: &HashMap<String, String>) -> Self {
        let json: Value = match serde_json::from_str(body) {
            Ok(v) => v,
            Err(e) if role != QueueRole::ScheduleDeadLetters => return Self::Unknown { why: format!("not JSON: {e}") },
            Err(_) => Value::String(body.to_owned()),
        };
        match role {
            QueueRole::TaskDeadLetters => match (json.get("handler"), json.get("idempotencyKey")) {
                (Some(_), Some(_)) => Self::Task {
                    handler: text(&json, "/handler"),
                    key: text(&json, "/idempotencyKey"),
                    path: text(&json, "/path"),
                    receives: attributes.get("ApproximateReceiveCount").and_then(|n| n.parse().ok()),
                    body: body.to_owned(),
                },
                _ => Self::Unknown { why: "not a background task".into() },
            },
            QueueRole::FailedInvocations => match json.get("requestContext") {
                Some(ctx) if json.get("requestPayload").is_some() => Self::FailedInvocation {
                    function_arn: unqualified(&text(ctx, "/functionArn")),
                    condition: text(ctx, "/condition"),
                    attempts: ctx.get("approximateInvokeCount").and_then(Value::as_u64).unwrap_or(0),
                    error: [text(&json, "/responsePayload/errorType"), text(&json, "/responsePayload/errorMessage")]
                        .into_iter()
                        .filter(|s| !s.is_empty())
                        .collect::<Vec<_>>()
                        .join(": "),
                    event: json["requestPayload"].clone(),
                },
                _ => Self::Unknown { why: "not a Lambda invocation record".into() },
            },
            QueueRole::ScheduleDeadLetters => {
                let attr = |k: &str| attributes.get(k).cloned().unwrap_or_default();
                let error = [attr("ERROR_CODE"), attr("ERROR_MESSAGE")]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join(": ");
                match attributes.get("TARGET_ARN") {
                    Some(target) => Self::UndeliveredSchedule {
                        target_arn: unqualified(target),
                        schedule_arn: attr("SCHEDULE_ARN"),
                        error,
                        event: json,
                    },
                    None => Self::Unknown { why: "no TARGET_ARN attribute: not from EventBridge Scheduler".into() },
                }
            }
            QueueRole::ParkedRecords => {
                if let (Some(reason), Some(Value::String(record))) = (json.get("reason"), json.get("record")) {
                    let record = serde_json::from_str(record).unwrap_or_else(|_| Value::String(record.clone()));
                    return Self::ParkedRecord { reason: reason.as_str().unwrap_or_default().to_owned(), record };
                }
                match json.get("DDBStreamBatchInfo") {
                    Some(batch) => {
                        Self::GivenUpBatch { condition: text(&json, "/requestContext/condition"), batch: batch.clone() }
                    }
                    None => Self::Unknown { why: "neither a parked record nor a stream batch record".into() },
                }
            }
        }
    }

    /// Why it is in the queue, in a line.
    pub fn reason(&self) -> String {
        match self {
            Self::Task { receives, .. } => match receives {
                Some(n) => {
                    format!("dead-lettered, received {n} times (the errors are in the processor function's log)")
                }
                None => "dead-lettered (the error is in the processor function's log)".into(),
            },
            Self::FailedInvocation { condition, attempts, error, .. } => {
                format!("{condition} after {attempts} attempts: {error}")
            }
            Self::UndeliveredSchedule { error, .. } => format!("not delivered by EventBridge Scheduler: {error}"),
            Self::ParkedRecord { reason, .. } => format!("unreadable stream record: {reason}"),
            Self::GivenUpBatch { condition, .. } => format!("the table-stream event source gave up ({condition})"),
            Self::Unknown { why } => why.clone(),
        }
    }

    /// What it concerns, in a line (the stream, processor, function).
    pub fn concerns(&self) -> String {
        match self {
            Self::Task { handler, key, path, .. } => format!("task {handler} {key} of {path}"),
            Self::FailedInvocation { function_arn, event, .. }
            | Self::UndeliveredSchedule { target_arn: function_arn, event, .. } => {
                format!("{} → {}", describe_event(event), function_arn)
            }
            Self::ParkedRecord { record, .. } => format!("record {}", text(record, "/dynamodb/SequenceNumber")),
            Self::GivenUpBatch { batch, .. } => format!(
                "shard {} records {}..{}",
                text(batch, "/shardId"),
                text(batch, "/startSequenceNumber"),
                text(batch, "/endSequenceNumber")
            ),
            Self::Unknown { .. } => "?".into(),
        }
    }
}

/// A revival (`processor-revival` of a slug on a path), an expiry (a path),
/// or the event's first characters.
fn describe_event(event: &Value) -> String {
    match event.get("kind").and_then(Value::as_str) {
        Some("processor-revival") => format!("revival of {} on {}", text(event, "/slug"), text(event, "/path")),
        _ if event.get("path").is_some() => format!("alarm of {}", text(event, "/path")),
        _ => event.to_string().chars().take(60).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn no_attributes() -> HashMap<String, String> {
        HashMap::new()
    }

    #[test]
    fn a_lambda_invocation_record_reads_as_a_failed_invocation() {
        // The documented record of an asynchronous invocation's on-failure destination.
        let record = json!({
            "version": "1.0", "timestamp": "2019-11-14T18:16:05.568Z",
            "requestContext": {
                "requestId": "e4b46cbf-b738-xmpl-8880-a18cdf61200e",
                "functionArn": "arn:aws:lambda:us-east-2:123456789012:function:my-function:$LATEST",
                "condition": "RetriesExhausted", "approximateInvokeCount": 3
            },
            "requestPayload": {"kind": "processor-revival", "path": "orders/1", "slug": "relay"},
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
            "responsePayload": {"errorMessage": "RequestId: e4b4 Process exited before completing request"}
        });
        let letter = Letter::read(QueueRole::FailedInvocations, &record.to_string(), &no_attributes());
        let Letter::FailedInvocation { function_arn, attempts, event, .. } = &letter else { panic!("{letter:?}") };
        assert_eq!(function_arn, "arn:aws:lambda:us-east-2:123456789012:function:my-function");
        assert_eq!(*attempts, 3);
        assert_eq!(event["slug"], "relay");
        assert!(letter.reason().starts_with("RetriesExhausted after 3 attempts: RequestId"), "{}", letter.reason());
        assert_eq!(
            letter.concerns(),
            "revival of relay on orders/1 → arn:aws:lambda:us-east-2:123456789012:function:my-function"
        );
    }

    #[test]
    fn a_scheduler_dead_letter_reads_its_error_from_the_attributes() {
        let attributes: HashMap<String, String> = [
            ("ERROR_CODE", "AWS.Lambda.ResourceNotFoundException"),
            ("ERROR_MESSAGE", "Function not found"),
            ("EXHAUSTED_RETRY_CONDITION", "MaximumRetryAttempts"),
            ("RETRY_ATTEMPTS", "10"),
            ("SCHEDULE_ARN", "arn:aws:scheduler:us-east-1:123456789012:schedule/g/s"),
            ("TARGET_ARN", "arn:aws:lambda:us-east-1:123456789012:function:f"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let letter = Letter::read(QueueRole::ScheduleDeadLetters, r#"{"path":"s/1","atMs":5}"#, &attributes);
        assert!(matches!(&letter, Letter::UndeliveredSchedule { event, .. } if event["path"] == "s/1"));
        assert_eq!(
            letter.reason(),
            "not delivered by EventBridge Scheduler: AWS.Lambda.ResourceNotFoundException: Function not found"
        );
        assert!(matches!(Letter::read(QueueRole::ScheduleDeadLetters, "{}", &no_attributes()), Letter::Unknown { .. }));
    }

    #[test]
    fn tasks_parked_records_and_batches_read_as_themselves() {
        let task = r#"{"handler":"audit","idempotencyKey":"k1","path":"orders/1","incarnation":"i","payload":{}}"#;
        let attributes = HashMap::from([("ApproximateReceiveCount".to_owned(), "5".to_owned())]);
        let letter = Letter::read(QueueRole::TaskDeadLetters, task, &attributes);
        assert_eq!(letter.concerns(), "task audit k1 of orders/1");
        assert!(letter.reason().starts_with("dead-lettered, received 5 times"));

        let parked = json!({"reason": "no pk", "record": r#"{"dynamodb":{"SequenceNumber":"42"}}"#}).to_string();
        let letter = Letter::read(QueueRole::ParkedRecords, &parked, &no_attributes());
        assert_eq!(letter.concerns(), "record 42");
        assert_eq!(letter.reason(), "unreadable stream record: no pk");

        let batch = json!({"requestContext": {"condition": "RetryAttemptsExhausted"},
            "DDBStreamBatchInfo": {"shardId": "sh-1", "startSequenceNumber": "1", "endSequenceNumber": "9"}});
        let letter = Letter::read(QueueRole::ParkedRecords, &batch.to_string(), &no_attributes());
        assert_eq!(letter.concerns(), "shard sh-1 records 1..9");
        assert!(matches!(Letter::read(QueueRole::TaskDeadLetters, "nope", &no_attributes()), Letter::Unknown { .. }));
    }
}
