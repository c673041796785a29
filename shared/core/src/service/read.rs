//! GET: catch-up and long-poll reads, and the stitched read of a stream's
//! bytes across its fork chain.

use bytes::{Bytes, BytesMut};
use ds_protocol::headers::is_json;
use ds_protocol::json;
use ds_protocol::ReadOffset;
use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::time::Instant;

use super::{ServiceError, ServiceResult, StreamService};
use crate::{StreamHandle, StreamMeta, TailSignal};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveMode {
    None,
    LongPoll,
    Sse,
}

#[derive(Debug, Clone)]
pub struct ReadRequest {
    pub path: String,
    pub offset: Option<ReadOffset>,
    pub live: LiveMode,
}

/// A read's result; `ds_http` renders headers and body from it.
#[derive(Debug, Clone)]
pub struct ReadOutcome {
    pub meta: StreamMeta,
    /// First position covered by the response.
    pub start: u64,
    /// `Stream-Next-Offset`.
    pub next: u64,
    /// Body bytes in wire form (JSON streams: an array).
    pub body: Bytes,
    pub up_to_date: bool,
    /// `Stream-Closed: true` belongs on this response (EOF reached).
    pub closed: bool,
    /// Long-poll answered without data (204): timed out, or EOF at the tail.
    pub no_content: bool,
    /// The request used `offset=now` (no ETag, `no-store`).
    pub at_now: bool,
    /// The stream's earliest retained position as this read knows it
    /// (`Stream-Earliest-Offset` when above 0): its own `retained_from`,
    /// and for a read of a fork that reached below the fork's base or
    /// started at `-1`, the source lineage's too (see
    /// [`StreamService::earliest`]).
    pub earliest: u64,
}

/// Whether a read may cut a stored append to fit the byte budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// Cut the piece that crosses the budget (at a message boundary for JSON).
    AtBudget,
    /// Return whole pieces only (used to find append boundaries).
    Never,
}

/// The position a live read waits at, for [`crate::HubSubscription::fresh_meta`]
/// (`None`: `offset=now`, the tail itself).
pub(crate) fn waits_at(offset: Option<ReadOffset>) -> Option<u64> {
    match offset {
        Some(ReadOffset::At(o)) => Some(o.position()),
        None | Some(ReadOffset::Beginning) => Some(0),
        Some(ReadOffset::Now) => None,
    }
}

impl StreamService {
    /// Catch-up or long-poll read (SSE goes through [`StreamService::sse`]).
    pub async fn read(&self, req: ReadRequest) -> ServiceResult<ReadOutcome> {
        let stream = self.sub.registry.enter(&req.path);
        if req.live != LiveMode::None && req.offset.is_none() {
            return Err(ServiceError::BadRequest("live reads need an offset".into()));
        }
        // Subscribe before the first read so no append between them is missed.
        let mut sub = (req.live == LiveMode::LongPoll).then(|| self.sub.hub.subscribe(&stream));
        // The store calls are boxed: inline, their state would stay allocated
        // through a long-poll's whole wait (memory per idle reader).
        let meta = match sub.as_mut() {
            Some(sub) => Box::pin(self.live_read_meta(&stream, sub, waits_at(req.offset))).await?,
            None => Box::pin(self.read_live_meta(&stream)).await?,
        };
        Box::pin(self.touch(&stream, &meta)).await;
        let at_now = req.offset == Some(ReadOffset::Now);
        // Not boxed: its future is small (the lineage walk is boxed inside
        // `earliest`, and only reads below a fork's base take it), and a box
        // would cost every read an allocation.
        let (start, earliest) = self.start_position(&meta, req.offset).await?;
        let with_earliest = |mut out: ReadOutcome| {
            out.earliest = out.earliest.max(earliest);
            out
        };

        if at_now && req.live == LiveMode::None {
            return Ok(with_earliest(self.empty_outcome(meta, start, true)));
        }
        let Some(sub) = sub.as_mut() else {
            return Box::pin(self.read_at(&stream, meta, start)).await.map(with_earliest);
        };
        let deadline = Instant::now() + self.cfg.long_poll_timeout;
        let mut meta = meta;
        loop {
            if start < meta.tail {
                return Box::pin(self.read_at(&stream, meta, start)).await.map(with_earliest);
            }
            if meta.closed {
                let mut out = self.empty_outcome(meta, start, at_now);
                out.no_content = true;
                return Ok(with_earliest(out));
            }
            if !self.wait_changed(sub, &TailSignal::of(&meta), deadline).await {
                let mut out = self.empty_outcome(meta, start, at_now);
                out.no_content = true;
                return Ok(with_earliest(out));
            }
            meta = Box::pin(self.live_read_meta(&stream, sub, Some(start))).await?;
        }
    }

