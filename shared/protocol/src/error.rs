//! Bad client input. Every variant becomes a `400 Bad Request` with its
//! message as the reason (mapped in `ds_http::error`).

/// A request the protocol rejects as malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    #[error("invalid offset: {0}")]
    InvalidOffset(String),
    #[error("invalid Stream-TTL: {0}")]
    InvalidTtl(String),
    #[error("invalid Stream-Expires-At: {0}")]
    InvalidExpiresAt(String),
    #[error("Stream-TTL and Stream-Expires-At are mutually exclusive")]
    TtlAndExpiresAt,
    #[error("invalid producer headers: {0}")]
    InvalidProducer(String),
    #[error("invalid fork headers: {0}")]
    InvalidFork(String),
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    #[error("empty JSON array is not a valid append")]
    EmptyJsonArray,
    #[error("invalid stream path: {0}")]
    InvalidPath(String),
    #[error("invalid Content-Type: {0}")]
    InvalidContentType(String),
    #[error("invalid query: {0}")]
    InvalidQuery(String),
}
