//! Per-process map of per-stream contexts (the [`StreamRegistry`]): cached
//! meta, the in-process lock, the hub's watch channel and poller, and the
//! touch coalescing state. Idle-evicted and bounded in size.
//!
//! Invariant: there is at most one live [`StreamCtx`] per path in a process.
//! Every holder (lease, lock guard, hub subscription, poller) gets its `Arc`
//! from [`Registry::get`], and a context is only removed from the map while
//! the map is the sole owner (`Arc::strong_count == 1`), under the map lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use ds_core::{ProducerState, StreamHandle, StreamMeta, StreamRegistry, TailSignal};
use tokio::sync::{watch, Semaphore};

use crate::config::RegistryConfig;

/// What this process last knew about a stream's meta item.
#[derive(Debug, Clone)]
pub struct CachedMeta {
    pub meta: StreamMeta,
    /// The item's commit id (`cid`), to recognise our own applied commits.
    pub commit_id: Option<String>,
    /// When DynamoDB last confirmed this record (read, commit, lost race).
    pub confirmed_at: Instant,
    /// The latest consistent read of the meta ([`StreamCtx::begin_read`]'s
    /// number; 0: none) that vouches for this record: it was begun before
    /// this record was current, so the record was current at some moment
    /// after that read began. See [`StreamCtx::fresh_since`].
    pub vouched_by: u64,
}

impl CachedMeta {
    pub fn new(meta: StreamMeta, commit_id: Option<String>) -> Self {
        Self { meta, commit_id, confirmed_at: Instant::now(), vouched_by: 0 }
    }
}

/// [`StreamCtx::fresh_since`]'s answer.
#[derive(Debug)]
pub enum Freshness {
    /// The cached meta, current at a moment after the read named began.
    Current(Box<StreamMeta>),
    /// A read begun after it found no meta item.
    Absent,
    /// Nothing that recent; `tail`: the cached meta's, if any.
    Older { tail: Option<u64> },
}

/// One stream's per-process state.
pub struct StreamCtx {
    pub path: String,
    /// Id of the [`Registry`] that made it (handles of another substrate
    /// instance in the same process must not reach this one's cache).
    owner: u64,
    /// In-process exclusion for the critical section: an optimization that
    /// keeps this process's writers from racing each other (and from wasting
    /// transactions on lost races); correctness across processes comes from
    /// the commit's version condition.
    pub lock: Arc<Semaphore>,
    /// Commits waiting for the stream's next transaction ([`crate::group`]).
    pub group: crate::group_queue::Queue,
    cache: Mutex<Option<CachedMeta>>,
    /// Producer states, valid for the meta version they were read under.
    producers: Mutex<ProducerCache>,
    /// Records read or committed by this process, by `(incarnation, key)`
    /// (inline reductions, read by every append's plan). No meta tag is
    /// needed: a record's own write carries its revision as a condition, so
    /// a stale entry fails its commit, which re-plans from consistent reads.
    records: Mutex<HashMap<(String, String), ds_core::Record>>,
    /// Latest known tail signal; `None` until first observed.
    pub signal: watch::Sender<Option<TailSignal>>,
    pub subscribers: AtomicUsize,
    pub poller_running: Mutex<bool>,
    /// Consistent reads of the meta begun by this process (numbers them).
    reads_begun: AtomicU64,
    /// Bumped on every change of the cache, for [`Self::fresh_since`]'s waiters.
    cache_moves: watch::Sender<u64>,
    /// The read that found no meta item, while the cache says so (0: none).
    absent_vouched_by: AtomicU64,
    /// The expiry alarm this process armed: `(incarnation, at_ms)`.
    alarm: Mutex<Option<(String, i64)>>,
    /// Last `touched_at_ms` this process wrote (or saw committed).
    pub last_touch_written: AtomicI64,
    last_used: Mutex<Instant>,
}

/// The meta an entry of the producer cache is known valid at.
pub type MetaTag = (String, u64);

/// Producer states by `(incarnation, producer id)` (`None` = known absent),
/// valid at the meta `at`. Producer rows are written in the same
/// transaction as the meta, but read apart from it: a state read while the
/// cached meta was at version v says nothing about a meta this process later
/// learns some other way (a reader's fetch after another process's commit).
/// So when the cached meta moves to a version this process did not write
/// itself, the states are dropped; otherwise an append could pass the meta's
/// version condition with a stale producer state and apply a retry twice.
#[derive(Default)]
struct ProducerCache {
    at: Option<MetaTag>,
    states: HashMap<(String, String), Option<ProducerState>>,
}

impl ProducerCache {
    /// The cached meta is now `at`: keep the states only if they are valid there.
    fn follow(&mut self, at: Option<MetaTag>) {
        if self.at != at {
            self.states.clear();
            self.at = at;
        }
    }
}

