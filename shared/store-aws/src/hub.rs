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

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use ds_core::{HubSubscription, StreamHandle, StreamHub, TailSignal};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::debug;

use crate::backend::Backend;
use crate::registry::StreamCtx;
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
        {
            let mut running = ctx.poller_running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            ctx.subscribers.fetch_add(1, Ordering::SeqCst);
            if !*running {
                *running = true;
                tokio::spawn(poll_loop(Arc::clone(&self.b), Arc::downgrade(&ctx)));
            }
        }
        Box::new(PollSubscription { ctx, rx, last_woken: None })
    }
}

struct PollSubscription {
    ctx: Arc<StreamCtx>,
    rx: watch::Receiver<Option<TailSignal>>,
    /// The signal we last woke for when it named another incarnation, so a
    /// stale value cannot wake the same waiter over and over.
    last_woken: Option<TailSignal>,
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
