//! The protocol use-cases, written once over the substrate traits.
//!
//! Every mutation follows the same shape (`StreamService::mutate`, crate-private):
//! lock → read → validate → commit, retried from the read when the commit's
//! precondition fails, then publish. Reads never take the lock.

mod append;
mod built;
mod create;
mod delete;
mod error;
mod inline;
mod journal;
mod read;
mod registry;
mod retention;
mod speculation;
mod sse;
mod trace;

use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

pub use append::{AppendOutcome, AppendRequest};
pub use built::BuildAppend;
pub use create::{CreateOutcome, CreateRequest, ForkRequest};
pub use error::{ServiceError, ServiceResult};
pub use inline::{InlineControl, InlineView};
pub use journal::JournalPage;
pub use read::{LiveMode, ReadOutcome, ReadRequest};
pub use registry::REGISTRY_PATH;
pub use retention::TrimOutcome;
pub use sse::SseStream;
pub use trace::{TRACE_RING_KEY, TRACE_RING_LEN};

use ds_clock::{Clock, Random};

use crate::{Commit, StoreError, StreamHandle, StreamMeta, Substrate};

/// Tunables of the core; the binaries map flags and env vars onto this.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Most bytes of stream data one read response carries.
    pub max_read_bytes: usize,
    /// How long a long-poll waits for data before answering 204.
    pub long_poll_timeout: Duration,
    /// How long one SSE connection stays open (§10.2 suggests about 60 s).
    pub sse_max_duration: Duration,
    /// Commit attempts before a contended mutation gives up with 503.
    pub max_commit_attempts: u32,
    /// Keep the `__registry__` stream (every create and delete appends to
    /// it in its own commit; see `registry.rs`). Off: the path is ordinary.
    pub registry: bool,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            max_read_bytes: 1024 * 1024,
            long_poll_timeout: Duration::from_secs(20),
            sse_max_duration: Duration::from_secs(60),
            max_commit_attempts: 64,
            registry: true,
        }
    }
}

/// The Durable Streams protocol over one [`Substrate`].
#[derive(Clone)]
pub struct StreamService {
    sub: Substrate,
    cfg: Arc<ServiceConfig>,
    /// The substrate's clock (or the one [`Self::with_clock`] set).
    clock: Clock,
    /// Cancelled on shutdown: live reads (long-poll, SSE) end promptly.
    shutdown: tokio_util::sync::CancellationToken,
    /// Predicted stream states while appends are in flight (pipelining).
    speculation: Arc<speculation::Speculation>,
    /// The inline processors (set once, seen by every clone).
    inline: Arc<std::sync::OnceLock<Arc<dyn crate::InlineGate>>>,
}

/// How a mutation plan reads the store (see [`StreamService::mutate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reads {
    MayCache,
    Consistent,
}

/// What a mutation's validate step decided.
// One per mutation attempt, moved straight into `mutate`: boxing the large
// variant would only add an allocation to every append.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Plan<T> {
    /// Commit these writes, then publish `publish` to the stream the
    /// mutation entered (the one stream a create or an append changes) and
    /// return `T`.
    Commit {
        commit: Commit,
        publish: Option<crate::TailSignal>,
        deleted: Vec<StreamMeta>,
        value: T,
        /// Appends only: the state to plan the next append on while this
        /// commit is in flight.
        predicted: Option<Predicted<T>>,
        /// The `__registry__` change the commit carries (creates, deletes,
        /// closes): its lock is held until the commit resolved, and its
        /// readers are woken once it applied.
        registry: Option<registry::RegistryWrite>,
    },
    /// Nothing to write; return `T` as is.
    Done(T),
}

/// The state an append's commit was planned on, as its precondition names
/// it (`Expect::VersionAt`): `(incarnation, version, tail)`.
fn planned_on(commit: &Commit) -> Option<(&str, u64, u64)> {
    commit.ops.iter().find_map(|op| match op {
        crate::Op::PutMeta { meta, expect: crate::Expect::VersionAt { version, tail } } => {
            Some((&*meta.incarnation, *version, *tail))
        }
        _ => None,
    })
}

