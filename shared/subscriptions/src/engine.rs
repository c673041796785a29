//! [`Subscriptions`]: the engine. Every change of a subscription is one
//! transition: under the subscription's in-process lock, read its record
//! (cached, or from the store after a lost race), read the linked streams'
//! tails, apply a pure transition ([`crate::machine`]), write the record
//! conditionally on the revision read, then tell the [`WakeScheduler`] when
//! to look again. Notifications are sent outside the lock, never inside a
//! request.
//!
//! The cache holds the records of live subscriptions of this process so that
//! a commit signal ([`Subscriptions::on_stream_changed`]) is matched against
//! them without I/O; correctness never rests on it: every write is
//! conditional, and a lost race re-reads the store.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ds_core::{StoreError, StreamHandle, StreamService, TailSignal};
use ds_egress::{EgressClient, EgressConfig};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::error::{SubResult, SubscriptionError};
use crate::machine::{self, Entropy};
use crate::record::{SubscriptionRecord, Tail, Tails};
use crate::schedule::WakeScheduler;
use crate::signing::KeyRing;
use crate::store::{self, Stored};
use crate::webhook_url::UrlPolicy;

/// Attempts of one transition that loses races before it gives up (503).
const ATTEMPTS: u32 = 16;

/// How subscriptions are delivered.
#[derive(Debug, Clone)]
pub struct SubscriptionsConfig {
    pub url_policy: UrlPolicy,
    /// Whole-request timeout of one webhook delivery.
    pub webhook_timeout: Duration,
    /// This process is the only one changing subscriptions in its store (the
    /// local server), so a transition may start from the record it cached.
    /// `false` where several processes serve them (the Lambda functions,
    /// several servers on one table): every transition reads the record,
    /// since a decision that writes nothing (a `409 FENCED`, an "already
    /// claimed", nothing to do) taken on an older copy would not be caught
    /// by the conditional write.
    pub sole_writer: bool,
    /// A look at a subscription ([`Subscriptions::run_due`], and the looks
    /// a stream or record change makes) issues wakes but delivers none: a
    /// wake to deliver is asked of the scheduler for "now", and the host
    /// delivers it with [`Subscriptions::deliver_due`] where a slow
    /// receiver holds up nothing else (the AWS processor function: one
    /// queue message per delivery).
    pub deliver_elsewhere: bool,
}

impl Default for SubscriptionsConfig {
    fn default() -> Self {
        Self {
            url_policy: UrlPolicy::default(),
            webhook_timeout: Duration::from_secs(10),
            sole_writer: true,
            deliver_elsewhere: false,
        }
    }
}

type Cached = Stored<Arc<SubscriptionRecord>>;

/// What one commit asks of the cached subscriptions.
struct StreamChange {
    /// Subscriptions whose pattern matches a stream they do not link yet.
    to_link: Vec<String>,
    /// Subscriptions with pending work on the stream (a wake in flight or
    /// not: see `plan_stream_change`).
    to_run: Vec<String>,
    /// Where a newly linked stream starts: position 0 of the commit's life.
    at: Tail,
}

pub(crate) struct Inner {
    pub service: StreamService,
    pub keys: KeyRing,
    pub http: EgressClient,
    pub policy: UrlPolicy,
    pub scheduler: Arc<dyn WakeScheduler>,
    sole_writer: bool,
    /// See [`SubscriptionsConfig::deliver_elsewhere`].
    deliver_elsewhere: bool,
    cache: Mutex<HashMap<String, Cached>>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Wake ids whose notification is being sent (one sender per wake).
    pub delivering: Mutex<HashSet<String>>,
    /// Subscriptions with a tick requested by a commit signal, not yet run.
    poked: Mutex<HashSet<String>>,
}

