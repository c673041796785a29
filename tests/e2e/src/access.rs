//! The access-control matrix, shared by the local server's test (over TCP)
//! and the HTTP Lambda handler's test (Function URL events): every route ×
//! {no token, expired, wrong issuer, wrong audience, bad signature, out of
//! scope, in scope} must get the right status.

use std::future::Future;
use std::pin::Pin;

use ds_auth::{mint, Grant, Grants, Op};

use crate::Checks;

pub const ISSUER: &str = "https://issuer.test";
pub const AUDIENCE: &str = "durable-streams-tests";

/// A request, independent of how it is carried.
#[derive(Debug, Clone)]
pub struct Req {
    pub method: &'static str,
    /// Path and query.
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Req {
    fn new(method: &'static str, target: String) -> Self {
        Self { method, target, headers: Vec::new(), body: Vec::new() }
    }

    fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.to_owned(), v.to_owned()));
        self
    }

    fn body(mut self, b: &[u8]) -> Self {
        self.body = b.to_vec();
        self
    }

    pub fn bearer(mut self, token: Option<&str>) -> Self {
        if let Some(t) = token {
            self.headers.push(("authorization".into(), format!("Bearer {t}")));
        }
        self
    }
}

/// Status, headers and (for error statuses only: a live read's body never
/// ends) the body.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub www_authenticate: Option<String>,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

pub type Sender<'a> = &'a (dyn Fn(Req) -> Pin<Box<dyn Future<Output = Resp> + Send>> + Sync);

/// The ways a request can carry (or not) a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenCase {
    None,
    Expired,
    WrongIssuer,
    WrongAudience,
    BadSignature,
    OutOfScope,
    InScope,
}

pub const CASES: [TokenCase; 7] = [
    TokenCase::None,
    TokenCase::Expired,
    TokenCase::WrongIssuer,
    TokenCase::WrongAudience,
    TokenCase::BadSignature,
    TokenCase::OutOfScope,
    TokenCase::InScope,
];

/// The HS256 secret the server under test is configured with.
pub fn new_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn grants(needs: &[(String, Op)], invert: bool) -> Grants {
    let all = [Op::Read, Op::Write, Op::Admin];
    let mut out: Vec<Grant> = needs
        .iter()
        .map(|(path, op)| Grant {
            prefix: path.clone(),
            ops: if invert { all.iter().copied().filter(|o| o != op).collect() } else { vec![*op] },
        })
        .collect();
    if invert {
        // Everything elsewhere, too: scope is by path, not just by op.
        out.push(Grant { prefix: "elsewhere".into(), ops: all.to_vec() });
    }
    Grants(out)
}

/// A token for `case`, for a request that needs `needs`.
pub fn token(secret: &str, case: TokenCase, needs: &[(String, Op)]) -> Option<String> {
    let claims = |g: &Grants, ttl| mint::claims(ISSUER, AUDIENCE, "matrix", g, ttl);
    let sign = |c: &serde_json::Value, key: &str| mint::hs256(key.as_bytes(), c).ok();
    let in_scope = grants(needs, false);
    match case {
        TokenCase::None => None,
        TokenCase::Expired => sign(&claims(&in_scope, -3600), secret),
        TokenCase::WrongIssuer => {
            let mut c = claims(&in_scope, 600);
            c["iss"] = "https://other-issuer.test".into();
            sign(&c, secret)
        }
        TokenCase::WrongAudience => {
            let mut c = claims(&in_scope, 600);
            c["aud"] = "someone-else".into();
            sign(&c, secret)
        }
        TokenCase::BadSignature => sign(&claims(&in_scope, 600), &new_secret()),
        TokenCase::OutOfScope => sign(&claims(&grants(needs, true), 600), secret),
        TokenCase::InScope => sign(&claims(&in_scope, 600), secret),
    }
}

struct Route {
    name: &'static str,
    setup: Vec<Req>,
    req: Req,
    needs: Vec<(String, Op)>,
    in_scope: Vec<u16>,
    /// After a refused request: this (sent with the root token) must still
    /// answer the given status (the refused request changed nothing).
    unchanged: Option<(Req, u16)>,
}

fn stream(p: &str) -> String {
    format!("/v1/stream/{p}")
}

