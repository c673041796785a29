//! Test support for the stream processor runner (`ds-processor`), kept out
//! of the runner's own sources:
//! - [`harness`]: in-memory adapters (journal, progress store, recovery,
//!   deduping effect sink) and crash injection, wired together as a
//!   [`harness::World`]: the executable spec's world;
//! - [`adapter_contract`]: the checks every host's adapter set runs
//!   ([`adapter_contract_suite!`] makes them tests);
//! - [`examples`]: the processor shapes the model is built for (counter,
//!   outbox, reconciler), used by the docs and the tests.

pub mod adapter_contract;
pub mod examples;
pub mod harness;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks, ignoring poisoning: a test that panicked inside a critical
/// section leaves only plain fields behind.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
