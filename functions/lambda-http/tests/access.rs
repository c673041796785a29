//! Access control inside the HTTP function (for `AuthType: NONE` Function
//! URLs), configured from the environment as the template sets it: the walk
//! over every row of the route table, as on the local server, and
//! per-credential rate limits, as Function URL events through the real
//! handler over the AWS substrate on the emulator.

mod common;

use std::collections::HashMap;

use ds_e2e::access::{self, Req};
use ds_e2e::walk::{self, Host};
use ds_e2e::Checks;

fn token_file(tokens: &[(&str, &str)]) -> String {
    let entries: Vec<serde_json::Value> = tokens
        .iter()
        .map(|(name, token)| {
            serde_json::json!({"name": name, "sha256": ds_auth::tokens::digest_hex(token),
                "streams": [{"prefix": "", "ops": ["read", "write", "admin"]}]})
        })
        .collect();
    serde_json::json!({ "tokens": entries }).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_row_of_the_route_table_through_the_handler() {
    if !common::emulator("every_row_of_the_route_table_through_the_handler") {
        return;
    }
    let secret = access::new_secret();
    let root = ds_auth::tokens::generate();
    // The emulator's table is shared by the tests: paths of this run only.
    let tag = format!("walk{}", std::process::id());
    let env: HashMap<&str, String> = HashMap::from([
        ("DS_AUTH_TOKENS", token_file(&[("root", &root)])),
        ("DS_JWT_HS256_SECRET", secret.clone()),
        ("DS_JWT_ISSUER", access::ISSUER.to_owned()),
        ("DS_JWT_AUDIENCE", access::AUDIENCE.to_owned()),
        ("DS_PROCESSORS_TOML", walk::processors_toml(&tag)),
    ]);
    let send = common::handler_sender(common::router(common::service().await, env).await);
    let mut checks = Checks::new();
    // No Prometheus endpoint on Lambda (EMF lines instead): an in-scope
    // /metrics is a 404, still only after authentication.
    let rows = walk::walk_route_table(&send, &secret, &root, &tag, &Host { metrics: 404 }, &mut checks).await;
    println!("route table: {rows} rows walked, {} checks", checks.count());
    checks.finish("route table walk (Lambda handler)");
}

/// Budgets are per execution environment on Lambda: this handler is one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_over_its_budget_gets_429_through_the_handler() {
    if !common::emulator("a_credential_over_its_budget_gets_429_through_the_handler") {
        return;
    }
    let (a, b) = (ds_auth::tokens::generate(), ds_auth::tokens::generate());
    let env: HashMap<&str, String> = HashMap::from([
        ("DS_AUTH_TOKENS", token_file(&[("a", &a), ("b", &b)])),
        ("DS_RATE_LIMIT", "1/min:2".to_owned()),
    ]);
    let send = common::handler_sender(common::router(common::service().await, env).await);
    // The emulator's table is shared by the tests: a stream of this run only.
    let stream = format!("/v1/stream/budget{}", std::process::id());
    let head = |t: &str| Req::new("HEAD", stream.clone()).bearer(Some(t));
    let created = send(Req::new("PUT", stream.clone()).header("content-type", "text/plain").bearer(Some(&a))).await;
    assert_eq!(created.status, 201);
    assert_eq!(send(head(&a)).await.status, 200, "a's second request: its burst is 2");
    let over = send(head(&a)).await;
    assert_eq!(over.status, 429);
    let retry: u64 = over.retry_after.as_deref().expect("Retry-After").parse().expect("seconds");
    assert!((1..=60).contains(&retry), "{retry}");
    for i in 0..2 {
        assert_eq!(send(head(&b)).await.status, 200, "b's request {i}: its own budget");
    }
}
