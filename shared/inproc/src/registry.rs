//! [`InProcRegistry`]: the per-stream context map shared by the in-process
//! mutex and hub (portable-architecture §5, "RcMap per key").
//!
//! A [`StreamContext`] holds one stream's lock and wake-up channel. The map
//! holds every context strongly and evicts the unused ones (held by nothing
//! but the map) in a sweep when it outgrows its bound. Why keep unused ones
//! at all: a stream nobody else holds (every request to a stream with one
//! writer) would otherwise build its context and tear it down again on each
//! request: two allocations, two frees and three hashes of the path, 9% of a
//! 100 B append's instructions (callgrind, memory store). The bound keeps
//! what is kept small: at most [`RETAINED`] unused contexts, or as many as
//! were in use at the last sweep; never the streams ever seen.
//!
//! Identity invariant: while anyone holds a context for `path`, every caller
//! asking for `path` gets that same context — which is what makes the lock
//! exclusive and the no-missed-wake-up rule of the hub hold. It holds
//! because a context leaves the map only while the map is its sole owner,
//! under the map lock: nobody can be holding it, and nobody can get it
//! again without the map.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use ds_core::{Release, StreamHandle, StreamRegistry, TailSignal};
use tokio::sync::watch;

/// Unused contexts the map may keep before a sweep (each well under 200
/// bytes without a live reader's channel): enough for the streams of a busy
/// process's recent requests, small next to the streams themselves.
pub(crate) const RETAINED: usize = 1024;

/// One stream's in-process state.
pub(crate) struct StreamContext {
    /// Shared with the map key and the handles: one allocation per context.
    path: Arc<str>,
    /// The registry that made it (a handle of another substrate instance in
    /// the same process must not reach this one's lock).
    owner: u64,
    /// The critical-section lock ([`crate::InProcMutex`]): one permit, in
    /// the context itself (no allocation of its own), released through
    /// [`Release`] by the guard that holds the context. Never closed.
    pub(crate) lock: tokio::sync::Semaphore,
    /// Latest published signal, merged per incarnation ([`crate::InProcHub`]);
    /// created by the first live reader. Why lazily: most streams are never
    /// read live, and a `watch` channel is an allocation of eight `Notify`s
    /// that every publish to it would touch.
    pub(crate) signal: OnceLock<watch::Sender<Option<TailSignal>>>,
}

impl Release for StreamContext {
    fn release(&self) {
        self.lock.add_permits(1);
    }
}

struct ContextMap {
    contexts: HashMap<Arc<str>, Arc<StreamContext>>,
    /// Size at which the next insert sweeps out the unused contexts:
    /// [`RETAINED`] more than were in use after the last sweep, so a sweep
    /// (a pass over the map) comes at most once per [`RETAINED`] inserts.
    sweep_at: usize,
}

impl Default for ContextMap {
    fn default() -> Self {
        Self { contexts: HashMap::new(), sweep_at: RETAINED }
    }
}

impl ContextMap {
    /// Drop every context the map alone holds.
    fn sweep(&mut self) {
        self.contexts.retain(|_, ctx| Arc::strong_count(ctx) > 1);
        self.sweep_at = self.contexts.len() + RETAINED;
    }
}

/// The in-process [`StreamRegistry`]; share one per substrate instance between
/// its [`crate::InProcMutex`] and [`crate::InProcHub`].
pub struct InProcRegistry {
    id: u64,
    map: Mutex<ContextMap>,
}

