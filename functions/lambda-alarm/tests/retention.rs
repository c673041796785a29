//! The alarm function's retention pass on the emulator: what the rate
//! schedule's `{"retention": "pass"}` invocation does, on a manual clock
//! (max-age needs time to pass). Policies by prefix: max-bytes trims at
//! once, max-age only once a sampled tail is old enough, other streams are
//! untouched; the trimmed history is gone from the table and reads of it
//! answer 410; a reclaim that was lost is asked for again.

use bytes::Bytes;
use ds_core::{AppendRequest, Clock, LiveMode, Random, ReadRequest, ServiceError, StreamService};
use ds_protocol::ReadOffset;
use ds_store_aws::{AwsClients, AwsConfig, AwsSubstrate};

fn emulator() -> bool {
    let set = std::env::var("AWS_ENDPOINT_URL").is_ok_and(|v| !v.is_empty());
    assert!(
        set || std::env::var_os("DS_TEST_REQUIRE_AWS").is_none(),
        "DS_TEST_REQUIRE_AWS is set but AWS_ENDPOINT_URL is not"
    );
    if !set {
        eprintln!("\n!!!!!!!! SKIPPING the retention pass test: AWS_ENDPOINT_URL is not set.\n");
    }
    set
}

async fn create(svc: &StreamService, path: &str) {
    svc.create(ds_core::contract::fixtures::create_request(path)).await.expect("create");
}

async fn append(svc: &StreamService, path: &str, n: usize) {
    for i in 0..n {
        let body = Bytes::from(format!("[{i:018}]"));
        let req: AppendRequest<'static> = ds_core::contract::fixtures::append_request(path, body);
        svc.append(req).await.expect("append");
    }
}

async fn meta(svc: &StreamService, path: &str) -> ds_core::StreamMeta {
    let stream = ds_core::StreamHandle::detached(path);
    svc.substrate().store.read_meta(&stream).await.expect("read meta").expect("exists")
}

