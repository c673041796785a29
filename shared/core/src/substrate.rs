//! The substrate traits: what a platform (memory, local disk, AWS) provides so
//! the one protocol core can run on it (portable-architecture §2-§5).
//!
//! # The consistency contract
//! Every platform must meet these three rules; the contract-test suite
//! (`crate::contract`, feature `test-util`) checks them for each substrate:
//! 1. **Serialized critical section.** The core runs each stream mutation as
//!    read meta → validate → [`StreamStore::commit`] while holding
//!    [`StreamMutex::lock`]. A single-process substrate makes that lock
//!    exclusive; a multi-process one (two Lambda instances) cannot, so there
//!    the guarantee is the commit's [`Expect`](crate::Expect) precondition:
//!    a commit built from a stale read fails with [`StoreError::Conflict`]
//!    and the core re-reads, re-validates and retries. Either way no two
//!    mutations built from the same read both commit.
//! 2. **All-or-nothing commit.** A [`Commit`] is applied entirely or not at all,
//!    and once `commit` returns `Ok` it is durable to the substrate's standard
//!    (memory: process lifetime; local: on disk; AWS: DynamoDB/S3).
//! 3. **Wake after commit.** [`StreamHub::publish`] is called only after the
//!    commit returned `Ok`, so live readers never observe rolled-back data.
//!
//! No trait assumes one process, an in-memory lock or synchronous storage:
//! everything is async and `Send + Sync`, usable as `Arc<dyn …>`.

use std::any::Any;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use ds_clock::{Clock, Random};
use tokio::time::Instant;

use crate::error::StoreError;
use crate::model::{Chunk, Commit, ProducerState, Record, StreamMeta, TailSignal};
use crate::{Chain, PendingCommit, TrySubmit};

/// The length of a [`StreamStore::read_contiguous`] range a store may
/// answer: non-empty and within the budget; `None` for any other range.
pub fn contiguous_len(from: u64, until: u64, max_bytes: usize) -> Option<usize> {
    let len = usize::try_from(until.saturating_sub(from)).ok()?;
    (len > 0 && len <= max_bytes).then_some(len)
}

/// The size up to which the in-process stores join a small append onto the
/// chunk before it (see the chunk invariants of [`StreamStore`]): a catch-up
/// read of small appends then walks one stored piece per few KiB instead of
/// one per append, and the extra copy per append stays bounded.
pub const JOINED_CHUNK_TARGET: usize = 4096;

