//! The substrate contract-test suite (feature `test-util`).
//!
//! Every substrate crate runs these same checks from its own `tests/` files, so
//! memory, local disk and AWS are held to one contract (the consistency rules
//! in [`crate::substrate`]). Each check is a `pub async fn` that panics (like
//! `assert!`) on a violation; call it from a `#[tokio::test]`. Concurrency
//! checks spawn tasks, so use a multi-thread runtime.
//!
//! A check gets a [`SubstrateFactory`]: every `instance()` must be a substrate
//! over the SAME backing storage (a fresh in-process lock/hub per instance is
//! fine, and is exactly what a second process or Lambda instance looks like).
//! Checks use unique paths, so one storage may serve many checks.
//!
//! ```ignore
//! use ds_core::contract::{self, SuiteOptions};
//!
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! async fn memory_meets_the_contract() {
//!     let store: Arc<dyn StreamStore> = Arc::new(MemoryStore::new());
//!     let factory = move || in_process_substrate(Arc::clone(&store)).0;
//!     contract::run_all(&factory, SuiteOptions::default()).await;
//! }
//! ```
//!
//! Checks: [`create_expect_absent`], [`expect_version`],
//! [`commit_all_or_nothing`], [`producer_and_data_atomic`],
//! [`delete_and_recreate`], [`touch_without_version_bump`],
//! [`list_streams_pages`], [`read_chunks_ranges`], [`meta_roundtrip`],
//! [`concurrent_appends_one_stream`], [`concurrent_commits_all_or_nothing`],
//! [`hub_wakes_after_commit`], [`hub_no_missed_wakeup`], [`hub_deadline`],
//! [`mutex_serializes`], [`registry_bounded`], [`scheduler_accepts_calls`],
//! [`scheduler_fires`] (in-process schedulers only) and
//! [`restart_keeps_committed`] (durable substrates only).

mod concurrency;
pub mod fixtures;
mod pipeline;
mod records;
mod restart;
mod services;
mod store;

use async_trait::async_trait;

use crate::Substrate;

pub use concurrency::{concurrent_appends_one_stream, concurrent_commits_all_or_nothing};
pub use pipeline::{submit_is_ordered, version_pins_incarnation};
pub use records::{list_streams_pages, meta_roundtrip, read_chunks_ranges, rich_meta, touch_without_version_bump};
pub use restart::restart_keeps_committed;
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

/// Which parts of [`run_all`] apply to the substrate, and how hard to push.
#[derive(Debug, Clone)]
pub struct SuiteOptions {
    /// Writers for [`concurrent_appends_one_stream`] (the contract asks ≥ 32).
    pub writers: usize,
    /// Appends per writer for [`concurrent_appends_one_stream`].
    pub appends_each: usize,
    /// Run [`scheduler_accepts_calls`] (true unless the scheduler cannot even
    /// be called in the test environment). [`scheduler_fires`] is separate.
    pub scheduler_calls: bool,
    /// Run [`registry_bounded`] and [`mutex_serializes`].
    pub in_process_services: bool,
}

impl Default for SuiteOptions {
    fn default() -> Self {
        Self { writers: 32, appends_each: 6, scheduler_calls: true, in_process_services: true }
    }
}

/// Every check that needs only a factory, one after the other.
/// ([`scheduler_fires`] and [`restart_keeps_committed`] take other inputs.)
pub async fn run_all(f: &dyn SubstrateFactory, options: SuiteOptions) {
    create_expect_absent(f).await;
    expect_version(f).await;
    commit_all_or_nothing(f).await;
    producer_and_data_atomic(f).await;
    delete_and_recreate(f).await;
    touch_without_version_bump(f).await;
    list_streams_pages(f).await;
    read_chunks_ranges(f).await;
    meta_roundtrip(f).await;
    concurrent_commits_all_or_nothing(f, 8, 10).await;
    concurrent_appends_one_stream(f, options.writers, options.appends_each).await;
    submit_is_ordered(f).await;
    version_pins_incarnation(f).await;
    hub_wakes_after_commit(f).await;
    hub_no_missed_wakeup(f).await;
    hub_deadline(f).await;
    if options.in_process_services {
        mutex_serializes(f).await;
        registry_bounded(f).await;
    }
    if options.scheduler_calls {
        scheduler_accepts_calls(f).await;
    }
}
