//! What a request is, before any handler runs: its route label (for
//! metrics) and the access it needs (for access control). Both layers use
//! this one classification, and the fork handler uses [`fork_source`], so
//! the path a grant is checked against is the path the handler acts on.

use axum::http::{HeaderMap, Method, Uri};
use ds_auth::Op;

use crate::headers as h;
use crate::processors::{Route, PROCESSORS_PATH};
use crate::request::stream_path_ref;

/// What a request needs from access control.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Access {
    /// Anyone: `/health`, the webhook signing JWKS, CORS preflight, unknown routes.
    Public,
    /// Authenticated by its own token (subscription callback, ack, release:
    /// protocol §12.9), so the access token is not asked for.
    OwnToken,
    /// A valid access token, with these grants. A stream path that does not
    /// parse needs only a valid token: the handler answers it `400`. Left
    /// empty for stream operations when the caller did not ask for grants
    /// (no access control: metrics need only the route label).
    Grants(Vec<(String, Op)>),
}

/// A request's route label and access.
#[derive(Debug, Clone)]
pub(crate) struct Class {
    pub route: &'static str,
    pub access: Access,
    /// `long-poll` or `sse` for live reads (they hold a connection open).
    pub live: Option<&'static str>,
}

/// The route label of an append.
pub(crate) const APPEND_ROUTE: &str = "stream_append";

/// The path a metrics scrape is checked against (`read` on it).
pub const METRICS_PATH: &str = "__ds/metrics";

/// `grants`: whether to list the grants of stream operations (access
/// control is on); without, classifying an append allocates nothing.
pub(crate) fn classify(method: &Method, uri: &Uri, headers: &HeaderMap, grants: bool) -> Class {
    let public = |route| Class { route, access: Access::Public, live: None };
    if method == Method::OPTIONS {
        return public("preflight");
    }
    match uri.path() {
        "/health" => return public("health"),
        "/metrics" => {
            return Class {
                route: "metrics",
                access: Access::Grants(vec![(METRICS_PATH.into(), Op::Read)]),
                live: None,
            }
        }
        p if p.starts_with("/v1/stream/") => {}
        _ => {
            return match crate::processors::route(uri) {
                Some(route) => operator_api(route),
                None => public("other"),
            }
        }
    }
    let Ok(path) = stream_path_ref(uri) else {
        return Class { route: "stream_bad_path", access: Access::Grants(Vec::new()), live: None };
    };
    if let Some(rest) = path.strip_prefix("__ds/") {
        return reserved(method, rest, &path);
    }
    let need = |route, op| {
        let access = Access::Grants(if grants { vec![(path.to_string(), op)] } else { Vec::new() });
        Class { route, access, live: None }
    };
    match *method {
        Method::GET => {
            let live = live_mode(uri);
            let route = match live {
                Some("sse") => "stream_sse",
                Some(_) => "stream_long_poll",
                None => "stream_read",
            };
            Class { live, ..need(route, Op::Read) }
        }
        Method::HEAD => need("stream_head", Op::Read),
        Method::POST => need(APPEND_ROUTE, Op::Write),
        Method::DELETE => need("stream_delete", Op::Admin),
        Method::PUT => match headers.get(h::STREAM_FORKED_FROM).and_then(|v| v.to_str().ok()) {
            // A fork needs admin where it is created and read on its source,
            // whose data it exposes.
            Some(source) => Class {
                route: "stream_fork",
                access: Access::Grants(if grants {
                    vec![(path.to_string(), Op::Admin), (fork_source(source), Op::Read)]
                } else {
                    Vec::new()
                }),
                live: None,
            },
            None => need("stream_create", Op::Write),
        },
        _ => need("stream_other", Op::Read),
    }
}

/// The reserved `__ds/…` control paths (§6).
fn reserved(method: &Method, rest: &str, path: &str) -> Class {
    if rest == "jwks.json" {
        return Class { route: "jwks", access: Access::Public, live: None };
    }
    let Some(sub) = rest.strip_prefix("subscriptions/") else {
        return Class { route: "reserved", access: Access::Grants(vec![(path.to_owned(), Op::Admin)]), live: None };
    };
    let (id, action) = sub.split_once('/').unwrap_or((sub, ""));
    let on = |op| Access::Grants(vec![(format!("__ds/subscriptions/{id}"), op)]);
    let (route, access) = match (method, action) {
        (_, "callback" | "ack" | "release") => ("subscription_worker", Access::OwnToken),
        (&Method::POST, "claim") => ("subscription_claim", on(Op::Write)),
        (&Method::GET, "") => ("subscription_read", on(Op::Read)),
        _ => ("subscription_admin", on(Op::Admin)),
    };
    Class { route, access, live: None }
}

