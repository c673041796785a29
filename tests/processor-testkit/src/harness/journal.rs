//! In-memory journal.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;

use crate::lock;
use ds_processor::StreamIncarnation;
use ds_processor::{AppendOutcome, Journal, JournalError};
use ds_processor::{JournalEntry, OutgoingEvent};

#[derive(Debug)]
struct JournalState {
    incarnation: StreamIncarnation,
    entries: Vec<JournalEntry>,
    by_key: HashMap<String, u64>,
    stride: u64,
    failing_reads: u32,
    failing_appends: u32,
    reads: u64,
}

/// A JSON stream in memory. Positions advance by a fixed stride (1 by
/// default) to show that positions need not be dense.
///
/// One value is the backing storage: every `Arc` clone is another instance
/// over it, and the lock makes the incarnation check, the key lookup and the
/// write of an append one atomic step.
#[derive(Debug)]
pub struct MemoryJournal {
    state: Mutex<JournalState>,
}

impl MemoryJournal {
    pub fn new(incarnation: &str) -> Self {
        Self::with_stride(incarnation, 1)
    }

    pub fn with_stride(incarnation: &str, stride: u64) -> Self {
        Self {
            state: Mutex::new(JournalState {
                incarnation: StreamIncarnation::new(incarnation),
                entries: Vec::new(),
                by_key: HashMap::new(),
                stride: stride.max(1),
                failing_reads: 0,
                failing_appends: 0,
                reads: 0,
            }),
        }
    }

    fn push(state: &mut JournalState, data: Bytes) -> u64 {
        let position = state.entries.last().map_or(0, |e| e.position) + state.stride;
        state.entries.push(JournalEntry::new(position, data));
        position
    }

    /// Appends raw bytes (no idempotency key); returns the position.
    pub fn append_raw(&self, data: impl Into<Bytes>) -> u64 {
        Self::push(&mut lock(&self.state), data.into())
    }

    pub fn append_json(&self, value: &Value) -> u64 {
        self.append_raw(value.to_string())
    }

    pub fn append_event(&self, event_type: &str, payload: Value) -> u64 {
        self.append_raw(OutgoingEvent::new(event_type, payload).encode())
    }

    pub fn entries(&self) -> Vec<JournalEntry> {
        lock(&self.state).entries.clone()
    }

    pub fn entry(&self, position: u64) -> Option<JournalEntry> {
        lock(&self.state).entries.iter().find(|e| e.position == position).cloned()
    }

    /// Position of the last entry (0 when empty).
    pub fn head(&self) -> u64 {
        lock(&self.state).entries.last().map_or(0, |e| e.position)
    }

    /// `(position, parsed JSON)` of every entry whose `type` is `event_type`.
    pub fn events_of_type(&self, event_type: &str) -> Vec<(u64, Value)> {
        lock(&self.state)
            .entries
            .iter()
            .filter_map(|e| {
                let value: Value = serde_json::from_slice(&e.data).ok()?;
                (value.get("type")?.as_str()? == event_type).then_some((e.position, value))
            })
            .collect()
    }

    /// The current incarnation.
    pub fn current_incarnation(&self) -> StreamIncarnation {
        lock(&self.state).incarnation.clone()
    }

    /// The next `n` reads fail.
    pub fn fail_next_reads(&self, n: u32) {
        lock(&self.state).failing_reads = n;
    }

    /// The next `n` keyed appends (the runner's and the recovery
    /// adapter's) fail, writing nothing.
    pub fn fail_next_appends(&self, n: u32) {
        lock(&self.state).failing_appends = n;
    }

    pub fn reads(&self) -> u64 {
        lock(&self.state).reads
    }

    /// The stream was deleted and created again: empty, new incarnation.
    pub fn recreate(&self, incarnation: &str) {
        let mut s = lock(&self.state);
        s.incarnation = StreamIncarnation::new(incarnation);
        s.entries.clear();
        s.by_key.clear();
    }
}

fn check_incarnation(state: &JournalState, bound: &StreamIncarnation) -> Result<(), JournalError> {
    if state.incarnation == *bound {
        Ok(())
    } else {
        Err(JournalError::IncarnationChanged { expected: bound.clone(), current: Some(state.incarnation.clone()) })
    }
}

#[async_trait]
impl Journal for MemoryJournal {
    async fn incarnation(&self) -> Result<StreamIncarnation, JournalError> {
        Ok(lock(&self.state).incarnation.clone())
    }

    async fn read_after(
        &self,
        incarnation: &StreamIncarnation,
        after: u64,
        limit: usize,
    ) -> Result<Vec<JournalEntry>, JournalError> {
        let mut s = lock(&self.state);
        s.reads += 1;
        if s.failing_reads > 0 {
            s.failing_reads -= 1;
            return Err(JournalError::Unavailable("injected read failure".into()));
        }
        check_incarnation(&s, incarnation)?;
        let start = s.entries.partition_point(|e| e.position <= after);
        Ok(s.entries[start..].iter().take(limit).cloned().collect())
    }

    async fn append(
        &self,
        incarnation: &StreamIncarnation,
        data: Bytes,
        idempotency_key: &str,
    ) -> Result<AppendOutcome, JournalError> {
        let mut s = lock(&self.state);
        if s.failing_appends > 0 {
            s.failing_appends -= 1;
            return Err(JournalError::Unavailable("injected append failure".into()));
        }
        check_incarnation(&s, incarnation)?;
        if let Some(&position) = s.by_key.get(idempotency_key) {
            return Ok(AppendOutcome { position, deduplicated: true });
        }
        let position = Self::push(&mut s, data);
        s.by_key.insert(idempotency_key.to_owned(), position);
        Ok(AppendOutcome { position, deduplicated: false })
    }
}
