//! The commit rules, written once: what a [`Commit`] means for the stored
//! rows, as a pure fold every substrate calls.
//!
//! A substrate applies a commit in two steps:
//! 1. [`NetWrites::fold`] folds the ops, in order, into the **net writes**:
//!    per stream meta the precondition on the *stored* record (the first op's)
//!    and the effect (the last op's); the chunks and producer states to store;
//!    the incarnations whose rows the commit wipes. Preconditions of later ops
//!    on the same meta are checked here, against the state left by the earlier
//!    ops — a commit that contradicts itself fails without touching storage.
//! 2. The substrate checks the stored-state preconditions atomically with
//!    applying the writes: memory and local call [`NetWrites::check`] against
//!    a [`StateView`] of their state inside their write lock / transaction;
//!    AWS turns each [`MetaCond`] into a DynamoDB condition expression.
//!
//! # Semantics
//! - Ops are evaluated **in order**, each against the state left by the ops
//!   before it (so `DeleteStream` then `PutMeta { expect: Absent }` on one path
//!   re-creates it; the net write is one conditional put).
//! - `PutMeta { expect: Absent }` holds when no meta record exists;
//!   `PutMeta { expect: Version(v) }` when the record exists with version `v`
//!   **and** the incarnation of the meta being written (a stale writer never
//!   resurrects a deleted incarnation over a re-created stream that happens to
//!   reach the same version); `PutMeta { expect: VersionAt { v, tail } }`
//!   when, besides, the stored tail is `tail`.
//! - `DeleteStream` holds when the record exists with `expect_version` and the
//!   named incarnation. It wipes the incarnation's chunks and producer states,
//!   including those written by earlier ops of the same commit.
//! - `PutChunk` holds when the chunk overlaps no stored chunk of its
//!   `(path, incarnation)` (unless the commit wiped that incarnation first)
//!   and no earlier chunk of the commit: positions are stable forever, so an
//!   overlapping write can only come from a stale writer. Empty chunks hold
//!   and are not stored.
//! - `PutProducer` has no precondition; the last write per producer wins.
//! - `PutRecord` holds when the stored record of its key matches `expect`
//!   (absent, or exactly that revision) — checked against the state left by
//!   earlier ops, so a wiped incarnation's records read as absent. Keys and
//!   values over [`MAX_RECORD_KEY_BYTES`] / [`MAX_RECORD_BYTES`] fail the
//!   commit with [`StoreError::TooLarge`].
//!
//! If any op fails, the whole commit fails with [`StoreError::Conflict`] and
//! nothing is applied.

use std::sync::Arc;

use bytes::Bytes;

use crate::{
    Commit, Expect, Op, ProducerState, Record, RecordExpect, StoreError, StreamMeta, MAX_RECORD_BYTES,
    MAX_RECORD_KEY_BYTES,
};

/// The stored state a commit's preconditions are checked against (memory
/// and local stores implement it over their state inside the write lock).
pub trait StateView {
    /// Version, incarnation and tail of the stored meta record at `path`.
    fn meta_stamp(&self, path: &str) -> Result<Option<MetaStamp>, StoreError>;
    /// Whether a stored chunk of `(path, incarnation)` overlaps `[start, end)`
    /// (`start < end`).
    fn chunk_overlaps(&self, path: &str, incarnation: &str, start: u64, end: u64) -> Result<bool, StoreError>;
    /// The revision of the stored record `key` of `(path, incarnation)`.
    fn record_revision(&self, path: &str, incarnation: &str, key: &str) -> Result<Option<u64>, StoreError>;
}

/// What a meta precondition is checked against: the stored record's
/// version, incarnation and tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaStamp {
    pub version: u64,
    pub incarnation: Arc<str>,
    pub tail: u64,
}

impl MetaStamp {
    pub fn of(meta: &StreamMeta) -> Self {
        Self { version: meta.version, incarnation: meta.incarnation.clone(), tail: meta.tail }
    }
}

/// Precondition on a stream's stored meta record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaCond {
    /// No meta record exists.
    Absent,
    /// The record exists with this version *and* incarnation, and, when
    /// `tail` is set, this tail ([`Expect::VersionAt`]).
    Version { version: u64, incarnation: Arc<str>, tail: Option<u64> },
}

impl MetaCond {
    fn holds(&self, stored: Option<(u64, &str, u64)>) -> bool {
        match (self, stored) {
            (Self::Absent, None) => true,
            (Self::Version { version, incarnation, tail }, Some((v, inc, t))) => {
                *version == v && **incarnation == *inc && tail.is_none_or(|tail| tail == t)
            }
            _ => false,
        }
    }
}

