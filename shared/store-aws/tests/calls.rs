//! AWS calls per operation, counted at the emulator (`/_emulator/calls`).
//!
//! The one test in this binary runs its phases in sequence (the emulator's
//! counter is global, so nothing else may run beside it) and prints the
//! table of calls per operation (`bash infra/aws-calls.sh`).
//!
//! Bars (the acceptance criteria):
//! - warm 100-byte append: exactly 1 DynamoDB call, 0 S3 calls;
//! - catch-up read of inline chunks: ≤ 2 calls while the range fits one
//!   DynamoDB `Query` page (1 MB of items); see the report for 1 MiB;
//! - 1 MiB append: exactly 1 S3 `PutObject` + 1 DynamoDB `TransactWriteItems`.

use bytes::Bytes;
use ds_core::contract::fixtures::{
    append_request as append_req, create_request as create_req, read_request as read_req,
};
use ds_core::{LiveMode, ReadRequest, StreamService};
use ds_protocol::headers::Lifetime;
use ds_protocol::ReadOffset;
use ds_store_aws::test_util::{count, total, AwsFactory, CallCounter, Calls};

/// The same substrate with another long-poll timeout.
fn svc_with_timeout(svc: &StreamService, ms: u64) -> StreamService {
    let cfg =
        ds_core::ServiceConfig { long_poll_timeout: std::time::Duration::from_millis(ms), ..svc.config().clone() };
    StreamService::new(svc.substrate().clone(), cfg)
}

struct Row {
    op: &'static str,
    calls: Calls,
}

fn render(rows: &[Row]) -> String {
    let mut out = String::from("\nAWS calls per operation (counted at the emulator):\n");
    out.push_str(&format!("{:<52} {:>5} {:>4} {:>9}  {}\n", "operation", "DDB", "S3", "Scheduler", "detail"));
    for r in rows {
        let detail: Vec<String> =
            r.calls.iter().flat_map(|(svc, ops)| ops.iter().map(move |(op, n)| format!("{svc}:{op}={n}"))).collect();
        out.push_str(&format!(
            "{:<52} {:>5} {:>4} {:>9}  {}\n",
            r.op,
            total(&r.calls, "dynamodb"),
            total(&r.calls, "s3"),
            total(&r.calls, "scheduler"),
            detail.join(" ")
        ));
    }
    out
}

/// Run `fut` as its own task (as `axum::serve` runs every request) and
/// count the AWS calls it made.
async fn measure<Fut, T>(counter: &CallCounter, rows: &mut Vec<Row>, op: &'static str, fut: Fut) -> (T, Calls)
where
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    counter.reset().await;
    let out = tokio::spawn(fut).await.expect("operation task");
    let calls = counter.calls().await;
    rows.push(Row { op, calls: calls.clone() });
    (out, calls)
}

