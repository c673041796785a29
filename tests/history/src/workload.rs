//! The clients of a campaign: each runs a random mix of operations on a few
//! stream slots, one operation at a time, until the history holds enough.
//!
//! A slot is one stream at a time: after `rotate_after` appends a client
//! closes it and the slot moves to a fresh stream, so closes happen all
//! along and streams stay small. Appends are plain (never retried: each is
//! at most once) or from an idempotent producer per client and slot
//! (retried with the same epoch and seq until answered; now and then a
//! restart with the next epoch, followed by a zombie append with the old
//! one, which must be fenced). Reads start where the client last read, at
//! a tail some client learnt, or at the beginning; long-polls and SSE wait
//! at the newest tail. Forks are taken at a tail some client learnt.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::client::{Client, Shared};
use crate::history::{Answer, Outcome, Pos, ProducerTag, ReadMode, RecordKey, Segment};

/// How a campaign's clients behave.
#[derive(Debug, Clone)]
pub struct Settings {
    pub clients: u32,
    /// Stop once the history holds this many operations.
    pub ops: usize,
    pub slots: u32,
    pub rotate_after: u64,
    /// Streams are `{prefix}/s{slot}g{generation}` and `{prefix}/fork{n}`.
    pub prefix: String,
    pub seed: u64,
}

