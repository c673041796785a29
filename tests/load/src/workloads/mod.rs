//! The workloads. Each one measures and verifies: a workload returns an
//! error (reported as FAIL for its metrics) when any request failed or when a
//! stream does not hold exactly the acknowledged appends.

pub mod append;
pub mod create;
pub mod live;
pub mod memory;
pub mod read;

use crate::metrics::Metric;
use std::time::Duration;

/// Knobs shared by all workloads (the bench states them in the results).
#[derive(Clone, Debug)]
pub struct Params {
    /// P1: how long each append run lasts.
    pub p1_duration: Duration,
    /// P1: writers for the "concurrency 64" and "64 streams" runs.
    pub p1_concurrency: usize,
    /// P2: records of 100 B in the stream that is read back.
    pub p2_records: usize,
    /// P2: full catch-up reads per round (the round's value is their median).
    pub p2_reads: usize,
    /// P3: wake-ups per reader kind per round.
    pub p3_iterations: usize,
    /// P3: pause between the reader parking and the append being sent.
    pub p3_settle: Duration,
    /// P4: streams created.
    pub p4_streams: usize,
    /// P1: what each append carries (bytes, or a JSON event for the
    /// inline-processor benchmarks).
    pub p1_body: P1Body,
    /// P1: put before every stream name (e.g. `orders/`, so a processor
    /// bound to `orders/*` sees P1's streams).
    pub p1_stream_prefix: String,
    /// Unique prefix for stream names, so runs never collide.
    pub tag: String,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            p1_duration: Duration::from_secs(3),
            p1_concurrency: 64,
            p2_records: 10_000,
            p2_reads: 5,
            p3_iterations: 1_000,
            p3_settle: Duration::from_millis(2),
            p4_streams: 10_000,
            p1_body: P1Body::Binary,
            p1_stream_prefix: String::new(),
            tag: unique_tag(),
        }
    }
}

/// What P1's appends carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum P1Body {
    /// 100 B records on an `application/octet-stream` stream (the default,
    /// and what every other report measured).
    Binary,
    /// One 100 B JSON event `{"type":"order.placed","payload":{"id",
    /// "qty":1,...}}` per append on an `application/json` stream: what a
    /// JSON-schema gate bound to the stream accepts.
    JsonEvent,
    /// The same event with `"qty":0` (same length): what a schema asking
    /// for `qty >= 1` refuses. Every append must be answered 400 and the
    /// streams must stay empty.
    JsonInvalid,
    /// One State Protocol upsert per append on a JSON stream, row
    /// `k<seq mod keys>` with a 200 B value (`state_record`): what a `state`
    /// processor materializes and compacts. The check allows a compacted
    /// stream.
    StateUpsert { keys: u64 },
}

impl P1Body {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "binary" => Ok(Self::Binary),
            "json-event" => Ok(Self::JsonEvent),
            "json-invalid" => Ok(Self::JsonInvalid),
            "state-upsert" => Ok(Self::StateUpsert { keys: crate::state_record::DEFAULT_KEYS }),
            other => Err(format!("unknown P1 body {other:?} (binary, json-event, json-invalid, state-upsert)")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Binary => "binary",
            Self::JsonEvent => "json-event",
            Self::JsonInvalid => "json-invalid",
            Self::StateUpsert { .. } => "state-upsert",
        }
    }

    /// `self`, its upserts over `keys` keys if it is `state-upsert`.
    pub fn with_state_keys(self, keys: u64) -> Self {
        match self {
            Self::StateUpsert { .. } => Self::StateUpsert { keys },
            other => other,
        }
    }
}

/// One measured value, or why the measurement failed.
pub type Outcome = (Metric, Result<f64, String>);

/// Spreads one failure over every metric a sub-run would have produced.
pub fn fail_all(metrics: &[Metric], err: &anyhow::Error) -> Vec<Outcome> {
    metrics.iter().map(|&m| (m, Err(format!("{err:#}")))).collect()
}

/// A tag unique to this process and moment (stream names must not collide
/// with an earlier run against a long-lived server).
pub fn unique_tag() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("b{:x}{:x}", std::process::id(), nanos % 0xffff_ffff)
}