/// Persist and read streams: meta records, chunks and producer state.
///
/// Invariants:
/// - [`commit`](Self::commit) is all-or-nothing (see [`Commit`]) and checks
///   every [`Expect`](crate::Expect) against the current state atomically with
///   applying the writes.
/// - Reads observe every commit that returned `Ok` before the read started
///   (read-your-writes across the whole substrate, e.g. consistent reads on
///   DynamoDB).
/// - Chunks of one `(path, incarnation)` never overlap; positions are stable
///   forever once committed (bytes at a position never change).
/// - A chunk holds whole appends: it starts where an append started and ends
///   where one ended. A store may join consecutive appends into one chunk
///   (fewer, larger pieces to read), so a chunk read after later appends may
///   extend past the tail of a meta read earlier: readers slice at their tail.
#[async_trait]
pub trait StreamStore: Send + Sync + 'static {
    /// The stream's meta record, if one exists (including soft-deleted and
    /// expired-but-not-yet-removed streams: the core decides what they mean).
    async fn read_meta(&self, stream: &StreamHandle) -> Result<Option<StreamMeta>, StoreError>;

    /// Chunks of `(path, incarnation)` overlapping positions `[from, until)`,
    /// in position order. The first chunk may start before `from` and the
    /// last end past `until` (chunks are returned whole); the caller slices. Stops adding
    /// chunks once their total length reaches `max_bytes`, but always returns
    /// at least the first overlapping chunk when one exists.
    async fn read_chunks(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        from: u64,
        until: u64,
        max_bytes: usize,
    ) -> Result<Vec<Chunk>, StoreError>;

    /// The bytes of `(path, incarnation)` at `[from, until)` as one buffer,
    /// when the store can produce it more cheaply than [`Self::read_chunks`]
    /// and the core's assembly of one piece per append (a catch-up read of
    /// small appends is thousands of pieces). Only asked for ranges of at
    /// most `max_bytes`. `None` (the default, and for a range not wholly
    /// stored): the core reads chunks instead.
    async fn read_contiguous(
        &self,
        _stream: &StreamHandle,
        _incarnation: &str,
        _from: u64,
        _until: u64,
        _max_bytes: usize,
    ) -> Result<Option<Bytes>, StoreError> {
        Ok(None)
    }

    /// The meta record for *planning a mutation*. A substrate may serve it
    /// from a per-process cache (AWS: a warm append then costs one DynamoDB
    /// call, the commit), because the core only trusts such a read when the
    /// commit built from it succeeds: the commit's `Expect::Version`/`VersionAt` fails on
    /// a stale cache, and every outcome that writes nothing (a duplicate, an
    /// error) is re-planned with [`Self::read_meta`] before it is answered.
    /// A substrate that caches must refresh or drop its cached entry when a
    /// commit for that path fails with [`StoreError::Conflict`].
    async fn read_meta_for_update(&self, stream: &StreamHandle) -> Result<Option<StreamMeta>, StoreError> {
        self.read_meta(stream).await
    }

    /// [`Self::read_meta_for_update`] when the store can answer without
    /// waiting (from memory, or its cache): the same answer, without the
    /// boxed future of an async call. `None` (the default): it would wait.
    fn try_read_meta_for_update(&self, _stream: &StreamHandle) -> Option<Result<Option<StreamMeta>, StoreError>> {
        None
    }

    /// A producer's state for *planning a mutation*; same caching rules as
    /// [`Self::read_meta_for_update`]. Every producer write bumps the meta
    /// version in the same commit, so the meta precondition also catches a
    /// stale cached producer state.
    async fn read_producer_for_update(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        producer_id: &str,
    ) -> Result<Option<ProducerState>, StoreError> {
        self.read_producer(stream, incarnation, producer_id).await
    }

    /// [`Self::read_record`] for planning a commit that writes the record
    /// under its revision condition: a store may answer from a cache of
    /// what it read or committed, since a stale answer fails that condition
    /// (and the plan is redone on consistent reads).
    async fn read_record_for_update(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        key: &str,
    ) -> Result<Option<Record>, StoreError> {
        self.read_record(stream, incarnation, key).await
    }

    /// The record `key` of `(stream, incarnation)` ([`crate::Record`]).
    async fn read_record(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        key: &str,
    ) -> Result<Option<Record>, StoreError>;

    /// One producer's state for `(stream, incarnation)`.
    async fn read_producer(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        producer_id: &str,
    ) -> Result<Option<ProducerState>, StoreError>;

    /// Apply `commit` all-or-nothing; [`StoreError::Conflict`] if any
    /// precondition fails.
    async fn commit(&self, commit: Commit) -> Result<(), StoreError>;

    /// Submit `commit` and return a handle that resolves once it is applied
    /// and durable (or has failed). Commits submitted one after another (a
    /// `submit` starting after the previous one returned) are checked and
    /// applied in submission order, so a commit planned on top of a pending
    /// one is applied after it — and fails with [`StoreError::Conflict`] if
    /// that one failed. This lets the core pipeline appends to one stream
    /// into one group commit. The default applies the commit before
    /// returning, which is trivially ordered.
    async fn submit(&self, commit: Commit) -> Result<PendingCommit, StoreError> {
        self.commit(commit).await?;
        Ok(PendingCommit::done(Ok(())))
    }

    /// [`Self::submit`] for a store whose submission never waits (the
    /// in-process stores: memory applies the commit, local hands it to its
    /// writer): the same answer, without the boxed future of an async call
    /// on every append. The default says it would wait.
    fn try_submit(&self, commit: Commit) -> TrySubmit {
        TrySubmit::WouldWait(commit)
    }

    /// Whether this store honours [`Chain`]s: it applies commits after
    /// [`Self::submit`] returned (the local store's writer, AWS's group
    /// commit), so a commit may be stacked on one that is later refused.
    /// The core then submits each pipelined append with
    /// [`Self::try_submit_chained`] (and [`Self::submit_chained`] when that
    /// would wait). `false` (the default): nothing is chained (and nothing
    /// allocated for it).
    fn chains_submissions(&self) -> bool {
        false
    }

    /// [`Self::try_submit`] for a commit of the pipeline `chain`: if `chain`
    /// is broken when the commit's turn comes, it is refused with
    /// [`StoreError::Conflict`]; if it is not applied (refused or failed),
    /// `chain` is broken (see [`Chain`]). A store that chains and may answer
    /// [`TrySubmit::WouldWait`] (AWS, its queue full) honours the chain in
    /// [`Self::submit_chained`] too: the core's waiting submission of a
    /// chained commit goes there, never to `submit`, which carries no chain.
    /// The default ignores the chain.
    fn try_submit_chained(&self, commit: Commit, chain: Chain) -> TrySubmit {
        let _ = chain;
        self.try_submit(commit)
    }

    /// [`Self::submit`] for a commit of the pipeline `chain`, under the same
    /// rules for the chain as [`Self::try_submit_chained`]: what the core
    /// calls when that answered [`TrySubmit::WouldWait`], still under the
    /// stream's lock, so the commit keeps its place in submission order. The
    /// default ignores the chain (right for a store that never waits when
    /// it chains, or that does not chain).
    async fn submit_chained(&self, commit: Commit, chain: Chain) -> Result<PendingCommit, StoreError> {
        let _ = chain;
        self.submit(commit).await
    }

    /// Whether this store spaces out the retries of the commits it refuses
    /// with [`StoreError::Conflict`] itself (a jittered pause after each lost
    /// race before its next commit of that stream: AWS's group commit), so
    /// the core re-plans a refused commit at once instead of after its own
    /// back-off — the refused appends of one group then re-queue together
    /// and go again as one. `false` (the default): the core backs off.
    fn paces_conflicts(&self) -> bool {
        false
    }

    /// Free the storage of `(stream, incarnation)`'s chunks that end at or
    /// before `below`, the stream's `retained_from` as a committed trim left
    /// it (`StreamService::trim`). Only whole chunks go: one that straddles
    /// `below` stays, and reads slice it. Idempotent, and allowed to be late
    /// or lost (a crash before it ran): the core never reads below
    /// `retained_from`, and calls this again on the next trim. The default
    /// keeps everything (a store whose reclaim is not written yet).
    async fn reclaim(&self, _stream: &StreamHandle, _incarnation: &str, _below: u64) -> Result<(), StoreError> {
        Ok(())
    }

    /// Record an access for the sliding TTL: set the meta's `touched_at_ms` to
    /// at least `at_ms` if the stored incarnation still matches. No version
    /// bump, no precondition. Implementations may coalesce (e.g. at most about
    /// one write per second per stream) and may make it non-durable.
    async fn touch(&self, stream: &StreamHandle, incarnation: &str, at_ms: i64) -> Result<(), StoreError>;

    /// The largest read budget (`max_bytes` of [`Self::read_chunks`]) this
    /// store serves efficiently, if it has one. The core clamps its
    /// `max_read_bytes` to it (AWS: one DynamoDB `Query` page).
    fn max_read_bytes(&self) -> Option<usize> {
        None
    }

    /// Meta records in path order, strictly after `after`, at most `limit`.
    /// Used by sweeps (expiry recovery on start-up) — not on request paths.
    async fn list_streams(&self, after: Option<&str>, limit: usize) -> Result<Vec<StreamMeta>, StoreError>;

    /// [`Self::list_streams`] restricted to paths that start with `prefix`
    /// (a plain string prefix, not a segment prefix). Used where a feature
    /// must find existing streams by path (subscription backfill of a glob's
    /// literal prefix) — never on an append or read path.
    async fn list_streams_with_prefix(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StreamMeta>, StoreError>;
}

