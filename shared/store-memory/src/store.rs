//! [`MemoryStore`]: a [`StreamStore`] over in-memory maps.
//!
//! One `RwLock` guards the whole state; `commit` folds the commit into its net
//! writes ([`ds_core::fold`]), takes the write lock, checks every
//! precondition and only then applies the writes, so a commit is
//! all-or-nothing and readers never see half of one. Durable for the process
//! lifetime only. A catch-up read joined from many chunks is kept in a
//! [`ReadCache`] (bounded; forgotten under the write lock that wipes the
//! stream), so the next one is a slice of it instead of another copy.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use ds_core::fold::{MetaEffect, MetaStamp, NetWrites, StateView};
use ds_core::read_cache::{ReadCache, ADMIT_ASSEMBLED};
use ds_core::{
    Chunk, Commit, PendingCommit, ProducerState, Record, StoreError, StreamHandle, StreamMeta, StreamStore, TrySubmit,
};

use crate::chunks::{Chunks, Row};

/// Chunks and producers of one `(path, incarnation)`.
#[derive(Default)]
struct IncarnationData {
    chunks: Chunks,
    producers: HashMap<String, ProducerState>,
    records: HashMap<String, Record>,
}

#[derive(Default)]
struct State {
    /// Path order is the `list_streams` order.
    metas: BTreeMap<Arc<str>, StreamMeta>,
    /// path → its incarnations' data: one, unless an old incarnation was not
    /// wiped yet. A short vector, not a nested map: an idle stream then costs
    /// one small allocation here instead of a hash table's buckets. The
    /// keys share the meta's strings (reference-counted, one copy each).
    data: HashMap<Arc<str>, Vec<(Arc<str>, IncarnationData)>>,
}

impl State {
    fn incarnation(&self, path: &str, incarnation: &str) -> Option<&IncarnationData> {
        self.data.get(path)?.iter().find(|(i, _)| **i == *incarnation).map(|(_, d)| d)
    }

    /// Takes the keys by value: the writes own them, and borrowed keys
    /// would be allocated again on every append to an existing stream.
    fn incarnation_mut(&mut self, path: Arc<str>, incarnation: Arc<str>) -> &mut IncarnationData {
        let all = self.data.entry(path).or_insert_with(|| Vec::with_capacity(1));
        let at = match all.iter().position(|(i, _)| *i == incarnation) {
            Some(at) => at,
            None => {
                all.push((incarnation, IncarnationData::default()));
                all.len() - 1
            }
        };
        &mut all[at].1
    }

    /// Apply net writes whose preconditions were already checked.
    fn apply(&mut self, writes: NetWrites) {
        for (path, incarnation) in &writes.wiped {
            if let Some(all) = self.data.get_mut(&**path) {
                all.retain(|(i, _)| i != incarnation);
                if all.is_empty() {
                    self.data.remove(&**path);
                }
            }
        }
        for m in writes.metas {
            match m.effect {
                MetaEffect::Put(meta) => {
                    self.metas.insert(m.path, meta);
                }
                MetaEffect::Delete => {
                    self.metas.remove(&*m.path);
                }
                MetaEffect::CheckOnly => {}
            }
        }
        for c in writes.chunks {
            self.incarnation_mut(c.path, c.incarnation).chunks.put(c.start, &c.data);
        }
        for p in writes.producers {
            self.incarnation_mut(p.path, p.incarnation).producers.insert(p.producer_id, p.state);
        }
        for r in writes.records {
            let record = Record { revision: r.record.revision, value: Bytes::copy_from_slice(&r.record.value) };
            self.incarnation_mut(r.path, r.incarnation).records.insert(r.key, record);
        }
    }
}

impl StateView for State {
    fn meta_stamp(&self, path: &str) -> Result<Option<MetaStamp>, StoreError> {
        Ok(self.metas.get(path).map(MetaStamp::of))
    }

    fn chunk_overlaps(&self, path: &str, incarnation: &str, start: u64, end: u64) -> Result<bool, StoreError> {
        Ok(self.incarnation(path, incarnation).is_some_and(|d| d.chunks.overlaps(start, end)))
    }

