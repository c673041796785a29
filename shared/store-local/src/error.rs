//! Error types and the mapping of redb failures onto [`StoreError`].

use std::path::PathBuf;

use ds_core::StoreError;

/// Why [`crate::LocalStore::open`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    #[error("creating the store directory {dir}: {source}")]
    CreateDir { dir: PathBuf, source: std::io::Error },
    /// The database file could not be opened, recovered or initialised
    /// (including `DatabaseAlreadyOpen`: another handle holds it).
    #[error("opening the database: {0}")]
    Database(#[from] redb::Error),
    /// The write-ahead log could not be read, replayed or emptied.
    #[error("recovering from the log in {dir}: {source}")]
    Recovery { dir: PathBuf, source: StoreError },
    #[error("starting the writer thread: {0}")]
    Writer(std::io::Error),
    /// The directory holds records of an earlier, unchecksummed format.
    #[error("{0}")]
    LegacyFormat(String),
}

/// Map any redb failure: I/O trouble may pass (`Unavailable`, with the reason:
/// a full disk is named as such), everything else (corruption, a poisoned
/// transaction, ...) will not (`Backend`).
pub(crate) fn storage(e: impl Into<redb::Error>) -> StoreError {
    match e.into() {
        redb::Error::Io(io) => StoreError::Unavailable(io_reason(&io)),
        redb::Error::PreviousIo => {
            StoreError::Unavailable("local store: recovering from an earlier I/O error (e.g. a full disk)".into())
        }
        other => StoreError::backend("local store", other),
    }
}

/// A failed log or file operation (see [`storage`] for the wording).
pub(crate) fn io_failure(e: std::io::Error) -> StoreError {
    StoreError::Unavailable(io_reason(&e))
}

fn io_reason(io: &std::io::Error) -> String {
    if io.kind() == std::io::ErrorKind::StorageFull {
        format!("local store: disk full, nothing was written ({io})")
    } else {
        format!("local store I/O: {io}")
    }
}

/// A failed `commit` of a write transaction. redb cannot say whether it
/// became durable, so the outcome is unknown: never "nothing was written".
/// I/O failures (a full disk) pass and are retryable, like any unknown
/// outcome (idempotent producers make the retry safe).
pub(crate) fn commit_failure(e: redb::CommitError) -> StoreError {
    let unknown = "the outcome of this write is unknown until the store recovers; retry";
    match redb::Error::from(e) {
        redb::Error::Io(io) if io.kind() == std::io::ErrorKind::StorageFull => {
            StoreError::Unavailable(format!("local store: disk full while committing ({io}); {unknown}"))
        }
        redb::Error::Io(io) => StoreError::Unavailable(format!("local store: commit failed ({io}); {unknown}")),
        redb::Error::PreviousIo => {
            StoreError::Unavailable(format!("local store: commit failed after an I/O error; {unknown}"))
        }
        other => StoreError::backend("local store commit (outcome unknown, reopen the store)", other),
    }
}
