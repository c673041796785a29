//! Typed errors of the AWS substrate and the **one place** where AWS SDK
//! errors (including `TransactionCanceledException` cancellation reasons) are
//! mapped to them. Everything else in the crate matches on these types.

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_smithy_runtime_api::client::result::SdkError;
use ds_core::StoreError;

use crate::codec::{CodecError, Item};

/// Why a single AWS call failed, classified for retry decisions.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AwsError {
    /// A condition expression did not hold; `old` is the item as it was
    /// (`ReturnValuesOnConditionCheckFailure=ALL_OLD`), if it existed.
    #[error("condition check failed")]
    ConditionFailed { old: Option<Box<Item>> },
    /// Throttled or over capacity: nothing was written; retry after a backoff.
    #[error("throttled: {0}")]
    Throttled(String),
    /// The request may or may not have reached AWS (timeout, connection
    /// reset, 5xx): a write may have been applied.
    #[error("transient failure (outcome unknown): {0}")]
    Ambiguous(String),
    /// The request was rejected before doing anything, for a reason retrying
    /// will not fix (validation, missing table, access denied, ...).
    #[error("rejected: {0}")]
    Rejected(String),
    /// The object or item does not exist (S3 `NoSuchKey`, scheduler `ResourceNotFound`).
    #[error("not found: {0}")]
    NotFound(String),
    /// What was to be created exists already (S3 `If-None-Match: *` found
    /// an object; Scheduler `ConflictException`: a schedule or group of
    /// that name).
    #[error("already exists")]
    AlreadyExists,
    #[error("stored data does not match the schema: {0}")]
    Codec(#[from] CodecError),
}

/// A transaction item whose condition failed.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedItem {
    pub index: usize,
    pub old: Option<Item>,
}

/// Why a `TransactWriteItems` commit was not applied (or might have been).
#[derive(Debug, thiserror::Error)]
pub enum CommitFailure {
    /// At least one condition failed; nothing was written. One entry per
    /// failing transaction item: its index and its ALL_OLD image (`None`
    /// when the item did not exist).
    #[error("commit precondition failed")]
    Conflict { failed: Vec<FailedItem> },
    /// Another transaction was touching the same items (`TransactionConflict`);
    /// nothing was written and the same transaction may simply be retried.
    #[error("transaction conflict with a concurrent transaction")]
    Contended,
    /// Throttling / capacity; nothing was written.
    #[error("throttled: {0}")]
    Throttled(String),
    /// Outcome unknown (timeout, connection error, 5xx).
    #[error("outcome unknown: {0}")]
    Ambiguous(String),
    /// Rejected for a reason retrying will not fix.
    #[error("rejected: {0}")]
    Rejected(String),
}

fn is_throttle_code(code: &str) -> bool {
    matches!(
        code,
        "ThrottlingException"
            | "Throttling"
            | "ThrottlingError"
            | "ProvisionedThroughputExceeded"
            | "ProvisionedThroughputExceededException"
            | "RequestLimitExceeded"
            | "SlowDown"
            | "TooManyRequestsException"
            | "RequestThrottled"
    )
}

fn is_not_found_code(code: &str) -> bool {
    matches!(code, "NoSuchKey" | "NotFound" | "ResourceNotFoundException")
}

