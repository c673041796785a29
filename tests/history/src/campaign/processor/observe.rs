//! The processor plane, observed from outside: the source streams and the
//! outbox's target read incrementally (append-only, so what was read stays
//! true), the processors' progress records read as they are committed.
//!
//! A sample takes one source stream and checks, for the cursor it reads:
//! every `order/placed` event at or before the outbox's acknowledged cursor
//! has its relay in the target (the cursor is never ahead of the effects);
//! the counter's and the outbox's states are exactly the fold of the events
//! through their reduced positions; no cursor moved back. The final check
//! adds: every event once in its source, every acknowledged append's events
//! present and every append's events all or none, every placed event relayed
//! exactly once and nothing else relayed.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::Duration;

use ds_core::StreamService;
use ds_processor::{ProgressStore, StoredProgress, StreamIncarnation};
use ds_processor_host::RecordProgressStore;
use serde_json::Value;

use super::writers::Written;
use super::{COUNTER, OUTBOX, TARGET};

/// A journal read so far.
#[derive(Default)]
struct Journal {
    incarnation: String,
    /// Position just past the last message read.
    read_to: u64,
    /// (position just past it, message).
    events: Vec<(u64, Value)>,
}

/// See the module docs.
pub struct Observer {
    service: StreamService,
    sources: BTreeMap<String, Journal>,
    target: Journal,
    /// Relays in the target by source and order, with how many times each
    /// (kept up as the target is read, not rebuilt per sample).
    relayed: HashMap<String, HashMap<String, u64>>,
    /// Target events counted into `relayed`.
    indexed: usize,
    cursors: HashMap<(String, &'static str), u64>,
    pub samples: u64,
    pub violations: Vec<String>,
}

/// Retry an operation the emulator's faults may fail; `None` if it kept failing.
async fn retry<T, E, F, Fut>(mut op: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    for attempt in 0..20u64 {
        if let Ok(v) = op().await {
            return Some(v);
        }
        tokio::time::sleep(Duration::from_millis(20 * attempt.min(10))).await;
    }
    None
}

fn id_of(event: &Value) -> &str {
    event["payload"]["id"].as_str().unwrap_or_default()
}

fn kind_of(event: &Value) -> &str {
    event["type"].as_str().unwrap_or_default()
}

/// Events of the protocol itself (`stream/…`, e.g. a processor's revival),
/// which processors do not consume.
fn is_domain(event: &Value) -> bool {
    !kind_of(event).starts_with("stream/")
}

impl Observer {
    pub fn new(service: StreamService, sources: &[String]) -> Self {
        Self {
            service,
            sources: sources.iter().map(|s| (s.clone(), Journal::default())).collect(),
            target: Journal::default(),
            relayed: HashMap::new(),
            indexed: 0,
            cursors: HashMap::new(),
            samples: 0,
            violations: Vec::new(),
        }
    }

    /// Every finding is kept (printed grouped); the bound only keeps a
    /// run gone badly wrong from exhausting memory.
    fn violation(&mut self, message: String) {
        if self.violations.len() < 1_000_000 {
            self.violations.push(message);
        }
    }

    /// Read `path` on to its tail (or at least past `until`).
    async fn extend(service: &StreamService, path: &str, journal: &mut Journal, until: Option<u64>) -> Option<u64> {
        let head = retry(|| service.head(path)).await?;
        if journal.incarnation.is_empty() {
            journal.incarnation = head.incarnation.to_string();
        }
        let goal = until.unwrap_or(head.tail).min(head.tail);
        while journal.read_to < goal {
            let page = retry(|| service.read_journal(path, &journal.incarnation, journal.read_to, 256 * 1024)).await?;
            let Some(&(last, _)) = page.entries.last() else { break };
            for (pos, data) in &page.entries {
                journal.events.push((*pos, serde_json::from_slice(data).unwrap_or(Value::Null)));
            }
            journal.read_to = last;
        }
        Some(head.tail)
    }

    async fn progress(&self, path: &str, slug: &str) -> Option<Option<StoredProgress>> {
        let journal = self.sources.get(path)?;
        let inc = StreamIncarnation::new(journal.incarnation.clone());
        let store = RecordProgressStore::new(self.service.clone(), path, slug);
        retry(|| ProgressStore::read(&store, &inc)).await
    }

    /// One sample of `path` (see the module docs); `false` when the
    /// emulator's faults kept it from reading.
    pub async fn sample(&mut self, path: &str) -> bool {
        let Some(journal) = self.sources.get_mut(path) else { return false };
        if Self::extend(&self.service, path, journal, Some(0)).await.is_none() {
            return false;
        }
        let (Some(outbox), Some(counter)) = (self.progress(path, OUTBOX).await, self.progress(path, COUNTER).await)
        else {
            return false;
        };
        if Self::extend(&self.service, TARGET, &mut self.target, None).await.is_none() {
            return false;
        }
        self.index_relays();
        let reduced = [&outbox, &counter].map(|p| p.as_ref().map_or(0, |p| p.progress.reduction.reduced_through));
        let acked = outbox.as_ref().map_or(0, |p| p.progress.acknowledged_through());
        let furthest = reduced.into_iter().chain([acked]).max();
        let journal = self.sources.get_mut(path).expect("known source");
        if Self::extend(&self.service, path, journal, furthest).await.is_none() {
            return false;
        }
        self.samples += 1;
        self.check(path, OUTBOX, outbox.as_ref());
        self.check(path, COUNTER, counter.as_ref());
        true
    }