/// The net effect of a commit on one stream's meta record.
// Not boxed: a commit has one or two of these, moved once into the write
// set, and a box is an allocation on every append.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum MetaEffect {
    Put(StreamMeta),
    Delete,
    /// Net no-op (created and deleted in one commit): only the precondition
    /// is checked.
    CheckOnly,
}

/// A meta record write: precondition on the stored record, net effect.
#[derive(Debug, Clone, PartialEq)]
pub struct MetaWrite {
    pub path: Arc<str>,
    pub cond: MetaCond,
    pub effect: MetaEffect,
}

/// A chunk to store.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkWrite {
    pub path: Arc<str>,
    pub incarnation: Arc<str>,
    pub start: u64,
    pub data: Bytes,
    /// Whether the stored chunks of its incarnation must be checked for
    /// overlap (false when the commit wiped that incarnation before it).
    pub check_stored: bool,
}

impl ChunkWrite {
    pub fn end(&self) -> u64 {
        self.start + self.data.len() as u64
    }
}

/// A producer state to store.
#[derive(Debug, Clone, PartialEq)]
pub struct ProducerWrite {
    pub path: Arc<str>,
    pub incarnation: Arc<str>,
    pub producer_id: String,
    pub state: ProducerState,
}

/// A record to store, with the precondition on the stored one.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordWrite {
    pub path: Arc<str>,
    pub incarnation: Arc<str>,
    pub key: String,
    pub record: Record,
    /// Precondition on the stored record; `None` when the commit wiped the
    /// incarnation before writing (nothing stored can be in the way).
    pub expect: Option<RecordExpect>,
}

/// Everything one commit writes (see the module docs). Apply order: wipes
/// first, then metas, chunks, producers and records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetWrites {
    /// At most one per path, in the order the paths first appear.
    pub metas: Vec<MetaWrite>,
    pub chunks: Vec<ChunkWrite>,
    /// At most one per `(path, incarnation, producer id)`.
    pub producers: Vec<ProducerWrite>,
    /// At most one per `(path, incarnation, key)`.
    pub records: Vec<RecordWrite>,
    /// `(path, incarnation)` whose stored chunks and producer states the
    /// commit removes (a `DeleteStream`).
    pub wiped: Vec<(Arc<str>, Arc<str>)>,
}

/// Why [`NetWrites::merge`] left the writes as they were.
#[derive(Debug)]
pub enum Merge {
    /// The later writes contradict the earlier ones: they cannot apply
    /// after them (a commit planned on another state).
    Conflict,
    /// The later writes (given back) wipe an incarnation or delete a meta,
    /// or the earlier ones do: apply them as a commit of their own.
    Apart(Box<NetWrites>),
}

/// The record at `write`'s path as left by the ops folded so far:
/// `(version, incarnation, tail)` after a put, nothing after a delete.
fn staged_state(write: &MetaWrite) -> Option<(u64, &str, u64)> {
    match &write.effect {
        MetaEffect::Put(meta) => Some((meta.version, &*meta.incarnation, meta.tail)),
        MetaEffect::Delete | MetaEffect::CheckOnly => None,
    }
}

impl NetWrites {
    /// Fold `commit` into its net writes, checking the preconditions the
    /// commit's own ops impose on each other. Takes the commit by value: its
    /// strings and bytes move into the writes instead of being copied (this
    /// runs on every append).
    pub fn fold(commit: Commit) -> Result<Self, StoreError> {
        // Sized for the usual commit (one meta, at most one chunk), so
        // neither vector grows in steps.
        let (mut metas, mut chunks) = (0, 0);
        for op in &commit.ops {
            match op {
                Op::PutMeta { .. } | Op::DeleteStream { .. } => metas += 1,
                Op::PutChunk { .. } => chunks += 1,
                Op::PutRecord { .. } | Op::PutProducer { .. } => {}
            }
        }
        let mut out = Self { metas: Vec::with_capacity(metas), chunks: Vec::with_capacity(chunks), ..Self::default() };
        for op in commit.ops {
            match op {
                Op::PutMeta { meta, expect } => out.fold_put_meta(meta, expect)?,
                Op::DeleteStream { path, incarnation, expect_version } => {
                    out.fold_delete(path, incarnation, expect_version)?;
                }
                Op::PutChunk { path, incarnation, chunk } => {
                    if chunk.data.is_empty() {
                        continue;
                    }
                    let check_stored = !out.wiped.iter().any(|(p, i)| *p == path && *i == incarnation);
                    let w = ChunkWrite { path, incarnation, start: chunk.start, data: chunk.data, check_stored };
                    let overlaps = out.chunks.iter().any(|c| {
                        c.path == w.path && c.incarnation == w.incarnation && c.start < w.end() && w.start < c.end()
                    });
                    if overlaps {
                        return Err(StoreError::Conflict);
                    }
                    out.chunks.push(w);
                }
                Op::PutRecord { path, incarnation, key, record, expect } => {
                    out.fold_put_record(path, incarnation, key, record, expect)?;
                }
                Op::PutProducer { path, incarnation, producer_id, state } => {
                    out.producers
                        .retain(|p| !(p.path == path && p.incarnation == incarnation && p.producer_id == producer_id));
                    out.producers.push(ProducerWrite { path, incarnation, producer_id, state });
                }
            }
        }
        Ok(out)
    }