    fn record_revision(&self, path: &str, incarnation: &str, key: &str) -> Result<Option<u64>, StoreError> {
        Ok(self.incarnation(path, incarnation).and_then(|d| d.records.get(key)).map(|r| r.revision))
    }
}

/// In-memory [`StreamStore`]. Cheap to share behind an `Arc`.
#[derive(Default)]
pub struct MemoryStore {
    state: RwLock<State>,
    cache: ReadCache,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    // Every mutation checks all preconditions before changing anything, so a
    // panic while the lock is held cannot leave a half-applied commit behind:
    // recovering the guard from a poisoned lock is safe.
    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// A commit, all or nothing: every precondition is checked before
    /// anything changes.
    fn apply(&self, commit: Commit) -> Result<(), StoreError> {
        let writes = NetWrites::fold(commit)?;
        let mut state = self.write();
        writes.check(&*state)?;
        // Under the write lock that publishes the wipe (see `ReadCache`).
        writes.wiped.iter().for_each(|(path, _)| self.cache.forget(path));
        state.apply(writes);
        Ok(())
    }

    /// `[from, until)` of `(path, incarnation)` as one buffer: `cached` (the
    /// read cache's pieces from `from`), then the stored chunks for the rest.
    /// `None` where a byte of it is not stored.
    fn assemble(&self, path: &str, incarnation: &str, from: u64, until: u64, cached: &[Bytes]) -> Option<Bytes> {
        let mut out = BytesMut::with_capacity(usize::try_from(until - from).ok()?);
        cached.iter().for_each(|piece| out.extend_from_slice(piece));
        let mut pos = from + out.len() as u64;
        let state = self.read();
        let data = state.incarnation(path, incarnation)?;
        for &(start, ref bytes) in data.chunks.covering(pos, until) {
            if pos == until {
                break;
            }
            let end = start + bytes.len() as u64;
            if start > pos {
                // A gap: the chunk-wise read reports it.
                return None;
            }
            if end <= pos {
                continue;
            }
            let lo = usize::try_from(pos - start).ok()?;
            let hi = usize::try_from(end.min(until) - start).ok()?;
            out.extend_from_slice(&bytes.bytes()[lo..hi]);
            pos = end.min(until);
        }
        (pos == until).then(|| out.freeze())
    }
}

#[async_trait]
impl StreamStore for MemoryStore {
    async fn read_meta(&self, stream: &StreamHandle) -> Result<Option<StreamMeta>, StoreError> {
        Ok(self.read().metas.get(stream.path()).cloned())
    }

    /// Nothing is cached: [`Self::read_meta`]'s read, without boxing its
    /// future inside this one as the default does.
    async fn read_meta_for_update(&self, stream: &StreamHandle) -> Result<Option<StreamMeta>, StoreError> {
        Ok(self.read().metas.get(stream.path()).cloned())
    }

    fn try_read_meta_for_update(&self, stream: &StreamHandle) -> Option<Result<Option<StreamMeta>, StoreError>> {
        Some(Ok(self.read().metas.get(stream.path()).cloned()))
    }

    async fn read_chunks(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        from: u64,
        until: u64,
        max_bytes: usize,
    ) -> Result<Vec<Chunk>, StoreError> {
        let state = self.read();
        let Some(data) = state.incarnation(stream.path(), incarnation) else {
            return Ok(Vec::new());
        };
        if from >= until {
            return Ok(Vec::new());
        }
        Ok(take_until_budget(data.chunks.covering(from, until), max_bytes))
    }

