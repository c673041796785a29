//! Header names, and the helper that reads a request header as `&str`.

use axum::http::{HeaderName, HeaderValue};
use ds_protocol::Offset;

// Reading a request header as text answers with the surface's errors, so it
// lives with the request's other readers (`request.rs`).
pub use crate::request::get;

pub const STREAM_NEXT_OFFSET: &str = "stream-next-offset";
pub const STREAM_UP_TO_DATE: &str = "stream-up-to-date";
pub const STREAM_CLOSED: &str = "stream-closed";
pub const STREAM_CURSOR: &str = "stream-cursor";
pub const STREAM_TTL: &str = "stream-ttl";
pub const STREAM_EXPIRES_AT: &str = "stream-expires-at";
pub const STREAM_SEQ: &str = "stream-seq";
pub const STREAM_FORKED_FROM: &str = "stream-forked-from";
pub const STREAM_FORK_OFFSET: &str = "stream-fork-offset";
pub const STREAM_FORK_SUB_OFFSET: &str = "stream-fork-sub-offset";
pub const STREAM_SSE_DATA_ENCODING: &str = "stream-sse-data-encoding";
/// The earliest offset still retained, once retention dropped a stream's
/// history (on HEAD, successful reads and the 410 of a read before it).
pub const STREAM_EARLIEST_OFFSET: &str = "stream-earliest-offset";
pub const PRODUCER_ID: &str = "producer-id";
pub const PRODUCER_EPOCH: &str = "producer-epoch";
pub const PRODUCER_SEQ: &str = "producer-seq";
pub const PRODUCER_EXPECTED_SEQ: &str = "producer-expected-seq";
pub const PRODUCER_RECEIVED_SEQ: &str = "producer-received-seq";
/// The current cursor revision, on a processor control's `409 REVISION_MISMATCH`.
pub const PROCESSOR_CURSOR_REVISION: &str = "processor-cursor-revision";

/// Response headers browsers may read (CORS `Access-Control-Expose-Headers`).
pub const EXPOSED: &str = "stream-next-offset, stream-up-to-date, stream-closed, stream-cursor, stream-ttl, \
stream-expires-at, stream-sse-data-encoding, stream-earliest-offset, producer-epoch, producer-seq, producer-expected-seq, \
producer-received-seq, processor-cursor-revision, etag, location, content-type";

/// The hot names as [`HeaderName`]s, built at compile time: a `&str` name is
/// parsed (and, for a custom name, hashed from scratch) on every use.
pub mod name {
    use super::HeaderName;

    pub const STREAM_NEXT_OFFSET: HeaderName = HeaderName::from_static(super::STREAM_NEXT_OFFSET);
    pub const STREAM_UP_TO_DATE: HeaderName = HeaderName::from_static(super::STREAM_UP_TO_DATE);
    pub const STREAM_CLOSED: HeaderName = HeaderName::from_static(super::STREAM_CLOSED);
    pub const STREAM_CURSOR: HeaderName = HeaderName::from_static(super::STREAM_CURSOR);
    pub const STREAM_EARLIEST_OFFSET: HeaderName = HeaderName::from_static(super::STREAM_EARLIEST_OFFSET);
    pub const STREAM_SEQ: HeaderName = HeaderName::from_static(super::STREAM_SEQ);
    pub const PRODUCER_ID: HeaderName = HeaderName::from_static(super::PRODUCER_ID);
    pub const PRODUCER_EPOCH: HeaderName = HeaderName::from_static(super::PRODUCER_EPOCH);
    pub const PRODUCER_SEQ: HeaderName = HeaderName::from_static(super::PRODUCER_SEQ);
    pub const X_CONTENT_TYPE_OPTIONS: HeaderName = HeaderName::from_static("x-content-type-options");
    pub const CROSS_ORIGIN_RESOURCE_POLICY: HeaderName = HeaderName::from_static("cross-origin-resource-policy");
}

/// An offset header value (one allocation: the value's own bytes).
pub fn offset_value(position: u64) -> HeaderValue {
    let token = Offset(position).to_token();
    // Digits and `_`: always a valid header value.
    HeaderValue::from_bytes(&token).unwrap_or_else(|_| HeaderValue::from_static(""))
}
