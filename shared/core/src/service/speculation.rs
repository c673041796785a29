//! Append pipelining: the predicted state of a stream while commits to it are
//! in flight, so the next append can be planned (and submitted into the same
//! group commit) without waiting for the previous one to become durable.
//!
//! Safety rests on the commit precondition, not on this cache: an append
//! planned on a prediction carries `Expect::VersionAt` (the predicted version
//! and tail), which holds only if every commit it was stacked on was applied
//! first (the store applies submissions in order), and never against a state
//! the prediction missed: the tail names where the bytes land, so a stale
//! prediction fails its commit instead of leaving a gap. Outcomes that write
//! nothing are never answered from a prediction (`StreamService::mutate` re-plans them with
//! consistent reads), so nothing is acknowledged before it is durable.
//!
//! Version and tail name a state, but do not identify it: another writer (a
//! second process over the same store, or a commit of this service that a
//! drained prediction no longer counts, e.g. one whose caller went away)
//! can leave another state under the same version and tail. A commit stacked
//! on a refused one would then pass its precondition against that state.
//! So every commit recorded in one prediction carries the prediction's
//! [`Chain`], and a store that applies commits after submitting them refuses
//! the rest of a chain once one of its commits was not applied.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::{Chain, ProducerState, StreamMeta};

/// One stream's prediction.
struct Prediction {
    meta: StreamMeta,
    producers: HashMap<String, ProducerState>,
    in_flight: usize,
    /// A stacked commit failed: later predictions may be wrong, so planning
    /// goes back to the store until the pipeline drains.
    poisoned: bool,
    /// What the commits recorded here were submitted with (`None`: the
    /// store does not chain them).
    chain: Option<Chain>,
}

/// Predictions per stream path; an entry lives while commits are in flight.
#[derive(Default)]
pub(crate) struct Speculation {
    streams: Mutex<HashMap<Arc<str>, Prediction>>,
    /// How many entries `streams` holds: a store that never has a commit in
    /// flight (memory, AWS) then never takes the lock.
    entries: AtomicUsize,
}

impl Speculation {
    /// Whether commits to `path` are in flight with a prediction.
    pub fn in_flight(&self, path: &str) -> bool {
        self.entries.load(Ordering::Acquire) > 0 && self.streams.lock().is_ok_and(|map| map.contains_key(path))
    }

    /// A commit changed `path`'s meta without extending its prediction (one
    /// that predicts nothing, e.g. a fork raising its source's reference
    /// count): the prediction no longer names the state its version will
    /// have, so nothing stacks on it until the pipeline drains.
    pub fn poison(&self, path: &str) {
        if self.entries.load(Ordering::Acquire) == 0 {
            return;
        }
        if let Ok(mut map) = self.streams.lock() {
            if let Some(entry) = map.get_mut(path) {
                entry.poisoned = true;
            }
        }
    }

    /// The chain for a commit of `path` about to be submitted: the
    /// prediction's, whether or not it is still healthy (the commit may have
    /// been planned on it before it was poisoned), else a new one that the
    /// commit's [`Self::submitted`] makes the prediction's.
    pub fn chain(&self, path: &str) -> Chain {
        let existing = if self.entries.load(Ordering::Acquire) == 0 {
            None
        } else {
            self.streams.lock().ok().and_then(|map| map.get(path).and_then(|p| p.chain.clone()))
        };
        existing.unwrap_or_default()
    }

    /// The predicted meta of `path`, if a healthy prediction exists.
    pub fn meta(&self, path: &str) -> Option<StreamMeta> {
        let map = self.streams.lock().ok()?;
        map.get(path).filter(|p| !p.poisoned).map(|p| p.meta.clone())
    }

    /// The predicted state of one producer (`None`: ask the store).
    pub fn producer(&self, path: &str, incarnation: &str, id: &str) -> Option<ProducerState> {
        let map = self.streams.lock().ok()?;
        let p = map.get(path).filter(|p| !p.poisoned && *p.meta.incarnation == *incarnation)?;
        p.producers.get(id).copied()
    }

    /// Record a submitted (not yet durable) commit's resulting state. Takes
    /// it by value: appends hand over their prediction (no copy per append).
    /// `chain`: what the commit was submitted with (see [`Self::chain`]).
    pub fn submitted(&self, meta: StreamMeta, producer: Option<(String, ProducerState)>, chain: Option<Chain>) {
        let Ok(mut map) = self.streams.lock() else {
            return;
        };
        if let Some(entry) = map.get_mut(&*meta.path) {
            // Only a commit planned on this prediction extends it (its meta is
            // the predicted one's successor). One planned from the store while
            // others are in flight (a consistent re-plan, or a read behind a
            // poisoned pipeline) shares its base with one of them: it predicts
            // the same version number for a different state, and a commit
            // stacked on it would pass its version precondition against the
            // other's state, at the wrong position (found by the kill -9
            // campaign: a stream with a gap). Nothing stacks until the
            // pipeline drains.
            let extends = entry.meta.incarnation == meta.incarnation && meta.version == entry.meta.version + 1;
            entry.poisoned |= !extends;
            if entry.meta.incarnation != meta.incarnation {
                entry.producers.clear();
            }
            entry.meta = meta;
            entry.in_flight += 1;
            if let Some((id, state)) = producer {
                entry.producers.insert(id, state);
            }
            return;
        }
        let producers = producer.into_iter().collect();
        map.insert(meta.path.clone(), Prediction { meta, producers, in_flight: 1, poisoned: false, chain });
        self.entries.store(map.len(), Ordering::Release);
    }

