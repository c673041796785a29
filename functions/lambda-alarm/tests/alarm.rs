//! The alarm function, end to end on the emulator. moto stores schedules but
//! never fires them, so the test does what EventBridge Scheduler would: read
//! the schedule the substrate created (`GetSchedule`) and invoke the handler
//! with its `Input`.

use std::time::Duration;

use bytes::Bytes;
use ds_core::{AppendRequest, CreateRequest, LiveMode, ReadRequest, ServiceConfig, ServiceError, StreamService};
use ds_protocol::headers::Lifetime;
use ds_protocol::ReadOffset;
use ds_store_aws::{schedule_name, AwsClients, AwsConfig, AwsSubstrate};

fn emulator(test: &str) -> bool {
    if std::env::var("AWS_ENDPOINT_URL").map(|v| !v.is_empty()).unwrap_or(false) {
        for (k, v) in [("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"), ("AWS_REGION", "us-east-1")] {
            if std::env::var_os(k).is_none() {
                std::env::set_var(k, v);
            }
        }
        return true;
    }
    // `make test` sets this: there a missing emulator is a failure, not a skip.
    assert!(
        std::env::var_os("DS_TEST_REQUIRE_AWS").is_none(),
        "DS_TEST_REQUIRE_AWS is set but AWS_ENDPOINT_URL is not"
    );
    eprintln!(
        "\n!!!!!!!! SKIPPING ALARM TEST `{test}`: AWS_ENDPOINT_URL is not set (make test starts the emulator).\n"
    );
    false
}

struct Env {
    conf: aws_config::SdkConfig,
    cfg: AwsConfig,
}

impl Env {
    async fn new() -> Self {
        let conf = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
        let cfg = AwsConfig::from_env().expect("config");
        let clients = AwsClients::from_sdk_config(&conf);
        let _ = clients.scheduler.create_schedule_group().name(&cfg.schedule_group).send().await;
        Self { conf, cfg }
    }

    /// A fresh instance: a web Lambda, or the alarm Lambda.
    fn service(&self) -> StreamService {
        let aws = AwsSubstrate::new(self.cfg.clone(), AwsClients::from_sdk_config(&self.conf));
        StreamService::new(aws.substrate(), ServiceConfig::default())
    }

    /// What Scheduler would send: the `Input` of the stream's schedule, and
    /// its expression.
    async fn scheduled(&self, path: &str, incarnation: &str) -> Option<(serde_json::Value, String)> {
        let clients = AwsClients::from_sdk_config(&self.conf);
        let out = clients
            .scheduler
            .get_schedule()
            .group_name(&self.cfg.schedule_group)
            .name(schedule_name(path, incarnation))
            .send()
            .await
            .ok()?;
        let target = out.target()?;
        assert_eq!(target.arn(), self.cfg.alarm_target_arn, "the alarm Lambda is the target");
        assert_eq!(
            out.action_after_completion().map(|a| a.as_str()),
            Some("DELETE"),
            "one-shot schedules delete themselves"
        );
        let input = serde_json::from_str(target.input()?).expect("JSON input");
        Some((input, out.schedule_expression()?.to_owned()))
    }
}

fn create(path: &str, ttl: u64) -> CreateRequest {
    CreateRequest {
        path: path.to_owned(),
        content_type: Some("text/plain".into()),
        lifetime: Lifetime { ttl_secs: Some(ttl), expires_at_ms: None },
        closed: false,
        body: Bytes::from_static(b"data"),
        fork: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alarm_deletes_an_expired_stream() {
    if !emulator("alarm_deletes_an_expired_stream") {
        return;
    }
    let env = Env::new().await;
    let web = env.service();
    let path = format!("alarm/expired/{}", uuid::Uuid::new_v4());
    let created = web.create(create(&path, 1)).await.expect("create");
    let (input, expr) = env.scheduled(&path, &created.meta.incarnation).await.expect("an alarm was armed at creation");
    assert!(expr.starts_with("at("), "{expr}");
    assert_eq!(input["path"], path.as_str());
    tokio::time::sleep(Duration::from_millis(1_300)).await;

    let alarm = env.service();
    lambda_alarm_fn::handle(&alarm, input.clone()).await.expect("handled");
    // Gone for everyone, and its items were purged (not just hidden).
    assert!(
        web.substrate().store.read_meta(&ds_core::StreamHandle::detached(&path)).await.expect("read").is_none(),
        "deleted"
    );
    let chunks = web
        .substrate()
        .store
        .read_chunks(&ds_core::StreamHandle::detached(&path), &created.meta.incarnation, 0, 100, usize::MAX)
        .await;
    assert!(chunks.expect("read").is_empty(), "its chunks were purged");
    // A second delivery of the same alarm (at-least-once) is harmless.
    lambda_alarm_fn::handle(&alarm, input).await.expect("handled twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alarm_rearms_when_a_sliding_ttl_moved_the_deadline() {
    if !emulator("alarm_rearms_when_a_sliding_ttl_moved_the_deadline") {
        return;
    }
    let env = Env::new().await;
    let web = env.service();
    let path = format!("alarm/sliding/{}", uuid::Uuid::new_v4());
    let created = web.create(create(&path, 3)).await.expect("create");
    let inc = created.meta.incarnation.clone();
    let (input, first_expr) = env.scheduled(&path, &inc).await.expect("armed");

    // Activity moves the deadline (a read refreshes the sliding TTL; appends
    // set it in their commit). Refreshing never re-arms the schedule itself.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let read = ReadRequest { path: path.clone(), offset: Some(ReadOffset::Beginning), live: LiveMode::None };
    web.read(read).await.expect("read");
    web.append(AppendRequest {
        path: path.clone(),
        content_type: Some("text/plain".into()),
        body: Bytes::from_static(b"+"),
        close: false,
        seq: None,
        producer: None,
        dedupe_key: None,
        incarnation: None,
    })
    .await
    .expect("append");
    assert_eq!(env.scheduled(&path, &inc).await.map(|s| s.1), Some(first_expr.clone()), "no Scheduler call per access");

    // The original alarm fires at the old deadline: the stream lives on and
    // the alarm is re-armed for the new deadline.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let alarm = env.service();
    lambda_alarm_fn::handle(&alarm, input).await.expect("handled");
    assert!(web.head(&path).await.is_ok(), "not expired: still there");
    let (_, second_expr) = env.scheduled(&path, &inc).await.expect("re-armed");
    assert!(second_expr > first_expr, "re-armed later: {first_expr} -> {second_expr}");

    // An alarm for another incarnation (a re-created path) does nothing.
    let stray = serde_json::json!({ "path": path, "incarnation": "not-this-one", "at_ms": 0 });
    lambda_alarm_fn::handle(&alarm, stray).await.expect("handled");
    assert!(web.head(&path).await.is_ok());
    // Malformed input is an error, not a panic.
    assert!(lambda_alarm_fn::handle(&alarm, serde_json::json!({"nope": 1})).await.is_err());
    // And once the moved deadline passes, the next alarm removes it.
    tokio::time::sleep(Duration::from_millis(3_200)).await;
    let (input, _) = env.scheduled(&path, &inc).await.expect("armed");
    lambda_alarm_fn::handle(&alarm, input).await.expect("handled");
    assert!(matches!(web.head(&path).await, Err(ServiceError::NotFound)));
}
