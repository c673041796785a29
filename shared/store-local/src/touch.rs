//! The in-memory overlay that makes `touch` cheap.
//!
//! `touch` runs on every read (sliding TTL), so it must not cost a disk sync.
//! It records the access here; reads merge the overlay into the stored meta,
//! so within the process the sliding TTL is exact. The writer flushes the
//! overlay to disk about once per [`FLUSH_EVERY`](crate::writer) (piggybacked
//! on a commit batch, or on its own when idle); a crash loses at most that
//! window of touches, which only shortens a stream's lifetime by that much.
//!
//! Ordering invariant for readers: take the pending touch *before* looking in
//! the store's overlay and tables. An entry is only forgotten after the flush
//! that wrote it is durable and merged into the overlay, so a reader either
//! still sees the entry or reads the flushed meta — never neither.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use ds_core::StreamMeta;

/// A pending access: the latest `touched_at_ms` for one stream incarnation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Touch {
    pub incarnation: String,
    pub at_ms: i64,
}

impl Touch {
    /// Merge into a meta read from disk (same incarnation only, never backwards).
    pub(crate) fn apply_to(&self, meta: &mut StreamMeta) {
        if *meta.incarnation == *self.incarnation && meta.touched_at_ms < self.at_ms {
            meta.touched_at_ms = self.at_ms;
        }
    }
}

#[derive(Default)]
pub(crate) struct TouchOverlay {
    pending: Mutex<HashMap<String, Touch>>,
}

impl TouchOverlay {
    // Every critical section leaves the map valid: a poisoned lock is recoverable.
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Touch>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn record(&self, path: &str, incarnation: &str, at_ms: i64) {
        let mut pending = self.lock();
        match pending.get_mut(path) {
            Some(t) if t.incarnation == incarnation => t.at_ms = t.at_ms.max(at_ms),
            _ => {
                pending.insert(path.to_owned(), Touch { incarnation: incarnation.to_owned(), at_ms });
            }
        }
    }

    pub(crate) fn get(&self, path: &str) -> Option<Touch> {
        self.lock().get(path).cloned()
    }

    /// Every pending touch (for a reader merging a listing).
    pub(crate) fn all(&self) -> HashMap<String, Touch> {
        self.lock().clone()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// What a flush should write.
    pub(crate) fn snapshot(&self) -> Vec<(String, Touch)> {
        self.lock().iter().map(|(p, t)| (p.clone(), t.clone())).collect()
    }

    /// After the flush of `flushed` committed: drop the entries it covered,
    /// keeping any touch that arrived meanwhile.
    pub(crate) fn forget(&self, flushed: &[(String, Touch)]) {
        let mut pending = self.lock();
        for (path, done) in flushed {
            if pending.get(path).is_some_and(|t| t == done) {
                pending.remove(path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forget_keeps_touches_newer_than_the_flush() {
        let overlay = TouchOverlay::default();
        overlay.record("a", "i", 10);
        overlay.record("a", "i", 5);
        overlay.record("b", "j", 7);
        let flushed = overlay.snapshot();
        assert_eq!(overlay.get("a"), Some(Touch { incarnation: "i".into(), at_ms: 10 }));
        overlay.record("a", "i", 20); // arrives while the flush is in flight
        overlay.forget(&flushed);
        assert_eq!(overlay.get("a").map(|t| t.at_ms), Some(20));
        assert_eq!(overlay.get("b"), None);
    }
}
