//! The non-store services: hub wake-ups, the per-stream mutex, the registry
//! bound, and the expiry scheduler.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use super::fixtures::{append, create, read_all, unique_path, wall_clock_ms};
use super::SubstrateFactory;
use crate::{ExpiryDue, ExpiryScheduler, TailSignal};

/// How long a wake-up may take before the test calls it missed.
const WAKE_WITHIN: Duration = Duration::from_secs(5);

/// A reader woken by `publish` (sent after the commit) re-reads the store and
/// sees the committed data.
pub async fn hub_wakes_after_commit(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let meta = create(&s, &unique_path("hub-wake")).await;
    let reader = {
        let (s, path, incarnation) = (s.clone(), meta.path.clone(), meta.incarnation.clone());
        tokio::spawn(async move {
            let mut sub = s.hub.subscribe(&s.registry.enter(&path));
            let seen = s.store.read_meta(&s.registry.enter(&path)).await.expect("read_meta").expect("exists");
            let started = Instant::now();
            let woke = sub.changed(&TailSignal::of(&seen), started + WAKE_WITHIN * 2).await;
            assert!(woke && started.elapsed() < WAKE_WITHIN, "the reader is woken by the append");
            let now = s.store.read_meta(&s.registry.enter(&path)).await.expect("read_meta").expect("exists");
            assert!(now.tail > seen.tail, "a woken reader sees the committed tail");
            read_all(&s, &path, &incarnation, now.tail).await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    append(&s, &meta.path, Bytes::from_static(b"wake up"), None).await;
    let chunks = reader.await.expect("reader completes");
    assert_eq!(chunks.first().map(|c| c.data.clone()), Some(Bytes::from_static(b"wake up")));
}

/// A subscription created before a publish observes it, even when `changed`
/// is only called after the publish happened.
pub async fn hub_no_missed_wakeup(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let meta = create(&s, &unique_path("hub-no-miss")).await;
    let mut sub = s.hub.subscribe(&s.registry.enter(&meta.path));
    let seen = TailSignal::of(&meta);
    append(&s, &meta.path, Bytes::from_static(b"early"), None).await;
    let started = Instant::now();
    assert!(sub.changed(&seen, started + WAKE_WITHIN * 2).await, "a publish after subscribe is never missed");
    assert!(started.elapsed() < WAKE_WITHIN);
}

/// `changed` returns `false` at the deadline when nothing happens.
pub async fn hub_deadline(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let meta = create(&s, &unique_path("hub-deadline")).await;
    let mut sub = s.hub.subscribe(&s.registry.enter(&meta.path));
    let deadline = Instant::now() + Duration::from_millis(250);
    assert!(!sub.changed(&TailSignal::of(&meta), deadline).await, "no change → false");
    assert!(Instant::now() >= deadline, "not before the deadline");
    assert!(Instant::now() < deadline + WAKE_WITHIN, "promptly at the deadline");
}

/// Within one instance, two guards for the same path are never held at once,
/// whether taken by `lock` or `try_lock`; a held guard does not block other
/// paths.
pub async fn mutex_serializes(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let path = unique_path("mutex");
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for task in 0..16 {
        let (s, path, inside) = (s.clone(), path.clone(), Arc::clone(&inside));
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let stream = s.registry.enter(&path);
                // Half the tasks try first, as the core does.
                let tried = if task % 2 == 0 { s.mutex.try_lock(&stream) } else { None };
                let _guard = match tried {
                    Some(guard) => guard,
                    None => s.mutex.lock(&stream).await,
                };
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders of one path's lock");
                tokio::time::sleep(Duration::from_micros(200)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
            }
        }));
    }
    for t in tasks {
        t.await.expect("locker completes");
    }
    let held = s.mutex.lock(&s.registry.enter(&path)).await;
    assert!(s.mutex.try_lock(&s.registry.enter(&path)).is_none(), "try_lock of a held lock");
    let other = tokio::time::timeout(WAKE_WITHIN, s.mutex.lock(&s.registry.enter(&unique_path("mutex-other")))).await;
    assert!(other.is_ok(), "locks of different paths are independent");
    // A waiter queued behind the holder is served before a later try_lock.
    let waiter = {
        let (s, path) = (s.clone(), path.clone());
        tokio::spawn(async move {
            let _guard = s.mutex.lock(&s.registry.enter(&path)).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(held);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(s.mutex.try_lock(&s.registry.enter(&path)).is_none(), "try_lock jumped a queued waiter");
    waiter.await.expect("waiter completes");
}

/// Leases keep contexts alive; once dropped (with every guard and
/// subscription), the registry shrinks back: bounded by streams in use.
pub async fn registry_bounded(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let baseline = s.registry.live_contexts();
    let paths: Vec<String> = (0..50).map(|_| unique_path("registry")).collect();
    let leases: Vec<_> = paths.iter().map(|p| s.registry.enter(p)).collect();
    assert!(s.registry.live_contexts() >= baseline + paths.len(), "held leases keep contexts");
    {
        let _g = s.mutex.lock(&s.registry.enter(&paths[0])).await;
        let _sub = s.hub.subscribe(&s.registry.enter(&paths[1]));
    }
    drop(leases);
    assert!(s.registry.live_contexts() <= baseline, "unused contexts are evicted");
}

/// `schedule_at` and `cancel` are accepted (for schedulers that cannot fire
/// in a test environment).
pub async fn scheduler_accepts_calls(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let path = unique_path("scheduler-calls");
    s.scheduler.schedule_at(&path, "inc", wall_clock_ms() + 60_000).await.expect("schedule_at");
    s.scheduler.schedule_at(&path, "inc", wall_clock_ms() + 120_000).await.expect("re-schedule");
    s.scheduler.cancel(&path, "inc").await.expect("cancel");
    s.scheduler.cancel(&path, "inc").await.expect("cancelling nothing is fine");
}

/// For schedulers that fire in-process: an alarm fires as one [`ExpiryDue`];
/// re-scheduling replaces the alarm (both later and earlier); cancel cancels.
/// `due` must be the receiver paired with `scheduler` and otherwise unused.
pub async fn scheduler_fires(scheduler: Arc<dyn ExpiryScheduler>, due: &mut UnboundedReceiver<ExpiryDue>) {
    let expect_due = |path: &str| ExpiryDue { path: path.to_owned(), incarnation: "inc".into() };

    let fires = unique_path("sched-fires");
    scheduler.schedule_at(&fires, "inc", wall_clock_ms() + 50).await.expect("schedule_at");
    let got = tokio::time::timeout(WAKE_WITHIN, due.recv()).await;
    assert_eq!(got.ok().flatten(), Some(expect_due(&fires)), "a scheduled alarm fires");

    let later = unique_path("sched-later");
    let t0 = Instant::now();
    scheduler.schedule_at(&later, "inc", wall_clock_ms() + 100).await.expect("schedule_at");
    scheduler.schedule_at(&later, "inc", wall_clock_ms() + 600).await.expect("re-schedule later");
    let got = tokio::time::timeout(WAKE_WITHIN, due.recv()).await;
    assert_eq!(got.ok().flatten(), Some(expect_due(&later)));
    assert!(t0.elapsed() >= Duration::from_millis(450), "re-scheduling later replaced the earlier alarm");
    assert!(quiet_for(due, 300).await, "a replaced alarm never fires");

    let earlier = unique_path("sched-earlier");
    let t0 = Instant::now();
    scheduler.schedule_at(&earlier, "inc", wall_clock_ms() + 60_000).await.expect("schedule_at");
    scheduler.schedule_at(&earlier, "inc", wall_clock_ms() + 50).await.expect("re-schedule earlier");
    let got = tokio::time::timeout(WAKE_WITHIN, due.recv()).await;
    assert_eq!(got.ok().flatten(), Some(expect_due(&earlier)));
    assert!(t0.elapsed() < WAKE_WITHIN, "re-scheduling earlier replaced the later alarm");

    let cancelled = unique_path("sched-cancel");
    scheduler.schedule_at(&cancelled, "inc", wall_clock_ms() + 100).await.expect("schedule_at");
    scheduler.cancel(&cancelled, "inc").await.expect("cancel");
    let past = unique_path("sched-past");
    scheduler.schedule_at(&past, "inc", wall_clock_ms() - 1_000).await.expect("schedule in the past");
    let got = tokio::time::timeout(WAKE_WITHIN, due.recv()).await;
    assert_eq!(got.ok().flatten(), Some(expect_due(&past)), "a past deadline fires at once");
    assert!(quiet_for(due, 400).await, "a cancelled alarm never fires");
}

/// True when nothing arrives on `due` for `ms` milliseconds.
async fn quiet_for(due: &mut UnboundedReceiver<ExpiryDue>, ms: u64) -> bool {
    tokio::time::timeout(Duration::from_millis(ms), due.recv()).await.is_err()
}
