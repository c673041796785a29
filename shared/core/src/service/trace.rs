//! The trace ring: where a traced append leaves its trace context for the
//! work it causes later, maybe in another process (the processor step that
//! handles its events, the webhook delivery that announces them).
//!
//! What: one keyed record per stream incarnation, [`TRACE_RING_KEY`],
//! holding the last [`TRACE_RING_LEN`] traced appends as `(start, end,
//! context)`: the byte range the append wrote and the opaque context of the
//! span it was made in (a W3C `traceparent`, at most
//! [`MAX_CONTEXT_BYTES`] of visible ASCII; the core does not read it).
//!
//! Bound: at most 32 entries of at most ~170 bytes, so under 6 KB per stream
//! incarnation, overwritten in place, and wiped with the incarnation like
//! every record. Nothing is kept per append.
//!
//! When: only for an append whose request carries a context
//! ([`super::AppendRequest::trace_context`]), which the HTTP surface sets
//! only when export is on and the request carried a sampled `traceparent`;
//! an untraced append does no work here. It is written after the append's
//! commit is durable and before the stream's waiters are woken, so an
//! in-process reader woken by this append finds it. Its own conditional
//! write, not part of the append's commit: tracing is best effort and may
//! never fail, delay past a few store calls, or re-plan an append. A write
//! that loses [`ATTEMPTS`] races in a row, or fails, is dropped (debug log).
//!
//! Missing (never written, lost a race, pushed out of the ring by 32 later
//! traced appends, or not yet visible to a reader in another process — on
//! AWS the processor is woken by the chunk insert, which its change stream
//! may show before this write): the reader finds `None` and its span starts
//! a new trace. No data path ever waits for or depends on it.

use bytes::{BufMut, Bytes, BytesMut};

use super::{ServiceResult, StreamService};
use crate::{Commit, Op, Record, RecordExpect, StoreError, StreamHandle, StreamMeta};

/// The record key of a stream incarnation's trace ring.
pub const TRACE_RING_KEY: &str = "trace/ring";

/// Traced appends a trace ring remembers (the newest).
pub const TRACE_RING_LEN: usize = 32;

/// Longest context kept (a `traceparent` is 55 bytes).
const MAX_CONTEXT_BYTES: usize = 128;

/// Conditional writes of one ring update before it is dropped.
const ATTEMPTS: u32 = 3;

/// One traced append: the bytes `[start, end)` and its context.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    start: u64,
    end: u64,
    context: String,
}

/// Lines of `start end context`; a line that does not read is skipped (a
/// ring is a hint, never a reason to fail).
fn decode(value: &[u8]) -> Vec<Entry> {
    let Ok(text) = std::str::from_utf8(value) else { return Vec::new() };
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ' ');
            let start = parts.next()?.parse().ok()?;
            let end = parts.next()?.parse().ok()?;
            let context = parts.next().filter(|c| valid_context(c))?.to_owned();
            Some(Entry { start, end, context })
        })
        .collect()
}

fn encode(entries: &[Entry]) -> Bytes {
    let mut out = BytesMut::with_capacity(entries.len() * 90);
    for e in entries {
        out.put_slice(format!("{} {} {}\n", e.start, e.end, e.context).as_bytes());
    }
    out.freeze()
}

/// Visible ASCII without spaces, and short: what fits a line of the ring.
fn valid_context(context: &str) -> bool {
    !context.is_empty() && context.len() <= MAX_CONTEXT_BYTES && context.bytes().all(|b| b.is_ascii_graphic())
}

/// `entries` with `entry` added in position order, the oldest beyond
/// [`TRACE_RING_LEN`] dropped.
fn with_entry(mut entries: Vec<Entry>, entry: Entry) -> Vec<Entry> {
    entries.retain(|e| e.end != entry.end);
    let at = entries.partition_point(|e| e.end < entry.end);
    entries.insert(at, entry);
    let excess = entries.len().saturating_sub(TRACE_RING_LEN);
    entries.drain(..excess);
    entries
}

/// What an append wrote: its next meta and where its bytes start (they
/// end at `meta.tail`).
pub(crate) struct Written {
    pub meta: StreamMeta,
    pub start: u64,
}

