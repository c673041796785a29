//! [`ExpiryScheduler`] over EventBridge Scheduler: one one-shot `at()`
//! schedule per stream incarnation, named deterministically (hash of path +
//! incarnation) so any instance can replace or cancel it, deleted by
//! Scheduler after it fires (`ActionAfterCompletion=DELETE`), targeting the
//! alarm Lambda with an [`AlarmInput`].
//!
//! Re-arming is lazy: a sliding TTL only moves the stored deadline; the alarm
//! fires at the old deadline, sees the deadline moved and schedules again
//! (the core's `run_expiry`). So a request for a *later* time than an alarm
//! this process armed and that is still pending is skipped — that alarm will
//! re-arm — and refreshing a TTL never costs a Scheduler call.
//!
//! An alarm whose time has come is no longer pending: it has fired (and
//! Scheduler deleted it) or is firing. A warm alarm Lambda re-arming a stream
//! whose deadline slid again must therefore not count the alarm it armed
//! last time (the one that just invoked it) as armed, or the next re-arm is
//! skipped and the stream never expires.

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_scheduler::types::{ActionAfterCompletion, FlexibleTimeWindow, FlexibleTimeWindowMode, Target};
use ds_core::{ExpiryScheduler, StoreError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::debug;

use crate::backend::Backend;
use crate::error::{classify, AwsError};

/// The schedule's `Input`: what the alarm Lambda receives as its event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlarmInput {
    pub path: String,
    pub incarnation: String,
    /// The deadline the alarm was armed for (epoch ms), for logs.
    pub at_ms: i64,
}

/// Deterministic schedule name for `(path, incarnation)`: `ds-` + 56 hex
/// digits of SHA-256 (names allow 64 characters of `[0-9a-zA-Z-_.]`).
pub fn schedule_name(path: &str, incarnation: &str) -> String {
    let mut h = Sha256::new();
    h.update(path.as_bytes());
    h.update([0u8]);
    h.update(incarnation.as_bytes());
    format!("ds-{}", &hex::encode(h.finalize())[..56])
}

/// `at(yyyy-mm-ddThh:mm:ss)` in UTC, rounded up to the next whole second
/// (an alarm must never fire before the deadline it stands for).
pub fn at_expression(at_ms: i64) -> Result<String, StoreError> {
    let secs = at_ms.div_euclid(1000) + i64::from(at_ms.rem_euclid(1000) != 0);
    let t = time::OffsetDateTime::from_unix_timestamp(secs)
        .map_err(|e| StoreError::Backend(format!("alarm time {at_ms} out of range: {e}")))?;
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");
    let s = t.format(&fmt).map_err(|e| StoreError::Backend(format!("formatting alarm time: {e}")))?;
    Ok(format!("at({s})"))
}

pub struct EventBridgeScheduler {
    pub(crate) b: Arc<Backend>,
}

/// An alarm due within this margin counts as fired: it covers clock skew
/// between this process and Scheduler (an early-looking invocation must not
/// find its own alarm still "pending"). Cost: at most one extra Scheduler
/// call for an alarm that really was about to fire.
pub const FIRED_MARGIN_MS: i64 = 5_000;

fn now_ms() -> i64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl EventBridgeScheduler {
    /// Create or replace the schedule; returns the time it was armed for
    /// (`at_ms`, or soon when that has passed).
    async fn upsert(&self, path: &str, incarnation: &str, at_ms: i64) -> Result<i64, StoreError> {
        let b = &self.b;
        let name = schedule_name(path, incarnation);
        // Scheduler refuses times in the past; an overdue alarm fires asap.
        let at_ms = at_ms.max(now_ms() + 1_000);
        let input =
            serde_json::to_string(&AlarmInput { path: path.to_owned(), incarnation: incarnation.to_owned(), at_ms })
                .map_err(|e| StoreError::Backend(e.to_string()))?;
        let target = Target::builder()
            .arn(&b.cfg.alarm_target_arn)
            .role_arn(&b.cfg.scheduler_role_arn)
            .input(input)
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        let window = FlexibleTimeWindow::builder()
            .mode(FlexibleTimeWindowMode::Off)
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        let expr = at_expression(at_ms)?;
        let created = b
            .scheduler
            .create_schedule()
            .name(&name)
            .group_name(&b.cfg.schedule_group)
            .schedule_expression(&expr)
            .schedule_expression_timezone("UTC")
            .flexible_time_window(window.clone())
            .target(target.clone())
            .action_after_completion(ActionAfterCompletion::Delete)
            .send()
            .await;
        match created {
            Ok(_) => Ok(at_ms),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conflict_exception()) => {
                b.scheduler
                    .update_schedule()
                    .name(&name)
                    .group_name(&b.cfg.schedule_group)
                    .schedule_expression(&expr)
                    .schedule_expression_timezone("UTC")
                    .flexible_time_window(window)
                    .target(target)
                    .action_after_completion(ActionAfterCompletion::Delete)
                    .send()
                    .await
                    .map_err(classify)?;
                Ok(at_ms)
            }
            Err(e) => Err(classify(e).into()),
        }
    }
}

