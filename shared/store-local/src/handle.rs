//! The open database, reopened after an I/O failure.
//!
//! Once a read or write of the file fails (a full disk, for one), redb
//! refuses every later operation with `PreviousIo` until the database is
//! closed and opened again. Without a reopen, one moment of `ENOSPC` would
//! stop the store until the process restarts. Before the batch after a failed
//! checkpoint (or a log write whose outcome is unknown), the writer thread
//! reopens the file (redb recovers it to its last durable commit) and replays
//! the log on it ([`crate::redo::recover`]), retrying before each later batch
//! while that fails; reads of the tables meanwhile answer `Unavailable`.

use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use ds_core::StoreError;
use redb::Database;

use crate::error::storage;

pub(crate) struct DbHandle {
    file: PathBuf,
    current: RwLock<Option<Arc<Database>>>,
}

impl DbHandle {
    pub(crate) fn new(file: PathBuf, db: Database) -> Self {
        Self { file, current: RwLock::new(Some(Arc::new(db))) }
    }

    /// The open database, or `Unavailable` while it is being reopened.
    pub(crate) fn get(&self) -> Result<Arc<Database>, StoreError> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone().ok_or_else(|| {
            StoreError::Unavailable("local store is reopening its file after an I/O error (e.g. a full disk)".into())
        })
    }

    /// Close the database and open it again. Reads in flight hold their own
    /// handle for the length of one read transaction: wait for them, since
    /// redb opens a file only once.
    pub(crate) fn reopen(&self) -> Result<(), StoreError> {
        let old = self.current.write().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(mut old) = old {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                match Arc::try_unwrap(old) {
                    Ok(db) => {
                        drop(db);
                        break;
                    }
                    Err(shared) if Instant::now() < deadline => {
                        old = shared;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(_) => {
                        return Err(StoreError::Unavailable("local store: reads did not finish; reopen later".into()))
                    }
                }
            }
        }
        let db = create_database(&self.file).map_err(storage)?;
        tracing::warn!(file = %self.file.display(), "local store reopened after a failed batch");
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(db));
        Ok(())
    }
}

/// redb's page cache (its default is 1 GiB). Kept small because it is a
/// second copy of pages the kernel's page cache holds anyway, and the hot
/// paths do not go through it: a live stream's tail is in the overlay, the
/// metas of streams being written are in the committed-meta cache, and a
/// repeated catch-up is in the read cache. What it spares is a `pread` of a
/// cold page. The B-tree pages hold ~650 B per stream (half full, as keys
/// land between existing ones), so a 32 MiB cache had grown by that much per
/// idle stream up to 50,000 streams. P4 at 10,000 streams: 1,093 B per
/// stream before, 422 B with 1 MiB (and the overlay's smaller bound), P1,
/// P2 and P7 unchanged (bench/results/2026-12-03-p4-ab.md); a 256 KiB
/// cache cost 15% of the create rate (P7).
pub(crate) const CACHE_BYTES: usize = 1024 * 1024;

/// Open (creating if needed) the database file with this store's settings.
pub(crate) fn create_database(file: &std::path::Path) -> Result<Database, redb::DatabaseError> {
    Database::builder().set_cache_size(CACHE_BYTES).create(file)
}
