//! The wake state machine (§7), as pure transitions of a
//! [`SubscriptionRecord`] given the linked streams' current tails and the
//! time. No I/O: the engine reads, calls one of these, and writes the result
//! under the record's revision.
//!
//! A subscription is idle (no wake), or has a wake in flight: issued (its
//! notification not yet delivered), delivered, and for pull-wake possibly
//! claimed by a worker holding a lease. Pending work on an idle subscription
//! issues a new wake (`generation + 1`) unless a retry is scheduled for later.

use crate::config::Kind;
use crate::error::{SubResult, SubscriptionError};
use crate::record::{SubscriptionRecord, Tails, Wake};

/// First retry delay after a failed delivery (§7.1: 1 s).
pub const RETRY_BASE_MS: i64 = 1_000;
/// Longest retry delay (§7.1: 60 s).
pub const RETRY_MAX_MS: i64 = 60_000;
/// Jitter around each retry delay (§7.1: 20%).
pub const RETRY_JITTER: f64 = 0.2;

/// What a transition may need that is random: the id of a wake it issues,
/// and the jitter of a retry it schedules (uniform in `[0, 1)`).
#[derive(Debug, Clone)]
pub struct Entropy {
    pub wake_id: String,
    pub jitter: f64,
}

impl Entropy {
    /// A fresh wake id, and a jitter drawn from `random` (the service's).
    pub fn fresh(random: &ds_core::Random) -> Self {
        let wake_id = format!("w_{}", uuid::Uuid::new_v4().simple());
        Self { wake_id, jitter: random.unit() }
    }
}

/// Delay before retry number `attempts` (1 for the first failure): doubling
/// from 1 s, capped at 60 s, then ±20% by `jitter`.
pub fn backoff_ms(attempts: u32, jitter: f64) -> i64 {
    let doubling = 1i64 << attempts.saturating_sub(1).min(16);
    let base = RETRY_BASE_MS.saturating_mul(doubling).min(RETRY_MAX_MS) as f64;
    let factor = 1.0 - RETRY_JITTER + 2.0 * RETRY_JITTER * jitter.clamp(0.0, 1.0);
    (base * factor).round() as i64
}

/// Clears a wake whose lease has ended (§7.3: holder and token go with it).
fn expire_lease(rec: &mut SubscriptionRecord, now: i64) {
    if rec.wake.as_ref().and_then(|w| w.lease_until_ms).is_some_and(|until| until <= now) {
        rec.wake = None;
    }
}

fn new_wake(rec: &mut SubscriptionRecord, streams: Vec<(String, u64)>, now: i64, e: &Entropy) {
    rec.generation += 1;
    let lease_until_ms = (rec.kind() == Kind::Webhook).then(|| now + rec.config.lease_ttl_ms as i64);
    rec.wake = Some(Wake {
        wake_id: e.wake_id.clone(),
        generation: rec.generation,
        issued_at_ms: now,
        streams,
        delivered: false,
        holder: None,
        lease_until_ms,
    });
}

/// Advance time: end an expired lease, then issue a wake for pending work
/// (unless one is in flight or a retry is scheduled later). Returns whether
/// a wake was issued.
pub fn tick(rec: &mut SubscriptionRecord, tails: &Tails, now: i64, e: &Entropy) -> bool {
    if rec.is_deleted() {
        return false;
    }
    expire_lease(rec, now);
    if rec.wake.is_some() {
        return false;
    }
    let pending = rec.pending(tails);
    if pending.is_empty() {
        // Nothing left to deliver: no retry is owed any more.
        rec.retry = Default::default();
        return false;
    }
    if rec.retry.next_attempt_at_ms.is_some_and(|at| at > now) {
        return false;
    }
    rec.retry.next_attempt_at_ms = None;
    new_wake(rec, pending, now, e);
    true
}

/// When the engine must look at this subscription again, if ever: now for
/// an undelivered wake, at the lease's end, or at the scheduled retry.
pub fn next_due(rec: &SubscriptionRecord, now: i64) -> Option<i64> {
    if rec.is_deleted() {
        return None;
    }
    match &rec.wake {
        Some(w) if !w.delivered => Some(now),
        Some(w) => w.lease_until_ms,
        None => rec.retry.next_attempt_at_ms,
    }
}

/// How a delivery attempt went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The webhook answered 2xx with `{"done": true}`.
    Done,
    /// The webhook answered 2xx otherwise, or the wake event was appended.
    Accepted,
    /// No 2xx answer (or the wake stream refused the event).
    Failed,
}

