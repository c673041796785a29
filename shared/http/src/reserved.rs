//! The reserved `__ds` control APIs (§6-7): the webhook signing JWKS and the
//! subscription endpoints, over the engine in [`AppState::subscriptions`]
//! (without one, `501`). Their rows of the route table come before stream
//! operations, so no control path is ever taken for an application stream.
//! What a subscription reaches is checked by the engine against the caller
//! the edge passes along ([`Caller`]).

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ds_subscriptions::{Guard, Subscriptions};

use crate::access::{Caller, Nobody};
use crate::error::ApiError;
use crate::request::body;
use crate::request::request_host;
use crate::routes::RouteId as R;
use crate::AppState;

type ApiResult = Result<Response, ApiError>;

/// Largest control request body (subscription configs, membership lists).
const MAX_CONTROL_BODY: usize = 1024 * 1024;

fn json(status: StatusCode, value: &serde_json::Value) -> Response {
    let mut resp = (status, value.to_string()).into_response();
    resp.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp.headers_mut().insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED", "method not allowed on this control path")
}

/// The reserved route `route` (its row of [`crate::routes`]) on `path` (the
/// decoded `__ds/…` path).
pub(crate) async fn dispatch(app: AppState, route: R, path: String, req: Request) -> ApiResult {
    let Some(subs) = app.subscriptions.clone() else {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "NOT_IMPLEMENTED",
            "the reserved __ds control APIs (subscriptions) are not enabled on this server",
        ));
    };
    match route {
        R::Jwks => return Ok(jwks(&subs)),
        R::JwksOther => return Err(method_not_allowed()),
        R::ReservedOther => return Err(ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", "no such control API")),
        _ => {}
    }
    let sub = path.strip_prefix("__ds/subscriptions/").unwrap_or_default();
    let (id, action) = sub.split_once('/').unwrap_or((sub, ""));
    let (id, action) = (id.to_owned(), action.to_owned());
    let (parts, raw) = req.into_parts();
    // What the edge put there for the rows whose grants the subscription
    // API checks; nothing (a request that did not come through the edge)
    // reaches nothing.
    let caller: &dyn Guard = match parts.extensions.get::<Caller>() {
        Some(caller) => caller,
        None => &Nobody,
    };
    let base_url = app.base_url(&request_host(&parts)?);
    let auth = crate::headers::get(&parts.headers, "authorization")?.map(str::to_owned);
    let body = body(raw, app.cfg.max_body_bytes.min(MAX_CONTROL_BODY), app.cfg.body_read_timeout).await?;
    let no_content = || Ok(StatusCode::NO_CONTENT.into_response());
    match route {
        R::SubscriptionPut => {
            let out = subs.put(&id, &body, &base_url, caller).await?;
            let status = if out.created { StatusCode::CREATED } else { StatusCode::OK };
            Ok(json(status, &out.body))
        }
        R::SubscriptionGet => Ok(json(StatusCode::OK, &subs.get(&id, &base_url, caller).await?)),
        R::SubscriptionDelete => {
            subs.delete(&id).await?;
            no_content()
        }
        R::SubscriptionAddStreams => {
            subs.add_streams(&id, &body, caller).await?;
            no_content()
        }
        R::SubscriptionRemoveStream => {
            subs.remove_stream(&id, action.strip_prefix("streams/").unwrap_or_default()).await?;
            no_content()
        }
        R::SubscriptionClaim => Ok(json(StatusCode::OK, &subs.claim(&id, &body, caller).await?)),
        R::SubscriptionAck | R::SubscriptionCallback => {
            Ok(json(StatusCode::OK, &subs.ack(&id, auth.as_deref(), &body).await?))
        }
        R::SubscriptionRelease => {
            subs.release(&id, auth.as_deref(), &body).await?;
            no_content()
        }
        _ if matches!(action.as_str(), "" | "streams" | "claim" | "callback" | "ack" | "release") => {
            Err(method_not_allowed())
        }
        _ => Err(ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", "no such subscription API")),
    }
}

/// `GET …/__ds/jwks.json` (§6.5).
fn jwks(subs: &Subscriptions) -> Response {
    let mut resp = (StatusCode::OK, subs.jwks().to_string()).into_response();
    let headers = resp.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/jwk-set+json"));
    headers.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=300"));
    resp
}
