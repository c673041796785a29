//! Header names, and small helpers to read request headers as `&str`.

use axum::http::HeaderMap;

use crate::error::ApiError;

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
pub const PRODUCER_ID: &str = "producer-id";
pub const PRODUCER_EPOCH: &str = "producer-epoch";
pub const PRODUCER_SEQ: &str = "producer-seq";
pub const PRODUCER_EXPECTED_SEQ: &str = "producer-expected-seq";
pub const PRODUCER_RECEIVED_SEQ: &str = "producer-received-seq";
/// The current cursor revision, on a processor control's `409 REVISION_MISMATCH`.
pub const PROCESSOR_CURSOR_REVISION: &str = "processor-cursor-revision";

/// Response headers browsers may read (CORS `Access-Control-Expose-Headers`).
pub const EXPOSED: &str = "stream-next-offset, stream-up-to-date, stream-closed, stream-cursor, stream-ttl, \
stream-expires-at, stream-sse-data-encoding, producer-epoch, producer-seq, producer-expected-seq, \
producer-received-seq, processor-cursor-revision, etag, location, content-type";

/// A request header as text; a value that is not visible ASCII is a 400.
pub fn get<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, ApiError> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v.to_str().map(Some).map_err(|_| ApiError::bad_request(format!("header {name} is not valid text"))),
    }
}
