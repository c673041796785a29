//! [`Overlay`]: what the log has made durable and the tables do not hold yet.
//!
//! Why (measured, see `lib.rs`): a redb write transaction costs tens of
//! microseconds to commit even without a sync, and it ran once per batch, on
//! the path of every acknowledgement. Now a batch is checked against the
//! overlay and the tables, logged and synced (the commit point), and then
//! merged into this in-memory overlay; the tables receive the overlay's net
//! state once per checkpoint, in one durable transaction. Reads look in the
//! overlay first and in the tables for the rest, so the data appended since
//! the last checkpoint (the tail every live reader wants) is served from
//! memory.
//!
//! The overlay is net state, not a list of commits: per stream path the last
//! meta written (or its deletion), and per incarnation the chunks, producer
//! states and records written since the checkpoint, plus whether the
//! incarnation was wiped (a `DeleteStream`) — a wiped incarnation hides
//! everything the tables hold of it. Applying it to the tables
//! ([`Overlay::write_to`]) lands the same rows as replaying the log entries
//! it was built from, which is what recovery does after a crash.
//!
//! Ordering rule for readers: look in the overlay *before* opening a read
//! transaction. The writer clears the overlay only after the checkpoint that
//! wrote it committed, so a reader either finds an entry here or reads it
//! from the tables — never neither.
//!
//! Bounded by the checkpoint: at most about a second of writes, what a log
//! of [`crate::writer::CHECKPOINT_BYTES`] holds, or
//! [`crate::writer::CHECKPOINT_STREAMS`] streams.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use bytes::{Bytes, BytesMut};
use ds_core::fold::{MetaEffect, MetaStamp, NetWrites, StateView};
use ds_core::{Chunk, ProducerState, Record, StoreError, StreamMeta, JOINED_CHUNK_TARGET};

use crate::tables::{ReadTables, WriteTables};

/// What one layer knows about a key.
#[derive(Debug, PartialEq)]
pub(crate) enum Found<T> {
    /// The layer holds the answer (`None`: deleted, or wiped).
    Here(Option<T>),
    /// Ask the layer below.
    Below,
}

/// The overlay's state of one stream incarnation.
#[derive(Default)]
struct Incarnation {
    id: String,
    /// Wiped since the checkpoint: the tables' rows of it are gone.
    wiped: bool,
    /// Chunks written since the checkpoint (or the wipe), sorted by start,
    /// small appends joined as the tables join them.
    chunks: Vec<(u64, Bytes)>,
    producers: HashMap<String, ProducerState>,
    records: HashMap<String, Record>,
}

impl Incarnation {
    fn clear(&mut self) {
        self.chunks.clear();
        self.producers.clear();
        self.records.clear();
    }

    /// Join the bytes appended at `start` onto the chunk ending there, if
    /// that stays within [`JOINED_CHUNK_TARGET`] (the tables' row rule);
    /// `false`: they need a chunk of their own ([`Self::insert_chunk`]).
    fn join_chunk(&mut self, start: u64, data: &[u8]) -> bool {
        let Some((row_start, row)) = self.chunks.last_mut() else { return false };
        if *row_start + row.len() as u64 != start || row.len() + data.len() > JOINED_CHUNK_TARGET {
            return false;
        }
        let mut joined = BytesMut::with_capacity(row.len() + data.len());
        joined.extend_from_slice(row);
        joined.extend_from_slice(data);
        *row = joined.freeze();
        true
    }

    fn insert_chunk(&mut self, start: u64, data: Bytes) {
        let at = self.chunks.partition_point(|(s, _)| *s < start);
        self.chunks.insert(at, (start, data));
    }

    /// The chunk containing `pos` (if any), then every chunk starting in
    /// `(pos, until)`.
    fn covering(&self, pos: u64, until: u64) -> impl Iterator<Item = &(u64, Bytes)> {
        let after = self.chunks.partition_point(|(start, _)| *start <= pos);
        let first = after.checked_sub(1).filter(|&i| {
            let (start, data) = &self.chunks[i];
            start + data.len() as u64 > pos
        });
        let end = self.chunks.partition_point(|(start, _)| *start < until).max(after);
        first.map(|i| &self.chunks[i]).into_iter().chain(self.chunks[after..end].iter())
    }

    /// Where the overlay's chunks begin (`None`: it holds none).
    fn first_start(&self) -> Option<u64> {
        self.chunks.first().map(|(s, _)| *s)
    }
}

/// The overlay's state of one stream path.
#[derive(Default)]
struct PathEntry {
    /// `Some(Some(meta))`: written; `Some(None)`: deleted; `None`: the
    /// tables' meta stands.
    meta: Option<Option<StreamMeta>>,
    incarnations: Vec<Incarnation>,
}

