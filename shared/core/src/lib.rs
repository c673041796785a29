//! Substrate-agnostic Durable Streams core.
//!
//! - [`model`]: the persisted records (meta, chunks, producer state) and the
//!   all-or-nothing [`Commit`].
//! - [`fold`]: the commit rules, once: a [`Commit`] folded into its net writes
//!   and the preconditions on stored state, called by every substrate.
//! - [`substrate`]: the six traits a platform implements, with the consistency
//!   contract in their docs; [`StoreError`], what they report.
//! - [`service`]: the protocol use-cases (create/fork, append/close, read,
//!   HEAD, delete, expiry, trim) written once over the traits.
//! - [`retention`]: retention policies and the runner a host applies them with.
//! - `contract` (feature `test-util`): the substrate contract-test suite.

#[cfg(feature = "test-util")]
pub mod contract;
mod error;
pub mod fold;
pub mod inline;
pub mod model;
mod pending;
pub mod read_cache;
pub mod retention;
pub mod service;
pub mod substrate;

pub use ds_clock::{Clock, Random};
pub use error::{ErrorSource, StoreError};
pub use inline::{InlineGate, InlineMessage, InlineProcessor, InlineReduction, InlineRefusal, RefoldLimits};
pub use model::*;
pub use pending::{Chain, PendingCommit, TrySubmit};
pub use retention::{RetentionPass, RetentionPolicy, RetentionRunner};
pub use service::*;
pub use substrate::*;
