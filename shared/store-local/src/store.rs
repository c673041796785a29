//! [`LocalStore`]: the durable [`StreamStore`] over one redb file and its log.
//!
//! Writes go through the group-commit writer thread ([`crate::writer`]);
//! reads open their own MVCC read transactions on the blocking pool, so they
//! run concurrently with each other and with the writer and observe every
//! commit acknowledged before they started.

use std::path::Path;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};
use std::thread::JoinHandle;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use ds_core::fold::NetWrites;
use ds_core::{
    Chain, Chunk, Commit, PendingCommit, ProducerState, Record, StoreError, StreamHandle, StreamMeta, StreamStore,
    TrySubmit,
};
use redb::{ReadTransaction, ReadableDatabase};
use tokio::sync::oneshot;

use crate::error::{storage, OpenError};
use crate::handle::DbHandle;
use crate::meta_cache::CommittedMetas;
use crate::overlay::{join_chunks, merge_chunks, merge_listing, Found, Overlay};
use crate::tables::{self, CHUNKS, LOG, META, PRODUCERS, RECORDS};
use crate::touch::TouchOverlay;
use crate::wal::Wal;
use crate::writer::{self, Counters, Job, WriterStats};
use ds_core::read_cache::{ReadCache, ADMIT_ASSEMBLED};

/// File name of the database inside the store directory.
pub const DB_FILE: &str = "streams.redb";

/// Durable [`StreamStore`]: when `commit` returns `Ok`, the commit is on disk
/// (in the fsync'd log). Opening recovers from a crash (redb rolls back to its
/// last durable commit, then the log is replayed on it). One process may open
/// a directory at a time.
///
/// Dropping the store stops the writer thread and waits for it (at most the
/// batch in flight), so the directory can be reopened right after.
pub struct LocalStore {
    db: Arc<DbHandle>,
    touches: Arc<TouchOverlay>,
    metas: Arc<CommittedMetas>,
    counters: Arc<Counters>,
    /// Durable writes not yet in the tables (see `overlay`): read first.
    overlay: Arc<RwLock<Overlay>>,
    /// Recent catch-up reads' bytes (see `ds_core::read_cache`).
    cache: Arc<ReadCache>,
    /// Trims' reclaims for the writer's next checkpoint.
    reclaims: Arc<crate::reclaim::Reclaims>,
    jobs: Option<Sender<Job>>,
    writer: Option<JoinHandle<()>>,
}

impl LocalStore {
    /// Open (creating if needed) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Self, OpenError> {
        std::fs::create_dir_all(dir).map_err(|source| OpenError::CreateDir { dir: dir.to_owned(), source })?;
        let file = dir.join(DB_FILE);
        let db = crate::handle::create_database(&file).map_err(redb::Error::from)?;
        if tables::has_legacy_records(&db.begin_read().map_err(redb::Error::from)?)? {
            return Err(OpenError::LegacyFormat(format!(
                "{} holds records of an earlier format without checksums; this version cannot read them",
                file.display()
            )));
        }
        // Create the tables once so read transactions can always open them.
        let mut txn = db.begin_write().map_err(redb::Error::from)?;
        txn.set_quick_repair(true);
        {
            txn.open_table(META).map_err(redb::Error::from)?;
            txn.open_table(CHUNKS).map_err(redb::Error::from)?;
            txn.open_table(PRODUCERS).map_err(redb::Error::from)?;
            txn.open_table(RECORDS).map_err(redb::Error::from)?;
            txn.open_table(LOG).map_err(redb::Error::from)?;
        }
        txn.commit().map_err(redb::Error::from)?;
        // Acknowledged commits not yet in redb's durable state are in the log.
        let recovery = |source| OpenError::Recovery { dir: dir.to_owned(), source };
        let mut wal = Wal::open(dir).map_err(|e| recovery(crate::error::io_failure(e)))?;
        let recovered = crate::redo::recover(&db, &mut wal).map_err(recovery)?;
        let next_lsn = recovered.last + 1;

