//! A subscription reaches only what its caller may touch: the two ways a
//! token used to reach past its grants through a subscription, refused, and
//! the allowed way next to them still working. Shared by the local store's
//! test and the Lambda HTTP handler's.
//!
//! The token `evil` may administer its subscription and read and write
//! `mine/`, and nothing else; `peer` may read and claim the same
//! subscription but read no stream. (Every path is under a namespace of the
//! run: `{ns}/mine/`, `{ns}/secret/…`, subscription `{ns}-evil`.)
//! 1. A pull-wake subscription writing its wake events into `victim/log`,
//!    which `evil` may not write: `403`, and nothing is ever appended there.
//! 2. A subscription naming `secret/…` streams, which `evil` may not read
//!    (by pattern, by explicit stream, by webhook, by adding a stream later):
//!    `403`; no name or offset of a `secret/` stream in any answer, wake
//!    event or webhook.

use std::future::Future;
use std::pin::Pin;

use serde_json::{json, Value};

use crate::access::{Req, Resp, Sender};
use crate::Checks;

/// The credentials of the scenarios (static tokens), and the namespace
/// every path lives under (hosts that share a table between tests need one
/// per run).
pub struct Creds {
    pub root: String,
    pub evil: String,
    pub peer: String,
    pub ns: String,
}

impl Creds {
    pub fn new(ns: &str) -> Self {
        let t = ds_auth::tokens::generate;
        Self { root: t(), evil: t(), peer: t(), ns: ns.to_owned() }
    }

    /// `{ns}/{p}`: `mine/1` is evil's stream `{ns}/mine/1`.
    pub fn path(&self, p: &str) -> String {
        format!("{}/{p}", self.ns)
    }

    /// Evil's subscription id.
    pub fn subscription(&self) -> String {
        format!("{}-evil", self.ns)
    }

    /// The token file (`--auth-tokens-file`, `DS_AUTH_TOKENS`).
    pub fn token_file(&self) -> Value {
        let entry = |name: &str, token: &str, grants: Value| json!({"name": name, "sha256": ds_auth::tokens::digest_hex(token), "streams": grants});
        let sub = format!("__ds/subscriptions/{}", self.subscription());
        json!({"tokens": [
            entry("root", &self.root, json!([{"prefix": "", "ops": ["read", "write", "admin"]}])),
            entry("evil", &self.evil, json!([
                {"prefix": sub, "ops": ["admin", "write", "read"]},
                {"prefix": self.path("mine/"), "ops": ["read", "write"]}])),
            entry("peer", &self.peer, json!([{"prefix": sub, "ops": ["read", "write"]}])),
        ]})
    }
}

/// Lets the host catch up after subscriptions or streams changed (wakes
/// are delivered after the commit that causes them).
pub type Settle<'a> = &'a (dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Sync);

fn stream(p: &str) -> String {
    format!("/v1/stream/{p}")
}