/// The state an append predicts for its stream (and producer) once its
/// commit applies; recorded while the commit is in flight.
pub(crate) struct Predicted<T> {
    /// The predicted meta, found in the mutation's value (an append's
    /// outcome holds its next meta): copied only when it is recorded, which
    /// a store that applies commits as submitted never needs.
    pub meta: fn(&T) -> &StreamMeta,
    /// The producer the append advances: `(producer id, its new state)`.
    pub producer: Option<(String, crate::ProducerState)>,
    /// The records the append writes (its inline reductions).
    pub records: Vec<(String, crate::Record)>,
}

impl StreamService {
    /// The service over `sub`. `cfg.max_read_bytes` is clamped to the
    /// store's own limit ([`crate::StreamStore::max_read_bytes`]).
    pub fn new(sub: Substrate, mut cfg: ServiceConfig) -> Self {
        if let Some(cap) = sub.store.max_read_bytes() {
            cfg.max_read_bytes = cfg.max_read_bytes.min(cap);
        }
        Self {
            clock: sub.clock.clone(),
            sub,
            cfg: Arc::new(cfg),
            shutdown: Default::default(),
            speculation: Default::default(),
            inline: Default::default(),
        }
    }

    /// The service on another clock than its substrate's (a manual one in
    /// tests of expiry).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The clock everything built on this service reads (expiry, alarms,
    /// processors, subscriptions).
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The source of jitter of everything built on this service.
    pub fn random(&self) -> &Random {
        &self.sub.random
    }

    /// Start shutting down: waiting live readers are answered now (long-poll
    /// 204, SSE connections closed). Mutations in flight finish normally.
    pub fn begin_shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Wait on a hub subscription, giving up at the deadline or on shutdown.
    pub(crate) async fn wait_changed(
        &self,
        sub: &mut Box<dyn crate::HubSubscription>,
        seen: &crate::TailSignal,
        deadline: tokio::time::Instant,
    ) -> bool {
        tokio::select! {
            woke = sub.changed(seen, deadline) => woke,
            () = self.shutdown.cancelled() => false,
        }
    }

    /// Feed fired expiry alarms (in-process schedulers) to [`Self::run_expiry`]
    /// until the channel closes.
    pub async fn run_expiry_loop(&self, mut due: tokio::sync::mpsc::UnboundedReceiver<crate::ExpiryDue>) {
        while let Some(d) = due.recv().await {
            if let Err(e) = self.run_expiry(&d.path, &d.incarnation).await {
                tracing::warn!(path = %d.path, error = %e, "expiry run failed");
            }
        }
    }

    /// Re-arm the expiry alarm of every stream with a deadline (after a
    /// restart of a substrate whose scheduler is in-process).
    pub async fn rearm_expiries(&self) -> ServiceResult<usize> {
        let mut after: Option<String> = None;
        let mut armed = 0;
        loop {
            let page = self.sub.store.list_streams(after.as_deref(), 500).await?;
            let Some(last) = page.last() else {
                return Ok(armed);
            };
            after = Some(last.path.to_string());
            for meta in page.iter().filter(|m| m.expiry_deadline_ms().is_some() && !m.soft_deleted) {
                self.arm_expiry(meta).await;
                armed += 1;
            }
        }
    }

    pub fn config(&self) -> &ServiceConfig {
        &self.cfg
    }

    pub fn substrate(&self) -> &Substrate {
        &self.sub
    }