fn routes(tag: &str, case: TokenCase, metrics_status: u16) -> Vec<Route> {
    let p = |r: &str| format!("{tag}/{r}/{case:?}");
    let create = |path: &str| Req::new("PUT", stream(path)).header("content-type", "text/plain").body(b"hello");
    let sub = format!("{tag}-{case:?}");
    let mut out = Vec::new();
    let mut route = |name, setup: Vec<Req>, req: Req, needs: Vec<(String, Op)>, ok: &[u16], unchanged| {
        out.push(Route { name, setup, req, needs, in_scope: ok.to_vec(), unchanged })
    };
    let s = p("create");
    route(
        "PUT create",
        vec![],
        Req::new("PUT", stream(&s)).header("content-type", "text/plain"),
        vec![(s.clone(), Op::Write)],
        &[201],
        Some((Req::new("HEAD", stream(&s)), 404)),
    );
    let s = p("append");
    route(
        "POST append",
        vec![create(&s)],
        Req::new("POST", stream(&s)).header("content-type", "text/plain").body(b"x"),
        vec![(s.clone(), Op::Write)],
        &[204],
        None,
    );
    let s = p("close");
    route(
        "POST close",
        vec![create(&s)],
        Req::new("POST", stream(&s)).header("stream-closed", "true"),
        vec![(s.clone(), Op::Write)],
        &[204],
        None,
    );
    let s = p("read");
    route(
        "GET catch-up",
        vec![create(&s)],
        Req::new("GET", format!("{}?offset=-1", stream(&s))),
        vec![(s.clone(), Op::Read)],
        &[200],
        None,
    );
    let s = p("long-poll");
    route(
        "GET long-poll",
        vec![create(&s)],
        Req::new("GET", format!("{}?offset=-1&live=long-poll", stream(&s))),
        vec![(s.clone(), Op::Read)],
        &[200],
        None,
    );
    let s = p("sse");
    route(
        "GET sse",
        vec![create(&s)],
        Req::new("GET", format!("{}?offset=-1&live=sse", stream(&s))),
        vec![(s.clone(), Op::Read)],
        &[200],
        None,
    );
    let s = p("head");
    route("HEAD", vec![create(&s)], Req::new("HEAD", stream(&s)), vec![(s.clone(), Op::Read)], &[200], None);
    let s = p("delete");
    route(
        "DELETE",
        vec![create(&s)],
        Req::new("DELETE", stream(&s)),
        vec![(s.clone(), Op::Admin)],
        &[204],
        Some((Req::new("HEAD", stream(&s)), 200)),
    );
    let (s, src) = (p("fork"), p("fork-source"));
    route(
        "PUT fork",
        vec![create(&src)],
        Req::new("PUT", stream(&s)).header("stream-forked-from", &stream(&src)),
        vec![(s.clone(), Op::Admin), (src.clone(), Op::Read)],
        &[201],
        Some((Req::new("HEAD", stream(&s)), 404)),
    );
    let id = format!("__ds/subscriptions/{sub}");
    route(
        "PUT subscription",
        vec![],
        Req::new("PUT", stream(&id)).header("content-type", "application/json").body(b"{}"),
        vec![(id.clone(), Op::Admin)],
        // Past access control: 400 (no type) where subscriptions run, 501 where they do not (Lambda).
        &[400, 501],
        None,
    );
    route("GET subscription", vec![], Req::new("GET", stream(&id)), vec![(id.clone(), Op::Read)], &[404, 501], None);
    route(
        "POST claim",
        vec![],
        Req::new("POST", format!("{}/claim", stream(&id))).body(b"{}"),
        vec![(id.clone(), Op::Write)],
        &[404, 501],
        None,
    );
    route(
        "GET /metrics",
        vec![],
        Req::new("GET", "/metrics".into()),
        vec![(ds_http::METRICS_PATH.into(), Op::Read)],
        &[metrics_status],
        None,
    );
    out
}

/// Runs the matrix. `root` is a credential allowed everything (for set-up
/// and checks); `metrics_status` is what an in-scope `/metrics` gets on this
/// host (200 where Prometheus is served, 404 on Lambda).
pub async fn run(send: Sender<'_>, secret: &str, root: &str, tag: &str, metrics_status: u16, checks: &mut Checks) {
    for case in CASES {
        for route in routes(tag, case, metrics_status) {
            for setup in &route.setup {
                let r = send(setup.clone().bearer(Some(root))).await;
                checks.status(&format!("set-up for {} ({case:?})", route.name), r.status, &r.body, &[200, 201, 204]);
            }
            let tok = token(secret, case, &route.needs);
            let resp = send(route.req.clone().bearer(tok.as_deref())).await;
            let what = format!("{} with {case:?} token", route.name);
            let want: Vec<u16> = match case {
                TokenCase::InScope => route.in_scope.clone(),
                TokenCase::OutOfScope => vec![403],
                _ => vec![401],
            };
            checks.status(&what, resp.status, &resp.body, &want);
            // HEAD answers carry no body (RFC 9110 §9.3.2): status and headers only.
            if (resp.status == 401 || resp.status == 403) && route.req.method != "HEAD" {
                check_error_body(&what, &resp, checks);
            }
            if let (Some((probe, status)), false) = (&route.unchanged, case == TokenCase::InScope) {
                let r = send(probe.clone().bearer(Some(root))).await;
                checks.status(&format!("{what}: state after the refusal"), r.status, &r.body, &[*status]);
            }
        }
    }
    public_routes(send, tag, checks).await;
}

fn check_error_body(what: &str, resp: &Resp, checks: &mut Checks) {
    if resp.content_type.as_deref() != Some("application/json") {
        checks.fail(format!("{what}: error content-type {:?}", resp.content_type));
    }
    let code = serde_json::from_slice::<serde_json::Value>(&resp.body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned));
    let want = if resp.status == 401 { "UNAUTHORIZED" } else { "FORBIDDEN" };
    if code.as_deref() != Some(want) {
        checks.fail(format!("{what}: error body {:?}", String::from_utf8_lossy(&resp.body)));
    }
    if resp.status == 401 && !resp.www_authenticate.as_deref().is_some_and(|v| v.starts_with("Bearer")) {
        checks.fail(format!("{what}: 401 without WWW-Authenticate: Bearer"));
    }
}

/// Routes that need no access token.
async fn public_routes(send: Sender<'_>, tag: &str, checks: &mut Checks) {
    let r = send(Req::new("GET", "/health".into())).await;
    checks.status("GET /health without a token", r.status, &r.body, &[200]);
    let ack = stream(&format!("__ds/subscriptions/{tag}/ack"));
    // Carries its own claim token (§12.9), which is no access token: access
    // control must let it through (here to a 400 for the empty body, or 501
    // where subscriptions do not run), never answer 401 for it.
    let r = send(Req::new("POST", ack).body(b"{}").bearer(Some("not-an-access-token"))).await;
    checks.status("POST subscription ack with its own token", r.status, &r.body, &[400, 501]);
    let r = send(Req::new("OPTIONS", stream("any")).header("access-control-request-method", "PUT")).await;
    checks.status("CORS preflight without a token", r.status, &r.body, &[204]);
}
