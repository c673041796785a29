//! The table's upkeep by the processor function: TTL removals finished
//! (fork reference released exactly once, items purged), sealing triggered
//! by chunk inserts, a crash between seal steps swept up.

use bytes::Bytes;
use ds_core::{CreateRequest, ForkRequest, ServiceError};
use ds_lambda_pump::{ProcessorEnv, StreamPump};
use ds_processor_aws::upkeep::UpkeepPolicy;
use ds_processor_aws::HostConfig;
use ds_protocol::headers::Lifetime;
use ds_store_aws::segments::SealOptions;
use ds_store_aws::{Fault, FaultPoint};

use crate::common::*;

fn fork(path: &str, source: &str, ttl_secs: u64) -> CreateRequest {
    CreateRequest {
        path: path.to_owned(),
        content_type: Some("application/json".into()),
        lifetime: Lifetime { ttl_secs: Some(ttl_secs), expires_at_ms: None },
        closed: false,
        body: Bytes::new(),
        fork: Some(ForkRequest { source: source.to_owned(), offset: None, sub_offset: 0 }),
    }
}

fn now_s() -> i64 {
    i64::try_from(wall_ms() / 1000).expect("s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_removal_releases_the_fork_reference_once_and_purges() {
    let Some(env) = ProcessorEnv::new("a_ttl_removal_releases").await else { return };
    let svc = env.service();
    svc.create(json_stream("src")).await.expect("source");
    append(&svc, "src", &order("s1")).await;
    svc.create(fork("short", "src", 60)).await.expect("fork");
    svc.create(fork("long", "src", 3_600)).await.expect("fork");
    append(&svc, "short", &order("f1")).await;
    assert_eq!(svc.head("src").await.expect("head").ref_count, 2);
    let function = env.function(|_| ds_processor_aws::Deployment::default());
    let mut pump = StreamPump::new(&env).await;
    pump.deliver_all(&function, deadline(), 10).await;

    // The TTL backstop (a day past the deadline) removes the short fork's meta item.
    let day = 24 * 3600;
    assert_eq!(pump.expire_ttl(now_s() + day + 120).await, 1);
    pump.fetch().await;
    let removal = pump.next_event();
    assert_eq!(removal["Records"].as_array().map(Vec::len), Some(1), "only the TTL removal passes the filter");
    assert!(pump.deliver_all(&function, deadline(), 10).await.failed.is_empty());
    assert_eq!(svc.head("src").await.expect("head").ref_count, 1, "the fork's reference was released");
    assert!(partition_keys(&env, "short").await.is_empty(), "the fork's chunks and records were purged");
    // Delivered again: released once only.
    function.handle(removal, deadline()).await.expect("handled");
    assert_eq!(svc.head("src").await.expect("head").ref_count, 1, "not released twice");

    // The source is deleted while the long fork still reads it (soft), then
    // the TTL removes that fork: its release deletes the source for good.
    svc.delete("src").await.expect("soft delete");
    assert_eq!(pump.expire_ttl(now_s() + day + 3_720).await, 1);
    assert!(pump.deliver_all(&function, deadline(), 10).await.failed.is_empty());
    assert!(matches!(svc.head("src").await, Err(ServiceError::NotFound)), "{:?}", svc.head("src").await);
    assert!(partition_keys(&env, "src").await.is_empty(), "the source's items were purged");
    assert!(partition_keys(&env, "long").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_inserts_trigger_seals_and_a_crash_between_seal_steps_is_swept() {
    let Some(env) = ProcessorEnv::new("chunk_inserts_trigger_seals").await else { return };
    let svc = env.service();
    for path in ["orders/s", RELAYED, AUDIT] {
        svc.create(json_stream(path)).await.expect("create");
    }
    let world = World::default();
    let policy = UpkeepPolicy {
        seal_every: 1,
        seal: SealOptions { min_chunks: 2, max_chunks: 99, max_bytes: 1 << 20, keep_tail_bytes: 0 },
        seal_rounds: 1,
        sweep_every: u32::MAX,
        sweep_grace_ms: 0,
    };
    let function = env.function_with(|w| world.deployment(w, None), HostConfig::default(), policy);
    let mut pump = StreamPump::new(&env).await;
    // The creates' __registry__ chunk inserts: another stream's, which would
    // take the one injected seal fault below.
    pump.fetch().await;
    pump.skip_pending();
    for id in ["s1", "s2", "s3"] {
        append(&svc, "orders/s", &order(id)).await;
    }
    function.substrate().inject_fault(FaultPoint::SealSwap, Fault::Reject, 1);
    assert!(pump.deliver_all(&function, deadline(), 10).await.failed.is_empty(), "a failed seal fails no record");
    assert_eq!(function.substrate().pending_faults(), 0, "the seal ran and crashed between its steps");
    let digest = ds_store_aws::schema::path_digest("orders/s");
    let orphans = objects(&env, &format!("segments/{digest}/")).await;
    assert_eq!(orphans.len(), 1, "the crashed seal left its segment: {orphans:?}");

    append(&svc, "orders/s", &order("s4")).await;
    assert!(pump.deliver_all(&function, deadline(), 10).await.failed.is_empty());
    let segments = objects(&env, &format!("segments/{digest}/")).await;
    assert_eq!(segments.len(), 2, "the next chunk insert sealed: {segments:?}");
    let swept = function.substrate().sweep("orders/s", 0, i64::try_from(wall_ms()).expect("ms")).await.expect("sweep");
    assert_eq!(swept.objects_deleted, 1, "only the orphan was swept");
    assert_eq!(objects(&env, &format!("segments/{digest}/")).await.len(), 1);

    assert_eq!(entry_types(&svc, "orders/s").await, ["order/placed"; 4], "the stream reads whole through the segment");
    assert_eq!(world.notify.labels(), ["s1", "s2", "s3", "s4"]);
    assert_eq!(entry_types(&svc, RELAYED).await.len(), 4);
}
