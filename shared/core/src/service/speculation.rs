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
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use crate::{Chain, PendingCommit, ProducerState, Record, StoreError, StreamMeta};

/// One stream's prediction.
struct Prediction {
    meta: StreamMeta,
    producers: HashMap<String, ProducerState>,
    /// Records the commits in flight write (inline reductions).
    records: HashMap<String, Record>,
    in_flight: usize,
    /// A stacked commit failed: later predictions may be wrong, so planning
    /// goes back to the store until the pipeline drains.
    poisoned: bool,
    /// What the commits recorded here were submitted with (`None`: the
    /// store does not chain them).
    chain: Option<Chain>,
}

/// The prediction a plan started on ([`Speculation::seen`]): the state it
/// names and the chain of the commits it counts.
pub(crate) struct Seen {
    incarnation: Arc<str>,
    version: u64,
    tail: u64,
    chain: Chain,
}

/// Predictions per stream path; an entry lives while commits are in flight.
#[derive(Default)]
pub(crate) struct Speculation {
    streams: Mutex<HashMap<Arc<str>, Prediction>>,
    /// How many entries `streams` holds: a store that never has a commit in
    /// flight (memory; AWS with group commit off) then never takes the lock.
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

    /// The prediction of `path` a plan starting now may build on, taken
    /// under the stream's lock before planning: [`Self::chain`] needs it,
    /// because the prediction can drain (its last commit refused) while the
    /// plan awaits a store read, and a plan built on that prediction's meta
    /// must still join its (now broken) chain.
    pub fn seen(&self, path: &str) -> Option<Seen> {
        if self.entries.load(Ordering::Acquire) == 0 {
            return None;
        }
        let map = self.streams.lock().ok()?;
        let p = map.get(path)?;
        Some(Seen {
            incarnation: p.meta.incarnation.clone(),
            version: p.meta.version,
            tail: p.meta.tail,
            chain: p.chain.clone()?,
        })
    }

    /// The chain for a commit about to be submitted, planned on `base` (the
    /// `(incarnation, version, tail)` its precondition names), given the
    /// prediction `seen` when its plan started ([`Self::seen`]): that
    /// prediction's chain if the plan was built on it (even if it was
    /// poisoned or drained since), else a new one, which the commit's
    /// [`Self::submitted`] makes the prediction's if there is none. A commit
    /// planned on the store beside a poisoned prediction is not refused for
    /// the prediction's failures.
    ///
    /// Taken from the entry at submission instead, a plan built on a
    /// prediction that drained meanwhile (its last commit refused) got a new
    /// chain, and its precondition passed against another writer's state of
    /// the same version and tail: a producer's append applied twice (found
    /// by `pipeline_chains::a_producer_append_through_two_services_is_applied_once`,
    /// about one run in sixty).
    pub fn chain(seen: Option<Seen>, base: (&str, u64, u64)) -> Chain {
        let (incarnation, version, tail) = base;
        seen.filter(|s| s.version == version && s.tail == tail && *s.incarnation == *incarnation)
            .map(|s| s.chain)
            .unwrap_or_default()
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

    /// The predicted record `key` (`None`: ask the store).
    pub fn record(&self, path: &str, incarnation: &str, key: &str) -> Option<Record> {
        if self.entries.load(Ordering::Acquire) == 0 {
            return None;
        }
        let map = self.streams.lock().ok()?;
        let p = map.get(path).filter(|p| !p.poisoned && *p.meta.incarnation == *incarnation)?;
        p.records.get(key).cloned()
    }

    /// Record a submitted (not yet durable) commit's resulting state. Takes
    /// it by value: appends hand over their prediction (no copy per append).
    /// `chain`: what the commit was submitted with (see [`Self::chain`]).
    pub fn submitted(
        &self,
        meta: StreamMeta,
        producer: Option<(String, ProducerState)>,
        records: Vec<(String, Record)>,
        chain: Option<Chain>,
    ) {
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
                entry.records.clear();
            }
            entry.meta = meta;
            entry.in_flight += 1;
            if let Some((id, state)) = producer {
                entry.producers.insert(id, state);
            }
            entry.records.extend(records);
            return;
        }
        let producers = producer.into_iter().collect();
        let records = records.into_iter().collect();
        map.insert(meta.path.clone(), Prediction { meta, producers, records, in_flight: 1, poisoned: false, chain });
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

/// A submitted commit's share of its stream's prediction, given back once
/// the commit is decided ([`Self::resolve`] awaits it).
///
/// If the mutation is dropped while the commit is queued (its caller went
/// away), the commit may still apply, so it keeps counting as in flight
/// until the store decides it: a task awaits it, then gives the share back.
/// Counted as finished at once, it let the prediction drain while it was
/// still queued, and the next prediction — started by a commit planned on
/// the drained one, so its meta included the dropped commit — did not list
/// that commit's producer state: a retry of the dropped append read the
/// producer's older state from the store, was accepted, and applied twice
/// (found by `one_service_with_cancelled_appends_applies_each_once`).
pub(crate) struct InFlight {
    speculation: Arc<Speculation>,
    path: Arc<str>,
    /// The commit, while [`Self::resolve`] awaits it.
    pending: Option<PendingCommit>,
    ok: bool,
}

impl InFlight {
    pub fn new(speculation: &Arc<Speculation>, path: Arc<str>) -> Self {
        Self { speculation: Arc::clone(speculation), path, pending: None, ok: false }
    }

