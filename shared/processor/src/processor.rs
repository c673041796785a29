//! The processor contract authors implement.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::contract::Contract;
use crate::delivery::Delivery;
use crate::effects::Effects;
use crate::event::Envelope;

/// Refusal of an append by [`Processor::validate`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("append rejected: {reason}")]
pub struct Rejection {
    pub reason: String,
}

impl Rejection {
    pub fn new(reason: impl Into<String>) -> Self {
        Self { reason: reason.into() }
    }
}

/// Arguments of one [`Processor::process_event`] call.
#[derive(Debug)]
pub struct ProcessCall<'a, E, S> {
    /// `None` only for the one eventless caught-up call of a scan that had no
    /// consumed event; per-event logic guards on `Some`.
    pub event: Option<&'a Envelope<E>>,
    /// State before this event.
    pub previous_state: &'a S,
    /// State after reducing this event (equal to `previous_state` when
    /// eventless).
    pub state: &'a S,
    pub delivery: &'a Delivery,
}

/// A stream processor. Besides its [`contract`](Processor::contract) and
/// [`initial_state`](Processor::initial_state) every hook is optional: a pure
/// fold implements only [`reduce`](Processor::reduce); a stateless processor
/// only [`process_event`](Processor::process_event).
///
/// Invariants the runner relies on:
/// * `reduce` is pure and deterministic — it is re-run by refolds, rewinds
///   and crash recovery and must give the same state every time.
/// * `process_event` is synchronous and only registers effects; anything
///   observable outside the process goes through [`Effects`] with an
///   idempotency key from the [`Delivery`].
pub trait Processor: Send + Sync + 'static {
    /// Folded state. Persisted as JSON in the progress record.
    type State: Clone + Serialize + DeserializeOwned + Send + Sync + 'static;
    /// Decoded from `{"type", "payload"}` of each consumed entry: typically
    /// an enum with `#[serde(tag = "type", content = "payload")]` whose
    /// variant names are the event types (see [`Contract::for_events`]).
    type Event: DeserializeOwned + Send + Sync + 'static;

    fn contract(&self) -> &Contract;

    /// State before the first event (also what a re-reduce or rewind folds
    /// from). Required, so a state needs no `Default`: for one that has it,
    /// `Self::State::default()`.
    fn initial_state(&self) -> Self::State;

    /// Pre-commit gate, used by the inline runner only: an error refuses the
    /// append, leaving no trace.
    fn validate(&self, _event: &Envelope<Self::Event>, _state: &Self::State) -> Result<(), Rejection> {
        Ok(())
    }

    /// Pure fold; identity by default.
    fn reduce(&self, state: Self::State, _event: &Envelope<Self::Event>) -> Self::State {
        state
    }

    /// Reacts to an event (or to the eventless caught-up call) by registering
    /// effects. No-op by default.
    fn process_event(&self, _call: ProcessCall<'_, Self::Event, Self::State>, _effects: &mut Effects) {}
}
