//! The adversarial campaign against the real server binary over TCP, for
//! the memory and the local store. The server must never answer 5xx, never
//! panic, never leave a connection hanging, keep answering afterwards, and
//! (local store) keep every acknowledged ledger append across a restart.
//! `DS_FUZZ_SERVER_REQUESTS` overrides the requests per store (2,000).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use ds_e2e::{Server, ServerOpts, Store};
use ds_reliability::campaign::{self, Settings};
use ds_reliability::client::Tcp;

/// Short server timeouts so stalled and live cases finish quickly (and a
/// 300 ms long-poll timeout).
pub const QUICK: &[&str] = &[
    "--sse-max-duration",
    "300ms",
    "--header-read-timeout",
    "300ms",
    "--body-read-timeout",
    "300ms",
    "--idle-timeout",
    "5s",
    "--send-timeout",
    "5s",
];

async fn campaign_against(store: Store, seed: u64) {
    let requests = std::env::var("DS_FUZZ_SERVER_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000);
    let opts = ServerOpts {
        store,
        extra_args: QUICK.iter().map(|s| (*s).to_owned()).collect(),
        long_poll_timeout: "300ms",
        ..ServerOpts::default()
    };
    let mut server = Server::start(opts.clone()).await.unwrap();
    let settings = Settings { requests, seed, workers: 8, ..Settings::default() };
    let report = campaign::run(Arc::new(Tcp(server.addr)), settings.clone()).await;
    let panics = server.log().matches("panicked").count();
    eprintln!("server ({store:?}): {}panics in the server log: {panics}", report.summary());
    server.assert_answers().await;
    assert_eq!(panics, 0, "server log:\n{}", server.log_tail());
    assert!(report.failures.is_empty(), "{} failures:\n{}", report.failures.len(), report.failures.join("\n"));
    assert_eq!(report.server_errors + report.hung + report.closed_unanswered, 0);
    assert!(report.tried >= requests as u64 && report.ledger_acked > 0);

    if store == Store::Local {
        // Every acknowledged ledger append survives a restart.
        let status = server.terminate(Duration::from_secs(15)).await.unwrap();
        assert!(matches!(status, Some(s) if s.success()), "SIGTERM: {status:?}\n{}", server.log_tail());
        let again = ServerOpts { data_dir: Some(server.data_dir.clone()), ..opts };
        let restarted = Server::start(again).await.unwrap();
        let target = Tcp(restarted.addr);
        for (w, acked) in &report.ledger {
            let path = format!("/v1/stream/ledger/{}/w{w}", settings.run);
            let got = campaign::read_stream(&target, &path, Duration::from_secs(10)).await.unwrap();
            assert!(got == campaign::ledger_content(*w, *acked), "ledger of worker {w} after restart");
        }
        drop(server);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adversarial_requests_against_the_server_memory() {
    campaign_against(Store::Memory, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adversarial_requests_against_the_server_local() {
    campaign_against(Store::Local, 3).await;
}