    /// Index into `metas` of the write for `path`, if an earlier op made one.
    fn staged(&self, path: &str) -> Option<usize> {
        self.metas.iter().position(|m| *m.path == *path)
    }

    fn fold_put_meta(&mut self, meta: StreamMeta, expect: Expect) -> Result<(), StoreError> {
        let cond = match expect {
            Expect::Absent => MetaCond::Absent,
            Expect::Version(version) => {
                MetaCond::Version { version, incarnation: meta.incarnation.clone(), tail: None }
            }
            Expect::VersionAt { version, tail } => {
                MetaCond::Version { version, incarnation: meta.incarnation.clone(), tail: Some(tail) }
            }
        };
        match self.staged(&meta.path) {
            None => {
                let path = meta.path.clone();
                self.metas.push(MetaWrite { path, cond, effect: MetaEffect::Put(meta) });
            }
            Some(i) => {
                if !cond.holds(staged_state(&self.metas[i])) {
                    return Err(StoreError::Conflict);
                }
                self.metas[i].effect = MetaEffect::Put(meta);
            }
        }
        Ok(())
    }

    fn fold_delete(&mut self, path: Arc<str>, incarnation: Arc<str>, expect_version: u64) -> Result<(), StoreError> {
        let cond = MetaCond::Version { version: expect_version, incarnation: incarnation.clone(), tail: None };
        match self.staged(&path) {
            None => {
                self.metas.push(MetaWrite { path: path.clone(), cond, effect: MetaEffect::Delete });
            }
            Some(i) => {
                if !cond.holds(staged_state(&self.metas[i])) {
                    return Err(StoreError::Conflict);
                }
                let write = &mut self.metas[i];
                // Deleting what this commit created leaves nothing to delete.
                write.effect = if write.cond == MetaCond::Absent { MetaEffect::CheckOnly } else { MetaEffect::Delete };
            }
        }
        // The wipe removes the incarnation's rows, this commit's included.
        self.chunks.retain(|c| !(c.path == path && c.incarnation == incarnation));
        self.producers.retain(|p| !(p.path == path && p.incarnation == incarnation));
        self.records.retain(|r| !(r.path == path && r.incarnation == incarnation));
        self.wiped.push((path, incarnation));
        Ok(())
    }

    fn fold_put_record(
        &mut self,
        path: Arc<str>,
        incarnation: Arc<str>,
        key: String,
        record: Record,
        expect: RecordExpect,
    ) -> Result<(), StoreError> {
        if key.len() > MAX_RECORD_KEY_BYTES || record.value.len() > MAX_RECORD_BYTES {
            return Err(StoreError::TooLarge(format!(
                "record {key:?}: key {} bytes (at most {MAX_RECORD_KEY_BYTES}), value {} bytes (at most \
                 {MAX_RECORD_BYTES})",
                key.len(),
                record.value.len()
            )));
        }
        let earlier = self.records.iter().position(|r| r.path == path && r.incarnation == incarnation && r.key == key);
        let wiped = self.wiped.iter().any(|(p, i)| *p == path && *i == incarnation);
        let expect = match earlier {
            // Against the record an earlier op of this commit wrote.
            Some(i) => {
                let staged = self.records.remove(i);
                if expect != RecordExpect::Revision(staged.record.revision) {
                    return Err(StoreError::Conflict);
                }
                staged.expect
            }
            // Against a wiped incarnation: nothing is stored.
            None if wiped => {
                if expect != RecordExpect::Absent {
                    return Err(StoreError::Conflict);
                }
                None
            }
            None => Some(expect),
        };
        self.records.push(RecordWrite { path, incarnation, key, record, expect });
        Ok(())
    }

