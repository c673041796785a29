//! Inline processors: validated and reduced inside an append's own commit.
//!
//! An inline processor is bound to streams by path (the [`InlineGate`] says
//! which). For a JSON stream it bound, every append is planned through it:
//! [`InlineProcessor::admit`] sees the append's messages and the stream's
//! reduction as of the append's base, and either refuses the append (the
//! service answers [`crate::ServiceError::InlineRejected`] and writes
//! nothing: no offset consumed, producer state unchanged, so a producer may
//! retry the same sequence number with a corrected event) or returns the
//! next reduction, which the append's commit writes as a record beside its
//! bytes. Memory writes both in one critical section, local in one log
//! batch, AWS in one `TransactWriteItems`: a reader never sees an append
//! without its reduction, nor a reduction ahead of the stream.
//!
//! `admit` is synchronous on purpose: nothing awaits between the verdict
//! and the submission of the commit it goes into, so the verdict is made on
//! exactly the state the commit's preconditions name. What may await (the
//! reduction's record read, a refold over history) happens before it.
//!
//! The reduction is persisted with the stream ([`InlineReduction`], the
//! record `inline/<slug>` of the stream incarnation), so a cold process
//! folds nothing older than the last committed append. A reduction of
//! another reducer version, or one behind the stream (the processor was
//! bound to a stream with history), is refolded once from the stream, page
//! by page (bounded memory), within [`RefoldLimits`]; a refold that fails
//! refuses appends with [`crate::ServiceError::InlineUnavailable`], naming
//! the processor, until an operator resets or skips it
//! ([`crate::StreamService::inline_control`]).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// One message of an append (or of the stream's history, in a refold).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlineMessage<'a> {
    /// The stream offset just past the message (a journal position).
    pub position: u64,
    /// The message as stored: minified JSON, no line terminator.
    pub data: &'a [u8],
}

/// Why an inline processor refused an append.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct InlineRefusal {
    /// The position the refused message would have had.
    pub position: u64,
    pub reason: String,
}

/// A processor that validates and reduces appends at the commit point.
/// Implementations are pure: same reduction and messages, same verdict.
pub trait InlineProcessor: Send + Sync + 'static {
    /// The processor's name (its record is `inline/<slug>`).
    fn slug(&self) -> &str;
    /// Names the fold: a stored reduction of another version is refolded.
    fn reducer_version(&self) -> &str;
    /// The state before the first message (JSON); `None` for a processor
    /// that keeps no state (validation only): no record is read or written
    /// for it, and it never refolds.
    fn initial_state(&self) -> Option<Bytes>;
    /// Validates one append's messages, all or none, and folds them into
    /// `state` (`None` for a stateless processor). Returns the next state
    /// (`None` when stateless).
    fn admit(&self, state: Option<&[u8]>, messages: &[InlineMessage<'_>]) -> Result<Option<Bytes>, InlineRefusal>;
    /// Folds committed messages into `state` without validating them (a
    /// refold). An error is a state that cannot be built (it is reported,
    /// and appends are refused until an operator acts).
    fn fold(&self, state: &[u8], messages: &[InlineMessage<'_>]) -> Result<Bytes, String>;
    /// An append it refused (for counters and logs; the service calls it
    /// once per refused request, after the consistent re-plan).
    fn rejected(&self, _path: &str, _refusal: &InlineRefusal) {}
}

/// Which inline processors bind which streams.
pub trait InlineGate: Send + Sync + 'static {
    /// The processors bound to the stream at `path`, in a fixed order
    /// (called on every append of a JSON stream while a gate is set: cheap).
    fn bound(&self, path: &str) -> Vec<std::sync::Arc<dyn InlineProcessor>>;
    /// The processor named `slug`, whatever it binds.
    fn processor(&self, slug: &str) -> Option<std::sync::Arc<dyn InlineProcessor>>;
    /// Bounds of a refold.
    fn refold_limits(&self) -> RefoldLimits {
        RefoldLimits::default()
    }
}

/// How much history a refold may fold before it gives up (the stream is
/// then refused appends until an operator resets or skips the processor,
/// rather than holding its lock for ever).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefoldLimits {
    /// Most stream bytes one refold reads.
    pub max_bytes: u64,
    /// Longest a refold may take.
    pub max_duration: std::time::Duration,
}

impl Default for RefoldLimits {
    fn default() -> Self {
        Self { max_bytes: 4 << 30, max_duration: std::time::Duration::from_secs(60) }
    }
}

/// The record key of processor `slug`'s reduction.
pub fn inline_record_key(slug: &str) -> String {
    format!("inline/{slug}")
}

/// What the record `inline/<slug>` of a stream incarnation holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineReduction {
    pub reducer_version: String,
    /// The stream offset the state is folded through (the tail of the
    /// append that wrote it).
    pub reduced_through: u64,
    /// The processor's state (JSON).
    pub state: Bytes,
    /// Set by an operator's skip: appends pass this processor unchecked
    /// (the state stays as it was) until a reset; the reason says why.
    pub skipped: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Encoded<'a> {
    reducer_version: &'a str,
    reduced_through: u64,
    state: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<&'a str>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Decoded<'a> {
    reducer_version: String,
    reduced_through: u64,
    #[serde(borrow)]
    state: &'a RawValue,
    #[serde(default)]
    skipped: Option<String>,
}

impl InlineReduction {
    /// The record value: `{"reducerVersion","reducedThrough","state","skipped"?}`.
    pub fn encode(&self) -> Result<Bytes, String> {
        let text = std::str::from_utf8(&self.state).map_err(|_| "state is not UTF-8".to_owned())?;
        let state: &RawValue = serde_json::from_str(text).map_err(|e| format!("state is not JSON: {e}"))?;
        let encoded = Encoded {
            reducer_version: &self.reducer_version,
            reduced_through: self.reduced_through,
            state,
            skipped: self.skipped.as_deref(),
        };
        serde_json::to_vec(&encoded).map(Bytes::from).map_err(|e| e.to_string())
    }

    pub fn decode(value: &[u8]) -> Result<Self, String> {
        let d: Decoded<'_> = serde_json::from_slice(value).map_err(|e| format!("not an inline reduction: {e}"))?;
        Ok(Self {
            reducer_version: d.reducer_version,
            reduced_through: d.reduced_through,
            state: Bytes::copy_from_slice(d.state.get().as_bytes()),
            skipped: d.skipped,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_reduction_reads_back_as_written() {
        let r = InlineReduction {
            reducer_version: "v1".into(),
            reduced_through: 42,
            state: Bytes::from_static(br#"{"count":3}"#),
            skipped: None,
        };
        let value = r.encode().unwrap();
        assert_eq!(InlineReduction::decode(&value).unwrap(), r);
        let skipped = InlineReduction { skipped: Some("operator".into()), ..r };
        assert_eq!(InlineReduction::decode(&skipped.encode().unwrap()).unwrap(), skipped);
    }

    #[test]
    fn a_state_that_is_not_json_is_refused_not_stored() {
        let r = InlineReduction {
            reducer_version: "v1".into(),
            reduced_through: 1,
            state: Bytes::from_static(b"{nope"),
            skipped: None,
        };
        assert!(r.encode().is_err());
        assert!(InlineReduction::decode(b"[1,2]").is_err());
    }
}
