//! Error types and the mapping of redb failures onto [`StoreError`].

use std::path::PathBuf;

use ds_core::StoreError;

/// Why [`crate::LocalStore::open`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("creating the store directory {dir}: {source}")]
    CreateDir { dir: PathBuf, source: std::io::Error },
    /// The database file could not be opened, recovered or initialised
    /// (including `DatabaseAlreadyOpen`: another handle holds it).
    #[error("opening the database: {0}")]
    Database(#[from] redb::Error),
    #[error("starting the writer thread: {0}")]
    Writer(std::io::Error),
}

/// Map any redb failure: I/O trouble may pass (`Unavailable`), everything else
/// (corruption, a poisoned transaction, ...) will not (`Backend`).
pub(crate) fn storage(e: impl Into<redb::Error>) -> StoreError {
    match e.into() {
        redb::Error::Io(io) => StoreError::Unavailable(format!("local store I/O: {io}")),
        other => StoreError::Backend(format!("local store: {other}")),
    }
}

/// The same error for every commit of a failed batch (`StoreError` is not `Clone`).
pub(crate) fn replicate(e: &StoreError) -> StoreError {
    match e {
        StoreError::Conflict => StoreError::Conflict,
        StoreError::Unavailable(m) => StoreError::Unavailable(m.clone()),
        StoreError::Backend(m) => StoreError::Backend(m.clone()),
        StoreError::TooLarge(m) => StoreError::TooLarge(m.clone()),
    }
}
