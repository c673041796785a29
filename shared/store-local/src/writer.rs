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
//! 3. the applied writes are appended to the log and synced (the commit
//!    point), then the transaction commits without a sync, and only then is
//!    each commit acknowledged (the protocol and recovery: [`crate::redo`]).
//!
//! So while one batch syncs, the next one accumulates: with N concurrent
//! writers a sync is shared by up to N commits. If applying or syncing fails,
//! the whole transaction is dropped and every commit of the batch gets the
//! error (nothing of the batch is acknowledged as written). After a batch
//! that failed anywhere but in a cleanly undone log append, the database is
//! reopened and the log replayed before the next one (see
//! [`crate::handle`]), since redb then forgets its non-durable commits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ds_core::fold::NetWrites;
use ds_core::StoreError;
use redb::{Database, Durability};
use tokio::sync::oneshot;

use crate::codec::encode_metas;
use crate::error::{commit_failure, io_failure, replicate, storage};
use crate::handle::DbHandle;
use crate::meta_cache::CommittedMetas;
use crate::redo::{self, AppliedCommit, TouchWrite};
use crate::tables::WriteTables;
use crate::touch::{Touch, TouchOverlay};
use crate::wal::{AppendError, Wal};

/// Most commits in one transaction (bounds the latency a batch adds).
pub(crate) const MAX_BATCH_COMMITS: usize = 1024;
/// Most chunk bytes in one transaction.
pub(crate) const MAX_BATCH_BYTES: usize = 32 << 20;
/// How often pending touches are written to disk.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How often the tables are made durable and the log emptied under load (a
/// checkpoint: one durable redb commit). Bounds the log replayed after a crash.
pub(crate) const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// Log size that triggers a checkpoint sooner.
pub(crate) const CHECKPOINT_BYTES: u64 = 64 << 20;

/// Counters of the writer's work, for tests and metrics.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Commits answered (applied or refused).
    pub commits: AtomicU64,
    /// Log entries synced (one `fdatasync` each).
    pub syncs: AtomicU64,
    /// Log entries replayed by recovery (at open and after failed batches).
    pub replayed: AtomicU64,
}