/// Whether the alarm this process armed (`armed_inc` at `armed_ms`) makes a
/// request to arm `incarnation` at `at_ms` unnecessary: same incarnation, not
/// later than requested (it will fire first and re-arm), and still pending at
/// `now_ms` (see [`FIRED_MARGIN_MS`]).
pub fn pending_alarm_covers(armed_inc: &str, armed_ms: i64, incarnation: &str, at_ms: i64, now_ms: i64) -> bool {
    armed_inc == incarnation && armed_ms <= at_ms && armed_ms > now_ms.saturating_add(FIRED_MARGIN_MS)
}

#[async_trait]
impl ExpiryScheduler for EventBridgeScheduler {
    #[tracing::instrument(level = "debug", skip(self))]
    async fn schedule_at(&self, path: &str, incarnation: &str, at_ms: i64) -> Result<(), StoreError> {
        let ctx = self.b.registry.get(path);
        if let Some((inc, armed)) = ctx.armed_alarm() {
            if pending_alarm_covers(&inc, armed, incarnation, at_ms, now_ms()) {
                debug!(armed, "an earlier alarm is pending; it re-arms lazily");
                return Ok(());
            }
        }
        let armed = self.upsert(path, incarnation, at_ms).await?;
        ctx.set_armed_alarm(Some((incarnation.to_owned(), armed)));
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn cancel(&self, path: &str, incarnation: &str) -> Result<(), StoreError> {
        let b = &self.b;
        if let Some(ctx) = b.registry.peek(path) {
            if ctx.armed_alarm().is_some_and(|(inc, _)| inc == incarnation) {
                ctx.set_armed_alarm(None);
            }
        }
        let name = schedule_name(path, incarnation);
        match b.scheduler.delete_schedule().name(&name).group_name(&b.cfg.schedule_group).send().await {
            Ok(_) => Ok(()),
            Err(e) => match classify(e) {
                AwsError::NotFound(_) => Ok(()),
                other => Err(other.into()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_deterministic_and_valid() {
        let a = schedule_name("a/b", "i1");
        assert_eq!(a, schedule_name("a/b", "i1"));
        assert_ne!(a, schedule_name("a/b", "i2"));
        assert_ne!(schedule_name("a", "bi"), schedule_name("ab", "i"));
        assert!(a.len() <= 64 && a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    }

    #[test]
    fn only_a_pending_alarm_of_the_same_incarnation_covers_a_later_deadline() {
        let now = 1_000_000;
        let soon = now + FIRED_MARGIN_MS + 1;
        assert!(pending_alarm_covers("i1", soon, "i1", soon + 10_000, now), "pending, earlier: it re-arms");
        assert!(pending_alarm_covers("i1", soon, "i1", soon, now));
        assert!(!pending_alarm_covers("i1", soon, "i1", soon - 1, now), "an earlier deadline is armed anew");
        assert!(!pending_alarm_covers("i2", soon, "i1", soon + 10_000, now), "another incarnation");
        // The alarm that just fired (a warm alarm Lambda's cache) covers nothing.
        assert!(!pending_alarm_covers("i1", now - 1, "i1", now + 60_000, now));
        assert!(!pending_alarm_covers("i1", now + FIRED_MARGIN_MS, "i1", now + 60_000, now), "due within the margin");
    }

    #[test]
    fn at_expressions_round_up_to_whole_seconds() {
        assert_eq!(at_expression(0).ok().as_deref(), Some("at(1970-01-01T00:00:00)"));
        assert_eq!(at_expression(1).ok().as_deref(), Some("at(1970-01-01T00:00:01)"));
        assert_eq!(at_expression(1_796_036_948_000).ok().as_deref(), Some("at(2026-11-30T11:09:08)"));
    }
}