/// Classify any SDK error (all services) by transport outcome and error code.
pub fn classify<E, R>(err: SdkError<E, R>) -> AwsError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    match &err {
        SdkError::ServiceError(ctx) => {
            let e = ctx.err();
            let code = e.code().unwrap_or("");
            let msg = format!("{code}: {}", e.message().unwrap_or(""));
            if is_throttle_code(code) {
                AwsError::Throttled(msg)
            } else if is_not_found_code(code) {
                AwsError::NotFound(msg)
            } else if matches!(code, "PreconditionFailed" | "ConditionalRequestConflict" | "ConflictException") {
                AwsError::AlreadyExists
            } else if code == "ConditionalCheckFailedException" {
                AwsError::ConditionFailed { old: None }
            } else if code.starts_with("InternalServer") || code == "ServiceUnavailable" || code == "InternalError" {
                AwsError::Ambiguous(msg)
            } else {
                AwsError::Rejected(msg)
            }
        }
        SdkError::ConstructionFailure(_) => AwsError::Rejected(format!("{err:?}")),
        // The client itself refused to send it (an invalid request):
        // nothing was written. Every other dispatch failure may have
        // reached AWS: I/O errors, timeouts, and hyper's "connection closed
        // before message completed" (an answer cut by a close), which the
        // SDK reports as neither I/O nor timeout.
        SdkError::DispatchFailure(d) if d.is_user() => AwsError::Rejected(format!("{err:?}")),
        SdkError::ResponseError(r) => {
            // Unparsable response. S3 answers a HEAD/GET of a missing key with
            // a bare 404, which the SDK reports as a raw response.
            AwsError::Ambiguous(format!("unparsable response: {:?}", r.raw()))
        }
        _ => AwsError::Ambiguous(format!("{err:?}")),
    }
}

/// Map a `TransactWriteItems` failure to a [`CommitFailure`]. This is the one
/// place that reads `TransactionCanceledException` cancellation reasons.
///
/// Reason codes (per item, "None" for items that were fine):
/// - `ConditionalCheckFailed` anywhere → [`CommitFailure::Conflict`], with
///   each failing item's ALL_OLD image;
/// - otherwise `TransactionConflict` → [`CommitFailure::Contended`];
/// - otherwise throttling / capacity codes → [`CommitFailure::Throttled`];
/// - anything else (`ValidationError`, `ItemCollectionSizeLimitExceeded`,
///   `DuplicateItem`, moto's `TypeError`) → [`CommitFailure::Rejected`].
pub fn classify_commit<R>(err: SdkError<TransactWriteItemsError, R>) -> CommitFailure
where
    R: std::fmt::Debug,
{
    if let SdkError::ServiceError(ctx) = &err {
        if let TransactWriteItemsError::TransactionCanceledException(tce) = ctx.err() {
            let reasons = tce.cancellation_reasons();
            let codes: Vec<&str> = reasons.iter().map(|r| r.code().unwrap_or("None")).collect();
            return classify_cancellation(
                &codes,
                reasons.iter().map(|r| r.item().cloned()).collect(),
                tce.message().unwrap_or(""),
            );
        }
        if let TransactWriteItemsError::TransactionInProgressException(_) = ctx.err() {
            // The same ClientRequestToken is still being processed: wait and retry.
            return CommitFailure::Contended;
        }
        if let TransactWriteItemsError::IdempotentParameterMismatchException(e) = ctx.err() {
            return CommitFailure::Rejected(format!("idempotency token reused: {e}"));
        }
    }
    match classify(err) {
        AwsError::Throttled(m) => CommitFailure::Throttled(m),
        AwsError::ConditionFailed { old } => {
            CommitFailure::Conflict { failed: vec![FailedItem { index: 0, old: old.map(|b| *b) }] }
        }
        AwsError::Ambiguous(m) => CommitFailure::Ambiguous(m),
        other => CommitFailure::Rejected(other.to_string()),
    }
}

/// The decision table behind [`classify_commit`], on plain reason codes.
pub fn classify_cancellation(codes: &[&str], old: Vec<Option<Item>>, message: &str) -> CommitFailure {
    if codes.contains(&"ConditionalCheckFailed") {
        let failed = codes
            .iter()
            .zip(old.into_iter().chain(std::iter::repeat(None)))
            .enumerate()
            .filter(|(_, (c, _))| **c == "ConditionalCheckFailed")
            .map(|(index, (_, old))| FailedItem { index, old })
            .collect();
        return CommitFailure::Conflict { failed };
    }
    if codes.contains(&"TransactionConflict") {
        return CommitFailure::Contended;
    }
    if codes.iter().any(|c| is_throttle_code(c)) {
        return CommitFailure::Throttled(message.to_owned());
    }
    CommitFailure::Rejected(format!("transaction canceled [{}]: {message}", codes.join(", ")))
}

