//! The route table: every request the HTTP surface answers is one row of
//! method × path kind (× the condition that splits a kind) → the grants it
//! needs, on which paths, and the label metrics count it under.
//!
//! The table is the routing: [`classify`] finds a request's row (the first
//! that matches), the access check ([`crate::access`]) checks that row's
//! grants, metrics count its label, and the dispatch ([`crate::dispatch`])
//! runs the handler of its [`RouteId`] — an exhaustive match, so a route
//! cannot be added without an id, and a test checks every id has exactly one
//! row. The end-to-end walk (`tests/e2e/src/access.rs`) sends one request
//! per row with exactly the grants the row names (allowed), without each of
//! them and with each on a neighbouring prefix (`403`), and with no or a bad
//! token (`401`).
//!
//! Grants on [`Target::Watched`] and [`Target::WakeStream`] need the
//! subscription's configuration (the request body, or the stored record):
//! the edge checks the rest and hands the caller to the subscription API,
//! which checks those (`ds_subscriptions::reach`).

use std::borrow::Cow;

use axum::http::{HeaderMap, Method, Uri};
use ds_auth::Op;
use ds_protocol::path::is_reserved;

use crate::headers as h;
use crate::processors::{Route as OperatorRoute, PROCESSORS_PATH};
use crate::request::decode_stream_path;

/// The path a metrics scrape is checked against (`read` on it).
pub const METRICS_PATH: &str = "__ds/metrics";

macro_rules! route_ids {
    ($($(#[$doc:meta])* $id:ident,)*) => {
        /// A row of [`TABLE`], by name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum RouteId { $($(#[$doc])* $id,)* }

        impl RouteId {
            /// Every id (a test checks each has exactly one row).
            pub const ALL: &'static [RouteId] = &[$(RouteId::$id,)*];
        }
    };
}

route_ids! {
    Preflight,
    Health,
    Metrics,
    ProcessorsList,
    ProcessorShow,
    ProcessorState,
    ProcessorControl,
    ProcessorBadPath,
    NoStreamPath,
    StreamBadPath,
    Jwks,
    JwksOther,
    SubscriptionPut,
    SubscriptionGet,
    SubscriptionDelete,
    SubscriptionAddStreams,
    SubscriptionRemoveStream,
    SubscriptionClaim,
    SubscriptionAck,
    SubscriptionCallback,
    SubscriptionRelease,
    SubscriptionOther,
    ReservedOther,
    StreamFork,
    StreamCreate,
    StreamAppend,
    StreamSse,
    StreamLongPoll,
    StreamRead,
    StreamHead,
    StreamDelete,
    StreamOther,
    Unrouted,
}

/// What a path is, before the method is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// Any path (the CORS preflight row).
    Any,
    /// `/health`
    Health,
    /// `/metrics`
    Metrics,
    /// `/v1/processors`
    ProcessorsList,
    /// `/v1/processors/{slug}/streams/{stream}`
    ProcessorShow,
    /// `/v1/processors/{slug}/state/{stream}`
    ProcessorState,
    /// `/v1/processors/{slug}/{re-reduce|reprocess-from|skip-through}/{stream}`
    ProcessorControl,
    /// `/v1/processors/…` that does not parse
    ProcessorBadPath,
    /// `/v1/stream` and `/v1/stream/`: no stream named
    NoStreamPath,
    /// `/v1/stream/{path}` whose path is not a valid stream path
    StreamBadPath,
    /// `/v1/stream/__ds/jwks.json`
    Jwks,
    /// `/v1/stream/__ds/subscriptions/{id}[/…]`
    Subscription(SubAction),
    /// any other `/v1/stream/__ds[/…]`
    Reserved,
    /// `/v1/stream/{path}`: an application stream
    Stream,
    /// anything else
    Other,
}

/// The part of a subscription path after its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubAction {
    /// `…/{id}`
    Itself,
    /// `…/{id}/streams`
    Streams,
    /// `…/{id}/streams/{path}`
    Stream,
    Claim,
    Ack,
    Callback,
    Release,
    /// In a row: any action; in a request: one that is none of the above.
    Other,
}

