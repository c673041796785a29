//! Reading a JSON-mode stream as a journal of messages with positions, for
//! consumers inside the process (stream processors). A message's position is
//! the offset just past it: positions start above 0 and strictly increase,
//! and a read "after position p" returns every message whose position is
//! greater than p — p need not be a message boundary (an operator's
//! "reprocess from position x" reads after x - 1).

use bytes::Bytes;
use ds_protocol::headers::is_json;

use super::read::Cut;
use super::{ServiceError, ServiceResult, StreamService};
use crate::{StoreError, StreamHandle, StreamMeta};

/// Messages of one journal read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalPage {
    /// `(position, message)`: each message as stored (minified JSON, without
    /// its line terminator), its position the offset just past it.
    pub entries: Vec<(u64, Bytes)>,
    /// The stream's tail when read: the position of its last message.
    pub tail: u64,
    pub closed: bool,
}

impl StreamService {
    /// Messages of the JSON stream at `path` with positions greater than
    /// `after`, up to about `max_bytes`, only while the stream is still
    /// `incarnation`: a re-created stream answers
    /// [`ServiceError::IncarnationChanged`] and none of its data, and a read
    /// from before the earliest retained position
    /// [`ServiceError::NotRetained`].
    pub async fn read_journal(
        &self,
        path: &str,
        incarnation: &str,
        after: u64,
        max_bytes: usize,
    ) -> ServiceResult<JournalPage> {
        let stream = self.sub.registry.enter(path);
        let meta = self.read_live_meta(&stream).await?;
        if *meta.incarnation != *incarnation {
            return Err(ServiceError::IncarnationChanged {
                expected: incarnation.to_owned(),
                found: meta.incarnation.to_string(),
            });
        }
        if !is_json(&meta.content_type) {
            return Err(ServiceError::BadRequest(format!("{path} is not a JSON stream")));
        }
        // Like an HTTP read: what retention dropped is gone, whether or not
        // the store has reclaimed its bytes yet (a consumer must not see
        // events or not depending on when a reclaim ran).
        let earliest = self.earliest(&meta).await?;
        if after < earliest {
            return Err(ServiceError::NotRetained { earliest });
        }
        let entries = self.journal_entries(&stream, &meta, after, max_bytes).await?;
        Ok(JournalPage { entries, tail: meta.tail, closed: meta.closed })
    }

    /// The messages of `meta`'s stream after `after`, up to about
    /// `max_bytes` (at least one when there is one).
    pub(crate) async fn journal_entries(
        &self,
        stream: &StreamHandle,
        meta: &StreamMeta,
        after: u64,
        max_bytes: usize,
    ) -> ServiceResult<Vec<(u64, Bytes)>> {
        let mut entries = Vec::new();
        if after < meta.tail {
            // Stored chunks hold whole messages: starting at the chunk that
            // contains `after`, every message is read from its first byte.
            let (start, data) = self.message_bytes(stream, meta, after, max_bytes.max(1)).await?;
            let mut pos = start;
            for line in data.split_inclusive(|b| *b == b'\n') {
                pos += line.len() as u64;
                if pos > after && line.ends_with(b"\n") {
                    entries.push((pos, data.slice_ref(&line[..line.len() - 1])));
                }
            }
        }
        Ok(entries)
    }

    /// Stored bytes from the start of the chunk that holds position `at`.
    async fn message_bytes(
        &self,
        stream: &StreamHandle,
        meta: &StreamMeta,
        at: u64,
        budget: usize,
    ) -> ServiceResult<(u64, Bytes)> {
        if at >= meta.own_start() {
            // The common case: one chunk read, whose first chunk is returned whole.
            let chunks = self.sub.store.read_chunks(stream, &meta.incarnation, at, meta.tail, budget).await?;
            let start = chunks.first().map_or(at, |c| c.start);
            let mut data = Vec::new();
            let mut pos = start;
            for c in &chunks {
                if c.start != pos {
                    break;
                }
                let end = c.end().min(meta.tail);
                data.extend_from_slice(&c.data[..usize::try_from(end - c.start).unwrap_or(usize::MAX)]);
                pos = end;
            }
            if start > at || (data.is_empty() && at < meta.tail) {
                return Err(StoreError::corrupt(format!("chunks of {}", meta.path), format!("gap at {at}")).into());
            }
            return Ok((start, Bytes::from(data)));
        }
        // Inherited from a fork source: find the source chunk's start, then
        // read through the fork chain from there.
        let start = self.inherited_chunk_start(meta, at).await?;
        let pieces = self.read_pieces(stream, meta, start, budget, Cut::AtBudget).await?;
        Ok((start, pieces.concat().into()))
    }

    /// The start of the stored chunk holding `at` somewhere up `meta`'s fork chain.
    async fn inherited_chunk_start(&self, meta: &StreamMeta, at: u64) -> ServiceResult<u64> {
        let mut origin = meta.fork.clone();
        while let Some(o) = origin.filter(|o| at < o.base) {
            let source = match self.sub.fork_peer.source_meta(&o.source).await? {
                Some(s) if s.incarnation == o.source_incarnation => s,
                _ => {
                    return Err(StoreError::corrupt(
                        format!("fork of {}", meta.path),
                        format!("source {} is missing", o.source),
                    )
                    .into())
                }
            };
            if at >= source.own_start() {
                let chunks = self.sub.fork_peer.read_source(&source.path, &source.incarnation, at, at + 1, 1).await?;
                return Ok(chunks.first().map_or(at, |c| c.start.min(at)));
            }
            origin = source.fork;
        }
        Ok(at)
    }
}
