//! Access control at the edge ([`crate::edge`]): authenticate the bearer
//! token, spend one request of its budget (if rate limits are on), then
//! check the grants its row of the route table needs ([`crate::routes`]).
//! `401` for a missing or invalid token (with `WWW-Authenticate`), `429`
//! with `Retry-After` for a spent budget, `403` for a valid one out of
//! scope, `503` when signing keys cannot be fetched; JSON error bodies from
//! `error.rs`. The token is never logged: only the principal's subject.
//!
//! Rows with grants only the subscription API can check (on what a
//! subscription reaches) get the caller in the request's extensions
//! ([`Caller`]).

use std::sync::Arc;

use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use ds_auth::{AuthError, Authenticator, Budgets, Op, Principal};

use crate::error::ApiError;
use crate::routes::{Access, Class};

/// What access control is configured with.
pub(crate) struct Gate {
    pub auth: Arc<Authenticator>,
    /// Request budgets per credential (`None`: no rate limits).
    pub budgets: Option<Arc<Budgets>>,
}

/// What the access check decided without waiting.
pub(crate) enum Verdict {
    /// Run the route, as this caller (`None`: a route that needs no token).
    Allow(Option<Arc<Principal>>),
    /// Answer this instead.
    Deny(Response),
    /// A token to verify first (see [`check`]).
    Pending,
}

/// The access check when it needs no waiting: no credential needed, a static
/// token, a malformed header, or a JWT verified recently.
pub(crate) fn check_now(gate: &Gate, class: &Class, headers: &HeaderMap) -> Verdict {
    if !needs_token(class) {
        return Verdict::Allow(None);
    }
    match gate.auth.authenticate_now(authorization(headers)) {
        Some(authenticated) => match decide(gate, class, authenticated) {
            Ok(principal) => Verdict::Allow(Some(principal)),
            Err(denied) => Verdict::Deny(denied.into_response()),
        },
        None => Verdict::Pending,
    }
}

/// The access check, waiting for a token's verification if needed.
pub(crate) async fn check(gate: &Gate, class: &Class, headers: &HeaderMap) -> Result<Option<Arc<Principal>>, Response> {
    if !needs_token(class) {
        return Ok(None);
    }
    match decide(gate, class, gate.auth.authenticate(authorization(headers)).await) {
        Ok(principal) => Ok(Some(principal)),
        Err(denied) => Err(denied.into_response()),
    }
}

fn needs_token(class: &Class) -> bool {
    matches!(class.row.access, Access::Token | Access::Grants(_))
}

fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers.get(http::header::AUTHORIZATION).map(|v| v.to_str().unwrap_or(""))
}

fn decide(
    gate: &Gate,
    class: &Class,
    authenticated: Result<Arc<Principal>, AuthError>,
) -> Result<Arc<Principal>, ApiError> {
    let route = class.row.label;
    let principal = authenticated.map_err(|e| {
        tracing::debug!(route, reason = %e, "request not authenticated");
        ApiError::from(e)
    })?;
    // Every authenticated request spends budget, refused ones included: a
    // credential cannot probe for free.
    if let Some(spent) = gate.budgets.as_ref().and_then(|b| b.take(&principal.subject).err()) {
        tracing::debug!(route, subject = %principal.subject, "request budget spent");
        return Err(ApiError::rate_limited(&principal.subject, &spent));
    }
    for (path, op) in &class.needs {
        if !principal.grants.allows(path, *op) {
            tracing::debug!(route, subject = %principal.subject, op = op.as_str(), "request out of scope");
            return Err(ApiError::forbidden(format!("the token does not grant {} on {path:?}", op.as_str())));
        }
    }
    Ok(principal)
}

/// Who asks the subscription API for something a subscription reaches: put
/// in the request's extensions by the edge for the rows that defer grants
/// to it. Absent (a request that bypassed the edge): it reaches nothing.
#[derive(Clone)]
pub(crate) enum Caller {
    /// Access control is off.
    Unchecked,
    Principal(Arc<Principal>),
}

impl ds_subscriptions::Guard for Caller {
    fn allows(&self, path: &str, need: ds_subscriptions::Need) -> bool {
        let op = match need {
            ds_subscriptions::Need::Read => Op::Read,
            ds_subscriptions::Need::Write => Op::Write,
        };
        match self {
            Caller::Unchecked => true,
            Caller::Principal(p) => p.grants.allows(path, op),
        }
    }
}

/// The guard of a request that carries no [`Caller`].
pub(crate) struct Nobody;

impl ds_subscriptions::Guard for Nobody {
    fn allows(&self, _: &str, _: ds_subscriptions::Need) -> bool {
        false
    }
}
