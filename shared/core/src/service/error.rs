//! The service's typed errors: one variant per protocol outcome that is not a
//! success. `ds_http::error` is the one place they become status codes.

use ds_protocol::ProtocolError;

use crate::StoreError;

#[derive(Debug, thiserror::Error)]
// Exhaustive on purpose: ds-http's error.rs maps every variant to a status
// code, and a new variant must fail that build rather than become a 500.
pub enum ServiceError {
    /// Malformed input (400), with the rule it broke.
    #[error(transparent)]
    Invalid(#[from] ProtocolError),
    /// Other 400s that are not header/body syntax (e.g. fork offset past the tail).
    #[error("{0}")]
    BadRequest(String),
    #[error("stream not found")]
    NotFound,
    /// The stream exists but has expired: reads as 404. Inside a mutation the
    /// core removes it (outside the lock) and re-plans.
    #[error("stream not found")]
    Expired(Box<crate::StreamMeta>),
    /// Soft-deleted stream (410).
    #[error("stream is deleted")]
    Gone,
    /// 410: the position asked for (a read's offset, a fork's offset) lies
    /// before the stream's earliest retained position: retention dropped
    /// those bytes (`StreamService::trim`). `earliest` is where reading can
    /// resume (`Stream-Earliest-Offset`).
    #[error("the offset is before the earliest retained offset {}: retention dropped the stream's history before it", ds_protocol::Offset(*earliest))]
    NotRetained { earliest: u64 },
    /// 409 with a reason (config mismatch, content-type mismatch, seq regression…).
    #[error("{0}")]
    Conflict(String),
    /// 409: an append that named the tail it must land at
    /// (`AppendRequest::expect_tail`) found another one. In-process only
    /// (State Protocol compaction: a snapshot lands right after the state it
    /// was built from, or not at all).
    #[error("the stream's tail moved: expected {}, found {}", ds_protocol::Offset(*expected), ds_protocol::Offset(*tail))]
    TailMoved { expected: u64, tail: u64 },
    /// 409 for an append to a closed stream; carries the final tail.
    #[error("stream is closed")]
    StreamClosed { tail: u64 },
    /// 403: the producer's epoch is older than the stream's (zombie fencing).
    #[error("stale producer epoch; current epoch is {current}")]
    StaleEpoch { current: u64 },
    /// 409: producer sequence gap.
    #[error("producer sequence gap: expected {expected}, received {received}")]
    SeqGap { expected: u64, received: u64 },
    /// The stream at the path is another incarnation than the caller is bound
    /// to (deleted and re-created since): the caller must not read or write
    /// the new one as if it were the old.
    #[error("stream incarnation changed (expected {expected}, found {found})")]
    IncarnationChanged { expected: String, found: String },
    /// 403: the path is the server's own (`__registry__`): clients read it,
    /// only the server writes it.
    #[error("{0}")]
    Reserved(String),
    /// 400: an inline processor refused the append (its `validate`); nothing
    /// was written, so the producer may retry with a corrected event.
    #[error("append rejected by processor {processor:?}: {reason}")]
    InlineRejected { processor: String, position: u64, reason: String },
    /// 503: an inline processor bound to the stream cannot build its state
    /// (its refold failed); appends wait for an operator's reset or skip.
    #[error("processor {processor:?} cannot admit appends to this stream: {reason}")]
    InlineUnavailable { processor: String, reason: String },
    /// 503: too many concurrent writers kept invalidating this request's read.
    #[error("too much contention on this stream, retry")]
    Contention,
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub type ServiceResult<T> = Result<T, ServiceError>;