/// Held while a stream's critical section runs; dropping it releases the lock.
#[must_use = "dropping the guard releases the stream's lock"]
pub struct StreamGuard {
    held: Held,
}

enum Held {
    /// Dropped with the guard.
    Owned(#[allow(dead_code)] Box<dyn Send>),
    /// Released, then dropped, with the guard.
    Shared(Arc<dyn Release>),
}

/// A lock whose state is already shared (say, in the stream's context):
/// [`StreamGuard::releasing`] holds a reference to it instead of a boxed
/// permit, an allocation fewer per critical section.
pub trait Release: Send + Sync + 'static {
    /// Give back the lock this guard held.
    fn release(&self);
}

impl StreamGuard {
    /// A guard that holds `held` (the substrate's permit and whatever must
    /// outlive it) until dropped.
    pub fn new(held: impl Send + 'static) -> Self {
        Self { held: Held::Owned(Box::new(held)) }
    }

    /// A guard for a lock already taken: dropping it calls
    /// [`Release::release`] once, then drops `lock`.
    pub fn releasing(lock: Arc<dyn Release>) -> Self {
        Self { held: Held::Shared(lock) }
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if let Held::Shared(lock) = &self.held {
            lock.release();
        }
    }
}

/// Serializes one stream's read → validate → commit critical section.
///
/// Invariant: in a single-process substrate, two guards for the same path are
/// never held at once. A multi-process substrate may only serialize within the
/// process (an optimization): the commit precondition is the guarantee there.
/// Guards for different paths never block each other, and the core never
/// holds two guards at once (so lock order cannot deadlock).
#[async_trait]
pub trait StreamMutex: Send + Sync + 'static {
    async fn lock(&self, stream: &StreamHandle) -> StreamGuard;

    /// The guard at once if the lock is free and nobody waits for it,
    /// else `None` (then [`Self::lock`] queues). Same invariants as `lock`;
    /// it lets an uncontended critical section skip `lock`'s boxed future.
    /// A substrate whose lock always waits on something answers `None`.
    fn try_lock(&self, _stream: &StreamHandle) -> Option<StreamGuard> {
        None
    }
}