impl StreamService {
    /// Record `context` for the bytes a committed append wrote (see the
    /// module docs). Never fails: problems are logged at debug and dropped.
    pub(crate) async fn record_trace(&self, stream: &StreamHandle, written: Written, context: &str) {
        if !valid_context(context) {
            return;
        }
        let Written { meta, start } = written;
        let entry = Entry { start, end: meta.tail, context: context.to_owned() };
        let store = &self.sub.store;
        for _ in 0..ATTEMPTS {
            let stored = match store.read_record(stream, &meta.incarnation, TRACE_RING_KEY).await {
                Ok(stored) => stored,
                Err(e) => {
                    tracing::debug!(path = %meta.path, error = %e, "trace ring not read; context dropped");
                    return;
                }
            };
            let (entries, expect, revision) = match &stored {
                Some(r) => (decode(&r.value), RecordExpect::Revision(r.revision), r.revision + 1),
                None => (Vec::new(), RecordExpect::Absent, 1),
            };
            let value = encode(&with_entry(entries, entry.clone()));
            let op = Op::PutRecord {
                path: meta.path.clone(),
                incarnation: meta.incarnation.clone(),
                key: TRACE_RING_KEY.to_owned(),
                record: Record { revision, value },
                expect,
            };
            match store.commit(Commit { ops: vec![op] }).await {
                Ok(()) => return,
                Err(StoreError::Conflict) => continue,
                Err(e) => {
                    tracing::debug!(path = %meta.path, error = %e, "trace ring not written; context dropped");
                    return;
                }
            }
        }
        tracing::debug!(path = %meta.path, "trace ring write lost {ATTEMPTS} races; context dropped");
    }

    /// The context recorded for the append that wrote the message ending at
    /// `position` of `(path, incarnation)` (a journal position: the offset
    /// just past the message), if the ring still has it.
    pub async fn trace_context_at(
        &self,
        path: &str,
        incarnation: &str,
        position: u64,
    ) -> ServiceResult<Option<String>> {
        let entries = self.trace_ring(path, incarnation).await?;
        Ok(entries.into_iter().find(|e| e.start < position && position <= e.end).map(|e| e.context))
    }

    /// The context of the newest recorded append of `(path, incarnation)`
    /// that ends in `(after, through]`: what a wake covering those bytes
    /// continues.
    pub async fn latest_trace_context(
        &self,
        path: &str,
        incarnation: &str,
        after: u64,
        through: u64,
    ) -> ServiceResult<Option<String>> {
        let entries = self.trace_ring(path, incarnation).await?;
        Ok(entries.into_iter().rev().find(|e| after < e.end && e.end <= through).map(|e| e.context))
    }

    async fn trace_ring(&self, path: &str, incarnation: &str) -> ServiceResult<Vec<Entry>> {
        let stream = self.sub.registry.enter(path);
        let stored = self.sub.store.read_record(&stream, incarnation, TRACE_RING_KEY).await?;
        Ok(stored.map(|r| decode(&r.value)).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(start: u64, end: u64) -> Entry {
        Entry { start, end, context: format!("ctx-{end}") }
    }

    #[test]
    fn the_ring_keeps_the_newest_entries_in_order_and_reads_back() {
        let mut ring = Vec::new();
        for i in (0..40u64).rev() {
            ring = with_entry(ring, entry(i * 10, i * 10 + 10));
        }
        // Inserted newest first: the ring keeps the highest positions.
        assert_eq!(ring.len(), TRACE_RING_LEN);
        assert_eq!(ring.first().map(|e| e.end), Some(90));
        assert_eq!(ring.last().map(|e| e.end), Some(400));
        assert_eq!(decode(&encode(&ring)), ring);
        // Overwriting one position keeps one entry.
        let again = with_entry(ring.clone(), Entry { start: 390, end: 400, context: "new".into() });
        assert_eq!(again.len(), TRACE_RING_LEN);
        assert_eq!(again.last().map(|e| e.context.as_str()), Some("new"));
    }

    #[test]
    fn unreadable_lines_and_contexts_are_skipped() {
        assert_eq!(decode(b"1 2 ok\nx y z\n3 4 \n5 6 a b\n"), vec![Entry { start: 1, end: 2, context: "ok".into() }]);
        assert!(decode(b"1 2 ok\n\xff").is_empty());
        assert!(!valid_context("has space"));
        assert!(!valid_context(&"x".repeat(MAX_CONTEXT_BYTES + 1)));
        assert!(valid_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
    }
}
