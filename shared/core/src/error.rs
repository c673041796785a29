//! What a substrate reports when a call fails: the one error type of every
//! [`crate::StreamStore`] and of the other substrate traits.

use std::sync::Arc;

/// The underlying failure a [`StoreError`] carries (kept behind an `Arc`
/// so that one failure can answer every commit of a failed batch).
pub type ErrorSource = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Errors a substrate reports. The core maps them to protocol status codes in
/// one place (`ds_http::error`).
#[derive(Debug, Clone, thiserror::Error)]
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
    /// A stored record cannot be read as it was written: a checksum
    /// mismatch, a record that does not decode, a gap or a dangling
    /// reference between records. Nothing was served or changed; retrying
    /// will not help: report it (the record needs restoring, or its stream
    /// deleting).
    // The source is part of the message too: the one place that logs these
    // (ds-http's error.rs) logs the message, and it must say what broke.
    #[error("storage failure: corrupt {what}: {source}")]
    Corrupt {
        /// The record, as an operator finds it (`meta record for orders/1`).
        what: String,
        #[source]
        source: ErrorSource,
    },
    /// The backend refused or failed `op` for a reason retrying will not
    /// fix (a request it rejects, an internal failure, a task that died, a
    /// commit whose outcome only a restart can settle). Report it.
    #[error("storage failure: {op}: {source}")]
    Backend {
        /// What was being done (`local store commit`, `DynamoDB TransactWriteItems`).
        op: &'static str,
        #[source]
        source: ErrorSource,
    },
    /// A write exceeds a size limit every substrate shares (e.g.
    /// [`crate::MAX_RECORD_BYTES`]). Nothing was written; retrying will not help.
    #[error("too large: {0}")]
    TooLarge(String),
}

impl StoreError {
    /// [`StoreError::Corrupt`]: `source` is the decoder's error, or a
    /// sentence (`"checksum mismatch"`).
    pub fn corrupt(what: impl Into<String>, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Corrupt { what: what.into(), source: Arc::from(source.into()) }
    }

    /// [`StoreError::Backend`]: `source` is the backend's error, or a
    /// sentence when the failure is this code's own finding.
    pub fn backend(op: &'static str, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Backend { op, source: Arc::from(source.into()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_cause_and_the_source_stays_reachable() {
        let io = std::io::Error::other("disk on fire");
        let e = StoreError::backend("local store read", io);
        assert_eq!(e.to_string(), "storage failure: local store read: disk on fire");
        let source = std::error::Error::source(&e).expect("a source");
        assert_eq!(source.to_string(), "disk on fire");
        let c = StoreError::corrupt("meta record for a", "checksum mismatch");
        assert_eq!(c.to_string(), "storage failure: corrupt meta record for a: checksum mismatch");
        // One failure answers every commit of a batch: clones share the source.
        let copy = c.clone();
        assert!(
            matches!((&c, &copy), (StoreError::Corrupt { source: a, .. }, StoreError::Corrupt { source: b, .. }) if Arc::ptr_eq(a, b))
        );
    }
}
