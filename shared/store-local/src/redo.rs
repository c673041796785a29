//! What a log entry holds, and recovery from the log.
//!
//! # The commit protocol (the writer thread, one batch at a time)
//! 1. check the batch's commits against its own staged writes, the overlay
//!    and the tables, staging those that hold;
//! 2. append the staged net writes (and flushed touches) to the log as one
//!    entry, numbered by the next log sequence number (LSN), and `fdatasync`
//!    it: **the commit point**;
//! 3. merge the staged writes into the overlay ([`crate::overlay`]): readers
//!    see the batch;
//! 4. acknowledge the commits.
//!
//! So a reader never sees a write that is not durable, and every acknowledged
//! write is in the log or in redb's durable state.
//!
//! About once a second, or when the log passes [`crate::writer`]'s size
//! bound, a *checkpoint* writes the overlay into the tables in one durable
//! redb transaction that also records the LSN of the last entry it covers
//! (the `log` table); then the overlay and the log are emptied. Checkpoints
//! use redb's quick-repair (its allocator state saved, two-phase commit):
//! without it, opening after a crash walked the whole file (measured: about
//! 1 s for 1.3 GB).
//!
//! # Recovery ([`recover`], at open and after a failed checkpoint or log write)
//! redb rolls back to its last durable commit; the entries after the LSN it
//! records are applied again, in order, in one durable transaction, and the
//! log is emptied. A first entry past that LSN that does not directly follow
//! it means entries are missing: the store refuses to open. An entry applies
//! exactly the net writes its batch staged, and replay starts from the state
//! that batch saw, so it lands the same as the overlay did.
//!
//! # Entry body
//! Little-endian; strings and byte strings as `u32 length ‖ bytes`:
//! `commits: u32`, each commit's wipes, metas, chunks, producers and records
//! (each list `count: u32` then items, in [`NetWrites`] apply order), then
//! `touches: u32` and each `(path, incarnation, at_ms: i64)`. A meta is
//! `kind: u8` (1 put, 2 delete), then for a put the stored meta encoding
//! ([`crate::codec`], checksummed like the table's).

use bytes::Bytes;
use ds_core::fold::{ChunkWrite, MetaCond, MetaEffect, MetaWrite, NetWrites, ProducerWrite, RecordWrite};
use ds_core::{ProducerState, Record, StoreError};
use redb::{Database, Durability, ReadableDatabase};

use crate::codec::{decode_meta, encode_metas};
use crate::error::{commit_failure, io_failure, storage};
use crate::tables::{self, WriteTables};
use crate::wal::Wal;

const META_PUT: u8 = 1;
const META_DELETE: u8 = 2;

/// A touch that a batch wrote: `(path, incarnation, at_ms)`.
pub(crate) type TouchWrite<'a> = (&'a str, &'a str, i64);

/// An applied commit and its encoded metas ([`crate::codec::encode_metas`]).
pub(crate) type AppliedCommit<'a> = (&'a NetWrites, Vec<Option<Vec<u8>>>);

/// Encode what one batch applied: its applied commits and written touches.
pub(crate) fn encode_batch(commits: &[AppliedCommit<'_>], touches: &[TouchWrite<'_>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + commits.iter().map(|(w, _)| w.chunk_bytes() + 512).sum::<usize>());
    put_len(&mut out, commits.len());
    for (writes, encoded) in commits {
        put_len(&mut out, writes.wiped.len());
        for (path, incarnation) in &writes.wiped {
            put_bytes(&mut out, path.as_bytes());
            put_bytes(&mut out, incarnation.as_bytes());
        }
        let metas: Vec<(&MetaWrite, &Option<Vec<u8>>)> =
            writes.metas.iter().zip(encoded).filter(|(m, _)| !matches!(m.effect, MetaEffect::CheckOnly)).collect();
        put_len(&mut out, metas.len());
        for (m, encoded) in metas {
            put_bytes(&mut out, m.path.as_bytes());
            match encoded {
                Some(encoded) => {
                    out.push(META_PUT);
                    put_bytes(&mut out, encoded);
                }
                None => out.push(META_DELETE),
            }
        }
        put_len(&mut out, writes.chunks.len());
        for c in &writes.chunks {
            put_bytes(&mut out, c.path.as_bytes());
            put_bytes(&mut out, c.incarnation.as_bytes());
            out.extend_from_slice(&c.start.to_le_bytes());
            put_bytes(&mut out, &c.data);
        }
        put_len(&mut out, writes.producers.len());
        for p in &writes.producers {
            put_bytes(&mut out, p.path.as_bytes());
            put_bytes(&mut out, p.incarnation.as_bytes());
            put_bytes(&mut out, p.producer_id.as_bytes());
            out.extend_from_slice(&p.state.epoch.to_le_bytes());
            out.extend_from_slice(&p.state.last_seq.to_le_bytes());
        }
        put_len(&mut out, writes.records.len());
        for r in &writes.records {
            put_bytes(&mut out, r.path.as_bytes());
            put_bytes(&mut out, r.incarnation.as_bytes());
            put_bytes(&mut out, r.key.as_bytes());
            out.extend_from_slice(&r.record.revision.to_le_bytes());
            put_bytes(&mut out, &r.record.value);
        }
    }
    put_len(&mut out, touches.len());
    for (path, incarnation, at_ms) in touches {
        put_bytes(&mut out, path.as_bytes());
        put_bytes(&mut out, incarnation.as_bytes());
        out.extend_from_slice(&at_ms.to_le_bytes());
    }
    out
}

