//! The memory substrate, and the in-process substrate services every
//! single-process substrate (memory, local disk) shares.
//!
//! - [`MemoryStore`]: a [`StreamStore`] over in-memory maps (tests, dev).
//! - [`InProcRegistry`]: the per-stream context map; [`InProcMutex`] and
//!   [`InProcHub`] keep their per-stream lock and wake-up channel in it, so a
//!   stream's context lives while anything uses it and is evicted after.
//! - [`InProcScheduler`]: expiry alarms on tokio timers, delivered as
//!   [`ExpiryDue`] on a channel.
//! - [`precheck`]: the commit precondition rules, reused by `ds-store-local`.
//!
//! [`memory_substrate`] and [`in_process_substrate`] assemble a
//! [`Substrate`]; the latter over any store (the local store uses it).

mod hub;
mod mutex;
pub mod precheck;
mod registry;
mod scheduler;
mod store;

use std::sync::Arc;

use ds_core::{ExpiryDue, StoreForkPeer, StreamStore, Substrate};
use tokio::sync::mpsc::UnboundedReceiver;

pub use hub::InProcHub;
pub use mutex::InProcMutex;
pub use registry::InProcRegistry;
pub use scheduler::InProcScheduler;
pub use store::MemoryStore;

/// A substrate over `store` with fresh in-process services: one registry
/// shared by the mutex and hub, a timer scheduler whose alarms arrive on the
/// returned receiver, and a [`StoreForkPeer`] over the same store.
///
/// Each call makes independent services: two substrates over one store behave
/// like two processes sharing a database (their locks do not exclude each
/// other; commit preconditions still serialize writers).
pub fn in_process_substrate(store: Arc<dyn StreamStore>) -> (Substrate, UnboundedReceiver<ExpiryDue>) {
    let registry = Arc::new(InProcRegistry::new());
    let (scheduler, due) = InProcScheduler::new();
    let substrate = Substrate {
        store: Arc::clone(&store),
        mutex: Arc::new(InProcMutex::new(Arc::clone(&registry))),
        hub: Arc::new(InProcHub::new(Arc::clone(&registry))),
        scheduler: Arc::new(scheduler),
        fork_peer: Arc::new(StoreForkPeer::new(store)),
        registry,
    };
    (substrate, due)
}

/// The memory substrate: a fresh [`MemoryStore`] with in-process services.
pub fn memory_substrate() -> (Substrate, UnboundedReceiver<ExpiryDue>) {
    in_process_substrate(Arc::new(MemoryStore::new()))
}