/// A snapshot of the writer's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterStats {
    /// Commits answered (applied or refused with `Conflict`).
    pub commits: u64,
    /// Batches made durable, each with one log `fdatasync`. Under
    /// concurrency this is well below `commits`: that is the group commit.
    pub syncs: u64,
    /// Log entries applied again by recovery: at open (after a crash, the
    /// commits acknowledged since the last checkpoint) and after a failed
    /// batch.
    pub replayed: u64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> WriterStats {
        WriterStats {
            commits: self.commits.load(Ordering::Relaxed),
            syncs: self.syncs.load(Ordering::Relaxed),
            replayed: self.replayed.load(Ordering::Relaxed),
        }
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
/// pending touches, checkpoints (so a clean shutdown leaves an empty log) and
/// returns (dropping its handle on the database).
pub(crate) fn run(db: Arc<DbHandle>, wal: Wal, next_lsn: u64, jobs: Receiver<Job>, shared: Shared) {
    let mut writer = Writer { db, wal, next_lsn, last_checkpoint: Instant::now(), needs_recovery: false, shared };
    let mut last_flush = Instant::now();
    loop {
        let first = match jobs.recv_timeout(FLUSH_EVERY) {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => {
                // Idle: flush touches and make the tables durable.
                if !writer.shared.touches.is_empty() || writer.wal.len() > 0 {
                    writer.write_batch(Vec::new(), true, true);
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
        let checkpoint = writer.checkpoint_due();
        let commits = batch.iter().map(|j| &j.writes).collect();
        let outcomes = writer.write_batch(commits, flush, checkpoint);
        for (job, outcome) in batch.into_iter().zip(outcomes) {
            // The committer may have given up waiting; the outcome stands anyway.
            let _ = job.ack.send(outcome);
        }
    }
    writer.write_batch(Vec::new(), true, true);
    if let Err(e) = writer.wal.truncate_empty() {
        tracing::warn!(error = %e, "local store: could not shrink the emptied log at shutdown");
    }
}

/// The writer thread's state.
struct Writer {
    db: Arc<DbHandle>,
    wal: Wal,
    /// LSN of the next log entry.
    next_lsn: u64,
    last_checkpoint: Instant,
    /// A batch failed: reopen the database and replay the log before the next.
    needs_recovery: bool,
    shared: Shared,
}

/// What a batch did.
struct Done {
    outcomes: Vec<Result<(), StoreError>>,
    /// A log entry was synced.
    logged: bool,
    /// The tables were committed durably: the log can be emptied.
    checkpointed: bool,
}

/// A failed batch, and whether redb and the log may now disagree.
struct Failed {
    error: StoreError,
    recover: bool,
}

impl From<StoreError> for Failed {
    fn from(error: StoreError) -> Self {
        Self { error, recover: true }
    }
}

impl Writer {
    fn checkpoint_due(&self) -> bool {
        self.wal.len() >= CHECKPOINT_BYTES || (self.wal.len() > 0 && self.last_checkpoint.elapsed() >= CHECKPOINT_EVERY)
    }

    /// The open database, first recovering from a failed batch if needed.
    fn ready(&mut self) -> Result<Arc<Database>, StoreError> {
        if self.needs_recovery {
            self.db.reopen()?;
            let db = self.db.get()?;
            let recovered = redo::recover(&db, &mut self.wal)?;
            self.next_lsn = recovered.last + 1;
            self.shared.counters.replayed.fetch_add(recovered.replayed, Ordering::Relaxed);
            self.needs_recovery = false;
            self.last_checkpoint = Instant::now();
            tracing::warn!("local store recovered after a failed batch (database reopened, log replayed)");
            return Ok(db);
        }
        self.db.get()
    }

    /// Run `commits` (and, if `flush`, the pending touches) as one batch;
    /// a `checkpoint` batch commits the tables durably and empties the log.
    /// Returns one outcome per commit, in order.
    fn write_batch(&mut self, commits: Vec<&NetWrites>, flush: bool, checkpoint: bool) -> Vec<Result<(), StoreError>> {
        let flushed = if flush { self.shared.touches.snapshot() } else { Vec::new() };
        let counters = Arc::clone(&self.shared.counters);
        counters.commits.fetch_add(commits.len() as u64, Ordering::Relaxed);
        if !commits.is_empty() {
            metrics::histogram!("ds_store_commit_batch_size").record(commits.len() as f64);
        }
        let result = match self.ready() {
            Ok(db) => self.try_write_batch(&db, &commits, &flushed, checkpoint),
            Err(error) => Err(Failed { error, recover: false }),
        };
        match result {
            Ok(done) => {
                if done.logged {
                    counters.syncs.fetch_add(1, Ordering::Relaxed);
                }
                // Cache first: a reader that finds the overlay entry gone must
                // find the flushed touch in the cached meta.
                self.shared.metas.batch_committed(&commits, &done.outcomes, &flushed);
                self.shared.touches.forget(&flushed);
                if done.checkpointed {
                    self.last_checkpoint = Instant::now();
                    self.wal.clear();
                }
                done.outcomes
            }
            Err(Failed { error, recover }) => {
                tracing::error!(error = %error, commits = commits.len(), "local store batch failed");
                self.needs_recovery |= recover;
                self.shared.metas.clear();
                commits.iter().map(|_| Err(replicate(&error))).collect()
            }
        }
    }

    fn try_write_batch(
        &mut self,
        db: &Database,
        commits: &[&NetWrites],
        touches: &[(String, Touch)],
        checkpoint: bool,
    ) -> Result<Done, Failed> {
        let mut txn = db.begin_write().map_err(storage)?;
        let durability = if checkpoint { Durability::Immediate } else { Durability::None };
        txn.set_durability(durability).map_err(storage)?;
        // Checkpoints save redb's allocator state, so opening after a crash
        // need not walk the whole file (see `redo`).
        txn.set_quick_repair(checkpoint);
        let mut outcomes = Vec::with_capacity(commits.len());
        let mut applied: Vec<AppliedCommit<'_>> = Vec::with_capacity(commits.len());
        let mut logged = false;
        {
            let mut tables = WriteTables::open(&txn)?;
            for writes in commits {
                match writes.check(&tables) {
                    Ok(()) => {
                        // An error here leaves the transaction half-applied; it is
                        // dropped (aborted) by the `?`, so nothing of the batch lands.
                        let metas = encode_metas(writes)?;
                        tables.apply(writes, &metas)?;
                        applied.push((writes, metas));
                        outcomes.push(Ok(()));
                    }
                    Err(conflict) => outcomes.push(Err(conflict)),
                }
            }
            let mut touched: Vec<TouchWrite<'_>> = Vec::new();
            for (path, touch) in touches {
                if tables.apply_touch(path, &touch.incarnation, touch.at_ms)? {
                    touched.push((path, &touch.incarnation, touch.at_ms));
                }
            }
            if !applied.is_empty() || !touched.is_empty() {
                let lsn = self.next_lsn;
                tables.set_applied_lsn(lsn)?;
                let entry = redo::encode_batch(&applied, &touched);
                let started = Instant::now();
                // The commit point: once this returns, the batch survives a crash.
                self.wal.append(lsn, &entry).map_err(|e| match e {
                    // The transaction is dropped: nothing of the batch exists anywhere.
                    AppendError::NotWritten(io) => Failed { error: io_failure(io), recover: false },
                    AppendError::Unknown(io) => Failed {
                        error: StoreError::Unavailable(format!(
                            "local store: log write failed ({io}); the outcome of this write is unknown until \
                             the store recovers; retry"
                        )),
                        recover: true,
                    },
                })?;
                metrics::histogram!("ds_store_fsync_seconds").record(started.elapsed().as_secs_f64());
                self.next_lsn += 1;
                logged = true;
            } else if checkpoint && self.wal.len() > 0 {
                // Nothing new, but earlier non-durable commits to make durable.
                tables.set_applied_lsn(self.next_lsn - 1)?;
            } else {
                drop(tables);
                txn.abort().map_err(storage)?;
                return Ok(Done { outcomes, logged: false, checkpointed: false });
            }
        }
        // Logged (or a checkpoint): a failure from here on leaves the log
        // ahead of redb; the next batch recovers first.
        txn.commit().map_err(commit_failure)?;
        Ok(Done { outcomes, logged, checkpointed: checkpoint })
    }
}
