//! The counter: a materialized view that counts consumed events, in total
//! and grouped by the value at a JSON pointer (`group_by`), per stream. Its
//! state is what the operator API's `show` returns:
//! `{"count": 7, "by": {"placed": 5, "shipped": 2}, "other": 0}`.
//!
//! Group keys are the string itself for a string value and the JSON text
//! otherwise (`3`, `true`, `null` when the pointer finds nothing). At most
//! `max_groups` (default 1000) distinct keys are kept; later new keys are
//! counted in `other`, so the state (stored in the progress record) stays
//! bounded. The reducer version is derived from the options: changing
//! `group_by`, `max_groups` or `consumes` rebuilds every counter's state
//! from its stream (reduce only, no effects) on the next start.
//!
//! Options: `consumes` (default every domain event), `group_by` (a JSON
//! pointer into the input document `{"type", "payload", "metadata",
//! "stream", "position"}`, e.g. `"/payload/status"`), `max_groups`.

use std::collections::BTreeMap;
use std::sync::Arc;

use ds_processor::{Contract, Envelope, Processor, ANY_EVENT};
use ds_processor_host::{ProcessorSpec, Spec};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::config::{ConfigError, ProcessorDef};
use crate::template::{check_pointer, event_document};

/// Default of `max_groups`.
pub const DEFAULT_MAX_GROUPS: u64 = 1000;

/// Options of one counter (see module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterSettings {
    pub consumes: Vec<String>,
    pub group_by: Option<String>,
    pub max_groups: usize,
}

/// The counter's state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterState {
    /// Consumed events.
    pub count: u64,
    /// Per group key (only with `group_by`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by: BTreeMap<String, u64>,
    /// Events whose key arrived after `max_groups` keys were kept.
    #[serde(default)]
    pub other: u64,
}

/// The counter processor.
pub struct Counter {
    contract: Contract,
    settings: Arc<CounterSettings>,
}

impl Counter {
    pub fn new(slug: &str, settings: Arc<CounterSettings>) -> Self {
        let contract = Contract::new(slug, reducer_version(&settings), settings.consumes.iter().cloned());
        Self { contract, settings }
    }
}

/// `counter-1:` and a digest of the options the fold depends on.
fn reducer_version(s: &CounterSettings) -> String {
    let mut hasher = Sha256::new();
    for consumed in &s.consumes {
        hasher.update(consumed.as_bytes());
        hasher.update([0]);
    }
    hasher.update([1]);
    hasher.update(s.group_by.as_deref().unwrap_or("").as_bytes());
    hasher.update([1]);
    hasher.update(s.max_groups.to_be_bytes());
    format!("counter-1:{}", &hex::encode(hasher.finalize())[..12])
}

/// The group key of a value (see module docs).
fn group_key(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "null".to_owned(),
    }
}

impl Processor for Counter {
    type State = CounterState;
    type Event = Value;

    fn contract(&self) -> &Contract {
        &self.contract
    }

    fn initial_state(&self) -> CounterState {
        CounterState::default()
    }

    fn reduce(&self, mut state: CounterState, event: &Envelope<Value>) -> CounterState {
        state.count += 1;
        if let Some(pointer) = &self.settings.group_by {
            // The stream is not part of a fold's input: the state is per stream.
            let doc = event_document(&event.event, &event.metadata, None, event.position);
            let key = group_key(doc.pointer(pointer));
            let room = state.by.len() < self.settings.max_groups;
            match state.by.get_mut(&key) {
                Some(n) => *n += 1,
                None if room => {
                    state.by.insert(key, 1);
                }
                None => state.other += 1,
            }
        }
        state
    }
}

/// Builds a hosted counter from its configuration.
pub fn build(def: ProcessorDef) -> Result<Arc<dyn ProcessorSpec>, ConfigError> {
    let (slug, settings) = settings(def)?;
    Ok(Arc::new(Spec::new(move || Counter::new(&slug, Arc::clone(&settings)))))
}

/// Builds an inline counter (`inline = true`): counted inside each append's
/// commit, its state stored with the stream, so a cold start folds nothing.
pub fn build_inline(def: ProcessorDef) -> Result<Arc<dyn ds_core::InlineProcessor>, ConfigError> {
    let (slug, settings) = settings(def)?;
    Ok(Arc::new(ds_processor_host::InlineAdapter::new(Counter::new(&slug, settings))))
}

/// The slug and settings of a counter's configuration.
fn settings(mut def: ProcessorDef) -> Result<(String, Arc<CounterSettings>), ConfigError> {
    let consumes = def.options.strings("consumes")?.unwrap_or_else(|| vec![ANY_EVENT.to_owned()]);
    let group_by = def.options.string("group_by")?;
    let max_groups = def.options.count("max_groups")?.unwrap_or(DEFAULT_MAX_GROUPS);
    if consumes.is_empty() {
        return Err(def.options.invalid("consumes", "an empty list: the counter would count nothing"));
    }
    if let Some(p) = &group_by {
        check_pointer(p).map_err(|m| def.options.invalid("group_by", m))?;
    }
    let max_groups = usize::try_from(max_groups).map_err(|_| def.options.invalid("max_groups", "too large"))?;
    def.options.finish(&["consumes", "group_by", "max_groups"])?;
    Ok((def.slug.clone(), Arc::new(CounterSettings { consumes, group_by, max_groups })))
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map};

    use super::*;

    fn envelope(position: u64, status: Value) -> Envelope<Value> {
        Envelope {
            position,
            event_type: "order/placed".into(),
            event: json!({ "type": "order/placed", "payload": { "status": status } }),
            metadata: Map::new(),
        }
    }

    #[test]
    fn counts_by_group_and_keeps_at_most_max_groups() {
        let settings =
            CounterSettings { consumes: vec!["*".into()], group_by: Some("/payload/status".into()), max_groups: 2 };
        let counter = Counter::new("c", Arc::new(settings));
        let mut state = counter.initial_state();
        for (i, status) in [json!("new"), json!("new"), json!(3), json!("late")].into_iter().enumerate() {
            state = counter.reduce(state, &envelope(i as u64 + 1, status));
        }
        assert_eq!(state.count, 4);
        assert_eq!(state.by, BTreeMap::from([("new".to_owned(), 2), ("3".to_owned(), 1)]));
        assert_eq!(state.other, 1, "the third distinct key is counted in other");
        let missing = counter.reduce(CounterState::default(), &envelope(9, Value::Null));
        assert_eq!(missing.by.get("null"), Some(&1));
    }

    #[test]
    fn the_reducer_version_follows_the_options() {
        let a = CounterSettings { consumes: vec!["*".into()], group_by: Some("/payload/a".into()), max_groups: 10 };
        let b = CounterSettings { group_by: Some("/payload/b".into()), ..a.clone() };
        assert_eq!(reducer_version(&a), reducer_version(&a.clone()));
        assert_ne!(reducer_version(&a), reducer_version(&b));
        assert!(reducer_version(&a).starts_with("counter-1:"));
    }
}