/// The subscription engine (cheap to clone).
#[derive(Clone)]
pub struct Subscriptions {
    pub(crate) inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section is one map operation.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Subscriptions {
    pub fn new(
        service: StreamService,
        keys: KeyRing,
        cfg: SubscriptionsConfig,
        scheduler: Arc<dyn WakeScheduler>,
    ) -> Result<Self, StoreError> {
        let http = EgressClient::new(EgressConfig {
            allow_loopback: cfg.url_policy.allow_loopback,
            allow_http_loopback: cfg.url_policy.allow_loopback,
            timeout: cfg.webhook_timeout,
            max_body_bytes: 64 * 1024,
            ..EgressConfig::default()
        })
        .map_err(|e| StoreError::backend("webhook client", e))?;
        let inner = Inner {
            service,
            keys,
            http,
            policy: cfg.url_policy,
            scheduler,
            sole_writer: cfg.sole_writer,
            deliver_elsewhere: cfg.deliver_elsewhere,
            cache: Mutex::default(),
            locks: Mutex::default(),
            delivering: Mutex::default(),
            poked: Mutex::default(),
        };
        Ok(Self { inner: Arc::new(inner) })
    }

    /// The service's clock: every time a record holds or a wake is armed for.
    pub(crate) fn clock(&self) -> &ds_core::Clock {
        self.inner.service.clock()
    }

    pub(crate) fn store(&self) -> &dyn ds_core::StreamStore {
        self.inner.service.substrate().store.as_ref()
    }

    /// The JWK Set of the webhook signing keys (§6.5).
    pub fn jwks(&self) -> serde_json::Value {
        self.inner.keys.jwks()
    }

    /// Load every live subscription and look at each once: re-arms persisted
    /// lease ends and retry times, and wakes for work that arrived while the
    /// host was down. Returns how many subscriptions were loaded.
    pub async fn start(&self) -> SubResult<usize> {
        let ids = store::read_index(self.store()).await?.map(|i| i.value.ids).unwrap_or_default();
        for id in &ids {
            if let Err(e) = self.run_due(id).await {
                tracing::warn!(subscription = %id, error = %e, "could not resume subscription");
            }
        }
        Ok(ids.len())
    }

    /// Run fired ids (from an in-process scheduler) until the channel closes.
    pub async fn run_due_loop(self, mut due: UnboundedReceiver<String>) {
        while let Some(id) = due.recv().await {
            let this = self.clone();
            tokio::spawn(async move {
                if let Err(e) = this.run_due(&id).await {
                    tracing::warn!(subscription = %id, error = %e, "subscription run failed");
                }
            });
        }
    }

    /// Look at subscription `id` now: end an expired lease, issue a wake for
    /// pending work, deliver a wake not yet delivered.
    pub async fn run_due(&self, id: &str) -> SubResult<()> {
        self.look(id, !self.inner.deliver_elsewhere).await
    }

    /// [`Self::run_due`], delivering a wake not yet delivered whatever
    /// `deliver_elsewhere` says: the host's delivery of one subscription.
    pub async fn deliver_due(&self, id: &str) -> SubResult<()> {
        self.look(id, true).await
    }

    async fn look(&self, id: &str, deliver: bool) -> SubResult<()> {
        let rec = match self.transition(id, |rec, tails, now, e| Ok(machine::tick(rec, tails, now, e))).await {
            Ok((_, rec)) => rec,
            Err(SubscriptionError::NotFound) => return Ok(()),
            Err(e) => return Err(e),
        };
        // Also when nothing changed: a restart re-arms persisted times here.
        self.arm(&rec, self.clock().now_ms()).await;
        if deliver {
            self.deliver_if_due(rec).await;
        }
        Ok(())
    }

    pub(crate) fn id_lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = lock(&self.inner.locks);
        Arc::clone(locks.entry(id.to_owned()).or_default())
    }

    /// Whether this process's latest record of `id` still has wake
    /// `wake_id` undelivered (another task may have delivered it since the
    /// caller's snapshot was taken).
    pub(crate) fn still_undelivered(&self, id: &str, wake_id: &str) -> bool {
        let cache = lock(&self.inner.cache);
        let wake = cache.get(id).and_then(|c| c.value.wake.as_ref().map(|w| (w.wake_id.clone(), w.delivered)));
        wake.is_some_and(|(w, delivered)| w == wake_id && !delivered)
    }

    /// Cache `rec` read or written at `revision`, unless a newer revision
    /// is cached (a read without the subscription's lock, such as `GET`,
    /// may finish after a transition wrote a newer one).
    pub(crate) fn remember(&self, revision: u64, rec: SubscriptionRecord) -> Arc<SubscriptionRecord> {
        let rec = Arc::new(rec);
        let mut cache = lock(&self.inner.cache);
        if cache.get(&rec.id).is_some_and(|c| c.revision > revision) {
            return rec;
        }
        if rec.is_deleted() {
            cache.remove(&rec.id);
        } else {
            cache.insert(rec.id.clone(), Stored { revision, value: Arc::clone(&rec) });
        }
        rec
    }

