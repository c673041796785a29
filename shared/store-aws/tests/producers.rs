//! Idempotent producers across instances: a retry that reaches another
//! instance is recognised as a duplicate even when that instance's producer
//! cache is stale and its meta cache is fresh (a reader refreshed it).
//! Found by the history campaign under network faults (a 503 "commit
//! outcome unknown" whose commit had landed, retried through the other
//! server, applied twice).

use std::time::Duration;

use bytes::Bytes;
use ds_core::{AppendOutcome, AppendRequest, CreateRequest, LiveMode, ReadRequest, ServiceConfig, StreamService};
use ds_protocol::headers::{Lifetime, ProducerHeaders};
use ds_protocol::ReadOffset;
use ds_store_aws::test_util::AwsFactory;

fn service(f: &AwsFactory) -> StreamService {
    let cfg = ServiceConfig { long_poll_timeout: Duration::from_secs(1), ..ServiceConfig::default() };
    StreamService::new(f.aws().substrate(), cfg)
}

fn append(path: &str, seq: u64, body: &'static [u8]) -> AppendRequest<'static> {
    AppendRequest {
        path: path.to_owned().into(),
        content_type: Some("text/plain".into()),
        body: Bytes::from_static(body),
        close: false,
        seq: None,
        producer: Some(ProducerHeaders { id: "p".into(), epoch: 0, seq }),
        dedupe_key: None,
        incarnation: None,
        expect_tail: None,
        trace_context: None,
    }
}

async fn everything(svc: &StreamService, path: &str) -> Bytes {
    let req = ReadRequest { path: path.to_owned(), offset: Some(ReadOffset::Beginning), live: LiveMode::None };
    svc.read(req).await.expect("read").body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_on_an_instance_with_a_stale_producer_cache_is_a_duplicate() {
    let Some(f) = AwsFactory::new("a_retry_on_an_instance_with_a_stale_producer_cache").await else { return };
    let (one, two) = (service(&f), service(&f));
    let path = format!("producers/stale/{}", uuid::Uuid::new_v4());
    let create = CreateRequest {
        path: path.clone(),
        content_type: Some("text/plain".into()),
        lifetime: Lifetime::default(),
        closed: false,
        body: Bytes::new(),
        fork: None,
    };
    one.create(create).await.expect("create");
    // Instance two learns producer p at seq 0 (its cache says so from now on).
    two.append(append(&path, 0, b"a")).await.expect("seq 0 through two");
    // Seq 1 lands through instance one (the attempt whose answer was lost).
    one.append(append(&path, 1, b"b")).await.expect("seq 1 through one");
    // A reader on instance two refreshes its meta cache: it now holds the
    // meta after seq 1, while its producer cache still says seq 0.
    assert_eq!(everything(&two, &path).await, Bytes::from_static(b"ab"));
    // The client's retry of seq 1 reaches instance two.
    let retry = two.append(append(&path, 1, b"b")).await.expect("the retry is answered");
    assert!(matches!(retry, AppendOutcome::Duplicate { .. }), "a duplicate, not a second application: {retry:?}");
    assert_eq!(everything(&one, &path).await, Bytes::from_static(b"ab"), "seq 1 applied once");
    // And the producer goes on from seq 2 through either instance.
    two.append(append(&path, 2, b"c")).await.expect("seq 2 through two");
    assert_eq!(everything(&one, &path).await, Bytes::from_static(b"abc"));
}
