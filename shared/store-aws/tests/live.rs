//! Live reads and expiry across instances: the poll-backed hub wakes a
//! long-poll on one instance for an append made on another, a same-instance
//! append wakes at once, and an expired stream reads as gone before any alarm.

use std::time::{Duration, Instant};

use bytes::Bytes;
use ds_core::{AppendRequest, CreateRequest, LiveMode, ReadRequest, ServiceConfig, ServiceError, StreamService};
use ds_protocol::headers::Lifetime;
use ds_protocol::{Offset, ReadOffset};
use ds_store_aws::test_util::AwsFactory;

fn create_req(path: &str, lifetime: Lifetime) -> CreateRequest {
    CreateRequest {
        path: path.to_owned(),
        content_type: Some("text/plain".into()),
        lifetime,
        closed: false,
        body: Bytes::new(),
        fork: None,
    }
}

fn append_req(path: &str, body: &'static [u8]) -> AppendRequest<'static> {
    AppendRequest {
        path: path.to_owned().into(),
        content_type: Some("text/plain".into()),
        body: Bytes::from_static(body),
        close: false,
        seq: None,
        producer: None,
        dedupe_key: None,
        incarnation: None,
        expect_tail: None,
        trace_context: None,
    }
}

fn service(f: &AwsFactory) -> StreamService {
    let cfg = ServiceConfig { long_poll_timeout: Duration::from_secs(10), ..ServiceConfig::default() };
    StreamService::new(f.aws().substrate(), cfg)
}

async fn long_poll_at_tail(svc: &StreamService, path: &str) -> (Bytes, Duration) {
    let tail = svc.head(path).await.expect("head").tail;
    let started = Instant::now();
    let out = svc
        .read(ReadRequest {
            path: path.to_owned(),
            offset: Some(ReadOffset::At(Offset(tail))),
            live: LiveMode::LongPoll,
        })
        .await
        .expect("long-poll");
    assert!(!out.no_content, "the long-poll was woken by the append");
    (out.body, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn long_poll_on_one_instance_sees_an_append_on_another() {
    let Some(f) = AwsFactory::new("long_poll_on_one_instance_sees_an_append_on_another").await else { return };
    let (reader, writer) = (service(&f), service(&f));
    let path = format!("live/cross/{}", uuid::Uuid::new_v4());
    writer.create(create_req(&path, Lifetime::default())).await.expect("create");
    writer.append(append_req(&path, b"first")).await.expect("append");

    let poll = {
        let (reader, path) = (reader.clone(), path.clone());
        tokio::spawn(async move { long_poll_at_tail(&reader, &path).await })
    };
    // Long enough for the poller to back off to its slowest interval.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let appended_at = Instant::now();
    writer.append(append_req(&path, b"second")).await.expect("append");
    let (body, _) = poll.await.expect("reader");
    assert_eq!(body, Bytes::from_static(b"second"));
    let lag = appended_at.elapsed();
    assert!(lag < Duration::from_secs(2), "seen within about one max poll interval, took {lag:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_instance_append_wakes_at_once() {
    let Some(f) = AwsFactory::new("same_instance_append_wakes_at_once").await else { return };
    let svc = service(&f);
    let path = format!("live/local/{}", uuid::Uuid::new_v4());
    svc.create(create_req(&path, Lifetime::default())).await.expect("create");
    let poll = {
        let (svc, path) = (svc.clone(), path.clone());
        tokio::spawn(async move { long_poll_at_tail(&svc, &path).await })
    };
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let appended = Instant::now();
    svc.append(append_req(&path, b"local")).await.expect("append");
    let committed = appended.elapsed();
    let (body, _) = poll.await.expect("reader");
    let woke = appended.elapsed();
    assert_eq!(body, Bytes::from_static(b"local"));
    // The reader returns right after the commit, not at the next poll
    // (which is up to 500 ms away at this point).
    assert!(woke < committed + Duration::from_millis(300), "commit {committed:?}, reader back after {woke:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_stream_reads_as_gone_before_its_alarm_fires() {
    let Some(f) = AwsFactory::new("expired_stream_reads_as_gone_before_its_alarm_fires").await else { return };
    let (a, b) = (service(&f), service(&f));
    let path = format!("live/expired/{}", uuid::Uuid::new_v4());
    a.create(create_req(&path, Lifetime { ttl_secs: Some(1), expires_at_ms: None })).await.expect("create");
    a.append(append_req(&path, b"short-lived")).await.expect("append");
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    // The emulator never fires the schedule: only lazy expiry can hide it.
    assert!(matches!(b.head(&path).await, Err(ServiceError::NotFound)), "another instance: gone");
    let read =
        a.read(ReadRequest { path: path.clone(), offset: Some(ReadOffset::Beginning), live: LiveMode::None }).await;
    assert!(matches!(read, Err(ServiceError::NotFound)), "gone for reads too: {read:?}");
    // The path is free again.
    a.create(create_req(&path, Lifetime::default())).await.expect("re-create after expiry");
}
