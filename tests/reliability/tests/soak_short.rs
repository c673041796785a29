//! The soak's short version (`make test-long` runs 10 minutes): 20 s of the
//! same mixed load against the local store. Asserts 0 errors and every
//! acknowledged append readable; the memory curve needs the long run.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use ds_e2e::{Server, ServerOpts};
use ds_reliability::soak;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_soak_on_the_local_store() {
    let args = ["--sse-max-duration", "3s"];
    let opts = ServerOpts {
        long_poll_timeout: "2s",
        extra_args: args.iter().map(|a| (*a).to_owned()).collect(),
        ..ServerOpts::default()
    };
    let mut server = Server::start(opts).await.unwrap();
    let secs = std::env::var("DS_SOAK_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let report =
        soak::run(&server.base, server.pid(), Duration::from_secs(secs), Duration::from_secs(2)).await.unwrap();
    eprintln!("{}", report.markdown("Short soak", Duration::from_secs(5), ""));
    assert_eq!(report.error_count, 0, "{:?}", report.errors);
    assert!(report.appends > 0 && report.reads > 0 && report.churned > 0 && report.expired > 0);
    assert_eq!(report.verified, report.appends, "acknowledged appends not readable");
    server.assert_answers().await;
}
