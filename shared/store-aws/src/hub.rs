//! Poll-backed [`StreamHub`]: readers and writers may be different Lambda
//! instances, so a waiter cannot rely on being told. Per stream and process
//! one poller task (shared by every waiter in the process) reads the meta item
//! consistently at an adaptive interval: it starts at `poll.min` and grows by
//! `poll.backoff` per unchanged poll up to `poll.max`, and drops back to
//! `poll.min` after a change (an active stream is likely to change again).
//! A commit in this process wakes local waiters at once through
//! [`StreamHub::publish`], without waiting for a poll.
//!
//! Invariant: a subscription created before a commit observes it. Local
//! commits are published; remote ones are read by a poll that starts after
//! the subscription exists. The poller runs while the stream has subscribers
//! and stops within one interval after the last one is dropped.
//!
//! What an idle reader costs: the poller's reads, shared by every reader of
//! the stream in the process — `60 s / poll.max` consistent `GetItem`s a
//! minute (120 at the default 500 ms, 1 RCU each) for 1 reader or 1,000.
//! A reader's own requests stay off DynamoDB while it waits at the tail:
//! [`HubSubscription::fresh_meta`] hands the core the meta as the first
//! read *begun after the reader subscribed* found it (the poller's next
//! poll, or any consistent read of this process), so its answer is current
//! at a moment inside the request — never a view from before the request,
//! which another process's acknowledged append could already have passed.
//! A re-issued long-poll, an SSE connection's next step and the re-read
//! after a wake all start from it. Each cached meta records which read
//! vouches for it (`CachedMeta::vouched_by`): a read that returned it, or
//! one that returned an older version (so it became current later), which
//! is also how this process's own commits inherit a poll's vouching.
//!
//! The trade-offs: a reader that arrives at the tail waits up to one poll
//! interval before its first answer (data appended meanwhile in another
//! process reaches it then — the same bound as any cross-process wake); a
//! reader whose offset is behind the tail this process last saw reads at
//! once (it has data to fetch, and is not idle). `poll.max` trades wake
//! latency for reads: a commit made in another process is seen here within
//! one interval (p50 ≈ half of it plus a round trip), and halving it doubles
//! the reads. A commit in this process wakes its readers at once.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use ds_core::{HubSubscription, StreamHandle, StreamHub, StreamMeta, TailSignal};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::debug;

use crate::backend::Backend;
use crate::registry::{Freshness, StreamCtx};
use crate::store::fetch_meta;

pub struct PollHub {
    pub(crate) b: Arc<Backend>,
}

impl StreamHub for PollHub {
    fn publish(&self, stream: &StreamHandle, signal: TailSignal) {
        if let Some(ctx) = self.b.registry.find(stream) {
            ctx.signal(signal);
        }
    }

    fn subscribe(&self, stream: &StreamHandle) -> Box<dyn HubSubscription> {
        let ctx = self.b.registry.context_of(stream);
        let rx = ctx.signal.subscribe();
        // Before the poller may start: a read it begins from now on is later.
        let since = ctx.reads_begun();
        {
            let mut running = ctx.poller_running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            ctx.subscribers.fetch_add(1, Ordering::SeqCst);
            if !*running {
                *running = true;
                tokio::spawn(poll_loop(Arc::clone(&self.b), Arc::downgrade(&ctx)));
            }
        }
        // Twice the longest interval plus a slow round trip: past it, the
        // poller is failing or starved, and the reader reads on its own.
        let fresh_within = self.b.cfg.poll.max.saturating_mul(2) + Duration::from_secs(1);
        Box::new(PollSubscription { ctx, rx, last_woken: None, since, fresh_within })
    }
}

struct PollSubscription {
    ctx: Arc<StreamCtx>,
    rx: watch::Receiver<Option<TailSignal>>,
    /// The signal we last woke for when it named another incarnation, so a
    /// stale value cannot wake the same waiter over and over.
    last_woken: Option<TailSignal>,
    /// The context's read count when this subscription was made: only a
    /// read numbered above it may answer [`HubSubscription::fresh_meta`].
    since: u64,
    /// How long `fresh_meta` waits for such a read before giving up.
    fresh_within: Duration,
}

