//! POST: append, append-and-close, close-only; with `Stream-Seq` ordering and
//! idempotent producers (§5.2, §5.2.1, §5.3).

use bytes::Bytes;
use ds_protocol::headers::{content_types_match, is_json, ProducerHeaders};
use ds_protocol::json::{self, EmptyArray};
use ds_protocol::producer::{decide, Decision, State};

use super::{Plan, Reads, ServiceError, ServiceResult, StreamService};
use crate::{Chunk, Commit, Expect, Op, ProducerState, ProducerTriple, StreamMeta};

#[derive(Debug, Clone)]
pub struct AppendRequest {
    pub path: String,
    pub content_type: Option<String>,
    pub body: Bytes,
    /// `Stream-Closed: true`.
    pub close: bool,
    /// `Stream-Seq`.
    pub seq: Option<String>,
    pub producer: Option<ProducerHeaders>,
}

#[derive(Debug, Clone)]
pub enum AppendOutcome {
    /// New data (and/or closure) committed. With a producer: 200, else 204.
    Appended { meta: StreamMeta, producer: Option<State> },
    /// A producer retry of something already applied: 204, nothing written.
    Duplicate { meta: StreamMeta, producer: State },
    /// Close-only on an already-closed stream: 204, nothing written.
    AlreadyClosed { meta: StreamMeta },
}

impl AppendOutcome {
    pub fn meta(&self) -> &StreamMeta {
        match self {
            Self::Appended { meta, .. } | Self::Duplicate { meta, .. } | Self::AlreadyClosed { meta } => meta,
        }
    }
}

impl StreamService {
    pub async fn append(&self, req: AppendRequest) -> ServiceResult<AppendOutcome> {
        if req.body.is_empty() && !req.close {
            return Err(ServiceError::BadRequest("empty body (only a close may be empty)".into()));
        }
        let _lease = self.sub.registry.enter(&req.path);
        self.mutate(&req.path, |reads| self.plan_append(&req, reads)).await
    }

    async fn plan_append(&self, req: &AppendRequest, reads: Reads) -> ServiceResult<Plan<AppendOutcome>> {
        let meta = self.live_meta(&req.path, reads).await?;

        // Producer fencing and dedup come first: a zombie learns it is fenced
        // and a retry learns it succeeded, whatever else changed since.
        let mut accepted = None;
        if let Some(p) = &req.producer {
            let state = self
                .producer_for_update(&meta, &p.id, reads)
                .await?
                .map(|s| State { epoch: s.epoch, last_seq: s.last_seq });
            match decide(state, p) {
                Decision::StaleEpoch { current } => return Err(ServiceError::StaleEpoch { current }),
                Decision::Duplicate { epoch, last_seq } => {
                    return Ok(Plan::Done(AppendOutcome::Duplicate { meta, producer: State { epoch, last_seq } }))
                }
                Decision::Accept { next } => accepted = Some(next),
                Decision::NewEpochNonZeroSeq | Decision::Gap { .. } if meta.closed => {}
                Decision::NewEpochNonZeroSeq => {
                    return Err(ServiceError::BadRequest("a new producer epoch must start at Producer-Seq 0".into()))
                }
                Decision::Gap { expected, received } => return Err(ServiceError::SeqGap { expected, received }),
            }
        }

        if meta.closed {
            return if req.body.is_empty() && req.close {
                Ok(Plan::Done(AppendOutcome::AlreadyClosed { meta }))
            } else {
                Err(ServiceError::StreamClosed { tail: meta.tail })
            };
        }

        let data = if req.body.is_empty() {
            Bytes::new()
        } else {
            let Some(ct) = req.content_type.as_deref() else {
                return Err(ServiceError::BadRequest("Content-Type is required with a body".into()));
            };
            ds_protocol::headers::validate_content_type(ct)?;
            if !content_types_match(ct, &meta.content_type) {
                return Err(ServiceError::Conflict(format!(
                    "Content-Type {ct:?} does not match the stream's {:?}",
                    meta.content_type
                )));
            }
            if is_json(&meta.content_type) {
                json::frame_messages(&req.body, EmptyArray::Reject)?
            } else {
                req.body.clone()
            }
        };

        if let (Some(seq), Some(last)) = (&req.seq, &meta.last_stream_seq) {
            if seq.as_bytes() <= last.as_bytes() {
                return Err(ServiceError::Conflict(format!("Stream-Seq {seq:?} is not greater than {last:?}")));
            }
        }

        let mut next = meta.clone();
        next.version += 1;
        next.tail += data.len() as u64;
        next.touched_at_ms = self.now_ms();
        if let Some(seq) = &req.seq {
            next.last_stream_seq = Some(seq.clone());
        }
        if req.close {
            next.closed = true;
            next.closed_by =
                req.producer.as_ref().map(|p| ProducerTriple { id: p.id.clone(), epoch: p.epoch, seq: p.seq });
        }
        let mut commit = Commit::new();
        commit.push(Op::PutMeta { meta: next.clone(), expect: Expect::Version(meta.version) });
        if !data.is_empty() {
            commit.push(Op::PutChunk {
                path: meta.path.clone(),
                incarnation: meta.incarnation.clone(),
                chunk: Chunk { start: meta.tail, data },
            });
        }
        if let (Some(p), Some(state)) = (&req.producer, accepted) {
            commit.push(Op::PutProducer {
                path: meta.path.clone(),
                incarnation: meta.incarnation.clone(),
                producer_id: p.id.clone(),
                state: ProducerState { epoch: state.epoch, last_seq: state.last_seq },
            });
        }
        let producer = match (&req.producer, accepted) {
            (Some(p), Some(s)) => Some((p.id.clone(), ProducerState { epoch: s.epoch, last_seq: s.last_seq })),
            _ => None,
        };
        Ok(Plan::Commit {
            commit,
            publish: vec![next.clone()],
            deleted: Vec::new(),
            speculate: Some((next.clone(), producer)),
            value: AppendOutcome::Appended { meta: next, producer: accepted },
        })
    }
}