    /// The checks of one progress record against what was read.
    fn check(&mut self, path: &str, slug: &'static str, stored: Option<&StoredProgress>) {
        let Some(stored) = stored else { return };
        let (acked, reduced) = (stored.progress.acknowledged_through(), stored.progress.reduction.reduced_through);
        let before = self.cursors.insert((path.to_owned(), slug), acked).unwrap_or(0);
        if acked < before {
            self.violation(format!("{slug} on {path}: cursor moved back from {before} to {acked}"));
        }
        let events = &self.sources[path].events;
        let through = |p: u64| events.iter().take_while(move |(pos, _)| *pos <= p).map(|(_, e)| e);
        let state = &stored.progress.reduction.state;
        let mut problems = Vec::new();
        if slug == OUTBOX {
            let missing = through(acked).find(|e| kind_of(e) == "order/placed" && self.relays_of(path, id_of(e)) == 0);
            if let Some(e) = missing {
                problems.push(format!("cursor {acked} ahead of effects: {} not relayed", id_of(e)));
            }
            let placed = through(reduced).filter(|e| kind_of(e) == "order/placed").count() as u64;
            if state["forwarded"].as_u64() != Some(placed) {
                problems.push(format!("state {state} through {reduced}, but {placed} placed orders there"));
            }
        } else {
            let mut by: BTreeMap<&str, u64> = BTreeMap::new();
            for e in through(reduced).filter(|e| is_domain(e)) {
                *by.entry(kind_of(e)).or_default() += 1;
            }
            let count: u64 = by.values().sum();
            let want = serde_json::json!({ "count": count, "by": by });
            if state["count"] != want["count"] || state["by"] != want["by"] {
                problems.push(format!("counter not exact: state {state} through {reduced}, the events there {want}"));
            }
        }
        for p in problems {
            self.violation(format!("{slug} on {path}: {p}"));
        }
    }

    /// Counts the target events read since the last call into `relayed`.
    fn index_relays(&mut self) {
        for (_, e) in &self.target.events[self.indexed..] {
            let (source, order) = (e["payload"]["source"].as_str(), e["payload"]["order"].as_str());
            let by_order = self.relayed.entry(source.unwrap_or_default().to_owned()).or_default();
            *by_order.entry(order.unwrap_or_default().to_owned()).or_default() += 1;
        }
        self.indexed = self.target.events.len();
    }

    /// How many times order `order` of `source` was relayed.
    fn relays_of(&self, source: &str, order: &str) -> u64 {
        self.relayed.get(source).and_then(|by| by.get(order)).copied().unwrap_or(0)
    }

    /// How many bytes of the sources the two processors have yet to
    /// acknowledge, in all; `None` when the faults kept it from reading.
    pub async fn lag(&self) -> Option<u64> {
        let mut lag = 0;
        for path in self.sources.keys() {
            let tail = retry(|| self.service.head(path)).await?.tail;
            for slug in [OUTBOX, COUNTER] {
                let at = self.progress(path, slug).await?.map_or(0, |p| p.progress.acknowledged_through());
                lag += tail.saturating_sub(at);
            }
        }
        Some(lag)
    }

    /// Whether both processors acknowledged every source's tail.
    pub async fn caught_up(&mut self) -> bool {
        let paths: Vec<String> = self.sources.keys().cloned().collect();
        for path in paths {
            let Some(tail) = retry(|| self.service.head(&path)).await.map(|h| h.tail) else { return false };
            for slug in [OUTBOX, COUNTER] {
                let at = self.progress(&path, slug).await.flatten().map(|p| p.progress.acknowledged_through());
                if at != Some(tail) {
                    return false;
                }
            }
        }
        true
    }

    /// The final check (see the module docs); returns the number of source
    /// events and of relays.
    pub async fn finish(&mut self, written: &[Written]) -> (u64, u64) {
        let paths: Vec<String> = self.sources.keys().cloned().collect();
        for path in &paths {
            if !self.sample(path).await {
                self.violation(format!("{path}: could not be read after the run"));
            }
        }
        let mut seen: HashMap<(&str, &str), u64> = HashMap::new();
        for (path, journal) in &self.sources {
            for (_, e) in journal.events.iter().filter(|(_, e)| is_domain(e)) {
                *seen.entry((path.as_str(), id_of(e))).or_default() += 1;
            }
        }
        let mut problems = Vec::new();
        for w in written {
            let present: Vec<u64> =
                w.ids.iter().map(|id| seen.get(&(w.path.as_str(), id.as_str())).copied().unwrap_or(0)).collect();
            if present.iter().any(|n| *n > 1) {
                problems.push(format!("{}: an event of append {:?} appears more than once", w.path, w.ids));
            } else if w.acked && present.contains(&0) {
                problems.push(format!("{}: acknowledged append {:?} lost", w.path, w.ids));
            } else if present.contains(&0) && present.contains(&1) {
                problems.push(format!("{}: append {:?} applied in part", w.path, w.ids));
            }
        }
        for (path, journal) in &self.sources {
            for (_, e) in journal.events.iter().filter(|(_, e)| kind_of(e) == "order/placed") {
                let n = self.relays_of(path, id_of(e));
                if n != 1 {
                    problems.push(format!("{path}: placed order {} relayed {n} times", id_of(e)));
                }
            }
        }
        for (source, by_order) in &self.relayed {
            for order in by_order.keys().filter(|o| !seen.contains_key(&(source.as_str(), o.as_str()))) {
                problems.push(format!("relay of {order} from {source}, which is no event there"));
            }
        }
        let events = seen.values().sum();
        let relayed = self.target.events.len() as u64;
        for p in problems {
            self.violation(p);
        }
        (events, relayed)
    }
}
