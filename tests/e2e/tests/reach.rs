//! A subscription reaches only what its creator may touch, on the real
//! server binary over the local store (`ds_e2e::reach` has the scenarios;
//! the Lambda handler runs them too).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use ds_e2e::access::tcp_sender;
use ds_e2e::webhook::Receiver;
use ds_e2e::{reach, Checks, Server, ServerOpts, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_reach_no_further_than_their_creator_on_the_local_store() {
    let dir = tempfile::tempdir().unwrap();
    let creds = reach::Creds::new("reach");
    let tokens = dir.path().join("tokens.json");
    std::fs::write(&tokens, creds.token_file().to_string()).unwrap();
    let args = vec!["--auth-tokens-file".into(), tokens.display().to_string(), "--webhook-allow-loopback".into()];
    // Debug logs: every refusal is logged, and no token may be among them.
    let env = vec![("RUST_LOG".to_owned(), "debug".to_owned())];
    let server = Server::start(ServerOpts { store: Store::Local, extra_args: args, env, ..ServerOpts::default() })
        .await
        .unwrap();
    let hook = Receiver::start(0).await.unwrap();
    let send = tcp_sender(server.base.clone());
    let settle = || -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(tokio::time::sleep(Duration::from_millis(500)))
    };
    let count = || hook.deliveries().len();
    let mut checks = Checks::new();
    let claim_token = reach::run(&send, &creds, &hook.url, &count, &settle, &mut checks).await;
    checks.finish("subscription reach (local store)");
    let log = server.log();
    assert!(log.contains("request out of scope"), "debug logs are on");
    assert!(claim_token.len() > 20 && !log.contains(&claim_token), "a claim token was logged");
    assert!(!log.contains(&creds.evil) && !log.contains(&creds.root), "an access token was logged");
}
