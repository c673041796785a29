//! Conditional-write rules for progress commits.
//!
//! Pure, so every store (in memory, a DynamoDB conditional write) applies
//! the same rules. A commit carries a [`Fence`]; the store accepts it only if
//! [`check_fence`] does, checked against the stored record of the fence's
//! incarnation (records are kept per incarnation, see
//! [`crate::ProgressStore`]).

use crate::incarnation::StreamIncarnation;
use crate::progress::StoredProgress;

/// Who is committing and under which precondition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// Must equal the record's incarnation.
    pub stream_incarnation: StreamIncarnation,
    /// Must equal the record's cursor revision.
    pub cursor_revision: u64,
    pub expect: Expectation,
}

/// Precondition on the stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expectation {
    /// Ordinary checkpoint: the record is absent, or its revision is not
    /// newer and at the same revision the ack does not move backward.
    Monotonic,
    /// Operator compare-and-swap: the stored revision must be exactly this
    /// (an absent record is at revision 0); then the monotonic rules apply.
    StoredRevision(u64),
}

/// Why a commit was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenceRejection {
    #[error("stale cursor revision {attempted} (stored {stored})")]
    StaleRevision { stored: u64, attempted: u64 },
    /// The stored record handed to [`check_fence`] belongs to another
    /// incarnation than the fence. A store keeping records per incarnation
    /// never does that; the check guards against one that would.
    #[error("stale stream incarnation {attempted} (stored {stored})")]
    StaleIncarnation { stored: StreamIncarnation, attempted: StreamIncarnation },
    #[error("acknowledged_through would move backward from {stored} to {attempted} within one revision")]
    BackwardAck { stored: u64, attempted: u64 },
    #[error("reduced_through {reduced_through} is past acknowledged_through {acknowledged_through}")]
    InvariantBroken { reduced_through: u64, acknowledged_through: u64 },
    #[error("expected stored cursor revision {expected}, found {stored:?}")]
    RevisionMismatch { expected: u64, stored: Option<u64> },
    #[error("record and fence disagree on incarnation or revision")]
    FenceDisagrees,
}

/// Decides whether `next` may replace `stored` (the record of the fence's
/// incarnation, `None` if there is none yet) under `fence`.
pub fn check_fence(
    stored: Option<&StoredProgress>,
    next: &StoredProgress,
    fence: &Fence,
) -> Result<(), FenceRejection> {
    if !next.progress.holds_invariant() {
        return Err(FenceRejection::InvariantBroken {
            reduced_through: next.progress.reduction.reduced_through,
            acknowledged_through: next.progress.acknowledged_through(),
        });
    }
    if next.stream_incarnation != fence.stream_incarnation || next.progress.cursor_revision() != fence.cursor_revision {
        return Err(FenceRejection::FenceDisagrees);
    }
    if let Some(stored) = stored.filter(|s| s.stream_incarnation != fence.stream_incarnation) {
        return Err(FenceRejection::StaleIncarnation {
            stored: stored.stream_incarnation.clone(),
            attempted: fence.stream_incarnation.clone(),
        });
    }
    let stored_revision = stored.map_or(0, |s| s.progress.cursor_revision());
    if let Expectation::StoredRevision(expected) = fence.expect {
        if stored_revision != expected {
            return Err(FenceRejection::RevisionMismatch { expected, stored: stored.map(|_| stored_revision) });
        }
    }
    match stored {
        None => Ok(()),
        Some(stored) => monotonic(stored, next, fence),
    }
}

fn monotonic(stored: &StoredProgress, next: &StoredProgress, fence: &Fence) -> Result<(), FenceRejection> {
    let stored_revision = stored.progress.cursor_revision();
    if fence.cursor_revision < stored_revision {
        return Err(FenceRejection::StaleRevision { stored: stored_revision, attempted: fence.cursor_revision });
    }
    // A reduction-only record has no effect cursor to protect: a re-reduce
    // legitimately moves its fold position back.
    let both_process = stored.progress.processing.is_some() && next.progress.processing.is_some();
    if both_process
        && fence.cursor_revision == stored_revision
        && next.progress.acknowledged_through() < stored.progress.acknowledged_through()
    {
        return Err(FenceRejection::BackwardAck {
            stored: stored.progress.acknowledged_through(),
            attempted: next.progress.acknowledged_through(),
        });
    }
    Ok(())
}
