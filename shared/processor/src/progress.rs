//! The two durable positions of a processor.
//!
//! One `{offset, state}` cursor used to mean two things: "my fold cache is
//! valid through E" and "all external work is acknowledged through E". They
//! are split here, so a fold change refolds without re-driving effects.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::incarnation::StreamIncarnation;

/// `{ reduction, processing }`; `processing` is absent for the inline
/// (reduction-only) case. Persisted invariant:
/// `reduction.reduced_through <= processing.acknowledged_through`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress<S> {
    pub reduction: Reduction<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processing: Option<Processing>,
}

/// The fold cache: `state` is the fold of every consumed event through
/// `reduced_through` under `reducer_version`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reduction<S> {
    pub reducer_version: String,
    pub reduced_through: u64,
    pub state: S,
}

/// The effect cursor: every event through `acknowledged_through` had its
/// blocking work succeed under `cursor_revision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Processing {
    pub acknowledged_through: u64,
    pub cursor_revision: u64,
}

impl<S> Progress<S> {
    /// The ack; for a reduction-only record the fold position stands in.
    pub fn acknowledged_through(&self) -> u64 {
        self.processing.map_or(self.reduction.reduced_through, |p| p.acknowledged_through)
    }

    pub fn cursor_revision(&self) -> u64 {
        self.processing.map_or(0, |p| p.cursor_revision)
    }

    /// `reduced_through <= acknowledged_through`.
    pub fn holds_invariant(&self) -> bool {
        self.reduction.reduced_through <= self.acknowledged_through()
    }
}

/// What a [`crate::ProgressStore`] keeps for one (stream, processor): the
/// progress with its state as JSON, the stream incarnation it belongs to,
/// and the audit event of an operator control it still owes the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredProgress {
    pub stream_incarnation: StreamIncarnation,
    pub progress: Progress<Value>,
    /// Set by the commit that applies an operator control (or a re-reduce);
    /// the journal gets the event only after that commit landed, and a later
    /// commit drops it once appended. See [`PendingAudit`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_audit: Option<PendingAudit>,
}

/// An audit event owed by a landed change.
///
/// A control's change and its audit event live in two places (the progress
/// record and the journal), which no port lets the runner write atomically.
/// So the audit event travels *inside* the commit that makes the change: a
/// lost compare-and-swap stores nothing, hence no audit event ever exists
/// for a change that did not happen. After the commit lands the runner
/// appends the event under its deterministic key; if the process dies in
/// between, the record still carries it and whichever runner next loads the
/// record appends it (the key dedupes a repeat), so the event is late, never
/// lost and never doubled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingAudit {
    /// Idempotency key the event is appended under.
    pub key: String,
    pub event_type: String,
    pub payload: Value,
}
