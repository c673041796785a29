//! The walk over the server's route table (`ds_http::routes::TABLE`), shared
//! by the local server's test and the HTTP Lambda handler's. For every row,
//! one request of that row (checked to land on it by the server's own
//! classification), sent:
//! - for a row that needs grants: with no token and with each kind of bad
//!   token (`401`); with a valid token lacking each needed op on its path, or
//!   holding it only on a neighbouring prefix (`403`), checking after each
//!   refusal that nothing changed; then with exactly the grants the row
//!   names (allowed, its own status);
//! - for a row that needs a valid token only: without one (`401`), then with
//!   one that grants nothing (allowed);
//! - for a public row or one that carries its own token: as is (allowed).
//!
//! The grants come from the table (ops and the kinds of path they are on);
//! a scenario only says which concrete paths its request names. A row
//! without a scenario does not compile (the match below is exhaustive).

use ds_auth::Op;
use ds_http::routes::{Access, RouteId, RouteId as R, Target, TABLE};
use serde_json::json;

use crate::access::{check_refusal, grants_of, invalid_token, jwt, Req, Sender, INVALID};
use crate::Checks;

/// What differs between hosts.
pub struct Host {
    /// What an in-scope `GET /metrics` answers (200 where Prometheus is
    /// served, 404 on Lambda).
    pub metrics: u16,
}

/// The processors configuration the walked server runs (its operator API
/// rows are walked against it): a counter on `{tag}/proc/*`.
pub fn processors_toml(tag: &str) -> String {
    format!("[[processor]]\nkind = \"counter\"\nslug = \"walk-count\"\nstreams = \"{tag}/proc/*\"\n")
}

