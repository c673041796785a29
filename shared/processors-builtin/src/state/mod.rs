//! The `state` kind: materializes State Protocol streams (see [`fold`] for
//! the rules) and serves the live state through the operator API.
//!
//! ```toml
//! [[processor]]
//! kind = "state"
//! slug = "users"
//! streams = "state/**"
//! max_rows = 100000      # optional guards; past either the view is
//! max_bytes = 67108864   # dropped and reads answer 507, never truncated
//! compact_ratio = 10     # optional: compact a stream whose history is over
//!                        # 10x its live state (absent: only on request)
//! compact_min_bytes = 1048576  # never compact less history than this
//! compact_interval = "60s"     # how often bound streams are checked
//! ```
//!
//! Where the state lives: in the host's memory, one [`view`] per bound
//! stream, not in the runner's progress record. A progress record is one
//! store record of at most `ds_core::MAX_RECORD_BYTES` (256 KiB), and a
//! State Protocol stream's live state is easily larger (1,000 rows of 200 B
//! plus keys is already near it). A view is built by folding the stream
//! from its earliest retained offset the first time it is read, and is
//! brought up to the tail on every read after that (a read-through
//! follower: nothing is folded for streams nobody reads). Compaction will
//! keep that first fold cheap; the view exposes its rows and bytes for it.
//!
//! Compaction ([`compact`]): a snapshot of the live state is appended as
//! one message group after exactly the state it was built from, and the
//! stream's history before it is trimmed, so a new reader downloads the
//! live state once instead of every version of every row.
//!
//! The kind's runner consumes no events: it exists so the processor is
//! listed, shown and controlled like any other, with its lag; its reduction
//! is empty. It follows its streams at most every [`RUNNER_WAKE_DELAY`]
//! on the local server, not after every append. [`StateOperator`] adds the views to a host's operator.

mod compact;
pub mod fold;
mod operator;
mod snapshot;
mod view;

use std::sync::Arc;
use std::time::Duration;

use ds_processor::{Contract, Envelope, Processor};
use ds_processor_host::{ProcessorSpec, Spec};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use compact::{is_compaction_event, CompactionPass, CompactionSettings, MAX_SNAPSHOT_BYTES};
pub use fold::{Malformed, MalformedReport, Materialized};
pub use operator::StateOperator;
pub use snapshot::snapshot_messages;
pub use view::StateViews;

use crate::config::{ConfigError, ProcessorDef};

/// The kind's name in a processors file.
pub const KIND: &str = "state";
/// Defaults of `max_rows` and `max_bytes`.
pub const DEFAULT_MAX_ROWS: u64 = 100_000;
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// Options of one `state` processor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateSettings {
    pub max_rows: usize,
    pub max_bytes: usize,
    pub compaction: CompactionSettings,
}

/// How long the kind's runner lets appends gather before it follows them:
/// it only reports the processor's lag, and woken per append it cost a
/// writer at one request at a time a third of its appends/s (one drive and
/// one progress record per append; bench/results/2026-12-06-state-compaction.md).
/// The listed lag is at most this much behind.
pub const RUNNER_WAKE_DELAY: Duration = Duration::from_millis(250);

/// The runner's reduction: nothing (the view is in memory, see module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoReduction {}

/// The runner side of a `state` processor.
pub struct StateRunnerProcessor {
    contract: Contract,
}

impl Processor for StateRunnerProcessor {
    type State = NoReduction;
    type Event = Value;

    fn contract(&self) -> &Contract {
        &self.contract
    }

    fn initial_state(&self) -> NoReduction {
        NoReduction::default()
    }

    fn reduce(&self, state: NoReduction, _event: &Envelope<Value>) -> NoReduction {
        state
    }
}

/// Builds the hosted part of a `state` processor.
pub fn build(def: ProcessorDef) -> Result<Arc<dyn ProcessorSpec>, ConfigError> {
    let slug = def.slug.clone();
    settings(def)?;
    // Consumes nothing: State Protocol messages are not domain events
    // (control messages have no `type`), and the view reads them itself.
    Ok(Arc::new(
        Spec::new(move || StateRunnerProcessor {
            contract: Contract::new(slug.clone(), "state-1", Vec::<String>::new()),
        })
        .with_wake_delay(RUNNER_WAKE_DELAY),
    ))
}

/// The settings of a `state` processor's configuration.
pub fn settings(mut def: ProcessorDef) -> Result<StateSettings, ConfigError> {
    let max_rows = def.options.count("max_rows")?.unwrap_or(DEFAULT_MAX_ROWS);
    let max_bytes = def.options.count("max_bytes")?.unwrap_or(DEFAULT_MAX_BYTES);
    if max_rows == 0 || max_bytes == 0 {
        return Err(def.options.invalid("max_rows", "max_rows and max_bytes must be at least 1"));
    }
    let max_rows = usize::try_from(max_rows).map_err(|_| def.options.invalid("max_rows", "too large"))?;
    let max_bytes = usize::try_from(max_bytes).map_err(|_| def.options.invalid("max_bytes", "too large"))?;
    let ratio = def.options.count("compact_ratio")?;
    if ratio == Some(0) {
        return Err(def
            .options
            .invalid("compact_ratio", "must be at least 1 (leave it out to compact only on request)"));
    }
    let min_bytes = def.options.count("compact_min_bytes")?.unwrap_or(compact::DEFAULT_MIN_BYTES);
    let interval = match def.options.string("compact_interval")? {
        None => compact::DEFAULT_INTERVAL,
        Some(text) => ds_config::parse_duration(&text).ok().filter(|d| !d.is_zero()).ok_or_else(|| {
            def.options.invalid("compact_interval", format!("{text:?} is not a duration like \"60s\""))
        })?,
    };
    def.options.finish(&["max_rows", "max_bytes", "compact_ratio", "compact_min_bytes", "compact_interval"])?;
    let compaction = CompactionSettings { ratio, min_bytes, interval };
    Ok(StateSettings { max_rows, max_bytes, compaction })
}
