//! The alarm function, end to end on the emulator. moto stores schedules but
//! never fires them, so the test does what EventBridge Scheduler would: read
//! the schedule the substrate created (`GetSchedule`) and invoke the handler
//! with its `Input`.

use std::time::Duration;

use bytes::Bytes;
use ds_core::{
    AppendRequest, CreateRequest, LiveMode, ReadRequest, ServiceConfig, ServiceError, StreamHandle, StreamService,
};
use ds_protocol::headers::Lifetime;
use ds_protocol::ReadOffset;
use ds_store_aws::{schedule_name, AwsClients, AwsConfig, AwsSubstrate, Fault, FaultPoint};

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
        // Once per process and only if missing: the emulator's
        // CreateScheduleGroup replaces an existing group, wiping the
        // schedules of the tests running beside this one.
        static GROUP: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
        GROUP
            .get_or_init(|| async {
                let group = &cfg.schedule_group;
                if clients.scheduler.get_schedule_group().name(group).send().await.is_err() {
                    let _ = clients.scheduler.create_schedule_group().name(group).send().await;
                }
            })
            .await;
        Self { conf, cfg }
    }

    /// A fresh instance: a web Lambda, or the alarm Lambda.
    fn service(&self) -> StreamService {
        Self::service_of(&self.substrate(self.cfg.clone()))
    }

    fn substrate(&self, cfg: AwsConfig) -> AwsSubstrate {
        AwsSubstrate::new(cfg, AwsClients::from_sdk_config(&self.conf))
    }

    fn service_of(aws: &AwsSubstrate) -> StreamService {
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
            .await;
        let out = match out {
            Ok(out) => out,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_not_found_exception()) => return None,
            Err(e) => panic!("GetSchedule for {path}: {e:?}"),
        };
        let target = out.target().expect("a target");
        assert_eq!(target.arn(), self.cfg.alarm_target_arn, "the alarm Lambda is the target");
        assert_eq!(
            out.action_after_completion().map(|a| a.as_str()),
            Some("DELETE"),
            "one-shot schedules delete themselves"
        );
        let input = serde_json::from_str(target.input().expect("an input")).expect("JSON input");
        Some((input, out.schedule_expression()?.to_owned()))
    }
}

/// A catch-up read: refreshes a sliding TTL.
fn read(path: &str) -> ReadRequest {
    ReadRequest { path: path.to_owned(), offset: Some(ReadOffset::Beginning), live: LiveMode::None }
}

fn at_ms(input: &serde_json::Value) -> i64 {
    input["at_ms"].as_i64().expect("at_ms in the alarm input")
}

/// Sleep until `at_ms` (epoch ms) has passed by `extra_ms`.
async fn sleep_past(at_ms: i64, extra_ms: i64) {
    let wait = (at_ms + extra_ms - ds_core::Clock::system().now_ms()).max(0);
    tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap_or(0))).await;
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
    let created = web.create(create(&path, 4)).await.expect("create");
    let inc = created.meta.incarnation.clone();
    let (input, first_expr) = env.scheduled(&path, &inc).await.expect("armed");

    // Activity moves the deadline (a read refreshes the sliding TTL; appends
    // set it in their commit). Refreshing never re-arms the schedule itself.
    // Late, so the moved deadline stays seconds away while the alarm runs.
    sleep_past(at_ms(&input), -1_000).await;
    web.read(read(&path)).await.expect("read");
    web.append(AppendRequest {
        path: path.as_str().into(),
        content_type: Some("text/plain".into()),
        body: Bytes::from_static(b"+"),
        close: false,
        seq: None,
        producer: None,
        dedupe_key: None,
        incarnation: None,
        expect_tail: None,
        trace_context: None,
    })
    .await
    .expect("append");
    assert_eq!(env.scheduled(&path, &inc).await.map(|s| s.1), Some(first_expr.clone()), "no Scheduler call per access");

    // The original alarm fires at the old deadline: the stream lives on and
    // the alarm is re-armed for the new deadline.
    sleep_past(at_ms(&input), 200).await;
    let alarm = env.service();
    lambda_alarm_fn::handle(&alarm, input).await.expect("handled");
    assert!(web.head(&path).await.is_ok(), "not expired: still there");
    let (rearmed, second_expr) = env.scheduled(&path, &inc).await.expect("re-armed");
    assert!(second_expr > first_expr, "re-armed later: {first_expr} -> {second_expr}");

    // An alarm for another incarnation (a re-created path) does nothing.
    let stray = serde_json::json!({ "path": path, "incarnation": "not-this-one", "at_ms": 0 });
    lambda_alarm_fn::handle(&alarm, stray).await.expect("handled");
    assert!(web.head(&path).await.is_ok());
    // Malformed input is an error, not a panic.
    assert!(lambda_alarm_fn::handle(&alarm, serde_json::json!({"nope": 1})).await.is_err());
    // And once the moved deadline passes, the next alarm removes it.
    sleep_past(at_ms(&rearmed), 200).await;
    lambda_alarm_fn::handle(&alarm, rearmed).await.expect("handled");
    assert!(matches!(web.head(&path).await, Err(ServiceError::NotFound)));
}

