//! Access control at the edge ([`crate::edge`]): authenticate the bearer
//! token, then check the grants the request needs ([`crate::classify`]).
//! `401` for a missing or invalid token (with `WWW-Authenticate`), `403` for
//! a valid one out of scope, `503` when signing keys cannot be fetched; JSON
//! error bodies from `error.rs`. The token is never logged: only the
//! principal's subject.

use std::sync::Arc;

use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use ds_auth::{AuthError, Authenticator, Op, Principal};

use crate::classify::{Access, Class};
use crate::error::ApiError;

/// What the access check decided without waiting.
pub(crate) enum Verdict {
    /// Run the route.
    Allow,
    /// Answer this instead.
    Deny(Response),
    /// A token to verify first (see [`check`]).
    Pending,
}

/// The access check when it needs no waiting: no credential needed, a static
/// token, a malformed header, or a JWT verified recently.
pub(crate) fn check_now(auth: &Authenticator, class: &Class, headers: &HeaderMap) -> Verdict {
    let Access::Grants(needs) = &class.access else {
        return Verdict::Allow;
    };
    match auth.authenticate_now(authorization(headers)) {
        Some(authenticated) => match decide(class, needs, authenticated) {
            Some(denied) => Verdict::Deny(denied),
            None => Verdict::Allow,
        },
        None => Verdict::Pending,
    }
}

/// The refusal to answer instead of running the route, if any.
pub(crate) async fn check(auth: &Authenticator, class: &Class, headers: &HeaderMap) -> Option<Response> {
    let needs = match &class.access {
        Access::Public | Access::OwnToken => return None,
        Access::Grants(needs) => needs,
    };
    decide(class, needs, auth.authenticate(authorization(headers)).await)
}

fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers.get(http::header::AUTHORIZATION).map(|v| v.to_str().unwrap_or(""))
}

fn decide(class: &Class, needs: &[(String, Op)], authenticated: Result<Arc<Principal>, AuthError>) -> Option<Response> {
    let principal = match authenticated {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!(route = class.route, reason = %e, "request not authenticated");
            return Some(ApiError::from(e).into_response());
        }
    };
    for (path, op) in needs {
        if !principal.grants.allows(path, *op) {
            tracing::debug!(route = class.route, subject = %principal.subject, op = op.as_str(), "request out of scope");
            return Some(
                ApiError::forbidden(format!("the token does not grant {} on {path:?}", op.as_str())).into_response(),
            );
        }
    }
    None
}