impl From<AwsError> for StoreError {
    fn from(e: AwsError) -> Self {
        match e {
            AwsError::ConditionFailed { .. } => StoreError::Conflict,
            AwsError::Throttled(m) | AwsError::Ambiguous(m) => StoreError::Unavailable(m),
            AwsError::AlreadyExists => StoreError::backend("S3 PutObject", "object key collision"),
            AwsError::Rejected(m) => StoreError::backend("AWS call rejected", m),
            AwsError::NotFound(m) => StoreError::backend("AWS resource not found", m),
            AwsError::Codec(c) => StoreError::from(c),
        }
    }
}

impl From<CommitFailure> for StoreError {
    fn from(e: CommitFailure) -> Self {
        match e {
            CommitFailure::Conflict { .. } | CommitFailure::Contended => StoreError::Conflict,
            CommitFailure::Throttled(m) | CommitFailure::Ambiguous(m) => StoreError::Unavailable(m),
            CommitFailure::Rejected(m) => StoreError::backend("DynamoDB TransactWriteItems", m),
        }
    }
}

impl From<CodecError> for StoreError {
    fn from(e: CodecError) -> Self {
        StoreError::corrupt("DynamoDB item", e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::s;

    #[test]
    fn condition_failure_wins_and_keeps_old_images_per_item() {
        let mut old = Item::new();
        old.insert("ver".into(), s("3"));
        let f = classify_cancellation(
            &["None", "ConditionalCheckFailed", "TransactionConflict"],
            vec![None, Some(old.clone()), None],
            "m",
        );
        match f {
            CommitFailure::Conflict { failed } => {
                assert_eq!(failed, vec![FailedItem { index: 1, old: Some(old) }]);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_connection_closed_before_the_answer_is_an_unknown_outcome() {
        use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
        use aws_smithy_runtime_api::client::result::ConnectorError;
        use aws_smithy_runtime_api::client::retries::ErrorKind;
        type Failure = SdkError<TransactWriteItemsError, HttpResponse>;
        // What the SDK's hyper connector makes of hyper's IncompleteMessage.
        let closed = || {
            let e = ConnectorError::other(
                "connection closed before message completed".into(),
                Some(ErrorKind::TransientError),
            );
            Failure::dispatch_failure(e)
        };
        assert!(matches!(classify_commit(closed()), CommitFailure::Ambiguous(_)));
        assert!(matches!(classify(closed()), AwsError::Ambiguous(_)));
        let other = Failure::dispatch_failure(ConnectorError::other("unrecognized".into(), None));
        assert!(matches!(classify_commit(other), CommitFailure::Ambiguous(_)));
        let reset = Failure::dispatch_failure(ConnectorError::io("connection reset by peer".into()));
        assert!(matches!(classify_commit(reset), CommitFailure::Ambiguous(_)));
        // An invalid request never left the client.
        let invalid = Failure::dispatch_failure(ConnectorError::user("invalid URI".into()));
        assert!(matches!(classify_commit(invalid), CommitFailure::Rejected(_)));
    }

    #[test]
    fn other_reasons_map_to_their_kinds() {
        assert!(matches!(
            classify_cancellation(&["None", "TransactionConflict"], vec![], ""),
            CommitFailure::Contended
        ));
        assert!(matches!(classify_cancellation(&["ThrottlingError", "None"], vec![], ""), CommitFailure::Throttled(_)));
        assert!(matches!(
            classify_cancellation(&["ProvisionedThroughputExceeded"], vec![], ""),
            CommitFailure::Throttled(_)
        ));
        assert!(matches!(classify_cancellation(&["ValidationError"], vec![], ""), CommitFailure::Rejected(_)));
        assert!(matches!(StoreError::from(CommitFailure::Contended), StoreError::Conflict));
        assert!(matches!(StoreError::from(CommitFailure::Throttled(String::new())), StoreError::Unavailable(_)));
    }
}
