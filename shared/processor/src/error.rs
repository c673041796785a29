//! Errors of the runner's public operations.

use crate::contract::ContractError;
use crate::fence::FenceRejection;
use crate::ports::{JournalError, ProgressError, RecoveryError};

/// Failure of a runner operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
// Exhaustive on purpose: ds-http's error.rs maps every variant to a status
// code, and a new variant must fail that build rather than become a 500.
pub enum RunnerError {
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Progress(#[from] ProgressError),
    #[error(transparent)]
    Recovery(#[from] RecoveryError),
    /// The processor's contract disagrees with its event type.
    #[error(transparent)]
    Contract(#[from] ContractError),
    #[error("processor state does not round-trip through JSON: {0}")]
    StateCodec(String),
    #[error("the runner was drained")]
    Drained,
    #[error("expected cursor revision {expected}, current is {current}")]
    RevisionMismatch { expected: u64, current: u64 },
    #[error("invalid position {position}: {why}")]
    InvalidPosition { position: u64, why: String },
    #[error("progress commits kept being fenced: {0}")]
    Contended(FenceRejection),
}

/// Failure of [`crate::Runner::wait_until_event`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WaitError {
    #[error("timed out waiting for position {position} to be acknowledged")]
    Timeout { position: u64 },
    #[error("a journal read failed while waiting: {0}")]
    JournalRead(String),
}
