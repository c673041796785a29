//! One-shot EventBridge Scheduler schedules, the one shape both kinds of
//! alarm take (a stream's expiry, [`crate::scheduler`]; a processor's
//! revival, `ds-processor-aws`): an `at()` expression in UTC, no flexible
//! window, deleted by Scheduler once it has fired, created or replaced by
//! a deterministic name so any instance can re-arm or cancel it. A schedule
//! Scheduler cannot deliver is retried ([`DELIVERY_RETRIES`] within
//! [`DELIVERY_MAX_AGE_SECS`]), then put on the dead-letter queue the
//! deployment names (`DS_AWS_SCHEDULE_DEAD_LETTER_ARN`): since the schedule
//! deletes itself after firing, that queue is the only trace of an alarm
//! that never reached its function.

use aws_sdk_scheduler::types::{
    ActionAfterCompletion, DeadLetterConfig, FlexibleTimeWindow, FlexibleTimeWindowMode, RetryPolicy, Target,
};
use sha2::{Digest, Sha256};

use crate::error::{classify, AwsError};

/// How soon an overdue alarm fires: Scheduler refuses times in the past.
pub const OVERDUE_DELAY_MS: i64 = 1_000;

/// Deliveries Scheduler retries (with its own backoff) when it cannot invoke
/// the target: throttling, the function or role briefly unavailable. The
/// function's own failures are not retried here: Scheduler invokes it
/// asynchronously, so they go to the function's on-failure destination.
pub const DELIVERY_RETRIES: i32 = 10;
/// How long an undelivered alarm is retried before it is dead-lettered: an
/// hour late, an expiry or revival had better be seen by an operator (the
/// dead-letter queue is alarmed) than retried for the default day.
pub const DELIVERY_MAX_AGE_SECS: i32 = 3_600;

/// What one schedule does when it fires: invoke `target_arn` as `role_arn`
/// with `input` (the event the target receives); what it cannot deliver
/// goes to `dead_letter_arn` (an SQS queue the role may send to).
pub struct OneShot<'a> {
    pub group: &'a str,
    pub name: &'a str,
    pub target_arn: &'a str,
    pub role_arn: &'a str,
    pub dead_letter_arn: &'a str,
    pub input: String,
}

/// A deterministic schedule name for the pair `(first, second)`: `prefix`
/// and hex digits of SHA-256, 60 characters for a prefix of up to four
/// (names allow 64 of `[0-9a-zA-Z-_.]`).
pub fn name(prefix: &str, first: &str, second: &str) -> String {
    let mut h = Sha256::new();
    h.update(first.as_bytes());
    h.update([0u8]);
    h.update(second.as_bytes());
    format!("{prefix}{}", &hex::encode(h.finalize())[..56])
}

/// `at(yyyy-mm-ddThh:mm:ss)` in UTC, rounded up to the next whole second
/// (an alarm must never fire before the deadline it stands for).
pub fn at_expression(at_ms: i64) -> Result<String, AwsError> {
    let secs = at_ms.div_euclid(1000) + i64::from(at_ms.rem_euclid(1000) != 0);
    let t = time::OffsetDateTime::from_unix_timestamp(secs)
        .map_err(|e| AwsError::Rejected(format!("alarm time {at_ms} out of range: {e}")))?;
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");
    let s = t.format(&fmt).map_err(|e| AwsError::Rejected(format!("formatting alarm time {at_ms}: {e}")))?;
    Ok(format!("at({s})"))
}

/// Creates the schedule, or replaces the one of that name, to fire at
/// `at_ms` (which the caller has already moved past the present: see
/// [`OVERDUE_DELAY_MS`]).
pub async fn upsert(scheduler: &aws_sdk_scheduler::Client, schedule: OneShot<'_>, at_ms: i64) -> Result<(), AwsError> {
    let expr = at_expression(at_ms)?;
    let target = Target::builder()
        .arn(schedule.target_arn)
        .role_arn(schedule.role_arn)
        .input(schedule.input)
        .retry_policy(
            RetryPolicy::builder()
                .maximum_retry_attempts(DELIVERY_RETRIES)
                .maximum_event_age_in_seconds(DELIVERY_MAX_AGE_SECS)
                .build(),
        )
        .dead_letter_config(DeadLetterConfig::builder().arn(schedule.dead_letter_arn).build())
        .build()
        .map_err(|e| AwsError::Rejected(e.to_string()))?;
    let window = FlexibleTimeWindow::builder()
        .mode(FlexibleTimeWindowMode::Off)
        .build()
        .map_err(|e| AwsError::Rejected(e.to_string()))?;
    let created = scheduler
        .create_schedule()
        .name(schedule.name)
        .group_name(schedule.group)
        .schedule_expression(&expr)
        .schedule_expression_timezone("UTC")
        .flexible_time_window(window.clone())
        .target(target.clone())
        .action_after_completion(ActionAfterCompletion::Delete)
        .send()
        .await;
    match created.map_err(classify) {
        Ok(_) => Ok(()),
        Err(AwsError::AlreadyExists) => scheduler
            .update_schedule()
            .name(schedule.name)
            .group_name(schedule.group)
            .schedule_expression(&expr)
            .schedule_expression_timezone("UTC")
            .flexible_time_window(window)
            .target(target)
            .action_after_completion(ActionAfterCompletion::Delete)
            .send()
            .await
            .map(|_| ())
            .map_err(classify),
        Err(other) => Err(other),
    }
}

/// Deletes the schedule; one that is gone already (fired, or never armed)
/// is not an error.
pub async fn delete(scheduler: &aws_sdk_scheduler::Client, group: &str, name: &str) -> Result<(), AwsError> {
    match scheduler.delete_schedule().name(name).group_name(group).send().await.map_err(classify) {
        Ok(_) | Err(AwsError::NotFound(_)) => Ok(()),
        Err(other) => Err(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_expressions_round_up_to_whole_seconds() {
        assert_eq!(at_expression(0).ok().as_deref(), Some("at(1970-01-01T00:00:00)"));
        assert_eq!(at_expression(1).ok().as_deref(), Some("at(1970-01-01T00:00:01)"));
        assert_eq!(at_expression(1_796_036_948_000).ok().as_deref(), Some("at(2026-11-30T11:09:08)"));
    }
}
