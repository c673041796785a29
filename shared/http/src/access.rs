//! The access-control layer: authenticate the bearer token, then check the
//! grants the request needs ([`crate::classify`]). `401` for a missing or
//! invalid token (with `WWW-Authenticate`), `403` for a valid one out of
//! scope, `503` when signing keys cannot be fetched; JSON error bodies from
//! `error.rs`. The token is never logged: only the principal's subject.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ds_auth::Authenticator;

use crate::classify::{classify, Access};
use crate::error::ApiError;

pub(crate) async fn access(State(auth): State<Arc<Authenticator>>, req: Request, next: Next) -> Response {
    let class = classify(req.method(), req.uri(), req.headers());
    let needs = match class.access {
        Access::Public | Access::OwnToken => return next.run(req).await,
        Access::Grants(needs) => needs,
    };
    let header = req.headers().get(http::header::AUTHORIZATION).map(|v| v.to_str().unwrap_or(""));
    let principal = match auth.authenticate(header).await {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!(route = class.route, reason = %e, "request not authenticated");
            return ApiError::from(e).into_response();
        }
    };
    for (path, op) in &needs {
        if !principal.grants.allows(path, *op) {
            tracing::debug!(route = class.route, subject = %principal.subject, op = op.as_str(), "request out of scope");
            return ApiError::forbidden(format!("the token does not grant {} on {path:?}", op.as_str()))
                .into_response();
        }
    }
    next.run(req).await
}