impl Default for InProcRegistry {
    fn default() -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        Self { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), map: Mutex::default() }
    }
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

    /// The context for `path`, created if the map has none.
    pub(crate) fn context(&self, path: &str) -> Arc<StreamContext> {
        let mut map = lock_map(&self.map);
        if let Some(ctx) = map.contexts.get(path) {
            return Arc::clone(ctx);
        }
        if map.contexts.len() >= map.sweep_at {
            map.sweep();
        }
        let path: Arc<str> = Arc::from(path);
        let ctx = Arc::new(StreamContext {
            path: Arc::clone(&path),
            owner: self.id,
            lock: tokio::sync::Semaphore::new(1),
            signal: OnceLock::new(),
        });
        map.contexts.insert(path, Arc::clone(&ctx));
        ctx
    }

    /// The context for `path`, if the map has one (never creates).
    pub(crate) fn existing(&self, path: &str) -> Option<Arc<StreamContext>> {
        lock_map(&self.map).contexts.get(path).cloned()
    }

    /// The context a handle carries, if it is one of this registry's;
    /// otherwise (a detached handle, or another registry's) the context for
    /// its path.
    pub(crate) fn context_of(&self, stream: &StreamHandle) -> Arc<StreamContext> {
        self.carried(stream).unwrap_or_else(|| self.context(stream.path()))
    }

    /// The context a handle carries, if it is one of this registry's.
    pub(crate) fn carried(&self, stream: &StreamHandle) -> Option<Arc<StreamContext>> {
        stream.context::<StreamContext>().filter(|ctx| ctx.owner == self.id)
    }

    /// Contexts the map holds, used or not (for tests of the bound).
    #[cfg(test)]
    fn held(&self) -> usize {
        lock_map(&self.map).contexts.len()
    }
}

impl StreamRegistry for InProcRegistry {
    fn enter(&self, path: &str) -> StreamHandle {
        let ctx = self.context(path);
        StreamHandle::with_path(Arc::clone(&ctx.path), ctx)
    }

    /// Contexts in use: held by a handle, a lock guard or waiter, or a
    /// subscription. Unused ones the map keeps (see the module docs) hold
    /// nothing but their path and an idle lock, and are not counted.
    fn live_contexts(&self) -> usize {
        let mut map = lock_map(&self.map);
        map.sweep();
        map.contexts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_are_shared_while_held_and_not_counted_after() {
        let registry = InProcRegistry::new();
        let a = registry.enter("a");
        let a2 = registry.enter("a");
        let _b = registry.enter("b");
        assert_eq!(registry.live_contexts(), 2);
        drop(a);
        assert_eq!(registry.live_contexts(), 2, "a second lease keeps 'a' alive");
        drop(a2);
        assert_eq!(registry.live_contexts(), 1);
        assert!(registry.existing("a").is_none(), "counting swept the unused one out");
        assert_eq!(registry.held(), 1);
    }

    #[test]
    fn an_unused_context_is_kept_and_given_out_again() {
        let registry = InProcRegistry::new();
        let first = registry.context("a");
        let ptr = Arc::as_ptr(&first);
        drop(first);
        let again = registry.context("a");
        assert!(std::ptr::eq(ptr, Arc::as_ptr(&again)), "no new context for the next request");
    }

    /// A process touching many streams one at a time keeps at most
    /// `RETAINED` unused contexts, and never drops one in use.
    #[test]
    fn the_map_stays_bounded_by_the_contexts_in_use() {
        let registry = InProcRegistry::new();
        let held: Vec<_> = (0..3 * RETAINED).map(|i| registry.enter(&format!("held-{i}"))).collect();
        for i in 0..10 * RETAINED {
            drop(registry.enter(&format!("passing-{i}")));
            assert!(registry.held() <= held.len() + RETAINED, "{} contexts after {i} requests", registry.held());
        }
        for h in &held {
            let ctx = registry.existing(h.path()).expect("a held context is never swept");
            assert!(Arc::ptr_eq(&ctx, &registry.context_of(h)));
        }
        drop(held);
        for i in 0..RETAINED + 1 {
            drop(registry.enter(&format!("after-{i}")));
        }
        assert!(registry.held() <= 2 * RETAINED, "unused contexts of the held streams went too");
        assert_eq!(registry.live_contexts(), 0);
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
        assert!(registry.carried(&StreamHandle::detached("a")).is_none());
        assert!(other.carried(&a).is_none());
    }
}
