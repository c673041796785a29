//! Access control at the edge ([`crate::edge`]): authenticate the bearer
//! token, then check the grants the request needs ([`crate::classify`]).
//! `401` for a missing or invalid token (with `WWW-Authenticate`), `403` for
//! a valid one out of scope, `503` when signing keys cannot be fetched; JSON
//! error bodies from `error.rs`. The token is never logged: only the
//! principal's subject.

use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use ds_auth::Authenticator;

use crate::classify::{Access, Class};
use crate::error::ApiError;

/// The refusal to answer instead of running the route, if any.
pub(crate) async fn check(auth: &Authenticator, class: &Class, headers: &HeaderMap) -> Option<Response> {
    let needs = match &class.access {
        Access::Public | Access::OwnToken => return None,
        Access::Grants(needs) => needs,
    };
    let header = headers.get(http::header::AUTHORIZATION).map(|v| v.to_str().unwrap_or(""));
    let principal = match auth.authenticate(header).await {
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