    /// The record of `id` read from the store (and cached).
    pub(crate) async fn fetch(&self, id: &str) -> SubResult<Option<Stored<Arc<SubscriptionRecord>>>> {
        let stored = store::read_subscription(self.store(), id).await?;
        Ok(stored.map(|s| {
            let revision = s.revision;
            Stored { revision, value: self.remember(revision, s.value) }
        }))
    }

    /// Current tails of `paths` (`None`: absent, deleted or expired).
    pub(crate) async fn read_tails<'a>(&self, paths: impl Iterator<Item = &'a String>) -> SubResult<Tails> {
        let store = self.store();
        let now = self.clock().now_ms();
        let mut tails = Tails::new();
        for path in paths {
            let meta = store.read_meta(&StreamHandle::detached(path)).await?;
            let tail = meta
                .filter(|m| !m.soft_deleted && !m.is_expired(now))
                .map(|m| Tail { incarnation: m.incarnation, tail: m.tail });
            tails.insert(path.clone(), tail);
        }
        Ok(tails)
    }

    /// One transition of `id` (see the module docs). `f` may run more than
    /// once (after a lost race, on a fresh read). Deleted or absent: `NotFound`.
    pub(crate) async fn transition<T>(
        &self,
        id: &str,
        mut f: impl FnMut(&mut SubscriptionRecord, &Tails, i64, &Entropy) -> SubResult<T>,
    ) -> SubResult<(T, Arc<SubscriptionRecord>)> {
        let guard = self.id_lock(id);
        let _held = guard.lock().await;
        let mut cached = match self.inner.sole_writer {
            true => {
                lock(&self.inner.cache).get(id).map(|c| Stored { revision: c.revision, value: Arc::clone(&c.value) })
            }
            false => None,
        };
        for _ in 0..ATTEMPTS {
            let current = match cached.take() {
                Some(c) => c,
                None => self.fetch(id).await?.ok_or(SubscriptionError::NotFound)?,
            };
            if current.value.is_deleted() {
                return Err(SubscriptionError::NotFound);
            }
            let tails = self.read_tails(current.value.links.keys()).await?;
            let now = self.clock().now_ms();
            let mut next = (*current.value).clone();
            let out = f(&mut next, &tails, now, &Entropy::fresh(self.inner.service.random()))?;
            if next == *current.value {
                return Ok((out, current.value));
            }
            let op = store::put_subscription(&next, Some(current.revision))?;
            match self.store().commit(ds_core::Commit { ops: vec![op] }).await {
                Ok(()) => {
                    let rec = self.remember(current.revision + 1, next);
                    self.arm(&rec, now).await;
                    return Ok((out, rec));
                }
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(SubscriptionError::Contention)
    }

    /// Tell the scheduler when `rec` is due next. A wake this process is
    /// sending is not asked for again: its sender records the outcome, and
    /// that transition arms the next time (asking "now" meanwhile only made
    /// the scheduler run the subscription over and over until the webhook
    /// answered).
    pub(crate) async fn arm(&self, rec: &SubscriptionRecord, now: i64) {
        match machine::next_due(rec, now) {
            Some(_) if self.sending(rec) => {}
            Some(at) => self.inner.scheduler.wake_at(&rec.id, at).await,
            None => self.inner.scheduler.cancel(&rec.id).await,
        }
    }

    /// Whether `rec`'s undelivered wake is being sent by this process.
    fn sending(&self, rec: &SubscriptionRecord) -> bool {
        rec.wake.as_ref().is_some_and(|w| !w.delivered && lock(&self.inner.delivering).contains(&w.wake_id))
    }

    pub(crate) async fn disarm(&self, id: &str) {
        self.inner.scheduler.cancel(id).await;
    }

    /// A commit changed the stream at `path` (called after the commit, by the
    /// host's hub tap). Links a stream the pattern matches the first time it
    /// is seen, at position 0 of its incarnation (so the data of the commit
    /// that created it is pending), and runs subscriptions that now have
    /// pending work on it (a run finding a wake in flight changes nothing).
    /// Never blocks: work is spawned.
    pub fn on_stream_changed(&self, path: &str, signal: &TailSignal) {
        let change = self.plan_stream_change(path, signal);
        for id in change.to_link {
            let (this, path, at) = (self.clone(), path.to_owned(), change.at.clone());
            tokio::spawn(async move { this.link_discovered(&id, &path, &at).await });
        }
        for id in change.to_run {
            if lock(&self.inner.poked).insert(id.clone()) {
                let this = self.clone();
                tokio::spawn(async move {
                    lock(&this.inner.poked).remove(&id);
                    if let Err(e) = this.run_due(&id).await {
                        tracing::warn!(subscription = %id, error = %e, "subscription run failed");
                    }
                });
            }
        }
    }

    /// [`Self::on_stream_changed`] for a host whose work must be finished
    /// when the call returns (a serverless invocation that is frozen once it
    /// answers): the same links and runs, awaited. The cache must hold every
    /// live subscription ([`Self::refresh`]) for new streams to be linked.
    pub async fn stream_changed(&self, path: &str, signal: &TailSignal) -> SubResult<()> {
        let change = self.plan_stream_change(path, signal);
        let mut first_error = None;
        for id in change.to_link {
            if let Err(e) = self.link_and_run(&id, path, &change.at).await {
                first_error.get_or_insert(e);
            }
        }
        for id in change.to_run {
            match self.run_due(&id).await {
                Ok(()) | Err(SubscriptionError::NotFound) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Which cached subscriptions a commit to `path` concerns.
    fn plan_stream_change(&self, path: &str, signal: &TailSignal) -> StreamChange {
        let at = Tail { incarnation: signal.incarnation.clone(), tail: 0 };
        let mut change = StreamChange { to_link: Vec::new(), to_run: Vec::new(), at };
        let cache = lock(&self.inner.cache);
        // Checked first: the usual process has no subscription, and this
        // runs on every commit.
        if cache.is_empty() || signal.deleted || ds_protocol::path::is_reserved(path) {
            return change;
        }
        for (id, c) in cache.iter() {
            let rec = &c.value;
            match rec.links.get(path) {
                // Also with a wake in flight: the transition ending it may
                // have read the tails before this commit, and the run (after
                // that transition, under the subscription's lock) sees the
                // data and wakes again.
                Some(link) if signal.tail > link.acked_for(&signal.incarnation) => {
                    change.to_run.push(id.clone());
                }
                Some(_) => {}
                None if rec.glob_matches(path) => change.to_link.push(id.clone()),
                None => {}
            }
        }
        change
    }

    /// Make the cache hold exactly the live subscriptions of the store's
    /// index: records not cached yet are read, deleted ones dropped. A host
    /// fed by the store's change stream calls it before matching commits,
    /// since subscriptions are created by other processes. One read of the
    /// index, plus one per subscription new to this process.
    pub async fn refresh(&self) -> SubResult<()> {
        let ids = store::read_index(self.store()).await?.map(|i| i.value.ids).unwrap_or_default();
        let missing: Vec<String> = {
            let mut cache = lock(&self.inner.cache);
            cache.retain(|id, _| ids.contains(id));
            ids.iter().filter(|id| !cache.contains_key(*id)).cloned().collect()
        };
        for id in missing {
            self.fetch(&id).await?;
        }
        Ok(())
    }

    /// The record of `id` was changed by another process (its change came
    /// through the store's change stream): read it again, then look at it
    /// ([`Self::run_due`]): that delivers a wake the change issued and
    /// arms the record's next time. A deleted subscription's time is
    /// cancelled.
    pub async fn record_changed(&self, id: &str) -> SubResult<()> {
        let guard = self.id_lock(id);
        let live = {
            let _held = guard.lock().await;
            self.fetch(id).await?.is_some_and(|s| !s.value.is_deleted())
        };
        if live {
            self.run_due(id).await
        } else {
            lock(&self.inner.cache).remove(id);
            self.disarm(id).await;
            Ok(())
        }
    }

    async fn link_discovered(&self, id: &str, path: &str, at: &Tail) {
        match self.link_and_run(id, path, at).await {
            Ok(()) | Err(SubscriptionError::NotFound) => {}
            Err(e) => tracing::warn!(subscription = %id, error = %e, "could not link a new stream"),
        }
    }

    /// Link `path` (matched by `id`'s pattern) at `at`, then run `id`.
    async fn link_and_run(&self, id: &str, path: &str, at: &Tail) -> SubResult<()> {
        let linked = self
            .transition(id, |rec, _, _, _| {
                if !rec.glob_matches(path) || rec.links.contains_key(path) {
                    return Ok(());
                }
                if rec.links.len() >= crate::MAX_LINKS {
                    tracing::warn!(subscription = %id, "a matching stream was not linked: the subscription links the most streams it may");
                    return Ok(());
                }
                rec.link(path, false, Some(at));
                Ok(())
            })
            .await;
        // The new link's tail is read by the next transition.
        match linked {
            Ok(_) => self.run_due(id).await,
            Err(SubscriptionError::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
