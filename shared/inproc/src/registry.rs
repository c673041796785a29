//! [`InProcRegistry`]: the per-stream context map shared by the in-process
//! mutex and hub (portable-architecture §5, "RcMap per key").
//!
//! A [`StreamContext`] holds one stream's lock and wake-up channel. The map
//! stores only `Weak` references: a context lives exactly as long as someone
//! holds it (a [`StreamHandle`], a lock guard or waiter, a hub subscription) and removes
//! its own map entry when the last holder drops it. So the number of live
//! contexts is bounded by the streams in use, never by the streams ever seen.
//!
//! Identity invariant: while anyone holds a context for `path`, every caller
//! asking for `path` gets that same context — which is what makes the lock
//! exclusive and the no-missed-wake-up rule of the hub hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use ds_core::{Release, StreamHandle, StreamRegistry, TailSignal};
use tokio::sync::watch;

type ContextMap = HashMap<Arc<str>, Weak<StreamContext>>;

/// One stream's in-process state.
pub(crate) struct StreamContext {
    /// Shared with the map key and the handles: one allocation per context
    /// (a context is created and dropped per request on an idle stream).
    path: Arc<str>,
    map: Weak<Mutex<ContextMap>>,
    /// The critical-section lock ([`crate::InProcMutex`]): one permit, in
    /// the context itself (no allocation of its own), released through
    /// [`Release`] by the guard that holds the context. Never closed.
    pub(crate) lock: tokio::sync::Semaphore,
    /// Latest published signal, merged per incarnation ([`crate::InProcHub`]);
    /// created by the first live reader. Why lazily: a context is built and
    /// dropped per request on a stream nobody reads live, and a `watch`
    /// channel is an allocation of eight `Notify`s that its sender's drop
    /// notifies one by one: 2.3% of a 100 B append's instructions (callgrind,
    /// memory store: 35,343 → 34,536) for a channel no one would ever watch.
    pub(crate) signal: OnceLock<watch::Sender<Option<TailSignal>>>,
}

impl Drop for StreamContext {
    fn drop(&mut self) {
        let Some(map) = self.map.upgrade() else {
            return;
        };
        let mut map = lock_map(&map);
        // Another context for the same path may already have replaced ours
        // (created after our last strong reference went away): keep that one.
        // Removed, then put back in that rare case: one lookup, not two.
        if let Some((path, entry)) = map.remove_entry(&*self.path) {
            if entry.strong_count() > 0 {
                map.insert(path, entry);
            }
        }
    }
}

impl Release for StreamContext {
    fn release(&self) {
        self.lock.add_permits(1);
    }
}

/// The in-process [`StreamRegistry`]; share one per substrate instance between
/// its [`crate::InProcMutex`] and [`crate::InProcHub`].
#[derive(Default)]
pub struct InProcRegistry {
    map: Arc<Mutex<ContextMap>>,
}

// Nothing panics while the map lock is held except on allocation failure, and
// the map is valid after any single insert/remove, so a poisoned lock is safe
// to recover.
fn lock_map(map: &Mutex<ContextMap>) -> MutexGuard<'_, ContextMap> {
    map.lock().unwrap_or_else(PoisonError::into_inner)
}

impl InProcRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// The live context for `path`, created if none is live.
    pub(crate) fn context(&self, path: &str) -> Arc<StreamContext> {
        let mut map = lock_map(&self.map);
        if let Some(ctx) = map.get(path).and_then(Weak::upgrade) {
            return ctx;
        }
        let path: Arc<str> = Arc::from(path);
        let ctx = Arc::new(StreamContext {
            path: Arc::clone(&path),
            map: Arc::downgrade(&self.map),
            lock: tokio::sync::Semaphore::new(1),
            signal: OnceLock::new(),
        });
        map.insert(path, Arc::downgrade(&ctx));
        ctx
    }

    /// The live context for `path`, if someone holds one (never creates).
    pub(crate) fn existing(&self, path: &str) -> Option<Arc<StreamContext>> {
        lock_map(&self.map).get(path).and_then(Weak::upgrade)
    }

    /// The context a handle carries, if it is one of this registry's;
    /// otherwise (a detached handle, or another registry's) the live context
    /// for its path.
    pub(crate) fn context_of(&self, stream: &StreamHandle) -> Arc<StreamContext> {
        match stream.context::<StreamContext>() {
            Some(ctx) if std::ptr::eq(ctx.map.as_ptr(), Arc::as_ptr(&self.map)) => ctx,
            _ => self.context(stream.path()),
        }
    }
}

impl StreamRegistry for InProcRegistry {
    fn enter(&self, path: &str) -> StreamHandle {
        let ctx = self.context(path);
        StreamHandle::with_path(Arc::clone(&ctx.path), ctx)
    }

    fn live_contexts(&self) -> usize {
        lock_map(&self.map).values().filter(|w| w.strong_count() > 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_are_shared_while_held_and_evicted_after() {
        let registry = InProcRegistry::new();
        let a = registry.enter("a");
        let a2 = registry.enter("a");
        let _b = registry.enter("b");
        assert_eq!(registry.live_contexts(), 2);
        drop(a);
        assert_eq!(registry.live_contexts(), 2, "a second lease keeps 'a' alive");
        drop(a2);
        assert_eq!(registry.live_contexts(), 1);
        assert!(registry.existing("a").is_none());
        assert_eq!(lock_map(&registry.map).len(), 1, "evicted entries leave the map");
    }

    #[test]
    fn a_dropped_context_leaves_the_one_that_replaced_it() {
        let registry = InProcRegistry::new();
        let old = registry.context("a");
        // What a caller does between `old`'s last reference going and its
        // drop taking the map lock: a new context for the path, in the map.
        let new = Arc::new(StreamContext {
            path: Arc::from("a"),
            map: Arc::downgrade(&registry.map),
            lock: tokio::sync::Semaphore::new(1),
            signal: OnceLock::new(),
        });
        lock_map(&registry.map).insert(Arc::from("a"), Arc::downgrade(&new));
        drop(old);
        let found = registry.existing("a").expect("a context for the path");
        assert!(Arc::ptr_eq(&found, &new), "the replacement stays in the map");
        drop((found, new));
        assert_eq!(lock_map(&registry.map).len(), 0, "and leaves it when dropped in turn");
    }

    #[test]
    fn handles_reach_their_context_without_a_lookup_but_only_in_their_registry() {
        let registry = InProcRegistry::new();
        let other = InProcRegistry::new();
        let a = registry.enter("a");
        let mine = registry.context_of(&a);
        assert!(Arc::ptr_eq(&mine, &registry.context("a")));
        let theirs = other.context_of(&a);
        assert!(!Arc::ptr_eq(&mine, &theirs), "another registry's handle is looked up by path");
        let detached = registry.context_of(&StreamHandle::detached("a"));
        assert!(Arc::ptr_eq(&mine, &detached));
    }
}
