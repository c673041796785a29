//! The reserved `__ds` control APIs (§6-7): the webhook signing JWKS and the
//! subscription endpoints, over the engine in [`AppState::subscriptions`]
//! (without one, `501`). Routed before stream operations, so no control
//! path is ever taken for an application stream.

use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use ds_subscriptions::Subscriptions;

use crate::error::ApiError;
use crate::handlers::request_host;
use crate::request::body;
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

pub(crate) async fn dispatch(app: AppState, path: String, req: Request) -> ApiResult {
    let Some(subs) = app.subscriptions.clone() else {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "NOT_IMPLEMENTED",
            "the reserved __ds control APIs (subscriptions) are not enabled on this server",
        ));
    };
    let rest = path.strip_prefix("__ds/").unwrap_or_default();
    if rest == "jwks.json" {
        return match *req.method() {
            Method::GET | Method::HEAD => Ok(jwks(&subs)),
            _ => Err(method_not_allowed()),
        };
    }
    let Some(sub) = rest.strip_prefix("subscriptions/") else {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", "no such control API"));
    };
    let (id, action) = sub.split_once('/').unwrap_or((sub, ""));
    let (id, action) = (id.to_owned(), action.to_owned());
    let (parts, raw) = req.into_parts();
    let base_url = app.base_url(&request_host(&parts)?);
    let auth = crate::headers::get(&parts.headers, "authorization")?.map(str::to_owned);
    let body = body(raw, app.cfg.max_body_bytes.min(MAX_CONTROL_BODY), app.cfg.body_read_timeout).await?;
    let no_content = || Ok(StatusCode::NO_CONTENT.into_response());
    match (&parts.method, action.as_str()) {
        (&Method::PUT, "") => {
            let out = subs.put(&id, &body, &base_url).await?;
            let status = if out.created { StatusCode::CREATED } else { StatusCode::OK };
            Ok(json(status, &out.body))
        }
        (&Method::GET, "") => Ok(json(StatusCode::OK, &subs.get(&id, &base_url).await?)),
        (&Method::DELETE, "") => {
            subs.delete(&id).await?;
            no_content()
        }
        (&Method::POST, "streams") => {
            subs.add_streams(&id, &body).await?;
            no_content()
        }
        (&Method::DELETE, a) if a.starts_with("streams/") => {
            subs.remove_stream(&id, &a["streams/".len()..]).await?;
            no_content()
        }
        (&Method::POST, "claim") => Ok(json(StatusCode::OK, &subs.claim(&id, &body).await?)),
        (&Method::POST, "callback" | "ack") => Ok(json(StatusCode::OK, &subs.ack(&id, auth.as_deref(), &body).await?)),
        (&Method::POST, "release") => {
            subs.release(&id, auth.as_deref(), &body).await?;
            no_content()
        }
        (_, "" | "streams" | "claim" | "callback" | "ack" | "release") => Err(method_not_allowed()),
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