/// Wakes the live readers (long-poll, SSE) of a stream.
///
/// Invariants: `publish` is called by the core only after the commit it
/// describes returned `Ok`. A [`HubSubscription`] created before a commit
/// observes that commit: it never misses a wake-up for a change that happened
/// after `subscribe` returned (the core subscribes, then reads the store, then
/// waits — so nothing falls in between).
pub trait StreamHub: Send + Sync + 'static {
    /// Tell this stream's waiters about a committed change. Takes the
    /// handle the change was made through (a detached one for another
    /// stream), so a substrate reaches the stream's waiters without looking
    /// its path up again.
    fn publish(&self, stream: &StreamHandle, signal: TailSignal);
    /// Start watching the stream. Subscribe *before* reading the store.
    fn subscribe(&self, stream: &StreamHandle) -> Box<dyn HubSubscription>;
}

/// One reader's interest in one stream.
#[async_trait]
pub trait HubSubscription: Send {
    /// Wait until the stream may differ from `seen` (tail beyond it, closed,
    /// deleted, another incarnation) or until `deadline`. Returns `true` when
    /// woken, `false` at the deadline. Spurious `true` is allowed: the caller
    /// always re-reads the stream's state (the store, or
    /// [`Self::fresh_meta`]).
    async fn changed(&mut self, seen: &TailSignal, deadline: Instant) -> bool;

    /// The stream's meta as a consistent read of the store *begun after this
    /// subscription was created* found it (or a later version of the same
    /// incarnation), when the hub shares such reads among the process's
    /// readers; `None`: read the store yourself.
    ///
    /// Why: a live reader parked at the tail re-issues its long-poll (or its
    /// SSE connection steps) again and again, and each would otherwise be a
    /// store read of its own — 1,000 idle readers, 1,000 times the reads of
    /// one. A read begun after the subscription (which the core creates when
    /// the request arrives) is as good as the reader's own: its answer is
    /// current at a moment inside the request, so an up-to-date answer from
    /// it is never stale (a meta cached from before the request could be,
    /// across processes). `at` is the position the reader waits at (`None`:
    /// `offset=now`): a hub may wait up to about one poll interval for such a
    /// read, and answers `None` at once when waiting would only delay data
    /// it knows exists (the last tail it saw is past `at`). The default
    /// (in-process hubs, whose store reads cost nothing): `None`.
    async fn fresh_meta(&mut self, at: Option<u64>) -> Option<StreamMeta> {
        let _ = at;
        None
    }
}

/// Fires a callback at a future time so expired streams get cleaned up.
///
/// Invariants: expiry is enforced lazily by the core on every access, so a
/// late or lost alarm never makes an expired stream readable; the scheduler
/// only bounds how long an expired stream's storage lingers. Scheduling the
/// same `(path, incarnation)` again replaces the previous alarm. When an alarm
/// fires the substrate calls `StreamService::run_expiry(path, incarnation)`,
/// which deletes the stream if it is expired or re-arms if its sliding TTL
/// moved the deadline.
#[async_trait]
pub trait ExpiryScheduler: Send + Sync + 'static {
    async fn schedule_at(&self, path: &str, incarnation: &str, at_ms: i64) -> Result<(), StoreError>;
    async fn cancel(&self, path: &str, incarnation: &str) -> Result<(), StoreError>;
}