/// An owned future calling `f` on a clone of the service.
fn op<F, Fut, T>(svc: &StreamService, f: F) -> impl std::future::Future<Output = T> + Send + 'static
where
    F: FnOnce(StreamService) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let svc = svc.clone();
    async move { f(svc).await }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_per_operation() {
    let Some(f) = AwsFactory::new("calls_per_operation").await else { return };
    let counter = CallCounter::new().expect("emulator endpoint");
    let (_aws, svc): (_, StreamService) = f.service();
    let path = format!("calls/{}", uuid::Uuid::new_v4());
    let mut rows = Vec::new();

    let (created, _) = measure(
        &counter,
        &mut rows,
        "create stream (PUT)",
        op(&svc, {
            let p = path.clone();
            move |svc| async move { svc.create(create_req(&p)).await }
        }),
    )
    .await;
    created.expect("create");
    let (first, _) = measure(
        &counter,
        &mut rows,
        "append right after PUT (meta cached by it)",
        op(&svc, {
            let p = path.clone();
            move |svc| async move { svc.append(append_req(&p, Bytes::from(vec![b'a'; 100]))).await }
        }),
    )
    .await;
    first.expect("append");

    // Another instance has no cached meta: one read, then the transaction.
    let (_cold_aws, cold) = f.service();
    let (cold_append, _) = measure(
        &counter,
        &mut rows,
        "append on a cold instance",
        op(&cold, {
            let p = path.clone();
            move |svc| async move { svc.append(append_req(&p, Bytes::from(vec![b'c'; 100]))).await }
        }),
    )
    .await;
    cold_append.expect("append");

    // Warm append: exactly one DynamoDB call (the transaction), no S3. The
    // cold instance's append made this instance's cache stale: the first
    // append after it loses one race (ALL_OLD refreshes the cache) ...
    let (stale, calls) = measure(
        &counter,
        &mut rows,
        "append after another instance's (one lost race)",
        op(&svc, {
            let p = path.clone();
            move |svc| async move { svc.append(append_req(&p, Bytes::from(vec![b'd'; 100]))).await }
        }),
    )
    .await;
    stale.expect("append");
    assert_eq!(count(&calls, "dynamodb", "TransactWriteItems"), 2, "lost race + retry, no extra read: {calls:?}");
    // ... and from then on every append is one call.
    let (warm, calls) = measure(
        &counter,
        &mut rows,
        "warm 100-byte append",
        op(&svc, {
            let p = path.clone();
            move |svc| async move { svc.append(append_req(&p, Bytes::from(vec![b'b'; 100]))).await }
        }),
    )
    .await;
    warm.expect("append");
    assert_eq!(total(&calls, "dynamodb"), 1, "warm append DynamoDB calls: {calls:?}");
    assert_eq!(count(&calls, "dynamodb", "TransactWriteItems"), 1, "{calls:?}");
    assert_eq!(total(&calls, "s3"), 0, "warm append S3 calls: {calls:?}");

    // Catch-up read of inline chunks: meta GetItem + one Query page.
    let read_path = format!("calls/read-{}", uuid::Uuid::new_v4());
    svc.create(create_req(&read_path)).await.expect("create");
    let piece = 30 * 1024; // inline (below the 32 KiB threshold)
    let pieces = 30; // 900 KiB: fits one 1 MB Query page with its keys
    for i in 0..pieces {
        svc.append(append_req(&read_path, Bytes::from(vec![b'0' + (i % 10) as u8; piece]))).await.expect("append");
    }
    let (read, calls) = measure(
        &counter,
        &mut rows,
        "catch-up read of 900 KiB inline chunks",
        op(&svc, {
            let p = read_path.clone();
            move |svc| async move { svc.read(read_req(&p)).await }
        }),
    )
    .await;
    let read = read.expect("read");
    assert_eq!(read.body.len(), piece * pieces, "the whole stream in one response");
    assert!(read.up_to_date);
    let all = total(&calls, "dynamodb") + total(&calls, "s3");
    assert!(all <= 2, "catch-up read calls: {calls:?}");

    // A full 1 MiB of inline chunks would cross DynamoDB's 1 MB Query page:
    // the store's read budget (`MAX_READ_BYTES`, applied by the service)
    // splits it into responses of at most 900 KiB, each within one page.
    let mib_path = format!("calls/read-mib-{}", uuid::Uuid::new_v4());
    svc.create(create_req(&mib_path)).await.expect("create");
    for i in 0..32 {
        svc.append(append_req(&mib_path, Bytes::from(vec![b'0' + (i % 10) as u8; 32 * 1024]))).await.expect("append");
    }
    let (read, calls) = measure(
        &counter,
        &mut rows,
        "catch-up read of 1 MiB inline chunks (first response)",
        op(&svc, {
            let p = mib_path.clone();
            move |svc| async move { svc.read(read_req(&p)).await }
        }),
    )
    .await;
    let read = read.expect("read");
    assert_eq!(read.body.len(), ds_store_aws::MAX_READ_BYTES, "the service clamps to the store's budget");
    assert!(!read.up_to_date, "more remains");
    assert!(total(&calls, "dynamodb") + total(&calls, "s3") <= 2, "within one Query page: {calls:?}");

    // 1 MiB append: one S3 put, one transaction.
    let (big, calls) = measure(
        &counter,
        &mut rows,
        "warm 1 MiB append",
        op(&svc, {
            let p = path.clone();
            move |svc| async move { svc.append(append_req(&p, Bytes::from(vec![b'z'; 1024 * 1024]))).await }
        }),
    )
    .await;
    big.expect("append");
    assert_eq!(count(&calls, "s3", "PutObject"), 1, "{calls:?}");
    assert_eq!(total(&calls, "s3"), 1, "{calls:?}");
    assert_eq!(count(&calls, "dynamodb", "TransactWriteItems"), 1, "{calls:?}");
    assert_eq!(total(&calls, "dynamodb"), 1, "{calls:?}");

    let (read, _) = measure(
        &counter,
        &mut rows,
        "catch-up read of that 1 MiB S3 chunk (first response)",
        op(&svc, {
            let p = path.clone();
            move |svc| async move { svc.read(read_req(&p)).await }
        }),
    )
    .await;
    let read = read.expect("read");
    // The stream holds 400 B, then the 1 MiB chunk: one response carries the
    // store's read budget.
    assert_eq!(read.body.len(), ds_store_aws::MAX_READ_BYTES, "one response carries the read budget");

    let (head, _) = measure(
        &counter,
        &mut rows,
        "HEAD",
        op(&svc, {
            let p = path.clone();
            move |svc| async move { svc.head(&p).await }
        }),
    )
    .await;
    head.expect("head");

    // Sliding TTL: 20 reads in quick succession refresh it with at most one
    // write (touches are coalesced to about one per second per stream).
    let ttl_path = format!("calls/ttl-{}", uuid::Uuid::new_v4());
    let mut ttl_req = create_req(&ttl_path);
    ttl_req.lifetime = Lifetime { ttl_secs: Some(60), expires_at_ms: None };
    svc.create(ttl_req).await.expect("create");
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let (reads, calls) = measure(
        &counter,
        &mut rows,
        "20 catch-up reads of a sliding-TTL stream",
        op(&svc, {
            let p = ttl_path.clone();
            move |svc| async move {
                for _ in 0..20 {
                    svc.read(read_req(&p)).await?;
                }
                Ok::<_, ds_core::ServiceError>(())
            }
        }),
    )
    .await;
    reads.expect("reads");
    assert!(count(&calls, "dynamodb", "UpdateItem") <= 1, "TTL refreshes coalesced: {calls:?}");
    assert_eq!(total(&calls, "scheduler"), 0, "refreshing a TTL never touches the schedule");

    // Ten long-polls waiting on one stream in one process share one poller.
    let (polls, calls) = measure(
        &counter,
        &mut rows,
        "10 long-polls x 2 s on one stream, one process",
        op(&svc, {
            let p = read_path.clone();
            move |svc| async move {
                let svc = svc_with_timeout(&svc, 2_000);
                let tail = svc.head(&p).await.expect("head").tail;
                let waits = (0..10).map(|_| {
                    let (svc, p) = (svc.clone(), p.clone());
                    tokio::spawn(async move {
                        let req = ReadRequest {
                            path: p,
                            offset: Some(ReadOffset::At(ds_protocol::Offset(tail))),
                            live: LiveMode::LongPoll,
                        };
                        svc.read(req).await.map(|o| o.no_content)
                    })
                });
                futures::future::join_all(waits).await
            }
        }),
    )
    .await;
    assert!(polls.iter().all(|r| matches!(r, Ok(Ok(true)))), "all timed out: {polls:?}");
    let get_items = count(&calls, "dynamodb", "GetItem");
    // 1 HEAD + 10 initial reads + one poller's reads (~10 in 2 s with
    // backoff); ten pollers would make ~100.
    assert!(get_items <= 11 + 20, "one poller per stream per process: {get_items} GetItems");

    let (del, _) = measure(
        &counter,
        &mut rows,
        "DELETE (5 chunks, one in S3)",
        op(&svc, {
            let p = path.clone();
            move |svc| async move { svc.delete(&p).await }
        }),
    )
    .await;
    del.expect("delete");

    println!("{}", render(&rows));
}
