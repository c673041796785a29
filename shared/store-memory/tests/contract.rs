//! The substrate contract suite (`ds_core::contract`) against the memory substrate.
//!
//! Each test gets a fresh `MemoryStore`; the factory hands out separate
//! substrate instances over it (own lock, hub and registry each), like
//! separate processes sharing one database — so the concurrency checks
//! exercise the commit preconditions, not just the in-process lock.

use std::sync::Arc;

use ds_core::{contract, StreamStore, Substrate};
use ds_inproc::in_process_substrate;
use ds_store_memory::{memory_substrate, MemoryStore};

/// Separate instances over one fresh store.
fn instances() -> impl Fn() -> Substrate + Send + Sync {
    let store: Arc<dyn StreamStore> = Arc::new(MemoryStore::new());
    move || in_process_substrate(Arc::clone(&store)).0
}

async fn factory(_check: &'static str) -> Option<impl Fn() -> Substrate + Send + Sync> {
    Some(instances())
}

ds_core::contract_suite!(factory);

/// One shared instance (one process): the in-process lock serializes writers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_64_one_instance() {
    let (substrate, _due) = memory_substrate();
    contract::concurrent_appends_one_stream(&move || substrate.clone(), 64, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_fires() {
    let (substrate, mut due) = memory_substrate();
    contract::scheduler_fires(substrate.scheduler, &mut due).await;
}

/// The memory store serves every stored range as one buffer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_contiguous_served() {
    contract::read_contiguous_served(&instances()).await;
}
