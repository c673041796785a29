//! The single writer thread and its group commit.
//!
//! Every commit goes through one OS thread that owns the log and all write
//! transactions. It blocks for the first pending commit, then drains
//! whatever else queued up meanwhile (bounded by [`MAX_BATCH_COMMITS`] /
//! [`MAX_BATCH_BYTES`]) and runs the whole batch with one `fdatasync`:
//! 1. each commit's net writes ([`ds_core::fold`]) are checked, in arrival
//!    order, against the batch's staged writes, the overlay and the tables
//!    (so they see the earlier commits of the batch);
//! 2. commits that hold are staged, the others are answered `Conflict` and
//!    write nothing — a failed commit never affects its neighbours, except
//!    the later commits of its pipeline chain (`ds_core::Chain`), which are
//!    refused without being checked;
//! 3. the staged writes are appended to the log and synced (the commit
//!    point), merged into the overlay (readers see them), and only then is
//!    each commit acknowledged (the protocol and recovery: [`crate::redo`]).
//!
//! So while one batch syncs, the next one accumulates: with N concurrent
//! writers a sync is shared by up to N commits. If the log append fails,
//! every commit of the batch gets the error and nothing of it is visible.
//!
//! No redb transaction runs per batch: about once a second (or once the log
//! holds [`CHECKPOINT_BYTES`], or the overlay [`CHECKPOINT_STREAMS`]
//! streams) a *checkpoint* writes the overlay into the
//! tables in one durable transaction and empties the overlay and the log.
//! After a failed checkpoint (or a log append whose outcome is unknown) the
//! database is reopened and the log replayed into it before the next batch
//! (see [`crate::handle`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use ds_core::fold::NetWrites;
use ds_core::{Chain, StoreError};
use redb::{Durability, ReadableDatabase};
use tokio::sync::oneshot;

use crate::codec::encode_metas;
use crate::error::{commit_failure, io_failure, storage};
use crate::handle::DbHandle;
use crate::meta_cache::CommittedMetas;
use crate::overlay::{Layers, Overlay};
use crate::redo::{self, AppliedCommit, TouchWrite};
use crate::tables::{ReadTables, WriteTables};
use crate::touch::{Touch, TouchOverlay};
use crate::wal::{AppendError, Wal};
use ds_core::read_cache::ReadCache;

/// Most commits in one transaction (bounds the latency a batch adds).
pub(crate) const MAX_BATCH_COMMITS: usize = 1024;
/// Most chunk bytes in one transaction.
pub(crate) const MAX_BATCH_BYTES: usize = 32 << 20;
/// How long an idle writer polls for the next commit before it sleeps
/// (see `next_job`), and the waits that count as back to back.
pub(crate) const IDLE_SPIN: Duration = Duration::from_micros(150);
pub(crate) const BUSY_WAIT: Duration = Duration::from_millis(1);
/// How often pending touches are written to disk.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How often the tables are made durable and the log emptied under load (a
/// checkpoint: one durable redb commit). Bounds the log replayed after a crash.
pub(crate) const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// Log size that triggers a checkpoint sooner.
pub(crate) const CHECKPOINT_BYTES: u64 = 64 << 20;
/// Streams written since the last checkpoint that trigger one sooner: the
/// overlay costs a few hundred bytes per stream it holds, which under a
/// burst of creations would otherwise add up to a second's worth. At 256, a
/// burst of 16 creations in flight makes about 60 checkpoints a second, and
/// the create rate (P7) measured the same as with 1,024.
pub(crate) const CHECKPOINT_STREAMS: usize = 256;

/// Counters of the writer's work, for tests and metrics.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Commits answered (applied or refused).
    pub commits: AtomicU64,
    /// Log entries synced (one `fdatasync` each).
    pub syncs: AtomicU64,
    /// Log entries replayed by recovery (at open and after failed batches).
    pub replayed: AtomicU64,
    /// Checkpoints committed (the overlay written into the tables).
    pub checkpoints: AtomicU64,
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
    /// Checkpoints committed: the overlay written into the tables and the
    /// log emptied.
    pub checkpoints: u64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> WriterStats {
        WriterStats {
            commits: self.commits.load(Ordering::Relaxed),
            syncs: self.syncs.load(Ordering::Relaxed),
            replayed: self.replayed.load(Ordering::Relaxed),
            checkpoints: self.checkpoints.load(Ordering::Relaxed),
        }
    }
}

