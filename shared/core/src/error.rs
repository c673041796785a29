//! What a substrate reports when a call fails: the one error type of every
//! [`crate::StreamStore`] and of the other substrate traits.

/// Errors a substrate reports. The core maps them to protocol status codes in
/// one place (`ds_http::error`).
#[derive(Debug, thiserror::Error)]
// Exhaustive on purpose: ds-http's error.rs maps every variant to a status
// code, and a new variant must fail that build rather than become a 500.
pub enum StoreError {
    /// A precondition of the commit did not hold (another writer got there
    /// first). Nothing was written; re-read, re-validate and retry.
    #[error("commit precondition failed (concurrent writer)")]
    Conflict,
    /// Transient: throttling, timeouts, an unreachable backend. Nothing was
    /// written by the failing call. The request may be retried.
    #[error("storage temporarily unavailable: {0}")]
    Unavailable(String),
    /// A stored record could not be decoded, or the backend rejected the
    /// request for a reason retrying will not fix.
    #[error("storage failure: {0}")]
    Backend(String),
    /// A write exceeds a size limit every substrate shares (e.g.
    /// [`crate::MAX_RECORD_BYTES`]). Nothing was written; retrying will not help.
    #[error("too large: {0}")]
    TooLarge(String),
}