/// What splits one path kind further.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    Always,
    /// A `Stream-Forked-From` header.
    Forked,
    /// `live=long-poll`
    LongPoll,
    /// `live=sse`
    Sse,
}

/// The paths a grant is checked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The request's stream path (decoded).
    Stream,
    /// The path `Stream-Forked-From` names.
    ForkSource,
    /// `__ds/subscriptions/{id}`.
    Subscription,
    /// The reserved path itself (`__ds/…`).
    Reserved,
    /// [`METRICS_PATH`].
    Metrics,
    /// [`PROCESSORS_PATH`].
    Processors,
    /// The `{stream}` of an operator API path.
    ProcessorStream,
    /// Every stream the subscription can name: its pattern's literal prefix
    /// and its explicit streams (from the body, or the stored record);
    /// checked by the subscription API.
    Watched,
    /// A pull-wake subscription's wake stream (from the body); checked by the
    /// subscription API.
    WakeStream,
}

impl Target {
    /// Known only to the subscription API, which checks it (see the module docs).
    pub fn deferred(self) -> bool {
        matches!(self, Target::Watched | Target::WakeStream)
    }
}

/// What a row needs from access control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone.
    Public,
    /// Carries its own token (subscription callback, ack, release:
    /// protocol §12.9), so no access token is asked for.
    OwnToken,
    /// A valid access token, no grant (the handler answers `400`).
    Token,
    /// A valid access token with each of these grants.
    Grants(&'static [(Op, Target)]),
}

/// One row of the table.
#[derive(Debug)]
pub struct Row {
    pub id: RouteId,
    /// Empty: every method.
    pub methods: &'static [Method],
    pub path: PathKind,
    pub when: When,
    pub access: Access,
    /// The `route` label of metrics (several rows may share one).
    pub label: &'static str,
}

impl Row {
    /// `long-poll` or `sse` for live reads (they hold a connection open).
    pub fn live(&self) -> Option<&'static str> {
        match self.when {
            When::LongPoll => Some("long-poll"),
            When::Sse => Some("sse"),
            _ => None,
        }
    }

    fn matches(&self, method: &Method, kind: PathKind, forked: bool, live: Option<When>) -> bool {
        let path = match (self.path, kind) {
            (PathKind::Any, _) => true,
            (PathKind::Subscription(SubAction::Other), PathKind::Subscription(_)) => true,
            (row, request) => row == request,
        };
        let when = match self.when {
            When::Always => true,
            When::Forked => forked,
            live_mode => live == Some(live_mode),
        };
        path && when && (self.methods.is_empty() || self.methods.contains(method))
    }
}

const fn row(id: RouteId, methods: &'static [Method], path: PathKind, access: Access, label: &'static str) -> Row {
    Row { id, methods, path, when: When::Always, access, label }
}

const fn stream(id: RouteId, methods: &'static [Method], when: When, access: Access, label: &'static str) -> Row {
    Row { id, methods, path: PathKind::Stream, when, access, label }
}

const fn sub(id: RouteId, methods: &'static [Method], action: SubAction, access: Access, label: &'static str) -> Row {
    row(id, methods, PathKind::Subscription(action), access, label)
}

const ANY: &[Method] = &[];
const GET: &[Method] = &[Method::GET];
const READ: &[Method] = &[Method::GET, Method::HEAD];
const PUT: &[Method] = &[Method::PUT];
const POST: &[Method] = &[Method::POST];
const DELETE: &[Method] = &[Method::DELETE];

use Access::{Grants, OwnToken, Public, Token};
use Op::{Admin, Read, Write};
use PathKind as P;
use RouteId as R;
use SubAction as S;

