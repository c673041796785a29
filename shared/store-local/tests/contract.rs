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

use ds_core::{contract, StreamStore, Substrate};
use ds_inproc::in_process_substrate;
use ds_store_local::{local_substrate, LocalStore};
use tempfile::TempDir;

/// Separate instances over one fresh store in a temp dir.
struct Instances {
    _dir: TempDir,
    store: Arc<dyn StreamStore>,
}

#[async_trait::async_trait]
impl contract::SubstrateFactory for Instances {
    async fn instance(&self) -> Substrate {
        in_process_substrate(Arc::clone(&self.store)).0
    }
}

async fn factory(_check: &'static str) -> Option<Instances> {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn StreamStore> = Arc::new(LocalStore::open(dir.path()).unwrap());
    Some(Instances { _dir: dir, store })
}

ds_core::contract_suite!(factory);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_64_one_instance() {
    let dir = tempfile::tempdir().unwrap();
    let (substrate, _due) = local_substrate(dir.path()).unwrap();
    contract::concurrent_appends_one_stream(&move || substrate.clone(), 64, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_fires() {
    let dir = tempfile::tempdir().unwrap();
    let (substrate, mut due) = local_substrate(dir.path()).unwrap();
    contract::scheduler_fires(substrate.scheduler, &mut due).await;
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

/// The local store serves every stored range as one buffer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_contiguous_served() {
    contract::read_contiguous_served(&factory("read_contiguous_served").await.unwrap()).await;
}
