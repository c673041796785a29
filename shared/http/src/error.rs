//! The one place service errors become HTTP responses.
//!
//! Bodies are `{"error":{"code":…,"message":…}}`; clients must not need them
//! (§5.2): every machine-relevant fact is also a status code or header.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ds_core::{ServiceError, StoreError};
use ds_protocol::Offset;

use crate::headers as h;

/// An error response, convertible from anything the handlers can fail with.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub headers: Vec<(&'static str, HeaderValue)>,
    /// Extra members of the `error` object (e.g. `current_holder`).
    pub details: Vec<(&'static str, serde_json::Value)>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), headers: Vec::new(), details: Vec::new() }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BAD_REQUEST", message)
    }

    /// The 413 answer. The rest of the body is never read, so the connection
    /// cannot be reused: say so (RFC 9112 §9.6) instead of closing it
    /// unannounced.
    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE", format!("request body exceeds {limit} bytes"))
            .header("connection", "close")
    }

    /// 503: every live-reader slot is taken. `Retry-After` is spread over a
    /// few seconds so refused readers do not all come back at once.
    pub fn too_many_live_readers(max: usize, random: &ds_core::Random) -> Self {
        let wait = random.in_range(1..=4);
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "TOO_MANY_LIVE_READERS",
            format!("this server already serves its maximum of {max} live readers (long-poll and SSE); retry later"),
        )
        .header("retry-after", wait)
    }

    /// 408: the request body stopped arriving. The rest is never read, so
    /// the connection is closed.
    pub fn body_timeout(idle: std::time::Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "REQUEST_TIMEOUT",
            format!("the request body stalled for more than {} ms", idle.as_millis()),
        )
        .header("connection", "close")
    }

    fn header(mut self, name: &'static str, value: impl ToString) -> Self {
        if let Ok(v) = HeaderValue::from_str(&value.to_string()) {
            self.headers.push((name, v));
        }
        self
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        let msg = e.to_string();
        match e {
            ServiceError::Invalid(_) | ServiceError::BadRequest(_) => Self::bad_request(msg),
            ServiceError::NotFound | ServiceError::Expired(_) => Self::new(StatusCode::NOT_FOUND, "NOT_FOUND", msg),
            ServiceError::Gone => Self::new(StatusCode::GONE, "GONE", msg),
            ServiceError::NotRetained { earliest } => {
                let mut err = Self::new(StatusCode::GONE, "OFFSET_NOT_RETAINED", msg)
                    .header(h::STREAM_EARLIEST_OFFSET, Offset(earliest));
                err.details.push(("earliest_offset", Offset(earliest).to_string().into()));
                err
            }
            ServiceError::Conflict(_) => Self::new(StatusCode::CONFLICT, "CONFLICT", msg),
            ServiceError::TailMoved { .. } => Self::new(StatusCode::CONFLICT, "TAIL_MOVED", msg),
            ServiceError::StreamClosed { tail } => Self::new(StatusCode::CONFLICT, "STREAM_CLOSED", msg)
                .header(h::STREAM_CLOSED, "true")
                .header(h::STREAM_NEXT_OFFSET, Offset(tail)),
            ServiceError::StaleEpoch { current } => {
                Self::new(StatusCode::FORBIDDEN, "STALE_EPOCH", msg).header(h::PRODUCER_EPOCH, current)
            }
            ServiceError::SeqGap { expected, received } => Self::new(StatusCode::CONFLICT, "SEQUENCE_GAP", msg)
                .header(h::PRODUCER_EXPECTED_SEQ, expected)
                .header(h::PRODUCER_RECEIVED_SEQ, received),
            ServiceError::Reserved(_) => Self::new(StatusCode::FORBIDDEN, "RESERVED_STREAM", msg),
            ServiceError::IncarnationChanged { .. } => Self::new(StatusCode::CONFLICT, "INCARNATION_CHANGED", msg),
            ServiceError::InlineRejected { processor, position, reason } => {
                let mut err = Self::new(StatusCode::BAD_REQUEST, "APPEND_REJECTED", msg);
                err.details.push(("processor", processor.into()));
                err.details.push(("position", position.into()));
                err.details.push(("reason", reason.into()));
                err
            }
            ServiceError::InlineUnavailable { processor, .. } => {
                let mut err = Self::new(StatusCode::SERVICE_UNAVAILABLE, "PROCESSOR_UNAVAILABLE", msg);
                err.details.push(("processor", processor.into()));
                err
            }
            ServiceError::Contention => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "CONTENTION", msg).header("retry-after", 1)
            }
            ServiceError::Store(StoreError::Unavailable(_)) => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", msg).header("retry-after", 1)
            }
            ServiceError::Store(StoreError::Conflict) => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "CONTENTION", msg).header("retry-after", 1)
            }
            ServiceError::Store(StoreError::TooLarge(_)) => {
                Self::new(StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE", msg)
            }
            ServiceError::Store(StoreError::Backend { .. } | StoreError::Corrupt { .. }) => {
                tracing::error!(error = %msg, "storage failure");
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", "internal storage error")
            }
        }
    }
}

