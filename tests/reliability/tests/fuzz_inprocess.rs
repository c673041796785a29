//! The adversarial campaign against the router over the memory substrate,
//! in-process (real HTTP/1.1 parsing through `ds_serve::serve_connection`).
//! `DS_FUZZ_REQUESTS` overrides the number of generated requests (5,000).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use ds_reliability::campaign::{self, Settings};
use ds_reliability::inprocess;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adversarial_requests_in_process() {
    inprocess::count_panics();
    let requests = std::env::var("DS_FUZZ_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(5_000);
    let seed = std::env::var("DS_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let (target, _service) = inprocess::memory_target();
    let settings = Settings { requests, seed, ..Settings::default() };
    let report = campaign::run(Arc::new(target), settings).await;
    eprintln!("in-process (memory): {}panics: {}", report.summary(), inprocess::panics());
    assert!(report.tried >= requests as u64);
    assert_eq!(inprocess::panics(), 0, "panics");
    assert!(report.failures.is_empty(), "{} failures:\n{}", report.failures.len(), report.failures.join("\n"));
    assert_eq!(report.server_errors + report.hung + report.closed_unanswered, 0);
}
