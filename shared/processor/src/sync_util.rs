//! Small helpers around std locks.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks, ignoring poisoning: every critical section here only assigns plain
/// fields, so a panic elsewhere cannot leave them half-updated.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