impl PathEntry {
    fn incarnation(&self, id: &str) -> Option<&Incarnation> {
        self.incarnations.iter().find(|i| i.id == id)
    }

    fn incarnation_mut(&mut self, id: &str) -> &mut Incarnation {
        match self.incarnations.iter().position(|i| i.id == id) {
            Some(at) => &mut self.incarnations[at],
            None => {
                // Nearly every stream has one incarnation in the overlay; a
                // pushed-to empty Vec would reserve four (~600 B a stream).
                self.incarnations.reserve_exact(1);
                self.incarnations.push(Incarnation { id: id.to_owned(), ..Default::default() });
                let last = self.incarnations.len() - 1;
                &mut self.incarnations[last]
            }
        }
    }
}

/// How a read of one incarnation's chunks splits between the overlay and
/// the tables (see [`Overlay::chunks`]).
#[derive(Debug, Default)]
pub(crate) struct ChunkPart {
    /// Read the tables for `[from, below)` first (`None`: nothing there to
    /// read: the range starts in the overlay, or the incarnation was wiped).
    pub below: Option<u64>,
    /// The overlay's chunks covering the range, in order.
    pub chunks: Vec<Chunk>,
}

/// Durable writes not yet in the tables (see the module docs).
#[derive(Default)]
pub(crate) struct Overlay {
    paths: BTreeMap<String, PathEntry>,
}

impl Overlay {
    /// Stream paths written since the checkpoint.
    pub(crate) fn streams(&self) -> usize {
        self.paths.len()
    }

    pub(crate) fn clear(&mut self) {
        self.paths.clear();
    }

    /// Merge the net writes of one applied commit (preconditions checked).
    pub(crate) fn apply(&mut self, writes: &NetWrites) {
        for (path, incarnation) in &writes.wiped {
            self.wipe(path, incarnation);
        }
        for m in &writes.metas {
            match &m.effect {
                MetaEffect::Put(meta) => self.put_meta(meta.clone()),
                MetaEffect::Delete => self.entry(&m.path).meta = Some(None),
                MetaEffect::CheckOnly => {}
            }
        }
        for c in &writes.chunks {
            let inc = self.entry(&c.path).incarnation_mut(&c.incarnation);
            // Copied: a request body is often a slice of a larger network
            // buffer, which the overlay must not pin.
            if !inc.join_chunk(c.start, &c.data) {
                inc.insert_chunk(c.start, Bytes::copy_from_slice(&c.data));
            }
        }
        for p in &writes.producers {
            self.entry(&p.path).incarnation_mut(&p.incarnation).producers.insert(p.producer_id.clone(), p.state);
        }
        for r in &writes.records {
            self.entry(&r.path).incarnation_mut(&r.incarnation).records.insert(r.key.clone(), r.record.clone());
        }
    }

    /// Merge `newer` (a later batch) on top of this overlay.
    pub(crate) fn absorb(&mut self, newer: Overlay) {
        for (path, entry) in newer.paths {
            let mine = self.entry(&path);
            if let Some(meta) = entry.meta {
                mine.meta = Some(meta);
            }
            for inc in entry.incarnations {
                let target = mine.incarnation_mut(&inc.id);
                if inc.wiped {
                    target.clear();
                    target.wiped = true;
                }
                for (start, data) in inc.chunks {
                    if !target.join_chunk(start, &data) {
                        target.insert_chunk(start, data);
                    }
                }
                target.producers.extend(inc.producers);
                target.records.extend(inc.records);
            }
        }
    }

    pub(crate) fn put_meta(&mut self, meta: StreamMeta) {
        let entry = self.entry(&meta.path);
        entry.meta = Some(Some(meta));
    }

    fn entry(&mut self, path: &str) -> &mut PathEntry {
        if !self.paths.contains_key(path) {
            self.paths.insert(path.to_owned(), PathEntry::default());
        }
        self.paths.get_mut(path).unwrap_or_else(|| unreachable!("inserted above"))
    }

    fn wipe(&mut self, path: &str, incarnation: &str) {
        let inc = self.entry(path).incarnation_mut(incarnation);
        inc.clear();
        inc.wiped = true;
    }

    fn incarnation(&self, path: &str, incarnation: &str) -> Option<&Incarnation> {
        self.paths.get(path)?.incarnation(incarnation)
    }

    pub(crate) fn meta(&self, path: &str) -> Found<&StreamMeta> {
        match self.paths.get(path).and_then(|e| e.meta.as_ref()) {
            Some(meta) => Found::Here(meta.as_ref()),
            None => Found::Below,
        }
    }

