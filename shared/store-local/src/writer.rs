//! The single writer thread and its group commit.
//!
//! Every commit goes through one OS thread that owns all write transactions.
//! It blocks for the first pending commit, then drains whatever else queued up
//! meanwhile (bounded by [`MAX_BATCH_COMMITS`] / [`MAX_BATCH_BYTES`]) and runs
//! the whole batch in ONE redb write transaction with one fsync:
//! 1. each commit's net writes ([`ds_core::fold`]) are checked, in arrival
//!    order, against the transaction's state (so they see the earlier commits
//!    of the batch);
//! 2. commits that hold are applied, the others are answered `Conflict` and
//!    write nothing — a failed commit never affects its neighbours;
//! 3. the transaction commits durably (`Durability::Immediate`), and only then
//!    is each commit acknowledged.
//!
//! So while one batch syncs, the next one accumulates: with N concurrent
//! writers a sync is shared by up to N commits. If applying or syncing fails,
//! the whole transaction is dropped and every commit of the batch gets the
//! error (nothing of the batch is acknowledged as written). After an I/O
//! failure the database is reopened (see [`crate::handle`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ds_core::fold::NetWrites;
use ds_core::StoreError;
use redb::{Database, Durability};
use tokio::sync::oneshot;

use crate::error::{commit_failure, replicate, storage};
use crate::handle::DbHandle;
use crate::meta_cache::CommittedMetas;
use crate::tables::WriteTables;
use crate::touch::{Touch, TouchOverlay};

/// Most commits in one transaction (bounds the latency a batch adds).
pub(crate) const MAX_BATCH_COMMITS: usize = 1024;
/// Most chunk bytes in one transaction.
pub(crate) const MAX_BATCH_BYTES: usize = 32 << 20;
/// How often pending touches are written to disk.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// Counters of the writer's work, for tests and metrics.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Commits answered (applied or refused).
    pub commits: AtomicU64,
    /// Durable transactions committed (one fsync each).
    pub syncs: AtomicU64,
}

/// A snapshot of the writer's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterStats {
    /// Commits answered (applied or refused with `Conflict`).
    pub commits: u64,
    /// Durable transactions committed, each with one fsync. Under concurrency
    /// this is well below `commits`: that is the group commit.
    pub syncs: u64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> WriterStats {
        WriterStats { commits: self.commits.load(Ordering::Relaxed), syncs: self.syncs.load(Ordering::Relaxed) }
    }
}

/// One commit (folded into its net writes) waiting for the writer, and
/// where to send its outcome.
pub(crate) struct Job {
    pub writes: NetWrites,
    pub ack: oneshot::Sender<Result<(), StoreError>>,
}

/// What the writer shares with the store's readers.
pub(crate) struct Shared {
    pub touches: Arc<TouchOverlay>,
    /// Fed after every durable batch, before its acknowledgements.
    pub metas: Arc<CommittedMetas>,
    pub counters: Arc<Counters>,
}

/// The writer thread body: runs until every sender is gone, then flushes the
/// pending touches and returns (dropping its handle on the database).
pub(crate) fn run(db: Arc<DbHandle>, jobs: Receiver<Job>, shared: Shared) {
    let touches = &*shared.touches;
    let mut last_flush = Instant::now();
    loop {
        let first = match jobs.recv_timeout(FLUSH_EVERY) {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => {
                if !touches.is_empty() {
                    write_batch(&db, Vec::new(), true, &shared);
                    last_flush = Instant::now();
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let mut bytes = first.writes.chunk_bytes();
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH_COMMITS && bytes < MAX_BATCH_BYTES {
            match jobs.try_recv() {
                Ok(job) => {
                    bytes += job.writes.chunk_bytes();
                    batch.push(job);
                }
                Err(_) => break,
            }
        }
        // Touches ride along with a batch once per interval: no extra sync.
        let flush = last_flush.elapsed() >= FLUSH_EVERY;
        if flush {
            last_flush = Instant::now();
        }
        let commits = batch.iter().map(|j| &j.writes).collect();
        let outcomes = write_batch(&db, commits, flush, &shared);
        for (job, outcome) in batch.into_iter().zip(outcomes) {
            // The committer may have given up waiting; the outcome stands anyway.
            let _ = job.ack.send(outcome);
        }
    }
    if !touches.is_empty() {
        write_batch(&db, Vec::new(), true, &shared);
    }
}

/// Run `commits` (and, if `flush`, the pending touches) in one durable
/// transaction. Returns one outcome per commit, in order.
fn write_batch(db: &DbHandle, commits: Vec<&NetWrites>, flush: bool, shared: &Shared) -> Vec<Result<(), StoreError>> {
    let counters = &shared.counters;
    let flushed = if flush { shared.touches.snapshot() } else { Vec::new() };
    counters.commits.fetch_add(commits.len() as u64, Ordering::Relaxed);
    if !commits.is_empty() {
        metrics::histogram!("ds_store_commit_batch_size").record(commits.len() as f64);
    }
    match db.get_or_reopen().and_then(|open| try_write_batch(&open, &commits, &flushed)) {
        Ok((outcomes, synced)) => {
            if synced {
                counters.syncs.fetch_add(1, Ordering::Relaxed);
            }
            // Cache first: a reader that finds the overlay entry gone must
            // find the flushed touch in the cached meta.
            shared.metas.batch_committed(&commits, &outcomes, &flushed);
            shared.touches.forget(&flushed);
            outcomes
        }
        Err(e) => {
            tracing::error!(error = %e, commits = commits.len(), "local store batch failed");
            // I/O failures (the only `Unavailable` here) leave redb refusing
            // all work until the file is reopened.
            if matches!(e, StoreError::Unavailable(_)) {
                db.recover();
            }
            shared.metas.clear();
            commits.iter().map(|_| Err(replicate(&e))).collect()
        }
    }
}

fn try_write_batch(
    db: &Database,
    commits: &[&NetWrites],
    touches: &[(String, Touch)],
) -> Result<(Vec<Result<(), StoreError>>, bool), StoreError> {
    let mut txn = db.begin_write().map_err(storage)?;
    txn.set_durability(Durability::Immediate).map_err(storage)?;
    let mut outcomes = Vec::with_capacity(commits.len());
    let mut wrote = false;
    {
        let mut tables = WriteTables::open(&txn)?;
        for writes in commits {
            match writes.check(&tables) {
                Ok(()) => {
                    // An error here leaves the transaction half-applied; it is
                    // dropped (aborted) by the `?`, so nothing of the batch lands.
                    tables.apply(writes)?;
                    wrote = true;
                    outcomes.push(Ok(()));
                }
                Err(conflict) => outcomes.push(Err(conflict)),
            }
        }
        for (path, touch) in touches {
            wrote |= tables.apply_touch(path, &touch.incarnation, touch.at_ms)?;
        }
    }
    if wrote {
        let started = Instant::now();
        let committed = txn.commit();
        metrics::histogram!("ds_store_fsync_seconds").record(started.elapsed().as_secs_f64());
        committed.map_err(commit_failure)?;
    } else {
        txn.abort().map_err(storage)?;
    }
    Ok((outcomes, wrote))
}
