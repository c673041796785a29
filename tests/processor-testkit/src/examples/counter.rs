//! A pure fold: implements only `reduce`.

use serde::{Deserialize, Serialize};

use ds_processor::{Contract, Envelope, Processor};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", content = "payload")]
pub enum CounterEvent {
    #[serde(rename = "counter/incremented")]
    Incremented { by: i64 },
    #[serde(rename = "counter/reset")]
    Reset,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterState {
    pub value: i64,
    pub changes: u64,
}

/// Counts `counter/incremented` and `counter/reset`.
#[derive(Debug, Clone)]
pub struct Counter {
    contract: Contract,
}

impl Counter {
    pub fn new() -> Self {
        Self::with_version("1")
    }

    /// Same fold under another reducer version (triggers a re-reduce).
    pub fn with_version(version: &str) -> Self {
        Self {
            contract: Contract::for_events::<CounterEvent>("counter", version)
                .expect("CounterEvent is an enum tagged by `type`"),
        }
    }
}

impl Default for Counter {
    fn default() -> Self {
        Self::new()
    }
}

impl Processor for Counter {
    type State = CounterState;
    type Event = CounterEvent;

    fn contract(&self) -> &Contract {
        &self.contract
    }

    fn initial_state(&self) -> CounterState {
        CounterState::default()
    }

    fn reduce(&self, state: CounterState, event: &Envelope<CounterEvent>) -> CounterState {
        match event.event {
            CounterEvent::Incremented { by } => CounterState { value: state.value + by, changes: state.changes + 1 },
            CounterEvent::Reset => CounterState { value: 0, changes: state.changes + 1 },
        }
    }
}