    pub(crate) fn producer(&self, path: &str, incarnation: &str, id: &str) -> Found<ProducerState> {
        match self.incarnation(path, incarnation) {
            Some(inc) => match inc.producers.get(id) {
                Some(state) => Found::Here(Some(*state)),
                None if inc.wiped => Found::Here(None),
                None => Found::Below,
            },
            None => Found::Below,
        }
    }

    pub(crate) fn record(&self, path: &str, incarnation: &str, key: &str) -> Found<&Record> {
        match self.incarnation(path, incarnation) {
            Some(inc) => match inc.records.get(key) {
                Some(record) => Found::Here(Some(record)),
                None if inc.wiped => Found::Here(None),
                None => Found::Below,
            },
            None => Found::Below,
        }
    }

    /// Whether a chunk here overlaps `[start, end)`; `Found::Below` when the
    /// layers below must be asked too.
    pub(crate) fn chunk_overlaps(&self, path: &str, incarnation: &str, start: u64, end: u64) -> Found<()> {
        match self.incarnation(path, incarnation) {
            Some(inc) if inc.covering(start, end).next().is_some() => Found::Here(Some(())),
            Some(inc) if inc.wiped => Found::Here(None),
            // The tables hold an incarnation's chunks only below its first
            // chunk here (chunks are stored in position order: each starts
            // at the tail its commit advanced; reads rely on the same rule,
            // see `chunks`). So an append past that point, the common case,
            // costs no B-tree lookup.
            Some(inc) if inc.first_start().is_some_and(|first| first <= start) => Found::Here(None),
            _ => Found::Below,
        }
    }

    /// The overlay's part of a read of `[from, until)`, and what to read from
    /// the tables before it.
    pub(crate) fn chunks(&self, path: &str, incarnation: &str, from: u64, until: u64) -> ChunkPart {
        let Some(inc) = self.incarnation(path, incarnation) else {
            return ChunkPart { below: Some(until), chunks: Vec::new() };
        };
        let chunks =
            inc.covering(from, until).map(|(start, data)| Chunk { start: *start, data: data.clone() }).collect();
        let below = match inc.first_start() {
            _ if inc.wiped => None,
            Some(first) if first <= from => None,
            Some(first) => Some(first.min(until)),
            None => Some(until),
        };
        ChunkPart { below, chunks }
    }

    /// Metas of paths in `(after, …)` starting with `prefix`, in path order,
    /// as this overlay knows them (`None`: deleted), stopping after `limit`
    /// live ones: a listing of `limit` never reaches past the last of them.
    pub(crate) fn metas_after(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Vec<(String, Option<StreamMeta>)> {
        let lower = match after {
            Some(a) if a >= prefix => Bound::Excluded(a),
            _ => Bound::Included(prefix),
        };
        let mut out = Vec::new();
        let mut live = 0;
        for (path, entry) in self.paths.range::<str, _>((lower, Bound::Unbounded)) {
            if live >= limit || !path.starts_with(prefix) {
                break;
            }
            if let Some(meta) = &entry.meta {
                live += usize::from(meta.is_some());
                out.push((path.clone(), meta.clone()));
            }
        }
        out
    }

    /// Write this overlay's net state into the tables (a checkpoint): wipes
    /// first, then metas, chunks, producer states and records.
    pub(crate) fn write_to(&self, tables: &mut WriteTables<'_>) -> Result<(), StoreError> {
        for (path, entry) in &self.paths {
            for inc in entry.incarnations.iter().filter(|i| i.wiped) {
                tables.wipe(path, &inc.id)?;
            }
            match &entry.meta {
                Some(Some(meta)) => tables.put_meta(meta)?,
                Some(None) => tables.remove_meta(path)?,
                None => {}
            }
            for inc in &entry.incarnations {
                for (start, data) in &inc.chunks {
                    tables.put_chunk(path, &inc.id, *start, data)?;
                }
                for (id, state) in &inc.producers {
                    tables.put_producer(path, &inc.id, id, *state)?;
                }
                for (key, record) in &inc.records {
                    tables.put_record(path, &inc.id, key, record)?;
                }
            }
        }
        Ok(())
    }
}

/// Merge a read's parts: the tables' chunks of `[from, below)` (read with
/// `max_bytes`), then the overlay's that do not repeat them, while fewer
/// than `max_bytes` are gathered (always at least one chunk).
pub(crate) fn merge_chunks(mut lower: Vec<Chunk>, upper: Vec<Chunk>, max_bytes: usize) -> Vec<Chunk> {
    let mut gathered: usize = lower.iter().map(|c| c.data.len()).sum();
    // Right after a checkpoint the tables may already hold what the overlay
    // still holds (a joined row reaching into it): skip what they returned.
    let mut end = lower.last().map(|c| c.start + c.data.len() as u64);
    for chunk in upper {
        if !lower.is_empty() && gathered >= max_bytes {
            break;
        }
        let chunk_end = chunk.start + chunk.data.len() as u64;
        let chunk = match end {
            Some(e) if chunk_end <= e => continue,
            // Rows hold whole appends, so this does not happen; slice anyway.
            Some(e) if chunk.start < e => Chunk { start: e, data: chunk.data.slice((e - chunk.start) as usize..) },
            _ => chunk,
        };
        gathered += chunk.data.len();
        end = Some(chunk_end);
        lower.push(chunk);
    }
    lower
}

#[cfg(test)]
mod tests;

/// The state a batch's commits are checked against: the overlays, newest
/// first (the batch's own staged writes, then the shared overlay), over the
/// tables.
pub(crate) struct Layers<'a> {
    pub upper: [&'a Overlay; 2],
    pub tables: &'a ReadTables,
}

impl Layers<'_> {
    /// The current meta of `path`.
    pub(crate) fn meta(&self, path: &str) -> Result<Option<StreamMeta>, StoreError> {
        for layer in self.upper {
            if let Found::Here(meta) = layer.meta(path) {
                return Ok(meta.cloned());
            }
        }
        self.tables.meta(path)
    }
}