    /// Run one mutation of `path`: under the stream's lock, `plan` reads and
    /// validates, the resulting commit is applied, and waiters are woken. A
    /// commit that loses a race ([`StoreError::Conflict`]) is re-planned from
    /// a fresh read, with jittered backoff, up to the configured attempts.
    ///
    /// `plan` gets a [`Reads`] mode: the first attempt may use the
    /// substrate's cached reads; any outcome that commits nothing (`Done` or
    /// an error) is re-planned with consistent reads before it is answered,
    /// because only a commit's precondition can vouch for a cached read.
    ///
    /// Not an `async fn` of its own: that would be one more future around
    /// [`Self::mutate_then`]'s, copied whole into it (callgrind: 550
    /// instructions more per append, most of them `memcpy`).
    pub(crate) fn mutate<'a, T, F, Fut>(
        &'a self,
        stream: &'a StreamHandle,
        plan: F,
    ) -> impl std::future::Future<Output = ServiceResult<T>> + 'a
    where
        T: 'a,
        F: FnMut(Reads) -> Fut + 'a,
        Fut: std::future::Future<Output = ServiceResult<Plan<T>>> + 'a,
    {
        self.mutate_then(stream, plan, |_: &T| std::future::ready(()))
    }

    /// [`Self::mutate`], running `before_publish` once the commit is durable
    /// and before waiters are woken (a traced append's trace ring write).
    pub(crate) async fn mutate_then<T, F, Fut, H, HFut>(
        &self,
        stream: &StreamHandle,
        mut plan: F,
        before_publish: H,
    ) -> ServiceResult<T>
    where
        F: FnMut(Reads) -> Fut,
        Fut: std::future::Future<Output = ServiceResult<Plan<T>>>,
        H: FnOnce(&T) -> HFut,
        HFut: std::future::Future<Output = ()>,
    {
        let mut before_publish = Some(before_publish);
        let path = stream.path();
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let guard = match self.sub.mutex.try_lock(stream) {
                Some(guard) => guard,
                None => self.sub.mutex.lock(stream).await,
            };
            // The prediction this plan may build on, before it can drain
            // under the plan's reads (see `Speculation::chain`).
            let seen = if self.sub.store.chains_submissions() { self.speculation.seen(path) } else { None };
            let first = plan(Reads::MayCache).await;
            let planned = if matches!(first, Ok(Plan::Commit { .. })) { first } else { plan(Reads::Consistent).await };
            let planned = match planned {
                Err(ServiceError::Expired(meta)) if attempt < self.cfg.max_commit_attempts => {
                    drop(guard);
                    self.expire(&meta).await;
                    continue;
                }
                other => other?,
            };
            let (commit, publish, deleted, value, predicted, registry) = match planned {
                Plan::Done(value) => return Ok(value),
                Plan::Commit { commit, publish, deleted, value, predicted, registry } => {
                    (commit, publish, deleted, value, predicted, registry)
                }
            };
            // A commit that changes a meta with commits in flight must keep
            // their prediction truthful: it extends it (recorded below) or
            // poisons it. Collected before the commit moves into the store.
            let unpredicted: Vec<Arc<str>> = match &predicted {
                Some(_) => Vec::new(),
                None => commit.meta_paths().map(Arc::from).collect(),
            };
            // An append joins its stream's pipeline chain (see `Chain`): if a
            // commit it may be stacked on is refused, so is it, even when
            // another writer left a state of the same version and tail.
            let chain = match (&predicted, planned_on(&commit)) {
                (Some(_), Some(base)) if self.sub.store.chains_submissions() => {
                    Some(speculation::Speculation::chain(seen, base))
                }
                _ => None,
            };
            // Submit under the lock (so submissions are ordered), then wait for
            // durability without it, letting the next append stack on top.
            let tried = match &chain {
                Some(chain) => self.sub.store.try_submit_chained(commit, chain.clone()),
                None => self.sub.store.try_submit(commit),
            };
            let submitted = match tried {
                crate::TrySubmit::Submitted(submitted) => submitted,
                // Waiting, still under the lock: a chained commit keeps its chain.
                crate::TrySubmit::WouldWait(commit) => match &chain {
                    Some(chain) => self.sub.store.submit_chained(commit, chain.clone()).await,
                    None => self.sub.store.submit(commit).await,
                },
            };
            let mut pending = match submitted {
                Ok(pending) => pending,
                Err(e) => {
                    drop(guard);
                    self.retry_or_fail(path, attempt, e).await?;
                    continue;
                }
            };
            unpredicted.iter().for_each(|p| self.speculation.poison(p));
            // A store that applies a commit as it is submitted (memory; AWS
            // with group commit off) has nothing in flight: the next plan
            // reads the applied state, and a prediction would only be
            // recorded and dropped again. A commit resolved this early with
            // predictions in flight (the local store's writer may finish a
            // batch before this task runs again) is recorded all the same:
            // the prediction must name the state every later submission
            // stacks on (found by the kill -9 campaign: unrecorded, the next
            // append was planned on the older prediction and a later one
            // passed its version check against this commit's state, at the
            // wrong position).
            let applied = match std::future::Future::poll(
                std::pin::Pin::new(&mut pending),
                &mut Context::from_waker(Waker::noop()),
            ) {
                Poll::Ready(result) => Some(result),
                Poll::Pending => None,
            };
            let predicted = if applied.is_none() || self.speculation.in_flight(path) { predicted } else { None };
            // A prediction is of `stream` itself (an append's next meta).
            let in_flight = predicted.map(|p| {
                let meta = (p.meta)(&value);
                let in_flight = speculation::InFlight::new(&self.speculation, meta.path.clone());
                self.speculation.submitted(meta.clone(), p.producer, p.records, chain);
                in_flight
            });
            drop(guard);
            let result = match (applied, in_flight) {
                (Some(result), in_flight) => {
                    if let Some(in_flight) = in_flight {
                        in_flight.finished(result.is_ok());
                    }
                    result
                }
                // Owned by the prediction's share while awaited: dropped
                // here, the share lasts until the commit is decided.
                (None, Some(in_flight)) => in_flight.resolve(pending).await,
                (None, None) => pending.await,
            };
            if let Err(e) = result {
                self.retry_or_fail(path, attempt, e).await?;
                continue;
            }
            if let Some(hook) = before_publish.take() {
                hook(&value).await;
            }
            if let Some(signal) = publish {
                self.sub.hub.publish(stream, signal);
            }
            self.publish_registry(registry);
            for meta in &deleted {
                let mut signal = crate::TailSignal::of(meta);
                signal.deleted = true;
                self.sub.hub.publish(&Self::handle_for(stream, &meta.path), signal);
                let _ = self.sub.scheduler.cancel(&meta.path, &meta.incarnation).await;
            }
            return Ok(value);
        }
    }

    /// `stream` itself when it is `path` (the usual case: a mutation
    /// publishes the stream it changed), else a detached handle.
    fn handle_for(stream: &StreamHandle, path: &str) -> StreamHandle {
        if stream.path() == path {
            stream.clone()
        } else {
            StreamHandle::detached(path)
        }
    }

    /// After a failed commit: back off and return `Ok` to retry a lost race,
    /// or the error to give up with.
    async fn retry_or_fail(&self, path: &str, attempt: u32, e: StoreError) -> ServiceResult<()> {
        match e {
            StoreError::Conflict if attempt < self.cfg.max_commit_attempts => {
                tracing::debug!(path, attempt, "commit precondition failed; retrying");
                let cap =
                    if self.sub.store.paces_conflicts() { 1 } else { 2u64.saturating_pow(attempt.min(7)).min(100) };
                let backoff = self.sub.random.in_range(0..=cap);
                tokio::time::sleep(Duration::from_millis(backoff)).await;
                Ok(())
            }
            StoreError::Conflict => Err(ServiceError::Contention),
            e => Err(e.into()),
        }
    }

    /// Meta for planning a mutation: the pipeline's prediction, else the
    /// store's (possibly cached) read; consistent reads go to the store.
    pub(crate) async fn meta_for_update(
        &self,
        stream: &StreamHandle,
        reads: Reads,
    ) -> ServiceResult<Option<StreamMeta>> {
        Ok(match reads {
            Reads::MayCache => match self.speculation.meta(stream.path()) {
                Some(predicted) => Some(predicted),
                None => match self.sub.store.try_read_meta_for_update(stream) {
                    Some(read) => read?,
                    None => self.sub.store.read_meta_for_update(stream).await?,
                },
            },
            Reads::Consistent => self.sub.store.read_meta(stream).await?,
        })
    }

    /// Producer state for planning an append (see [`Self::meta_for_update`]).
    pub(crate) async fn producer_for_update(
        &self,
        stream: &StreamHandle,
        meta: &StreamMeta,
        id: &str,
        reads: Reads,
    ) -> ServiceResult<Option<crate::ProducerState>> {
        let store = &self.sub.store;
        Ok(match reads {
            Reads::MayCache => match self.speculation.producer(&meta.path, &meta.incarnation, id) {
                Some(predicted) => Some(predicted),
                None => store.read_producer_for_update(stream, &meta.incarnation, id).await?,
            },
            Reads::Consistent => store.read_producer(stream, &meta.incarnation, id).await?,
        })
    }

    /// A record for planning an append (see [`Self::meta_for_update`]): the
    /// pipeline's prediction of it, else the store's.
    pub(crate) async fn record_for_update(
        &self,
        stream: &StreamHandle,
        meta: &StreamMeta,
        key: &str,
        reads: Reads,
    ) -> ServiceResult<Option<crate::Record>> {
        if reads == Reads::Consistent {
            return Ok(self.sub.store.read_record(stream, &meta.incarnation, key).await?);
        }
        if let Some(predicted) = self.speculation.record(&meta.path, &meta.incarnation, key) {
            return Ok(Some(predicted));
        }
        Ok(self.sub.store.read_record_for_update(stream, &meta.incarnation, key).await?)
    }

    /// The live meta of `path`: absent → `NotFound`; soft-deleted → `Gone`;
    /// expired → `Expired` (a mutation re-plans after removing it).
    pub(crate) async fn live_meta(&self, stream: &StreamHandle, reads: Reads) -> ServiceResult<StreamMeta> {
        match self.meta_for_update(stream, reads).await? {
            None => Err(ServiceError::NotFound),
            Some(meta) if meta.soft_deleted => Err(ServiceError::Gone),
            Some(meta) if meta.is_expired_by(|| self.clock.now_ms()) => Err(ServiceError::Expired(Box::new(meta))),
            Some(meta) => Ok(meta),
        }
    }

    /// [`Self::live_meta`] for reads (outside any lock): an expired stream is
    /// removed on the spot and reads as `NotFound`.
    pub(crate) async fn read_live_meta(&self, stream: &StreamHandle) -> ServiceResult<StreamMeta> {
        match self.live_meta(stream, Reads::Consistent).await {
            Err(ServiceError::Expired(meta)) => {
                self.expire(&meta).await;
                Err(ServiceError::NotFound)
            }
            other => other,
        }
    }

    /// Reset the sliding TTL on a read (writes reset it in their commit).
    pub(crate) async fn touch(&self, stream: &StreamHandle, meta: &StreamMeta) {
        if meta.ttl_secs.is_some() && meta.expires_at_ms.is_none() {
            if let Err(e) = self.sub.store.touch(stream, &meta.incarnation, self.clock.now_ms()).await {
                tracing::warn!(path = %meta.path, error = %e, "could not record access for TTL");
            }
        }
    }

    /// Arm the expiry alarm for a stream that has a deadline (best effort:
    /// expiry is enforced lazily on access; the alarm only bounds cleanup).
    pub(crate) async fn arm_expiry(&self, meta: &StreamMeta) {
        if let Err(e) = self.schedule_expiry(meta).await {
            tracing::warn!(path = %meta.path, error = %e, "could not arm expiry alarm");
        }
    }

    /// Arm the expiry alarm for a stream that has a deadline.
    pub(crate) async fn schedule_expiry(&self, meta: &StreamMeta) -> ServiceResult<()> {
        if let Some(at) = meta.expiry_deadline_ms() {
            self.sub.scheduler.schedule_at(&meta.path, &meta.incarnation, at).await?;
        }
        Ok(())
    }
}
