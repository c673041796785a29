//! The redb schema and the table operations shared by readers and the writer.
//!
//! - `meta`: path → encoded [`StreamMeta`] (see [`crate::codec`]).
//! - `chunks.v2`: (path, incarnation, start) → (crc32, bytes). Tuple keys
//!   sort by path, then incarnation, then start, so one stream incarnation's
//!   chunks are a contiguous key range in position order.
//! - `producers.v2`: (path, incarnation, producer id) → (epoch, last_seq, crc32).
//! - `records.v2`: (path, incarnation, key) → (revision, crc32, value).
//! - `log`: `"applied"` → the LSN of the last log entry the tables hold (see
//!   [`crate::redo`]).
//!
//! Every value is checked on read (see [`crate::codec`]). The tables of the
//! first format (`chunks`, `producers`, `records`: no checksums) are refused
//! on open.

use std::ops::Bound;

use bytes::{Bytes, BytesMut};
use ds_core::fold::{MetaEffect, MetaStamp, NetWrites, StateView};
use ds_core::{Chunk, ProducerState, Record, StoreError, StreamMeta};
use redb::{ReadOnlyTable, ReadableTable, ReadableTableMetadata, Table, TableDefinition, WriteTransaction};

use crate::codec::{self, decode_meta, encode_meta};
use crate::error::storage;

