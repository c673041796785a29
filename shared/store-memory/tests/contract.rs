//! The substrate contract suite (`ds_core::contract`) against the memory substrate.
//!
//! Each test gets a fresh `MemoryStore`; the factory hands out separate
//! substrate instances over it (own lock, hub and registry each), like
//! separate processes sharing one database — so the concurrency checks
//! exercise the commit preconditions, not just the in-process lock.

use std::sync::Arc;

use ds_core::contract::{self, SuiteOptions};
use ds_core::{StreamStore, Substrate};
use ds_store_memory::{in_process_substrate, memory_substrate, MemoryStore};

/// Separate instances over one fresh store.
fn instances() -> impl Fn() -> Substrate + Send + Sync {
    let store: Arc<dyn StreamStore> = Arc::new(MemoryStore::new());
    move || in_process_substrate(Arc::clone(&store)).0
}

/// One shared instance (one process): the in-process lock serializes writers.
fn shared_instance() -> impl Fn() -> Substrate + Send + Sync {
    let (substrate, _due) = memory_substrate();
    move || substrate.clone()
}

macro_rules! contract_tests {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            contract::$name(&instances()).await;
        }
    )*};
}

contract_tests!(
    create_expect_absent,
    expect_version,
    commit_all_or_nothing,
    producer_and_data_atomic,
    delete_and_recreate,
    touch_without_version_bump,
    list_streams_pages,
    read_chunks_ranges,
    meta_roundtrip,
    submit_is_ordered,
    version_pins_incarnation,
    hub_wakes_after_commit,
    hub_no_missed_wakeup,
    hub_deadline,
    mutex_serializes,
    registry_bounded,
    scheduler_accepts_calls,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_32_separate_instances() {
    contract::concurrent_appends_one_stream(&instances(), 32, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_64_one_instance() {
    contract::concurrent_appends_one_stream(&shared_instance(), 64, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commits_all_or_nothing() {
    contract::concurrent_commits_all_or_nothing(&instances(), 16, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_fires() {
    let (substrate, mut due) = memory_substrate();
    contract::scheduler_fires(substrate.scheduler, &mut due).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_all_on_one_store() {
    contract::run_all(&instances(), SuiteOptions::default()).await;
}
