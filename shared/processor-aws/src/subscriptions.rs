//! Subscriptions (protocol §6-7) on the AWS plane: the processor function
//! runs them; the HTTP function only serves their API (its scheduler is
//! `ds_subscriptions::FeedWakes`, so no request waits on a webhook).
//!
//! | what happens | how it reaches the engine |
//! | --- | --- |
//! | a stream got data (chunk insert in the table's DynamoDB Stream) | [`SubscriptionPlane::streams_changed`]: the live subscriptions are re-read from the index (one read per batch, so one created a moment ago by the HTTP function links the stream before its data wakes anyone), new matching streams are linked, subscriptions with pending work woken |
//! | a subscription's record changed (its `state` record in the stream: created, acked, claimed, released, deleted by the HTTP function, or by another instance of this one) | [`SubscriptionPlane::records_changed`]: read again, then looked at: a wake the change issued is delivered, the record's next time kept |
//! | a time came (a lease's end, a retry after backoff) | a delayed SQS message on the function's task queue ([`QueuedWakes`]), [`SubscriptionDue`], handled by [`SubscriptionPlane::due`] |
//!
//! Webhook deliveries never run in the table-stream invocation: a
//! subscription due now (a wake the batch issued) is handed to the task
//! queue as a [`SubscriptionDue`] of its own, undelayed, and delivered by an
//! SQS invocation, which runs the due messages of its batch concurrently. So
//! many slow receivers cannot push a stream batch past the function's
//! timeout, and one slow receiver delays only its own subscription.
//!
//! Times go through SQS rather than EventBridge Scheduler because Scheduler
//! fires within 60 seconds of a schedule's time, while a retry backoff
//! starts at 1 s and a lease may be 1 s long; SQS delays to the second, up
//! to 15 minutes, which covers both (a lease is at most 10 minutes, a
//! backoff at most 60 s). A message is never cancelled: when a time it
//! carried is no longer the record's, the look it causes finds nothing to
//! do. The time is in the record too, so a lost message only delays until
//! the subscription's next change.
//!
//! Every change is the engine's conditional write, so two instances racing
//! on one subscription (a redelivered batch, a concurrent callback) cannot
//! both win; the loser re-reads.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use ds_core::{Clock, TailSignal};
use ds_subscriptions::{SubscriptionError, Subscriptions, WakeScheduler};
use serde::{Deserialize, Serialize};

use crate::queue::{SendError, SqsQueue};

/// Longest delay SQS gives a message.
const MAX_DELAY_SECS: i64 = 900;

/// Tells a subscription's timer message from background tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DueKind {
    #[serde(rename = "subscription-due")]
    SubscriptionDue,
}

/// The body of a subscription's timer message: look at subscription `id`
/// (its time, `at_ms`, was then due).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionDue {
    pub kind: DueKind,
    pub id: String,
    pub at_ms: i64,
}

impl SubscriptionDue {
    /// The message, if `body` is one.
    pub fn parse(body: &str) -> Option<Self> {
        serde_json::from_str(body).ok()
    }
}

/// Where [`QueuedWakes`] sends its delayed messages.
#[async_trait]
pub trait DelayedQueue: Send + Sync {
    async fn send_delayed(&self, body: String, delay_secs: i32) -> Result<(), SendError>;
}

/// [`DelayedQueue`] on an SQS queue (SQS delays a message by up to 15 minutes).
#[async_trait]
impl DelayedQueue for SqsQueue {
    async fn send_delayed(&self, body: String, delay_secs: i32) -> Result<(), SendError> {
        self.send(body, delay_secs).await
    }
}