    /// The meta a live read (long-poll, SSE) starts or resumes from at
    /// position `at`: the hub's [`fresh_meta`](crate::HubSubscription::fresh_meta)
    /// when it has one — a read begun after the reader's subscription, so
    /// the answer stays linearizable — else a consistent read of its own.
    /// Answers with side effects (lazy expiry) or errors (soft-deleted) are
    /// always read here.
    pub(crate) async fn live_read_meta(
        &self,
        stream: &StreamHandle,
        sub: &mut Box<dyn crate::HubSubscription>,
        at: Option<u64>,
    ) -> ServiceResult<StreamMeta> {
        if let Some(meta) = sub.fresh_meta(at).await {
            if !meta.soft_deleted && !meta.is_expired_by(|| self.clock.now_ms()) {
                return Ok(meta);
            }
        }
        self.read_live_meta(stream).await
    }

    /// Resolve the `offset` parameter against the stream: the position to
    /// read from and the earliest retained one. `-1` (and no offset) starts
    /// at the earliest retained position; an offset before it is
    /// [`ServiceError::NotRetained`]. The fork lineage is consulted only
    /// when the read starts below the fork's base (a reader of a fork's own
    /// bytes costs no source read).
    pub(crate) async fn start_position(
        &self,
        meta: &StreamMeta,
        offset: Option<ReadOffset>,
    ) -> ServiceResult<(u64, u64)> {
        let wanted = match offset {
            None | Some(ReadOffset::Beginning) => meta.retained_from,
            Some(ReadOffset::Now) => meta.tail,
            Some(ReadOffset::At(o)) => o.position(),
        };
        if wanted > meta.tail {
            return Err(ServiceError::BadRequest("offset is beyond the stream's tail".into()));
        }
        let inherited = meta.fork.as_ref().is_some_and(|o| wanted < o.base);
        let earliest = if inherited { self.earliest(meta).await? } else { meta.retained_from };
        let start = match offset {
            None | Some(ReadOffset::Beginning) => earliest,
            _ if wanted < earliest => return Err(ServiceError::NotRetained { earliest }),
            _ => wanted,
        };
        Ok((start, earliest))
    }

    fn empty_outcome(&self, meta: StreamMeta, start: u64, at_now: bool) -> ReadOutcome {
        let body = if is_json(&meta.content_type) { Bytes::from_static(b"[]") } else { Bytes::new() };
        let closed = meta.closed && start == meta.tail;
        ReadOutcome {
            start,
            next: start,
            body,
            up_to_date: start == meta.tail,
            closed,
            no_content: false,
            at_now,
            earliest: meta.retained_from,
            meta,
        }
    }

    /// Read up to the configured budget from `start`.
    async fn read_at(&self, stream: &StreamHandle, meta: StreamMeta, start: u64) -> ServiceResult<ReadOutcome> {
        let (raw, next) = self.read_bytes(stream, &meta, start).await?;
        let body = if is_json(&meta.content_type) { json::render_array(&raw) } else { raw };
        let up_to_date = next >= meta.tail;
        let closed = meta.closed && up_to_date;
        let earliest = meta.retained_from;
        Ok(ReadOutcome { start, next, body, up_to_date, closed, no_content: false, at_now: false, earliest, meta })
    }

    /// Stored bytes from `start` (JSON: framed messages), within the budget.
    pub(crate) async fn read_bytes(
        &self,
        stream: &StreamHandle,
        meta: &StreamMeta,
        start: u64,
    ) -> ServiceResult<(Bytes, u64)> {
        // The whole rest of the stream fits the budget and is the stream's
        // own (no fork source below `start`): the store may hand it over as
        // one buffer, which is what the pieces below would join into.
        let own = meta.fork.as_ref().is_none_or(|o| start >= o.base);
        let rest = usize::try_from(meta.tail.saturating_sub(start)).unwrap_or(usize::MAX);
        if own && rest > 0 && rest <= self.cfg.max_read_bytes {
            let store = &self.sub.store;
            if let Some(raw) =
                store.read_contiguous(stream, &meta.incarnation, start, meta.tail, self.cfg.max_read_bytes).await?
            {
                return Ok((raw, meta.tail));
            }
        }
        let pieces = self.read_pieces(stream, meta, start, self.cfg.max_read_bytes, Cut::AtBudget).await?;
        let len: usize = pieces.iter().map(Bytes::len).sum();
        let raw = if pieces.len() == 1 {
            pieces.into_iter().next().unwrap_or_default()
        } else {
            let mut buf = BytesMut::with_capacity(len);
            pieces.iter().for_each(|p| buf.extend_from_slice(p));
            buf.freeze()
        };
        Ok((raw, start + len as u64))
    }