/// Apply the outcome of delivering wake `wake_id`; a wake that is no longer
/// current (a callback finished it meanwhile, its lease ended) is left alone.
pub fn delivered(
    rec: &mut SubscriptionRecord,
    wake_id: &str,
    outcome: Delivery,
    tails: &Tails,
    now: i64,
    e: &Entropy,
) -> bool {
    let Some(wake) = rec.wake.as_mut().filter(|w| w.wake_id == wake_id) else { return false };
    match outcome {
        Delivery::Accepted => {
            wake.delivered = true;
            rec.retry = Default::default();
        }
        Delivery::Done => {
            let snapshot = std::mem::take(&mut wake.streams);
            rec.wake = None;
            rec.retry = Default::default();
            apply_acks(rec, tails, &snapshot);
        }
        Delivery::Failed => {
            rec.wake = None;
            rec.retry.attempts = rec.retry.attempts.saturating_add(1);
            rec.retry.next_attempt_at_ms = Some(now + backoff_ms(rec.retry.attempts, e.jitter));
        }
    }
    tick(rec, tails, now, e)
}

/// Move cursors forward (never back) to the given positions of the
/// streams' current incarnations.
fn apply_acks(rec: &mut SubscriptionRecord, tails: &Tails, acks: &[(String, u64)]) {
    for (path, position) in acks {
        let (Some(link), Some(Some(t))) = (rec.links.get_mut(path), tails.get(path)) else { continue };
        let current = link.acked_for(&t.incarnation);
        link.acked = current.max(*position);
        link.incarnation = Some(t.incarnation.to_string());
    }
}

/// A pull-wake claim by `worker` (§7.2): takes the wake in flight, or issues
/// one, and starts the lease.
pub fn claim(rec: &mut SubscriptionRecord, tails: &Tails, worker: &str, now: i64, e: &Entropy) -> SubResult<()> {
    if rec.kind() != Kind::PullWake {
        return Err(SubscriptionError::WrongKind("claim is for pull-wake subscriptions"));
    }
    expire_lease(rec, now);
    if let Some(w) = &rec.wake {
        if let Some(holder) = &w.holder {
            return Err(SubscriptionError::AlreadyClaimed { holder: holder.clone(), generation: w.generation });
        }
    }
    let pending = rec.pending(tails);
    match rec.wake.as_mut() {
        Some(w) => w.streams = pending,
        None => new_wake(rec, pending, now, e),
    }
    let lease_until = now + rec.config.lease_ttl_ms as i64;
    if let Some(w) = rec.wake.as_mut() {
        w.holder = Some(worker.to_owned());
        w.lease_until_ms = Some(lease_until);
        // A claimed wake needs no wake event any more.
        w.delivered = true;
    }
    rec.retry = Default::default();
    Ok(())
}

/// The wake a callback, ack or release names, checked against the current
/// one (§7.3); pull-wake requests must come from the lease holder's claim.
pub fn current_wake<'a>(rec: &'a SubscriptionRecord, wake_id: &str, generation: u64, now: i64) -> SubResult<&'a Wake> {
    let wake = rec.wake.as_ref().ok_or(SubscriptionError::Fenced)?;
    if wake.wake_id != wake_id || wake.generation != generation {
        return Err(SubscriptionError::Fenced);
    }
    if wake.lease_until_ms.is_some_and(|until| until <= now) {
        return Err(SubscriptionError::Fenced);
    }
    if rec.kind() == Kind::PullWake && wake.holder.is_none() {
        return Err(SubscriptionError::Fenced);
    }
    Ok(wake)
}

/// Callback (webhook) or ack (pull-wake) of the current wake: acks move
/// cursors; `done` ends the wake (and wakes again if work remains), else the
/// lease is extended. Returns `next_wake`.
pub fn ack(
    rec: &mut SubscriptionRecord,
    tails: &Tails,
    acks: &[(String, u64)],
    done: bool,
    now: i64,
    e: &Entropy,
) -> SubResult<bool> {
    for (path, position) in acks {
        if !rec.links.contains_key(path) {
            return Err(SubscriptionError::Invalid(format!("ack for {path:?}, which this subscription does not link")));
        }
        let tail = tails.get(path).and_then(Option::as_ref).map_or(0, |t| t.tail);
        if *position > tail {
            return Err(SubscriptionError::Invalid(format!("ack offset for {path:?} is beyond the stream's tail")));
        }
    }
    apply_acks(rec, tails, acks);
    if done {
        rec.wake = None;
        return Ok(tick(rec, tails, now, e));
    }
    let lease_until = now + rec.config.lease_ttl_ms as i64;
    if let Some(w) = rec.wake.as_mut() {
        w.lease_until_ms = Some(lease_until);
    }
    Ok(false)
}

/// Release without acking (§7.2): ends the wake; work that remains is woken
/// again.
pub fn release(rec: &mut SubscriptionRecord, tails: &Tails, now: i64, e: &Entropy) -> bool {
    rec.wake = None;
    tick(rec, tails, now, e)
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
