//! Append pipelining: the predicted state of a stream while commits to it are
//! in flight, so the next append can be planned (and submitted into the same
//! group commit) without waiting for the previous one to become durable.
//!
//! Safety rests on the commit precondition, not on this cache: an append
//! planned on a prediction carries `Expect::Version(predicted)`, which holds
//! only if every commit it was stacked on was applied first (the store
//! applies submissions in order). Outcomes that write nothing are never
//! answered from a prediction (`StreamService::mutate` re-plans them with
//! consistent reads), so nothing is acknowledged before it is durable.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::{ProducerState, StreamMeta};

/// One stream's prediction.
struct Prediction {
    meta: StreamMeta,
    producers: HashMap<String, ProducerState>,
    in_flight: usize,
    /// A stacked commit failed: later predictions may be wrong, so planning
    /// goes back to the store until the pipeline drains.
    poisoned: bool,
}

/// Predictions per stream path; an entry lives while commits are in flight.
#[derive(Default)]
pub(crate) struct Speculation {
    streams: Mutex<HashMap<Arc<str>, Prediction>>,
}

impl Speculation {
    /// The predicted meta of `path`, if a healthy prediction exists.
    pub fn meta(&self, path: &str) -> Option<StreamMeta> {
        let map = self.streams.lock().ok()?;
        map.get(path).filter(|p| !p.poisoned).map(|p| p.meta.clone())
    }

    /// The predicted state of one producer (`None`: ask the store).
    pub fn producer(&self, path: &str, incarnation: &str, id: &str) -> Option<ProducerState> {
        let map = self.streams.lock().ok()?;
        let p = map.get(path).filter(|p| !p.poisoned && *p.meta.incarnation == *incarnation)?;
        p.producers.get(id).copied()
    }

    /// Record a submitted (not yet durable) commit's resulting state. Takes
    /// it by value: appends hand over their prediction (no copy per append).
    pub fn submitted(&self, meta: StreamMeta, producer: Option<(String, ProducerState)>) {
        let Ok(mut map) = self.streams.lock() else {
            return;
        };
        if let Some(entry) = map.get_mut(&*meta.path) {
            if entry.meta.incarnation != meta.incarnation {
                entry.producers.clear();
            }
            entry.meta = meta;
            entry.in_flight += 1;
            if let Some((id, state)) = producer {
                entry.producers.insert(id, state);
            }
            return;
        }
        let producers = producer.into_iter().collect();
        map.insert(meta.path.clone(), Prediction { meta, producers, in_flight: 1, poisoned: false });
    }

    /// A submitted commit finished (`ok`: durable). The entry is dropped once
    /// nothing is in flight.
    pub fn finished(&self, path: &str, ok: bool) {
        let Ok(mut map) = self.streams.lock() else {
            return;
        };
        if let Some(p) = map.get_mut(path) {
            p.in_flight = p.in_flight.saturating_sub(1);
            p.poisoned |= !ok;
            if p.in_flight == 0 {
                map.remove(path);
            }
        }
    }
}
