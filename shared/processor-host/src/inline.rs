//! Inline processors on the core's commit path: a typed [`Processor`] as the
//! core's [`ds_core::InlineProcessor`] ([`InlineAdapter`]), and the
//! registry of which ones bind which streams ([`InlineRegistry`], the
//! core's [`ds_core::InlineGate`]).
//!
//! An inline processor runs `validate` and `reduce` only, inside the append's
//! commit (see `ds_core::inline`); its state is the reduction the commit
//! writes beside the append, so it has no cursor, no effects and no runner.
//! Refusals are counted in process (the operator API shows them with the
//! last one's reason): a refused append writes nothing, on purpose not
//! even a counter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ds_core::{InlineGate, InlineMessage, InlineProcessor, InlineRefusal, RefoldLimits};
use ds_processor::{admit_entries, fold_entries, JournalEntry, Processor};
use ds_protocol::glob::Glob;
use serde::{Deserialize, Serialize};

/// A typed processor on the commit path. Stateful (its state is folded and
/// stored with every append it admits) unless made with
/// [`Self::stateless`], for processors that only validate.
pub struct InlineAdapter<P: Processor> {
    processor: P,
    stateful: bool,
}

impl<P: Processor> InlineAdapter<P> {
    pub fn new(processor: P) -> Self {
        Self { processor, stateful: true }
    }

    /// A validation-only processor: no reduction is read or written.
    pub fn stateless(processor: P) -> Self {
        Self { processor, stateful: false }
    }

    fn state(&self, bytes: &[u8]) -> Result<P::State, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("stored state does not decode: {e}"))
    }

    fn encode(state: &P::State) -> Result<Bytes, String> {
        serde_json::to_vec(state).map(Bytes::from).map_err(|e| format!("state does not encode: {e}"))
    }
}

fn entries(messages: &[InlineMessage<'_>]) -> Vec<JournalEntry> {
    messages.iter().map(|m| JournalEntry::new(m.position, Bytes::copy_from_slice(m.data))).collect()
}

impl<P: Processor> InlineProcessor for InlineAdapter<P> {
    fn slug(&self) -> &str {
        &self.processor.contract().slug
    }

    fn reducer_version(&self) -> &str {
        &self.processor.contract().reducer_version
    }

    fn initial_state(&self) -> Option<Bytes> {
        // A state that does not encode cannot be stored: the processor then
        // counts as stateless rather than refusing every append.
        self.stateful.then(|| Self::encode(&self.processor.initial_state()).ok()).flatten()
    }

    fn admit(&self, state: Option<&[u8]>, messages: &[InlineMessage<'_>]) -> Result<Option<Bytes>, InlineRefusal> {
        let at = messages.first().map_or(0, |m| m.position);
        let refusal = |position, reason: String| InlineRefusal { position, reason };
        let state = match state {
            Some(bytes) => self.state(bytes).map_err(|r| refusal(at, r))?,
            None => self.processor.initial_state(),
        };
        // A panicking validator refuses the append instead of failing the
        // request's task halfway through the commit path.
        let admitted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            admit_entries(&self.processor, state, &entries(messages))
        }))
        .map_err(|_| refusal(at, "the processor panicked".to_owned()))?;
        let next = admitted.map_err(|(position, e)| match e {
            // The processor's own words, without the "append rejected" the
            // service's error already says.
            ds_processor::AdmitError::Rejected(r) => refusal(position, r.reason),
            other => refusal(position, other.to_string()),
        })?;
        if !self.stateful {
            return Ok(None);
        }
        Self::encode(&next).map(Some).map_err(|r| refusal(at, r))
    }

    fn fold(&self, state: &[u8], messages: &[InlineMessage<'_>]) -> Result<Bytes, String> {
        let state = self.state(state)?;
        // A panicking reducer must not take the server with it: it fails the
        // refold, which waits for an operator.
        let folded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fold_entries(&self.processor, state, &entries(messages))
        }))
        .map_err(|_| "the reducer panicked".to_owned())?;
        Self::encode(&folded)
    }
}