/// A decoded entry. Preconditions are not logged (they held when the batch
/// ran): the decoded writes carry neutral ones that `apply` does not read.
#[derive(Debug, PartialEq)]
pub(crate) struct Batch {
    pub commits: Vec<NetWrites>,
    pub touches: Vec<(String, String, i64)>,
}

pub(crate) fn decode_batch(lsn: u64, body: &[u8]) -> Result<Batch, StoreError> {
    let mut r = Reader { body, at: 0, lsn };
    let mut commits = Vec::new();
    for _ in 0..r.len()? {
        let mut w = NetWrites::default();
        for _ in 0..r.len()? {
            w.wiped.push((r.string()?.into(), r.string()?.into()));
        }
        for _ in 0..r.len()? {
            let path = r.string()?;
            let effect = match r.u8()? {
                META_PUT => MetaEffect::Put(decode_meta(&path, r.bytes()?)?),
                META_DELETE => MetaEffect::Delete,
                other => return Err(r.corrupt(&format!("meta kind {other}"))),
            };
            w.metas.push(MetaWrite { path: path.into(), cond: MetaCond::Absent, effect });
        }
        for _ in 0..r.len()? {
            let (path, incarnation, start) = (r.string()?, r.string()?, r.u64()?);
            let data = Bytes::copy_from_slice(r.bytes()?);
            w.chunks.push(ChunkWrite {
                path: path.into(),
                incarnation: incarnation.into(),
                start,
                data,
                check_stored: false,
            });
        }
        for _ in 0..r.len()? {
            let (path, incarnation, producer_id) = (r.string()?, r.string()?, r.string()?);
            let state = ProducerState { epoch: r.u64()?, last_seq: r.u64()? };
            w.producers.push(ProducerWrite { path: path.into(), incarnation: incarnation.into(), producer_id, state });
        }
        for _ in 0..r.len()? {
            let (path, incarnation, key, revision) = (r.string()?, r.string()?, r.string()?, r.u64()?);
            let record = Record { revision, value: Bytes::copy_from_slice(r.bytes()?) };
            w.records.push(RecordWrite {
                path: path.into(),
                incarnation: incarnation.into(),
                key,
                record,
                expect: None,
            });
        }
        commits.push(w);
    }
    let mut touches = Vec::new();
    for _ in 0..r.len()? {
        touches.push((r.string()?, r.string()?, r.i64()?));
    }
    if r.at != body.len() {
        return Err(r.corrupt("trailing bytes"));
    }
    Ok(Batch { commits, touches })
}

/// What [`recover`] did.
pub(crate) struct Recovered {
    /// LSN of the last entry the tables now hold.
    pub last: u64,
    /// Entries applied from the log.
    pub replayed: u64,
}

/// Bring redb's tables up to date with the log (see the module docs) and
/// empty the log.
pub(crate) fn recover(db: &Database, wal: &mut Wal) -> Result<Recovered, StoreError> {
    let applied = tables::applied_lsn(&db.begin_read().map_err(storage)?)?;
    let mut txn = db.begin_write().map_err(storage)?;
    txn.set_durability(Durability::Immediate).map_err(storage)?;
    txn.set_quick_repair(true);
    let mut last = applied;
    {
        let mut tables = WriteTables::open(&txn)?;
        let replayed = wal
            .replay(|lsn, body| {
                if lsn <= applied {
                    return Ok(()); // in redb's durable state already (cut short before the log was emptied)
                }
                if lsn != last + 1 {
                    return Err(StoreError::corrupt(
                        format!("local store log {}", wal_name()),
                        format!("entry {lsn} follows {last} (entries missing); refusing to open"),
                    ));
                }
                let batch = decode_batch(lsn, &body)?;
                for writes in &batch.commits {
                    tables.apply(writes, &encode_metas(writes)?)?;
                }
                for (path, incarnation, at_ms) in &batch.touches {
                    tables.apply_touch(path, incarnation, *at_ms)?;
                }
                last = lsn;
                Ok(())
            })
            .map_err(io_failure)?;
        replayed?;
        if last > applied {
            tables.set_applied_lsn(last)?;
        }
    }
    if last > applied {
        txn.commit().map_err(commit_failure)?;
        tracing::info!(entries = last - applied, log = %wal.path().display(), "local store: replayed the log");
    } else {
        txn.abort().map_err(storage)?;
    }
    wal.clear();
    Ok(Recovered { last, replayed: last - applied })
}

