//! The adapter contract suite.
//!
//! Every adapter set — a [`Journal`], a [`ProgressStore`] and a [`Recovery`]
//! over one backing store (memory, local disk, DynamoDB + EventBridge
//! Scheduler) — runs these same checks, so the runner can rely on the port
//! contracts in [`ds_processor`](ds_processor::Journal) whatever hosts it. Each
//! check is a `pub async fn` that panics (like `assert!`) on a violation.
//!
//! A check gets an [`AdapterFactory`]: every [`instance`](AdapterFactory::instance)
//! must be a fresh adapter set over the SAME backing storage, exactly what a
//! second process or Lambda instance would build (no in-process cache,
//! lock or counter shared with earlier instances unless the real hosts
//! share it too). Checks create their own streams, so one storage may serve
//! every check.
//!
//! One macro line runs the whole suite, in the shape of ds-core's
//! `contract_suite!`: [`adapter_contract_suite!`](crate::adapter_contract_suite)
//! expands to one multi-thread `#[tokio::test]` per check (the race checks
//! need real parallelism), each asking `factory` for its factory by check
//! name; `None` skips (e.g. no emulator configured):
//!
//! ```ignore
//! // tests/adapter_contract.rs of an adapter crate
//! async fn factory(_check: &'static str) -> Option<impl AdapterFactory> {
//!     Some(MyAdapterFactory::connect().await)
//! }
//!
//! ds_processor_testkit::adapter_contract_suite!(factory);
//! ```
//!
//! Checks: [`journal_reads_in_order`], [`append_dedupes_by_key_across_instances`],
//! [`progress_round_trips_across_instances`], [`fence_rejects_stale_revision`],
//! [`fence_rejects_backward_ack`], [`fence_rejects_broken_invariant`],
//! [`fence_rejects_revision_mismatch`], [`fence_rejects_disagreeing_fence`],
//! [`fence_accepts_legal_commits`], [`concurrent_commits_one_winner`],
//! [`incarnation_change_isolates_the_old_incarnation`],
//! [`alarm_armed_twice_revives_once`] and [`runner_resumes_across_instances`].
//!
//! Not covered by a store with one record per incarnation, hence not checked
//! here: [`FenceRejection::StaleIncarnation`](ds_processor::FenceRejection), which
//! only a store handing [`check_fence`](ds_processor::check_fence) another
//! incarnation's record could provoke. The incarnation check asserts the
//! isolation that makes it unreachable instead.

mod alarms;
mod fixtures;
mod incarnation;
mod journal;
mod progress;
mod runner;

use std::sync::Arc;

use async_trait::async_trait;

use ds_processor::{Adapters, Alarm, Clock, Journal, ProgressStore, Recovery};

pub use alarms::alarm_armed_twice_revives_once;
pub use incarnation::incarnation_change_isolates_the_old_incarnation;
pub use journal::{append_dedupes_by_key_across_instances, journal_reads_in_order};
pub use progress::{
    concurrent_commits_one_winner, fence_accepts_legal_commits, fence_rejects_backward_ack,
    fence_rejects_broken_invariant, fence_rejects_disagreeing_fence, fence_rejects_revision_mismatch,
    fence_rejects_stale_revision, progress_round_trips_across_instances,
};
pub use runner::runner_resumes_across_instances;

/// One host's adapters for one (stream, processor).
#[derive(Clone)]
pub struct AdapterSet {
    pub journal: Arc<dyn Journal>,
    pub progress: Arc<dyn ProgressStore>,
    pub recovery: Arc<dyn Recovery>,
}

impl AdapterSet {
    /// What [`ds_processor::Runner::open`] takes, on `clock`.
    pub fn adapters(&self, clock: Clock) -> Adapters {
        Adapters::new(Arc::clone(&self.journal), Arc::clone(&self.progress), Arc::clone(&self.recovery))
            .with_clock(clock)
    }
}

/// Hands out adapter sets over one backing storage, and plays the parts of
/// the outside world the ports do not cover (creating streams, the alarm
/// scheduler firing).
#[async_trait]
pub trait AdapterFactory: Send + Sync {
    /// Creates an empty stream no other check uses; returns its name (a
    /// stream path, for substrate-backed adapters).
    async fn create_stream(&self) -> String;

    /// Deletes `stream` and creates it again, empty: a new incarnation.
    async fn recreate_stream(&self, stream: &str);

    /// A new adapter set for processor `slug` on `stream`, over the shared
    /// storage, as another process would build it.
    async fn instance(&self, stream: &str, slug: &str) -> AdapterSet;

    /// Plays the scheduler: removes the alarms of `stream` that are due at
    /// `now_ms` (epoch ms) and returns them, as the scheduler would deliver
    /// them to the recovery handler. Alarms are one-shot: a taken alarm is
    /// gone.
    async fn take_due_alarms(&self, stream: &str, now_ms: u64) -> Vec<Alarm>;
}

/// Every check, one after the other.
pub async fn run_all(f: &dyn AdapterFactory) {
    journal_reads_in_order(f).await;
    append_dedupes_by_key_across_instances(f).await;
    progress_round_trips_across_instances(f).await;
    fence_rejects_stale_revision(f).await;
    fence_rejects_backward_ack(f).await;
    fence_rejects_broken_invariant(f).await;
    fence_rejects_revision_mismatch(f).await;
    fence_rejects_disagreeing_fence(f).await;
    fence_accepts_legal_commits(f).await;
    concurrent_commits_one_winner(f).await;
    incarnation_change_isolates_the_old_incarnation(f).await;
    alarm_armed_twice_revives_once(f).await;
    runner_resumes_across_instances(f).await;
}

/// One `#[tokio::test]` per adapter contract check — this macro's list is
/// THE list of checks every adapter set runs — each against the factory
/// `$factory`: an `async fn(&'static str) -> Option<impl AdapterFactory>`
/// given the check's name, returning `None` to skip. Invoke it once per
/// module; the crate needs `tokio` (macros, multi-thread runtime).
#[macro_export]
macro_rules! adapter_contract_suite {
    ($factory:path) => {
        $crate::adapter_contract_suite!(@checks $factory;
            journal_reads_in_order,
            append_dedupes_by_key_across_instances,
            progress_round_trips_across_instances,
            fence_rejects_stale_revision,
            fence_rejects_backward_ack,
            fence_rejects_broken_invariant,
            fence_rejects_revision_mismatch,
            fence_rejects_disagreeing_fence,
            fence_accepts_legal_commits,
            concurrent_commits_one_winner,
            incarnation_change_isolates_the_old_incarnation,
            alarm_armed_twice_revives_once,
            runner_resumes_across_instances,
        );
    };
    (@checks $factory:path; $($check:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $check() {
            let Some(factory) = $factory(stringify!($check)).await else { return };
            $crate::adapter_contract::$check(&factory).await;
        }
    )*};
}