/// Reaches another stream so a fork can read its inherited bytes.
///
/// Invariants: returns data of exactly the named incarnation (a re-created
/// source is a different stream); soft-deleted sources stay readable here.
/// Reference counts are changed by the core inside the fork's own commit
/// (creation and delete), so they are atomic with the fork's meta.
#[async_trait]
pub trait ForkPeer: Send + Sync + 'static {
    async fn source_meta(&self, path: &str) -> Result<Option<StreamMeta>, StoreError>;
    async fn read_source(
        &self,
        path: &str,
        incarnation: &str,
        from: u64,
        until: u64,
        max_bytes: usize,
    ) -> Result<Vec<Chunk>, StoreError>;
}

/// One stream, entered for the duration of a request (or a longer task):
/// its path and the substrate's per-stream context. Every per-stream call of
/// the substrate takes it, so a substrate reaches its context (lock, cache,
/// waiters) directly instead of looking the path up again; holding it keeps
/// the context alive.
///
/// A [`detached`](Self::detached) handle carries no context: substrates look
/// their context up by path (sweeps, tests, reads of another stream).
#[derive(Clone)]
pub struct StreamHandle {
    path: Arc<str>,
    context: Option<Arc<dyn Any + Send + Sync>>,
}

impl StreamHandle {
    /// A handle carrying the substrate's context `C` for `path`.
    pub fn new<C: Send + Sync + 'static>(path: &str, context: Arc<C>) -> Self {
        Self::with_path(Arc::from(path), context)
    }

    /// [`Self::new`] with the path already shared (no copy of it).
    pub fn with_path<C: Send + Sync + 'static>(path: Arc<str>, context: Arc<C>) -> Self {
        Self { path, context: Some(context) }
    }

    /// A handle without a substrate context.
    pub fn detached(path: &str) -> Self {
        Self { path: Arc::from(path), context: None }
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// The substrate's context, if this handle carries one of type `C`.
    pub fn context<C: Send + Sync + 'static>(&self) -> Option<Arc<C>> {
        Arc::clone(self.context.as_ref()?).downcast::<C>().ok()
    }
}

impl std::fmt::Debug for StreamHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamHandle").field("path", &self.path).field("attached", &self.context.is_some()).finish()
    }
}

/// The per-stream context map: "give me stream K's context, created on demand,
/// evicted when idle".
///
/// Invariants: while a [`StreamHandle`] for `path` is held, the substrate's
/// per-stream state for it (lock, waiters, pollers, caches) stays in place;
/// once no handle, lock guard or subscription refers to it, it may be
/// evicted. The number of live contexts is bounded by the streams in use, not
/// the streams ever seen.
pub trait StreamRegistry: Send + Sync + 'static {
    /// Enter `path` for the duration of one request.
    fn enter(&self, path: &str) -> StreamHandle;
    /// Number of live per-stream contexts (for tests and metrics).
    fn live_contexts(&self) -> usize;
}

/// [`ForkPeer`] for substrates whose streams share one store (memory, local,
/// AWS): the source is read straight from the store.
pub struct StoreForkPeer {
    store: Arc<dyn StreamStore>,
}

impl StoreForkPeer {
    pub fn new(store: Arc<dyn StreamStore>) -> Self {
        Self { store }
    }
}

#[async_trait]
impl ForkPeer for StoreForkPeer {
    async fn source_meta(&self, path: &str) -> Result<Option<StreamMeta>, StoreError> {
        self.store.read_meta(&StreamHandle::detached(path)).await
    }

    async fn read_source(
        &self,
        path: &str,
        incarnation: &str,
        from: u64,
        until: u64,
        max_bytes: usize,
    ) -> Result<Vec<Chunk>, StoreError> {
        self.store.read_chunks(&StreamHandle::detached(path), incarnation, from, until, max_bytes).await
    }
}

/// One platform: the six substrate services the core runs on, and the
/// clock and randomness they and the core read (portable-architecture:
/// Clock and Random are swappable; tests run on a manual clock).
#[derive(Clone)]
pub struct Substrate {
    pub store: Arc<dyn StreamStore>,
    pub mutex: Arc<dyn StreamMutex>,
    pub hub: Arc<dyn StreamHub>,
    pub scheduler: Arc<dyn ExpiryScheduler>,
    pub fork_peer: Arc<dyn ForkPeer>,
    pub registry: Arc<dyn StreamRegistry>,
    pub clock: Clock,
    pub random: Random,
}
