//! The retention runner over the memory substrate, on a manual clock:
//! `max_bytes` keeps about the newest bytes, `max_age` drops bytes only once
//! they are older than it (never earlier), the longest prefix governs, and
//! the registry is never trimmed.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ds_core::contract::fixtures::{append_request, create_request};
use ds_core::{Clock, RetentionPolicy, RetentionRunner, ServiceConfig, StreamService, StreamStore};
use ds_store_memory::MemoryStore;

fn service(clock: &Clock) -> StreamService {
    let store: Arc<dyn StreamStore> = Arc::new(MemoryStore::new());
    let (sub, _) = ds_inproc::in_process_substrate(store);
    StreamService::new(sub, ServiceConfig::default()).with_clock(clock.clone())
}

/// Append `n` appends of 5,000 bytes (each its own chunk: an exact boundary).
async fn fill(svc: &StreamService, path: &str, n: usize) -> u64 {
    let mut tail = 0;
    for _ in 0..n {
        tail = svc.append(append_request(path, Bytes::from(vec![b'x'; 5000]))).await.expect("append").meta().tail;
    }
    tail
}

fn policy(prefix: &str, max_age: Option<Duration>, max_bytes: Option<u64>) -> RetentionPolicy {
    RetentionPolicy { prefix: prefix.into(), max_age, max_bytes }
}

#[tokio::test]
async fn max_bytes_keeps_the_newest_and_the_longest_prefix_governs() {
    let clock = Clock::manual(1_000_000);
    let svc = service(&clock);
    for path in ["logs/a", "logs/keep/b", "other/c"] {
        svc.create(create_request(path)).await.expect("create");
        fill(&svc, path, 10).await;
    }
    let policies = vec![policy("logs/", None, Some(12_000)), policy("logs/keep/", None, Some(1 << 30))];
    let mut runner = RetentionRunner::new(svc.clone(), policies);
    let pass = runner.pass().await;
    assert_eq!((pass.streams, pass.trimmed, pass.failed), (2, 1, 0));
    // 50,000 - 12,000 = 38,000: the append boundary at or before it.
    assert_eq!(svc.head("logs/a").await.expect("head").retained_from, 35_000);
    assert_eq!(svc.head("logs/keep/b").await.expect("head").retained_from, 0, "its own, longer prefix keeps all");
    assert_eq!(svc.head("other/c").await.expect("head").retained_from, 0, "no policy");
    assert_eq!(runner.pass().await.trimmed, 0, "nothing more to trim");
    let registry = svc.head(ds_core::REGISTRY_PATH).await.expect("registry");
    assert_eq!(registry.retained_from, 0);
}

#[tokio::test]
async fn max_age_drops_bytes_only_once_they_are_old() {
    let clock = Clock::manual(1_000_000);
    let svc = service(&clock);
    svc.create(create_request("aged/s")).await.expect("create");
    let first = fill(&svc, "aged/s", 2).await;
    let mut runner = RetentionRunner::new(svc.clone(), vec![policy("", Some(Duration::from_secs(60)), None)]);
    assert_eq!(runner.pass().await.trimmed, 0, "nothing is a minute old yet");
    clock.advance(30_000);
    let second = fill(&svc, "aged/s", 2).await;
    assert_eq!(runner.pass().await.trimmed, 0);
    clock.advance(31_000);
    assert_eq!(runner.pass().await.trimmed, 1, "the first appends are over a minute old");
    assert_eq!(svc.head("aged/s").await.expect("head").retained_from, first);
    clock.advance(20_000);
    assert_eq!(runner.pass().await.trimmed, 0, "the second ones are 51 s old");
    clock.advance(10_000);
    assert_eq!(runner.pass().await.trimmed, 1);
    assert_eq!(svc.head("aged/s").await.expect("head").retained_from, second);
}
