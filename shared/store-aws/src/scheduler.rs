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
use ds_core::{ExpiryScheduler, StoreError};
use serde::{Deserialize, Serialize};
use tracing::debug;

use crate::backend::Backend;
use crate::schedules::{self, OneShot, OVERDUE_DELAY_MS};

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
    schedules::name("ds-", path, incarnation)
}

pub struct EventBridgeScheduler {
    pub(crate) b: Arc<Backend>,
}

/// An alarm due within this margin counts as fired: it covers clock skew
/// between this process and Scheduler (an early-looking invocation must not
/// find its own alarm still "pending"). Cost: at most one extra Scheduler
/// call for an alarm that really was about to fire.
pub const FIRED_MARGIN_MS: i64 = 5_000;

impl EventBridgeScheduler {
    /// Create or replace the schedule; returns the time it was armed for
    /// (`at_ms`, or soon when that has passed).
    async fn upsert(&self, path: &str, incarnation: &str, at_ms: i64) -> Result<i64, StoreError> {
        let b = &self.b;
        let name = schedule_name(path, incarnation);
        let at_ms = at_ms.max(b.clock.now_ms() + OVERDUE_DELAY_MS);
        let alarm = AlarmInput { path: path.to_owned(), incarnation: incarnation.to_owned(), at_ms };
        let schedule = OneShot {
            group: &b.cfg.schedule_group,
            name: &name,
            target_arn: &b.cfg.alarm_target_arn,
            role_arn: &b.cfg.scheduler_role_arn,
            dead_letter_arn: &b.cfg.schedule_dead_letter_arn,
            // Three plain fields: encoding cannot fail.
            input: serde_json::to_string(&alarm).unwrap_or_default(),
        };
        schedules::upsert(&b.scheduler, schedule, at_ms).await?;
        Ok(at_ms)
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
            if pending_alarm_covers(&inc, armed, incarnation, at_ms, self.b.clock.now_ms()) {
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
        Ok(schedules::delete(&b.scheduler, &b.cfg.schedule_group, &schedule_name(path, incarnation)).await?)
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
}