pub(crate) type ChunkKey = (&'static str, &'static str, u64);
pub(crate) type ChunkValue = (u32, &'static [u8]);
pub(crate) type ProducerKey = (&'static str, &'static str, &'static str);
pub(crate) type ProducerValue = (u64, u64, u32);
pub(crate) type RecordKey = (&'static str, &'static str, &'static str);
pub(crate) type RecordValue = (u64, u32, &'static [u8]);

pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
pub(crate) const CHUNKS: TableDefinition<ChunkKey, ChunkValue> = TableDefinition::new("chunks.v2");
pub(crate) const PRODUCERS: TableDefinition<ProducerKey, ProducerValue> = TableDefinition::new("producers.v2");
pub(crate) const RECORDS: TableDefinition<RecordKey, RecordValue> = TableDefinition::new("records.v2");
pub(crate) const LOG: TableDefinition<&str, u64> = TableDefinition::new("log");
const APPLIED: &str = "applied";
/// Small appends extend the row before them up to this many bytes (see
/// [`WriteTables::put_chunk`]).
const ROW_TARGET: usize = ds_core::JOINED_CHUNK_TARGET;
/// The first format's tables, without checksums.
const LEGACY_CHUNKS: TableDefinition<ChunkKey, &[u8]> = TableDefinition::new("chunks");
const LEGACY_PRODUCERS: TableDefinition<ProducerKey, (u64, u64)> = TableDefinition::new("producers");
const LEGACY_RECORDS: TableDefinition<RecordKey, (u64, &[u8])> = TableDefinition::new("records");

/// Whether the database holds records in the first format's tables.
pub(crate) fn has_legacy_records(txn: &redb::ReadTransaction) -> Result<bool, redb::Error> {
    fn rows<K: redb::Key + 'static, V: redb::Value + 'static>(
        txn: &redb::ReadTransaction,
        table: TableDefinition<K, V>,
    ) -> Result<u64, redb::Error> {
        match txn.open_table(table) {
            Ok(t) => Ok(t.len()?),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }
    Ok(rows(txn, LEGACY_CHUNKS)? + rows(txn, LEGACY_PRODUCERS)? + rows(txn, LEGACY_RECORDS)? > 0)
}

/// The LSN of the last log entry in the tables (0: none yet).
pub(crate) fn applied_lsn(txn: &redb::ReadTransaction) -> Result<u64, StoreError> {
    match txn.open_table(LOG) {
        Ok(table) => Ok(table.get(APPLIED).map_err(storage)?.map_or(0, |v| v.value())),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(0),
        Err(e) => Err(storage(e)),
    }
}

pub(crate) fn get_meta(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    path: &str,
) -> Result<Option<StreamMeta>, StoreError> {
    match table.get(path).map_err(storage)? {
        Some(bytes) => decode_meta(path, bytes.value()).map(Some),
        None => Ok(None),
    }
}

/// Start and length of the stored chunk containing `pos`, if any.
fn chunk_containing(
    table: &impl ReadableTable<ChunkKey, ChunkValue>,
    path: &str,
    incarnation: &str,
    pos: u64,
) -> Result<Option<(u64, u64)>, StoreError> {
    let mut before = table.range((path, incarnation, 0)..=(path, incarnation, pos)).map_err(storage)?;
    match before.next_back() {
        Some(entry) => {
            let (key, value) = entry.map_err(storage)?;
            let (start, len) = (key.value().2, value.value().1.len() as u64);
            Ok((start + len > pos).then_some((start, len)))
        }
        None => Ok(None),
    }
}

/// [`ds_core::StreamStore::read_chunks`] over any (read or write) table.
pub(crate) fn read_chunks(
    table: &impl ReadableTable<ChunkKey, ChunkValue>,
    path: &str,
    incarnation: &str,
    from: u64,
    until: u64,
    max_bytes: usize,
) -> Result<Vec<Chunk>, StoreError> {
    if from >= until {
        return Ok(Vec::new());
    }
    // Begin at the chunk containing `from` (returned whole), else at `from`.
    let first = chunk_containing(table, path, incarnation, from)?.map_or(from, |(start, _)| start);
    let range = table.range((path, incarnation, first)..(path, incarnation, until)).map_err(storage)?;
    // One buffer for the whole page, sliced per chunk: a catch-up read of
    // many small appends then costs one allocation instead of one per append.
    let mut buf = BytesMut::new();
    let mut spans: Vec<(u64, usize, usize)> = Vec::new();
    for entry in range {
        if !spans.is_empty() && buf.len() >= max_bytes {
            break;
        }
        let (key, value) = entry.map_err(storage)?;
        let (sum, bytes) = value.value();
        codec::check_chunk(path, key.value().2, sum, bytes)?;
        if buf.capacity() - buf.len() < bytes.len() {
            buf.reserve(bytes.len().max(max_bytes.min(1 << 20).saturating_sub(buf.len())));
        }
        spans.push((key.value().2, buf.len(), bytes.len()));
        buf.extend_from_slice(bytes);
    }
    let buf = buf.freeze();
    Ok(spans.into_iter().map(|(start, at, len)| Chunk { start, data: buf.slice(at..at + len) }).collect())
}

/// [`ds_core::StreamStore::read_contiguous`]: `[from, until)` as one buffer
/// (the caller bounds its length), `None` where a byte of it is not stored.
pub(crate) fn read_contiguous(
    table: &impl ReadableTable<ChunkKey, ChunkValue>,
    path: &str,
    incarnation: &str,
    from: u64,
    until: u64,
) -> Result<Option<Bytes>, StoreError> {
    let first = chunk_containing(table, path, incarnation, from)?.map_or(from, |(start, _)| start);
    let mut out = BytesMut::with_capacity(usize::try_from(until.saturating_sub(from)).unwrap_or(0));
    let mut pos = from;
    for entry in table.range((path, incarnation, first)..(path, incarnation, until)).map_err(storage)? {
        let (key, value) = entry.map_err(storage)?;
        let (start, (sum, bytes)) = (key.value().2, value.value());
        if start > pos {
            return Ok(None); // a gap: the chunk-wise read reports it
        }
        codec::check_chunk(path, start, sum, bytes)?;
        let end = start + bytes.len() as u64;
        if end <= pos {
            continue;
        }
        // Both bounds lie within this chunk, whose length is a usize.
        let (lo, hi) = ((pos - start) as usize, (end.min(until) - start) as usize);
        out.extend_from_slice(&bytes[lo..hi]);
        pos = end.min(until);
        if pos == until {
            break;
        }
    }
    Ok((pos == until).then(|| out.freeze()))
}

pub(crate) fn get_producer(
    table: &impl ReadableTable<ProducerKey, ProducerValue>,
    path: &str,
    incarnation: &str,
    producer_id: &str,
) -> Result<Option<ProducerState>, StoreError> {
    let found = table.get((path, incarnation, producer_id)).map_err(storage)?;
    found.map(|v| codec::decode_producer(producer_id, v.value())).transpose()
}

pub(crate) fn get_record(
    table: &impl ReadableTable<RecordKey, RecordValue>,
    path: &str,
    incarnation: &str,
    key: &str,
) -> Result<Option<Record>, StoreError> {
    let found = table.get((path, incarnation, key)).map_err(storage)?;
    found
        .map(|v| {
            let (revision, sum, value) = v.value();
            codec::check_record(path, key, revision, sum, value)?;
            Ok(Record { revision, value: Bytes::copy_from_slice(value) })
        })
        .transpose()
}

/// Metas in path order strictly after `after`, at most `limit`.
pub(crate) fn list_metas(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<StreamMeta>, StoreError> {
    let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
    let range = table.range::<&str>((lower, Bound::Unbounded)).map_err(storage)?;
    let mut out = Vec::new();
    for entry in range.take(limit) {
        let (key, value) = entry.map_err(storage)?;
        out.push(decode_meta(key.value(), value.value())?);
    }
    Ok(out)
}

/// Metas whose path starts with `prefix`, strictly after `after`, at most `limit`.
pub(crate) fn list_metas_with_prefix(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    prefix: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<StreamMeta>, StoreError> {
    let lower = match after {
        Some(a) if a >= prefix => Bound::Excluded(a),
        _ => Bound::Included(prefix),
    };
    let range = table.range::<&str>((lower, Bound::Unbounded)).map_err(storage)?;
    let mut out = Vec::new();
    for entry in range {
        if out.len() >= limit {
            break;
        }
        let (key, value) = entry.map_err(storage)?;
        if !key.value().starts_with(prefix) {
            break;
        }
        out.push(decode_meta(key.value(), value.value())?);
    }
    Ok(out)
}

/// The third key part of every row of `(path, incarnation)` in a table keyed
/// by `(path, incarnation, name)`. String names have no upper bound key, so
/// they are collected (a handful per stream) before being removed.
fn keys_of<V: redb::Value + 'static>(
    table: &impl ReadableTable<(&'static str, &'static str, &'static str), V>,
    path: &str,
    incarnation: &str,
) -> Result<Vec<String>, StoreError> {
    let mut names = Vec::new();
    for entry in table.range((path, incarnation, "")..).map_err(storage)? {
        let (key, _) = entry.map_err(storage)?;
        let (p, i, name) = key.value();
        if p != path || i != incarnation {
            break;
        }
        names.push(name.to_owned());
    }
    Ok(names)
}

/// The tables opened inside a write transaction: a checkpoint writing the
/// overlay, or recovery replaying the log.
pub(crate) struct WriteTables<'txn> {
    meta: Table<'txn, &'static str, &'static [u8]>,
    chunks: Table<'txn, ChunkKey, ChunkValue>,
    producers: Table<'txn, ProducerKey, ProducerValue>,
    records: Table<'txn, RecordKey, RecordValue>,
    log: Table<'txn, &'static str, u64>,
}

impl<'txn> WriteTables<'txn> {
    pub(crate) fn open(txn: &'txn WriteTransaction) -> Result<Self, StoreError> {
        Ok(Self {
            meta: txn.open_table(META).map_err(storage)?,
            chunks: txn.open_table(CHUNKS).map_err(storage)?,
            producers: txn.open_table(PRODUCERS).map_err(storage)?,
            records: txn.open_table(RECORDS).map_err(storage)?,
            log: txn.open_table(LOG).map_err(storage)?,
        })
    }

    /// Record that the tables now hold the log up to entry `lsn`.
    pub(crate) fn set_applied_lsn(&mut self, lsn: u64) -> Result<(), StoreError> {
        self.log.insert(APPLIED, lsn).map_err(storage)?;
        Ok(())
    }

    /// Apply net writes whose preconditions were checked (wipes first, see
    /// [`NetWrites`]); `metas` is their [`codec::encode_metas`]. An error
    /// leaves the transaction half-applied: the caller must abort it.
    pub(crate) fn apply(&mut self, writes: &NetWrites, metas: &[Option<Vec<u8>>]) -> Result<(), StoreError> {
        for (path, incarnation) in &writes.wiped {
            self.wipe(path, incarnation)?;
        }
        for (m, encoded) in writes.metas.iter().zip(metas) {
            match (&m.effect, encoded) {
                (MetaEffect::Put(_), Some(encoded)) => {
                    self.meta.insert(&*m.path, encoded.as_slice()).map_err(storage)?;
                }
                (MetaEffect::Put(_), None) => {
                    return Err(StoreError::backend("local store write", format!("meta of {} not encoded", m.path)));
                }
                (MetaEffect::Delete, _) => self.remove_meta(&m.path)?,
                (MetaEffect::CheckOnly, _) => {}
            }
        }
        for c in &writes.chunks {
            self.put_chunk(&c.path, &c.incarnation, c.start, &c.data)?;
        }
        for p in &writes.producers {
            self.put_producer(&p.path, &p.incarnation, &p.producer_id, p.state)?;
        }
        for r in &writes.records {
            self.put_record(&r.path, &r.incarnation, &r.key, &r.record)?;
        }
        Ok(())
    }

    pub(crate) fn put_meta(&mut self, meta: &StreamMeta) -> Result<(), StoreError> {
        self.meta.insert(&*meta.path, encode_meta(meta)?.as_slice()).map_err(storage)?;
        Ok(())
    }

    pub(crate) fn remove_meta(&mut self, path: &str) -> Result<(), StoreError> {
        self.meta.remove(path).map_err(storage)?;
        Ok(())
    }

    pub(crate) fn put_producer(
        &mut self,
        path: &str,
        incarnation: &str,
        id: &str,
        state: ProducerState,
    ) -> Result<(), StoreError> {
        self.producers.insert((path, incarnation, id), codec::encode_producer(state)).map_err(storage)?;
        Ok(())
    }

    pub(crate) fn put_record(
        &mut self,
        path: &str,
        incarnation: &str,
        key: &str,
        record: &Record,
    ) -> Result<(), StoreError> {
        let (revision, value) = (record.revision, record.value.as_ref());
        self.records
            .insert((path, incarnation, key), (revision, codec::record_sum(revision, value), value))
            .map_err(storage)?;
        Ok(())
    }

    /// Store the bytes appended at `start`. A small append that continues a
    /// row still under [`ROW_TARGET`] extends that row instead of adding one:
    /// a catch-up read then walks one row per few KiB rather than one per
    /// append (per-row cost dominated reads of small appends). Rows still
    /// start at append boundaries and hold whole appends, so a row holds
    /// whole JSON messages; bytes at a position never change.
    pub(crate) fn put_chunk(
        &mut self,
        path: &str,
        incarnation: &str,
        start: u64,
        data: &[u8],
    ) -> Result<(), StoreError> {
        if data.len() < ROW_TARGET {
            if let Some((row_start, sum, joined)) = self.extendable_row(path, incarnation, start, data)? {
                let key = (path, incarnation, row_start);
                self.chunks.insert(key, (sum, joined.as_slice())).map_err(storage)?;
                return Ok(());
            }
        }
        self.chunks.insert((path, incarnation, start), (codec::chunk_sum(data), data)).map_err(storage)?;
        Ok(())
    }

    /// The row ending exactly at `start`, if `data` fits in it, as its start
    /// and its bytes followed by `data` with their checksum. The checksum is
    /// combined from the row's stored one, not recomputed from its bytes, so
    /// a row damaged on disk still fails its check once extended.
    fn extendable_row(
        &self,
        path: &str,
        incarnation: &str,
        start: u64,
        data: &[u8],
    ) -> Result<Option<(u64, u32, Vec<u8>)>, StoreError> {
        let mut before = self.chunks.range((path, incarnation, 0)..(path, incarnation, start)).map_err(storage)?;
        let Some(entry) = before.next_back() else { return Ok(None) };
        let (key, value) = entry.map_err(storage)?;
        let (row_start, (row_sum, row)) = (key.value().2, value.value());
        if row_start + row.len() as u64 != start || row.len() + data.len() > ROW_TARGET {
            return Ok(None);
        }
        let mut sum = crc32fast::Hasher::new_with_initial_len(row_sum, row.len() as u64);
        sum.combine(&crc32fast::Hasher::new_with_initial_len(codec::chunk_sum(data), data.len() as u64));
        let mut joined = Vec::with_capacity(row.len() + data.len());
        joined.extend_from_slice(row);
        joined.extend_from_slice(data);
        Ok(Some((row_start, sum.finalize(), joined)))
    }

    /// Remove the chunk rows of `(path, incarnation)` that end at or before
    /// `below` (a trim's reclaim); a row straddling it stays whole.
    pub(crate) fn drop_chunks_below(&mut self, path: &str, incarnation: &str, below: u64) -> Result<(), StoreError> {
        self.chunks
            .retain_in((path, incarnation, 0)..(path, incarnation, below), |key, (_, data)| {
                key.2 + data.len() as u64 > below
            })
            .map_err(storage)
    }

    /// Remove every chunk and producer state of `(path, incarnation)`.
    pub(crate) fn wipe(&mut self, path: &str, incarnation: &str) -> Result<(), StoreError> {
        self.chunks.retain_in((path, incarnation, 0)..=(path, incarnation, u64::MAX), |_, _| false).map_err(storage)?;
        for id in keys_of(&self.producers, path, incarnation)? {
            self.producers.remove((path, incarnation, id.as_str())).map_err(storage)?;
        }
        for key in keys_of(&self.records, path, incarnation)? {
            self.records.remove((path, incarnation, key.as_str())).map_err(storage)?;
        }
        Ok(())
    }

    /// Raise the stored `touched_at_ms` of `(path, incarnation)` to `at_ms`
    /// without a version bump. Returns whether anything was written.
    pub(crate) fn apply_touch(&mut self, path: &str, incarnation: &str, at_ms: i64) -> Result<bool, StoreError> {
        let Some(mut meta) = get_meta(&self.meta, path)? else {
            return Ok(false);
        };
        if *meta.incarnation != *incarnation || meta.touched_at_ms >= at_ms {
            return Ok(false);
        }
        meta.touched_at_ms = at_ms;
        self.meta.insert(path, encode_meta(&meta)?.as_slice()).map_err(storage)?;
        Ok(true)
    }
}

/// The tables of one read transaction, opened once: the writer checks
/// commits against the same snapshot until the next checkpoint changes the
/// tables (between checkpoints nothing else writes them).
pub(crate) struct ReadTables {
    meta: ReadOnlyTable<&'static str, &'static [u8]>,
    chunks: ReadOnlyTable<ChunkKey, ChunkValue>,
    records: ReadOnlyTable<RecordKey, RecordValue>,
}

impl ReadTables {
    pub(crate) fn open(txn: &redb::ReadTransaction) -> Result<Self, StoreError> {
        Ok(Self {
            meta: txn.open_table(META).map_err(storage)?,
            chunks: txn.open_table(CHUNKS).map_err(storage)?,
            records: txn.open_table(RECORDS).map_err(storage)?,
        })
    }

    pub(crate) fn meta(&self, path: &str) -> Result<Option<StreamMeta>, StoreError> {
        get_meta(&self.meta, path)
    }
}

impl StateView for ReadTables {
    fn meta_stamp(&self, path: &str) -> Result<Option<MetaStamp>, StoreError> {
        Ok(get_meta(&self.meta, path)?.map(|m| MetaStamp::of(&m)))
    }

    fn record_revision(&self, path: &str, incarnation: &str, key: &str) -> Result<Option<u64>, StoreError> {
        Ok(get_record(&self.records, path, incarnation, key)?.map(|r| r.revision))
    }

    fn chunk_overlaps(&self, path: &str, incarnation: &str, start: u64, end: u64) -> Result<bool, StoreError> {
        if chunk_containing(&self.chunks, path, incarnation, start)?.is_some() {
            return Ok(true);
        }
        let mut inside = self.chunks.range((path, incarnation, start)..(path, incarnation, end)).map_err(storage)?;
        Ok(inside.next().is_some())
    }
}
