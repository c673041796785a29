//! Reclaims asked for by trims ([`ds_core::StreamStore::reclaim`]), applied
//! by the writer at its next checkpoint: the chunk rows wholly below a
//! stream's `retained_from` are deleted in the checkpoint's transaction, so
//! redb frees their pages and later writes reuse them (the file stops
//! growing under a steady append-and-trim load).
//!
//! Why at the checkpoint and not as a logged commit: a reclaim changes
//! nothing a reader may see (the core never reads below `retained_from`,
//! which the trim's own commit made durable), so it needs no log entry and
//! no sync of its own; the checkpoint's transaction already writes the
//! chunk table. A reclaim lost to a crash is asked for again by the next
//! trim of the stream.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// One stream incarnation's pending reclaim: drop its chunks ending at or
/// before `below`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reclaim {
    pub path: String,
    pub incarnation: String,
    pub below: u64,
}

/// The reclaims not yet applied, one per stream incarnation (the highest
/// boundary asked for).
#[derive(Default)]
pub(crate) struct Reclaims(Mutex<HashMap<(String, String), u64>>);

impl Reclaims {
    pub(crate) fn ask(&self, path: &str, incarnation: &str, below: u64) {
        let mut pending = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let at = pending.entry((path.to_owned(), incarnation.to_owned())).or_insert(below);
        *at = (*at).max(below);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).is_empty()
    }

    /// Every pending reclaim, leaving none.
    pub(crate) fn take(&self) -> Vec<Reclaim> {
        let pending = std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner));
        pending.into_iter().map(|((path, incarnation), below)| Reclaim { path, incarnation, below }).collect()
    }

    /// Put back reclaims a failed checkpoint did not apply.
    pub(crate) fn restore(&self, reclaims: Vec<Reclaim>) {
        reclaims.into_iter().for_each(|r| self.ask(&r.path, &r.incarnation, r.below));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_boundary_per_incarnation_is_kept() {
        let r = Reclaims::default();
        r.ask("a", "1", 10);
        r.ask("a", "1", 5);
        r.ask("a", "2", 7);
        let mut taken = r.take();
        taken.sort_by(|x, y| x.incarnation.cmp(&y.incarnation));
        assert_eq!(taken.iter().map(|x| x.below).collect::<Vec<_>>(), vec![10, 7]);
        assert!(r.is_empty());
        r.restore(taken);
        assert!(!r.is_empty());
    }
}
