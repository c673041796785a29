//! What a subscription operation can fail with. `ds_http::error` maps each
//! variant to its status code and error code.

use ds_core::{ServiceError, StoreError};

#[derive(Debug, thiserror::Error)]
// Exhaustive on purpose: ds-http's error.rs maps every variant to a status
// code, and a new variant must fail that build rather than become a 500.
pub enum SubscriptionError {
    /// Bad input: `400`.
    #[error("{0}")]
    Invalid(String),
    /// An unsafe or malformed webhook URL (§12.8): `400 WEBHOOK_URL_REJECTED`.
    #[error("webhook URL rejected: {0}")]
    WebhookUrlRejected(String),
    /// No such subscription, or a deleted one: `404`.
    #[error("no such subscription")]
    NotFound,
    /// The id exists with another configuration: `409`.
    #[error("subscription exists with a different configuration")]
    ConfigConflict,
    /// Missing, malformed or wrongly signed callback/claim token: `401`.
    #[error("{0}")]
    Unauthorized(&'static str),
    /// The caller's access grants do not cover what the subscription would
    /// reach (`crate::reach`): `403`, with the missing grant named.
    #[error("{0}")]
    Forbidden(String),
    /// Stale `wake_id`/`generation`, or no wake in flight: `409 FENCED`.
    #[error("stale wake_id or generation")]
    Fenced,
    /// Another worker holds the lease: `409 ALREADY_CLAIMED`.
    #[error("another worker holds the lease")]
    AlreadyClaimed { holder: String, generation: u64 },
    /// The operation is for the other kind of subscription: `400`.
    #[error("{0}")]
    WrongKind(&'static str),
    /// The subscription's state would exceed the record size limit: `413`.
    #[error("subscription state too large: {0}")]
    TooLarge(String),
    /// Concurrent writers kept winning: `503`.
    #[error("subscription state kept changing; retry")]
    Contention,
    #[error(transparent)]
    Service(#[from] ServiceError),
}

impl From<StoreError> for SubscriptionError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::TooLarge(m) => SubscriptionError::TooLarge(m),
            StoreError::Conflict => SubscriptionError::Contention,
            other => SubscriptionError::Service(ServiceError::Store(other)),
        }
    }
}

pub type SubResult<T> = Result<T, SubscriptionError>;