/// Weights of the operations a client picks.
const MIX: [(Pick, u32); 8] = [
    (Pick::Append, 26),
    (Pick::Producer, 26),
    (Pick::CatchUp, 16),
    (Pick::LongPoll, 8),
    (Pick::Sse, 3),
    (Pick::Head, 11),
    (Pick::Fork, 1),
    (Pick::Restart, 2),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pick {
    Append,
    Producer,
    CatchUp,
    LongPoll,
    Sse,
    Head,
    Fork,
    Restart,
}

struct Slot {
    generation: u32,
    path: String,
    created: bool,
    appends: u64,
    /// Tails some client learnt (record boundaries), newest last.
    tails: Vec<Pos>,
}

impl Slot {
    fn learn(&mut self, tail: Pos) {
        if self.tails.last() != Some(&tail) {
            self.tails.push(tail);
            if self.tails.len() > 64 {
                self.tails.remove(0);
            }
        }
    }
}

/// What all clients share besides the transport.
pub struct Streams {
    settings: Settings,
    slots: Vec<Mutex<Slot>>,
    writers: AtomicU32,
    forks: AtomicU64,
    pub stop: AtomicBool,
}

impl Streams {
    pub fn new(settings: Settings) -> Self {
        let slots = (0..settings.slots)
            .map(|s| {
                Mutex::new(Slot {
                    generation: 0,
                    path: format!("{}/s{s}g0", settings.prefix),
                    created: false,
                    appends: 0,
                    tails: vec![0],
                })
            })
            .collect();
        Self { settings, slots, writers: AtomicU32::new(1), forks: AtomicU64::new(0), stop: AtomicBool::new(false) }
    }

    fn slot(&self, i: usize) -> std::sync::MutexGuard<'_, Slot> {
        self.slots[i].lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn writer(&self) -> u32 {
        self.writers.fetch_add(1, SeqCst)
    }
}

/// A client's idempotent producer on one slot's current stream.
struct Producer {
    writer: u32,
    generation: u32,
    epoch: u64,
    seq: u64,
    /// The batch sent and not yet answered, retried as is.
    pending: Option<RecordKey>,
    /// The epoch a restart left behind, for one zombie append.
    zombie_epoch: Option<(u64, u64)>,
}

struct Worker {
    client: Client,
    streams: Arc<Streams>,
    rng: StdRng,
    plain: u32,
    counters: HashMap<u32, u64>,
    producers: HashMap<usize, Producer>,
    /// Where this client's sequential reading of a slot is: (generation, pos).
    cursors: HashMap<usize, (u32, Pos)>,
}

/// Run `settings.clients` clients until the history holds `settings.ops`
/// operations (or `streams.stop` is set).
pub async fn run(shared: Arc<Shared>, streams: Arc<Streams>) {
    let mut tasks = Vec::new();
    for c in 0..streams.settings.clients {
        let plain = streams.writer();
        let mut w = Worker {
            client: Client { id: c, shared: Arc::clone(&shared) },
            streams: Arc::clone(&streams),
            rng: StdRng::seed_from_u64(streams.settings.seed ^ (u64::from(c) << 32)),
            plain,
            counters: HashMap::new(),
            producers: HashMap::new(),
            cursors: HashMap::new(),
        };
        tasks.push(tokio::spawn(async move { w.run().await }));
    }
    for t in tasks {
        t.await.expect("a client task panicked");
    }
}

fn pick(rng: &mut StdRng) -> Pick {
    let total: u32 = MIX.iter().map(|(_, w)| w).sum();
    let mut n = rng.gen_range(0..total);
    for (p, w) in MIX {
        if n < w {
            return p;
        }
        n -= w;
    }
    Pick::Head
}

impl Worker {
    fn next_key(&mut self, writer: u32) -> RecordKey {
        let seq = self.counters.entry(writer).or_default();
        *seq += 1;
        RecordKey { writer, seq: *seq - 1 }
    }

    fn done(&self) -> bool {
        self.streams.stop.load(SeqCst) || self.client.shared.recorder.len() >= self.streams.settings.ops
    }

    async fn run(&mut self) {
        while !self.done() {
            let slot = self.rng.gen_range(0..self.streams.slots.len());
            let (generation, path, created, rotate) = {
                let s = self.streams.slot(slot);
                (s.generation, s.path.clone(), s.created, s.appends >= self.streams.settings.rotate_after)
            };
            if !created {
                if let Outcome::Ok(_) = self.client.create(&path).await {
                    let mut s = self.streams.slot(slot);
                    if s.generation == generation {
                        s.created = true;
                    }
                }
                continue;
            }
            if rotate {
                self.rotate(slot, generation, &path).await;
                continue;
            }
            let outcome = match pick(&mut self.rng) {
                Pick::Append => {
                    let key = self.next_key(self.plain);
                    self.client.append(&path, key, None, false).await
                }
                Pick::Producer => self.produce(slot, generation, &path).await,
                Pick::Restart => self.restart(slot, generation, &path).await,
                Pick::CatchUp => {
                    let from = self.read_from(slot, generation);
                    self.client.read(&path, from, ReadMode::CatchUp).await
                }
                Pick::LongPoll | Pick::Sse => {
                    let from = self.newest_tail(slot);
                    let mode = if self.rng.gen_bool(0.25) { ReadMode::Sse } else { ReadMode::LongPoll };
                    self.client.read(&path, from, mode).await
                }
                Pick::Head => self.client.head(&path).await,
                Pick::Fork => self.fork(slot, &path).await,
            };
            self.learn(slot, generation, &outcome);
            if let Outcome::Unknown(_) = outcome {
                // The server is down or cut off: do not spin through the budget.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// Close the slot's stream and move the slot to a fresh one.
    async fn rotate(&mut self, slot: usize, generation: u32, path: &str) {
        {
            let mut s = self.streams.slot(slot);
            if s.generation != generation {
                return; // another client rotated it
            }
            s.generation += 1;
            s.path = format!("{}/s{slot}g{}", self.streams.settings.prefix, s.generation);
            (s.created, s.appends, s.tails) = (false, 0, vec![0]);
        }
        self.client.close(path).await;
    }

    /// What an answer taught about the slot's stream.
    fn learn(&mut self, slot: usize, generation: u32, outcome: &Outcome) {
        let mut s = self.streams.slot(slot);
        if s.generation != generation {
            return;
        }
        match outcome {
            Outcome::Ok(Answer::Appended { next, .. }) => {
                s.appends += 1;
                s.learn(*next);
            }
            Outcome::Ok(Answer::Head { tail, .. }) => s.learn(*tail),
            Outcome::Ok(Answer::Read { segments }) => {
                if let Some(last) = segments.last() {
                    if last.up_to_date {
                        s.learn(last.next);
                    }
                    self.cursors.insert(slot, (generation, last.next));
                }
            }
            _ => {}
        }
    }

    fn newest_tail(&self, slot: usize) -> Pos {
        self.streams.slot(slot).tails.last().copied().unwrap_or(0)
    }

    fn read_from(&mut self, slot: usize, generation: u32) -> Pos {
        match self.cursors.get(&slot) {
            Some(&(g, pos)) if g == generation && self.rng.gen_bool(0.6) => pos,
            _ if self.rng.gen_bool(0.3) => 0,
            _ => {
                let s = self.streams.slot(slot);
                s.tails[self.rng.gen_range(0..s.tails.len())]
            }
        }
    }

    fn producer(&mut self, slot: usize, generation: u32) -> &mut Producer {
        let fresh = self.producers.get(&slot).is_none_or(|p| p.generation != generation);
        if fresh {
            let writer = self.producers.get(&slot).map_or_else(|| self.streams.writer(), |p| p.writer);
            let p = Producer { writer, generation, epoch: 0, seq: 0, pending: None, zombie_epoch: None };
            self.producers.insert(slot, p);
        }
        self.producers.get_mut(&slot).expect("just inserted")
    }

    /// The producer's next batch (or its pending one, again), retried a
    /// few times at once while unanswered.
    async fn produce(&mut self, slot: usize, generation: u32, path: &str) -> Outcome {
        let p = self.producer(slot, generation);
        let (writer, pending) = (p.writer, p.pending);
        let key = match pending {
            Some(k) => k,
            None => self.next_key(writer),
        };
        let p = self.producer(slot, generation);
        p.pending = Some(key);
        let tag = ProducerTag { epoch: p.epoch, seq: p.seq };
        let mut outcome = Outcome::Unknown("not sent".into());
        for attempt in 0..3u64 {
            outcome = self.client.append(path, key, Some(tag), false).await;
            let retry = match &outcome {
                Outcome::Unknown(_) => true,
                Outcome::Fail { status, .. } => *status >= 500,
                Outcome::Ok(_) => false,
            };
            if !retry || self.done() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20 * (attempt + 1))).await;
        }
        let p = self.producer(slot, generation);
        match &outcome {
            Outcome::Ok(_) => {
                (p.pending, p.seq) = (None, p.seq + 1);
            }
            Outcome::Fail { status, .. } if *status < 500 => {
                // Closed (or a broken promise the checker reports): this
                // producer is done with the stream; a new epoch goes on.
                (p.pending, p.epoch, p.seq) = (None, p.epoch + 1, 0);
            }
            _ => {}
        }
        outcome
    }

    /// A producer restart: the next epoch from seq 0; once that is
    /// acknowledged, one zombie append with the old epoch.
    async fn restart(&mut self, slot: usize, generation: u32, path: &str) -> Outcome {
        let p = self.producer(slot, generation);
        if let Some((epoch, seq)) = p.zombie_epoch.take() {
            let writer = p.writer;
            let key = self.next_key(writer);
            return self.client.append(path, key, Some(ProducerTag { epoch, seq }), true).await;
        }
        if p.pending.is_some() || p.seq == 0 {
            return self.produce(slot, generation, path).await;
        }
        let old = (p.epoch, p.seq);
        (p.epoch, p.seq) = (p.epoch + 1, 0);
        let outcome = self.produce(slot, generation, path).await;
        if outcome.is_ok_append() {
            // The old epoch, once more: a zombie now, or on a later pick.
            self.producer(slot, generation).zombie_epoch = Some(old);
            if self.rng.gen_bool(0.5) {
                return Box::pin(self.restart(slot, generation, path)).await;
            }
        }
        outcome
    }

    /// Fork the slot's stream at a tail some client learnt, append to the
    /// fork and read it whole.
    async fn fork(&mut self, slot: usize, path: &str) -> Outcome {
        let at = {
            let s = self.streams.slot(slot);
            s.tails[self.rng.gen_range(0..s.tails.len())]
        };
        let fork = format!("{}/fork{}", self.streams.settings.prefix, self.streams.forks.fetch_add(1, SeqCst));
        let outcome = self.client.fork(&fork, path, at).await;
        if let Outcome::Ok(_) = outcome {
            for _ in 0..2 {
                let key = self.next_key(self.plain);
                self.client.append(&fork, key, None, false).await;
            }
            let mut from = 0;
            for _ in 0..8 {
                match self.client.read(&fork, from, ReadMode::CatchUp).await {
                    Outcome::Ok(Answer::Read { segments }) => match segments.last() {
                        Some(Segment { up_to_date: false, next, .. }) => from = *next,
                        _ => break,
                    },
                    _ => break,
                }
            }
        }
        outcome
    }
}

impl Outcome {
    fn is_ok_append(&self) -> bool {
        matches!(self, Outcome::Ok(Answer::Appended { .. }))
    }
}