        let db = Arc::new(DbHandle::new(file, db));
        let touches = Arc::new(TouchOverlay::default());
        let metas = Arc::new(CommittedMetas::default());
        let counters = Arc::new(Counters::default());
        let overlay = Arc::new(RwLock::new(Overlay::default()));
        let cache = Arc::new(ReadCache::default());
        let reclaims = Arc::new(crate::reclaim::Reclaims::default());
        counters.replayed.store(recovered.replayed, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = channel();
        let writer = {
            let state = writer::Shared {
                touches: Arc::clone(&touches),
                metas: Arc::clone(&metas),
                counters: Arc::clone(&counters),
                overlay: Arc::clone(&overlay),
                cache: Arc::clone(&cache),
                reclaims: Arc::clone(&reclaims),
            };
            let db = Arc::clone(&db);
            std::thread::Builder::new()
                .name("ds-store-local-writer".into())
                .spawn(move || writer::run(db, wal, next_lsn, rx, state))
                .map_err(OpenError::Writer)?
        };
        Ok(Self { db, touches, metas, counters, overlay, cache, reclaims, jobs: Some(tx), writer: Some(writer) })
    }

    /// What the writer has done so far (commits answered, log syncs made,
    /// log entries replayed).
    pub fn stats(&self) -> WriterStats {
        self.counters.snapshot()
    }

    /// Contiguous reads answered (at least in part) from the cache of
    /// recently read checkpointed bytes.
    pub fn cached_reads(&self) -> u64 {
        self.cache.hits()
    }

    fn overlay(&self) -> RwLockReadGuard<'_, Overlay> {
        self.overlay.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The overlay's meta of `path` (`None`: ask the tables).
    fn overlay_meta(&self, path: &str) -> Option<Option<StreamMeta>> {
        match self.overlay().meta(path) {
            Found::Here(meta) => Some(meta.cloned()),
            Found::Below => None,
        }
    }

    /// Fold the commit here (a commit that contradicts itself fails without
    /// reaching the writer), enqueue its net writes on the writer and return
    /// at once: the writer applies jobs in channel order, so pipelined
    /// commits of one stream land in one batch.
    ///
    /// `chain`: the pipeline the commit is stacked in (see `ds_core::Chain`);
    /// a commit refused before it reaches the writer breaks it here.
    fn enqueue(&self, commit: Commit, chain: Option<Chain>) -> Result<PendingCommit, StoreError> {
        let refused = |chain: &Option<Chain>, e: StoreError| {
            chain.iter().for_each(Chain::break_off);
            e
        };
        let writes = match NetWrites::fold(commit) {
            Ok(writes) => writes,
            Err(e) => return Err(refused(&chain, e)),
        };
        let Some(jobs) = self.jobs.as_ref() else {
            return Err(refused(&chain, StoreError::Unavailable("local store is closing".into())));
        };
        let (ack, outcome) = oneshot::channel();
        if let Err(unsent) = jobs.send(Job { writes, ack, chain }) {
            return Err(refused(&unsent.0.chain, StoreError::Unavailable("local store writer has stopped".into())));
        }
        Ok(PendingCommit::acked(outcome))
    }

    /// Run `read` in a fresh read transaction on the blocking pool.
    async fn read<T, F>(&self, read: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&ReadTransaction) -> Result<T, StoreError> + Send + 'static,
    {
        let db = self.db.get()?;
        tokio::task::spawn_blocking(move || read(&db.begin_read().map_err(storage)?))
            .await
            .map_err(|e| StoreError::backend("local store read task", e))?
    }
}

impl Drop for LocalStore {
    fn drop(&mut self) {
        // Closing the channel tells the writer to finish its batch, flush the
        // touches and exit; joining releases the database file.
        drop(self.jobs.take());
        if let Some(writer) = self.writer.take() {
            if writer.join().is_err() {
                tracing::error!("local store writer thread panicked");
            }
        }
    }
}

#[async_trait]
impl StreamStore for LocalStore {
    async fn read_meta(&self, stream: &StreamHandle) -> Result<Option<StreamMeta>, StoreError> {
        // The pending touch first, then the overlay, then the read
        // transaction (see the `touch` and `overlay` module docs).
        let touch = self.touches.get(stream.path());
        let mut meta = match self.overlay_meta(stream.path()) {
            Some(meta) => meta,
            None => {
                let owned = stream.path().to_owned();
                self.read(move |txn| tables::get_meta(&txn.open_table(META).map_err(storage)?, &owned)).await?
            }
        };
        if let (Some(meta), Some(touch)) = (meta.as_mut(), touch) {
            touch.apply_to(meta);
        }
        Ok(meta)
    }

