//! The append answered straight from the bytes the transport's HTTP/1.1
//! fast path read (`ds_serve`'s [`Surface`]: this module is the surface's
//! side of it), without building an `http::Request` and a `Response`.
//!
//! Through the router, an append is a `Request` with a `HeaderMap` (every
//! header line hashed and stored), a body wrapped twice (metrics, the size
//! limit), three boxed futures (edge, route, handler), and a `Response`
//! whose `HeaderMap` is filled and then written out again: a quarter of a
//! 100 B append's instructions on the memory store (callgrind: 27,168 with
//! them, 20,155 without). Here the same steps run on what was parsed: the append's
//! headers read from the header lines ([`AppendHeaders::from_fields`]), the
//! same [`append`] as the router's handler, and an [`Appended`] whose
//! header lines go to the transport with the headers every response carries
//! ([`crate::layers::decorations`]), the CORS answer, the edge's tracing
//! span ([`crate::edge::request_span`]) and the metrics exchange under the
//! route table's label; a refused append leaves through the edge's own exit
//! ([`crate::edge::leave`]).
//!
//! Only what is certainly a plain append comes here: a target of plain
//! path characters (no query) under `/v1/stream/`, naming a stream that
//! decodes and is not reserved, and no access control (its checks need the
//! router's request). Everything else, errors in the path included, goes
//! through the router as before. Errors found here (a bad header, 413, the
//! service's) are rendered by the router's own code, and are observed and
//! decorated as there. A test serves the same requests both ways and
//! compares the bytes and the metrics (`direct_tests.rs`).

use std::borrow::Cow;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use axum::http::{Method, Version};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use ds_serve::HeadLines;
use tracing::Instrument;

use crate::append::{append, AppendHeaders, Appended};
use crate::cors::{Cors, CorsAnswer};
use crate::error::ApiError;
use crate::metrics::{Exchange, Metrics, Observation};
use crate::routes::{Class, PathKind, RouteId, APPEND_ROUTE};
use crate::{dispatch, edge, layers, AppState};

/// What serves appends directly: the router's state and the edge's CORS
/// and metrics.
// `pub` (in a private module) only because [`crate::App`]'s `ds_serve::Surface`
// route type names it.
pub struct Direct {
    state: AppState,
    cors: Arc<Cors>,
    metrics: Option<Arc<dyn Metrics>>,
    /// The CORS answer to a request without `Origin` (what non-browser
    /// clients send), and the headers after the append's own that go with
    /// it, made once: [`Self::put_common_headers`].
    usual: (CorsAnswer, HeadLines),
    /// How many requests were taken (to show in tests that they were).
    #[cfg(test)]
    pub taken: std::sync::atomic::AtomicUsize,
}

/// How a direct append was answered.
pub(crate) enum Answer {
    /// Appended: the answer, and the CORS headers it carries (for
    /// [`Direct::put_common_headers`] of this one).
    Appended(Appended, CorsAnswer),
    /// The whole response the router would have given to a refused append
    /// (decorated, and observed when its body ends).
    Full(Response),
}

impl Direct {
    pub(crate) fn new(state: AppState, cors: Arc<Cors>, metrics: Option<Arc<dyn Metrics>>) -> Self {
        let answer = cors.answer(&Method::POST, None);
        let mut block = HeadLines::new();
        common_headers(&answer, &mut block);
        Self {
            state,
            cors,
            metrics,
            usual: (answer, block),
            #[cfg(test)]
            taken: Default::default(),
        }
    }

    /// Write the headers an appended answer carries after its own: what the
    /// router's `dispatch::answered` and the edge add.
    pub(crate) fn put_common_headers(&self, cors: &CorsAnswer, out: &mut HeadLines) {
        let (usual, block) = &self.usual;
        if cors == usual {
            out.extend(block);
        } else {
            common_headers(cors, out);
        }
    }

