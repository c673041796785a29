//! The substrate contract-test suite (feature `test-util`).
//!
//! Every substrate crate runs these same checks, so memory, local disk and
//! AWS are held to one contract (the consistency rules in
//! [`crate::substrate`]). Each check is a `pub async fn` that panics (like
//! `assert!`) on a violation.
//!
//! A substrate crate runs the whole suite with one line in a test file:
//! [`contract_suite!`](crate::contract_suite) expands to one
//! `#[tokio::test]` per check on its list, so a check added there runs on
//! every substrate without touching their crates. Two checks need more than a
//! factory and are called by hand where they apply:
//! [`scheduler_fires`] (in-process schedulers) and
//! [`restart_keeps_committed`] (durable substrates).
//!
//! A check gets a [`SubstrateFactory`]: every `instance()` must be a substrate
//! over the SAME backing storage (a fresh in-process lock/hub per instance is
//! fine, and is exactly what a second process or Lambda instance looks like).
//! Checks use unique paths, so one storage may serve many checks.
//!
//! ```ignore
//! /// The factory a check runs against (`None`: skip, e.g. no emulator).
//! async fn factory(_check: &'static str) -> Option<impl SubstrateFactory> {
//!     let store: Arc<dyn StreamStore> = Arc::new(MemoryStore::new());
//!     Some(move || ds_inproc::in_process_substrate(Arc::clone(&store)).0)
//! }
//!
//! ds_core::contract_suite!(factory);
//! ```

mod batched;
mod concurrency;
mod conditional;
mod contiguous;
pub mod fixtures;
mod forks;
pub mod inline;
mod keyed;
mod listing;
mod pipeline;
mod records;
mod restart;
mod retention;
mod services;
mod store;

use async_trait::async_trait;

use crate::Substrate;

pub use batched::{
    batched_appends_ordered, batched_producer_retries, batched_refusals_alone, batched_wake_after_commit,
};
pub use concurrency::{concurrent_appends_one_stream, concurrent_commits_all_or_nothing};
pub use conditional::{append_at_expected_tail, append_built_under_the_lock};
pub use contiguous::{read_contiguous_ranges, read_contiguous_repeated_and_deleted, read_contiguous_served};
pub use forks::fork_peer_reads_named_incarnation;
pub use inline::{
    inline_failed_refold_waits_for_an_operator, inline_reduction_commits_with_its_append,
    inline_refolds_once_on_a_new_version, inline_rejection_leaves_no_trace,
};
pub use keyed::{record_atomic_with_append, record_preconditions, record_writers_race, records_wiped_with_incarnation};
pub use listing::{registry_concurrent_services, registry_lists_lifecycle};
pub use pipeline::{submit_is_ordered, version_pins_incarnation};
pub use records::{
    list_streams_by_prefix, list_streams_pages, meta_roundtrip, read_chunks_ranges, rich_meta,
    touch_without_version_bump,
};
pub use restart::restart_keeps_committed;
pub use retention::{
    retention_forks_follow_their_lineage, retention_keeps_whole_appends, retention_live_readers_cross_trims,
    retention_trim_and_reads, retention_trim_races_appends,
};
pub use services::{
    hub_deadline, hub_no_missed_wakeup, hub_wakes_after_commit, mutex_serializes, registry_bounded,
    scheduler_accepts_calls, scheduler_fires,
};
pub use store::{
    commit_all_or_nothing, create_expect_absent, delete_and_recreate, expect_version, producer_and_data_atomic,
};

/// Makes instances of the substrate under test, all over one backing storage.
///
/// Implemented for every `Fn() -> Substrate` closure; implement it directly
/// when building an instance is async (e.g. loading cloud configuration).
#[async_trait]
pub trait SubstrateFactory: Send + Sync {
    /// A new substrate instance over the factory's shared backing storage.
    async fn instance(&self) -> Substrate;
}

#[async_trait]
impl<F> SubstrateFactory for F
where
    F: Fn() -> Substrate + Send + Sync,
{
    async fn instance(&self) -> Substrate {
        self()
    }
}

/// [`concurrent_appends_one_stream`] at the contract's bar: 32 writers, each
/// its own substrate instance, 6 appends each.
pub async fn concurrent_appends_32_writers(f: &dyn SubstrateFactory) {
    concurrent_appends_one_stream(f, 32, 6).await;
}

/// [`concurrent_commits_all_or_nothing`] with 8 writers of 10 commits each.
pub async fn concurrent_commits_8_writers(f: &dyn SubstrateFactory) {
    concurrent_commits_all_or_nothing(f, 8, 10).await;
}

/// One `#[tokio::test]` per contract check — this macro's list is THE list
/// of checks every substrate runs — each against the factory `$factory`: an
/// `async fn(&'static str) -> Option<impl SubstrateFactory>` given the
/// check's name, returning `None` to skip (e.g. no emulator configured).
#[macro_export]
macro_rules! contract_suite {
    ($factory:path) => {
        $crate::contract_suite!(@checks $factory;
            create_expect_absent,
            expect_version,
            commit_all_or_nothing,
            producer_and_data_atomic,
            delete_and_recreate,
            touch_without_version_bump,
            list_streams_pages,
            list_streams_by_prefix,
            read_chunks_ranges,
            read_contiguous_ranges,
            read_contiguous_repeated_and_deleted,
            meta_roundtrip,
            submit_is_ordered,
            version_pins_incarnation,
            record_preconditions,
            record_atomic_with_append,
            records_wiped_with_incarnation,
            record_writers_race,
            inline_rejection_leaves_no_trace,
            inline_reduction_commits_with_its_append,
            inline_refolds_once_on_a_new_version,
            inline_failed_refold_waits_for_an_operator,
            fork_peer_reads_named_incarnation,
            concurrent_commits_8_writers,
            concurrent_appends_32_writers,
            batched_appends_ordered,
            batched_producer_retries,
            batched_refusals_alone,
            batched_wake_after_commit,
            hub_wakes_after_commit,
            hub_no_missed_wakeup,
            hub_deadline,
            mutex_serializes,
            registry_bounded,
            registry_lists_lifecycle,
            registry_concurrent_services,
            append_at_expected_tail,
            append_built_under_the_lock,
            retention_trim_and_reads,
            retention_keeps_whole_appends,
            retention_live_readers_cross_trims,
            retention_forks_follow_their_lineage,
            retention_trim_races_appends,
            scheduler_accepts_calls,
        );
    };
    (@checks $factory:path; $($check:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $check() {
            let Some(factory) = $factory(stringify!($check)).await else { return };
            $crate::contract::$check(&factory).await;
        }
    )*};
}
