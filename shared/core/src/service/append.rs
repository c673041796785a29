//! POST: append, append-and-close, close-only; with `Stream-Seq` ordering and
//! idempotent producers (§5.2, §5.2.1, §5.3).

use std::borrow::Cow;

use bytes::Bytes;
use ds_protocol::headers::{content_types_match, is_json, ProducerHeaders};
use ds_protocol::json::{self, EmptyArray};
use ds_protocol::producer::{decide, Decision, State};

use super::inline::InlineWrite;
use super::registry::Change;
use super::trace::Written;
use super::{Plan, Predicted, Reads, ServiceError, ServiceResult, StreamService};
use crate::{
    Chunk, Commit, Expect, Op, ProducerState, ProducerTriple, Record, RecordExpect, StreamHandle, StreamMeta,
    TailSignal,
};

/// One append. The path and content type may be borrowed (an HTTP append's
/// come straight from the request's bytes: no copies per append).
#[derive(Debug, Clone)]
pub struct AppendRequest<'a> {
    pub path: Cow<'a, str>,
    pub content_type: Option<Cow<'a, str>>,
    pub body: Bytes,
    /// `Stream-Closed: true`.
    pub close: bool,
    /// `Stream-Seq`.
    pub seq: Option<String>,
    pub producer: Option<ProducerHeaders>,
    /// Append at most once per key and stream incarnation: the key's record
    /// is written in the same commit as the data, so two writers with one key
    /// write once, and a repeat answers [`AppendOutcome::AlreadyAppended`].
    /// Used in-process (processor journals), not exposed over HTTP.
    pub dedupe_key: Option<String>,
    /// Append only to this incarnation of the stream: a caller bound to a
    /// stream life (a processor's journal) gets
    /// [`ServiceError::IncarnationChanged`] instead of writing into a
    /// re-created stream. In-process only.
    pub incarnation: Option<String>,
    /// Append only if the stream's tail, after every append ahead of this
    /// one, is exactly this position: else [`ServiceError::TailMoved`] and
    /// nothing is written. Checked in the critical section and held by the
    /// commit's `VersionAt` precondition, so the bytes land right after what
    /// the caller read. In-process only (State Protocol compaction).
    pub expect_tail: Option<u64>,
    /// The trace context of the span this append was made in (a W3C
    /// `traceparent`, opaque here), when that span is exported: recorded in
    /// the stream's trace ring before readers are woken, so the processor
    /// step and the webhook delivery this append causes continue its trace
    /// ([`StreamService::trace_context_at`]). `None` costs nothing.
    pub trace_context: Option<String>,
}

#[derive(Debug, Clone)]
pub enum AppendOutcome {
    /// New data (and/or closure) committed. With a producer: 200, else 204.
    /// `start`: where the appended bytes begin (they end at `meta.tail`).
    Appended { meta: StreamMeta, producer: Option<State>, start: u64 },
    /// A producer retry of something already applied: 204, nothing written.
    Duplicate { meta: StreamMeta, producer: State },
    /// Close-only on an already-closed stream: 204, nothing written.
    AlreadyClosed { meta: StreamMeta },
    /// The request's `dedupe_key` was appended before; nothing written.
    /// `end` is the position just past what that append wrote.
    AlreadyAppended { meta: StreamMeta, end: u64 },
}

impl AppendOutcome {
    pub fn meta(&self) -> &StreamMeta {
        match self {
            Self::Appended { meta, .. }
            | Self::Duplicate { meta, .. }
            | Self::AlreadyClosed { meta }
            | Self::AlreadyAppended { meta, .. } => meta,
        }
    }
}

impl StreamService {
    pub async fn append(&self, req: AppendRequest<'_>) -> ServiceResult<AppendOutcome> {
        if req.body.is_empty() && !req.close {
            return Err(ServiceError::BadRequest("empty body (only a close may be empty)".into()));
        }
        self.refuse_registry_write(&req.path)?;
        let stream = self.sub.registry.enter(&req.path);
        if let Some(context) = req.trace_context.as_deref() {
            // Boxed, and apart: the untraced append's future and code stay
            // as they were (the future is moved whole on the hot path).
            return Box::pin(self.append_traced(&stream, &req, context)).await;
        }
        let outcome = self.mutate(&stream, |reads| self.plan_append(&stream, &req, reads)).await;
        if let Err(e @ ServiceError::InlineRejected { .. }) = &outcome {
            self.report_inline_rejection(&req.path, e);
        }
        outcome
    }