/// Every route, in matching order (the first row that matches wins).
pub static TABLE: &[Row] = &[
    row(R::Preflight, &[Method::OPTIONS], P::Any, Public, "preflight"),
    row(R::Health, ANY, P::Health, Public, "health"),
    row(R::Metrics, ANY, P::Metrics, Grants(&[(Read, Target::Metrics)]), "metrics"),
    row(R::ProcessorsList, ANY, P::ProcessorsList, Grants(&[(Read, Target::Processors)]), "processors_list"),
    row(R::ProcessorShow, ANY, P::ProcessorShow, Grants(&[(Read, Target::ProcessorStream)]), "processor_show"),
    row(R::ProcessorState, ANY, P::ProcessorState, Grants(&[(Read, Target::ProcessorStream)]), "processor_state"),
    row(R::ProcessorControl, ANY, P::ProcessorControl, PROCESSOR_ADMIN, "processor_control"),
    row(R::ProcessorBadPath, ANY, P::ProcessorBadPath, Token, "processor_bad_path"),
    row(R::NoStreamPath, ANY, P::NoStreamPath, Public, "other"),
    row(R::StreamBadPath, ANY, P::StreamBadPath, Token, "stream_bad_path"),
    row(R::Jwks, READ, P::Jwks, Public, "jwks"),
    row(R::JwksOther, ANY, P::Jwks, Public, "jwks"),
    sub(R::SubscriptionPut, PUT, S::Itself, SUB_CREATE, "subscription_admin"),
    sub(R::SubscriptionGet, GET, S::Itself, SUB_READ, "subscription_read"),
    sub(R::SubscriptionDelete, DELETE, S::Itself, SUB_ADMIN, "subscription_admin"),
    sub(R::SubscriptionAddStreams, POST, S::Streams, SUB_WIDEN, "subscription_admin"),
    sub(R::SubscriptionRemoveStream, DELETE, S::Stream, SUB_ADMIN, "subscription_admin"),
    sub(R::SubscriptionClaim, POST, S::Claim, SUB_CLAIM, "subscription_claim"),
    sub(R::SubscriptionAck, POST, S::Ack, OwnToken, "subscription_worker"),
    sub(R::SubscriptionCallback, POST, S::Callback, OwnToken, "subscription_worker"),
    sub(R::SubscriptionRelease, POST, S::Release, OwnToken, "subscription_worker"),
    sub(R::SubscriptionOther, ANY, S::Other, SUB_ADMIN, "subscription_admin"),
    row(R::ReservedOther, ANY, P::Reserved, Grants(&[(Admin, Target::Reserved)]), "reserved"),
    stream(R::StreamFork, PUT, When::Forked, STREAM_FORK, "stream_fork"),
    stream(R::StreamCreate, PUT, When::Always, STREAM_WRITE, "stream_create"),
    stream(R::StreamAppend, POST, When::Always, STREAM_WRITE, APPEND_ROUTE),
    stream(R::StreamSse, GET, When::Sse, STREAM_READ, "stream_sse"),
    stream(R::StreamLongPoll, GET, When::LongPoll, STREAM_READ, "stream_long_poll"),
    stream(R::StreamRead, GET, When::Always, STREAM_READ, "stream_read"),
    stream(R::StreamHead, &[Method::HEAD], When::Always, STREAM_READ, "stream_head"),
    stream(R::StreamDelete, DELETE, When::Always, Grants(&[(Admin, Target::Stream)]), "stream_delete"),
    stream(R::StreamOther, ANY, When::Always, STREAM_READ, "stream_other"),
    row(R::Unrouted, ANY, P::Other, Public, "other"),
];

const PROCESSOR_ADMIN: Access = Grants(&[(Admin, Target::ProcessorStream)]);
const SUB_ADMIN: Access = Grants(&[(Admin, Target::Subscription)]);
/// Creating a subscription: managing it, and reaching what it reaches.
const SUB_CREATE: Access =
    Grants(&[(Admin, Target::Subscription), (Read, Target::Watched), (Write, Target::WakeStream)]);
