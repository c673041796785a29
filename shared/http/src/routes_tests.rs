#![allow(clippy::unwrap_used)]
use super::*;

fn class(method: Method, uri: &str, fork: Option<&str>) -> Class {
    let mut headers = HeaderMap::new();
    if let Some(f) = fork {
        headers.insert(h::STREAM_FORKED_FROM, f.parse().unwrap());
    }
    classify(&method, &uri.parse().unwrap(), &headers, true)
}

fn grants(c: &Class) -> Vec<(String, Op)> {
    assert!(matches!(c.row.access, Grants(_)), "{:?}", c.row);
    c.needs.clone()
}

/// One request per row: the row it must land on.
fn samples() -> Vec<(RouteId, Method, &'static str, Option<&'static str>)> {
    let m = |s: &str| Method::from_bytes(s.as_bytes()).unwrap();
    let mut out = Vec::new();
    for id in RouteId::ALL {
        let (method, uri, fork) = match id {
            R::Preflight => ("OPTIONS", "/v1/stream/a", None),
            R::Health => ("GET", "/health", None),
            R::Metrics => ("GET", "/metrics", None),
            R::ProcessorsList => ("GET", "/v1/processors", None),
            R::ProcessorShow => ("GET", "/v1/processors/c/streams/a%2Fb", None),
            R::ProcessorState => ("GET", "/v1/processors/c/state/a/b?type=user", None),
            R::ProcessorControl => ("POST", "/v1/processors/c/reprocess-from/a/b", None),
            R::ProcessorBadPath => ("GET", "/v1/processors/c/nope/a", None),
            R::NoStreamPath => ("GET", "/v1/stream/", None),
            R::StreamBadPath => ("GET", "/v1/stream/a/%2E%2E/b", None),
            R::Jwks => ("GET", "/v1/stream/__ds/jwks.json", None),
            R::JwksOther => ("POST", "/v1/stream/__ds/jwks.json", None),
            R::SubscriptionPut => ("PUT", "/v1/stream/__ds/subscriptions/s1", None),
            R::SubscriptionGet => ("GET", "/v1/stream/__ds/subscriptions/s1", None),
            R::SubscriptionDelete => ("DELETE", "/v1/stream/__ds/subscriptions/s1", None),
            R::SubscriptionAddStreams => ("POST", "/v1/stream/__ds/subscriptions/s1/streams", None),
            R::SubscriptionRemoveStream => ("DELETE", "/v1/stream/__ds/subscriptions/s1/streams/a%2Fb", None),
            R::SubscriptionClaim => ("POST", "/v1/stream/__ds/subscriptions/s1/claim", None),
            R::SubscriptionAck => ("POST", "/v1/stream/__ds/subscriptions/s1/ack", None),
            R::SubscriptionCallback => ("POST", "/v1/stream/__ds/subscriptions/s1/callback", None),
            R::SubscriptionRelease => ("POST", "/v1/stream/__ds/subscriptions/s1/release", None),
            R::SubscriptionOther => ("GET", "/v1/stream/__ds/subscriptions/s1/ack", None),
            R::ReservedOther => ("GET", "/v1/stream/__ds/other", None),
            R::StreamFork => ("PUT", "/v1/stream/b", Some("/v1/stream/src/x")),
            R::StreamCreate => ("PUT", "/v1/stream/a", None),
            R::StreamAppend => ("POST", "/v1/stream/a", None),
            R::StreamSse => ("GET", "/v1/stream/a?offset=now&live=sse", None),
            R::StreamLongPoll => ("GET", "/v1/stream/a?live=long-poll", None),
            R::StreamRead => ("GET", "/v1/stream/a%2Fb?offset=-1", None),
            R::StreamHead => ("HEAD", "/v1/stream/a", None),
            R::StreamDelete => ("DELETE", "/v1/stream/a", None),
            R::StreamOther => ("PATCH", "/v1/stream/a", None),
            R::Unrouted => ("GET", "/v1/processorsx", None),
        };
        out.push((*id, m(method), uri, fork));
    }
    out
}

#[test]
fn every_route_id_has_exactly_one_row() {
    for id in RouteId::ALL {
        let rows = TABLE.iter().filter(|r| r.id == *id).count();
        assert_eq!(rows, 1, "{id:?} has {rows} rows in the route table");
    }
    assert_eq!(TABLE.len(), RouteId::ALL.len());
}

#[test]
fn every_row_is_reached_by_its_request() {
    for (id, method, uri, fork) in samples() {
        assert_eq!(class(method.clone(), uri, fork).row.id, id, "{method} {uri}");
    }
}

