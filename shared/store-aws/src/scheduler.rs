//! [`ExpiryScheduler`] over EventBridge Scheduler: one one-shot `at()`
//! schedule per stream incarnation, named deterministically (hash of path +
//! incarnation) so any instance can replace or cancel it, deleted by
//! Scheduler after it fires (`ActionAfterCompletion=DELETE`), targeting the
//! alarm Lambda with an [`AlarmInput`].
//!
//! Re-arming is lazy: a sliding TTL only moves the stored deadline; the alarm
//! fires at the old deadline, sees the deadline moved and schedules again
//! (the core's `run_expiry`). So a request for a *later* time than the one
//! this process already armed is skipped — the armed alarm will re-arm — and
//! refreshing a TTL never costs a Scheduler call.

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

fn now_ms() -> i64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl EventBridgeScheduler {
    async fn upsert(&self, path: &str, incarnation: &str, at_ms: i64) -> Result<(), StoreError> {
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
            Ok(_) => Ok(()),
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
                Ok(())
            }
            Err(e) => Err(classify(e).into()),
        }
    }
}

#[async_trait]
impl ExpiryScheduler for EventBridgeScheduler {
    #[tracing::instrument(level = "debug", skip(self))]
    async fn schedule_at(&self, path: &str, incarnation: &str, at_ms: i64) -> Result<(), StoreError> {
        let ctx = self.b.registry.get(path);
        if let Some((inc, armed)) = ctx.armed_alarm() {
            if inc == incarnation && armed <= at_ms {
                debug!(armed, "an earlier alarm is armed; it re-arms lazily");
                return Ok(());
            }
        }
        self.upsert(path, incarnation, at_ms).await?;
        ctx.set_armed_alarm(Some((incarnation.to_owned(), at_ms)));
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
    fn at_expressions_round_up_to_whole_seconds() {
        assert_eq!(at_expression(0).ok().as_deref(), Some("at(1970-01-01T00:00:00)"));
        assert_eq!(at_expression(1).ok().as_deref(), Some("at(1970-01-01T00:00:01)"));
        assert_eq!(at_expression(1_796_036_948_000).ok().as_deref(), Some("at(2026-11-30T11:09:08)"));
    }
}