impl From<ds_protocol::ProtocolError> for ApiError {
    fn from(e: ds_protocol::ProtocolError) -> Self {
        Self::bad_request(e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = serde_json::Map::new();
        error.insert("code".into(), self.code.into());
        error.insert("message".into(), self.message.into());
        for (name, value) in self.details {
            error.insert(name.into(), value);
        }
        let body = serde_json::json!({ "error": error }).to_string();
        let mut resp = (self.status, body).into_response();
        resp.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in self.headers {
            resp.headers_mut().insert(name, value);
        }
        resp
    }
}

impl ApiError {
    /// 403: a valid credential without the needed grant.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "FORBIDDEN", message)
    }
}

impl ApiError {
    /// 429: the credential's request budget is spent (§12.5); `Retry-After`
    /// says when its next request is admitted.
    pub fn rate_limited(subject: &str, spent: &ds_auth::budget::Exhausted) -> Self {
        let secs = spent.retry_after_secs();
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "RATE_LIMITED",
            format!("the request budget of {subject:?} ({}) is spent; retry after {secs} s", spent.rate),
        )
        .header("retry-after", secs)
    }
}

impl From<ds_auth::AuthError> for ApiError {
    fn from(e: ds_auth::AuthError) -> Self {
        use ds_auth::AuthError as A;
        let msg = e.to_string();
        match e {
            A::KeysUnavailable => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", msg).header("retry-after", 5)
            }
            A::Missing | A::NotBearer => Self::new(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", msg)
                .header("www-authenticate", "Bearer realm=\"durable-streams\""),
            A::Expired | A::Invalid(_) => Self::new(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", msg)
                .header("www-authenticate", "Bearer realm=\"durable-streams\", error=\"invalid_token\""),
        }
    }
}

impl From<ds_subscriptions::SubscriptionError> for ApiError {
    fn from(e: ds_subscriptions::SubscriptionError) -> Self {
        use ds_subscriptions::SubscriptionError as S;
        let msg = e.to_string();
        match e {
            S::Invalid(_) | S::WrongKind(_) => Self::bad_request(msg),
            S::WebhookUrlRejected(_) => Self::new(StatusCode::BAD_REQUEST, "WEBHOOK_URL_REJECTED", msg),
            S::NotFound => Self::new(StatusCode::NOT_FOUND, "SUBSCRIPTION_NOT_FOUND", msg),
            S::ConfigConflict => Self::new(StatusCode::CONFLICT, "SUBSCRIPTION_EXISTS", msg),
            S::Unauthorized(_) => Self::new(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", msg)
                .header("www-authenticate", "Bearer realm=\"durable-streams\""),
            S::Forbidden(_) => Self::forbidden(msg),
            S::Fenced => Self::new(StatusCode::CONFLICT, "FENCED", msg),
            S::AlreadyClaimed { holder, generation } => {
                let mut err = Self::new(StatusCode::CONFLICT, "ALREADY_CLAIMED", msg);
                err.details.push(("current_holder", holder.into()));
                err.details.push(("generation", generation.into()));
                err
            }
            S::TooLarge(_) => Self::new(StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE", msg),
            S::Contention => Self::new(StatusCode::SERVICE_UNAVAILABLE, "CONTENTION", msg).header("retry-after", 1),
            S::Service(e) => e.into(),
        }
    }
}

impl From<ds_processor_host::OperatorError> for ApiError {
    fn from(e: ds_processor_host::OperatorError) -> Self {
        use ds_processor_host::OperatorError as O;
        let msg = e.to_string();
        match e {
            O::UnknownProcessor { .. } => Self::new(StatusCode::NOT_FOUND, "UNKNOWN_PROCESSOR", msg),
            O::NotRegistered { .. } => Self::new(StatusCode::NOT_FOUND, "NOT_REGISTERED", msg),
            O::StreamNotFound { .. } => Self::new(StatusCode::NOT_FOUND, "NOT_FOUND", msg),
            O::NotJson { .. } => Self::new(StatusCode::CONFLICT, "NOT_A_JSON_STREAM", msg),
            O::NotInline { .. } => Self::new(StatusCode::CONFLICT, "NOT_INLINE", msg),
            O::NotMaterialized { .. } => Self::new(StatusCode::CONFLICT, "NOT_MATERIALIZED", msg),
            O::RowNotFound { .. } => Self::new(StatusCode::NOT_FOUND, "ROW_NOT_FOUND", msg),
            O::Conflict(_) => Self::new(StatusCode::CONFLICT, "CONFLICT", msg),
            // The view is over its configured bounds: an operator must raise
            // them (or compact the stream); retrying will not help.
            O::StateLimit { .. } => Self::new(StatusCode::INSUFFICIENT_STORAGE, "STATE_LIMIT", msg),
            O::Runner(e) => e.into(),
            O::Unavailable(_) => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", msg).header("retry-after", 1)
            }
        }
    }
}

impl From<ds_processor::RunnerError> for ApiError {
    fn from(e: ds_processor::RunnerError) -> Self {
        use ds_processor::{JournalError as J, ProgressError as P, RunnerError as R};
        let msg = e.to_string();
        let unavailable = |msg| Self::new(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", msg).header("retry-after", 1);
        match e {
            // The operator's view is stale: read the current revision and decide again.
            R::RevisionMismatch { current, .. } => {
                Self::new(StatusCode::CONFLICT, "REVISION_MISMATCH", msg).header(h::PROCESSOR_CURSOR_REVISION, current)
            }
            R::InvalidPosition { .. } => Self::new(StatusCode::BAD_REQUEST, "INVALID_POSITION", msg),
            R::Journal(J::IncarnationChanged { .. }) => Self::new(StatusCode::CONFLICT, "INCARNATION_CHANGED", msg),
            R::Journal(J::StreamNotFound) => Self::new(StatusCode::NOT_FOUND, "NOT_FOUND", msg),
            R::Progress(P::Rejected(_)) | R::Contended(_) => {
                Self::new(StatusCode::CONFLICT, "FENCED", msg).header("retry-after", 1)
            }
            R::Drained => Self::new(StatusCode::SERVICE_UNAVAILABLE, "SHUTTING_DOWN", msg),
            R::Journal(J::Unavailable(_)) | R::Progress(P::Unavailable(_)) | R::Recovery(_) => unavailable(msg),
            // An operator must decide (the events are gone): retrying alone will not help.
            R::Journal(J::NotRetained { .. }) => Self::new(StatusCode::GONE, "OFFSET_NOT_RETAINED", msg),
            R::Progress(P::TooLarge(_)) | R::Contract(_) | R::StateCodec(_) => {
                tracing::error!(error = %msg, "processor failure");
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "PROCESSOR_FAILURE", msg)
            }
        }
    }
}