/// The engine's scheduler in the processor function: a time already come
/// is looked at before the invocation answers ([`QueuedWakes::take_now`]);
/// a later one is a delayed message (see the module docs).
pub struct QueuedWakes {
    queue: Arc<dyn DelayedQueue>,
    now: Mutex<VecDeque<String>>,
    /// The time this instance last sent a message for, per subscription:
    /// asking for the same time again sends nothing.
    sent: Mutex<HashMap<String, i64>>,
    /// Tells a time already come from a later one.
    clock: Clock,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section is one collection operation.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl QueuedWakes {
    pub fn new(queue: Arc<dyn DelayedQueue>, clock: Clock) -> Self {
        Self { queue, now: Mutex::default(), sent: Mutex::default(), clock }
    }

    /// The message for `id`'s time `at_ms` arrived: asking for that time
    /// again sends another (the record may still hold it, if the message
    /// came early or its look failed).
    pub fn arrived(&self, id: &str, at_ms: i64) {
        let mut sent = lock(&self.sent);
        if sent.get(id) == Some(&at_ms) {
            sent.remove(id);
        }
    }

    /// The subscriptions due now, in the order they were asked for.
    pub fn take_now(&self) -> Vec<String> {
        lock(&self.now).drain(..).collect()
    }
}

#[async_trait]
impl WakeScheduler for QueuedWakes {
    async fn wake_at(&self, id: &str, at_ms: i64) {
        let now = self.clock.now_ms();
        if at_ms <= now {
            let mut due = lock(&self.now);
            if !due.iter().any(|d| d == id) {
                due.push_back(id.to_owned());
            }
            return;
        }
        if lock(&self.sent).get(id) == Some(&at_ms) {
            return;
        }
        // Rounded up: a message never arrives before its time.
        let delay = ((at_ms - now + 999) / 1000).min(MAX_DELAY_SECS);
        let body = SubscriptionDue { kind: DueKind::SubscriptionDue, id: id.to_owned(), at_ms };
        let body = serde_json::to_string(&body).unwrap_or_default();
        match self.queue.send_delayed(body, i32::try_from(delay).unwrap_or(0)).await {
            Ok(()) => {
                lock(&self.sent).insert(id.to_owned(), at_ms);
            }
            // The time stays in the record: the subscription's next change
            // looks at it again.
            Err(e) => tracing::error!(subscription = %id, at_ms, error = %e, "could not queue a subscription's time"),
        }
    }

    async fn cancel(&self, id: &str) {
        lock(&self.sent).remove(id);
    }
}

/// The subscriptions engine of the processor function (see module docs).
#[derive(Clone)]
pub struct SubscriptionPlane {
    engine: Subscriptions,
    wakes: Arc<QueuedWakes>,
}

/// A stream's newest tail seen in a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamTail {
    pub incarnation: String,
    pub tail: u64,
}

impl SubscriptionPlane {
    /// `engine` must have been built with `wakes` as its scheduler.
    pub fn new(engine: Subscriptions, wakes: Arc<QueuedWakes>) -> Self {
        Self { engine, wakes }
    }

    pub fn engine(&self) -> &Subscriptions {
        &self.engine
    }

    /// Streams got data (see module docs). Returns the paths whose handling
    /// failed (their records are to be delivered again), with the reason.
    pub async fn streams_changed(&self, streams: &BTreeMap<String, StreamTail>) -> Vec<(String, String)> {
        if streams.is_empty() {
            return Vec::new();
        }
        if let Err(e) = self.engine.refresh().await {
            let why = format!("reading the subscriptions: {e}");
            return streams.keys().map(|p| (p.clone(), why.clone())).collect();
        }
        let mut failed = Vec::new();
        for (path, at) in streams {
            let signal = TailSignal {
                incarnation: at.incarnation.as_str().into(),
                tail: at.tail,
                closed: false,
                deleted: false,
            };
            if let Err(e) = self.engine.stream_changed(path, &signal).await {
                failed.push((path.clone(), e.to_string()));
            }
        }
        self.hand_off_due().await;
        failed
    }

    /// Subscriptions' records changed (see module docs). Returns the ids
    /// whose handling failed, with the reason.
    pub async fn records_changed(&self, ids: &[String]) -> Vec<(String, String)> {
        let mut failed = Vec::new();
        for id in ids {
            if let Err(e) = self.engine.record_changed(id).await {
                failed.push((id.clone(), e.to_string()));
            }
        }
        self.hand_off_due().await;
        failed
    }

