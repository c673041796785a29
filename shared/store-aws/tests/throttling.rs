//! One retry layer, with a budget that fits DynamoDB (`ds_store_aws::retry`):
//! a second of throttling on the table (the emulator's `throttle` fault, for
//! every DynamoDB call of these clients) fails no append and no touch —
//! they are retried until it passes — and the emulator's call log shows
//! no write retried inside the SDK (`sdk_retries`: requests the SDK sent
//! as attempt 2 or later).
//!
//! The clients sign with an access key of their own: the fault rule and the
//! counts are theirs alone on a shared emulator.

use std::time::{Duration, Instant};

use bytes::Bytes;
use ds_core::contract::fixtures::{append_request as append_req, create_request as create_req, read_request};
use ds_store_aws::test_util::{AwsFactory, CallCounter};
use serde_json::{json, Value};

/// Calls of `op` by the clients signing with `key`.
fn calls_of(snapshot: &Value, key: &str, op: &str) -> u64 {
    snapshot["by_key"][key]["dynamodb"][op].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_of_throttling_fails_no_write_and_the_sdk_retries_none() {
    let Some(f) = AwsFactory::new("a_second_of_throttling_fails_no_write_and_the_sdk_retries_none").await else {
        return;
    };
    let counter = CallCounter::new().expect("emulator endpoint");
    let key = format!("throttle-{}", uuid::Uuid::new_v4().simple());
    let (aws, svc) = f.signing_as(&key).service();
    let root = format!("throttle/{}", uuid::Uuid::new_v4());
    let paths: Vec<String> = (0..4).map(|i| format!("{root}/{i}")).collect();
    for p in &paths {
        svc.create(create_req(p)).await.expect("create");
        // Warm: the meta is cached, so each append below is one transaction.
        svc.append(append_req(p, Bytes::from_static(b"a"))).await.expect("append");
    }
    let store = aws.substrate().store;
    let touched = svc.head(&paths[0]).await.expect("head");

    let before = counter.snapshot().await;
    counter
        .add_fault_rules(json!({"service": "dynamodb", "fault": "throttle", "for_ms": 1000, "access_key": key}))
        .await;
    let started = Instant::now();
    let appends = paths.iter().flat_map(|p| {
        [b"b", b"c"].map(|data| {
            let (svc, p) = (svc.clone(), p.clone());
            tokio::spawn(async move { svc.append(append_req(&p, Bytes::from_static(data))).await })
        })
    });
    let appends: Vec<_> = appends.collect();
    // A touch during the burst (a conditional UpdateItem), a second after
    // the stream's last write.
    let (path, inc) = (paths[0].clone(), touched.incarnation.to_string());
    let touch = tokio::spawn({
        let store = std::sync::Arc::clone(&store);
        let handle = aws.substrate().registry.enter(&path);
        async move { store.touch(&handle, &inc, touched.touched_at_ms + 2_000).await }
    });
    for (i, a) in appends.into_iter().enumerate() {
        a.await.expect("append task").unwrap_or_else(|e| panic!("append {i} failed under a 1 s burst: {e}"));
    }
    touch.await.expect("touch task").expect("the touch rides out the burst");
    let took = started.elapsed();
    let injected = counter.clear_fault_rules().await;
    let after = counter.snapshot().await;

    let throttled = injected["injected"]["dynamodb"]["TransactWriteItems"]["throttle"].as_u64().unwrap_or(0);
    println!("burst: {throttled} TransactWriteItems throttled; the appends took {took:?}; {injected}");
    assert!(throttled >= 8, "every append met the burst at least once: {injected}");
    assert!(took >= Duration::from_millis(900), "the writes waited for the burst to pass: {took:?}");
    let tx = calls_of(&after, &key, "TransactWriteItems") - calls_of(&before, &key, "TransactWriteItems");
    assert!(tx > 8, "the appends were retried by the store's loop: {tx} TransactWriteItems");
    for op in ["TransactWriteItems", "UpdateItem", "BatchWriteItem"] {
        let retried = after["sdk_retries"]["dynamodb"][op].as_u64().unwrap_or(0)
            - before["sdk_retries"]["dynamodb"][op].as_u64().unwrap_or(0);
        assert_eq!(retried, 0, "{op}: no write is retried inside the SDK: {after}");
    }

    // Every append is there, once.
    for p in &paths {
        let body = svc.read(read_request(p)).await.expect("read").body;
        let mut bytes = body.to_vec();
        bytes.sort_unstable();
        assert_eq!(bytes, b"abc", "{p}: {body:?}");
    }
}
