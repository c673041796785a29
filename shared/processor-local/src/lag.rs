//! Lag as operators watch it locally: structured log lines at an interval,
//! and a per-processor summary for gauges (Prometheus on the local server).
//!
//! A stream's lag is its tail (as last published) minus the processor's
//! acknowledged cursor. Lines are per (stream, processor) only for lagging
//! streams, at most [`MAX_LINES`] per interval; the summary line covers all.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::host::Inner;

/// Most per-stream lag lines per interval.
pub const MAX_LINES: usize = 20;

/// One processor's lag over all its streams.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LagSummary {
    pub processor: String,
    /// Streams it runs on (with a runner open).
    pub streams: usize,
    /// Of those, streams with lag above 0.
    pub lagging: usize,
    /// The largest lag (stream offsets).
    pub max_lag: u64,
    /// The sum of the lags.
    pub total_lag: u64,
}

/// One (stream, processor) lag reading.
struct Reading {
    stream: String,
    processor: String,
    tail: u64,
    acknowledged: u64,
    reduced: u64,
    lag: u64,
    retry_count: u32,
}

fn readings(inner: &Inner) -> Vec<Reading> {
    let mut out = Vec::new();
    for (stream, slots) in inner.slots() {
        for slot in slots {
            let Some(runner) = slot.runner() else { continue };
            let state = runner.runtime_state();
            // A runner on a life that is over has processed none of the new one.
            let (tail, acknowledged, reduced) = match slot.tail.of_life(runner.incarnation()) {
                (tail, true) => {
                    (tail.max(state.highest_observed_position), state.acknowledged_through, state.reduced_through)
                }
                (tail, false) => (tail, 0, 0),
            };
            out.push(Reading {
                stream: stream.clone(),
                processor: slot.slug().to_owned(),
                tail,
                acknowledged,
                reduced,
                lag: tail.saturating_sub(acknowledged),
                retry_count: state.retry_count,
            });
        }
    }
    out
}

/// Per-processor lag now, sorted by processor.
pub(crate) fn summary(inner: &Inner) -> Vec<LagSummary> {
    let mut by: BTreeMap<String, LagSummary> = BTreeMap::new();
    if let Some(running) = inner.running.get() {
        for r in running.registry.registrations() {
            let slug = r.spec.slug().to_owned();
            by.insert(slug.clone(), LagSummary { processor: slug, ..LagSummary::default() });
        }
    }
    for r in readings(inner) {
        let s = by.entry(r.processor.clone()).or_default();
        s.processor = r.processor;
        s.streams += 1;
        s.lagging += usize::from(r.lag > 0);
        s.max_lag = s.max_lag.max(r.lag);
        s.total_lag = s.total_lag.saturating_add(r.lag);
    }
    by.into_values().collect()
}

/// Logs lag every `interval` until shutdown.
pub(crate) async fn report(inner: Arc<Inner>, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = inner.shutdown.cancelled() => return,
        }
        for r in readings(&inner).into_iter().filter(|r| r.lag > 0).take(MAX_LINES) {
            tracing::info!(
                target: "ds_processor_lag",
                stream = %r.stream,
                processor = %r.processor,
                tail = r.tail,
                acknowledged_through = r.acknowledged,
                reduced_through = r.reduced,
                lag = r.lag,
                retry_count = r.retry_count,
                "processor lag"
            );
        }
        for s in summary(&inner) {
            tracing::info!(
                target: "ds_processor_lag",
                processor = %s.processor,
                streams = s.streams,
                lagging = s.lagging,
                max_lag = s.max_lag,
                total_lag = s.total_lag,
                "processor lag summary"
            );
        }
    }
}