impl StateView for Layers<'_> {
    fn meta_stamp(&self, path: &str) -> Result<Option<MetaStamp>, StoreError> {
        for layer in self.upper {
            if let Found::Here(meta) = layer.meta(path) {
                return Ok(meta.map(MetaStamp::of));
            }
        }
        self.tables.meta_stamp(path)
    }

    fn chunk_overlaps(&self, path: &str, incarnation: &str, start: u64, end: u64) -> Result<bool, StoreError> {
        for layer in self.upper {
            if let Found::Here(hit) = layer.chunk_overlaps(path, incarnation, start, end) {
                return Ok(hit.is_some());
            }
        }
        self.tables.chunk_overlaps(path, incarnation, start, end)
    }

    fn record_revision(&self, path: &str, incarnation: &str, key: &str) -> Result<Option<u64>, StoreError> {
        for layer in self.upper {
            if let Found::Here(record) = layer.record(path, incarnation, key) {
                return Ok(record.map(|r| r.revision));
            }
        }
        self.tables.record_revision(path, incarnation, key)
    }
}

/// `[from, until)` of in-memory chunks as one buffer (`None`: a byte of it
/// is not there). One chunk covering the range is sliced, not copied.
pub(crate) fn join_chunks(chunks: &[Chunk], from: u64, until: u64) -> Option<Bytes> {
    if from >= until {
        return Some(Bytes::new());
    }
    let len = usize::try_from(until - from).ok()?;
    let covering = |c: &Chunk| c.start <= from && c.start + c.data.len() as u64 >= until;
    if let Some(c) = chunks.iter().find(|c| covering(c)) {
        let at = (from - c.start) as usize;
        return Some(c.data.slice(at..at + len));
    }
    let mut out = BytesMut::with_capacity(len);
    let mut pos = from;
    for c in chunks {
        let end = c.start + c.data.len() as u64;
        if end <= pos {
            continue;
        }
        if c.start > pos {
            return None;
        }
        let (lo, hi) = ((pos - c.start) as usize, (end.min(until) - c.start) as usize);
        out.extend_from_slice(&c.data[lo..hi]);
        pos = end.min(until);
        if pos == until {
            break;
        }
    }
    (pos == until).then(|| out.freeze())
}

/// A listing page: the tables' metas (`lower`, fetched with `limit` plus one
/// per overlay entry) merged with the overlay's (`upper`, which win on a
/// shared path; `None` hides the path), in path order, at most `limit`.
pub(crate) fn merge_listing(
    lower: Vec<StreamMeta>,
    upper: Vec<(String, Option<StreamMeta>)>,
    limit: usize,
) -> Vec<StreamMeta> {
    let mut out = Vec::with_capacity(limit.min(lower.len() + upper.len()));
    let mut lower = lower.into_iter().peekable();
    let mut upper = upper.into_iter().peekable();
    while out.len() < limit {
        let take_upper = match (lower.peek(), upper.peek()) {
            (None, None) => break,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some(l), Some((path, _))) => {
                if *l.path == **path {
                    lower.next(); // replaced or hidden by the overlay
                    continue;
                }
                **path < *l.path
            }
        };
        if take_upper {
            if let Some((_, Some(meta))) = upper.next() {
                out.push(meta);
            }
        } else if let Some(meta) = lower.next() {
            out.push(meta);
        }
    }
    out
}
