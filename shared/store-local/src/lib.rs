//! The embedded durable default substrate: streams in one redb file, with a
//! write-ahead log in front of it.
//!
//! - [`LocalStore`]: a [`ds_core::StreamStore`] that is durable across
//!   `kill -9`: when `commit` returns `Ok`, the commit is fsync'd (in the
//!   log). Opening the directory after a crash recovers every acknowledged
//!   commit.
//! - [`local_substrate`]: the store plus the in-process services of
//!   `ds-inproc` (per-stream lock, hub, timer scheduler, registry).
//!
//! # Design
//! - **Group commit** (module `writer`): one writer thread owns the log and
//!   all write transactions. It drains every commit queued while the
//!   previous batch was syncing, checks each commit's preconditions in order
//!   (the rules of `ds_core::fold`) against the state the earlier ones left,
//!   stages those that hold, answers the others `Conflict` (they write
//!   nothing and do not affect the batch), makes the batch durable with ONE
//!   `fdatasync` and then acknowledges each commit. A pipelined append
//!   carries its prediction's `ds_core::Chain`: once one commit of a chain
//!   is not applied, the later ones are refused too, because their version
//!   and tail may name a state another writer left (not the one they were
//!   planned on).
//! - **Log first, tables at checkpoints** (modules `wal`, `overlay`, `redo`):
//!   a batch's staged net writes are appended to `streams.wal` and synced
//!   (the commit point), then merged into an in-memory overlay that reads
//!   consult before the tables. No redb transaction runs per batch: about
//!   once a second a checkpoint writes the overlay into the tables in one
//!   durable transaction and empties the overlay and the log; recovery
//!   replays the log entries past the tables' last durable commit.
//! - **Reads** never go through the writer. What the overlay holds (the
//!   writes since the last checkpoint: a live stream's tail) is served from
//!   memory; the rest opens its own MVCC read transaction on tokio's
//!   blocking pool, concurrently with other reads and with the writer; what a
//!   contiguous (catch-up) read took from the tables is kept in a bounded
//!   read cache (`ds_core::read_cache`), so the next catch-up of the same bytes
//!   is served from memory without the hop. The
//!   meta read that plans a mutation (`read_meta_for_update`) is served from
//!   the overlay or from the metas the writer committed last (module
//!   `meta_cache`) when they have it.
//! - **touch** is an in-memory overlay merged into every read (so the sliding
//!   TTL is exact within the process), written to disk about once a second,
//!   piggybacked on a commit batch when there is one — never an fsync per read.
//! - Records carry a CRC-32, checked on every read from the file; a corrupt one is
//!   `StoreError::Backend` (never served). Log entries carry one too; a torn
//!   last entry (a crash mid-write: never acknowledged) is cut off on open.
//! - A full disk answers `StoreError::Unavailable` with the reason; after a
//!   failed checkpoint the file is reopened and the log replayed, so writes
//!   resume once space returns.
//! - A trim's reclaim (module `reclaim`) deletes the chunk rows below the
//!   stream's `retained_from` in the next checkpoint's transaction: redb
//!   reuses the freed pages, so the file stops growing under a steady
//!   append-and-trim load (`examples/retention_plateau.rs`).
//! - Expiry alarms are not persisted: the host re-arms them from a
//!   `list_streams` sweep at start-up (the core enforces expiry lazily anyway).
//!
//! # Why redb, and why the log (measured)
//! redb 4 is a pure-Rust, actively maintained, ACID embedded B-tree with MVCC
//! readers and checksummed pages. Its durable commit writes every page the
//! transaction dirtied and syncs them: on the project machine
//! (`examples/throughput.rs`, 2 vCPU, virtio disk, ext4) one writer reached
//! 3,783 durable commits/s where a raw `write(100 B)` + `fdatasync` loop
//! reached 11,999/s, and 64 writers 15,355 commits/s (34 per sync). The
//! same transactions committed without a sync ran at 12,771 and 32,381
//! commits/s: the page writes and their sync were the cost, so the commit
//! point moved to one sequential log append. Even unsynced, a redb commit
//! per batch cost tens of microseconds on the path of every acknowledgement,
//! so batches now land in the overlay and the tables are written only at
//! checkpoints. Current figures:
//! `cargo run --release -p ds-store-local --example throughput` (the bench
//! reports in `bench/results/` give the HTTP-level ones).
//!
//! Start-up is bounded: checkpoints use redb's quick-repair (allocator state
//! saved with each durable commit), so opening after a crash does not walk
//! the whole file, and at most the log since the last checkpoint (about a
//! second of commits, at most 64 MiB) is replayed. `bench/startup.py`, 10,000
//! streams and 1 GB of data: under 100 ms after a clean stop and after
//! `kill -9` alike (without quick-repair, about 1 s after `kill -9`).

mod codec;
mod error;
mod handle;
mod meta_cache;
mod meta_codec;
mod overlay;
mod reclaim;
mod redo;
mod store;
mod tables;
mod touch;
mod wal;
mod writer;

use std::path::Path;
use std::sync::Arc;

use ds_core::{ExpiryDue, Substrate};
use tokio::sync::mpsc::UnboundedReceiver;

pub use error::OpenError;
pub use store::{LocalStore, DB_FILE};
pub use wal::WAL_FILE;
pub use writer::WriterStats;

/// The local substrate over the store in `dir` (created if missing), with the
/// in-process services of `ds-inproc`; expiry alarms arrive on the returned
/// receiver.
pub fn local_substrate(dir: &Path) -> Result<(Substrate, UnboundedReceiver<ExpiryDue>), OpenError> {
    let store = LocalStore::open(dir)?;
    Ok(ds_inproc::in_process_substrate(Arc::new(store)))
}
