//! Stream processors on a substrate: the runner's ports (`ds_processor`'s
//! [`Journal`](ds_processor::Journal), [`ProgressStore`](ds_processor::ProgressStore)
//! and [`Recovery`](ds_processor::Recovery)) implemented once over the
//! protocol core, so the same adapters run on the memory, local and AWS
//! substrates.
//!
//! Where this crate sits in the processor plane, which reads left to right:
//! runner ([`ds_processor`]) → adapters (`ds-processor-host`, **this crate**) → hosts
//! (`ds-processor-local` in the server, `ds-processor-aws` in the Lambda
//! processor function) → built-in kinds and their TOML (`ds-processors-builtin`).
//! Test support for all of them: `ds-processor-testkit` (tests/processor-testkit).
//!
//! - [`StreamJournal`]: a JSON-mode stream as the journal. An entry's
//!   position is the stream offset just past it; an append with an
//!   idempotency key carries the key's record in the append's own commit
//!   (one `TransactWriteItems` on AWS, one group-commit batch locally).
//! - [`RecordProgressStore`]: the progress of one processor on one stream
//!   incarnation as one keyed record (`progress/<slug>`), written by one
//!   conditional write: the fence rules ([`ds_processor::check_fence`]) are
//!   checked against the record as this instance last saw it, and the write
//!   holds only if the stored record is still that one.
//! - [`StreamRecovery`]: revival alarms through an [`AlarmScheduler`] (the
//!   in-process [`InProcAlarms`] keeps them in records and tokio timers, so
//!   they survive a restart; AWS uses EventBridge Scheduler).
//! - [`ProcessorRegistry`]: which processors ([`ProcessorSpec`]) run on
//!   which streams (path patterns), opened per stream as type-erased
//!   [`HostedRunner`]s.
//! - [`InlineRegistry`]: inline processors ([`InlineAdapter`]: a typed
//!   processor's `validate` and `reduce` inside the append's own commit),
//!   the core's `InlineGate`.
//! - [`ProcessorOperator`]: what operators see and do (lag, state, the
//!   runner's controls), served by the HTTP operator API; [`OnDemandOperator`]
//!   is its implementation for hosts that keep no runner open; [`StateQuery`]
//!   and [`StateAnswer`] are its reads of a materialized view (the `state` kind).

mod alarms;
mod hosted;
mod inline;
mod inline_operator;
mod journal;
mod operator;
mod progress;
mod recovery;
mod state_api;

pub use alarms::{AlarmScheduler, FiredAlarm, InProcAlarms};
pub use hosted::{HostedRunner, ProcessorRegistry, ProcessorSpec, Registration, RegistryError, Spec};
pub use inline::{InlineAdapter, InlineHosted, InlineRegistry, InlineRegistryError, LastRejection};
pub use inline_operator::InlineOperator;
pub use journal::StreamJournal;
pub use operator::{
    inline_control_name, processed_stream, record_detail, resolve, runner_detail, stored_progress, Control,
    InlineStatus, OnDemandOperator, OperatorError, ProcessorDetail, ProcessorOperator, ProcessorPage, ProcessorStatus,
};
pub use progress::{progress_key, RecordProgressStore};
pub use recovery::StreamRecovery;
pub use state_api::{
    CompactionOutcome, CompactionReport, MalformedAt, MaterializedStatus, StateAnswer, StateCursor, StateQuery,
    DEFAULT_STATE_LIMIT, MAX_STATE_LIMIT,
};

use std::sync::Arc;

use ds_core::StreamService;
use ds_processor::{Adapters, Journal, ProgressStore, Recovery};

/// The runner's adapters for processor `slug` on the stream at `path`.
pub fn adapters(service: &StreamService, path: &str, slug: &str, alarms: Arc<dyn AlarmScheduler>) -> Adapters {
    let journal: Arc<dyn Journal> = Arc::new(StreamJournal::new(service.clone(), path));
    let progress: Arc<dyn ProgressStore> = Arc::new(RecordProgressStore::new(service.clone(), path, slug));
    let recovery: Arc<dyn Recovery> = Arc::new(StreamRecovery::new(service.clone(), path, alarms));
    // The runner reads the service's clock (alarm times, checkpoint cadence).
    Adapters::new(journal, progress, recovery).with_clock(service.clock().clone())
}
