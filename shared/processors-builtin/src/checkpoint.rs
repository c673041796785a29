//! `checkpoint = "…"`: how often a processor persists its progress (the
//! runner's [`CheckpointCadence`]), the same words on every host.
//!
//! | value                | checkpoint after…                                  |
//! |----------------------|----------------------------------------------------|
//! | `"every event"`      | each event                                         |
//! | `"every 100 events"` | each 100th completed event                         |
//! | `"every 500ms"`      | an event, when that long passed since the last one |
//! | `"every 64KiB"`      | an event, when that much journal completed since   |
//! | `"idle"`             | only when a scan reaches the head                  |
//! | `"batch end"`        | only when a delivered batch is done                |
//!
//! Every policy but `batch end` also checkpoints when a scan reaches the
//! head, and every one when the runner stops cleanly (a host's deadline).
//! A checkpoint only ever writes what completed (`completed_through`), so a
//! thinner cadence can only replay more after a crash, never skip: the
//! replayed events' effects carry the same idempotency keys as before.

use std::sync::Arc;

use ds_processor::{Adapters, CheckpointCadence, RunnerConfig, RunnerError};
use ds_processor_host::{HostedRunner, ProcessorSpec};
use futures::future::BoxFuture;

/// What the value may be, for messages.
const EXPECTED: &str =
    "expected \"every event\", \"every N events\", \"every <duration>\" (500ms, 2s), \"every <size>\" (64KiB), \"idle\" or \"batch end\"";

/// Parses a `checkpoint` value (see the module docs).
pub fn parse_checkpoint(text: &str) -> Result<CheckpointCadence, String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let bad = |why: &str| format!("{text:?} {why}; {EXPECTED}");
    match words.as_slice() {
        ["every", "event"] => Ok(CheckpointCadence::EveryEvent),
        ["idle"] => Ok(CheckpointCadence::Idle),
        ["batch", "end"] => Ok(CheckpointCadence::BatchEnd),
        ["every", n, "events" | "event"] => match n.parse::<u32>() {
            Ok(0) | Err(_) => Err(bad("is not a count of at least 1 event")),
            Ok(1) => Ok(CheckpointCadence::EveryEvent),
            Ok(n) => Ok(CheckpointCadence::EveryN(n)),
        },
        ["every", amount] if amount.chars().all(|c| c.is_ascii_digit()) => Err(bad("has no unit")),
        ["every", amount] => {
            if let Ok(d) = ds_config::parse_duration(amount) {
                let millis = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
                return if millis == 0 {
                    Err(bad("is no time at all"))
                } else {
                    Ok(CheckpointCadence::Interval { millis })
                };
            }
            match ds_config::parse_size(amount) {
                Ok(0) => Err(bad("is no size at all")),
                Ok(bytes) => Ok(CheckpointCadence::EveryBytes(bytes)),
                Err(_) => Err(bad("is neither a duration nor a size")),
            }
        }
        _ => Err(bad("is not a checkpoint cadence")),
    }
}

/// A spec whose runners use `cadence` whatever the host's default.
struct Checkpointed {
    inner: Arc<dyn ProcessorSpec>,
    cadence: CheckpointCadence,
}

/// `spec` with its runners checkpointing at `cadence`.
pub fn with_cadence(spec: Arc<dyn ProcessorSpec>, cadence: CheckpointCadence) -> Arc<dyn ProcessorSpec> {
    Arc::new(Checkpointed { inner: spec, cadence })
}

impl ProcessorSpec for Checkpointed {
    fn slug(&self) -> &str {
        self.inner.slug()
    }

    fn open(
        &self,
        adapters: Adapters,
        config: RunnerConfig,
    ) -> BoxFuture<'_, Result<Arc<dyn HostedRunner>, RunnerError>> {
        self.inner.open(adapters, RunnerConfig { cadence: self.cadence, ..config })
    }

    fn open_on<'a>(
        &'a self,
        stream: &str,
        adapters: Adapters,
        config: RunnerConfig,
    ) -> BoxFuture<'a, Result<Arc<dyn HostedRunner>, RunnerError>> {
        self.inner.open_on(stream, adapters, RunnerConfig { cadence: self.cadence, ..config })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_has_its_words() {
        for (text, want) in [
            ("every event", CheckpointCadence::EveryEvent),
            ("every 1 event", CheckpointCadence::EveryEvent),
            ("every 100 events", CheckpointCadence::EveryN(100)),
            ("  every   100  events ", CheckpointCadence::EveryN(100)),
            ("every 500ms", CheckpointCadence::Interval { millis: 500 }),
            ("every 2s", CheckpointCadence::Interval { millis: 2000 }),
            ("every 64KiB", CheckpointCadence::EveryBytes(65_536)),
            ("every 1000B", CheckpointCadence::EveryBytes(1000)),
            ("idle", CheckpointCadence::Idle),
            ("batch end", CheckpointCadence::BatchEnd),
        ] {
            assert_eq!(parse_checkpoint(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_values_say_what_was_expected() {
        for text in ["every 0 events", "every -3 events", "every 0ms", "every 0B", "every 100", "sometimes", ""] {
            let e = parse_checkpoint(text).expect_err(text);
            assert!(e.starts_with(&format!("{text:?} ")) && e.contains("\"every N events\""), "{text}: {e}");
        }
    }
}