    /// A submitted commit finished (`ok`: durable). The entry is dropped once
    /// nothing is in flight.
    pub fn finished(&self, path: &str, ok: bool) {
        let Ok(mut map) = self.streams.lock() else {
            return;
        };
        if let Some(p) = map.get_mut(path) {
            p.in_flight = p.in_flight.saturating_sub(1);
            p.poisoned |= !ok;
            if p.in_flight == 0 {
                map.remove(path);
                self.entries.store(map.len(), Ordering::Release);
            }
        }
    }
}

/// A submitted commit's share of its stream's prediction, given back with
/// [`Self::finished`] once the commit resolves — or, if the mutation is
/// dropped before (its caller went away while the commit was queued), as
/// failed on drop: otherwise the entry would never drain, and a prediction
/// that outlives a failure stays poisoned for good.
pub(crate) struct InFlight<'a> {
    speculation: &'a Speculation,
    path: &'a str,
    ok: bool,
}

impl<'a> InFlight<'a> {
    pub fn new(speculation: &'a Speculation, path: &'a str) -> Self {
        Self { speculation, path, ok: false }
    }

    /// The commit resolved (`ok`: durable).
    pub fn finished(mut self, ok: bool) {
        self.ok = ok;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.speculation.finished(self.path, self.ok);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(version: u64, tail: u64) -> StreamMeta {
        StreamMeta { tail, ..StreamMeta::for_test("s", "i", version) }
    }

    #[test]
    fn a_commit_planned_on_the_prediction_extends_it() {
        let spec = Speculation::default();
        spec.submitted(meta(124, 100), None, None);
        spec.submitted(meta(125, 200), None, None);
        assert_eq!(spec.meta("s").map(|m| (m.version, m.tail)), Some((125, 200)));
        spec.finished("s", true);
        spec.finished("s", true);
        assert!(spec.meta("s").is_none(), "dropped once nothing is in flight");
    }

    #[test]
    fn a_meta_change_without_a_prediction_poisons_it() {
        let spec = Speculation::default();
        assert!(!spec.in_flight("s"));
        spec.poison("s");
        spec.submitted(meta(124, 100), None, None);
        assert!(spec.in_flight("s"));
        spec.poison("s");
        assert!(spec.meta("s").is_none());
        spec.finished("s", true);
        assert!(!spec.in_flight("s"), "drained");
    }

    #[test]
    fn a_submission_dropped_before_it_resolves_counts_as_failed() {
        let spec = Speculation::default();
        spec.submitted(meta(124, 100), None, None);
        let dropped = InFlight::new(&spec, "s");
        spec.submitted(meta(125, 200), None, None);
        InFlight::new(&spec, "s").finished(true);
        assert!(spec.in_flight("s"));
        drop(dropped);
        assert!(!spec.in_flight("s"), "drained: the next plan reads the store");
    }

    /// Every commit recorded in one prediction is submitted in its chain,
    /// also one planned on it just before it was poisoned; a drained
    /// pipeline starts a new chain (the old one may be broken).
    #[test]
    fn the_commits_of_one_prediction_share_its_chain() {
        let spec = Speculation::default();
        let first = spec.chain("s");
        spec.submitted(meta(124, 100), None, Some(first.clone()));
        assert!(spec.chain("s").same(&first));
        spec.poison("s");
        assert!(spec.chain("s").same(&first), "planned on the prediction before the poison");
        spec.finished("s", true);
        assert!(!spec.chain("s").same(&first), "a new pipeline, a new chain");
    }

    /// The interleaving the kill -9 campaign found: X (v123 -> v124, tail
    /// 39204) in flight; Y planned from the store's v123 (v124, tail 39210);
    /// nothing may be planned on Y's prediction, which names X's version.
    #[test]
    fn a_commit_planned_beside_the_prediction_poisons_it() {
        let spec = Speculation::default();
        spec.submitted(meta(124, 39_204), None, None);
        spec.submitted(meta(124, 39_210), None, None);
        assert!(spec.meta("s").is_none(), "planning goes back to the store");
        spec.finished("s", true);
        assert!(spec.meta("s").is_none(), "until the pipeline drains");
        spec.finished("s", false);
        spec.submitted(meta(125, 39_440), None, None);
        assert_eq!(spec.meta("s").map(|m| m.version), Some(125), "a fresh pipeline predicts again");
    }
}