/// The last refusal of an inline processor, as operators see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastRejection {
    pub stream: String,
    pub position: u64,
    pub reason: String,
}

/// An inline processor as a host registers it: the processor, its kind's
/// name, and what it refused since the process started.
pub struct InlineHosted {
    pub kind: String,
    pub pattern: Glob,
    processor: Arc<dyn InlineProcessor>,
    rejections: AtomicU64,
    last: Mutex<Option<LastRejection>>,
}

impl InlineHosted {
    pub fn processor(&self) -> &Arc<dyn InlineProcessor> {
        &self.processor
    }

    /// Appends refused since the process started.
    pub fn rejections(&self) -> u64 {
        self.rejections.load(Ordering::Relaxed)
    }

    pub fn last_rejection(&self) -> Option<LastRejection> {
        self.last.lock().ok().and_then(|l| l.clone())
    }
}

impl InlineProcessor for InlineHosted {
    fn slug(&self) -> &str {
        self.processor.slug()
    }
    fn reducer_version(&self) -> &str {
        self.processor.reducer_version()
    }
    fn initial_state(&self) -> Option<Bytes> {
        self.processor.initial_state()
    }
    fn admit(&self, state: Option<&[u8]>, messages: &[InlineMessage<'_>]) -> Result<Option<Bytes>, InlineRefusal> {
        self.processor.admit(state, messages)
    }
    fn fold(&self, state: &[u8], messages: &[InlineMessage<'_>]) -> Result<Bytes, String> {
        self.processor.fold(state, messages)
    }
    fn rejected(&self, path: &str, refusal: &InlineRefusal) {
        self.rejections.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last.lock() {
            *last = Some(LastRejection {
                stream: path.to_owned(),
                position: refusal.position,
                reason: refusal.reason.clone(),
            });
        }
    }
}

/// Why a registration was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InlineRegistryError {
    #[error("an inline processor named {0:?} is already registered")]
    Duplicate(String),
}

/// Which inline processors bind which streams, in registration order.
#[derive(Default)]
pub struct InlineRegistry {
    entries: Vec<Arc<InlineHosted>>,
    limits: RefoldLimits,
}

impl InlineRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// With other bounds for refolds than the default.
    pub fn with_refold_limits(mut self, limits: RefoldLimits) -> Self {
        self.limits = limits;
        self
    }

    pub fn register(
        &mut self,
        kind: &str,
        pattern: Glob,
        processor: Arc<dyn InlineProcessor>,
    ) -> Result<(), InlineRegistryError> {
        if self.entries.iter().any(|e| e.slug() == processor.slug()) {
            return Err(InlineRegistryError::Duplicate(processor.slug().to_owned()));
        }
        self.entries.push(Arc::new(InlineHosted {
            kind: kind.to_owned(),
            pattern,
            processor,
            rejections: AtomicU64::new(0),
            last: Mutex::new(None),
        }));
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every registration, in order.
    pub fn entries(&self) -> &[Arc<InlineHosted>] {
        &self.entries
    }

    /// The registration named `slug`.
    pub fn hosted(&self, slug: &str) -> Option<&Arc<InlineHosted>> {
        self.entries.iter().find(|e| e.slug() == slug)
    }
}

impl InlineGate for InlineRegistry {
    fn bound(&self, path: &str) -> Vec<Arc<dyn InlineProcessor>> {
        self.entries
            .iter()
            .filter(|e| e.pattern.matches(path))
            .map(|e| Arc::clone(e) as Arc<dyn InlineProcessor>)
            .collect()
    }

    fn processor(&self, slug: &str) -> Option<Arc<dyn InlineProcessor>> {
        self.hosted(slug).map(|e| Arc::clone(e) as Arc<dyn InlineProcessor>)
    }

    fn refold_limits(&self) -> RefoldLimits {
        self.limits
    }
}
