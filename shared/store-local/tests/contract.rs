//! The substrate contract suite (`ds_core::contract`) against the local store,
//! plus its restart check.
//!
//! Each test opens a fresh store in a temp dir; the factory hands out separate
//! substrate instances over it (own lock, hub and registry each), so the
//! concurrency checks exercise the commit preconditions through the group
//! commit writer, not just the in-process lock.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use ds_core::contract::{self, SuiteOptions};
use ds_core::{StreamStore, Substrate};
use ds_store_local::{local_substrate, LocalStore};
use ds_store_memory::in_process_substrate;
use tempfile::TempDir;

/// Separate instances over one fresh store; keep the `TempDir` alive.
fn instances() -> (TempDir, impl Fn() -> Substrate + Send + Sync) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn StreamStore> = Arc::new(LocalStore::open(dir.path()).unwrap());
    (dir, move || in_process_substrate(Arc::clone(&store)).0)
}

macro_rules! contract_tests {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let (_dir, factory) = instances();
            contract::$name(&factory).await;
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
    let (_dir, factory) = instances();
    contract::concurrent_appends_one_stream(&factory, 32, 6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_64_one_instance() {
    let dir = tempfile::tempdir().unwrap();
    let (substrate, _due) = local_substrate(dir.path()).unwrap();
    contract::concurrent_appends_one_stream(&move || substrate.clone(), 64, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commits_all_or_nothing() {
    let (_dir, factory) = instances();
    contract::concurrent_commits_all_or_nothing(&factory, 16, 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_fires() {
    let dir = tempfile::tempdir().unwrap();
    let (substrate, mut due) = local_substrate(dir.path()).unwrap();
    contract::scheduler_fires(substrate.scheduler, &mut due).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_all_on_one_store() {
    let (_dir, factory) = instances();
    contract::run_all(&factory, SuiteOptions::default()).await;
}

/// Each `instance()` opens the directory anew; the suite drops the first
/// instance (closing the store) before asking for the second.
fn reopen(dir: &Path) -> impl Fn() -> Substrate + Send + Sync + '_ {
    move || local_substrate(dir).unwrap().0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_committed() {
    let dir = tempfile::tempdir().unwrap();
    contract::restart_keeps_committed(&reopen(dir.path())).await;
}
