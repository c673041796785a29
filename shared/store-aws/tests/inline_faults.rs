//! An append admitted by an inline processor commits with its reduction in
//! one `TransactWriteItems`, or neither: injected failures of that call
//! (a rejection, throttling past the retry budget, a lost answer) leave the
//! stream and the reduction in step, seen from this instance and another.
//! And a warm writer pays for its reduction nothing but the item it adds
//! to the transaction: no read of the reduction per append.

use std::sync::Arc;

use bytes::Bytes;
use ds_core::contract::inline::{AllStreams, Summer};
use ds_core::{AppendRequest, ServiceConfig, ServiceError, StoreError, StreamService};
use ds_store_aws::config::RetryConfig;
use ds_store_aws::test_util::{AwsFactory, CallCounter};
use ds_store_aws::{AwsConfig, AwsSubstrate, Fault, FaultPoint};

fn setup(f: &AwsFactory) -> (AwsSubstrate, StreamService) {
    let retry = RetryConfig { attempts: 4, budget: std::time::Duration::from_secs(60), ..RetryConfig::default() };
    let aws = f.aws_with(AwsConfig { retry, ..f.cfg.clone() });
    let svc = StreamService::new(aws.substrate(), ServiceConfig::default());
    assert!(svc.set_inline_gate(Arc::new(AllStreams(vec![Summer::new("sum", 1)]))));
    (aws, svc)
}

fn append(path: &str, n: i64) -> AppendRequest<'static> {
    let mut req =
        ds_core::contract::fixtures::append_request(path, Bytes::from(format!(r#"{{"n":{n}}}"#).into_bytes()));
    req.content_type = Some("application/json".into());
    req
}

/// `(values in the stream, [sum, count] of the reduction, reduced through,
/// tail)`.
async fn observe(svc: &StreamService, path: &str) -> (Vec<i64>, [i64; 2], u64, u64) {
    let read = svc.read(ds_core::contract::fixtures::read_request(path)).await.expect("read");
    let values: Vec<serde_json::Value> = serde_json::from_slice(&read.body).expect("JSON array");
    let values = values.iter().map(|v| v["n"].as_i64().expect("n")).collect();
    let view = svc.inline_view("sum", path).await.expect("view");
    let r = view.reduction.expect("a reduction is stored");
    (values, serde_json::from_slice(&r.state).expect("state"), r.reduced_through, view.meta.tail)
}

/// The emulator's call counts are global: the tests of this file run one
/// at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn create_json(svc: &StreamService, path: &str) {
    let mut create = ds_core::contract::fixtures::create_request(path);
    create.content_type = Some("application/json".into());
    svc.create(create).await.expect("create");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_writer_reads_no_reduction_per_append() {
    let Some(f) = AwsFactory::new("a_warm_writer_reads_no_reduction_per_append").await else { return };
    let _serial = SERIAL.lock().await;
    let (_aws, svc) = setup(&f);
    let path = format!("inline/warm/{}", uuid::Uuid::new_v4());
    create_json(&svc, &path).await;
    svc.append(append(&path, 1)).await.expect("first append");
    let counter = CallCounter::new().expect("an emulator");
    counter.reset().await;
    for n in 2..=21 {
        svc.append(append(&path, n)).await.expect("append");
    }
    let calls = counter.calls().await;
    let ddb = calls.get("dynamodb").cloned().unwrap_or_default();
    assert_eq!(ddb.get("TransactWriteItems"), Some(&20), "{calls:?}");
    assert_eq!(ddb.get("GetItem"), None, "the reduction comes from the commits this process made: {calls:?}");
    let (_, sum, through, tail) = observe(&svc, &path).await;
    assert_eq!((sum, through), ([231, 21], tail));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_transaction_leaves_stream_and_reduction_in_step() {
    let Some(f) = AwsFactory::new("a_failed_transaction_leaves_stream_and_reduction_in_step").await else { return };
    let _serial = SERIAL.lock().await;
    let (aws, svc) = setup(&f);
    let (_other_aws, other) = setup(&f);
    let path = format!("inline/faults/{}", uuid::Uuid::new_v4());
    create_json(&svc, &path).await;
    svc.append(append(&path, 1)).await.expect("append");
    let start = observe(&svc, &path).await;
    assert_eq!((start.0.clone(), start.1), (vec![1], [1, 1]));

    // A rejected transaction: nothing of the append, nor of its reduction.
    aws.inject_fault(FaultPoint::Transact, Fault::Reject, 1);
    let err = svc.append(append(&path, 2)).await.expect_err("rejected");
    assert!(matches!(err, ServiceError::Store(StoreError::Backend { .. })), "{err:?}");
    assert_eq!(observe(&other, &path).await, start, "another instance sees the state before it");

    // Throttled past the retry budget: the same.
    aws.inject_fault(FaultPoint::Transact, Fault::Throttle, aws.config().retry.attempts as usize);
    let err = svc.append(append(&path, 3)).await.expect_err("throttled");
    assert!(matches!(err, ServiceError::Store(StoreError::Unavailable(_))), "{err:?}");
    assert_eq!(aws.pending_faults(), 0);
    assert_eq!(observe(&other, &path).await, start);

    // Applied, its answer lost: recognised as applied, folded once.
    aws.inject_fault(FaultPoint::Transact, Fault::LoseAck, 1);
    svc.append(append(&path, 4)).await.expect("applied once");
    let (values, sum, through, tail) = observe(&other, &path).await;
    assert_eq!(values, vec![1, 4]);
    assert_eq!(sum, [5, 2], "the reduction counts the append once");
    assert_eq!(through, tail, "and is folded through the tail");

    // The next append folds on the committed reduction, from either instance.
    other.append(append(&path, 10)).await.expect("append from the other instance");
    svc.append(append(&path, 20)).await.expect("append");
    let (values, sum, through, tail) = observe(&svc, &path).await;
    assert_eq!(values, vec![1, 4, 10, 20]);
    assert_eq!(sum, [35, 4]);
    assert_eq!(through, tail);
}
