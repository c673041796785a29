//! Access-control test support shared by the local server's tests (over
//! TCP) and the HTTP Lambda handler's (Function URL events): requests
//! independent of how they are carried, and the tokens of every case. The
//! walk over the route table is in [`crate::walk`].

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
    pub fn new(method: &'static str, target: impl Into<String>) -> Self {
        Self { method, target: target.into(), headers: Vec::new(), body: Vec::new() }
    }

    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.to_owned(), v.to_owned()));
        self
    }

    pub fn body(mut self, b: &[u8]) -> Self {
        self.body = b.to_vec();
        self
    }

    pub fn json(self, v: &serde_json::Value) -> Self {
        self.header("content-type", "application/json").body(v.to_string().as_bytes())
    }

    pub fn bearer(mut self, token: Option<&str>) -> Self {
        if let Some(t) = token {
            self.headers.push(("authorization".into(), format!("Bearer {t}")));
        }
        self
    }

    /// A live read: its body does not end, so only an error's is read.
    pub fn live(&self) -> bool {
        self.target.contains("live=")
    }
}

/// Status, headers and the body (a live read's only when it is an error).
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub www_authenticate: Option<String>,
    pub content_type: Option<String>,
    pub retry_after: Option<String>,
    pub next_offset: Option<String>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub type Sender<'a> = &'a (dyn Fn(Req) -> Pin<Box<dyn Future<Output = Resp> + Send>> + Sync);

/// The ways a request can carry a credential that is not valid: each must
/// get `401`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    None,
    Expired,
    WrongIssuer,
    WrongAudience,
    BadSignature,
}

pub const INVALID: [Invalid; 5] =
    [Invalid::None, Invalid::Expired, Invalid::WrongIssuer, Invalid::WrongAudience, Invalid::BadSignature];

/// The HS256 secret the server under test is configured with.
pub fn new_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Grants of exactly `needs` (one grant per path, with the ops it needs there).
pub fn grants_of(needs: &[(String, Op)]) -> Grants {
    let mut out: Vec<Grant> = Vec::new();
    for (path, op) in needs {
        match out.iter_mut().find(|g| g.prefix == *path) {
            Some(g) if !g.ops.contains(op) => g.ops.push(*op),
            Some(_) => {}
            None => out.push(Grant { prefix: path.clone(), ops: vec![*op] }),
        }
    }
    Grants(out)
}

/// A valid JWT carrying `grants`.
pub fn jwt(secret: &str, grants: &Grants) -> String {
    let claims = mint::claims(ISSUER, AUDIENCE, "walker", grants, 600);
    mint::hs256(secret.as_bytes(), &claims).expect("signing a test JWT")
}

/// A credential that is not valid in the way `case` says, for a request
/// whose grants would otherwise be `grants`.
pub fn invalid_token(secret: &str, case: Invalid, grants: &Grants) -> Option<String> {
    let claims = |ttl| mint::claims(ISSUER, AUDIENCE, "walker", grants, ttl);
    let sign = |c: &serde_json::Value, key: &str| mint::hs256(key.as_bytes(), c).ok();
    match case {
        Invalid::None => None,
        Invalid::Expired => sign(&claims(-3600), secret),
        Invalid::WrongIssuer => {
            let mut c = claims(600);
            c["iss"] = "https://other-issuer.test".into();
            sign(&c, secret)
        }
        Invalid::WrongAudience => {
            let mut c = claims(600);
            c["aud"] = "someone-else".into();
            sign(&c, secret)
        }
        Invalid::BadSignature => sign(&claims(600), &new_secret()),
    }
}

/// A `401` or `403` must say so in the documented JSON shape (and a `401`
/// with `WWW-Authenticate: Bearer`). HEAD answers carry no body.
pub fn check_refusal(what: &str, method: &str, resp: &Resp, checks: &mut Checks) {
    if !(resp.status == 401 || resp.status == 403) || method == "HEAD" {
        return;
    }
    if resp.content_type.as_deref() != Some("application/json") {
        checks.fail(format!("{what}: error content-type {:?}", resp.content_type));
    }
    let code = serde_json::from_slice::<serde_json::Value>(&resp.body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned));
    let want = if resp.status == 401 { "UNAUTHORIZED" } else { "FORBIDDEN" };
    if code.as_deref() != Some(want) {
        checks.fail(format!("{what}: error body {:?}", resp.text()));
    }
    if resp.status == 401 && !resp.www_authenticate.as_deref().is_some_and(|v| v.starts_with("Bearer")) {
        checks.fail(format!("{what}: 401 without WWW-Authenticate: Bearer"));
    }
}

/// A [`Sender`] over TCP to a server at `base` (`http://127.0.0.1:PORT`).
pub fn tcp_sender(base: String) -> impl Fn(Req) -> Pin<Box<dyn Future<Output = Resp> + Send>> + Sync {
    let client = crate::client();
    move |req: Req| {
        let client = client.clone();
        let url = format!("{base}{}", req.target);
        Box::pin(async move {
            let method = reqwest::Method::from_bytes(req.method.as_bytes()).expect("a method");
            let mut r = client.request(method, url).body(req.body.clone());
            for (k, v) in &req.headers {
                r = r.header(k, v);
            }
            let resp = r.send().await.expect("the server answers");
            let h = |n: &str| resp.headers().get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
            let (status, www_authenticate, content_type, retry_after, next_offset) = (
                resp.status().as_u16(),
                h("www-authenticate"),
                h("content-type"),
                h("retry-after"),
                h("stream-next-offset"),
            );
            let body = if status >= 400 || !req.live() {
                resp.bytes().await.map(|b| b.to_vec()).unwrap_or_default()
            } else {
                Vec::new()
            };
            Resp { status, www_authenticate, content_type, retry_after, next_offset, body }
        })
    }
}