/// The processors' operator API: listing needs `read` on
/// [`PROCESSORS_PATH`], a processor's state `read` on its stream, a control
/// `admin` on its stream. A path that does not parse needs only a valid
/// token: the handler answers it.
fn operator_api(route: Result<Route, crate::error::ApiError>) -> Class {
    let (route, access) = match route {
        Ok(Route::List) => ("processors_list", vec![(PROCESSORS_PATH.to_owned(), Op::Read)]),
        Ok(Route::Show { stream, .. }) => ("processor_show", vec![(stream, Op::Read)]),
        Ok(Route::Control { stream, .. }) => ("processor_control", vec![(stream, Op::Admin)]),
        Err(_) => ("processor_bad_path", Vec::new()),
    };
    Class { route, access: Access::Grants(access), live: None }
}

fn live_mode(uri: &Uri) -> Option<&'static str> {
    for pair in uri.query().unwrap_or_default().split('&') {
        match pair {
            "live=sse" => return Some("sse"),
            "live=long-poll" => return Some("long-poll"),
            _ => {}
        }
    }
    None
}

/// The source stream path of a fork, from `Stream-Forked-From` (a stream
/// path, or a `/v1/stream/…` URL path).
pub(crate) fn fork_source(header: &str) -> String {
    let source = header.trim_start_matches('/');
    source.strip_prefix("v1/stream/").unwrap_or(source).to_owned()
}

#[cfg(test)]
mod tests {
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
        match &c.access {
            Access::Grants(g) => g.clone(),
            other => panic!("{other:?}"),
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
        assert_eq!(class(Method::GET, "/v1/stream/a?offset=now&live=sse", None).live, Some("sse"));
        assert_eq!(class(Method::GET, "/v1/stream/a?live=long-poll", None).route, "stream_long_poll");
        assert!(grants(&class(Method::GET, "/v1/stream/a/%2E%2E/b", None)).is_empty(), "bad paths need a token only");
    }

    #[test]
    fn without_grants_the_route_label_is_the_same() {
        for (method, uri, fork) in [
            (Method::GET, "/v1/stream/a%2Fb?offset=-1", None),
            (Method::GET, "/v1/stream/a?live=sse", None),
            (Method::POST, "/v1/stream/a", None),
            (Method::PUT, "/v1/stream/b", Some("/v1/stream/src/x")),
            (Method::DELETE, "/v1/stream/a", None),
            (Method::GET, "/v1/stream/a/%2E%2E/b", None),
        ] {
            let mut headers = HeaderMap::new();
            if let Some(f) = fork {
                headers.insert(h::STREAM_FORKED_FROM, f.parse().unwrap());
            }
            let uri = uri.parse().unwrap();
            let (with, without) = (classify(&method, &uri, &headers, true), classify(&method, &uri, &headers, false));
            assert_eq!((with.route, with.live), (without.route, without.live), "{method} {uri}");
            assert_eq!(without.access, Access::Grants(Vec::new()), "{method} {uri}");
        }
    }

    #[test]
    fn control_paths() {
        let g = |m, u| grants(&class(m, u, None));
        assert_eq!(
            g(Method::PUT, "/v1/stream/__ds/subscriptions/s1"),
            vec![("__ds/subscriptions/s1".into(), Op::Admin)]
        );
        assert_eq!(
            g(Method::GET, "/v1/stream/__ds/subscriptions/s1"),
            vec![("__ds/subscriptions/s1".into(), Op::Read)]
        );
        assert_eq!(
            g(Method::POST, "/v1/stream/__ds/subscriptions/s1/claim"),
            vec![("__ds/subscriptions/s1".into(), Op::Write)]
        );
        assert_eq!(
            g(Method::DELETE, "/v1/stream/__ds/subscriptions/s1/streams/a%2Fb"),
            vec![("__ds/subscriptions/s1".into(), Op::Admin)]
        );
        assert_eq!(class(Method::POST, "/v1/stream/__ds/subscriptions/s1/ack", None).access, Access::OwnToken);
        assert_eq!(class(Method::GET, "/v1/stream/__ds/jwks.json", None).access, Access::Public);
        assert_eq!(g(Method::GET, "/metrics"), vec![(METRICS_PATH.into(), Op::Read)]);
        assert_eq!(class(Method::GET, "/health", None).access, Access::Public);
        assert_eq!(class(Method::OPTIONS, "/v1/stream/a", None).access, Access::Public);
    }

    #[test]
    fn operator_api_paths() {
        let g = |m, u| grants(&class(m, u, None));
        assert_eq!(g(Method::GET, "/v1/processors"), vec![(PROCESSORS_PATH.into(), Op::Read)]);
        assert_eq!(g(Method::GET, "/v1/processors/c/streams/a%2Fb"), vec![("a/b".into(), Op::Read)]);
        assert_eq!(g(Method::POST, "/v1/processors/c/reprocess-from/a/b"), vec![("a/b".into(), Op::Admin)]);
        assert_eq!(class(Method::POST, "/v1/processors/c/re-reduce/a", None).route, "processor_control");
        assert!(g(Method::GET, "/v1/processors/c/nope/a").is_empty(), "bad paths need a token only");
        assert_eq!(class(Method::GET, "/v1/processorsx", None).access, Access::Public);
    }
}
