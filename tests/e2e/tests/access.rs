//! Access control on the real server binary: the walk over the route
//! table, per-credential rate limits, CORS with access control, and the
//! refusal to serve a non-loopback address without it.
#![allow(clippy::unwrap_used)]

use std::process::Stdio;

use ds_e2e::access::{self, tcp_sender, Req};
use ds_e2e::walk::{self, Host};
use ds_e2e::{Checks, Server, ServerOpts, Store};

/// A server with static tokens (`root` allowed everything, and `others`
/// with their grants) and HS256 JWTs, the walk's processors configured.
struct Secured {
    server: Server,
    secret: String,
    root: String,
    _dir: tempfile::TempDir,
}

/// `others`: (name, token, the prefix it may read, write and administer).
async fn secured(others: &[(&str, &str, &str)], extra: &[&str]) -> Secured {
    let dir = tempfile::tempdir().unwrap();
    let secret = access::new_secret();
    let root = ds_auth::tokens::generate();
    let mut tokens = vec![serde_json::json!({"name": "root", "sha256": ds_auth::tokens::digest_hex(&root),
        "streams": [{"prefix": "", "ops": ["read", "write", "admin"]}]})];
    for (name, token, prefix) in others {
        tokens.push(serde_json::json!({"name": name, "sha256": ds_auth::tokens::digest_hex(token),
            "streams": [{"prefix": prefix, "ops": ["read", "write", "admin"]}]}));
    }
    std::fs::write(dir.path().join("secret"), &secret).unwrap();
    std::fs::write(dir.path().join("tokens.json"), serde_json::json!({ "tokens": tokens }).to_string()).unwrap();
    std::fs::write(dir.path().join("processors.toml"), walk::processors_toml("walk")).unwrap();
    let path = |f: &str| dir.path().join(f).display().to_string();
    let mut args: Vec<String> = vec![
        "--auth-tokens-file".into(),
        path("tokens.json"),
        "--jwt-hs256-secret-file".into(),
        path("secret"),
        "--jwt-issuer".into(),
        access::ISSUER.into(),
        "--jwt-audience".into(),
        access::AUDIENCE.into(),
        "--processors".into(),
        path("processors.toml"),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    // Debug logs: every refusal is logged, and no token may be among them.
    let env = vec![("RUST_LOG".to_owned(), "debug".to_owned())];
    let server = Server::start(ServerOpts { store: Store::Memory, extra_args: args, env, ..ServerOpts::default() })
        .await
        .unwrap();
    Secured { server, secret, root, _dir: dir }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_row_of_the_route_table_on_the_local_server() {
    let s = secured(&[], &[]).await;
    let send = tcp_sender(s.server.base.clone());
    let mut checks = Checks::new();
    let rows = walk::walk_route_table(&send, &s.secret, &s.root, "walk", &Host { metrics: 200 }, &mut checks).await;
    println!("route table: {rows} rows walked, {} checks", checks.count());
    // An unknown static token.
    let r = send(Req::new("HEAD", "/v1/stream/walk/read").bearer(Some(&ds_auth::tokens::generate()))).await;
    checks.status("unknown static token", r.status, &r.body, &[401]);
    checks.finish("route table walk (local server)");
    // Metrics count routes, never stream paths: every walked stream is under `walk/`.
    let metrics = ds_e2e::client().get(format!("{}/metrics", s.server.base)).bearer_auth(&s.root).send().await;
    let metrics = metrics.unwrap().text().await.unwrap();
    assert!(metrics.contains("route=\"subscription_claim\""), "{metrics}");
    assert!(!metrics.contains("walk/"), "a stream path in the metrics:\n{metrics}");
    let log = s.server.log();
    assert!(log.contains("request out of scope") && log.contains("request not authenticated"), "debug logs are on");
    // (The log may be coloured: look for the field and its value on one line.)
    let names_subject = |l: &&str| l.contains("out of scope") && l.contains("subject") && l.contains("walker");
    assert!(log.lines().any(|l| names_subject(&l)), "a refusal names the principal by its subject");
    assert!(!log.contains(&s.root), "a static token was logged");
    // Every JWT the walk sent starts with the base64 of `{"`.
    assert!(!log.contains("eyJ"), "a JWT was logged");
}

/// Two credentials with the same grants: one spends its budget (`429` with
/// `Retry-After`), the other is unaffected; a credential given its own
/// budget (`off`) has none; refused requests spend budget too.
#[tokio::test]
async fn a_credential_over_its_budget_gets_429_and_others_do_not() {
    let t = ds_auth::tokens::generate;
    let (a, b, free, narrow) = (t(), t(), t(), t());
    let s = secured(
        &[("a", &a, ""), ("b", &b, ""), ("free", &free, ""), ("narrow", &narrow, "elsewhere/")],
        &["--rate-limit", "1/min:3", "--rate-limit-for", "free=off"],
    )
    .await;
    let send = tcp_sender(s.server.base.clone());
    let create = |t: &str| Req::new("PUT", "/v1/stream/budget").header("content-type", "text/plain").bearer(Some(t));
    assert_eq!(send(create(&s.root)).await.status, 201, "root has a budget too, and this is its first request");
    let head = |t: &str| Req::new("HEAD", "/v1/stream/budget").bearer(Some(t));
    for i in 0..3 {
        assert_eq!(send(head(&a)).await.status, 200, "a's request {i} is within its burst of 3");
    }
    let over = send(Req::new("GET", "/v1/stream/budget?offset=-1").bearer(Some(&a))).await;
    assert_eq!(over.status, 429, "{}", over.text());
    let retry: u64 = over.retry_after.as_deref().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry} s: one request comes back per minute");
    let body: serde_json::Value = serde_json::from_slice(&over.body).unwrap();
    assert_eq!(body["error"]["code"], "RATE_LIMITED", "{body}");
    assert_eq!(send(head(&a)).await.status, 429, "still spent");
    for i in 0..3 {
        assert_eq!(send(head(&b)).await.status, 200, "b's request {i}: its own budget is untouched");
    }
    for i in 0..20 {
        assert_eq!(send(head(&free)).await.status, 200, "free's request {i}: no budget");
    }
    for i in 0..3 {
        assert_eq!(send(head(&narrow)).await.status, 403, "narrow's request {i} is out of scope");
    }
    assert_eq!(send(head(&narrow)).await.status, 429, "refused requests spent narrow's budget");
    // Requests without a credential spend nobody's budget, and public ones need none.
    assert_eq!(send(Req::new("HEAD", "/v1/stream/budget")).await.status, 401);
    assert_eq!(send(Req::new("GET", "/health")).await.status, 200);
    let metrics = ds_e2e::client().get(format!("{}/metrics", s.server.base)).bearer_auth(&s.root).send().await;
    let text = metrics.unwrap().text().await.unwrap();
    assert!(text.contains(r#"status="429""#), "429s are counted: {text}");
}

#[tokio::test]
async fn cors_origins_are_configurable_with_access_control() {
    let s = secured(&[], &["--cors-origins", "https://app.example"]).await;
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
fn serve_non_loopback(store: &[&str], extra: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(ds_e2e::server::server_bin())
        .args(["serve", "--bind", "192.0.2.1:4437"])
        .args(store)
        .args(extra)
        // Error output as a user sees it by default (no captured backtrace).
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn entries(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
}

#[test]
fn non_loopback_bind_needs_access_control_or_the_insecure_flag() {
    let (ok, out) = serve_non_loopback(&["--store", "memory"], &[]);
    assert!(!ok);
    let refusal: Vec<&str> =
        out.lines().filter(|l| l.contains("refusing to serve 192.0.2.1:4437 without access control")).collect();
    assert_eq!(refusal.len(), 1, "one clear line; output:\n{out}");
    assert!(refusal[0].contains("--insecure-no-auth"), "{out}");
    assert!(!out.contains("binding"), "refused before binding:\n{out}");

    // With --insecure-no-auth it warns and goes on to bind (which fails
    // here only because the machine has no such address).
    let (ok, out) = serve_non_loopback(&["--store", "memory"], &["--insecure-no-auth"]);
    assert!(!ok);
    assert!(out.contains("WITHOUT access control (--insecure-no-auth)"), "{out}");
    assert!(out.contains("binding 192.0.2.1:4437"), "{out}");

    // With access control configured it goes on to bind too, silently.
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    std::fs::write(&tokens, r#"{"tokens": []}"#).unwrap();
    let (ok, out) = serve_non_loopback(&["--store", "memory"], &["--auth-tokens-file", tokens.to_str().unwrap()]);
    assert!(!ok);
    assert!(out.contains("binding 192.0.2.1:4437") && !out.contains("refusing"), "{out}");
}

/// A refused start touches nothing: the local store's data directory stays
/// empty (no `streams.redb`, `streams.wal` or webhook signing key), and the
/// whole output is the one line saying why.
#[test]
fn a_refused_start_leaves_the_data_dir_empty() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().display().to_string();
    let (ok, out) = serve_non_loopback(&["--store", "local", "--data-dir", &data], &[]);
    assert!(!ok);
    assert_eq!(out.trim_end().lines().count(), 1, "one line:\n{out}");
    assert!(out.contains("refusing to serve 192.0.2.1:4437 without access control"), "{out}");
    assert_eq!(entries(dir.path()), Vec::<String>::new(), "the data dir was touched");

    // A data dir that does not exist yet is not created either.
    let absent = dir.path().join("not-yet");
    let (ok, _) = serve_non_loopback(&["--store", "local", "--data-dir", absent.to_str().unwrap()], &[]);
    assert!(!ok);
    assert!(!absent.exists());

    // Rate limits without access control are refused the same way.
    let (ok, out) = std::process::Command::new(ds_e2e::server::server_bin())
        .args(["serve", "--store", "local", "--data-dir", &data, "--rate-limit", "10/s"])
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .stdin(Stdio::null())
        .output()
        .map(|o| (o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned()))
        .unwrap();
    assert!(!ok);
    assert!(out.contains("rate limits are per credential"), "{out}");
    assert_eq!(entries(dir.path()), Vec::<String>::new(), "the data dir was touched");
}
