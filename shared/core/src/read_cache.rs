//! [`ReadCache`]: bytes a store recently answered a contiguous (catch-up)
//! read with, kept so the next read of the same range is served from memory
//! without assembling it again.
//!
//! Why (measured, `bench/results/`): a catch-up of 1 MB of small appends
//! costs the local store a blocking-pool hop, redb's range scan, the CRC-32
//! check of every row and a copy into one buffer (twice the CPU of the
//! log-structured peer, which serves it from the page cache); the memory
//! store copies its rows into one buffer under its lock. A stream read once
//! is likely to be read again (catch-up readers of the same stream, a reader
//! resuming after a disconnect).
//!
//! Correctness rests on one fact: the bytes at a position of a stream
//! incarnation never change once they are durable (appends only add past
//! the tail, and an incarnation id is a fresh UUID, so a re-created stream
//! never meets the old one's bytes). A store admits only bytes it would
//! serve to any reader. The one way they stop existing is a `DeleteStream`,
//! which wipes the incarnation: the store calls [`ReadCache::forget`] while
//! it holds the lock that publishes the wipe, so a reader that sees the wipe
//! finds nothing cached. A reader that looked before may still be reading
//! the old bytes (its read comes before the deletion's acknowledgement); it
//! took an [`Epoch`] first ([`ReadCache::prefix`]), and its insert is refused
//! when a wipe happened since, so wiped bytes never enter the cache.
//!
//! Admission is the store's choice and read-through only, so idle streams
//! cost nothing. A piece is the buffer the read answered with, so admitting
//! it copies nothing. Bounded by [`READ_CACHE_BYTES`]; pieces are evicted
//! oldest first.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

/// The most stream bytes the cache holds.
pub const READ_CACHE_BYTES: usize = 64 << 20;

/// The smallest read a store admits when it assembled it from memory: a
/// live reader's small tail reads stay out.
pub const ADMIT_ASSEMBLED: usize = 32 << 10;

/// The count of wipes seen when a reader began (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Epoch(u64);

/// The cached pieces of one stream path (of its latest read incarnation).
struct Cached {
    incarnation: Box<str>,
    /// Disjoint pieces by start position, with their admission numbers.
    pieces: BTreeMap<u64, (u64, Bytes)>,
}

#[derive(Default)]
struct Inner {
    streams: HashMap<Arc<str>, Cached>,
    /// Admission order, oldest first: `(path, start, admission number)`.
    /// May name pieces already gone (replaced or forgotten): eviction skips
    /// those, and the queue is compacted when they outnumber the live ones.
    order: VecDeque<(Arc<str>, u64, u64)>,
    admitted: u64,
    live: usize,
    bytes: usize,
    wipes: u64,
}

/// See the module doc. Shared by a store's readers.
pub struct ReadCache {
    budget: usize,
    inner: Mutex<Inner>,
    hits: AtomicU64,
}

impl Default for ReadCache {
    fn default() -> Self {
        Self::with_budget(READ_CACHE_BYTES)
    }
}