    /// The stream path of a plain append to `target`, or `None` when the
    /// router must serve it (see the module docs).
    pub(crate) fn path<'a>(&self, target: &'a str) -> Option<Cow<'a, str>> {
        let raw = target.strip_prefix(dispatch::STREAM_PREFIX)?;
        if raw.is_empty() || !raw.bytes().all(plain_path_byte) {
            return None;
        }
        let path = crate::request::decode_stream_path(raw).ok()?;
        (!ds_protocol::path::is_reserved(&path)).then_some(path)
    }

    /// The answer to `POST target` (whose stream [`Self::path`] found) with
    /// these header lines and `body`.
    ///
    /// Awaited where it is called: the future is large (the service's
    /// append is inside it), and each move of it is a copy of all of it.
    pub(crate) fn append<'a>(
        &'a self,
        target: &'a str,
        path: Cow<'a, str>,
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone + 'a,
        body: Bytes,
    ) -> impl Future<Output = Answer> + 'a {
        #[cfg(test)]
        self.taken.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let start = Instant::now();
        // A plain path (`Self::path`): no query.
        let route = edge::http_route(PathKind::Stream);
        let span = edge::request_span(&Method::POST, target, None, Version::HTTP_11, route);
        if ds_telemetry::enabled() {
            let traceparent = fields.clone().find(|(name, _)| name.eq_ignore_ascii_case(b"traceparent"));
            if let Some(parent) = traceparent.and_then(|(_, value)| std::str::from_utf8(value).ok()) {
                ds_telemetry::adopt_remote_parent(&span, parent);
            }
        }
        let origin = fields.clone().find(|(name, _)| name.eq_ignore_ascii_case(b"origin")).map(|(_, value)| value);
        let cors = self.cors.answer(&Method::POST, origin);
        async move {
            let (mut read, len, limit) = (false, body.len(), self.state.cfg.max_body_bytes);
            // The body has arrived whole; what the router's size limit
            // would say of it is said here.
            let body = async {
                read = true;
                if len > limit {
                    Err(ApiError::payload_too_large(limit))
                } else {
                    Ok(body)
                }
            };
            let answered = match AppendHeaders::from_fields(fields) {
                Ok(hd) => append(&self.state, path, hd, body).await,
                Err(e) => Err(e),
            };
            // What the router's metrics count: the body, once read.
            let bytes_in = if read { len as u64 } else { 0 };
            match answered {
                Ok(appended) => {
                    edge::record_status(appended.status);
                    if let Some(m) = &self.metrics {
                        m.exchange(&Exchange {
                            route: APPEND_ROUTE,
                            method: Method::POST,
                            status: appended.status.as_u16(),
                            latency: start.elapsed(),
                            bytes_in,
                            bytes_out: 0,
                        });
                    }
                    Answer::Appended(appended, cors)
                }
                Err(e) => Answer::Full(self.refused(e, cors, start, bytes_in)),
            }
        }
        .instrument(span)
    }

    /// The router's response to an append that failed with `e`, leaving
    /// through the edge's own exit ([`edge::leave`]).
    fn refused(&self, e: ApiError, cors: CorsAnswer, start: Instant, bytes_in: u64) -> Response {
        let resp = dispatch::answered(e.into_response()).unwrap_or_else(|e| match e {});
        let observed = self.metrics.as_ref().map(|m| {
            let class = Class::of(RouteId::StreamAppend);
            (Observation::begin(m.clone(), &class, &Method::POST, start), Arc::new(AtomicU64::new(bytes_in)))
        });
        edge::leave(resp, cors, start, observed)
    }
}

fn common_headers(cors: &CorsAnswer, out: &mut HeadLines) {
    layers::decorations(cors, |name, value| out.put(name.as_str().as_bytes(), value.as_bytes()));
}

/// A byte of a path segment (RFC 3986 `pchar`) or `/`: a target made of
/// these is its own path, as `http::Uri` would read it (no query, no
/// fragment, nothing it would refuse).
fn plain_path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=:@/".contains(&b)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn plain_targets_are_their_own_uri_path() {
        let plain = "/v1/stream/a-b_c.d~e/%2F!$&'()*+,;=:@";
        assert!(plain.bytes().all(plain_path_byte));
        let uri: http::Uri = plain.parse().unwrap();
        assert_eq!(uri.path(), plain);
        for other in ["/v1/stream/a?x=1", "/v1/stream/a#f", "/v1/stream/a b", "/v1/stream/\"", "/v1/stream/é", "/a\\b"]
        {
            assert!(!other.bytes().all(plain_path_byte), "{other}");
        }
    }
}

#[cfg(test)]
#[path = "direct_tests.rs"]
mod behaviour;
