//! The memory substrate: [`MemoryStore`], a [`ds_core::StreamStore`] over
//! in-memory maps (tests, development, benchmarks), run on the in-process
//! services of `ds-inproc`.

mod chunks;
mod store;

use std::sync::Arc;

use ds_core::{ExpiryDue, Substrate};
use tokio::sync::mpsc::UnboundedReceiver;

pub use store::MemoryStore;

/// The memory substrate: a fresh [`MemoryStore`] with in-process services;
/// expiry alarms arrive on the returned receiver.
pub fn memory_substrate() -> (Substrate, UnboundedReceiver<ExpiryDue>) {
    ds_inproc::in_process_substrate(Arc::new(MemoryStore::new()))
}
