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
/// progress with its state as JSON, and the stream incarnation it belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredProgress {
    pub stream_incarnation: StreamIncarnation,
    pub progress: Progress<Value>,
}
