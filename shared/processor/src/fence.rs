//! Conditional-write rules for progress commits.
//!
//! Pure, so every store (in memory now, a DynamoDB conditional write later)
//! applies the same rules. A commit carries a [`Fence`]; the store accepts it
//! only if [`check_fence`] does.

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
    /// Ordinary checkpoint: same incarnation, revision not older, and at the
    /// same revision the ack does not move backward.
    Monotonic,
    /// Operator compare-and-swap: the stored revision must be exactly this
    /// (then the monotonic rules apply on top).
    StoredRevision(u64),
    /// First commit of a runner that found no record, or a record of another
    /// incarnation: the stored record must still be absent or of `previous`.
    /// A record already of the committing incarnation falls back to the
    /// monotonic rules (a retried takeover).
    Takeover { previous: Option<StreamIncarnation> },
}

/// Why a commit was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenceRejection {
    #[error("stale cursor revision {attempted} (stored {stored})")]
    StaleRevision { stored: u64, attempted: u64 },
    #[error("stale stream incarnation {attempted} (stored {stored})")]
    StaleIncarnation { stored: StreamIncarnation, attempted: StreamIncarnation },
    #[error("acknowledged_through would move backward from {stored} to {attempted} within one revision")]
    BackwardAck { stored: u64, attempted: u64 },
    #[error("reduced_through {reduced_through} is past acknowledged_through {acknowledged_through}")]
    InvariantBroken { reduced_through: u64, acknowledged_through: u64 },
    #[error("expected stored cursor revision {expected}, found {stored:?}")]
    RevisionMismatch { expected: u64, stored: Option<u64> },
    #[error("takeover expected incarnation {expected:?}, found {stored}")]
    TakeoverConflict { expected: Option<StreamIncarnation>, stored: StreamIncarnation },
    #[error("record and fence disagree on incarnation or revision")]
    FenceDisagrees,
}

/// Decides whether `next` may replace `stored` under `fence`.
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
    let Some(stored) = stored else {
        return match fence.expect {
            Expectation::StoredRevision(expected) => Err(FenceRejection::RevisionMismatch { expected, stored: None }),
            Expectation::Monotonic | Expectation::Takeover { .. } => Ok(()),
        };
    };
    match &fence.expect {
        Expectation::Takeover { previous } if stored.stream_incarnation != fence.stream_incarnation => {
            return if previous.as_ref() == Some(&stored.stream_incarnation) {
                Ok(())
            } else {
                Err(FenceRejection::TakeoverConflict {
                    expected: previous.clone(),
                    stored: stored.stream_incarnation.clone(),
                })
            };
        }
        Expectation::StoredRevision(expected)
            if stored.stream_incarnation == fence.stream_incarnation
                && stored.progress.cursor_revision() != *expected =>
        {
            return Err(FenceRejection::RevisionMismatch {
                expected: *expected,
                stored: Some(stored.progress.cursor_revision()),
            });
        }
        _ => {}
    }
    monotonic(stored, next, fence)
}

fn monotonic(stored: &StoredProgress, next: &StoredProgress, fence: &Fence) -> Result<(), FenceRejection> {
    if stored.stream_incarnation != fence.stream_incarnation {
        return Err(FenceRejection::StaleIncarnation {
            stored: stored.stream_incarnation.clone(),
            attempted: fence.stream_incarnation.clone(),
        });
    }
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
