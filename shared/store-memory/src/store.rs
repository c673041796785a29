//! [`MemoryStore`]: a [`StreamStore`] over in-memory maps.
//!
//! One `RwLock` guards the whole state; `commit` folds the commit into its net
//! writes ([`ds_core::fold`]), takes the write lock, checks every
//! precondition and only then applies the writes, so a commit is
//! all-or-nothing and readers never see half of one. Durable for the process
//! lifetime only.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use ds_core::fold::{MetaEffect, NetWrites, StateView};
use ds_core::{
    Chunk, Commit, ProducerState, Record, StoreError, StreamHandle, StreamMeta, StreamStore, JOINED_CHUNK_TARGET,
};

/// Chunks and producers of one `(path, incarnation)`.
#[derive(Default)]
struct IncarnationData {
    /// Keyed by start position; chunks never overlap, so the chunk containing
    /// position `p` is the last one starting at or before `p`.
    chunks: BTreeMap<u64, Bytes>,
    producers: HashMap<String, ProducerState>,
    records: HashMap<String, Record>,
}

#[derive(Default)]
struct State {
    /// Path order is the `list_streams` order.
    metas: BTreeMap<String, StreamMeta>,
    /// path → incarnation → data. Nested so lookups by `&str` need no allocation.
    data: HashMap<String, HashMap<String, IncarnationData>>,
}

impl State {
    fn incarnation(&self, path: &str, incarnation: &str) -> Option<&IncarnationData> {
        self.data.get(path)?.get(incarnation)
    }

    /// Takes the keys by value: the writes own them, and borrowed keys
    /// would be allocated again on every append to an existing stream.
    fn incarnation_mut(&mut self, path: String, incarnation: String) -> &mut IncarnationData {
        self.data.entry(path).or_default().entry(incarnation).or_default()
    }