#[test]
fn stream_operations_map_to_ops_on_the_decoded_path() {
    let g = |m, u| grants(&class(m, u, None));
    assert_eq!(g(Method::GET, "/v1/stream/a%2Fb?offset=-1"), vec![("a/b".into(), Op::Read)]);
    assert_eq!(g(Method::HEAD, "/v1/stream/a"), vec![("a".into(), Op::Read)]);
    assert_eq!(g(Method::POST, "/v1/stream/a"), vec![("a".into(), Op::Write)]);
    assert_eq!(g(Method::PUT, "/v1/stream/a"), vec![("a".into(), Op::Write)]);
    assert_eq!(g(Method::DELETE, "/v1/stream/a"), vec![("a".into(), Op::Admin)]);
    let fork = class(Method::PUT, "/v1/stream/b", Some("/v1/stream/src/x"));
    assert_eq!(grants(&fork), vec![("b".into(), Op::Admin), ("src/x".into(), Op::Read)]);
    assert_eq!(class(Method::GET, "/v1/stream/a?offset=now&live=sse", None).row.live(), Some("sse"));
    assert_eq!(class(Method::GET, "/v1/stream/a?live=long-poll", None).row.label, "stream_long_poll");
    let bad = class(Method::GET, "/v1/stream/a/%2E%2E/b", None);
    assert_eq!(bad.row.access, Token, "bad paths need a token only");
}

#[test]
fn without_grants_the_row_is_the_same_and_nothing_is_resolved() {
    for (_, method, uri, fork) in samples() {
        let mut headers = HeaderMap::new();
        if let Some(f) = fork {
            headers.insert(h::STREAM_FORKED_FROM, f.parse().unwrap());
        }
        let uri = uri.parse().unwrap();
        let (with, without) = (classify(&method, &uri, &headers, true), classify(&method, &uri, &headers, false));
        assert_eq!(with.row.id, without.row.id, "{method} {uri}");
        assert!(without.needs.is_empty(), "{method} {uri}");
    }
}

#[test]
fn control_paths() {
    let g = |m, u| grants(&class(m, u, None));
    let sub = || ("__ds/subscriptions/s1".to_owned(), Op::Admin);
    assert_eq!(g(Method::PUT, "/v1/stream/__ds/subscriptions/s1"), vec![sub()]);
    assert_eq!(g(Method::GET, "/v1/stream/__ds/subscriptions/s1"), vec![("__ds/subscriptions/s1".into(), Op::Read)]);
    assert_eq!(
        g(Method::POST, "/v1/stream/__ds/subscriptions/s1/claim"),
        vec![("__ds/subscriptions/s1".into(), Op::Write)]
    );
    assert_eq!(g(Method::DELETE, "/v1/stream/__ds/subscriptions/s1/streams/a%2Fb"), vec![sub()]);
    assert_eq!(g(Method::GET, "/v1/stream/__ds/subscriptions/s1/ack"), vec![sub()], "ack is a POST");
    assert_eq!(class(Method::POST, "/v1/stream/__ds/subscriptions/s1/ack", None).row.access, OwnToken);
    assert_eq!(class(Method::GET, "/v1/stream/__ds/jwks.json", None).row.access, Public);
    assert_eq!(g(Method::GET, "/v1/stream/__ds/other"), vec![("__ds/other".into(), Op::Admin)]);
    assert_eq!(g(Method::PUT, "/v1/stream/__ds"), vec![("__ds".into(), Op::Admin)]);
    assert_eq!(g(Method::GET, "/metrics"), vec![(METRICS_PATH.into(), Op::Read)]);
    assert_eq!(class(Method::GET, "/health", None).row.access, Public);
    assert_eq!(class(Method::OPTIONS, "/v1/stream/a", None).row.access, Public);
    // What the subscription API checks once it has the configuration.
    let deferred = |id| match row_of(id).access {
        Grants(list) => list.iter().filter(|(_, t)| t.deferred()).copied().collect::<Vec<_>>(),
        _ => Vec::new(),
    };
    assert_eq!(deferred(R::SubscriptionPut), vec![(Op::Read, Target::Watched), (Op::Write, Target::WakeStream)]);
    for id in [R::SubscriptionGet, R::SubscriptionClaim, R::SubscriptionAddStreams] {
        assert_eq!(deferred(id), vec![(Op::Read, Target::Watched)], "{id:?}");
    }
}

#[test]
fn operator_api_paths() {
    let g = |m, u| grants(&class(m, u, None));
    assert_eq!(g(Method::GET, "/v1/processors"), vec![(PROCESSORS_PATH.into(), Op::Read)]);
    assert_eq!(g(Method::GET, "/v1/processors/c/streams/a%2Fb"), vec![("a/b".into(), Op::Read)]);
    assert_eq!(g(Method::POST, "/v1/processors/c/reprocess-from/a/b"), vec![("a/b".into(), Op::Admin)]);
    assert_eq!(class(Method::POST, "/v1/processors/c/re-reduce/a", None).row.label, "processor_control");
    assert_eq!(class(Method::GET, "/v1/processors/c/nope/a", None).row.access, Token);
    assert_eq!(class(Method::GET, "/v1/processorsx", None).row.access, Public);
}