    /// [`Self::append`] of a request with a trace context: recorded in the
    /// stream's trace ring after the commit and before the publish, so a
    /// reader it wakes finds it (see `trace.rs`).
    async fn append_traced(
        &self,
        stream: &StreamHandle,
        req: &AppendRequest<'_>,
        context: &str,
    ) -> ServiceResult<AppendOutcome> {
        let record = move |outcome: &AppendOutcome| {
            let written = match outcome {
                AppendOutcome::Appended { meta, start, .. } if *start < meta.tail => {
                    Some(Written { meta: meta.clone(), start: *start })
                }
                _ => None,
            };
            async move {
                if let Some(written) = written {
                    self.record_trace(stream, written, context).await;
                }
            }
        };
        let outcome = self.mutate_then(stream, |reads| self.plan_append(stream, req, reads), record).await;
        if let Err(e @ ServiceError::InlineRejected { .. }) = &outcome {
            self.report_inline_rejection(&req.path, e);
        }
        outcome
    }

    pub(super) async fn plan_append(
        &self,
        stream: &StreamHandle,
        req: &AppendRequest<'_>,
        reads: Reads,
    ) -> ServiceResult<Plan<AppendOutcome>> {
        let meta = self.live_meta(stream, reads).await?;
        if let Some(expected) = req.incarnation.as_ref().filter(|i| **i != *meta.incarnation) {
            return Err(ServiceError::IncarnationChanged {
                expected: expected.clone(),
                found: meta.incarnation.to_string(),
            });
        }
        if let Some(key) = &req.dedupe_key {
            // Always a store read: only the commit's `Absent` precondition on
            // this record can vouch for "not appended yet".
            let record = self.sub.store.read_record(stream, &meta.incarnation, &dedupe_record_key(key)).await?;
            if let Some(record) = record {
                let end = decode_position(&record.value)?;
                return Ok(Plan::Done(AppendOutcome::AlreadyAppended { meta, end }));
            }
        }

        // Producer fencing and dedup come first: a zombie learns it is fenced
        // and a retry learns it succeeded, whatever else changed since.
        let accepted = match self.check_producer(stream, &meta, req, reads).await? {
            ProducerCheck::Accept(next) => next,
            ProducerCheck::Duplicate(producer) => {
                return Ok(Plan::Done(AppendOutcome::Duplicate { meta, producer }));
            }
        };
        if meta.closed {
            return if req.body.is_empty() && req.close {
                Ok(Plan::Done(AppendOutcome::AlreadyClosed { meta }))
            } else {
                Err(ServiceError::StreamClosed { tail: meta.tail })
            };
        }
        if let Some(expected) = req.expect_tail.filter(|t| *t != meta.tail) {
            return Err(ServiceError::TailMoved { expected, tail: meta.tail });
        }
        let data = frame_body(req, &meta)?;
        if let (Some(seq), Some(last)) = (&req.seq, &meta.last_stream_seq) {
            if seq.as_bytes() <= last.as_bytes() {
                return Err(ServiceError::Conflict(format!("Stream-Seq {seq:?} is not greater than {last:?}")));
            }
        }
        // After every other check: a processor sees only appends that would commit.
        // Boxed, and only when inline processors are configured: the refold's
        // reads would otherwise grow this future (moved whole per append) for
        // every server, bound or not.
        let inline = if self.inline_configured() {
            Box::pin(self.plan_inline(stream, &meta, &data, reads)).await?
        } else {
            Vec::new()
        };
        let mut plan = self.append_plan(req, meta, data, accepted, inline);
        if req.close {
            // The stream was open (checked above): its close is listed in this commit.
            if let Plan::Commit { commit, value, registry, .. } = &mut plan {
                *registry = self.plan_registry(commit, Change::Closed(value.meta())).await?;
            }
        }
        Ok(plan)
    }

    /// The producer's verdict on this request (`Accept(None)` without a
    /// producer, or when a closed stream will answer instead).
    async fn check_producer(
        &self,
        stream: &StreamHandle,
        meta: &StreamMeta,
        req: &AppendRequest<'_>,
        reads: Reads,
    ) -> ServiceResult<ProducerCheck> {
        let Some(p) = &req.producer else {
            return Ok(ProducerCheck::Accept(None));
        };
        let state = self
            .producer_for_update(stream, meta, &p.id, reads)
            .await?
            .map(|s| State { epoch: s.epoch, last_seq: s.last_seq });
        match decide(state, p) {
            Decision::StaleEpoch { current } => Err(ServiceError::StaleEpoch { current }),
            Decision::Duplicate { epoch, last_seq } => Ok(ProducerCheck::Duplicate(State { epoch, last_seq })),
            Decision::Accept { next } => Ok(ProducerCheck::Accept(Some(next))),
            // A closed stream answers these (409 closed, or the close retry).
            Decision::NewEpochNonZeroSeq | Decision::Gap { .. } if meta.closed => Ok(ProducerCheck::Accept(None)),
            Decision::NewEpochNonZeroSeq => {
                Err(ServiceError::BadRequest("a new producer epoch must start at Producer-Seq 0".into()))
            }
            Decision::Gap { expected, received } => Err(ServiceError::SeqGap { expected, received }),
        }
    }

