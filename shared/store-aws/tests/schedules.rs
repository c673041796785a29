//! Every schedule the code creates retries an undeliverable invocation a
//! bounded number of times, then dead-letters it to the queue the
//! deployment names: checked on what the emulator's Scheduler keeps (it
//! stores the target as sent, RetryPolicy and DeadLetterConfig included).

use bytes::Bytes;
use ds_core::{CreateRequest, ServiceConfig, StreamService};
use ds_protocol::headers::Lifetime;
use ds_store_aws::schedules::{self, OneShot, DELIVERY_MAX_AGE_SECS, DELIVERY_RETRIES};
use ds_store_aws::test_util::{ensure_schedule_group, AwsFactory};
use ds_store_aws::AwsConfig;

/// A config whose schedules go to a group of their own and dead-letter to
/// a queue named for this test, so what the emulator keeps is this test's.
async fn isolated(f: &AwsFactory, test: &str) -> AwsConfig {
    let id = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let mut cfg = f.cfg.clone();
    cfg.schedule_group = format!("ds-{test}-{id}");
    cfg.schedule_dead_letter_arn = format!("arn:aws:sqs:us-east-1:000000000000:{test}-dlq-{id}");
    ensure_schedule_group(&f.clients().scheduler, &cfg.schedule_group).await;
    cfg
}

/// The one schedule in `group`: (target ARN, retry policy, dead-letter ARN).
async fn only_schedule(scheduler: &aws_sdk_scheduler::Client, group: &str) -> (String, Option<(i32, i32)>, String) {
    let listed = scheduler.list_schedules().group_name(group).send().await.expect("list schedules");
    let names: Vec<&str> = listed.schedules().iter().filter_map(|s| s.name()).collect();
    assert_eq!(names.len(), 1, "one schedule in {group}: {names:?}");
    let got = scheduler.get_schedule().group_name(group).name(names[0]).send().await.expect("get schedule");
    let target = got.target().expect("the schedule's target");
    let retry = target.retry_policy().map(|r| {
        (r.maximum_retry_attempts().unwrap_or_default(), r.maximum_event_age_in_seconds().unwrap_or_default())
    });
    let dead_letter = target.dead_letter_config().and_then(|d| d.arn()).unwrap_or_default().to_owned();
    (target.arn().to_owned(), retry, dead_letter)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_alarm_retries_then_dead_letters_to_the_configured_queue() {
    let test = "expiry-dlq";
    let Some(f) = AwsFactory::new("an_expiry_alarm_retries_then_dead_letters_to_the_configured_queue").await else {
        return;
    };
    let cfg = isolated(&f, test).await;
    let svc = StreamService::new(f.aws_with(cfg.clone()).substrate(), ServiceConfig::default());
    let path = format!("schedules/expiry/{}", uuid::Uuid::new_v4());
    let create = CreateRequest {
        path,
        content_type: Some("text/plain".into()),
        lifetime: Lifetime { ttl_secs: Some(3_600), expires_at_ms: None },
        closed: false,
        body: Bytes::new(),
        fork: None,
    };
    svc.create(create).await.expect("create a stream with a TTL");
    let (target, retry, dead_letter) = only_schedule(&f.clients().scheduler, &cfg.schedule_group).await;
    assert_eq!(target, cfg.alarm_target_arn, "the expiry alarm invokes the alarm function");
    assert_eq!(retry, Some((DELIVERY_RETRIES, DELIVERY_MAX_AGE_SECS)), "bounded delivery retries");
    assert_eq!(dead_letter, cfg.schedule_dead_letter_arn, "undelivered alarms go to the configured queue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_schedule_keeps_its_retry_policy_and_dead_letter_queue() {
    let test = "replaced-dlq";
    let Some(f) = AwsFactory::new("a_replaced_schedule_keeps_its_retry_policy_and_dead_letter_queue").await else {
        return;
    };
    let cfg = isolated(&f, test).await;
    let scheduler = f.clients().scheduler;
    let name = schedules::name("dst-", test, &cfg.schedule_group);
    let at_ms = 4_102_444_800_000; // 2100-01-01: never due while the test runs
    for (attempt, input) in ["first", "second"].into_iter().enumerate() {
        let schedule = OneShot {
            group: &cfg.schedule_group,
            name: &name,
            target_arn: &cfg.alarm_target_arn,
            role_arn: &cfg.scheduler_role_arn,
            dead_letter_arn: &cfg.schedule_dead_letter_arn,
            input: format!("{{\"attempt\": \"{input}\"}}"),
        };
        // The second arming replaces the schedule (UpdateSchedule).
        schedules::upsert(&scheduler, schedule, at_ms + attempt as i64 * 1_000).await.expect("upsert");
    }
    let got = scheduler.get_schedule().group_name(&cfg.schedule_group).name(&name).send().await.expect("get");
    assert_eq!(got.target().and_then(|t| t.input()), Some("{\"attempt\": \"second\"}"), "replaced");
    let (_, retry, dead_letter) = only_schedule(&scheduler, &cfg.schedule_group).await;
    assert_eq!(retry, Some((DELIVERY_RETRIES, DELIVERY_MAX_AGE_SECS)), "bounded delivery retries after an update");
    assert_eq!(dead_letter, cfg.schedule_dead_letter_arn, "dead-letter queue kept by an update");
}
