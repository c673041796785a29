//! [`CommittedMetas`]: the latest committed meta of recently written streams,
//! so that planning a mutation ([`ds_core::StreamStore::read_meta_for_update`])
//! skips a read transaction and its hop through the blocking pool. That hop
//! is a large share of a warm append's cost on this store.
//!
//! Only the writer thread writes metas, so only the writer feeds the cache:
//! after a batch is durable and before it is acknowledged, it records the
//! metas that batch put or deleted (and the touches it flushed). An entry is
//! therefore never ahead of the disk and at most one batch behind it, and a
//! plan built on a behind entry fails its commit's version precondition
//! (`Conflict`), after which the core re-plans with consistent reads — the
//! caching contract of the seam. A conflicting commit drops its paths' entries
//! all the same, and a failed batch (its outcome on disk uncertain after a
//! reopen) drops them all.
//!
//! Bounded: at most [`MAX_ENTRIES`] streams (the working set of streams being
//! appended to at once); past that an arbitrary entry makes room.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ds_core::fold::{MetaEffect, NetWrites};
use ds_core::{StoreError, StreamMeta};

use crate::touch::Touch;

/// Most streams whose meta is kept.
pub(crate) const MAX_ENTRIES: usize = 1024;

#[derive(Default)]
pub(crate) struct CommittedMetas {
    metas: Mutex<HashMap<Arc<str>, StreamMeta>>,
}

impl CommittedMetas {
    // Every critical section leaves the map valid: a poisoned lock is recoverable.
    fn lock(&self) -> MutexGuard<'_, HashMap<Arc<str>, StreamMeta>> {
        self.metas.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn get(&self, path: &str) -> Option<StreamMeta> {
        self.lock().get(path).cloned()
    }

    /// After a durable batch: record what each applied commit left, drop what
    /// each refused commit touched, and merge the flushed touches.
    pub(crate) fn batch_committed(
        &self,
        commits: &[&NetWrites],
        outcomes: &[Result<(), StoreError>],
        flushed: &[(String, Touch)],
    ) {
        let mut metas = self.lock();
        for (writes, outcome) in commits.iter().zip(outcomes) {
            for m in &writes.metas {
                match (&m.effect, outcome) {
                    (MetaEffect::Put(meta), Ok(())) => {
                        if metas.len() >= MAX_ENTRIES && !metas.contains_key(&*m.path) {
                            let victim = metas.keys().next().cloned();
                            if let Some(victim) = victim {
                                metas.remove(&victim);
                            }
                        }
                        metas.insert(m.path.clone(), meta.clone());
                    }
                    (MetaEffect::CheckOnly, Ok(())) => {}
                    (MetaEffect::Delete, _) | (_, Err(_)) => {
                        metas.remove(&*m.path);
                    }
                }
            }
        }
        for (path, touch) in flushed {
            if let Some(meta) = metas.get_mut(path.as_str()) {
                touch.apply_to(meta);
            }
        }
    }

    /// After a failed batch: what reached the disk is uncertain.
    pub(crate) fn clear(&self) {
        self.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use ds_core::fold::{MetaCond, MetaWrite};

    use super::*;

    fn meta(path: &str, version: u64) -> StreamMeta {
        let mut meta = ds_core::contract::fixtures::new_meta(path);
        (meta.incarnation, meta.version, meta.touched_at_ms) = ("i".into(), version, 0);
        meta
    }

    fn put(path: &str, version: u64) -> NetWrites {
        let effect = MetaEffect::Put(meta(path, version));
        NetWrites {
            metas: vec![MetaWrite { path: path.into(), cond: MetaCond::Absent, effect }],
            ..NetWrites::default()
        }
    }

    #[test]
    fn applied_puts_are_kept_and_refused_or_deleted_paths_dropped() {
        let cache = CommittedMetas::default();
        let (a, b) = (put("a", 1), put("b", 1));
        cache.batch_committed(&[&a, &b], &[Ok(()), Ok(())], &[]);
        assert_eq!(cache.get("a").map(|m| m.version), Some(1));

        let (a2, b2) = (put("a", 2), put("b", 2));
        cache.batch_committed(&[&a2, &b2], &[Ok(()), Err(StoreError::Conflict)], &[]);
        assert_eq!(cache.get("a").map(|m| m.version), Some(2), "the later commit of a batch wins");
        assert!(cache.get("b").is_none(), "a refused commit drops its entry");

        let delete = NetWrites {
            metas: vec![MetaWrite {
                path: "a".into(),
                cond: MetaCond::Version { version: 2, incarnation: "i".into(), tail: None },
                effect: MetaEffect::Delete,
            }],
            ..NetWrites::default()
        };
        cache.batch_committed(&[&delete], &[Ok(())], &[]);
        assert!(cache.get("a").is_none());
    }

    #[test]
    fn flushed_touches_reach_cached_metas_and_the_size_is_bounded() {
        let cache = CommittedMetas::default();
        let writes: Vec<NetWrites> = (0..MAX_ENTRIES + 10).map(|i| put(&format!("s{i}"), 1)).collect();
        let refs: Vec<&NetWrites> = writes.iter().collect();
        let outcomes: Vec<_> = refs.iter().map(|_| Ok(())).collect();
        let last = format!("s{}", MAX_ENTRIES + 9);
        let touch = Touch { incarnation: "i".into(), at_ms: 77 };
        cache.batch_committed(&refs, &outcomes, &[(last.clone(), touch)]);
        assert_eq!(cache.lock().len(), MAX_ENTRIES);
        assert_eq!(cache.get(&last).map(|m| m.touched_at_ms), Some(77));
        cache.clear();
        assert!(cache.get(&last).is_none());
    }
}
