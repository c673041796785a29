//! Revival alarms on EventBridge Scheduler: the AWS [`AlarmScheduler`].
//!
//! One one-shot `at()` schedule per (stream path, processor slug), named
//! deterministically ([`revival_schedule_name`]) so arming again replaces it
//! whichever instance armed it first, deleted by Scheduler once it fired
//! (`ActionAfterCompletion=DELETE`). Its target is the processor function
//! itself, its `Input` a [`RevivalInput`]: the function appends the revival
//! event (keyed by the arming's token, so a redelivered schedule dedupes)
//! and catches the stream's processors up.
//!
//! Disarming deletes the schedule only if it still holds the token this
//! instance armed (`GetSchedule` first): another instance may have armed the
//! same (stream, slug) since, and its alarm is not ours to cancel. An alarm
//! this instance never armed is left alone; a stray revival costs one
//! caught-up turn.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use ds_core::Clock;
use ds_processor::{Alarm, RecoveryError, StreamIncarnation};
use ds_processor_host::AlarmScheduler;
use ds_store_aws::error::{classify, AwsError};
use ds_store_aws::schedules::{self, OneShot, OVERDUE_DELAY_MS};
use serde::{Deserialize, Serialize};

/// Tells a revival schedule's input from the other events the function gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RevivalKind {
    #[serde(rename = "processor-revival")]
    ProcessorRevival,
}

/// A revival schedule's `Input`: what the processor function receives when
/// the alarm fires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevivalInput {
    pub kind: RevivalKind,
    pub path: String,
    pub slug: String,
    pub incarnation: String,
    /// Unique per arming: the revival event is keyed by it.
    pub token: String,
    pub at_ms: u64,
}

impl RevivalInput {
    pub fn new(path: &str, alarm: &Alarm) -> Self {
        Self {
            kind: RevivalKind::ProcessorRevival,
            path: path.to_owned(),
            slug: alarm.slug.clone(),
            incarnation: alarm.incarnation.as_str().to_owned(),
            token: alarm.token.clone(),
            at_ms: alarm.at_ms,
        }
    }

    pub fn alarm(&self) -> Alarm {
        Alarm {
            slug: self.slug.clone(),
            incarnation: StreamIncarnation::new(self.incarnation.clone()),
            token: self.token.clone(),
            at_ms: self.at_ms,
        }
    }
}

/// Deterministic schedule name of the revival alarm of `slug` on `path`:
/// `dsp-` + 56 hex digits of SHA-256 (names allow 64 characters).
pub fn revival_schedule_name(path: &str, slug: &str) -> String {
    schedules::name("dsp-", path, slug)
}

/// Where revival schedules go and whom they invoke.
#[derive(Debug, Clone)]
pub struct RevivalTarget {
    pub schedule_group: String,
    /// The processor function's ARN.
    pub function_arn: String,
    /// The role Scheduler assumes to invoke it.
    pub role_arn: String,
    /// Where Scheduler puts a revival it could not deliver.
    pub dead_letter_arn: String,
}

/// The EventBridge Scheduler [`AlarmScheduler`] (see module docs).
pub struct RevivalSchedules {
    scheduler: aws_sdk_scheduler::Client,
    target: RevivalTarget,
    /// `(path, slug) -> token` of the alarms this instance armed.
    armed: Mutex<HashMap<(String, String), String>>,
    /// Moves an overdue alarm's time past the present.
    clock: Clock,
}

fn unavailable(e: impl std::fmt::Display) -> RecoveryError {
    RecoveryError::Unavailable(e.to_string())
}

impl RevivalSchedules {
    pub fn new(scheduler: aws_sdk_scheduler::Client, target: RevivalTarget, clock: Clock) -> Self {
        Self { scheduler, target, armed: Mutex::default(), clock }
    }

    fn remembered(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), String>> {
        self.armed.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The input of the pending revival schedule of `slug` on `path`.
    pub async fn pending(&self, path: &str, slug: &str) -> Result<Option<RevivalInput>, RecoveryError> {
        let got = self
            .scheduler
            .get_schedule()
            .name(revival_schedule_name(path, slug))
            .group_name(&self.target.schedule_group)
            .send()
            .await;
        match got {
            Ok(out) => {
                let input = out.target().map(|t| t.input().unwrap_or_default()).unwrap_or_default();
                Ok(serde_json::from_str(input).ok())
            }
            Err(e) => match classify(e) {
                AwsError::NotFound(_) => Ok(None),
                other => Err(unavailable(other)),
            },
        }
    }
}

#[async_trait]
impl AlarmScheduler for RevivalSchedules {
    async fn arm(&self, path: &str, alarm: &Alarm) -> Result<(), RecoveryError> {
        let name = revival_schedule_name(path, &alarm.slug);
        let mut input = RevivalInput::new(path, alarm);
        let at = i64::try_from(input.at_ms).map_err(unavailable)?.max(self.clock.now_ms() + OVERDUE_DELAY_MS);
        input.at_ms = u64::try_from(at).map_err(unavailable)?;
        let schedule = OneShot {
            group: &self.target.schedule_group,
            name: &name,
            target_arn: &self.target.function_arn,
            role_arn: &self.target.role_arn,
            dead_letter_arn: &self.target.dead_letter_arn,
            // Plain fields: encoding cannot fail.
            input: serde_json::to_string(&input).unwrap_or_default(),
        };
        schedules::upsert(&self.scheduler, schedule, at).await.map_err(unavailable)?;
        tracing::debug!(path, slug = %alarm.slug, at_ms = input.at_ms, "revival alarm armed");
        self.remembered().insert((path.to_owned(), alarm.slug.clone()), alarm.token.clone());
        Ok(())
    }

    async fn disarm(&self, path: &str, slug: &str) -> Result<(), RecoveryError> {
        let key = (path.to_owned(), slug.to_owned());
        let Some(token) = self.remembered().get(&key).cloned() else { return Ok(()) };
        if self.pending(path, slug).await?.is_some_and(|p| p.token == token) {
            let name = revival_schedule_name(path, slug);
            schedules::delete(&self.scheduler, &self.target.schedule_group, &name).await.map_err(unavailable)?;
        }
        let mut armed = self.remembered();
        if armed.get(&key) == Some(&token) {
            armed.remove(&key);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_per_stream_and_slug_and_valid() {
        let a = revival_schedule_name("s/a", "outbox");
        assert_eq!(a, revival_schedule_name("s/a", "outbox"));
        assert_ne!(a, revival_schedule_name("s/a", "counter"));
        assert_ne!(revival_schedule_name("ab", "c"), revival_schedule_name("a", "bc"));
        assert!(a.len() <= 64 && a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    }

    #[test]
    fn the_input_round_trips_and_is_tagged() {
        let alarm = Alarm { slug: "s".into(), incarnation: "i".into(), token: "t".into(), at_ms: 5 };
        let input = RevivalInput::new("p", &alarm);
        let json = serde_json::to_value(&input).expect("encodes");
        assert_eq!(json["kind"], "processor-revival");
        assert_eq!(json["atMs"], 5);
        let back: RevivalInput = serde_json::from_value(json).expect("decodes");
        assert_eq!(back.alarm(), alarm);
        assert!(serde_json::from_value::<RevivalInput>(serde_json::json!({"path": "p"})).is_err());
    }
}