    /// Join `later` (the net writes of a commit submitted after this one)
    /// onto these writes, as if both commits' ops were folded as one commit
    /// in order: a group commit applies many appends in one transaction.
    /// `later`'s meta preconditions are checked against the state these
    /// writes leave (its stored-state preconditions pass to the group only
    /// for paths these writes do not touch), its chunks against these
    /// writes' chunks, its records against these writes' records.
    ///
    /// [`Merge::Conflict`]: `later` contradicts these writes (it could not
    /// apply after them); [`Merge::Apart`]: a wipe or a meta delete on
    /// either side, which is applied as its own commit. Either way `self`
    /// is left as it was.
    pub fn merge(&mut self, later: NetWrites) -> Result<(), Merge> {
        let joinable =
            |w: &NetWrites| w.wiped.is_empty() && w.metas.iter().all(|m| matches!(m.effect, MetaEffect::Put(_)));
        if !joinable(self) || !joinable(&later) {
            return Err(Merge::Apart(Box::new(later)));
        }
        // Check everything first: nothing changes unless all of it holds.
        for m in &later.metas {
            if let Some(i) = self.staged(&m.path) {
                if !m.cond.holds(staged_state(&self.metas[i])) {
                    return Err(Merge::Conflict);
                }
            }
        }
        let overlaps = later.chunks.iter().any(|w| {
            self.chunks
                .iter()
                .any(|c| c.path == w.path && c.incarnation == w.incarnation && c.start < w.end() && w.start < c.end())
        });
        if overlaps {
            return Err(Merge::Conflict);
        }
        for r in &later.records {
            let earlier =
                self.records.iter().find(|e| e.path == r.path && e.incarnation == r.incarnation && e.key == r.key);
            if let Some(e) = earlier {
                if r.expect != Some(RecordExpect::Revision(e.record.revision)) {
                    return Err(Merge::Conflict);
                }
            }
        }
        for m in later.metas {
            match self.staged(&m.path) {
                Some(i) => self.metas[i].effect = m.effect,
                None => self.metas.push(m),
            }
        }
        self.chunks.extend(later.chunks);
        for p in later.producers {
            self.producers
                .retain(|e| !(e.path == p.path && e.incarnation == p.incarnation && e.producer_id == p.producer_id));
            self.producers.push(p);
        }
        for mut r in later.records {
            if let Some(i) =
                self.records.iter().position(|e| e.path == r.path && e.incarnation == r.incarnation && e.key == r.key)
            {
                r.expect = self.records.remove(i).expect;
            }
            self.records.push(r);
        }
        Ok(())
    }

    /// Whether `later` (a commit's net writes) would apply on top of these
    /// writes' meta effects: each of its meta preconditions on a path these
    /// writes put holds against the meta they put. A group commit that
    /// failed uses it to find the queued commits planned on top of it
    /// (they cannot apply either).
    pub fn stacks_on(&self, later: &NetWrites) -> bool {
        later.metas.iter().any(|m| {
            self.staged(&m.path).is_some_and(|i| {
                matches!(self.metas[i].effect, MetaEffect::Put(_)) && m.cond.holds(staged_state(&self.metas[i]))
            })
        })
    }

    /// Check the preconditions on stored state. `Ok(())` means every write
    /// may be applied; call it atomically with applying them.
    pub fn check(&self, view: &impl StateView) -> Result<(), StoreError> {
        for m in &self.metas {
            let stored = view.meta_stamp(&m.path)?;
            if !m.cond.holds(stored.as_ref().map(|s| (s.version, &*s.incarnation, s.tail))) {
                return Err(StoreError::Conflict);
            }
        }
        for c in self.chunks.iter().filter(|c| c.check_stored) {
            if view.chunk_overlaps(&c.path, &c.incarnation, c.start, c.end())? {
                return Err(StoreError::Conflict);
            }
        }
        for r in &self.records {
            let Some(expect) = r.expect else { continue };
            let stored = view.record_revision(&r.path, &r.incarnation, &r.key)?;
            let holds = match expect {
                RecordExpect::Absent => stored.is_none(),
                RecordExpect::Revision(rev) => stored == Some(rev),
            };
            if !holds {
                return Err(StoreError::Conflict);
            }
        }
        Ok(())
    }

    /// Nothing to write (every op was an empty chunk).
    pub fn is_empty(&self) -> bool {
        self.metas.is_empty()
            && self.chunks.is_empty()
            && self.producers.is_empty()
            && self.records.is_empty()
            && self.wiped.is_empty()
    }

    /// Number of stored rows the writes touch (metas, chunks, producers,
    /// records).
    pub fn row_count(&self) -> usize {
        self.metas.len() + self.chunks.len() + self.producers.len() + self.records.len()
    }

    /// Total chunk payload bytes.
    pub fn chunk_bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.data.len()).sum()
    }
}

#[cfg(test)]
mod tests;