    /// Every subscription due now goes to the task queue, one message each
    /// (see the module docs); one whose message SQS did not take is run
    /// here instead. A wake issued and not delivered stays in its record;
    /// the change stream brings that record back to a later invocation.
    async fn hand_off_due(&self) {
        let now = self.wakes.clock.now_ms();
        for id in self.wakes.take_now() {
            let body = SubscriptionDue { kind: DueKind::SubscriptionDue, id: id.clone(), at_ms: now };
            let Err(e) = self.wakes.queue.send_delayed(serde_json::to_string(&body).unwrap_or_default(), 0).await
            else {
                continue;
            };
            tracing::warn!(subscription = %id, error = %e, "could not hand a delivery to the queue: delivering it here");
            if let Err(e) = self.engine.run_due(&id).await {
                tracing::warn!(subscription = %id, error = %e, "delivering a wake failed");
            }
        }
    }

    /// A subscription's time came (its timer message arrived).
    pub async fn due(&self, due: &SubscriptionDue) -> Result<(), SubscriptionError> {
        self.wakes.arrived(&due.id, due.at_ms);
        let ran = match self.engine.deliver_due(&due.id).await {
            Ok(()) | Err(SubscriptionError::NotFound) => Ok(()),
            Err(e) => Err(e),
        };
        // What came due meanwhile (a new wake the outcome issued) is handed
        // on, not delivered here.
        self.hand_off_due().await;
        ran
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Recorded(Mutex<Vec<(SubscriptionDue, i32)>>);

    #[async_trait]
    impl DelayedQueue for Recorded {
        async fn send_delayed(&self, body: String, delay_secs: i32) -> Result<(), SendError> {
            let due = SubscriptionDue::parse(&body).expect("a due message");
            lock(&self.0).push((due, delay_secs));
            Ok(())
        }
    }

    #[tokio::test]
    async fn times_come_now_or_as_one_delayed_message_each() {
        let queue = Arc::new(Recorded::default());
        // A clock that stands still: the delays below are exact.
        let clock = Clock::manual(1_800_000_000_000);
        let wakes = QueuedWakes::new(Arc::clone(&queue) as Arc<dyn DelayedQueue>, clock.clone());
        let now = clock.now_ms();
        wakes.wake_at("a", now - 5).await;
        wakes.wake_at("b", now).await;
        wakes.wake_at("a", now).await;
        assert_eq!(wakes.take_now(), ["a", "b"], "due now: looked at in this invocation, once each");
        assert!(wakes.take_now().is_empty());
        assert!(lock(&queue.0).is_empty(), "nothing queued for a time already come");

        wakes.wake_at("c", now + 1_500).await;
        wakes.wake_at("c", now + 1_500).await;
        let sent = lock(&queue.0).clone();
        assert_eq!(sent.len(), 1, "the same time asked twice is one message");
        assert_eq!(sent[0].0, SubscriptionDue { kind: DueKind::SubscriptionDue, id: "c".into(), at_ms: now + 1_500 });
        assert_eq!(sent[0].1, 2, "rounded up to whole seconds");

        wakes.wake_at("c", now + 3_600_000).await;
        assert_eq!(lock(&queue.0).last().map(|s| s.1), Some(900), "capped at SQS's 15 minutes");

        // The message came (early, or its look failed): the same time is
        // queued again when asked for; a cancelled one too.
        wakes.arrived("c", now + 3_600_000);
        wakes.wake_at("c", now + 3_600_000).await;
        assert_eq!(lock(&queue.0).len(), 3);
        wakes.cancel("c").await;
        wakes.wake_at("c", now + 3_600_000).await;
        assert_eq!(lock(&queue.0).len(), 4);
    }

    #[test]
    fn only_due_messages_parse_as_due() {
        assert!(SubscriptionDue::parse(r#"{"kind":"subscription-due","id":"s","atMs":5}"#).is_some());
        let task = r#"{"handler":"h","idempotencyKey":"k","path":"p","incarnation":"i","payload":null}"#;
        assert!(SubscriptionDue::parse(task).is_none(), "a background task is not a subscription's time");
        assert!(SubscriptionDue::parse(r#"{"kind":"processor-revival","id":"s","atMs":5}"#).is_none());
    }
}