/// One commit (folded into its net writes) waiting for the writer, and
/// where to send its outcome.
pub(crate) struct Job {
    pub writes: NetWrites,
    pub ack: oneshot::Sender<Result<(), StoreError>>,
    /// The pipeline the commit is stacked in (see `ds_core::Chain`).
    pub chain: Option<Chain>,
}

/// What the writer shares with the store's readers.
pub(crate) struct Shared {
    pub touches: Arc<TouchOverlay>,
    /// Fed after every durable batch, before its acknowledgements.
    pub metas: Arc<CommittedMetas>,
    pub counters: Arc<Counters>,
    /// Durable writes not yet in the tables; readers look here first.
    pub overlay: Arc<RwLock<Overlay>>,
    /// Told of every wipe, under the overlay lock that publishes it.
    pub cache: Arc<ReadCache>,
    /// Trims' reclaims, applied at the next checkpoint.
    pub reclaims: Arc<crate::reclaim::Reclaims>,
}

/// The writer thread body: runs until every sender is gone, then flushes the
/// pending touches, checkpoints (so a clean shutdown leaves an empty log) and
/// returns (dropping its handle on the database).
pub(crate) fn run(db: Arc<DbHandle>, wal: Wal, next_lsn: u64, jobs: Receiver<Job>, shared: Shared) {
    let mut writer =
        Writer { db, wal, next_lsn, last_checkpoint: Instant::now(), needs_recovery: false, tables: None, shared };
    let mut last_flush = Instant::now();
    let mut last_wait = FLUSH_EVERY;
    loop {
        let (next, waited) = next_job(&jobs, last_wait);
        last_wait = waited;
        let first = match next {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => {
                // Idle: flush touches and make the tables durable.
                if !writer.shared.touches.is_empty() {
                    writer.write_batch(Vec::new(), &[], true);
                    last_flush = Instant::now();
                }
                writer.checkpoint();
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
        let chains: Vec<Option<&Chain>> = batch.iter().map(|j| j.chain.as_ref()).collect();
        let outcomes = writer.write_batch(commits, &chains, flush);
        for (job, outcome) in batch.into_iter().zip(outcomes) {
            // The committer may have given up waiting; the outcome stands anyway.
            let _ = job.ack.send(outcome);
        }
        // After the acknowledgements: a checkpoint delays only later batches.
        if writer.checkpoint_due() {
            writer.checkpoint();
        }
    }
    writer.write_batch(Vec::new(), &[], true);
    writer.checkpoint();
    if let Err(e) = writer.wal.truncate_empty() {
        tracing::warn!(error = %e, "local store: could not shrink the emptied log at shutdown");
    }
}

/// The next commit, and how long the writer waited for it. When commits
/// have been arriving back to back (the last wait was under
/// [`BUSY_WAIT`]), the channel is polled for [`IDLE_SPIN`], yielding the
/// core between polls, before the writer sleeps on it: a sleeping writer is
/// woken through the scheduler (tens of microseconds on a VM, on the path of
/// every acknowledgement when one client appends at a time), and a polling
/// one picks the commit up at once. At a low rate it sleeps right away.
fn next_job(jobs: &Receiver<Job>, last_wait: Duration) -> (Result<Job, RecvTimeoutError>, Duration) {
    let idle = Instant::now();
    if last_wait < BUSY_WAIT {
        loop {
            match jobs.try_recv() {
                Ok(job) => return (Ok(job), idle.elapsed()),
                Err(TryRecvError::Disconnected) => return (Err(RecvTimeoutError::Disconnected), idle.elapsed()),
                Err(TryRecvError::Empty) if idle.elapsed() < IDLE_SPIN => std::thread::yield_now(),
                Err(TryRecvError::Empty) => break,
            }
        }
    }
    (jobs.recv_timeout(FLUSH_EVERY), idle.elapsed())
}

/// The writer thread's state.
struct Writer {
    db: Arc<DbHandle>,
    wal: Wal,
    /// LSN of the next log entry.
    next_lsn: u64,
    last_checkpoint: Instant,
    /// A batch or checkpoint failed: reopen the database and replay the log
    /// before the next.
    needs_recovery: bool,
    /// The tables as of the last checkpoint, opened on first use after it.
    tables: Option<ReadTables>,
    shared: Shared,
}

/// What a batch did.
struct Done {
    outcomes: Vec<Result<(), StoreError>>,
    /// A log entry was synced.
    logged: bool,
}

/// A failed batch or checkpoint, and whether the database must be reopened
/// and the log replayed before the next.
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
        let streams = || self.shared.overlay.read().unwrap_or_else(PoisonError::into_inner).streams();
        self.wal.len() > 0
            && (self.wal.len() >= CHECKPOINT_BYTES
                || self.last_checkpoint.elapsed() >= CHECKPOINT_EVERY
                || streams() >= CHECKPOINT_STREAMS)
    }

    /// Recover from a failed batch or checkpoint if needed, and open the
    /// tables' snapshot if none is open.
    fn ready(&mut self) -> Result<(), StoreError> {
        if self.needs_recovery {
            // redb opens a file once: the snapshot's transaction must be gone.
            self.tables = None;
            self.db.reopen()?;
            let db = self.db.get()?;
            let recovered = redo::recover(&db, &mut self.wal)?;
            self.next_lsn = recovered.last + 1;
            self.shared.counters.replayed.fetch_add(recovered.replayed, Ordering::Relaxed);
            // Everything the overlay held came from the log, which the tables
            // now hold durably.
            self.shared.overlay.write().unwrap_or_else(PoisonError::into_inner).clear();
            self.needs_recovery = false;
            self.last_checkpoint = Instant::now();
            tracing::warn!("local store recovered after a failure (database reopened, log replayed)");
        }
        if self.tables.is_none() {
            let db = self.db.get()?;
            self.tables = Some(ReadTables::open(&db.begin_read().map_err(storage)?)?);
        }
        Ok(())
    }

    /// Run `commits` (and, if `flush`, the pending touches) as one batch.
    /// Returns one outcome per commit, in order. `chains[i]`: the pipeline
    /// chain of `commits[i]`, broken by every commit not applied.
    fn write_batch(
        &mut self,
        commits: Vec<&NetWrites>,
        chains: &[Option<&Chain>],
        flush: bool,
    ) -> Vec<Result<(), StoreError>> {
        let flushed = if flush { self.shared.touches.snapshot() } else { Vec::new() };
        let counters = Arc::clone(&self.shared.counters);
        counters.commits.fetch_add(commits.len() as u64, Ordering::Relaxed);
        if !commits.is_empty() {
            metrics::histogram!("ds_store_commit_batch_size").record(commits.len() as f64);
        }
        match self.try_write_batch(&commits, chains, &flushed) {
            Ok(done) => {
                if done.logged {
                    counters.syncs.fetch_add(1, Ordering::Relaxed);
                }
                // Cache first: a reader that finds the touch entry gone must
                // find the flushed touch in the cached meta.
                self.shared.metas.batch_committed(&commits, &done.outcomes, &flushed);
                self.shared.touches.forget(&flushed);
                done.outcomes
            }
            Err(Failed { error, recover }) => {
                tracing::error!(error = %error, commits = commits.len(), "local store batch failed");
                self.needs_recovery |= recover;
                self.shared.metas.clear();
                // Nothing of the batch applied (or its outcome is unknown):
                // what is stacked on it must not apply on another state.
                chains.iter().flatten().for_each(|c| c.break_off());
                commits.iter().map(|_| Err(error.clone())).collect()
            }
        }
    }

    fn try_write_batch(
        &mut self,
        commits: &[&NetWrites],
        chains: &[Option<&Chain>],
        touches: &[(String, Touch)],
    ) -> Result<Done, Failed> {
        let not_written = |error| Failed { error, recover: false };
        self.ready().map_err(not_written)?;
        let tables =
            self.tables.as_ref().ok_or_else(|| not_written(StoreError::backend("local store write", "no snapshot")))?;
        let mut staged = Overlay::default();
        let mut outcomes = Vec::with_capacity(commits.len());
        let mut applied: Vec<AppliedCommit<'_>> = Vec::with_capacity(commits.len());
        let mut touched: Vec<TouchWrite<'_>> = Vec::new();
        {
            let shared = self.shared.overlay.read().unwrap_or_else(PoisonError::into_inner);
            for (i, writes) in commits.iter().enumerate() {
                let chain = chains.get(i).copied().flatten();
                // Stacked on a commit this writer did not apply: its version
                // and tail may name another writer's state (see `Chain`).
                if chain.is_some_and(Chain::is_broken) {
                    outcomes.push(Err(StoreError::Conflict));
                    continue;
                }
                // Against the state the earlier commits of the batch left.
                match writes.check(&Layers { upper: [&staged, &shared], tables }) {
                    Ok(()) => {
                        let metas = encode_metas(writes).map_err(not_written)?;
                        staged.apply(writes);
                        applied.push((writes, metas));
                        outcomes.push(Ok(()));
                    }
                    Err(conflict) => {
                        chain.iter().for_each(|c| c.break_off());
                        outcomes.push(Err(conflict));
                    }
                }
            }
            for (path, touch) in touches {
                let view = Layers { upper: [&staged, &shared], tables };
                let Some(mut meta) = view.meta(path).map_err(not_written)? else { continue };
                if *meta.incarnation != *touch.incarnation || meta.touched_at_ms >= touch.at_ms {
                    continue;
                }
                meta.touched_at_ms = touch.at_ms;
                staged.put_meta(meta);
                touched.push((path, &touch.incarnation, touch.at_ms));
            }
        }
        if applied.is_empty() && touched.is_empty() {
            return Ok(Done { outcomes, logged: false });
        }
        let lsn = self.next_lsn;
        let entry = redo::encode_batch(&applied, &touched);
        let started = Instant::now();
        // The commit point: once this returns, the batch survives a crash.
        self.wal.append(lsn, &entry).map_err(|e| match e {
            // Nothing of the batch exists anywhere.
            AppendError::NotWritten(io) => Failed { error: io_failure(io), recover: false },
            AppendError::Unknown(io) => Failed {
                error: StoreError::Unavailable(format!(
                    "local store: log write failed ({io}); the outcome of this write is unknown until the store \
                     recovers; retry"
                )),
                recover: true,
            },
        })?;
        metrics::histogram!("ds_store_fsync_seconds").record(started.elapsed().as_secs_f64());
        self.next_lsn += 1;
        // Durable: now readers may see it. The read cache forgets wiped
        // streams under the same lock, so a reader that sees a wipe finds
        // nothing of it cached (see `ds_core::read_cache`).
        let mut overlay = self.shared.overlay.write().unwrap_or_else(PoisonError::into_inner);
        overlay.absorb(staged);
        for (writes, _) in &applied {
            writes.wiped.iter().for_each(|(path, _)| self.shared.cache.forget(path));
        }
        drop(overlay);
        Ok(Done { outcomes, logged: true })
    }

    /// Write the overlay into the tables in one durable transaction, then
    /// empty the overlay and the log. A failure leaves both as they were
    /// (everything is still durable in the log); the database is reopened
    /// and the log replayed before the next batch.
    fn checkpoint(&mut self) {
        if let Err(Failed { error, recover }) = self.try_checkpoint() {
            tracing::error!(error = %error, "local store checkpoint failed");
            self.needs_recovery |= recover;
        }
    }

    fn try_checkpoint(&mut self) -> Result<(), Failed> {
        // A pending recovery replays the log into the tables and empties it.
        self.ready()?;
        if self.wal.len() == 0 && self.shared.reclaims.is_empty() {
            self.last_checkpoint = Instant::now();
            return Ok(());
        }
        let reclaims = self.shared.reclaims.take();
        let result = self.write_checkpoint(&reclaims);
        if result.is_err() {
            self.shared.reclaims.restore(reclaims);
        } else {
            // The cache's copies would keep the freed bytes alive.
            reclaims.iter().for_each(|r| self.shared.cache.forget(&r.path));
        }
        result
    }

    fn write_checkpoint(&mut self, reclaims: &[crate::reclaim::Reclaim]) -> Result<(), Failed> {
        let started = Instant::now();
        let db = self.db.get()?;
        let mut txn = db.begin_write().map_err(storage)?;
        txn.set_durability(Durability::Immediate).map_err(storage)?;
        // Saves redb's allocator state, so opening after a crash need not
        // walk the whole file (see `redo`).
        txn.set_quick_repair(true);
        {
            let mut tables = WriteTables::open(&txn)?;
            self.shared.overlay.read().unwrap_or_else(PoisonError::into_inner).write_to(&mut tables)?;
            // After the overlay: its chunks below a boundary go too.
            for r in reclaims {
                tables.drop_chunks_below(&r.path, &r.incarnation, r.below)?;
            }
            tables.set_applied_lsn(self.next_lsn - 1)?;
        }
        txn.commit().map_err(commit_failure)?;
        // Readers look in the overlay before the tables: once it is empty
        // they find its writes there.
        self.tables = None;
        self.shared.overlay.write().unwrap_or_else(PoisonError::into_inner).clear();
        self.wal.clear();
        self.last_checkpoint = Instant::now();
        self.shared.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        metrics::histogram!("ds_store_checkpoint_seconds").record(started.elapsed().as_secs_f64());
        Ok(())
    }
}