/// A warm alarm Lambda (one process, one substrate) handles every alarm of a
/// stream whose sliding TTL keeps moving: each firing must re-arm, including
/// the second and third, whose previous alarm this same process armed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_alarm_lambda_rearms_three_times_in_a_row() {
    if !emulator("a_warm_alarm_lambda_rearms_three_times_in_a_row") {
        return;
    }
    let env = Env::new().await;
    let web = env.service();
    let alarm = env.service(); // one process for every alarm below
    let path = format!("alarm/rearm3/{}", uuid::Uuid::new_v4());
    let inc = web.create(create(&path, 2)).await.expect("create").meta.incarnation;
    let (mut input, _) = env.scheduled(&path, &inc).await.expect("armed at creation");
    for round in 1..=3 {
        // Activity shortly before the armed deadline moves the deadline.
        sleep_past(at_ms(&input), -700).await;
        web.read(read(&path)).await.expect("read refreshes the TTL");
        // The alarm fires at the old deadline: the stream lives, the alarm moves.
        sleep_past(at_ms(&input), 100).await;
        lambda_alarm_fn::handle(&alarm, input.clone()).await.expect("handled");
        assert!(web.head(&path).await.is_ok(), "round {round}: not expired");
        let (next, _) = env.scheduled(&path, &inc).await.expect("a schedule exists");
        assert!(
            at_ms(&next) > at_ms(&input),
            "round {round}: re-armed for the moved deadline ({} -> {})",
            at_ms(&input),
            at_ms(&next)
        );
        input = next;
    }
    // No more activity: the last alarm removes the stream.
    sleep_past(at_ms(&input), 100).await;
    lambda_alarm_fn::handle(&alarm, input).await.expect("handled");
    assert!(matches!(web.head(&path).await, Err(ServiceError::NotFound)), "expired and removed");
}

/// A failed expiry fails the invocation, so Scheduler's retry policy applies
/// (the one-shot schedule is deleted once an invocation succeeds); the retry
/// then removes the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alarm_whose_delete_fails_fails_the_invocation() {
    if !emulator("an_alarm_whose_delete_fails_fails_the_invocation") {
        return;
    }
    let env = Env::new().await;
    let web = env.service();
    let path = format!("alarm/delete-fails/{}", uuid::Uuid::new_v4());
    let inc = web.create(create(&path, 1)).await.expect("create").meta.incarnation;
    let (input, _) = env.scheduled(&path, &inc).await.expect("armed");
    sleep_past(at_ms(&input), 100).await;

    let aws = env.substrate(env.cfg.clone());
    let alarm = Env::service_of(&aws);
    aws.inject_fault(FaultPoint::Transact, Fault::Reject, 1);
    let err = lambda_alarm_fn::handle(&alarm, input.clone()).await.expect_err("the delete failed");
    assert!(err.to_string().contains(&path), "the error names the stream: {err}");
    assert_eq!(aws.pending_faults(), 0, "the delete was attempted");
    assert!(
        web.substrate().store.read_meta(&StreamHandle::detached(&path)).await.expect("read").is_some(),
        "not deleted yet"
    );

    lambda_alarm_fn::handle(&alarm, input).await.expect("the retry succeeds");
    assert!(
        web.substrate().store.read_meta(&StreamHandle::detached(&path)).await.expect("read").is_none(),
        "deleted by the retry"
    );
}

/// A moved deadline that cannot be re-armed fails the invocation too: the
/// alarm that fired is gone, so success would leave the stream without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alarm_that_cannot_rearm_fails_the_invocation() {
    if !emulator("an_alarm_that_cannot_rearm_fails_the_invocation") {
        return;
    }
    let env = Env::new().await;
    let web = env.service();
    let path = format!("alarm/rearm-fails/{}", uuid::Uuid::new_v4());
    // A TTL long enough that the moved deadline outlasts the failing attempt
    // (the SDK retries the emulator's error with backoff).
    let inc = web.create(create(&path, 6)).await.expect("create").meta.incarnation;
    let (input, _) = env.scheduled(&path, &inc).await.expect("armed");
    sleep_past(at_ms(&input), -700).await;
    web.read(read(&path)).await.expect("read refreshes the TTL");
    sleep_past(at_ms(&input), 100).await;

    // Scheduler refuses the new schedule (here: its group does not exist).
    let mut broken = env.cfg.clone();
    broken.schedule_group = format!("missing-{}", uuid::Uuid::new_v4());
    let alarm = Env::service_of(&env.substrate(broken));
    let err = lambda_alarm_fn::handle(&alarm, input.clone()).await.expect_err("re-arming failed");
    assert!(err.to_string().contains(&path), "the error names the stream: {err}");

    // Scheduler's retry, on a healthy instance, re-arms.
    lambda_alarm_fn::handle(&env.service(), input.clone()).await.expect("the retry succeeds");
    let (next, _) = env.scheduled(&path, &inc).await.expect("re-armed");
    assert!(at_ms(&next) > at_ms(&input));
}