    /// Apply net writes whose preconditions were already checked.
    fn apply(&mut self, writes: NetWrites) {
        for (path, incarnation) in &writes.wiped {
            if let Some(by_incarnation) = self.data.get_mut(path) {
                by_incarnation.remove(incarnation);
                if by_incarnation.is_empty() {
                    self.data.remove(path);
                }
            }
        }
        for m in writes.metas {
            match m.effect {
                MetaEffect::Put(meta) => {
                    self.metas.insert(m.path, *meta);
                }
                MetaEffect::Delete => {
                    self.metas.remove(&m.path);
                }
                MetaEffect::CheckOnly => {}
            }
        }
        for c in writes.chunks {
            put_chunk(&mut self.incarnation_mut(c.path, c.incarnation).chunks, c.start, &c.data);
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

/// Store the bytes appended at `start`, joined onto the chunk ending there
/// while that stays within [`JOINED_CHUNK_TARGET`]: a catch-up read of small
/// appends then walks one entry per few KiB instead of one per append.
/// Always copied: a request body is often a slice of a larger network buffer,
/// and keeping the slice would pin the whole buffer.
fn put_chunk(chunks: &mut BTreeMap<u64, Bytes>, start: u64, data: &[u8]) {
    if let Some(mut last) = chunks.last_entry() {
        let (row_start, row) = (*last.key(), last.get());
        if row_start + row.len() as u64 == start && row.len() + data.len() <= JOINED_CHUNK_TARGET {
            let mut joined = BytesMut::with_capacity(row.len() + data.len());
            joined.extend_from_slice(row);
            joined.extend_from_slice(data);
            *last.get_mut() = joined.freeze();
            return;
        }
    }
    chunks.insert(start, Bytes::copy_from_slice(data));
}

impl StateView for State {
    fn meta_version(&self, path: &str) -> Result<Option<(u64, String)>, StoreError> {
        Ok(self.metas.get(path).map(|m| (m.version, m.incarnation.clone())))
    }

    fn chunk_overlaps(&self, path: &str, incarnation: &str, start: u64, end: u64) -> Result<bool, StoreError> {
        let Some(data) = self.incarnation(path, incarnation) else {
            return Ok(false);
        };
        let before = data.chunks.range(..=start).next_back().is_some_and(|(s, d)| s + d.len() as u64 > start);
        let inside = data.chunks.range(start..end).next().is_some();
        Ok(before || inside)
    }

    fn record_revision(&self, path: &str, incarnation: &str, key: &str) -> Result<Option<u64>, StoreError> {
        Ok(self.incarnation(path, incarnation).and_then(|d| d.records.get(key)).map(|r| r.revision))
    }
}

/// In-memory [`StreamStore`]. Cheap to share behind an `Arc`.
#[derive(Default)]
pub struct MemoryStore {
    state: RwLock<State>,
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
}

#[async_trait]
impl StreamStore for MemoryStore {
    async fn read_meta(&self, stream: &StreamHandle) -> Result<Option<StreamMeta>, StoreError> {
        Ok(self.read().metas.get(stream.path()).cloned())
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
        // The chunk containing `from` (if any), then every chunk starting in (from, until).
        let first = data.chunks.range(..=from).next_back().filter(|(s, d)| *s + d.len() as u64 > from);
        let rest = data.chunks.range((Bound::Excluded(from), Bound::Excluded(until)));
        Ok(take_until_budget(first.into_iter().chain(rest), max_bytes))
    }

    /// One copy of the stored bytes into one buffer: the chunks are not
    /// cloned and collected one by one (a catch-up of 10,000 small appends).
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
        let state = self.read();
        let Some(data) = state.incarnation(stream.path(), incarnation) else {
            return Ok(None);
        };
        let mut out = BytesMut::with_capacity(len);
        let first = data.chunks.range(..=from).next_back();
        let rest = data.chunks.range((Bound::Excluded(from), Bound::Excluded(until)));
        let mut pos = from;
        for (&start, bytes) in first.into_iter().chain(rest) {
            let end = start + bytes.len() as u64;
            if start > pos {
                // A gap: the chunk-wise read reports it.
                return Ok(None);
            }
            if end <= pos {
                continue;
            }
            let lo = usize::try_from(pos - start).unwrap_or(usize::MAX);
            let hi = usize::try_from(end.min(until) - start).unwrap_or(usize::MAX);
            out.extend_from_slice(&bytes[lo..hi]);
            pos = end.min(until);
            if pos == until {
                break;
            }
        }
        Ok((pos == until).then(|| out.freeze()))
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
        let writes = NetWrites::fold(&commit)?;
        let mut state = self.write();
        writes.check(&*state)?;
        state.apply(writes);
        Ok(())
    }

    async fn touch(&self, stream: &StreamHandle, incarnation: &str, at_ms: i64) -> Result<(), StoreError> {
        let mut state = self.write();
        if let Some(meta) = state.metas.get_mut(stream.path()) {
            if meta.incarnation == incarnation && meta.touched_at_ms < at_ms {
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
fn take_until_budget<'a>(chunks: impl Iterator<Item = (&'a u64, &'a Bytes)>, max_bytes: usize) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut total = 0usize;
    for (start, data) in chunks {
        if !out.is_empty() && total >= max_bytes {
            break;
        }
        total = total.saturating_add(data.len());
        out.push(Chunk { start: *start, data: data.clone() });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(chunks: &BTreeMap<u64, Bytes>) -> Vec<(u64, usize)> {
        chunks.iter().map(|(s, d)| (*s, d.len())).collect()
    }

    #[test]
    fn small_appends_join_up_to_the_target_and_large_ones_stand_alone() {
        let mut chunks = BTreeMap::new();
        let mut expected = Vec::new();
        let mut tail = 0u64;
        for i in 0..100u8 {
            put_chunk(&mut chunks, tail, &[i; 100]);
            expected.extend_from_slice(&[i; 100]);
            tail += 100;
        }
        // 40 appends of 100 B fit in 4,096 B: rows of 4,000, 4,000 and 2,000.
        assert_eq!(layout(&chunks), vec![(0, 4000), (4000, 4000), (8000, 2000)]);
        put_chunk(&mut chunks, tail, &[9; JOINED_CHUNK_TARGET]);
        put_chunk(&mut chunks, tail + JOINED_CHUNK_TARGET as u64, b"next");
        assert_eq!(layout(&chunks)[3..], [(tail, JOINED_CHUNK_TARGET), (tail + JOINED_CHUNK_TARGET as u64, 4)]);
        let joined: Vec<u8> = chunks.values().take(3).flat_map(|d| d.iter().copied()).collect();
        assert_eq!(joined, expected, "joining keeps every byte at its position");
    }

    #[test]
    fn a_chunk_not_continuing_the_last_one_is_not_joined() {
        let mut chunks = BTreeMap::new();
        put_chunk(&mut chunks, 10, b"fork data");
        put_chunk(&mut chunks, 30, b"elsewhere");
        assert_eq!(layout(&chunks), vec![(10, 9), (30, 9)]);
    }
}
