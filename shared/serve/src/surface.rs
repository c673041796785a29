//! [`Surface`]: what the transport asks of the protocol surface above it.
//!
//! Every request can be served as an `http::Request` (the surface is a
//! tower service): hyper hands over every request it parses, and the fast
//! path (`fast.rs`) any it parsed itself. The fast path first shows a plain
//! HTTP/1.1 request to [`Surface::raw_route`] as its bytes
//! ([`RawRequest`]); the surface answers it from them
//! ([`Surface::answer_raw`]), or declines and gets it as a `Request`.
//! Either way the transport frames the answer as hyper would (`write.rs`),
//! so which way a request went shows in no byte.

use std::convert::Infallible;
use std::future::Future;
use std::ops::Range;

use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use http::{Method, StatusCode};
use tower::Service;

use crate::parse::Field;

/// The protocol surface as a connection serves it.
pub trait Surface:
    Service<Request, Response = Response, Error = Infallible, Future: Send> + Clone + Send + 'static
{
    /// What [`Self::raw_route`] found in a request it answers from bytes.
    type RawRoute<'a>: Send;

    /// Whether the surface answers `req` straight from its bytes: with what
    /// (say, the resource it names), or `None` to decline, and the request
    /// is built as a `Request` and served by the service. Only plain `POST`
    /// and `PUT` requests whose body has arrived whole are shown.
    fn raw_route<'a>(&'a self, req: &RawRequest<'a>) -> Option<Self::RawRoute<'a>>;

    /// Answers `req`, taken by [`Self::raw_route`], putting the answer's
    /// header lines (all but the framing: `Date`, `Connection`, and the
    /// length of a body if it sets none) into `head` (empty, lent by the
    /// connection) and giving it back in [`RawAnswer::Head`]. Awaited where
    /// it is called: the future may be large.
    fn answer_raw<'a>(
        &'a self,
        route: Self::RawRoute<'a>,
        req: RawRequest<'a>,
        head: HeadLines,
    ) -> impl Future<Output = RawAnswer> + Send + 'a;
}

/// Any axum router, served with no answer from bytes.
impl Surface for axum::Router {
    type RawRoute<'a> = Infallible;

    fn raw_route<'a>(&'a self, _req: &RawRequest<'a>) -> Option<Infallible> {
        None
    }

    async fn answer_raw<'a>(&'a self, route: Infallible, _: RawRequest<'a>, _: HeadLines) -> RawAnswer {
        match route {}
    }
}

/// A request the fast path parsed, as the bytes it read.
pub struct RawRequest<'a> {
    /// `POST` or `PUT`.
    pub method: &'a Method,
    /// The request target as sent (origin form: starts with `/`).
    pub target: &'a str,
    pub headers: RawHeaders<'a>,
    /// The whole body.
    pub body: Bytes,
}

/// The header lines of a [`RawRequest`], in the order sent.
#[derive(Clone, Copy)]
pub struct RawHeaders<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) fields: &'a [Field],
}

impl<'a> RawHeaders<'a> {
    /// Every line as `(name, value)`, names as sent (any case).
    pub fn iter(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone + 'a {
        let bytes = self.bytes;
        self.fields.iter().map(move |f| (&bytes[f.name.clone()], &bytes[f.value.clone()]))
    }

    /// The value of the first line named `name` (ASCII case ignored).
    pub fn get(&self, name: &str) -> Option<&'a [u8]> {
        self.iter().find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes())).map(|(_, v)| v)
    }
}

/// The header lines of an answer from bytes, in order; also a block of
/// lines made once and put into many answers ([`HeadLines::extend`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HeadLines {
    bytes: Vec<u8>,
    lines: Vec<(Range<usize>, Range<usize>)>,
}

impl HeadLines {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the line `name: value` (a name of the `http` types: lower case).
    pub fn put(&mut self, name: &[u8], value: &[u8]) {
        let at = self.bytes.len();
        self.bytes.extend_from_slice(name);
        self.bytes.extend_from_slice(value);
        self.lines.push((at..at + name.len(), at + name.len()..at + name.len() + value.len()));
    }

    /// Adds every line of `block`.
    pub fn extend(&mut self, block: &HeadLines) {
        let at = self.bytes.len();
        self.bytes.extend_from_slice(&block.bytes);
        let shift = |r: &Range<usize>| r.start + at..r.end + at;
        self.lines.extend(block.lines.iter().map(|(n, v)| (shift(n), shift(v))));
    }

    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.lines.clear();
    }

    /// The lines as `(name, value)`.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.lines.iter().map(|(n, v)| (&self.bytes[n.clone()], &self.bytes[v.clone()]))
    }
}

/// The surface's answer to a [`RawRequest`].
pub enum RawAnswer {
    /// A response with no body: this status and the lines put into the
    /// [`HeadLines`] lent.
    Head(StatusCode, HeadLines),
    /// A whole response (the lines put so far are dropped).
    Full(Response),
}