/// Chunk items of `path`'s incarnation ending at or below `below`, counted
/// at the emulator.
async fn items_below(conf: &aws_config::SdkConfig, cfg: &AwsConfig, path: &str, inc: &str, below: u64) -> usize {
    use aws_sdk_dynamodb::types::AttributeValue as V;
    let out = aws_sdk_dynamodb::Client::new(conf)
        .query()
        .table_name(&cfg.table)
        .consistent_read(true)
        .key_condition_expression("pk = :pk AND sk BETWEEN :lo AND :hi")
        .expression_attribute_values(":pk", V::S(ds_store_aws::schema::stream_pk(path)))
        .expression_attribute_values(":lo", V::S(ds_store_aws::schema::chunk_sk_prefix(inc)))
        .expression_attribute_values(":hi", V::S(ds_store_aws::schema::chunk_sk(inc, below)))
        .send()
        .await
        .expect("query");
    out.items().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retention_pass_trims_by_size_at_once_and_by_age_once_old_enough() {
    if !emulator() {
        return;
    }
    let conf = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
    let cfg = AwsConfig::from_env().expect("config");
    let clock = Clock::manual(ds_core::contract::fixtures::wall_clock_ms());
    let aws = AwsSubstrate::on(cfg.clone(), AwsClients::from_sdk_config(&conf), clock.clone(), Random::system());
    let svc = StreamService::new(aws.substrate(), ds_core::ServiceConfig::default());
    let root = format!("ret-{}", uuid::Uuid::new_v4().simple());
    let (sized, aged, kept) = (format!("{root}/logs/a"), format!("{root}/aged/b"), format!("{root}/keep/c"));
    for p in [&sized, &aged, &kept] {
        create(&svc, p).await;
        append(&svc, p, 30).await; // 30 appends of 20 bytes
    }
    // A trim whose reclaim was lost (a crash, a failure, or a bound reached):
    // committed without reclaiming, at exactly what the policy asks for.
    let lost = format!("{root}/logs/lost");
    create(&svc, &lost).await;
    append(&svc, &lost, 30).await;
    let before = meta(&svc, &lost).await;
    let mut raised = before.clone();
    raised.retained_from = 500;
    raised.version += 1;
    let mut commit = ds_core::Commit::with_capacity(1);
    let expect = ds_core::Expect::VersionAt { version: before.version, tail: before.tail };
    commit.push(ds_core::Op::PutMeta { meta: raised, expect });
    svc.substrate().store.commit(commit).await.expect("trim without a reclaim");
    assert_eq!(items_below(&conf, &cfg, &lost, &before.incarnation, 500).await, 25);

    let policies = format!("prefix={root}/logs/,max-bytes=100; prefix={root}/aged/,max-age=1h");
    let runner = lambda_alarm_fn::retention_runner(&svc, &policies).expect("policies parse").expect("on");
    assert!(lambda_alarm_fn::retention_runner(&svc, " ").expect("empty").is_none(), "no policy, no runner");
    assert!(lambda_alarm_fn::is_retention_event(&serde_json::json!({ "retention": "pass" })));

    let first = lambda_alarm_fn::handle_retention(Some(&runner), None).await;
    assert_eq!(first["retention"]["trimmed"], 1, "{first}");
    let m = meta(&svc, &sized).await;
    assert_eq!(m.retained_from, 600 - 100, "max-bytes keeps the newest 100 bytes (20-byte appends)");
    assert_eq!(items_below(&conf, &cfg, &sized, &m.incarnation, m.retained_from).await, 0, "reclaimed");
    assert_eq!(items_below(&conf, &cfg, &sized, &m.incarnation, 600).await, 5, "the newest five stay");
    assert_eq!(
        items_below(&conf, &cfg, &lost, &before.incarnation, 500).await,
        0,
        "a pass with nothing new to trim asks for the lost reclaim again"
    );
    assert_eq!(meta(&svc, &aged).await.retained_from, 0, "nothing is an hour old yet");
    let k = meta(&svc, &kept).await;
    assert_eq!(k.retained_from, 0, "no policy governs it");
    assert_eq!(items_below(&conf, &cfg, &kept, &k.incarnation, 600).await, 30);

    // An hour later, after more appends: what was there at the first pass goes.
    append(&svc, &aged, 5).await;
    clock.advance(3_600_001);
    let second = lambda_alarm_fn::handle_retention(Some(&runner), None).await;
    assert_eq!(second["retention"]["failed"], 0, "{second}");
    let a = meta(&svc, &aged).await;
    assert_eq!(a.retained_from, 600, "bytes sampled an hour ago go, the newer stay");
    assert_eq!(items_below(&conf, &cfg, &aged, &a.incarnation, 700).await, 5);
    let read = svc
        .read(ReadRequest {
            path: aged.clone(),
            offset: Some(ReadOffset::At(ds_protocol::Offset(0))),
            live: LiveMode::None,
        })
        .await;
    assert!(matches!(read, Err(ServiceError::NotRetained { earliest: 600 })), "{read:?}");
    assert_eq!(lambda_alarm_fn::handle_retention(None, None).await["retention"], "off");
}

/// A pass stopped by its invocation's deadline leaves the rest of its
/// round to the next pass: every stream is reached, even when a pass can
/// handle only one (here the deadline has passed before the pass starts;
/// a pass still handles one stream, so passes always progress).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_cut_short_by_the_deadline_resume_where_they_stopped() {
    if !emulator() {
        return;
    }
    let conf = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
    let cfg = AwsConfig::from_env().expect("config");
    let aws = AwsSubstrate::new(cfg, AwsClients::from_sdk_config(&conf));
    let svc = StreamService::new(aws.substrate(), ds_core::ServiceConfig::default());
    let root = format!("ret-{}", uuid::Uuid::new_v4().simple());
    let paths: Vec<String> = (0..3).map(|i| format!("{root}/s{i}")).collect();
    for p in &paths {
        create(&svc, p).await;
        append(&svc, p, 10).await;
    }
    let runner =
        lambda_alarm_fn::retention_runner(&svc, &format!("prefix={root}/,max-bytes=40")).expect("parses").expect("on");
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let out = lambda_alarm_fn::handle_retention(Some(&runner), Some(std::time::Instant::now())).await;
        outcomes.push((out["retention"]["trimmed"].clone(), out["retention"]["complete"].clone()));
    }
    let expected: Vec<(serde_json::Value, serde_json::Value)> =
        vec![(1.into(), false.into()), (1.into(), false.into()), (1.into(), true.into())];
    assert_eq!(outcomes, expected, "one stream per pass, the round completes with the third");
    for p in &paths {
        assert_eq!(meta(&svc, p).await.retained_from, 200 - 40, "{p} reached");
    }
}