/// Reading or claiming one reveals the names and tails of what it watches.
const SUB_READ: Access = Grants(&[(Read, Target::Subscription), (Read, Target::Watched)]);
const SUB_CLAIM: Access = Grants(&[(Write, Target::Subscription), (Read, Target::Watched)]);
/// Adding explicit streams widens what it watches.
const SUB_WIDEN: Access = Grants(&[(Admin, Target::Subscription), (Read, Target::Watched)]);
/// Admin where the fork is made, read on the source, whose data it exposes.
const STREAM_FORK: Access = Grants(&[(Admin, Target::Stream), (Read, Target::ForkSource)]);
const STREAM_READ: Access = Grants(&[(Read, Target::Stream)]);
const STREAM_WRITE: Access = Grants(&[(Write, Target::Stream)]);

/// The route label of an append.
pub(crate) const APPEND_ROUTE: &str = "stream_append";

/// The row of `id`.
pub fn row_of(id: RouteId) -> &'static Row {
    TABLE.iter().find(|r| r.id == id).unwrap_or(&UNROUTED)
}

/// Stands in for a row missing from the table: answered `404`, and (being
/// [`Access::Grants`] with no path) only to a valid token.
static UNROUTED: Row = row(R::Unrouted, ANY, P::Other, Grants(&[]), "other");

/// A request, as the table sees it.
pub(crate) struct Parsed<'a> {
    kind: PathKind,
    /// The decoded stream path (streams and reserved paths).
    path: Option<Cow<'a, str>>,
    /// The `{stream}` of an operator API path.
    processor_stream: Option<String>,
}

impl<'a> Parsed<'a> {
    pub(crate) fn new(uri: &'a Uri) -> Self {
        let none = |kind| Parsed { kind, path: None, processor_stream: None };
        let raw = uri.path();
        match raw {
            "/health" => return none(P::Health),
            "/metrics" => return none(P::Metrics),
            "/v1/stream" | "/v1/stream/" => return none(P::NoStreamPath),
            _ => {}
        }
        if let Some(rest) = raw.strip_prefix("/v1/stream/") {
            let Ok(path) = decode_stream_path(rest) else { return none(P::StreamBadPath) };
            let kind = if is_reserved(&path) { reserved_kind(&path) } else { P::Stream };
            return Parsed { kind, path: Some(path), processor_stream: None };
        }
        match crate::processors::route(uri) {
            None => none(P::Other),
            Some(Err(_)) => none(P::ProcessorBadPath),
            Some(Ok(OperatorRoute::List)) => none(P::ProcessorsList),
            Some(Ok(OperatorRoute::Show { stream, .. })) => {
                Parsed { kind: P::ProcessorShow, path: None, processor_stream: Some(stream) }
            }
            Some(Ok(OperatorRoute::State { stream, .. })) => {
                Parsed { kind: P::ProcessorState, path: None, processor_stream: Some(stream) }
            }
            Some(Ok(OperatorRoute::Control { stream, .. })) => {
                Parsed { kind: P::ProcessorControl, path: None, processor_stream: Some(stream) }
            }
        }
    }

    /// The `__ds/subscriptions/{id}` a subscription path is under.
    fn subscription(&self) -> Option<String> {
        let rest = self.path.as_deref()?.strip_prefix("__ds/subscriptions/")?;
        let id = rest.split_once('/').map_or(rest, |(id, _)| id);
        Some(format!("__ds/subscriptions/{id}"))
    }

    fn target(&self, target: Target, headers: &HeaderMap) -> Option<String> {
        match target {
            Target::Stream | Target::Reserved => self.path.as_deref().map(str::to_owned),
            Target::ForkSource => headers.get(h::STREAM_FORKED_FROM).and_then(|v| v.to_str().ok()).map(fork_source),
            Target::Subscription => self.subscription(),
            Target::Metrics => Some(METRICS_PATH.to_owned()),
            Target::Processors => Some(PROCESSORS_PATH.to_owned()),
            Target::ProcessorStream => self.processor_stream.clone(),
            Target::Watched | Target::WakeStream => None,
        }
    }
}