    /// The commit of a validated append: next meta, chunk, producer state.
    fn append_plan(
        &self,
        req: &AppendRequest<'_>,
        meta: StreamMeta,
        data: Bytes,
        accepted: Option<State>,
        inline: Vec<InlineWrite>,
    ) -> Plan<AppendOutcome> {
        // The next meta is this one, changed: path and incarnation stay.
        let (version, tail) = (meta.version, meta.tail);
        let mut next = meta;
        next.version += 1;
        next.tail += data.len() as u64;
        next.touched_at_ms = self.clock.now_ms();
        if let Some(seq) = &req.seq {
            next.last_stream_seq = Some(seq.clone());
        }
        if req.close {
            next.closed = true;
            next.closed_by =
                req.producer.as_ref().map(|p| ProducerTriple { id: p.id.clone(), epoch: p.epoch, seq: p.seq });
        }
        let ops = 1
            + usize::from(!data.is_empty())
            + usize::from(accepted.is_some())
            + usize::from(req.dedupe_key.is_some())
            + inline.len();
        let mut commit = Commit::with_capacity(ops);
        // The tail too: bytes land at the old `tail`, so a plan on a state that was
        // never stored (same version, other tail) must fail, not leave a gap.
        commit.push(Op::PutMeta { meta: next.clone(), expect: Expect::VersionAt { version, tail } });
        if !data.is_empty() {
            commit.push(Op::PutChunk {
                path: next.path.clone(),
                incarnation: next.incarnation.clone(),
                chunk: Chunk { start: tail, data },
            });
        }
        let producer = match (&req.producer, accepted) {
            (Some(p), Some(s)) => Some((p.id.clone(), ProducerState { epoch: s.epoch, last_seq: s.last_seq })),
            _ => None,
        };
        if let Some((id, state)) = &producer {
            commit.push(Op::PutProducer {
                path: next.path.clone(),
                incarnation: next.incarnation.clone(),
                producer_id: id.clone(),
                state: *state,
            });
        }
        if let Some(key) = &req.dedupe_key {
            commit.push(Op::PutRecord {
                path: next.path.clone(),
                incarnation: next.incarnation.clone(),
                key: dedupe_record_key(key),
                record: Record { revision: 1, value: Bytes::copy_from_slice(&next.tail.to_be_bytes()) },
                expect: RecordExpect::Absent,
            });
        }
        // Its inline reductions, in the same commit as the bytes they fold.
        let mut records = Vec::with_capacity(inline.len());
        for w in inline {
            records.push((w.key.clone(), w.record.clone()));
            commit.push(Op::PutRecord {
                path: next.path.clone(),
                incarnation: next.incarnation.clone(),
                key: w.key,
                record: w.record,
                expect: w.expect,
            });
        }
        Plan::Commit {
            commit,
            publish: Some(TailSignal::of(&next)),
            deleted: Vec::new(),
            predicted: Some(Predicted { meta: AppendOutcome::meta, producer, records }),
            value: AppendOutcome::Appended { meta: next, producer: accepted, start: tail },
            registry: None,
        }
    }
}

/// The record holding an append's dedupe key; its value is the position
/// just past that append (8 bytes, big-endian).
fn dedupe_record_key(key: &str) -> String {
    format!("dedupe/{key}")
}

fn decode_position(value: &[u8]) -> ServiceResult<u64> {
    let bytes: [u8; 8] = value
        .try_into()
        .map_err(|_| crate::StoreError::corrupt("dedupe record", format!("holds {} bytes, not 8", value.len())))?;
    Ok(u64::from_be_bytes(bytes))
}

/// What the producer headers decided.
enum ProducerCheck {
    /// Go on; `Some`: the producer state this append moves to.
    Accept(Option<State>),
    /// A retry of something already applied.
    Duplicate(State),
}

/// The bytes to store: the body as is, or JSON messages framed one per line.
fn frame_body(req: &AppendRequest<'_>, meta: &StreamMeta) -> ServiceResult<Bytes> {
    if req.body.is_empty() {
        return Ok(Bytes::new());
    }
    let Some(ct) = req.content_type.as_deref() else {
        return Err(ServiceError::BadRequest("Content-Type is required with a body".into()));
    };
    // The usual case, the stream's own (validated) content type verbatim,
    // needs neither check.
    if ct != &*meta.content_type {
        ds_protocol::headers::validate_content_type(ct)?;
        if !content_types_match(ct, &meta.content_type) {
            return Err(ServiceError::Conflict(format!(
                "Content-Type {ct:?} does not match the stream's {:?}",
                meta.content_type
            )));
        }
    }
    if is_json(&meta.content_type) {
        Ok(json::frame_messages(&req.body, EmptyArray::Reject)?)
    } else {
        Ok(req.body.clone())
    }
}
