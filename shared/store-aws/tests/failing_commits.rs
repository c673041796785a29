//! A failing commit never leaves a readable partial append: injected
//! condition failures (a real competing writer), S3 errors, throttling and
//! lost acknowledgements, through the core's append path.

use bytes::Bytes;
use ds_core::contract::fixtures::{append_request as append_req, create_request as create_req, read_request};
use ds_core::{ServiceConfig, ServiceError, StoreError, StreamService};
use ds_store_aws::config::RetryConfig;
use ds_store_aws::test_util::AwsFactory;
use ds_store_aws::{AwsConfig, AwsSubstrate, Fault, FaultPoint};

const BIG: usize = 100 * 1024; // above the inline threshold: goes through S3

async fn read_all(svc: &StreamService, path: &str) -> (Bytes, u64) {
    let out = svc.read(read_request(path)).await.expect("read");
    (out.body, out.meta.tail)
}

/// Keys of every object stored for `path` (any incarnation).
async fn objects_of(f: &AwsFactory, path: &str) -> Vec<String> {
    let digest = ds_store_aws::schema::path_digest(path);
    let mut keys = Vec::new();
    for top in ["chunks", "segments"] {
        let out = f
            .clients()
            .s3
            .list_objects_v2()
            .bucket(&f.cfg.bucket)
            .prefix(format!("{top}/{digest}/"))
            .send()
            .await
            .expect("list objects");
        keys.extend(out.contents().iter().filter_map(|o| o.key().map(str::to_owned)));
    }
    keys
}