/// Runs both scenarios. `hook_url`: a webhook receiver's URL the host
/// accepts (loopback allowed); `hook_count` reads how many deliveries it got.
/// Returns the claim token `evil` was given (which must appear in no log).
pub async fn run(
    send: Sender<'_>,
    creds: &Creds,
    hook_url: &str,
    hook_count: &(dyn Fn() -> usize + Sync),
    settle: Settle<'_>,
    checks: &mut Checks,
) -> String {
    let n = |p: &str| creds.path(p);
    let sub = format!("__ds/subscriptions/{}", creds.subscription());
    let root = |r: Req| send(r.bearer(Some(&creds.root)));
    // Every answer `evil` or `peer` gets, checked at the end for foreign names and offsets.
    let mut seen: Vec<(String, Resp)> = Vec::new();
    let mut as_user = |who: &'static str, what: &str, r: Resp| {
        seen.push((format!("{who}: {what}"), r.clone()));
        r
    };
    let evil = |r: Req| send(r.bearer(Some(&creds.evil)));
    let peer = |r: Req| send(r.bearer(Some(&creds.peer)));

    // Set-up: a victim stream, two secret streams of distinctive sizes, a wake stream of evil's own.
    let text = |p: &str, n: usize| Req::new("PUT", stream(p)).header("content-type", "text/plain").body(&vec![b's'; n]);
    let json_stream = |p: &str| Req::new("PUT", stream(p)).json(&json!([]));
    for (req, what) in [
        (json_stream(&n("victim/log")), "victim/log"),
        (text(&n("secret/a"), 7777), "secret/a"),
        (text(&n("secret/b"), 9999), "secret/b"),
        (json_stream(&n("mine/wakes")), "mine/wakes"),
    ] {
        let r = root(req).await;
        checks.status(&format!("set-up {what}"), r.status, &r.body, &[201]);
    }
    let tail = |r: Resp| r.next_offset.unwrap_or_default();
    let victim_before = tail(root(Req::new("HEAD", stream(&n("victim/log")))).await);
    let secret_tails = [
        tail(root(Req::new("HEAD", stream(&n("secret/a")))).await),
        tail(root(Req::new("HEAD", stream(&n("secret/b")))).await),
    ];

    // What evil is refused directly (the refusals name the paths it asked for).
    let r = evil(Req::new("POST", stream(&n("victim/log"))).json(&json!({"x": 1}))).await;
    checks.status("evil appends to victim/log directly", r.status, &r.body, &[403]);
    let r = evil(Req::new("GET", stream(&n("secret/a?offset=-1")))).await;
    checks.status("evil reads secret/a directly", r.status, &r.body, &[403]);

    // 1. A wake stream evil may not write.
    let wake_victim = json!({"type": "pull-wake", "pattern": n("mine/*"), "wake_stream": n("victim/log")});
    let r = as_user("evil", "PUT wake_stream victim/log", evil(Req::new("PUT", stream(&sub)).json(&wake_victim)).await);
    checks.status("subscription with a wake stream evil may not write", r.status, &r.body, &[403]);
    refusal_names(&r, &format!("write on {:?}", n("victim/log")), checks);

    // 2. Streams evil may not read, every way a subscription can name them.
    let webhook = json!({"type": "webhook", "pattern": n("secret/*"), "webhook": {"url": hook_url}});
    for (how, config, missing) in [
        (
            "a pattern under secret/",
            json!({"type": "pull-wake", "pattern": n("secret/**"), "wake_stream": n("mine/wakes")}),
            format!("read on {:?}", n("secret")),
        ),
        (
            "a pattern matching everything",
            json!({"type": "pull-wake", "pattern": "**", "wake_stream": n("mine/wakes")}),
            "read on \"\"".to_owned(),
        ),
        (
            "an explicit secret stream",
            json!({"type": "pull-wake", "streams": [n("mine/1"), n("secret/a")], "wake_stream": n("mine/wakes")}),
            format!("read on {:?}", n("secret/a")),
        ),
        ("a webhook on secret/*", webhook, format!("read on {:?}", n("secret/"))),
    ] {
        let r = as_user("evil", how, evil(Req::new("PUT", stream(&sub)).json(&config)).await);
        checks.status(&format!("subscription with {how}"), r.status, &r.body, &[403]);
        refusal_names(&r, &missing, checks);
    }
    let r = root(Req::new("GET", stream(&sub))).await;
    checks.status("nothing was stored by the refused subscriptions", r.status, &r.body, &[404]);

    // Streams appear and change: nothing may wake anyone about them.
    for req in [
        Req::new("PUT", stream(&n("mine/1"))).json(&json!({"n": 1})),
        Req::new("POST", stream(&n("mine/1"))).json(&json!({"n": 2})),
    ] {
        let r = as_user("evil", "write mine/1", evil(req).await);
        checks.status("evil writes its own stream", r.status, &r.body, &[201, 204]);
    }
    let r = root(Req::new("POST", stream(&n("secret/b"))).header("content-type", "text/plain").body(b"more")).await;
    checks.status("root appends to secret/b", r.status, &r.body, &[204]);
    let r = root(text(&n("secret/c"), 10)).await;
    checks.status("root creates secret/c", r.status, &r.body, &[201]);
    settle().await;
    let victim_after = tail(root(Req::new("HEAD", stream(&n("victim/log")))).await);
    if victim_after != victim_before {
        checks.fail(format!("victim/log moved from {victim_before} to {victim_after}: a wake was appended"));
    }
    if hook_count() != 0 {
        checks.fail(format!("the webhook receiver got {} deliveries", hook_count()));
    }

    // The allowed way: a subscription over evil's own streams works, and
    // adding a secret stream to it later is refused.
    let own = json!({"type": "pull-wake", "pattern": n("mine/*"), "wake_stream": n("mine/wakes")});
    let r = as_user("evil", "PUT own subscription", evil(Req::new("PUT", stream(&sub)).json(&own)).await);
    checks.status("subscription over evil's own streams", r.status, &r.body, &[201]);
    settle().await;
    let r = as_user(
        "evil",
        "add secret/a",
        evil(Req::new("POST", format!("{}/streams", stream(&sub))).json(&json!({"streams": [n("secret/a")]}))).await,
    );
    checks.status("adding a secret stream later", r.status, &r.body, &[403]);
    refusal_names(&r, &format!("read on {:?}", n("secret/a")), checks);
    let r = as_user("evil", "append mine/2", evil(Req::new("PUT", stream(&n("mine/2"))).json(&json!({"n": 3}))).await);
    checks.status("evil creates mine/2", r.status, &r.body, &[201]);
    settle().await;
    let r = as_user("evil", "read mine/wakes", evil(Req::new("GET", stream(&n("mine/wakes?offset=-1")))).await);
    checks.status("evil reads its wake stream", r.status, &r.body, &[200]);
    if !r.text().contains("\"wake\"") {
        checks.fail(format!("no wake event in mine/wakes after mine/2 was created: {}", r.text()));
    }
    let r = as_user("evil", "GET subscription", evil(Req::new("GET", stream(&sub))).await);
    checks.status("evil reads its subscription", r.status, &r.body, &[200]);
    if !r.text().contains(&n("mine/2")) {
        checks.fail(format!("the subscription does not list mine/2: {}", r.text()));
    }
    // Someone who may read the subscription but not its streams learns nothing from it.
    let r = as_user("peer", "GET subscription", peer(Req::new("GET", stream(&sub))).await);
    checks.status("peer reads the subscription without read on mine/", r.status, &r.body, &[403]);
    let claim = Req::new("POST", format!("{}/claim", stream(&sub))).json(&json!({"worker": "w"}));
    let r = as_user("peer", "claim", peer(claim.clone()).await);
    checks.status("peer claims without read on mine/", r.status, &r.body, &[403]);
    let r = as_user("evil", "claim", evil(claim).await);
    checks.status("evil claims its subscription", r.status, &r.body, &[200]);
    let claimed: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    let paths: Vec<&str> =
        claimed["streams"].as_array().into_iter().flatten().filter_map(|s| s["path"].as_str()).collect();
    if paths.is_empty() || paths.iter().any(|p| !p.starts_with(&n("mine/"))) {
        checks.fail(format!("the claim names {paths:?}: want only mine/ streams"));
    }
    let claim_token = claimed["token"].as_str().unwrap_or_default().to_owned();
    // A claim token acts on its wake only: as an access token it is nobody.
    let r = send(Req::new("GET", stream(&n("mine/1?offset=-1"))).bearer(Some(&claim_token))).await;
    checks.status("a claim token used to read a stream", r.status, &r.body, &[401]);

    // Nothing evil or peer saw names a secret stream or its offset.
    let r = root(Req::new("GET", stream(&n("mine/wakes?offset=-1")))).await;
    seen.push(("the wake stream mine/wakes".into(), r));
    for (what, r) in &seen {
        let text = r.text();
        for needle in
            ["secret/a", "secret/b", "secret/c"].iter().copied().chain(secret_tails.iter().map(String::as_str))
        {
            let own_input = r.status == 403 && needle == "secret/a" && text.contains("explicit stream");
            if !needle.is_empty() && text.contains(needle) && !own_input {
                checks.fail(format!("{what}: the answer names {needle:?}: {text}"));
            }
        }
    }
    claim_token
}

/// A refusal names the missing grant.
fn refusal_names(r: &Resp, grant: &str, checks: &mut Checks) {
    let message =
        serde_json::from_slice::<Value>(&r.body).ok().and_then(|v| v["error"]["message"].as_str().map(str::to_owned));
    if !message.as_deref().is_some_and(|m| m.contains(grant)) {
        checks.fail(format!("the refusal does not name {grant}: {}", r.text()));
    }
}