fn reserved_kind(path: &str) -> PathKind {
    let rest = path.strip_prefix("__ds/").unwrap_or_default();
    if rest == "jwks.json" {
        return P::Jwks;
    }
    let Some(sub) = rest.strip_prefix("subscriptions/") else { return P::Reserved };
    let action = match sub.split_once('/').map_or("", |(_, action)| action) {
        "" => S::Itself,
        "streams" => S::Streams,
        a if a.starts_with("streams/") => S::Stream,
        "claim" => S::Claim,
        "ack" => S::Ack,
        "callback" => S::Callback,
        "release" => S::Release,
        _ => S::Other,
    };
    P::Subscription(action)
}

fn live_mode(uri: &Uri) -> Option<When> {
    for pair in uri.query().unwrap_or_default().split('&') {
        match pair {
            "live=sse" => return Some(When::Sse),
            "live=long-poll" => return Some(When::LongPoll),
            _ => {}
        }
    }
    None
}

/// The row `method` on `parsed` takes.
fn find(method: &Method, parsed: &Parsed<'_>, uri: &Uri, headers: &HeaderMap) -> &'static Row {
    let stream = parsed.kind == P::Stream;
    let forked = stream && headers.contains_key(h::STREAM_FORKED_FROM);
    let live = if stream && method == Method::GET { live_mode(uri) } else { None };
    TABLE.iter().find(|r| r.matches(method, parsed.kind, forked, live)).unwrap_or(&UNROUTED)
}

/// A request's row, and the grants the edge checks for it.
#[derive(Debug, Clone)]
pub(crate) struct Class {
    pub row: &'static Row,
    /// Resolved `(path, op)` of the row's grants, deferred targets left out;
    /// filled only when asked for (access control is on).
    pub needs: Vec<(String, Op)>,
}

impl Class {
    /// A row whose grants are not needed (metrics only).
    pub(crate) fn of(id: RouteId) -> Self {
        Self { row: row_of(id), needs: Vec::new() }
    }

    /// Whether the subscription API must be told who the caller is.
    pub(crate) fn defers(&self) -> bool {
        matches!(self.row.access, Grants(needs) if needs.iter().any(|(_, t)| t.deferred()))
    }
}

/// The request's row; with `grants`, also the grants it needs.
pub(crate) fn classify(method: &Method, uri: &Uri, headers: &HeaderMap, grants: bool) -> Class {
    let parsed = Parsed::new(uri);
    let row = find(method, &parsed, uri, headers);
    let mut needs = Vec::new();
    if let (true, Grants(list)) = (grants, row.access) {
        for (op, target) in list {
            // A fork header that is not text names nothing: the handler
            // answers it `400`, and no grant can be checked on it.
            if let Some(path) = parsed.target(*target, headers) {
                needs.push((path, *op));
            }
        }
    }
    Class { row, needs }
}

/// The row a request takes (for tests outside the crate).
pub fn route(method: &Method, uri: &Uri, headers: &HeaderMap) -> RouteId {
    classify(method, uri, headers, false).row.id
}

/// The grants the edge checks for a request: the row's, resolved on the
/// request's paths, without the deferred ones (for tests outside the crate).
pub fn needs(method: &Method, uri: &Uri, headers: &HeaderMap) -> Vec<(String, Op)> {
    classify(method, uri, headers, true).needs
}

/// The source stream path of a fork, from `Stream-Forked-From` (a stream
/// path, or a `/v1/stream/…` URL path).
pub(crate) fn fork_source(header: &str) -> String {
    let source = header.trim_start_matches('/');
    source.strip_prefix("v1/stream/").unwrap_or(source).to_owned()
}

#[cfg(test)]
#[path = "routes_tests.rs"]
mod tests;