    /// One copy of the stored bytes into one buffer: the chunks are not
    /// cloned and collected one by one (a catch-up of 10,000 small appends);
    /// a large one is kept for the next read of the same range.
    async fn read_contiguous(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        from: u64,
        until: u64,
        max_bytes: usize,
    ) -> Result<Option<Bytes>, StoreError> {
        let Some(len) = ds_core::contiguous_len(from, until, max_bytes) else {
            return Ok(None);
        };
        if len < ADMIT_ASSEMBLED {
            // A live reader's tail: the copy costs less than the cache's lock.
            return Ok(self.assemble(stream.path(), incarnation, from, until, &[]));
        }
        let (mut cached, epoch) = self.cache.prefix(stream.path(), incarnation, from, until);
        if cached.len() == 1 && cached[0].len() == len {
            return Ok(cached.pop());
        }
        let Some(out) = self.assemble(stream.path(), incarnation, from, until, &cached) else {
            return Ok(None);
        };
        self.cache.insert(stream.path(), incarnation, from, out.clone(), epoch);
        Ok(Some(out))
    }

    async fn read_producer(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        producer_id: &str,
    ) -> Result<Option<ProducerState>, StoreError> {
        let state = self.read();
        Ok(state.incarnation(stream.path(), incarnation).and_then(|d| d.producers.get(producer_id).copied()))
    }

    async fn read_record(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        key: &str,
    ) -> Result<Option<Record>, StoreError> {
        Ok(self.read().incarnation(stream.path(), incarnation).and_then(|d| d.records.get(key).cloned()))
    }

    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        self.apply(commit)
    }

    /// Applied as submitted (the default would box [`Self::commit`]'s
    /// future inside this one: an allocation per append for nothing).
    async fn submit(&self, commit: Commit) -> Result<PendingCommit, StoreError> {
        self.apply(commit)?;
        Ok(PendingCommit::done(Ok(())))
    }

    fn try_submit(&self, commit: Commit) -> TrySubmit {
        TrySubmit::Submitted(self.apply(commit).map(|()| PendingCommit::done(Ok(()))))
    }

    /// The chunks go at once, and the read cache's copies of the stream
    /// with them (they would keep the freed bytes alive).
    async fn reclaim(&self, stream: &StreamHandle, incarnation: &str, below: u64) -> Result<(), StoreError> {
        let mut state = self.write();
        let Some(all) = state.data.get_mut(stream.path()) else { return Ok(()) };
        if let Some((_, data)) = all.iter_mut().find(|(i, _)| **i == *incarnation) {
            if data.chunks.drop_below(below) > 0 {
                self.cache.forget(stream.path());
            }
        }
        Ok(())
    }

    async fn touch(&self, stream: &StreamHandle, incarnation: &str, at_ms: i64) -> Result<(), StoreError> {
        let mut state = self.write();
        if let Some(meta) = state.metas.get_mut(stream.path()) {
            if *meta.incarnation == *incarnation && meta.touched_at_ms < at_ms {
                meta.touched_at_ms = at_ms;
            }
        }
        Ok(())
    }

    async fn list_streams(&self, after: Option<&str>, limit: usize) -> Result<Vec<StreamMeta>, StoreError> {
        let state = self.read();
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(state.metas.range::<str, _>((lower, Bound::Unbounded)).take(limit).map(|(_, m)| m.clone()).collect())
    }

    async fn list_streams_with_prefix(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StreamMeta>, StoreError> {
        let state = self.read();
        let lower = match after {
            Some(a) if a >= prefix => Bound::Excluded(a),
            _ => Bound::Included(prefix),
        };
        Ok(state
            .metas
            .range::<str, _>((lower, Bound::Unbounded))
            .take_while(|(path, _)| path.starts_with(prefix))
            .take(limit)
            .map(|(_, m)| m.clone())
            .collect())
    }
}

/// Collect chunks in order until their total length reaches `max_bytes`,
/// always keeping the first one (the [`StreamStore::read_chunks`] budget rule).
fn take_until_budget<'a>(chunks: impl Iterator<Item = &'a (u64, Row)>, max_bytes: usize) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut total = 0usize;
    for (start, data) in chunks {
        if !out.is_empty() && total >= max_bytes {
            break;
        }
        total = total.saturating_add(data.len());
        out.push(Chunk { start: *start, data: data.to_bytes() });
    }
    out
}
