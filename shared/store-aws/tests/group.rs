//! Group commit on AWS ([`ds_store_aws::group`]), counted at the emulator:
//! appends that arrive while a transaction is in flight go together in the
//! next one, and an unknown outcome of a group keeps every member's
//! guarantee (a producer retry of each is a duplicate, never a second
//! application).
//!
//! The one test in this binary runs its phases in sequence: the emulator's
//! call counter is global, so nothing else may run beside it.

use std::sync::Arc;

use bytes::Bytes;
use ds_core::contract::fixtures::{append_request as append_req, create_request as create_req, read_request};
use ds_core::{AppendOutcome, AppendRequest, ServiceConfig, ServiceError, StoreError, StreamService};
use ds_protocol::headers::ProducerHeaders;
use ds_store_aws::config::RetryConfig;
use ds_store_aws::test_util::{count, AwsFactory, CallCounter};
use ds_store_aws::{Fault, FaultPoint};
use tokio::sync::Barrier;

fn body(w: usize) -> Bytes {
    Bytes::from(format!("{w:03}-{}", "x".repeat(96)))
}

fn producer_append(path: &str, w: usize) -> AppendRequest<'static> {
    let mut req = append_req(path, body(w));
    req.producer = Some(ProducerHeaders { id: format!("p{w}"), epoch: 0, seq: 0 });
    req
}

/// `writers` appends of 100 B, sent at once (each with a producer of its
/// own when `producers`).
async fn burst(
    svc: &StreamService,
    path: &str,
    writers: std::ops::Range<usize>,
    producers: bool,
) -> Vec<(usize, Result<AppendOutcome, ServiceError>)> {
    let barrier = Arc::new(Barrier::new(writers.len()));
    let mut tasks = Vec::new();
    for w in writers {
        let (svc, path, barrier) = (svc.clone(), path.to_owned(), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let req = if producers { producer_append(&path, w) } else { append_req(&path, body(w)) };
            (w, svc.append(req).await)
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("appender"));
    }
    out
}

/// Each body of `writers` appears exactly once in the stream.
async fn assert_each_once(svc: &StreamService, path: &str, writers: std::ops::Range<usize>) {
    let read = svc.read(read_request(path)).await.expect("read");
    assert!(read.up_to_date);
    for w in writers {
        let b = body(w);
        let found = read.body.windows(b.len()).filter(|win| *win == &b[..]).count();
        assert_eq!(found, 1, "append {w} is in the stream once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn appends_in_flight_together_go_in_one_transaction() {
    let Some(f) = AwsFactory::new("appends_in_flight_together_go_in_one_transaction").await else { return };
    let counter = CallCounter::new().expect("an emulator");
    // A count of attempts, not the default's time budget, ends a commit's
    // retries here: part 2 injects one fault per attempt and expects every
    // one of them used.
    let retry = RetryConfig { attempts: 6, budget: std::time::Duration::from_secs(60), ..RetryConfig::default() };
    let aws = f.aws_with(ds_store_aws::AwsConfig { retry, ..f.cfg.clone() });
    let svc =
        StreamService::new(aws.substrate(), ServiceConfig { max_commit_attempts: 64, ..ServiceConfig::default() });

    // 1. 64 writers at once: far fewer transactions than appends. (Without
    // producers: a new producer's state is read under the stream's lock.)
    let path = format!("group/burst/{}", uuid::Uuid::new_v4());
    svc.create(create_req(&path)).await.expect("create");
    svc.append(append_req(&path, body(999))).await.expect("warm-up");
    counter.reset().await;
    let results = burst(&svc, &path, 0..64, false).await;
    let calls = counter.calls().await;
    for (w, r) in &results {
        assert!(matches!(r, Ok(AppendOutcome::Appended { .. })), "append {w}: {r:?}");
    }
    let transactions = count(&calls, "dynamodb", "TransactWriteItems");
    assert!(transactions <= 8, "64 appends at once took {transactions} transactions: {calls:?}");
    println!("64 appends at once: {transactions} transactions ({calls:?})");
    let read = svc.read(read_request(&path)).await.expect("read");
    assert_eq!(read.body.len(), body(999).len() + 64 * body(0).len());

    // With group commit switched off, one transaction per append, as before.
    let solo = ds_store_aws::AwsConfig { group_commit: false, ..f.cfg.clone() };
    let solo_svc = StreamService::new(f.aws_with(solo).substrate(), ServiceConfig::default());
    let path = format!("group/solo/{}", uuid::Uuid::new_v4());
    solo_svc.create(create_req(&path)).await.expect("create");
    solo_svc.append(append_req(&path, body(999))).await.expect("warm-up");
    counter.reset().await;
    for (w, r) in burst(&solo_svc, &path, 0..64, false).await {
        assert!(matches!(r, Ok(AppendOutcome::Appended { .. })), "append {w}: {r:?}");
    }
    let calls = counter.calls().await;
    assert_eq!(count(&calls, "dynamodb", "TransactWriteItems"), 64, "switched off: {calls:?}");

    // 2. A group whose outcome stays unknown: its first attempt is applied
    // and its answer lost, every retry throttled. The lone append before it
    // is slowed down at the emulator, so the others queue behind it meanwhile.
    let path = format!("group/unknown/{}", uuid::Uuid::new_v4());
    svc.create(create_req(&path)).await.expect("create");
    svc.append(append_req(&path, body(999))).await.expect("warm-up");
    let slow = r#"{"rules": [{"service": "dynamodb", "operation": "TransactWriteItems", "fault": "slow", "delay_ms": 400, "count": 1}]}"#;
    counter.add_fault_rules(serde_json::from_str(slow).expect("json")).await;
    let lone = {
        let (svc, path) = (svc.clone(), path.clone());
        tokio::spawn(async move { svc.append(producer_append(&path, 0)).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let attempts = aws.config().retry.attempts as usize;
    aws.inject_fault(FaultPoint::Transact, Fault::LoseAck, 1);
    aws.inject_fault(FaultPoint::Transact, Fault::Throttle, attempts - 1);
    let results = burst(&svc, &path, 1..32, true).await;
    assert!(matches!(lone.await.expect("lone"), Ok(AppendOutcome::Appended { .. })), "the slowed lone append");
    assert_eq!(aws.pending_faults(), 0, "every injected fault was used");
    let mut unknown = Vec::new();
    for (w, r) in results {
        match r {
            Ok(AppendOutcome::Appended { .. }) => {}
            Err(ServiceError::Store(StoreError::Unavailable(m))) if m.contains("outcome unknown") => unknown.push(w),
            other => panic!("append {w}: {other:?}"),
        }
    }
    println!("members of the group with the unknown outcome: {unknown:?}");
    assert!(unknown.len() >= 2, "a group of several had the unknown outcome: {unknown:?}");
    // The group was applied: each member's retry, through this process or
    // another, is a duplicate.
    let (_other_aws, other) = f.service();
    for (i, w) in unknown.iter().enumerate() {
        let via = if i % 2 == 0 { &svc } else { &other };
        let retry = via.append(producer_append(&path, *w)).await.expect("retry");
        assert!(matches!(retry, AppendOutcome::Duplicate { .. }), "retry of {w}: {retry:?}");
    }
    let mut all: Vec<usize> = vec![999];
    all.extend(0..32);
    let read = other.read(read_request(&path)).await.expect("read");
    let total: usize = all.iter().map(|w| body(*w).len()).sum();
    assert_eq!(read.body.len(), total, "every append once");
    assert_each_once(&other, &path, 0..32).await;
}