impl Drop for PollSubscription {
    fn drop(&mut self) {
        self.ctx.subscribers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether `cur` shows something `seen` does not ([`TailSignal::is_news_to`]);
/// a signal of another incarnation wakes a waiter once, not on every look
/// (a poll keeps reporting it until the reader re-reads and moves on).
fn is_news(cur: &TailSignal, seen: &TailSignal, last_woken: Option<&TailSignal>) -> bool {
    cur.is_news_to(seen) && (cur.incarnation == seen.incarnation || last_woken != Some(cur))
}

#[async_trait]
impl HubSubscription for PollSubscription {
    async fn changed(&mut self, seen: &TailSignal, deadline: Instant) -> bool {
        loop {
            let current = self.rx.borrow_and_update().clone();
            if let Some(cur) = current {
                if is_news(&cur, seen, self.last_woken.as_ref()) {
                    self.last_woken = Some(cur);
                    return true;
                }
            }
            tokio::select! {
                r = self.rx.changed() => {
                    if r.is_err() {
                        return true; // sender gone: let the caller re-read
                    }
                }
                () = tokio::time::sleep_until(deadline) => return false,
            }
        }
    }

    /// See the module docs. Waits only when the reader is at (or past) the
    /// tail this process last saw; never longer than `fresh_within`.
    async fn fresh_meta(&mut self, at: Option<u64>) -> Option<StreamMeta> {
        let mut moves = self.ctx.watch_cache();
        let give_up = Instant::now() + self.fresh_within;
        loop {
            match self.ctx.fresh_since(self.since) {
                Freshness::Current(meta) => return Some(*meta),
                Freshness::Absent => return None,
                Freshness::Older { tail: Some(tail) } if at.is_some_and(|at| at < tail) => return None,
                Freshness::Older { .. } => {}
            }
            tokio::select! {
                r = moves.changed() => {
                    if r.is_err() {
                        return None;
                    }
                }
                () = tokio::time::sleep_until(give_up) => return None,
            }
        }
    }
}

fn next_interval(cur: Duration, max: Duration, factor: f64) -> Duration {
    cur.mul_f64(factor.max(1.0)).min(max)
}

/// One poller per stream per process (see the module docs). It holds the
/// context weakly, so it never keeps an unused context alive.
async fn poll_loop(b: Arc<Backend>, weak: Weak<StreamCtx>) {
    let cfg = b.cfg.poll.clone();
    let mut interval = cfg.min;
    loop {
        tokio::time::sleep(interval).await;
        let Some(ctx) = weak.upgrade() else { return };
        {
            let mut running = ctx.poller_running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if ctx.subscribers.load(Ordering::SeqCst) == 0 {
                *running = false;
                debug!(path = %ctx.path, "poller stopped");
                return;
            }
        }
        let before = ctx.signal.borrow().clone();
        let signal = match fetch_meta(&b, &ctx).await {
            Ok(Some(meta)) => Some(TailSignal::of(&meta)),
            Ok(None) => Some(TailSignal {
                incarnation: before.as_ref().map(|s| s.incarnation.clone()).unwrap_or_default(),
                tail: before.as_ref().map_or(0, |s| s.tail),
                closed: before.as_ref().is_some_and(|s| s.closed),
                deleted: true,
            }),
            Err(e) => {
                debug!(path = %ctx.path, error = %e, "poll failed; backing off");
                None
            }
        };
        match signal {
            Some(sig) if before.as_ref() != Some(&sig) => {
                ctx.signal(sig);
                interval = cfg.min;
            }
            _ => interval = next_interval(interval, cfg.max, cfg.backoff),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(inc: &str, tail: u64, closed: bool, deleted: bool) -> TailSignal {
        TailSignal { incarnation: inc.into(), tail, closed, deleted }
    }

    #[test]
    fn only_progress_is_news() {
        let seen = sig("a", 10, false, false);
        assert!(is_news(&sig("a", 11, false, false), &seen, None));
        assert!(is_news(&sig("a", 10, true, false), &seen, None));
        assert!(is_news(&sig("a", 10, false, true), &seen, None));
        assert!(!is_news(&sig("a", 10, false, false), &seen, None));
        assert!(!is_news(&sig("a", 9, false, false), &seen, None), "a lagging poll is not news");
        let other = sig("b", 0, false, false);
        assert!(is_news(&other, &seen, None));
        assert!(!is_news(&other, &seen, Some(&other)), "the same foreign value wakes once");
    }

    #[test]
    fn interval_grows_to_the_bound() {
        let max = Duration::from_millis(500);
        let mut d = Duration::from_millis(20);
        for _ in 0..50 {
            d = next_interval(d, max, 1.5);
        }
        assert_eq!(d, max);
    }
}
