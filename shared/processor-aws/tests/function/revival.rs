//! A revival schedule retries an undeliverable invocation a bounded number
//! of times, then dead-letters it to the queue the deployment names (what
//! the emulator's Scheduler keeps of the schedule the function armed).

use ds_lambda_pump::ProcessorEnv;
use ds_processor::{Alarm, StreamIncarnation};
use ds_processor_aws::revival::revival_schedule_name;
use ds_processor_aws::RevivalSchedules;
use ds_processor_host::AlarmScheduler;
use ds_store_aws::schedules::{DELIVERY_MAX_AGE_SECS, DELIVERY_RETRIES};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revival_alarm_retries_then_dead_letters_to_the_configured_queue() {
    let Some(env) = ProcessorEnv::new("a_revival_alarm_dead_letters").await else { return };
    let target = env.revival_target();
    let scheduler = aws_sdk_scheduler::Client::new(&env.conf);
    let alarms = RevivalSchedules::new(scheduler.clone(), target.clone(), env.service().clock().clone());
    let path = format!("revival/dead-letter/{}", uuid::Uuid::new_v4());
    let alarm = Alarm {
        slug: "relay".into(),
        incarnation: StreamIncarnation::new("i1"),
        token: "t1".into(),
        at_ms: 4_102_444_800_000, // 2100-01-01: never due while the test runs
    };
    alarms.arm(&path, &alarm).await.expect("arm the revival alarm");
    let name = revival_schedule_name(&path, "relay");
    let got = scheduler.get_schedule().group_name(&target.schedule_group).name(&name).send().await.expect("get");
    let armed = got.target().expect("the schedule's target");
    assert_eq!(armed.arn(), target.function_arn, "the revival invokes the processor function");
    let retry = armed.retry_policy().map(|r| (r.maximum_retry_attempts(), r.maximum_event_age_in_seconds()));
    assert_eq!(retry, Some((Some(DELIVERY_RETRIES), Some(DELIVERY_MAX_AGE_SECS))), "bounded delivery retries");
    assert_eq!(
        armed.dead_letter_config().and_then(|d| d.arn()),
        Some(target.dead_letter_arn.as_str()),
        "an undelivered revival goes to the configured queue"
    );
    alarms.disarm(&path, "relay").await.expect("disarm");
}
