//! The inline runner: validate and reduce inside the append commit.
//!
//! Synchronous and await-free, for the stream's own commit path: `admit`
//! either refuses an append without a trace, or assigns it the next position
//! and folds it. Progress is the reduction cache only (no processing cursor).
//! `process_event` runs after the commit with only the background door;
//! the host passes that work to its `waitUntil` equivalent.

use crate::contract::{Contract, ContractError};
use crate::delivery::{Delivery, Phase};
use crate::effects::{EffectFuture, Effects};
use crate::event::{decode, Decoded, Envelope, JournalEntry};
use crate::incarnation::StreamIncarnation;
use crate::processor::{ProcessCall, Processor, Rejection};
use crate::progress::{Progress, Reduction};

/// Why an append was refused. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdmitError {
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// A consumed event that does not decode; the pre-commit gate refuses it
    /// rather than commit something its own fold cannot read.
    #[error("malformed {event_type:?} event: {reason}")]
    Malformed { event_type: Option<String>, reason: String },
}

/// `process_event` registered blocking work, which the append path cannot
/// wait for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("inline processing cannot block the append path ({registered} blockers registered)")]
pub struct InlineBlockingUnsupported {
    pub registered: usize,
}

/// An admitted append, to hand back to [`InlineRunner::process_committed`]
/// once the append committed.
#[derive(Debug)]
pub struct Admission<E, S> {
    pub position: u64,
    /// `None` when the processor does not consume the event.
    pub envelope: Option<Envelope<E>>,
    previous_state: Option<S>,
}

/// Validates and folds one append's entries, all or none: the first
/// refusal is returned with the position of the entry it refused, and the
/// state is dropped (nothing of the append counts). Entries the processor
/// does not consume pass; a consumed entry that does not decode is refused
/// (the pre-commit gate does not commit what its own fold cannot read).
pub fn admit_entries<P: Processor>(
    processor: &P,
    mut state: P::State,
    entries: &[JournalEntry],
) -> Result<P::State, (u64, AdmitError)> {
    let contract = processor.contract();
    for entry in entries {
        match decode::<P::Event>(contract, entry) {
            Decoded::Deliverable(envelope) => {
                processor.validate(&envelope, &state).map_err(|r| (entry.position, r.into()))?;
                state = processor.reduce(state, &envelope);
            }
            Decoded::Malformed { event_type, reason } => {
                return Err((entry.position, AdmitError::Malformed { event_type, reason }))
            }
            Decoded::Unconsumed => {}
        }
    }
    Ok(state)
}

/// Folds committed entries without validating them (an inline refold):
/// what does not decode is passed over, as the hosted runner passes it.
pub fn fold_entries<P: Processor>(processor: &P, mut state: P::State, entries: &[JournalEntry]) -> P::State {
    let contract = processor.contract();
    for entry in entries {
        if let Decoded::Deliverable(envelope) = decode::<P::Event>(contract, entry) {
            state = processor.reduce(state, &envelope);
        }
    }
    state
}

/// Validate + reduce at the commit point.
pub struct InlineRunner<P: Processor> {
    processor: P,
    contract: Contract,
    incarnation: StreamIncarnation,
    head: u64,
    reduction: Reduction<P::State>,
}

impl<P: Processor> InlineRunner<P> {
    /// A runner for an empty stream. Fails if the contract disagrees with
    /// the processor's event type ([`Contract::check_events`]).
    pub fn new(processor: P, incarnation: StreamIncarnation) -> Result<Self, ContractError> {
        let contract = processor.contract().clone();
        contract.check_events::<P::Event>()?;
        let reduction = Reduction {
            reducer_version: contract.reducer_version.clone(),
            reduced_through: 0,
            state: processor.initial_state(),
        };
        Ok(Self { processor, contract, incarnation, head: 0, reduction })
    }

    /// A runner for a stream at `head`, from a cached reduction plus the
    /// entries after it. A cache of another reducer version is discarded and
    /// the whole history refolded (the inline re-reduce).
    pub fn resume<I>(
        processor: P,
        incarnation: StreamIncarnation,
        head: u64,
        cache: Option<Reduction<P::State>>,
        history: I,
    ) -> Result<Self, ContractError>
    where
        I: IntoIterator<Item = JournalEntry>,
    {
        let mut runner = Self::new(processor, incarnation)?;
        if let Some(cache) = cache {
            if cache.reducer_version == runner.contract.reducer_version && cache.reduced_through <= head {
                runner.reduction = cache;
            }
        }
        let Reduction { reducer_version, reduced_through: mut folded_through, mut state } = runner.reduction;
        for entry in history {
            // Each position folds once, in order: repeats and entries the
            // cache already covers are skipped.
            if entry.position <= folded_through || entry.position > head {
                continue;
            }
            if let Decoded::Deliverable(envelope) = decode::<P::Event>(&runner.contract, &entry) {
                state = runner.processor.reduce(state, &envelope);
            }
            folded_through = entry.position;
        }
        runner.reduction = Reduction { reducer_version, reduced_through: head, state };
        runner.head = head;
        Ok(runner)
    }

    /// Validates and folds one append. On `Err` nothing changed: no position
    /// consumed, state untouched, no `process_event`.
    pub fn admit(&mut self, data: &[u8]) -> Result<Admission<P::Event, P::State>, AdmitError> {
        let position = self.head + 1;
        let entry = JournalEntry::new(position, data.to_vec());
        let envelope = match decode::<P::Event>(&self.contract, &entry) {
            Decoded::Deliverable(envelope) => envelope,
            Decoded::Malformed { event_type, reason } => return Err(AdmitError::Malformed { event_type, reason }),
            Decoded::Unconsumed => {
                self.head = position;
                self.reduction.reduced_through = position;
                return Ok(Admission { position, envelope: None, previous_state: None });
            }
        };
        self.processor.validate(&envelope, &self.reduction.state)?;
        let previous = self.reduction.state.clone();
        self.reduction.state = self.processor.reduce(previous.clone(), &envelope);
        self.reduction.reduced_through = position;
        self.head = position;
        Ok(Admission { position, envelope: Some(envelope), previous_state: Some(previous) })
    }

    /// Post-commit: runs `process_event` for an admitted consumed event and
    /// returns its background work. Blocking work is refused.
    pub fn process_committed(
        &self,
        admission: Admission<P::Event, P::State>,
    ) -> Result<Vec<EffectFuture>, InlineBlockingUnsupported> {
        let (Some(envelope), Some(previous)) = (admission.envelope, admission.previous_state) else {
            return Ok(Vec::new());
        };
        let delivery = Delivery {
            phase: Phase::Live,
            highest_observed_position: self.head,
            caught_up: admission.position == self.head,
            cursor_revision: 0,
            stream_incarnation: self.incarnation.clone(),
            source_position: admission.position,
        };
        let mut effects = Effects::default();
        self.processor.process_event(
            ProcessCall {
                event: Some(&envelope),
                previous_state: &previous,
                state: &self.reduction.state,
                delivery: &delivery,
            },
            &mut effects,
        );
        let (blocking, background) = effects.into_parts();
        if !blocking.is_empty() {
            return Err(InlineBlockingUnsupported { registered: blocking.len() });
        }
        Ok(background)
    }

    pub fn state(&self) -> &P::State {
        &self.reduction.state
    }

    /// Last admitted position.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// The reduction-only progress record.
    pub fn progress(&self) -> Progress<P::State> {
        Progress { reduction: self.reduction.clone(), processing: None }
    }
}
