//! Access control on the real server binary: the route × token matrix, the
//! refusal to serve a non-loopback address without it, static tokens.
#![allow(clippy::unwrap_used)]

use std::process::Stdio;

use ds_e2e::access::{self, Req, Resp};
use ds_e2e::{Checks, Server, ServerOpts, Store};

/// A server with static tokens (one root token) and HS256 JWTs.
struct Secured {
    server: Server,
    secret: String,
    root: String,
    _dir: tempfile::TempDir,
}

async fn secured(extra: &[&str]) -> Secured {
    let dir = tempfile::tempdir().unwrap();
    let secret = access::new_secret();
    let root = ds_auth::tokens::generate();
    let tokens = serde_json::json!({"tokens": [{"name": "root", "sha256": ds_auth::tokens::digest_hex(&root),
        "streams": [{"prefix": "", "ops": ["read", "write", "admin"]}]}]});
    std::fs::write(dir.path().join("secret"), &secret).unwrap();
    std::fs::write(dir.path().join("tokens.json"), tokens.to_string()).unwrap();
    let mut args: Vec<String> = vec![
        "--auth-tokens-file".into(),
        dir.path().join("tokens.json").display().to_string(),
        "--jwt-hs256-secret-file".into(),
        dir.path().join("secret").display().to_string(),
        "--jwt-issuer".into(),
        access::ISSUER.into(),
        "--jwt-audience".into(),
        access::AUDIENCE.into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let server =
        Server::start(ServerOpts { store: Store::Memory, extra_args: args, ..ServerOpts::default() }).await.unwrap();
    Secured { server, secret, root, _dir: dir }
}

fn sender(base: String) -> impl Fn(Req) -> std::pin::Pin<Box<dyn std::future::Future<Output = Resp> + Send>> + Sync {
    let client = ds_e2e::client();
    move |req: Req| {
        let client = client.clone();
        let url = format!("{base}{}", req.target);
        Box::pin(async move {
            let mut r = client.request(req.method.parse().unwrap(), url).body(req.body);
            for (k, v) in &req.headers {
                r = r.header(k, v);
            }
            let resp = r.send().await.unwrap();
            let h = |n: &str| resp.headers().get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
            let (status, www_authenticate, content_type) =
                (resp.status().as_u16(), h("www-authenticate"), h("content-type"));
            // A live read's body does not end: read bodies of errors only.
            let body = if status >= 400 { resp.bytes().await.unwrap().to_vec() } else { Vec::new() };
            Resp { status, www_authenticate, content_type, body }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_and_token_case_on_the_local_server() {
    let s = secured(&[]).await;
    let send = sender(s.server.base.clone());
    let mut checks = Checks::new();
    access::run(&send, &s.secret, &s.root, "matrix", 200, &mut checks).await;

    // A fork needs read on its source as well as admin where it is made.
    let admin_only = access::token(&s.secret, access::TokenCase::InScope, &[("fork-b".into(), ds_auth::Op::Admin)]);
    let r = send(
        Req {
            method: "PUT",
            target: "/v1/stream/fork-a".into(),
            headers: vec![("content-type".into(), "text/plain".into())],
            body: vec![],
        }
        .bearer(Some(&s.root)),
    )
    .await;
    checks.status("create fork source", r.status, &r.body, &[201]);
    let fork = Req {
        method: "PUT",
        target: "/v1/stream/fork-b".into(),
        headers: vec![("stream-forked-from".into(), "fork-a".into())],
        body: vec![],
    };
    let r = send(fork.bearer(admin_only.as_deref())).await;
    checks.status("fork without read on the source", r.status, &r.body, &[403]);
    // An unknown static token.
    let r = send(
        Req { method: "HEAD", target: "/v1/stream/fork-a".into(), headers: vec![], body: vec![] }
            .bearer(Some(&ds_auth::tokens::generate())),
    )
    .await;
    checks.status("unknown static token", r.status, &r.body, &[401]);
    checks.finish("access matrix (local server)");
    let log = s.server.log_tail();
    assert!(!log.contains(&s.root), "a token was logged");
}

#[tokio::test]
async fn cors_origins_are_configurable_with_access_control() {
    let s = secured(&["--cors-origins", "https://app.example"]).await;
    let client = ds_e2e::client();
    let url = format!("{}/v1/stream/cors", s.server.base);
    let get = |origin: &'static str| client.get(&url).header("origin", origin).send();
    let allowed = get("https://app.example").await.unwrap();
    assert_eq!(allowed.status(), 401, "the origin check does not replace authentication");
    assert_eq!(ds_e2e::header(&allowed, "access-control-allow-origin").as_deref(), Some("https://app.example"));
    assert!(ds_e2e::header(&allowed, "vary").unwrap_or_default().contains("origin"));
    let other = get("https://evil.example").await.unwrap();
    assert_eq!(ds_e2e::header(&other, "access-control-allow-origin"), None);
    let preflight = client
        .request(reqwest::Method::OPTIONS, &url)
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "authorization, content-type")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 204);
    assert_eq!(
        ds_e2e::header(&preflight, "access-control-allow-headers").as_deref(),
        Some("authorization, content-type")
    );
}

/// `serve` on a non-loopback address that this machine does not have
/// (TEST-NET-1): the access-control check runs before binding, so the test
/// never listens beyond loopback. Returns (exit success, output).
fn serve_non_loopback(extra: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(ds_e2e::server::server_bin())
        .args(["serve", "--store", "memory", "--bind", "192.0.2.1:4437"])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn non_loopback_bind_needs_access_control_or_the_insecure_flag() {
    let (ok, out) = serve_non_loopback(&[]);
    assert!(!ok);
    let refusal: Vec<&str> =
        out.lines().filter(|l| l.contains("refusing to serve 192.0.2.1:4437 without access control")).collect();
    assert_eq!(refusal.len(), 1, "one clear line; output:\n{out}");
    assert!(refusal[0].contains("--insecure-no-auth"), "{out}");
    assert!(!out.contains("binding"), "refused before binding:\n{out}");

    // With --insecure-no-auth it warns and goes on to bind (which fails
    // here only because the machine has no such address).
    let (ok, out) = serve_non_loopback(&["--insecure-no-auth"]);
    assert!(!ok);
    assert!(out.contains("WITHOUT access control (--insecure-no-auth)"), "{out}");
    assert!(out.contains("binding 192.0.2.1:4437"), "{out}");

    // With access control configured it goes on to bind too, silently.
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    std::fs::write(&tokens, r#"{"tokens": []}"#).unwrap();
    let (ok, out) = serve_non_loopback(&["--auth-tokens-file", tokens.to_str().unwrap()]);
    assert!(!ok);
    assert!(out.contains("binding 192.0.2.1:4437") && !out.contains("refusing"), "{out}");
}
