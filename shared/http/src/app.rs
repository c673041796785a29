//! [`App`]: the whole HTTP surface as one clonable tower service — the
//! [`crate::edge`], then the [`crate::dispatch`]. The local server serves it
//! directly; [`crate::router_with`] wraps it in an axum `Router` for hosts
//! that want one (the Lambda function, tests).
//!
//! Served directly, an append skips the router's own per-request work
//! (its boxed clone of the fallback service, boxed future, and the
//! URL-parameter extensions it inserts): ~5% of an append's instructions
//! and 5 of its ~40 allocations (callgrind, memory store).
//!
//! It also carries what serves a plain append without the `http` types
//! ([`crate::direct`]), which the transport's HTTP/1.1 fast path uses
//! through `ds_serve::Surface`.

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::http::Method;
use axum::response::Response;
use ds_serve::{HeadLines, RawAnswer, RawRequest, Surface};
use tower::Service;

use crate::direct::{Answer, Direct};
use crate::edge::EdgeService;

type Inner = EdgeService;

/// The protocol's HTTP service (see the module docs); built by
/// [`crate::app_with`].
#[derive(Clone)]
pub struct App {
    inner: Inner,
    /// `None` with access control (see [`crate::direct`]).
    direct: Option<Arc<Direct>>,
}

impl App {
    pub(crate) fn new(inner: Inner, direct: Option<Direct>) -> Self {
        Self { inner, direct: direct.map(Arc::new) }
    }

    pub(crate) fn direct(&self) -> Option<&Direct> {
        self.direct.as_deref()
    }

    /// This app with every request served through the router (to compare
    /// the two ways in tests).
    #[cfg(test)]
    pub(crate) fn without_direct(mut self) -> Self {
        self.direct = None;
        self
    }
}

impl Service<Request> for App {
    type Response = Response;
    type Error = Infallible;
    type Future = <Inner as Service<Request>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        self.inner.call(req)
    }
}

/// The surface as the transport serves it: every request through the
/// [`App`]'s edge and dispatch, but a plain append (see the module docs)
/// straight from its bytes.
impl Surface for App {
    type RawRoute<'a> = (&'a Direct, Cow<'a, str>);

    fn raw_route<'a>(&'a self, req: &RawRequest<'a>) -> Option<Self::RawRoute<'a>> {
        let direct = self.direct()?;
        if *req.method != Method::POST {
            return None;
        }
        Some((direct, direct.path(req.target)?))
    }

    async fn answer_raw<'a>(
        &'a self,
        (direct, path): Self::RawRoute<'a>,
        req: RawRequest<'a>,
        mut head: HeadLines,
    ) -> RawAnswer {
        match direct.append(req.target, path, req.headers.iter(), req.body).await {
            Answer::Appended(appended, cors) => {
                // No length line: the transport says an empty body's as
                // hyper says it (after the others, on a producer's `200`).
                appended.each_header(|name, value| head.put(name.as_str().as_bytes(), value));
                direct.put_common_headers(&cors, &mut head);
                RawAnswer::Head(appended.status, head)
            }
            Answer::Full(resp) => RawAnswer::Full(resp),
        }
    }
}
