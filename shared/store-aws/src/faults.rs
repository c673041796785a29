//! Fault injection at the substrate's AWS call sites, for tests of failing
//! commits (throttling, S3 errors, lost acknowledgements). Compiled only with
//! the `fault-injection` feature, which tests enable; disarmed it costs one
//! atomic load per call.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Where a fault can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// The commit's `TransactWriteItems`.
    Transact,
    /// The `PutObject` of a large chunk or a segment, before the transaction.
    S3Put,
    /// A `GetObject` on the read path.
    S3Get,
    /// A seal, between its segment put and its swap transaction: any fault
    /// here stops the seal as a crash would (the segment stays, unswapped).
    SealSwap,
}

/// What happens at the point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The call is not sent; it fails as throttled (nothing written).
    Throttle,
    /// The call is not sent; it fails as a non-retryable rejection.
    Reject,
    /// The call is sent and applied, but its answer is lost: the caller sees
    /// an unknown outcome (a timeout after the server acted).
    LoseAck,
}

/// A queue of faults, each consumed by the first call at its point.
#[derive(Debug, Default)]
pub struct Faults {
    armed: AtomicBool,
    queue: Mutex<VecDeque<(FaultPoint, Fault)>>,
}

impl Faults {
    /// Make the next `count` calls at `point` fail with `fault`.
    pub fn inject(&self, point: FaultPoint, fault: Fault, count: usize) {
        let mut q = self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for _ in 0..count {
            q.push_back((point, fault));
        }
        self.armed.store(true, Ordering::Release);
    }

    /// The fault for this call at `point`, if one is queued.
    pub fn take(&self, point: FaultPoint) -> Option<Fault> {
        if !self.armed.load(Ordering::Acquire) {
            return None;
        }
        let mut q = self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let idx = q.iter().position(|(p, _)| *p == point)?;
        let fault = q.remove(idx).map(|(_, f)| f);
        if q.is_empty() {
            self.armed.store(false, Ordering::Release);
        }
        fault
    }

    /// Faults still queued (tests assert they were all consumed).
    pub fn pending(&self) -> usize {
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }
}
