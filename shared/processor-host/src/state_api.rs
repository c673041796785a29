//! What the operator API serves of a materialized view (the built-in
//! `state` kind): the query, the answers, and the summary a status carries.
//! The types live here, beside [`crate::ProcessorOperator`], because the
//! HTTP layer speaks only this crate's seam; the view itself is the kind's
//! (`ds-processors-builtin`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Default and largest page of a state read, in rows.
pub const DEFAULT_STATE_LIMIT: usize = 100;
pub const MAX_STATE_LIMIT: usize = 1000;

/// Which part of the live state to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateQuery {
    /// Every type, in (type, key) order, after `after`, at most `limit` rows.
    Whole { after: Option<StateCursor>, limit: usize },
    /// One type, in key order, after the key `after`, at most `limit` rows.
    Type { entity_type: String, after: Option<String>, limit: usize },
    /// One row.
    Row { entity_type: String, key: String },
}

/// Where a page of rows ended: pass it back to read the next one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateCursor {
    #[serde(rename = "type")]
    pub entity_type: String,
    pub key: String,
}

/// A materialized view's size and what it refused to fold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaterializedStatus {
    /// The view holds the stream's messages through this offset.
    pub through: u64,
    /// Where the fold started: 0, or the earliest retained offset when
    /// retention had dropped the history before it.
    pub folded_from: u64,
    /// Live rows and their size (type + key + value JSON, per row): what
    /// compaction compares with the history's size.
    pub rows: u64,
    pub bytes: u64,
    /// Messages that are not State Protocol messages (never folded).
    pub malformed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_malformed: Option<MalformedAt>,
}

/// One refused message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MalformedAt {
    pub offset: u64,
    pub reason: String,
}

/// An answer to a [`StateQuery`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateAnswer {
    pub processor: String,
    pub stream: String,
    pub summary: MaterializedStatus,
    /// `Whole`: `{type: {key: value}}`; `Type`: `{key: value}`; `Row`: the value.
    pub state: Value,
    /// More rows follow (`Whole` and `Type`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<StateCursor>,
}

/// What a compaction of a `state` processor's stream did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CompactionOutcome {
    /// A snapshot was appended and the history before it trimmed.
    Compacted,
    /// An earlier compaction's snapshot was found untrimmed (a crash
    /// between its two steps) and the trim was finished; no new snapshot.
    Resumed,
    /// The history is within the configured multiple of the live state.
    NotNeeded,
}

/// The answer to a compaction request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionReport {
    pub processor: String,
    pub stream: String,
    pub outcome: CompactionOutcome,
    /// Where the snapshot starts: the stream's earliest retained offset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_bytes: Option<u64>,
    /// The live state it restates.
    pub rows: u64,
    pub live_bytes: u64,
    /// Bytes between the earliest retained offset and the tail, before and
    /// after: what a reader from `offset=-1` downloads.
    pub history_before: u64,
    pub history_after: u64,
    pub earliest_offset: u64,
    /// Snapshots built until one landed (the tail moved under the others).
    pub attempts: u32,
}
