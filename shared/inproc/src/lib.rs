//! The in-process substrate services: what a single-process substrate (the
//! memory and local-disk stores) runs on besides its store.
//!
//! - [`InProcRegistry`]: the per-stream context map; [`InProcMutex`] and
//!   [`InProcHub`] keep their per-stream lock and wake-up channel in it, so a
//!   stream's context lives while anything uses it; unused ones are kept for
//!   the next request, up to a bound, and swept when the map outgrows it.
//! - [`InProcScheduler`]: expiry alarms on tokio timers, delivered as
//!   [`ExpiryDue`] on a channel.
//!
//! [`in_process_substrate`] assembles a [`Substrate`] over any store.

mod hub;
mod mutex;
mod registry;
mod scheduler;

use std::sync::Arc;

use ds_core::{Clock, ExpiryDue, Random, StoreForkPeer, StreamStore, Substrate};
use tokio::sync::mpsc::UnboundedReceiver;

pub use hub::InProcHub;
pub use mutex::InProcMutex;
pub use registry::InProcRegistry;
pub use scheduler::InProcScheduler;

/// A substrate over `store` with fresh in-process services: one registry
/// shared by the mutex and hub, a timer scheduler whose alarms arrive on the
/// returned receiver, and a [`StoreForkPeer`] over the same store.
///
/// Each call makes independent services: two substrates over one store behave
/// like two processes sharing a database (their locks do not exclude each
/// other; commit preconditions still serialize writers).
pub fn in_process_substrate(store: Arc<dyn StreamStore>) -> (Substrate, UnboundedReceiver<ExpiryDue>) {
    in_process_substrate_on(store, Clock::system(), Random::system())
}

/// [`in_process_substrate`] on the given clock (its alarms fire when it
/// reaches them: a manual clock fires them when moved) and jitter source.
pub fn in_process_substrate_on(
    store: Arc<dyn StreamStore>,
    clock: Clock,
    random: Random,
) -> (Substrate, UnboundedReceiver<ExpiryDue>) {
    let registry = Arc::new(InProcRegistry::new());
    let (scheduler, due) = InProcScheduler::new(clock.clone());
    let substrate = Substrate {
        store: Arc::clone(&store),
        mutex: Arc::new(InProcMutex::new(Arc::clone(&registry))),
        hub: Arc::new(InProcHub::new(Arc::clone(&registry))),
        scheduler: Arc::new(scheduler),
        fork_peer: Arc::new(StoreForkPeer::new(store)),
        registry,
        clock,
        random,
    };
    (substrate, due)
}