fn tag_of(cached: &CachedMeta) -> MetaTag {
    (cached.meta.incarnation.to_string(), cached.meta.version)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these short, non-async locks cannot leave
    // the data half-updated (every critical section is a single assignment
    // or lookup), so a poisoned lock is still safe to use.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl StreamCtx {
    fn new(path: &str, owner: u64) -> Self {
        Self {
            path: path.to_owned(),
            owner,
            lock: Arc::new(Semaphore::new(1)),
            group: crate::group_queue::Queue::default(),
            cache: Mutex::new(None),
            producers: Mutex::new(ProducerCache::default()),
            records: Mutex::new(HashMap::new()),
            signal: watch::channel(None).0,
            subscribers: AtomicUsize::new(0),
            poller_running: Mutex::new(false),
            reads_begun: AtomicU64::new(0),
            cache_moves: watch::channel(0).0,
            absent_vouched_by: AtomicU64::new(0),
            alarm: Mutex::new(None),
            last_touch_written: AtomicI64::new(i64::MIN),
            last_used: Mutex::new(Instant::now()),
        }
    }

    pub fn cached(&self) -> Option<CachedMeta> {
        lock(&self.cache).clone()
    }

    /// Replace the cached meta (`None`: unknown / absent) and tell live
    /// readers about it.
    pub fn remember(&self, cached: Option<CachedMeta>) {
        if let Some(c) = &cached {
            self.last_touch_written.fetch_max(c.meta.touched_at_ms, Ordering::Relaxed);
        }
        let mut slot = lock(&self.cache);
        lock(&self.producers).follow(cached.as_ref().map(tag_of));
        *slot = cached;
        self.absent_vouched_by.store(0, Ordering::SeqCst);
        drop(slot);
        self.cache_moved();
    }

    /// Number a consistent read of the meta about to be sent (for
    /// [`Self::remember_read`]).
    pub fn begin_read(&self) -> u64 {
        self.reads_begun.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The number of the last read begun: a subscription notes it when
    /// created, and [`Self::fresh_since`] then only hands out what a later
    /// read vouches for.
    pub fn reads_begun(&self) -> u64 {
        self.reads_begun.load(Ordering::SeqCst)
    }

    /// Cache what the consistent read numbered `read` (from
    /// [`Self::begin_read`]) returned. Within an incarnation the cache never
    /// goes back: a read slower than a commit of ours returns the older
    /// version, and then the cached newer one — which became current after
    /// that read began — is what the read vouches for.
    pub fn remember_read(&self, found: Option<CachedMeta>, read: u64) {
        let mut slot = lock(&self.cache);
        let Some(mut found) = found else {
            lock(&self.producers).follow(None);
            *slot = None;
            self.absent_vouched_by.store(read, Ordering::SeqCst);
            drop(slot);
            self.cache_moved();
            return;
        };
        self.absent_vouched_by.store(0, Ordering::SeqCst);
        match slot.as_mut() {
            Some(old) if old.meta.incarnation == found.meta.incarnation && old.meta.version > found.meta.version => {
                old.vouched_by = old.vouched_by.max(read);
            }
            Some(old) if old.meta.incarnation == found.meta.incarnation && old.meta.version == found.meta.version => {
                found.vouched_by = old.vouched_by.max(read);
                self.last_touch_written.fetch_max(found.meta.touched_at_ms, Ordering::Relaxed);
                *old = found;
            }
            _ => {
                found.vouched_by = read;
                self.last_touch_written.fetch_max(found.meta.touched_at_ms, Ordering::Relaxed);
                lock(&self.producers).follow(Some(tag_of(&found)));
                *slot = Some(found);
            }
        }
        drop(slot);
        self.cache_moved();
    }

    fn cache_moved(&self) {
        self.cache_moves.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// What the cache knows for a reader that needs the state as of a
    /// moment after read number `since` began (see [`Freshness`]).
    pub fn fresh_since(&self, since: u64) -> Freshness {
        let slot = lock(&self.cache);
        match slot.as_ref() {
            Some(c) if c.vouched_by > since => Freshness::Current(Box::new(c.meta.clone())),
            Some(c) => Freshness::Older { tail: Some(c.meta.tail) },
            None if self.absent_vouched_by.load(Ordering::SeqCst) > since => Freshness::Absent,
            None => Freshness::Older { tail: None },
        }
    }

    /// Wakes on every change of the cache (see [`Self::fresh_since`]).
    pub fn watch_cache(&self) -> watch::Receiver<u64> {
        self.cache_moves.subscribe()
    }

    /// Cache the meta this process's own commit wrote over the one at
    /// `previous` (its version condition): the producer states valid there
    /// stay valid, with the commit's own producer writes added by the caller.
    pub fn remember_committed(&self, cached: CachedMeta, previous: Option<MetaTag>) {
        self.last_touch_written.fetch_max(cached.meta.touched_at_ms, Ordering::Relaxed);
        let mut slot = lock(&self.cache);
        let mut producers = lock(&self.producers);
        if producers.at.is_some() && producers.at == previous {
            producers.at = Some(tag_of(&cached));
        } else {
            producers.follow(Some(tag_of(&cached)));
        }
        // A read that vouched for the version this commit's condition named
        // vouches for the commit's too: it saw `previous` current, so ours
        // became current after it began.
        let mut cached = cached;
        cached.vouched_by = match slot.as_ref() {
            Some(old) if previous.as_ref() == Some(&tag_of(old)) => old.vouched_by,
            _ => 0,
        };
        *slot = Some(cached);
        self.absent_vouched_by.store(0, Ordering::SeqCst);
        drop(slot);
        drop(producers);
        self.cache_moved();
    }

    pub fn armed_alarm(&self) -> Option<(String, i64)> {
        lock(&self.alarm).clone()
    }

    pub fn set_armed_alarm(&self, alarm: Option<(String, i64)>) {
        *lock(&self.alarm) = alarm;
    }

    /// The cached state of one producer: `Some(None)` = known absent.
    pub fn cached_producer(&self, incarnation: &str, id: &str) -> Option<Option<ProducerState>> {
        lock(&self.producers).states.get(&(incarnation.to_owned(), id.to_owned())).copied()
    }

    /// The meta the producer cache is valid at now: read it before reading
    /// a producer row, and hand it to [`Self::remember_producer`].
    pub fn producer_tag(&self) -> Option<MetaTag> {
        lock(&self.producers).at.clone()
    }

    /// Cache a producer state read (or written) while the cache was valid at
    /// `at`; dropped if the cached meta has moved since (the row may be older
    /// than that meta).
    pub fn remember_producer(&self, at: &Option<MetaTag>, incarnation: &str, id: &str, state: Option<ProducerState>) {
        let mut cache = lock(&self.producers);
        if cache.at.is_none() || &cache.at != at {
            return;
        }
        // Bounded: a stream with very many producers just loses its cache.
        if cache.states.len() >= 1024 {
            cache.states.clear();
        }
        cache.states.insert((incarnation.to_owned(), id.to_owned()), state);
    }

    /// Forget every cached producer state (after a lost race or a delete).
    pub fn forget_producers(&self) {
        lock(&self.producers).states.clear();
        lock(&self.records).clear();
    }

    /// A record this process read or committed (see `records`).
    pub fn cached_record(&self, incarnation: &str, key: &str) -> Option<ds_core::Record> {
        lock(&self.records).get(&(incarnation.to_owned(), key.to_owned())).cloned()
    }

    /// Cache `record` as stored at `(incarnation, key)`, unless a newer
    /// revision is cached already.
    pub fn remember_record(&self, incarnation: &str, key: &str, record: ds_core::Record) {
        let mut records = lock(&self.records);
        // Bounded: a stream with very many records read for update (there
        // is one per inline processor) just loses its cache.
        if records.len() >= 64 {
            records.clear();
        }
        let slot = records.entry((incarnation.to_owned(), key.to_owned())).or_insert_with(|| record.clone());
        if slot.revision < record.revision {
            *slot = record;
        }
    }

    /// Our own touch was written: keep the cached copy in step.
    pub fn note_touch(&self, incarnation: &str, at_ms: i64) {
        if let Some(c) = lock(&self.cache).as_mut() {
            if *c.meta.incarnation == *incarnation {
                c.meta.touched_at_ms = c.meta.touched_at_ms.max(at_ms);
            }
        }
    }

    /// Publish a new tail signal to this process's waiters if it differs.
    pub fn signal(&self, sig: TailSignal) {
        self.signal.send_if_modified(|cur| {
            if cur.as_ref() == Some(&sig) {
                false
            } else {
                *cur = Some(sig);
                true
            }
        });
    }

    fn touch_used(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    fn idle_for(&self) -> std::time::Duration {
        lock(&self.last_used).elapsed()
    }
}

/// The map itself.
pub struct Registry {
    id: u64,
    cfg: RegistryConfig,
    map: Mutex<HashMap<String, Arc<StreamCtx>>>,
}

impl Registry {
    pub fn new(cfg: RegistryConfig) -> Self {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Self { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), cfg, map: Mutex::new(HashMap::new()) }
    }

    /// The context a handle carries when it is one of this registry's (no map
    /// lookup); otherwise the context for its path, created on demand.
    pub fn context_of(&self, stream: &StreamHandle) -> Arc<StreamCtx> {
        match stream.context::<StreamCtx>() {
            Some(ctx) if ctx.owner == self.id => {
                ctx.touch_used();
                ctx
            }
            _ => self.get(stream.path()),
        }
    }

    /// The context for `path`, created on demand.
    pub fn get(&self, path: &str) -> Arc<StreamCtx> {
        let mut map = lock(&self.map);
        if let Some(ctx) = map.get(path) {
            ctx.touch_used();
            return Arc::clone(ctx);
        }
        if map.len() >= self.cfg.max_contexts {
            Self::evict(&mut map, &self.cfg, true);
        }
        let ctx = Arc::new(StreamCtx::new(path, self.id));
        map.insert(path.to_owned(), Arc::clone(&ctx));
        ctx
    }

    /// The context a handle carries when it is one of this registry's,
    /// else the one for its path if the map has it (no creation).
    pub fn find(&self, stream: &StreamHandle) -> Option<Arc<StreamCtx>> {
        match stream.context::<StreamCtx>() {
            Some(ctx) if ctx.owner == self.id => Some(ctx),
            _ => self.peek(stream.path()),
        }
    }

    /// The context for `path` if one is live (no creation).
    pub fn peek(&self, path: &str) -> Option<Arc<StreamCtx>> {
        lock(&self.map).get(path).cloned()
    }

    /// Drop unused contexts: those idle past `idle_ttl`, or every unused one
    /// when `over_bound`.
    fn evict(map: &mut HashMap<String, Arc<StreamCtx>>, cfg: &RegistryConfig, over_bound: bool) {
        map.retain(|_, ctx| {
            let unused = Arc::strong_count(ctx) == 1;
            !(unused && (over_bound || ctx.idle_for() >= cfg.idle_ttl))
        });
    }

    /// Evict idle contexts now (also done on insert when over the bound).
    pub fn sweep(&self) {
        let mut map = lock(&self.map);
        let over_bound = map.len() > self.cfg.max_contexts;
        Self::evict(&mut map, &self.cfg, over_bound);
    }

    /// Contexts some holder besides the map refers to.
    pub fn in_use(&self) -> usize {
        lock(&self.map).values().filter(|c| Arc::strong_count(c) > 1).count()
    }

    pub fn len(&self) -> usize {
        lock(&self.map).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// [`StreamRegistry`] over [`Registry`]: a handle carries the context.
pub struct AwsRegistry {
    pub(crate) registry: Arc<Registry>,
}

impl StreamRegistry for AwsRegistry {
    fn enter(&self, path: &str) -> StreamHandle {
        self.registry.sweep_if_due();
        StreamHandle::new(path, self.registry.get(path))
    }

    /// Contexts in use (held by a lease, lock guard or subscription). Idle
    /// contexts kept as a warm cache (at most `max_contexts`, each for at most
    /// `idle_ttl`) are not live: they hold no resources beyond a cached meta.
    fn live_contexts(&self) -> usize {
        self.registry.sweep();
        self.registry.in_use()
    }
}

impl Registry {
    /// Cheap periodic sweep: at most one full pass per 256 entries.
    fn sweep_if_due(&self) {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        if COUNTER.fetch_add(1, Ordering::Relaxed).is_multiple_of(256) {
            self.sweep();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn contexts_are_shared_evicted_when_idle_and_bounded() {
        let reg = Registry::new(RegistryConfig { max_contexts: 2, idle_ttl: Duration::from_secs(3600) });
        let a1 = reg.get("a");
        let a2 = reg.get("a");
        assert!(Arc::ptr_eq(&a1, &a2), "one context per path");
        drop((a1, a2));
        let _b = reg.get("b");
        // Over the bound: unused "a" goes, in-use "b" stays.
        let _c = reg.get("c");
        assert!(reg.peek("a").is_none());
        assert!(reg.peek("b").is_some());
        assert_eq!(reg.len(), 2);

        let reg = Registry::new(RegistryConfig { max_contexts: 100, idle_ttl: Duration::ZERO });
        drop(reg.get("x"));
        let held = reg.get("y");
        reg.sweep();
        assert!(reg.peek("x").is_none(), "idle and unused: evicted");
        assert!(reg.peek("y").is_some(), "held: kept");
        drop(held);
    }

    #[test]
    fn handles_reach_their_own_registry_context_only() {
        let cfg = RegistryConfig { max_contexts: 100, idle_ttl: Duration::from_secs(3600) };
        let (mine, other) = (Registry::new(cfg.clone()), Registry::new(cfg));
        let handle = StreamHandle::new("a", mine.get("a"));
        assert!(Arc::ptr_eq(&mine.context_of(&handle), &mine.get("a")));
        assert!(!Arc::ptr_eq(&other.context_of(&handle), &mine.get("a")), "another instance looks up its own");
        assert!(Arc::ptr_eq(&mine.context_of(&StreamHandle::detached("a")), &mine.get("a")));
    }
}