fn wal_name() -> &'static str {
    crate::wal::WAL_FILE
}

fn put_len(out: &mut Vec<u8>, n: usize) {
    // Lists and strings of one batch are bounded far below 4 GiB (the
    // writer's batch byte bound), so the cast cannot truncate.
    out.extend_from_slice(&(n as u32).to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

struct Reader<'a> {
    body: &'a [u8],
    at: usize,
    lsn: u64,
}

impl<'a> Reader<'a> {
    fn corrupt(&self, what: &str) -> StoreError {
        StoreError::corrupt(format!("local store log entry {}", self.lsn), format!("{what} at byte {}", self.at))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        let end = self.at.checked_add(n).filter(|end| *end <= self.body.len()).ok_or_else(|| self.corrupt("short"))?;
        let out = &self.body[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, StoreError> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, StoreError> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().map_err(|_| self.corrupt("u64"))?))
    }

    fn i64(&mut self) -> Result<i64, StoreError> {
        Ok(self.u64()? as i64)
    }

    fn len(&mut self) -> Result<usize, StoreError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes(b.try_into().map_err(|_| self.corrupt("length"))?) as usize)
    }

    fn bytes(&mut self) -> Result<&'a [u8], StoreError> {
        let n = self.len()?;
        self.take(n)
    }

    fn string(&mut self) -> Result<String, StoreError> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| self.corrupt("string not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use ds_core::contract::fixtures::new_meta as meta;
    use ds_core::RecordExpect;

    use super::*;

    #[test]
    fn a_batch_decodes_to_the_writes_that_apply_reads() {
        let mut a = NetWrites::default();
        a.wiped.push(("s/a".into(), "inc-0".into()));
        a.metas.push(MetaWrite {
            path: "s/a".into(),
            cond: MetaCond::Version { version: 2, incarnation: "inc-1".into(), tail: Some(40) },
            effect: MetaEffect::Put(meta("s/a")),
        });
        a.metas.push(MetaWrite { path: "s/gone".into(), cond: MetaCond::Absent, effect: MetaEffect::CheckOnly });
        a.chunks.push(ChunkWrite {
            path: "s/a".into(),
            incarnation: "inc-1".into(),
            start: 42,
            data: Bytes::from_static(b"\x00\xffbytes"),
            check_stored: true,
        });
        a.producers.push(ProducerWrite {
            path: "s/a".into(),
            incarnation: "inc-1".into(),
            producer_id: "p-ü".into(),
            state: ProducerState { epoch: 7, last_seq: u64::MAX },
        });
        let mut b = NetWrites::default();
        b.metas.push(MetaWrite { path: "s/b".into(), cond: MetaCond::Absent, effect: MetaEffect::Delete });
        b.records.push(RecordWrite {
            path: "s/b".into(),
            incarnation: "i".into(),
            key: "k".into(),
            record: Record { revision: 9, value: Bytes::from_static(b"{}") },
            expect: Some(RecordExpect::Revision(8)),
        });
        let applied = [(&a, encode_metas(&a).unwrap()), (&b, encode_metas(&b).unwrap())];
        let body = encode_batch(&applied, &[("s/a", "inc-1", -5)]);
        let got = decode_batch(1, &body).unwrap();

        // What `apply` reads survives; preconditions (and no-op metas) are not logged.
        let mut want_a = a.clone();
        want_a.metas.retain(|m| !matches!(m.effect, MetaEffect::CheckOnly));
        want_a.metas[0].cond = MetaCond::Absent;
        want_a.chunks[0].check_stored = false;
        let mut want_b = b.clone();
        want_b.records[0].expect = None;
        assert_eq!(got, Batch { commits: vec![want_a, want_b], touches: vec![("s/a".into(), "inc-1".into(), -5)] });

        // A body cut anywhere, or with bytes after it, is refused, never half-read.
        for cut in 0..body.len() {
            assert!(decode_batch(1, &body[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = body.clone();
        longer.push(0);
        assert!(decode_batch(1, &longer).is_err());
    }
}
