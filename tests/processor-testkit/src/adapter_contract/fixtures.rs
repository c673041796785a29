//! Records, fences and small helpers shared by the checks.

use bytes::Bytes;
use serde_json::json;

use ds_processor::StreamIncarnation;
use ds_processor::{Expectation, Fence};
use ds_processor::{Processing, Progress, Reduction, StoredProgress};

/// The processor slug the checks use (any slug must work).
pub(super) const SLUG: &str = "contract-probe";

/// The wall clock's epoch milliseconds, as alarm times count them.
pub(super) fn wall_ms() -> u64 {
    u64::try_from(ds_processor::Clock::system().now_ms()).unwrap_or(0)
}

/// A progress record; the state names its cursors so a mix-up shows.
pub(super) fn record(incarnation: &StreamIncarnation, revision: u64, ack: u64, reduced: u64) -> StoredProgress {
    StoredProgress {
        stream_incarnation: incarnation.clone(),
        progress: Progress {
            reduction: Reduction {
                reducer_version: "v1".into(),
                reduced_through: reduced,
                state: json!({ "revision": revision, "ack": ack, "reduced": reduced, "nested": { "list": [1, 2, 3] } }),
            },
            processing: Some(Processing { acknowledged_through: ack, cursor_revision: revision }),
        },
        pending_audit: None,
    }
}

pub(super) fn fence(incarnation: &StreamIncarnation, revision: u64, expect: Expectation) -> Fence {
    Fence { stream_incarnation: incarnation.clone(), cursor_revision: revision, expect }
}

pub(super) fn monotonic(incarnation: &StreamIncarnation, revision: u64) -> Fence {
    fence(incarnation, revision, Expectation::Monotonic)
}

/// A JSON event as the journal stores it.
pub(super) fn event(label: &str) -> Bytes {
    Bytes::from(json!({ "type": "contract/probed", "payload": { "label": label } }).to_string())
}