fn setup(f: &AwsFactory) -> (AwsSubstrate, StreamService) {
    // A count of attempts, not the default's time budget, ends a commit's
    // retries here: the tests inject exactly that many throttles.
    let retry = RetryConfig { attempts: 6, budget: std::time::Duration::from_secs(60), ..RetryConfig::default() };
    let aws = f.aws_with(AwsConfig { retry, ..f.cfg.clone() });
    let cfg = ServiceConfig { max_commit_attempts: 64, ..ServiceConfig::default() };
    let svc = StreamService::new(aws.substrate(), cfg);
    (aws, svc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_commit_leaves_nothing_and_cleans_its_object() {
    let Some(f) = AwsFactory::new("throttled_commit_leaves_nothing_and_cleans_its_object").await else { return };
    let (aws, svc) = setup(&f);
    let path = format!("fail/throttle/{}", uuid::Uuid::new_v4());
    svc.create(create_req(&path)).await.expect("create");
    svc.append(append_req(&path, Bytes::from_static(b"before"))).await.expect("append");

    // Every attempt throttled: the append fails as unavailable...
    let attempts = aws.config().retry.attempts as usize;
    aws.inject_fault(FaultPoint::Transact, Fault::Throttle, attempts);
    let err = svc.append(append_req(&path, Bytes::from(vec![b'x'; BIG]))).await.expect_err("throttled");
    assert!(matches!(err, ServiceError::Store(StoreError::Unavailable(_))), "{err:?}");
    assert_eq!(aws.pending_faults(), 0);
    // ...nothing of it is readable, from this or another instance, and its
    // S3 object was removed.
    let (other_aws, other) = setup(&f);
    drop(other_aws);
    for s in [&svc, &other] {
        assert_eq!(read_all(s, &path).await, (Bytes::from_static(b"before"), 6));
    }
    assert!(objects_of(&f, &path).await.is_empty(), "the uncommitted object was deleted");

    // Throttling that clears within the retry budget is invisible.
    aws.inject_fault(FaultPoint::Transact, Fault::Throttle, 2);
    svc.append(append_req(&path, Bytes::from_static(b"after"))).await.expect("retried append");
    assert_eq!(read_all(&other, &path).await, (Bytes::from_static(b"beforeafter"), 11));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_failure_fails_the_append_before_any_commit() {
    let Some(f) = AwsFactory::new("s3_failure_fails_the_append_before_any_commit").await else { return };
    let (aws, svc) = setup(&f);
    let path = format!("fail/s3/{}", uuid::Uuid::new_v4());
    svc.create(create_req(&path)).await.expect("create");
    aws.inject_fault(FaultPoint::S3Put, Fault::Reject, 1);
    let err = svc.append(append_req(&path, Bytes::from(vec![b'x'; BIG]))).await.expect_err("S3 rejected");
    assert!(matches!(err, ServiceError::Store(StoreError::Backend { .. })), "{err:?}");
    let meta = svc.head(&path).await.expect("head");
    assert_eq!((meta.tail, meta.version), (0, 0), "no commit happened");
    assert_eq!(read_all(&svc, &path).await.0.len(), 0);
    assert!(objects_of(&f, &path).await.is_empty());

    // A failing ranged GET fails the read; it never returns partial data.
    svc.append(append_req(&path, Bytes::from(vec![b'y'; BIG]))).await.expect("append");
    aws.inject_fault(FaultPoint::S3Get, Fault::Throttle, 1);
    let err = svc.read(read_request(&path)).await.expect_err("GET failed");
    assert!(matches!(err, ServiceError::Store(StoreError::Unavailable(_))), "{err:?}");
    assert_eq!(read_all(&svc, &path).await.0, Bytes::from(vec![b'y'; BIG]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_race_leaves_no_trace_of_the_loser() {
    let Some(f) = AwsFactory::new("lost_race_leaves_no_trace_of_the_loser").await else { return };
    let (a_aws, a) = setup(&f);
    let (_b_aws, b) = setup(&f);
    let path = format!("fail/race/{}", uuid::Uuid::new_v4());
    a.create(create_req(&path)).await.expect("create");
    // Warm A's cache, then let B commit behind A's back: A's next commit is
    // built on a stale version and fails its condition (a real injected
    // condition failure), then the core re-plans from the ALL_OLD image.
    a.append(append_req(&path, Bytes::from(vec![b'a'; BIG]))).await.expect("a1");
    b.append(append_req(&path, Bytes::from(vec![b'b'; BIG]))).await.expect("b1");
    a.append(append_req(&path, Bytes::from(vec![b'c'; BIG]))).await.expect("a2 after one lost race");
    let (body, tail) = read_all(&b, &path).await;
    assert_eq!(tail, 3 * BIG as u64);
    let expected: Vec<u8> = [b'a', b'b', b'c'].iter().flat_map(|c| vec![*c; BIG]).collect();
    assert_eq!(body, Bytes::from(expected));
    let objects = objects_of(&f, &path).await;
    assert_eq!(objects.len(), 3, "the losing attempt's object was deleted: {objects:?}");
    drop(a_aws);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_acknowledgement_is_recognised_not_duplicated() {
    let Some(f) = AwsFactory::new("lost_acknowledgement_is_recognised_not_duplicated").await else { return };
    let (aws, svc) = setup(&f);
    let path = format!("fail/lost-ack/{}", uuid::Uuid::new_v4());
    svc.create(create_req(&path)).await.expect("create");
    // The transaction is applied but its answer is lost: the retry (same
    // token; the emulator, unlike DynamoDB, re-runs it and fails the version
    // condition) recognises its own commit id in the ALL_OLD image.
    aws.inject_fault(FaultPoint::Transact, Fault::LoseAck, 1);
    svc.append(append_req(&path, Bytes::from(vec![b'q'; BIG]))).await.expect("append succeeds once");
    let (body, tail) = read_all(&svc, &path).await;
    assert_eq!(tail, BIG as u64, "applied exactly once");
    assert_eq!(body.len(), BIG);
    assert_eq!(objects_of(&f, &path).await.len(), 1, "its object is kept: it is referenced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_commit_is_reported_and_leaves_nothing() {
    let Some(f) = AwsFactory::new("rejected_commit_is_reported_and_leaves_nothing").await else { return };
    let (aws, svc) = setup(&f);
    let path = format!("fail/reject/{}", uuid::Uuid::new_v4());
    svc.create(create_req(&path)).await.expect("create");
    aws.inject_fault(FaultPoint::Transact, Fault::Reject, 1);
    let err = svc.append(append_req(&path, Bytes::from(vec![b'r'; BIG]))).await.expect_err("rejected");
    assert!(matches!(err, ServiceError::Store(StoreError::Backend { .. })), "{err:?}");
    assert_eq!(read_all(&svc, &path).await.1, 0);
    assert!(objects_of(&f, &path).await.is_empty());
}