/// After a refused request, what must still hold.
enum Unchanged {
    /// This request (sent with the root credential) answers this status.
    Status(Req, u16),
    /// This request's answer does (`true`) or does not contain the text.
    Body(Req, &'static str, String, bool),
    /// The stream's tail is what it was before the refusals.
    Tail(String),
}

struct Scenario {
    /// Sent once with the root credential before the row is walked.
    setup: Vec<Req>,
    req: Req,
    /// The concrete path of each target kind the row's grants name.
    paths: Vec<(Target, String)>,
    /// What the request answers when allowed.
    ok: &'static [u16],
    unchanged: Option<Unchanged>,
}

fn stream(p: &str) -> String {
    format!("/v1/stream/{p}")
}

fn encode(p: &str) -> String {
    p.replace('/', "%2F")
}

fn scenario(id: R, tag: &str, host: &Host) -> Scenario {
    let s = |name: &str| format!("{tag}/{name}");
    let text = |path: &str| Req::new("PUT", stream(path)).header("content-type", "text/plain").body(b"hello");
    let json_stream = |path: &str| Req::new("PUT", stream(path)).json(&json!([{"type": "walk/created"}]));
    let sub_id = |name: &str| format!("__ds/subscriptions/{tag}-{name}");
    let pull = |name: &str, extra: serde_json::Value| {
        let mut config = json!({"type": "pull-wake", "pattern": format!("{tag}/{name}-watched/*"),
            "wake_stream": format!("{tag}/{name}-wake")});
        if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        Req::new("PUT", stream(&sub_id(name))).json(&config)
    };
    let get_sub = |name: &str| Req::new("GET", stream(&sub_id(name)));
    let none = |req: Req, ok| Scenario { setup: vec![], req, paths: vec![], ok, unchanged: None };
    match id {
        R::Preflight => {
            none(Req::new("OPTIONS", stream(&s("any"))).header("access-control-request-method", "PUT"), &[204])
        }
        R::Health => none(Req::new("GET", "/health"), &[200]),
        R::Metrics => Scenario {
            paths: vec![(Target::Metrics, ds_http::METRICS_PATH.into())],
            ok: if host.metrics == 200 { &[200] } else { &[404] },
            ..none(Req::new("GET", "/metrics"), &[])
        },
        R::ProcessorsList => Scenario {
            paths: vec![(Target::Processors, "__ds/processors".into())],
            ..none(Req::new("GET", "/v1/processors"), &[200])
        },
        R::ProcessorShow => Scenario {
            setup: vec![json_stream(&s("proc/show"))],
            paths: vec![(Target::ProcessorStream, s("proc/show"))],
            ..none(Req::new("GET", format!("/v1/processors/walk-count/streams/{}", encode(&s("proc/show")))), &[200])
        },
        // The walk's processor is a counter, which keeps no materialized
        // state: a granted read is 409 NOT_MATERIALIZED, which is enough to
        // walk the route and its access control.
        R::ProcessorState => Scenario {
            setup: vec![json_stream(&s("proc/state"))],
            paths: vec![(Target::ProcessorStream, s("proc/state"))],
            ..none(Req::new("GET", format!("/v1/processors/walk-count/state/{}", encode(&s("proc/state")))), &[409])
        },
        R::ProcessorControl => Scenario {
            setup: vec![json_stream(&s("proc/ctl"))],
            paths: vec![(Target::ProcessorStream, s("proc/ctl"))],
            unchanged: Some(Unchanged::Tail(s("proc/ctl"))),
            ..none(
                Req::new("POST", format!("/v1/processors/walk-count/re-reduce/{}", encode(&s("proc/ctl"))))
                    .json(&json!({"reason": "walk"})),
                &[200],
            )
        },
        R::ProcessorBadPath => none(Req::new("GET", "/v1/processors/walk-count/nope/a"), &[404]),
        R::NoStreamPath => none(Req::new("GET", "/v1/stream/"), &[400]),
        R::StreamBadPath => none(Req::new("GET", stream(&format!("{tag}/bad%00path"))), &[400]),
        R::Jwks => none(Req::new("GET", stream("__ds/jwks.json")), &[200]),
        R::JwksOther => none(Req::new("POST", stream("__ds/jwks.json")), &[405]),
        R::SubscriptionPut => Scenario {
            setup: vec![],
            req: pull("put", json!({})),
            paths: vec![
                (Target::Subscription, sub_id("put")),
                (Target::Watched, s("put-watched/")),
                (Target::WakeStream, s("put-wake")),
            ],
            ok: &[201],
            unchanged: Some(Unchanged::Status(get_sub("put"), 404)),
        },
        R::SubscriptionGet => Scenario {
            setup: vec![pull("get", json!({}))],
            req: get_sub("get"),
            paths: vec![(Target::Subscription, sub_id("get")), (Target::Watched, s("get-watched/"))],
            ok: &[200],
            unchanged: None,
        },
        R::SubscriptionDelete => Scenario {
            setup: vec![pull("delete", json!({}))],
            req: Req::new("DELETE", stream(&sub_id("delete"))),
            paths: vec![(Target::Subscription, sub_id("delete"))],
            ok: &[204],
            unchanged: Some(Unchanged::Status(get_sub("delete"), 200)),
        },
        R::SubscriptionAddStreams => Scenario {
            setup: vec![pull("add", json!({}))],
            req: Req::new("POST", format!("{}/streams", stream(&sub_id("add"))))
                .json(&json!({"streams": [s("add-extra")]})),
            paths: vec![(Target::Subscription, sub_id("add")), (Target::Watched, s("add-extra"))],
            ok: &[204],
            unchanged: Some(Unchanged::Body(get_sub("add"), "names the added stream", s("add-extra"), false)),
        },
        R::SubscriptionRemoveStream => Scenario {
            setup: vec![pull("rm", json!({"streams": [s("rm-x")]}))],
            req: Req::new("DELETE", format!("{}/streams/{}", stream(&sub_id("rm")), encode(&s("rm-x")))),
            paths: vec![(Target::Subscription, sub_id("rm"))],
            ok: &[204],
            unchanged: Some(Unchanged::Body(get_sub("rm"), "still names the stream", s("rm-x"), true)),
        },
        R::SubscriptionClaim => Scenario {
            // Allowed last: had a refused claim taken the lease, it would get 409.
            setup: vec![pull("claim", json!({}))],
            req: Req::new("POST", format!("{}/claim", stream(&sub_id("claim")))).json(&json!({"worker": "w"})),
            paths: vec![(Target::Subscription, sub_id("claim")), (Target::Watched, s("claim-watched/"))],
            ok: &[200],
            unchanged: None,
        },
        // Their own claim token is no access token: past access control, an
        // empty body is a 400.
        R::SubscriptionAck | R::SubscriptionCallback | R::SubscriptionRelease => {
            let action = match id {
                R::SubscriptionAck => "ack",
                R::SubscriptionCallback => "callback",
                _ => "release",
            };
            let req = Req::new("POST", format!("{}/{action}", stream(&sub_id("worker")))).json(&json!({}));
            none(req.bearer(Some("not-an-access-token")), &[400])
        }
        R::SubscriptionOther => Scenario {
            paths: vec![(Target::Subscription, sub_id("other"))],
            ..none(Req::new("GET", format!("{}/ack", stream(&sub_id("other")))), &[405])
        },
        R::ReservedOther => Scenario {
            paths: vec![(Target::Reserved, "__ds/walk-other".into())],
            ..none(Req::new("GET", stream("__ds/walk-other")), &[404])
        },
        R::StreamFork => Scenario {
            setup: vec![text(&s("fork-source"))],
            req: Req::new("PUT", stream(&s("fork"))).header("stream-forked-from", &stream(&s("fork-source"))),
            paths: vec![(Target::Stream, s("fork")), (Target::ForkSource, s("fork-source"))],
            ok: &[201],
            unchanged: Some(Unchanged::Status(Req::new("HEAD", stream(&s("fork"))), 404)),
        },
        R::StreamCreate => Scenario {
            setup: vec![],
            req: Req::new("PUT", stream(&s("create"))).header("content-type", "text/plain"),
            paths: vec![(Target::Stream, s("create"))],
            ok: &[201],
            unchanged: Some(Unchanged::Status(Req::new("HEAD", stream(&s("create"))), 404)),
        },
        R::StreamAppend => Scenario {
            setup: vec![text(&s("append"))],
            req: Req::new("POST", stream(&s("append"))).header("content-type", "text/plain").body(b"x"),
            paths: vec![(Target::Stream, s("append"))],
            ok: &[204],
            unchanged: Some(Unchanged::Tail(s("append"))),
        },
        R::StreamSse | R::StreamLongPoll | R::StreamRead | R::StreamHead => {
            let (name, method, query) = match id {
                R::StreamSse => ("sse", "GET", "?offset=-1&live=sse"),
                R::StreamLongPoll => ("long-poll", "GET", "?offset=-1&live=long-poll"),
                R::StreamRead => ("read", "GET", "?offset=-1"),
                _ => ("head", "HEAD", ""),
            };
            Scenario {
                setup: vec![text(&s(name))],
                req: Req::new(method, format!("{}{query}", stream(&s(name)))),
                paths: vec![(Target::Stream, s(name))],
                ok: &[200],
                unchanged: None,
            }
        }
        R::StreamDelete => Scenario {
            setup: vec![text(&s("delete"))],
            req: Req::new("DELETE", stream(&s("delete"))),
            paths: vec![(Target::Stream, s("delete"))],
            ok: &[204],
            unchanged: Some(Unchanged::Status(Req::new("HEAD", stream(&s("delete"))), 200)),
        },
        R::StreamOther => Scenario {
            setup: vec![text(&s("other"))],
            req: Req::new("PATCH", stream(&s("other"))),
            paths: vec![(Target::Stream, s("other"))],
            ok: &[405],
            unchanged: None,
        },
        R::Unrouted => none(Req::new("GET", "/v1/nothing-here"), &[404]),
    }
}

/// Prefixes next to `path` that do not cover it: a longer sibling name
/// (`a/bx` for `a/b`, `a/bx/` for `a/b/`) and, when the path's last segment
/// allows, the string prefix that stops inside it (`a/` is a whole segment
/// and would cover; `a/b` for `a/bc` does not).
fn neighbours(path: &str) -> Vec<String> {
    let mut out = vec![match path.strip_suffix('/') {
        Some(dir) => format!("{dir}x/"),
        None => format!("{path}x"),
    }];
    let cut = &path[..path.len().saturating_sub(1)];
    if !path.ends_with('/') && !cut.is_empty() && !cut.ends_with('/') {
        out.push(cut.to_owned());
    }
    out
}

fn parts(req: &Req) -> (http::Method, http::Uri, http::HeaderMap) {
    let method = http::Method::from_bytes(req.method.as_bytes()).expect("a method");
    let uri: http::Uri = req.target.parse().expect("a request target");
    let mut headers = http::HeaderMap::new();
    for (k, v) in &req.headers {
        if let (Ok(k), Ok(v)) = (http::HeaderName::from_bytes(k.as_bytes()), http::HeaderValue::from_str(v)) {
            headers.append(k, v);
        }
    }
    (method, uri, headers)
}

/// Walks every row of the route table; returns the number of routes walked.
/// `root` is a credential allowed everything (set-up and checks).
pub async fn walk_route_table(
    send: Sender<'_>,
    secret: &str,
    root: &str,
    tag: &str,
    host: &Host,
    checks: &mut Checks,
) -> usize {
    // By id, not by row: a route whose row is missing fails here too.
    for id in RouteId::ALL {
        let sc = scenario(*id, tag, host);
        let Some(row) = TABLE.iter().find(|r| r.id == *id) else {
            checks.fail(format!("{id:?} has no row in the route table"));
            continue;
        };
        let what = format!("{:?} ({} {})", row.id, sc.req.method, sc.req.target);
        let (method, uri, headers) = parts(&sc.req);
        let landed = ds_http::routes::route(&method, &uri, &headers);
        if landed != row.id {
            checks.fail(format!("{what}: the request lands on {landed:?}, not on its own row"));
            continue;
        }
        for setup in &sc.setup {
            let r = send(setup.clone().bearer(Some(root))).await;
            checks.status(&format!("{what}: set-up {}", setup.target), r.status, &r.body, &[200, 201, 204]);
        }
        match row.access {
            Access::Public => {
                let r = send(sc.req.clone()).await;
                checks.status(&format!("{what} without a token"), r.status, &r.body, sc.ok);
            }
            Access::OwnToken => {
                let r = send(sc.req.clone()).await;
                checks.status(&format!("{what} with its own token"), r.status, &r.body, sc.ok);
            }
            Access::Token => {
                let r = send(sc.req.clone()).await;
                checks.status(&format!("{what} without a token"), r.status, &r.body, &[401]);
                let nothing = jwt(secret, &ds_auth::Grants::default());
                let r = send(sc.req.clone().bearer(Some(&nothing))).await;
                checks.status(&format!("{what} with a token granting nothing"), r.status, &r.body, sc.ok);
            }
            Access::Grants(list) => walk_grants(send, secret, root, &what, &sc, list, checks).await,
        }
    }
    RouteId::ALL.len()
}

async fn walk_grants(
    send: Sender<'_>,
    secret: &str,
    root: &str,
    what: &str,
    sc: &Scenario,
    list: &[(Op, Target)],
    checks: &mut Checks,
) {
    let path_of = |t: Target| sc.paths.iter().find(|(k, _)| *k == t).map(|(_, p)| p.clone());
    let mut needs = Vec::new();
    for (op, target) in list {
        match path_of(*target) {
            Some(p) => needs.push((p, *op)),
            None => checks.fail(format!("{what}: the scenario names no path for {target:?}")),
        }
    }
    // The edge resolves the same paths from the request (deferred ones are
    // the subscription API's).
    let (method, uri, headers) = parts(&sc.req);
    let at_edge: Vec<(String, Op)> =
        list.iter().zip(&needs).filter(|((_, t), _)| !t.deferred()).map(|(_, n)| n.clone()).collect();
    let resolved = ds_http::routes::needs(&method, &uri, &headers);
    if resolved != at_edge {
        checks.fail(format!("{what}: the edge checks {resolved:?}, the table names {at_edge:?}"));
    }
    let before = unchanged_state(send, root, sc).await;
    let exact = grants_of(&needs);
    for case in INVALID {
        let r = send(sc.req.clone().bearer(invalid_token(secret, case, &exact).as_deref())).await;
        let label = format!("{what} with {case:?} token");
        checks.status(&label, r.status, &r.body, &[401]);
        check_refusal(&label, sc.req.method, &r, checks);
    }
    let mut refusals: Vec<(String, Vec<(String, Op)>)> = Vec::new();
    for (i, (path, op)) in needs.iter().enumerate() {
        // Every other op on that path, and everything else the row needs.
        let mut without: Vec<(String, Op)> =
            needs.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, n)| n.clone()).collect();
        without.extend([Op::Read, Op::Write, Op::Admin].into_iter().filter(|o| o != op).map(|o| (path.clone(), o)));
        refusals.push((format!("without {} on {path:?}", op.as_str()), without));
        for near in neighbours(path) {
            let mut shifted: Vec<(String, Op)> =
                needs.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, n)| n.clone()).collect();
            shifted.push((near.clone(), *op));
            refusals.push((format!("with {} on the neighbouring {near:?} instead of {path:?}", op.as_str()), shifted));
        }
    }
    for (how, grants) in refusals {
        let token = jwt(secret, &grants_of(&grants));
        let r = send(sc.req.clone().bearer(Some(&token))).await;
        let label = format!("{what} {how}");
        checks.status(&label, r.status, &r.body, &[403]);
        check_refusal(&label, sc.req.method, &r, checks);
        check_unchanged(send, root, sc, &before, &label, checks).await;
    }
    let r = send(sc.req.clone().bearer(Some(&jwt(secret, &exact)))).await;
    checks.status(&format!("{what} with exactly {needs:?}"), r.status, &r.body, sc.ok);
}