    /// The stream's bytes from `from`, one piece per stored append (slices of
    /// chunks), stitched across the fork chain: positions before a fork's
    /// base come from its source. Stops at `budget` bytes (see [`Cut`]).
    /// `stream` is the handle of `meta`'s own path. A position before the
    /// earliest retained one (of `meta`, or of a source as read now) is
    /// [`ServiceError::NotRetained`], with the earliest as `meta` sees it.
    pub(crate) fn read_pieces<'a>(
        &'a self,
        stream: &'a StreamHandle,
        meta: &'a StreamMeta,
        from: u64,
        budget: usize,
        cut: Cut,
    ) -> BoxFuture<'a, ServiceResult<Vec<Bytes>>> {
        async move {
            let mut pieces = Vec::new();
            let mut pos = from;
            let mut used = 0usize;
            if pos < meta.retained_from {
                return Err(ServiceError::NotRetained { earliest: meta.retained_from });
            }
            if let Some(origin) = meta.fork.as_ref().filter(|o| pos < o.base) {
                let source = match self.sub.fork_peer.source_meta(&origin.source).await? {
                    Some(s) if s.incarnation == origin.source_incarnation => s,
                    _ => {
                        return Err(crate::StoreError::corrupt(
                            format!("fork of {}", meta.path),
                            format!("source {} is missing", origin.source),
                        )
                        .into())
                    }
                };
                // A fork read through another fork is bounded by both bases.
                let limited = StreamMeta { tail: origin.base.min(source.tail).min(meta.tail), ..source };
                let source_stream = StreamHandle::detached(&origin.source);
                let inherited =
                    self.read_pieces(&source_stream, &limited, pos, budget, cut).await.map_err(|e| match e {
                        // The source's earliest, as this fork sees it.
                        ServiceError::NotRetained { earliest } => {
                            ServiceError::NotRetained { earliest: meta.retained_from.max(earliest.min(origin.base)) }
                        }
                        other => other,
                    })?;
                for p in inherited {
                    used += p.len();
                    pos += p.len() as u64;
                    pieces.push(p);
                }
                if pos < origin.base || used >= budget {
                    return Ok(pieces);
                }
            }
            if pos >= meta.tail {
                return Ok(pieces);
            }
            let json = is_json(&meta.content_type);
            let chunks = self
                .sub
                .store
                .read_chunks(stream, &meta.incarnation, pos, meta.tail, budget.saturating_sub(used).max(1))
                .await?;
            for chunk in chunks {
                if used >= budget || pos >= meta.tail {
                    break;
                }
                if chunk.end() <= pos || chunk.start > pos {
                    if chunk.start > pos {
                        return Err(self.missing_bytes(stream, meta, pos).await);
                    }
                    continue;
                }
                let lo = usize::try_from(pos - chunk.start).unwrap_or(usize::MAX);
                let hi = usize::try_from(meta.tail.min(chunk.end()) - chunk.start).unwrap_or(usize::MAX);
                let mut piece = chunk.data.slice(lo..hi);
                let room = budget - used;
                if cut == Cut::AtBudget && piece.len() > room {
                    let keep = if json { json::boundary_prefix(&piece, room) } else { room.max(1) };
                    // Never return nothing: a single oversized message is sent whole.
                    let keep = if used > 0 && keep > room { 0 } else { keep };
                    piece.truncate(keep);
                }
                if piece.is_empty() {
                    break;
                }
                used += piece.len();
                pos += piece.len() as u64;
                pieces.push(piece);
            }
            if pieces.is_empty() && pos < meta.tail {
                return Err(self.missing_bytes(stream, meta, pos).await);
            }
            Ok(pieces)
        }
        .boxed()
    }

    /// The error for stored bytes missing at `pos` below `meta.tail`: a trim
    /// committed since `meta` was read reclaimed them (the meta read now
    /// says so: [`ServiceError::NotRetained`]), else the store lost them.
    async fn missing_bytes(&self, stream: &StreamHandle, meta: &StreamMeta, pos: u64) -> ServiceError {
        match self.sub.store.read_meta(stream).await {
            Ok(Some(now)) if now.incarnation == meta.incarnation && pos < now.retained_from => {
                ServiceError::NotRetained { earliest: now.retained_from }
            }
            Ok(_) => crate::StoreError::corrupt(format!("chunks of {}", meta.path), format!("gap at {pos}")).into(),
            Err(e) => e.into(),
        }
    }
}