    /// The commit resolved (`ok`: durable) without waiting.
    pub fn finished(mut self, ok: bool) {
        self.ok = ok;
    }

    /// Wait for `pending`, then give the share back with its outcome.
    pub async fn resolve(mut self, pending: PendingCommit) -> Result<(), StoreError> {
        self.pending = Some(pending);
        let result = std::future::poll_fn(|cx| match self.pending.as_mut() {
            Some(pending) => Pin::new(pending).poll(cx),
            None => Poll::Ready(Err(StoreError::backend("pipelined commit", "awaited after it resolved"))),
        })
        .await;
        self.pending = None;
        self.ok = result.is_ok();
        result
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(pending) = self.pending.take() {
            // Dropped while queued: the outcome decides, not the caller.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let (speculation, path) = (Arc::clone(&self.speculation), Arc::clone(&self.path));
                runtime.spawn(async move {
                    let ok = pending.await.is_ok();
                    speculation.finished(&path, ok);
                });
                return;
            }
        }
        self.speculation.finished(&self.path, self.ok);
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
        spec.submitted(meta(124, 100), None, Vec::new(), None);
        spec.submitted(meta(125, 200), None, Vec::new(), None);
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
        spec.submitted(meta(124, 100), None, Vec::new(), None);
        assert!(spec.in_flight("s"));
        spec.poison("s");
        assert!(spec.meta("s").is_none());
        spec.finished("s", true);
        assert!(!spec.in_flight("s"), "drained");
    }

    #[test]
    fn a_submission_given_up_before_it_was_awaited_counts_as_failed() {
        let spec = Arc::new(Speculation::default());
        spec.submitted(meta(124, 100), None, Vec::new(), None);
        let dropped = InFlight::new(&spec, "s".into());
        spec.submitted(meta(125, 200), None, Vec::new(), None);
        InFlight::new(&spec, "s".into()).finished(true);
        assert!(spec.in_flight("s"));
        drop(dropped);
        assert!(!spec.in_flight("s"), "drained: the next plan reads the store");
    }

    /// A caller that goes away while its commit is queued: the commit
    /// keeps counting (its prediction stays whole) until the store decides.
    #[tokio::test]
    async fn a_commit_whose_caller_went_away_counts_until_it_is_decided() {
        let spec = Arc::new(Speculation::default());
        spec.submitted(meta(124, 100), Some(("p".into(), ProducerState { epoch: 0, last_seq: 3 })), Vec::new(), None);
        let (ack, outcome) = tokio::sync::oneshot::channel();
        let waiting = InFlight::new(&spec, "s".into()).resolve(PendingCommit::acked(outcome));
        let mut waiting = Box::pin(waiting);
        let noop = &mut std::task::Context::from_waker(std::task::Waker::noop());
        assert!(waiting.as_mut().poll(noop).is_pending());
        drop(waiting);
        assert_eq!(spec.producer("s", "i", "p").map(|p| p.last_seq), Some(3), "still predicted while queued");
        ack.send(Ok(())).ok();
        for _ in 0..100 {
            if !spec.in_flight("s") {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the prediction drains once the commit is decided");
    }

    /// Every commit planned on one prediction is submitted in its chain,
    /// also one planned on it just before it was poisoned or drained; one
    /// planned on another state, or after the pipeline drained, gets a new
    /// chain.
    #[test]
    fn the_commits_planned_on_one_prediction_share_its_chain() {
        let spec = Speculation::default();
        let first = Speculation::chain(spec.seen("s"), ("i", 123, 0));
        spec.submitted(meta(124, 100), None, Vec::new(), Some(first.clone()));
        assert!(Speculation::chain(spec.seen("s"), ("i", 124, 100)).same(&first));
        assert!(!Speculation::chain(spec.seen("s"), ("i", 124, 90)).same(&first), "planned on the store's state");
        let seen = spec.seen("s");
        spec.poison("s");
        assert!(Speculation::chain(seen, ("i", 124, 100)).same(&first), "planned on the prediction before the poison");
        let seen = spec.seen("s");
        spec.finished("s", false);
        assert!(spec.seen("s").is_none(), "drained");
        assert!(
            Speculation::chain(seen, ("i", 124, 100)).same(&first),
            "planned on the prediction before it drained: stacked on its refused commit"
        );
        assert!(!Speculation::chain(spec.seen("s"), ("i", 124, 100)).same(&first), "a new pipeline, a new chain");
    }

    /// The interleaving the kill -9 campaign found: X (v123 -> v124, tail
    /// 39204) in flight; Y planned from the store's v123 (v124, tail 39210);
    /// nothing may be planned on Y's prediction, which names X's version.
    #[test]
    fn a_commit_planned_beside_the_prediction_poisons_it() {
        let spec = Speculation::default();
        spec.submitted(meta(124, 39_204), None, Vec::new(), None);
        spec.submitted(meta(124, 39_210), None, Vec::new(), None);
        assert!(spec.meta("s").is_none(), "planning goes back to the store");
        spec.finished("s", true);
        assert!(spec.meta("s").is_none(), "until the pipeline drains");
        spec.finished("s", false);
        spec.submitted(meta(125, 39_440), None, Vec::new(), None);
        assert_eq!(spec.meta("s").map(|m| m.version), Some(125), "a fresh pipeline predicts again");
    }
}