    /// Served from the overlay, else from the metas the writer committed
    /// last when it has this stream's (see `meta_cache`), else read like
    /// [`Self::read_meta`].
    async fn read_meta_for_update(&self, stream: &StreamHandle) -> Result<Option<StreamMeta>, StoreError> {
        match self.try_read_meta_for_update(stream) {
            Some(read) => read,
            None => self.read_meta(stream).await,
        }
    }

    /// The overlay or the writer's cache; `None` when only the database has
    /// the stream's meta.
    fn try_read_meta_for_update(&self, stream: &StreamHandle) -> Option<Result<Option<StreamMeta>, StoreError>> {
        // The pending touch first, as in `read_meta`: the writer merges a
        // flushed touch into the overlay and the cache before it forgets it.
        let touch = self.touches.get(stream.path());
        // The overlay has the latest write since the checkpoint, the cache
        // the latest of a recently written stream.
        let mut meta = self.overlay_meta(stream.path()).or_else(|| self.metas.get(stream.path()).map(Some))?;
        if let (Some(meta), Some(touch)) = (meta.as_mut(), touch) {
            touch.apply_to(meta);
        }
        Some(Ok(meta))
    }

    async fn read_chunks(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        from: u64,
        until: u64,
        max_bytes: usize,
    ) -> Result<Vec<Chunk>, StoreError> {
        if from >= until {
            return Ok(Vec::new());
        }
        let part = self.overlay().chunks(stream.path(), incarnation, from, until);
        let Some(below) = part.below.filter(|below| *below > from) else {
            return Ok(merge_chunks(Vec::new(), part.chunks, max_bytes));
        };
        let (path, incarnation) = (stream.path().to_owned(), incarnation.to_owned());
        let lower = self
            .read(move |txn| {
                let table = txn.open_table(CHUNKS).map_err(storage)?;
                tables::read_chunks(&table, &path, &incarnation, from, below, max_bytes)
            })
            .await?;
        Ok(merge_chunks(lower, part.chunks, max_bytes))
    }

    async fn read_contiguous(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        from: u64,
        until: u64,
        max_bytes: usize,
    ) -> Result<Option<Bytes>, StoreError> {
        if ds_core::contiguous_len(from, until, max_bytes).is_none() {
            return Ok(None);
        }
        // What the cache holds first (see `ds_core::read_cache`: durable
        // bytes never change), then the tables' part of the rest, then the
        // overlay's.
        let (path, cache) = (stream.path(), &self.cache);
        let (mut pieces, epoch) = cache.prefix(path, incarnation, from, until);
        let mut pos = from + pieces.iter().map(|p| p.len() as u64).sum::<u64>();
        let cached = pieces.len();
        if cached > 0 {
            metrics::counter!("ds_store_read_cache_hits_total").increment(1);
        }
        let mut admit = false;
        if pos < until {
            let part = self.overlay().chunks(path, incarnation, pos, until);
            if let Some(below) = part.below.filter(|below| *below > pos) {
                let (owned, inc) = (path.to_owned(), incarnation.to_owned());
                let lower = self
                    .read(move |txn| {
                        let table = txn.open_table(CHUNKS).map_err(storage)?;
                        tables::read_contiguous(&table, &owned, &inc, pos, below)
                    })
                    .await?;
                let Some(lower) = lower else { return Ok(None) };
                pieces.push(lower);
                pos = below;
                admit = true; // spares the next read this hop
            }
            let Some(upper) = join_chunks(&part.chunks, pos, until) else { return Ok(None) };
            if !upper.is_empty() {
                pieces.push(upper);
            }
        }
        // A large read not answered with one cached piece: the next one is
        // spared the join.
        admit |= !(cached == 1 && pieces.len() == 1) && until - from >= ADMIT_ASSEMBLED as u64;
        let whole = if pieces.len() == 1 {
            pieces.pop().unwrap_or_default()
        } else {
            let mut all = BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
            pieces.iter().for_each(|p| all.extend_from_slice(p));
            all.freeze()
        };
        if admit {
            cache.insert(path, incarnation, from, whole.clone(), epoch);
        }
        Ok(Some(whole))
    }

