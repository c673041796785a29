//! [`InProcHub`]: wakes a stream's live readers in this process.
//!
//! Each stream context holds a `watch` channel whose value is the latest
//! published [`TailSignal`], merged per incarnation (tail = max, closed and
//! deleted sticky) so out-of-order publishes from concurrent writers never
//! move it backwards.
//!
//! No-missed-wake-up invariant: a subscription holds the stream's context, so
//! every later `publish` for that path reaches the very channel it watches, and
//! `watch` remembers an unseen publish until `changed` looks at it. The
//! channel is created by the first subscription (a publish with no channel has
//! no reader to wake and skips it): a reader creates it before it reads the
//! store, so a commit its read missed publishes after the channel exists.

use std::sync::Arc;

use async_trait::async_trait;
use ds_core::{HubSubscription, StreamHandle, StreamHub, TailSignal};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::registry::{InProcRegistry, StreamContext};

/// In-process [`StreamHub`].
pub struct InProcHub {
    registry: Arc<InProcRegistry>,
}

impl InProcHub {
    pub fn new(registry: Arc<InProcRegistry>) -> Self {
        Self { registry }
    }
}

impl StreamHub for InProcHub {
    fn publish(&self, stream: &StreamHandle, signal: TailSignal) {
        // No context, or a context no reader ever subscribed to (no
        // channel): nobody to wake.
        let Some(ctx) = self.registry.carried(stream).or_else(|| self.registry.existing(stream.path())) else {
            return;
        };
        let Some(signal_tx) = ctx.signal.get() else {
            return;
        };
        // With no receiver, keep the value but skip the version bump and the
        // wake-up (eight `Notify` locks in tokio's watch, shared by every
        // writer of the stream). No wake-up is lost: a reader subscribes,
        // then reads the store; if its read missed this commit, its
        // subscription (and the channel's creation) preceded the commit
        // (ordered by the store's lock, which the commit released before this
        // publish), so it is counted.
        let waiting = signal_tx.receiver_count() > 0;
        signal_tx.send_if_modified(|current| {
            merge(current, signal);
            waiting
        });
    }

    fn subscribe(&self, stream: &StreamHandle) -> Box<dyn HubSubscription> {
        let ctx = self.registry.context_of(stream);
        // A new receiver has seen the current value: only later publishes wake it.
        let rx = ctx.signal.get_or_init(|| watch::Sender::new(None)).subscribe();
        Box::new(InProcSubscription { rx, _ctx: ctx })
    }
}

fn merge(current: &mut Option<TailSignal>, new: TailSignal) {
    match current {
        Some(cur) if cur.incarnation == new.incarnation => {
            cur.tail = cur.tail.max(new.tail);
            cur.closed |= new.closed;
            cur.deleted |= new.deleted;
        }
        _ => *current = Some(new),
    }
}

struct InProcSubscription {
    rx: watch::Receiver<Option<TailSignal>>,
    /// Keeps the context (and so the channel `rx` watches) registered.
    _ctx: Arc<StreamContext>,
}

#[async_trait]
impl HubSubscription for InProcSubscription {
    async fn changed(&mut self, seen: &TailSignal, deadline: Instant) -> bool {
        loop {
            match tokio::time::timeout_at(deadline, self.rx.changed()).await {
                Ok(Ok(())) => {
                    // A publish the reader already observed (it re-read the
                    // store after it) is not a reason to wake it again.
                    if self.rx.borrow_and_update().as_ref().is_some_and(|s| s.is_news_to(seen)) {
                        return true;
                    }
                }
                // The sender lives in the context we hold, so it cannot close;
                // if it somehow did, waiting out the deadline is still correct.
                Ok(Err(_)) => {
                    tokio::time::sleep_until(deadline).await;
                    return false;
                }
                Err(_elapsed) => return false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ds_core::StreamRegistry;

    fn sig(inc: &str, tail: u64) -> TailSignal {
        TailSignal { incarnation: inc.into(), tail, closed: false, deleted: false }
    }

    #[test]
    fn merge_never_moves_tail_backwards_within_an_incarnation() {
        let mut cur = Some(sig("a", 20));
        merge(&mut cur, sig("a", 10));
        assert_eq!(cur.as_ref().map(|s| s.tail), Some(20));
        merge(&mut cur, sig("b", 5));
        assert_eq!(cur, Some(sig("b", 5)));
    }

    #[tokio::test]
    async fn a_publish_before_any_reader_builds_no_channel_and_the_next_reader_is_woken() {
        let registry = Arc::new(InProcRegistry::new());
        let hub = InProcHub::new(Arc::clone(&registry));
        let held = registry.enter("p");
        hub.publish(&StreamHandle::detached("p"), sig("a", 5));
        let ctx = registry.existing("p").unwrap();
        assert!(ctx.signal.get().is_none(), "no reader, no channel");
        let mut sub = hub.subscribe(&held);
        hub.publish(&StreamHandle::detached("p"), sig("a", 9));
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        assert!(sub.changed(&sig("a", 5), deadline).await);
    }

    #[tokio::test]
    async fn a_publish_while_the_reader_is_away_is_kept_for_its_next_look() {
        // A reader subscribed once (the channel exists) and stopped watching;
        // the writer keeps the merged value without waking anyone, and a
        // reader that subscribes again is woken by the next news only.
        let registry = Arc::new(InProcRegistry::new());
        let hub = InProcHub::new(Arc::clone(&registry));
        let held = registry.enter("p");
        drop(hub.subscribe(&held));
        hub.publish(&StreamHandle::detached("p"), sig("a", 5));
        let ctx = registry.existing("p").unwrap();
        assert_eq!(ctx.signal.get().map(|tx| tx.borrow().clone()), Some(Some(sig("a", 5))));
        let mut sub = hub.subscribe(&held);
        let soon = Instant::now() + std::time::Duration::from_millis(50);
        assert!(!sub.changed(&sig("a", 5), soon).await, "nothing new since it subscribed");
        hub.publish(&StreamHandle::detached("p"), sig("a", 7));
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        assert!(sub.changed(&sig("a", 5), deadline).await);
    }

    /// The writer's handle leads to the reader's channel: its own context
    /// when it is this registry's, else the context found by its path.
    #[tokio::test]
    async fn a_publish_reaches_the_reader_through_any_handle_of_the_stream() {
        let registry = Arc::new(InProcRegistry::new());
        let hub = InProcHub::new(Arc::clone(&registry));
        let mut sub = hub.subscribe(&registry.enter("p"));
        let deadline = || Instant::now() + std::time::Duration::from_secs(5);
        hub.publish(&registry.enter("p"), sig("a", 1));
        assert!(sub.changed(&sig("a", 0), deadline()).await, "the writer's own handle");
        hub.publish(&InProcRegistry::new().enter("p"), sig("a", 2));
        assert!(sub.changed(&sig("a", 1), deadline()).await, "another registry's handle, by path");
        hub.publish(&registry.enter("q"), sig("a", 3));
        let soon = Instant::now() + std::time::Duration::from_millis(50);
        assert!(!sub.changed(&sig("a", 2), soon).await, "another stream's publish");
    }

    #[tokio::test]
    async fn stale_publish_does_not_wake_a_reader_that_saw_more() {
        let hub = InProcHub::new(Arc::new(InProcRegistry::new()));
        let mut sub = hub.subscribe(&StreamHandle::detached("p"));
        hub.publish(&StreamHandle::detached("p"), sig("a", 5));
        let deadline = Instant::now() + std::time::Duration::from_millis(50);
        assert!(!sub.changed(&sig("a", 5), deadline).await);
    }
}