/// The tail a [`Unchanged::Tail`] compares against.
async fn unchanged_state(send: Sender<'_>, root: &str, sc: &Scenario) -> Option<String> {
    match &sc.unchanged {
        Some(Unchanged::Tail(path)) => send(Req::new("HEAD", stream(path)).bearer(Some(root))).await.next_offset,
        _ => None,
    }
}

async fn check_unchanged(
    send: Sender<'_>,
    root: &str,
    sc: &Scenario,
    before: &Option<String>,
    label: &str,
    checks: &mut Checks,
) {
    match &sc.unchanged {
        None => {}
        Some(Unchanged::Status(probe, status)) => {
            let r = send(probe.clone().bearer(Some(root))).await;
            checks.status(&format!("{label}: state after the refusal"), r.status, &r.body, &[*status]);
        }
        Some(Unchanged::Body(probe, says, needle, present)) => {
            let r = send(probe.clone().bearer(Some(root))).await;
            if r.text().contains(needle.as_str()) != *present {
                checks.fail(format!(
                    "{label}: after the refusal the subscription {}{says}",
                    if *present { "no longer " } else { "" }
                ));
            }
        }
        Some(Unchanged::Tail(path)) => {
            let after = send(Req::new("HEAD", stream(path)).bearer(Some(root))).await.next_offset;
            if after != *before || before.is_none() {
                checks.fail(format!("{label}: the tail of {path:?} moved from {before:?} to {after:?}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::neighbours;

    #[test]
    fn neighbours_never_cover_the_path() {
        assert_eq!(neighbours("a/bc"), vec!["a/bcx".to_owned(), "a/b".to_owned()]);
        assert_eq!(neighbours("a/b"), vec!["a/bx".to_owned()]);
        assert_eq!(neighbours("a/bc/"), vec!["a/bcx/".to_owned()]);
        for path in ["a/bc", "a/b", "a/bc/", "__ds/metrics", "x"] {
            let covered = neighbours(path).iter().any(|n| {
                let g = ds_auth::Grants(vec![ds_auth::Grant { prefix: n.clone(), ops: vec![ds_auth::Op::Read] }]);
                g.allows(path, ds_auth::Op::Read)
            });
            assert!(!covered, "{path}");
        }
    }
}