    async fn read_producer(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        producer_id: &str,
    ) -> Result<Option<ProducerState>, StoreError> {
        if let Found::Here(state) = self.overlay().producer(stream.path(), incarnation, producer_id) {
            return Ok(state);
        }
        let key = (stream.path().to_owned(), incarnation.to_owned(), producer_id.to_owned());
        self.read(move |txn| {
            let table = txn.open_table(PRODUCERS).map_err(storage)?;
            tables::get_producer(&table, &key.0, &key.1, &key.2)
        })
        .await
    }

    async fn read_record(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        key: &str,
    ) -> Result<Option<Record>, StoreError> {
        if let Found::Here(record) = self.overlay().record(stream.path(), incarnation, key) {
            return Ok(record.cloned());
        }
        let k = (stream.path().to_owned(), incarnation.to_owned(), key.to_owned());
        self.read(move |txn| {
            let table = txn.open_table(RECORDS).map_err(storage)?;
            tables::get_record(&table, &k.0, &k.1, &k.2)
        })
        .await
    }

    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        self.submit(commit).await?.await
    }

    /// See [`LocalStore::enqueue`].
    async fn submit(&self, commit: Commit) -> Result<PendingCommit, StoreError> {
        self.enqueue(commit, None)
    }

    /// Submitting never waits here: the commit is folded and enqueued.
    fn try_submit(&self, commit: Commit) -> TrySubmit {
        TrySubmit::Submitted(self.enqueue(commit, None))
    }

    /// The writer applies commits after `submit` returned, so a pipelined
    /// append may be stacked on one it will refuse: it checks chains.
    fn chains_submissions(&self) -> bool {
        true
    }

    fn try_submit_chained(&self, commit: Commit, chain: Chain) -> TrySubmit {
        TrySubmit::Submitted(self.enqueue(commit, Some(chain)))
    }

    /// Queued for the writer's next checkpoint (module `reclaim`): at most
    /// about a second away under load, and at once when idle.
    async fn reclaim(&self, stream: &StreamHandle, incarnation: &str, below: u64) -> Result<(), StoreError> {
        if below > 0 {
            self.reclaims.ask(stream.path(), incarnation, below);
        }
        Ok(())
    }

    async fn touch(&self, stream: &StreamHandle, incarnation: &str, at_ms: i64) -> Result<(), StoreError> {
        self.touches.record(stream.path(), incarnation, at_ms);
        Ok(())
    }

    async fn list_streams(&self, after: Option<&str>, limit: usize) -> Result<Vec<StreamMeta>, StoreError> {
        let touches = self.touches.all();
        let upper = self.overlay().metas_after("", after, limit);
        // Each overlay entry hides or replaces at most one stored one.
        let wanted = limit.saturating_add(upper.len());
        let after = after.map(str::to_owned);
        let lower = self
            .read(move |txn| tables::list_metas(&txn.open_table(META).map_err(storage)?, after.as_deref(), wanted))
            .await?;
        let mut metas = merge_listing(lower, upper, limit);
        for meta in &mut metas {
            if let Some(touch) = touches.get(&*meta.path) {
                touch.apply_to(meta);
            }
        }
        Ok(metas)
    }

    async fn list_streams_with_prefix(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StreamMeta>, StoreError> {
        let touches = self.touches.all();
        let upper = self.overlay().metas_after(prefix, after, limit);
        let wanted = limit.saturating_add(upper.len());
        let (prefix, after) = (prefix.to_owned(), after.map(str::to_owned));
        let lower = self
            .read(move |txn| {
                let table = txn.open_table(META).map_err(storage)?;
                tables::list_metas_with_prefix(&table, &prefix, after.as_deref(), wanted)
            })
            .await?;
        let mut metas = merge_listing(lower, upper, limit);
        for meta in &mut metas {
            if let Some(touch) = touches.get(&*meta.path) {
                touch.apply_to(meta);
            }
        }
        Ok(metas)
    }
}