impl ReadCache {
    pub fn with_budget(budget: usize) -> Self {
        Self { budget, inner: Mutex::default(), hits: AtomicU64::new(0) }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    fn epoch(&self) -> Epoch {
        Epoch(self.inner().wipes)
    }

    /// Reads answered (at least in part) from the cache so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// The cached bytes of `(path, incarnation)` from `from` on, in order and
    /// without gaps, ending at or before `until`; empty when the cache does
    /// not hold `from`. The caller reads the rest from where they end, and
    /// passes the epoch (taken here, before it looks at what the store
    /// holds) to [`Self::insert`].
    pub fn prefix(&self, path: &str, incarnation: &str, from: u64, until: u64) -> (Vec<Bytes>, Epoch) {
        let mut out = Vec::new();
        let inner = self.inner();
        let epoch = Epoch(inner.wipes);
        let Some(cached) = inner.streams.get(path).filter(|c| &*c.incarnation == incarnation) else {
            return (out, epoch);
        };
        let mut pos = from;
        while pos < until {
            let Some((&start, (_, piece))) = cached.pieces.range(..=pos).next_back() else { break };
            let end = start + piece.len() as u64;
            if end <= pos {
                break;
            }
            // Both bounds lie within this piece, whose length is a usize.
            let (lo, hi) = ((pos - start) as usize, (end.min(until) - start) as usize);
            out.push(piece.slice(lo..hi));
            pos = end.min(until);
        }
        drop(inner);
        if !out.is_empty() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        (out, epoch)
    }

    /// Admit `data`, the bytes of `(path, incarnation)` at `start`, read by a
    /// reader that took `epoch` before looking at what the store holds.
    /// Refused when a wipe happened since, or when `data` is more than a
    /// quarter of the budget; replaces the pieces it overlaps.
    pub fn insert(&self, path: &str, incarnation: &str, start: u64, data: Bytes, epoch: Epoch) {
        if data.is_empty() || data.len() > self.budget / 4 {
            return;
        }
        let mut guard = self.inner();
        let inner = &mut *guard;
        if inner.wipes != epoch.0 {
            return;
        }
        let key = match inner.streams.get_key_value(path) {
            Some((key, _)) => Arc::clone(key),
            None => Arc::from(path),
        };
        let cached = inner
            .streams
            .entry(Arc::clone(&key))
            .or_insert_with(|| Cached { incarnation: incarnation.into(), pieces: BTreeMap::new() });
        if &*cached.incarnation != incarnation {
            // One incarnation per path (a re-created stream's reads replace
            // the old one's pieces).
            inner.live -= cached.pieces.len();
            inner.bytes -= cached.pieces.values().map(|(_, p)| p.len()).sum::<usize>();
            *cached = Cached { incarnation: incarnation.into(), pieces: BTreeMap::new() };
        }
        let end = start + data.len() as u64;
        let overlapping: Vec<u64> = cached
            .pieces
            .range(..end)
            .rev()
            .take_while(|(&s, (_, piece))| s + piece.len() as u64 > start)
            .map(|(&s, _)| s)
            .collect();
        for s in overlapping {
            if let Some((_, piece)) = cached.pieces.remove(&s) {
                inner.live -= 1;
                inner.bytes -= piece.len();
            }
        }
        inner.bytes += data.len();
        inner.live += 1;
        inner.admitted += 1;
        cached.pieces.insert(start, (inner.admitted, data));
        inner.order.push_back((key, start, inner.admitted));
        inner.evict(self.budget);
    }

    /// Drop what the cache holds of `path` (its incarnation was wiped) and
    /// refuse inserts by readers that began before.
    pub fn forget(&self, path: &str) {
        let mut inner = self.inner();
        inner.wipes += 1;
        if let Some(cached) = inner.streams.remove(path) {
            inner.live -= cached.pieces.len();
            inner.bytes -= cached.pieces.values().map(|(_, p)| p.len()).sum::<usize>();
        }
    }

    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        let inner = self.inner();
        (inner.bytes, inner.live)
    }
}

impl Inner {
    /// Evict the oldest pieces until within `budget`; compact the queue when
    /// it is mostly names of pieces already gone.
    fn evict(&mut self, budget: usize) {
        while self.bytes > budget {
            let Some((path, start, admitted)) = self.order.pop_front() else { break };
            let Some(cached) = self.streams.get_mut(&path) else { continue };
            if cached.pieces.get(&start).is_some_and(|(n, _)| *n == admitted) {
                let (_, piece) = cached.pieces.remove(&start).unwrap_or_default();
                self.live -= 1;
                self.bytes -= piece.len();
                if cached.pieces.is_empty() {
                    self.streams.remove(&path);
                }
            }
        }
        if self.order.len() > 2 * self.live + 64 {
            let streams = &self.streams;
            self.order.retain(|(path, start, admitted)| {
                streams.get(path).and_then(|c| c.pieces.get(start)).is_some_and(|(n, _)| n == admitted)
            });
        }
    }
}

#[cfg(test)]
mod tests;
