//! In-process revival alarms: they fire on time, once per arming; re-arming
//! replaces; disarm cancels; and an alarm armed before a restart fires after
//! it (its record survives, `rearm` starts the timer again).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ds_core::{Clock, CreateRequest, ServiceConfig, StreamService};
use ds_processor::{Alarm, StreamIncarnation};
use ds_processor_host::{AlarmScheduler, InProcAlarms};
use ds_protocol::headers::Lifetime;

async fn json_stream(svc: &StreamService, path: &str) -> StreamIncarnation {
    let req = CreateRequest {
        path: path.to_owned(),
        content_type: Some("application/json".into()),
        lifetime: Lifetime::default(),
        closed: false,
        body: Bytes::new(),
        fork: None,
    };
    StreamIncarnation::new(svc.create(req).await.expect("create").meta.incarnation.to_string())
}

/// An alarm `in_ms` from now on the service's clock.
fn alarm(svc: &StreamService, slug: &str, incarnation: &StreamIncarnation, token: &str, in_ms: i64) -> Alarm {
    let at_ms = u64::try_from(svc.clock().now_ms() + in_ms).expect("after 1970");
    Alarm { slug: slug.into(), incarnation: incarnation.clone(), token: token.into(), at_ms }
}

fn service(dir: &std::path::Path) -> StreamService {
    let (substrate, _due) = ds_store_local::local_substrate(dir).expect("open");
    StreamService::new(substrate, ServiceConfig::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alarms_fire_once_rearming_replaces_and_disarm_cancels() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A clock that moves only when told: an alarm fires when it is moved past its time.
    let clock = Clock::manual(1_800_000_000_000);
    let svc = service(dir.path()).with_clock(clock.clone());
    let inc = json_stream(&svc, "jobs").await;
    let (alarms, mut fired) = InProcAlarms::new(svc.clone());

    alarms.arm("jobs", &alarm(&svc, "a", &inc, "first", 5_000)).await.expect("arm");
    alarms.arm("jobs", &alarm(&svc, "a", &inc, "second", 50)).await.expect("re-arm replaces");
    alarms.arm("jobs", &alarm(&svc, "b", &inc, "other", 60_000)).await.expect("arm another slug");
    let early = tokio::time::timeout(Duration::from_millis(100), fired.recv()).await;
    assert!(early.is_err(), "nothing fires before its time: {early:?}");
    clock.advance(50);
    let got = tokio::time::timeout(Duration::from_secs(5), fired.recv()).await.expect("fires").expect("open");
    assert_eq!((got.path.as_str(), got.alarm.token.as_str()), ("jobs", "second"));
    alarms.disarm("jobs", "b").await.expect("disarm");
    assert_eq!(alarms.armed(), 0, "fired and disarmed alarms are gone");
    clock.advance(3_600_000);
    let nothing = tokio::time::timeout(Duration::from_millis(100), fired.recv()).await;
    assert!(nothing.is_err(), "the replaced and the disarmed alarm never fire: {nothing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alarm_armed_before_a_restart_fires_after_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let inc = {
        let svc = service(dir.path());
        let inc = json_stream(&svc, "jobs").await;
        let (alarms, _fired) = InProcAlarms::new(svc.clone());
        alarms.arm("jobs", &alarm(&svc, "a", &inc, "before-restart", 300)).await.expect("arm");
        alarms.arm("jobs", &alarm(&svc, "b", &inc, "disarmed", 300)).await.expect("arm");
        alarms.disarm("jobs", "b").await.expect("disarm");
        inc
        // The process "dies" here: timers and store dropped.
    };
    let svc = service(dir.path());
    let (alarms, mut fired) = InProcAlarms::new(svc.clone());
    let slugs = ["a".to_owned(), "b".to_owned()];
    assert_eq!(alarms.rearm("jobs", &slugs).await.expect("rearm"), 1, "only the armed alarm is restored");
    let got = tokio::time::timeout(Duration::from_secs(5), fired.recv()).await.expect("fires").expect("open");
    assert_eq!(got.alarm.token, "before-restart");
    assert_eq!(got.alarm.incarnation, inc);
    alarms.settle(&got).await.expect("settle");
    let (again, _rx) = InProcAlarms::new(svc);
    assert_eq!(again.rearm("jobs", &slugs).await.expect("rearm"), 0, "a settled alarm is not restored");
    drop(Arc::clone(&again));
}
