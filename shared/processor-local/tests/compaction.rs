//! State Protocol compaction by the `state` kind, through the HTTP router
//! over the memory store: a compaction replaces the history with a snapshot
//! of the live state (a reader from `offset=-1` folds the same state, a read
//! before it is `410`), changes racing it are never lost, a crash between
//! the snapshot and the trim is finished by the next compaction, and the
//! background pass compacts only what is due.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::App;
use ds_core::{AppendOutcome, AppendRequest, ServiceConfig, StreamService};
use ds_processor_local::{HostConfig, LocalHost};
use ds_processors_builtin::state::{snapshot_messages, Materialized, StateOperator, StateViews};
use ds_processors_builtin::{Catalog, ProcessorsConfig};
use serde_json::{json, Value};

const CONFIG: &str = r#"
[[processor]]
kind = "state"
slug = "users"
streams = "state/**"
compact_ratio = 4
compact_min_bytes = 2000
"#;

struct Fixture {
    app: App,
    views: Arc<StateViews>,
}

/// The app over `substrate`; a second call over the same substrate is the
/// server restarted (new, empty views).
async fn fixture(substrate: ds_core::Substrate) -> Fixture {
    let host = LocalHost::new(HostConfig { lag_log_interval: None, ..HostConfig::default() });
    let service = StreamService::new(host.tap(substrate), ServiceConfig::default());
    let (_, registry) = Catalog::builtin().load(CONFIG, &service).await.expect("valid config");
    host.start(service.clone(), registry).await.expect("start");
    let views = Arc::new(StateViews::from_config(&ProcessorsConfig::from_toml(CONFIG).unwrap()).unwrap());
    let operator = Arc::new(StateOperator::new(host.operator(), Arc::clone(&views), service.clone()));
    let ops = ds_http::Operations { processors: Some(operator), store_name: "test", ..Default::default() };
    let router = ds_http::router_with(service.clone(), ds_http::HttpConfig::default(), ops);
    Fixture { app: App { router, service, host }, views }
}

fn upsert(key: usize, version: usize) -> Value {
    json!({ "type": "user", "key": format!("u{key}"), "value": { "v": version, "pad": "x".repeat(40) },
            "headers": { "operation": "upsert" } })
}

/// Every message from `offset=-1` (paged), and the earliest offset read.
async fn read_all(app: &App, path: &str) -> (Vec<Value>, String) {
    let (mut offset, mut messages, mut first) = ("-1".to_owned(), Vec::new(), None);
    loop {
        let r = app.call("GET", &format!("/v1/stream/{path}?offset={offset}"), &[], "").await;
        assert_eq!(r.status.as_u16(), 200, "GET {path} at {offset}: {}", String::from_utf8_lossy(&r.body));
        first.get_or_insert_with(|| offset.clone());
        messages.extend(r.json().as_array().cloned().unwrap());
        offset = r.headers["stream-next-offset"].to_str().unwrap().to_owned();
        if r.headers.contains_key("stream-up-to-date") {
            return (messages, offset);
        }
    }
}

fn fold(messages: &[Value]) -> Value {
    let mut state = Materialized::new();
    for (i, m) in messages.iter().enumerate() {
        state.apply(i as u64, m.to_string().as_bytes()).expect("well-formed");
    }
    state.to_json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_replaces_the_history_with_a_snapshot_of_the_live_state() {
    let f = fixture(ds_store_memory::memory_substrate().0).await;
    let app = &f.app;
    app.create_json("state/a").await;
    let mut history = Vec::new();
    for round in 0..20 {
        let batch: Vec<Value> = (0..10).map(|k| upsert(k, round)).collect();
        app.append("state/a", &batch).await;
        history.extend(batch);
    }
    let gone = json!({ "type": "user", "key": "u3", "headers": { "operation": "delete" } });
    app.append("state/a", std::slice::from_ref(&gone)).await;
    history.push(gone);
    let tail = app.service.head("state/a").await.unwrap().tail;

    let r = app.control("users", "compact", "state/a", json!({})).await;
    assert_eq!(r.status.as_u16(), 200, "{}", String::from_utf8_lossy(&r.body));
    let report = r.json();
    assert_eq!(report["outcome"], "compacted", "{report}");
    assert_eq!(report["snapshotAt"], tail, "the snapshot follows the state it restates");
    assert_eq!(report["earliestOffset"], tail);
    assert_eq!(report["rows"], 9);
    assert!(report["historyAfter"].as_u64().unwrap() * 10 < report["historyBefore"].as_u64().unwrap(), "{report}");

    let (read, _) = read_all(app, "state/a").await;
    assert_eq!(read.len(), 9 + 2, "snapshot-start, 9 inserts, snapshot-end");
    assert_eq!(read[0]["headers"]["control"], "snapshot-start");
    assert_eq!(read[0]["headers"]["compactedBy"], "users");
    assert_eq!(read[10]["headers"]["control"], "snapshot-end");
    assert_eq!(fold(&read), fold(&history), "a reader from -1 folds the same state");
    let old = app.call("GET", "/v1/stream/state/a?offset=0000000000000000_0000000000000000", &[], "").await;
    assert_eq!(old.status.as_u16(), 410, "the history before the snapshot is gone");

    // Changes after a compaction follow the snapshot; a second compaction
    // restates them too.
    let later = vec![upsert(1, 99), json!({ "headers": { "control": "reset" } }), upsert(7, 100)];
    app.append("state/a", &later).await;
    history.extend(later);
    let (read, _) = read_all(app, "state/a").await;
    assert_eq!(fold(&read), fold(&history));
    let report = app.control("users", "compact", "state/a", json!({})).await.json();
    assert_eq!((report["outcome"].clone(), report["rows"].clone()), (json!("compacted"), json!(1)), "{report}");
    let (read, _) = read_all(app, "state/a").await;
    assert_eq!(read.len(), 3);
    assert_eq!(fold(&read), fold(&history));

    // Refusals name their reason.
    app.call("PUT", "/v1/stream/other", &[("content-type", "application/json")], "").await;
    let r = app.control("users", "compact", "other", json!({})).await;
    assert_eq!((r.status.as_u16(), r.json()["error"]["code"].clone()), (404, json!("NOT_REGISTERED")));
    let r = app.control("users", "compact", "state/a", json!({ "position": 1 })).await;
    assert_eq!(r.status.as_u16(), 400);
    app.call("POST", "/v1/stream/state/a", &[("stream-closed", "true")], "").await;
    let r = app.control("users", "compact", "state/a", json!({})).await;
    assert_eq!((r.status.as_u16(), r.json()["error"]["code"].clone()), (409, json!("CONFLICT")));
}

/// Appends one State Protocol message; returns where it starts.
async fn append_change(service: &StreamService, path: &str, message: &Value) -> u64 {
    let req =
        AppendRequest { content_type: Some("application/json".into()), ..append_request(path, message.to_string()) };
    match service.append(req).await.unwrap() {
        AppendOutcome::Appended { start, .. } => start,
        other => panic!("{other:?}"),
    }
}

/// Changes appended while compactions run in a loop are never lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn changes_racing_compactions_are_never_lost() {
    let f = fixture(ds_store_memory::memory_substrate().0).await;
    f.app.create_json("state/race").await;
    let (compacted, _) = race_compactions(&f, &f.app.service, "state/race").await;
    assert!(compacted > 0, "compactions ran alongside the writers");
}

/// Writers that keep the local store's pipeline full do not starve
/// compaction: the snapshot is built under the stream's lock, behind the
/// appends in flight, so it lands at its first try (one process: nothing
/// else can move the tail), and no acknowledged change is lost. Built
/// outside the lock, about half of such compactions gave up after 16 tries.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pipelined_writer_does_not_starve_compaction() {
    const WRITERS: usize = 8;
    const COMPACTIONS: usize = 6;
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(ds_store_local::local_substrate(dir.path()).unwrap().0).await;
    let app = &f.app;
    app.create_json("state/busy").await;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (service, done) = (app.service.clone(), Arc::clone(&done));
        writers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut i = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let message = upsert((w * 7 + i) % 40, w * 100_000 + i);
                acked.push((append_change(&service, "state/busy", &message).await, message));
                i += 1;
            }
            acked
        }));
    }
    let mut reports = Vec::new();
    for _ in 0..COMPACTIONS {
        // Let the writers run, then compact while they still do.
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        reports.push(f.views.compact("users", "state/busy", &app.service, true).await.unwrap());
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.await.unwrap());
    }
    let appended = acked.len();
    for report in &reports {
        assert_eq!(report.outcome, ds_processor_host::CompactionOutcome::Compacted, "{report:?}");
        assert_eq!(report.attempts, 1, "built under the lock, a snapshot lands at its first try: {report:?}");
    }
    let snapshots: Vec<u64> = reports.iter().filter_map(|r| r.snapshot_at).collect();
    assert!(snapshots.windows(2).all(|w| w[0] < w[1]), "{snapshots:?}: each compaction found new appends");
    acked.sort_by_key(|(start, _)| *start);
    let history: Vec<Value> = acked.into_iter().map(|(_, m)| m).collect();
    let (read, _) = read_all(app, "state/busy").await;
    assert_eq!(fold(&read), fold(&history), "{appended} appends, {COMPACTIONS} compactions: a row lost or revived");
}

/// Writers in another process (a second service, with its own lock, over
/// the same local store) race the compactions: the lock no longer keeps
/// their appends out from between the fold and the snapshot, so
/// `expect_tail` does, and no acknowledged change is lost or revived.
/// Rounds go on until the other process's appends refused some snapshots
/// (the race this is about happened), at most 20.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn changes_from_another_process_racing_compactions_are_never_lost() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ds_core::StreamStore> = Arc::new(ds_store_local::LocalStore::open(dir.path()).unwrap());
    let f = fixture(ds_inproc::in_process_substrate(Arc::clone(&store)).0).await;
    let other = StreamService::new(ds_inproc::in_process_substrate(store).0, ServiceConfig::default());
    let (mut compacted, mut refused) = (0, 0);
    for round in 0..20 {
        let path = format!("state/other-{round}");
        f.app.create_json(&path).await;
        let (c, r) = race_compactions(&f, &other, &path).await;
        (compacted, refused) = (compacted + c, refused + r);
        if refused > 0 {
            break;
        }
    }
    assert!(refused > 0, "in 20 rounds no snapshot met an append of the other process ({compacted} compactions)");
}

/// 4 writers × 150 changes to `path` through `writers` (the fixture's own
/// service, or another process's), compactions through the fixture's
/// service meanwhile (and until one lands); the fold from -1 equals the
/// fold of the acknowledged changes. Returns the compactions that landed
/// and the snapshots refused on the way.
async fn race_compactions(f: &Fixture, writers: &StreamService, path: &str) -> (u32, u32) {
    const WRITERS: usize = 4;
    const EACH: usize = 150;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let compactor = {
        let (views, service, done, path) =
            (Arc::clone(&f.views), f.app.service.clone(), Arc::clone(&done), path.to_owned());
        tokio::spawn(async move {
            let (mut compacted, mut refused) = (0, 0);
            while !done.load(std::sync::atomic::Ordering::Relaxed) || compacted == 0 {
                match views.compact("users", &path, &service, true).await {
                    Ok(report) => {
                        compacted += 1;
                        refused += report.attempts - 1;
                    }
                    // The tail moved under every attempt: fine, try again.
                    Err(ds_processor_host::OperatorError::Unavailable(_)) => refused += 16,
                    Err(e) => panic!("compaction failed: {e}"),
                }
                tokio::task::yield_now().await;
            }
            (compacted, refused)
        })
    };
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (service, path) = (writers.clone(), path.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 0..EACH {
                let message = match i % 7 {
                    6 => json!({ "type": "user", "key": format!("u{}", (w + i) % 12), "headers": { "operation": "delete" } }),
                    _ => upsert((w * 3 + i) % 12, w * 1000 + i),
                };
                acked.push((append_change(&service, &path, &message).await, message));
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for task in tasks {
        acked.extend(task.await.unwrap());
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let (compacted, refused) = compactor.await.unwrap();
    acked.sort_by_key(|(start, _)| *start);
    let history: Vec<Value> = acked.into_iter().map(|(_, m)| m).collect();
    let (read, _) = read_all(&f.app, path).await;
    assert_eq!(
        fold(&read),
        fold(&history),
        "{compacted} compactions ({refused} snapshots refused) lost or revived a row"
    );
    (compacted, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_snapshot_and_trim_is_finished_by_the_next_compaction() {
    let substrate = ds_store_memory::memory_substrate().0;
    let before = fixture(substrate.clone()).await;
    before.app.create_json("state/c").await;
    let history: Vec<Value> = (0..120).map(|i| upsert(i % 6, i)).collect();
    before.app.append("state/c", &history).await;
    // The compactor's first step, then the crash: the snapshot is appended
    // where the state was folded, nothing is trimmed. A client's own
    // snapshot (no `compactedBy`) follows; it must never be trimmed to.
    let at = before.app.service.head("state/c").await.unwrap().tail;
    let mut state = Materialized::new();
    for (i, m) in history.iter().enumerate() {
        state.apply(i as u64, m.to_string().as_bytes()).unwrap();
    }
    let snapshot = String::from_utf8(snapshot_messages(&state, "users", at)).unwrap();
    let req = AppendRequest {
        content_type: Some("application/json".into()),
        expect_tail: Some(at),
        ..append_request("state/c", snapshot)
    };
    before.app.service.append(req).await.unwrap();
    let theirs = vec![
        json!({ "headers": { "control": "snapshot-start" } }),
        json!({ "headers": { "control": "snapshot-end" } }),
    ];
    before.app.append("state/c", &theirs).await;
    drop(before);

    let after = fixture(substrate).await;
    let report = after.views.compact("users", "state/c", &after.app.service, false).await.unwrap();
    assert_eq!(report.outcome, ds_processor_host::CompactionOutcome::Resumed, "{report:?}");
    assert_eq!((report.snapshot_at, report.earliest_offset), (Some(at), at));
    assert_eq!(after.app.service.head("state/c").await.unwrap().retained_from, at);
    let (read, _) = read_all(&after.app, "state/c").await;
    assert_eq!(read.len(), 6 + 2 + 2, "our snapshot, then the client's markers");
    let mut full = history.clone();
    full.extend(theirs);
    assert_eq!(fold(&read), fold(&full));
    // Nothing left to finish, nothing due: a second pass changes nothing.
    let again = after.views.compact("users", "state/c", &after.app.service, false).await.unwrap();
    assert_eq!(again.outcome, ds_processor_host::CompactionOutcome::NotNeeded, "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_pass_compacts_what_is_due() {
    let f = fixture(ds_store_memory::memory_substrate().0).await;
    let app = &f.app;
    for path in ["state/due", "state/small", "state/live"] {
        app.create_json(path).await;
    }
    // 200 versions of 2 rows: history >> 4 x live. 10 rows once: too small.
    // 2 versions of 40 rows: over min_bytes but within the ratio.
    app.append("state/due", &(0..200).map(|i| upsert(i % 2, i)).collect::<Vec<_>>()).await;
    app.append("state/small", &(0..10).map(|i| upsert(i, i)).collect::<Vec<_>>()).await;
    app.append("state/live", &(0..80).map(|i| upsert(i % 40, i)).collect::<Vec<_>>()).await;
    let pass = f.views.compaction_pass("users", &app.service).await;
    assert_eq!((pass.examined, pass.compacted, pass.failed), (2, 1, 0), "{pass:?}");
    let due = app.service.head("state/due").await.unwrap();
    assert!(due.retained_from > 0 && due.tail - due.retained_from < 600, "{due:?}");
    for path in ["state/small", "state/live"] {
        assert_eq!(app.service.head(path).await.unwrap().retained_from, 0, "{path} was not due");
    }
    let pass = f.views.compaction_pass("users", &app.service).await;
    assert_eq!(pass.compacted, 0, "a compacted stream is not due again: {pass:?}");
}

/// A JSON append of `body` (the contract fixtures' request, JSON typed).
fn append_request(path: &str, body: String) -> AppendRequest<'static> {
    AppendRequest {
        content_type: Some("application/json".into()),
        ..ds_core::contract::fixtures::append_request(path, body.into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_stopped_by_its_deadline_resumes_where_it_stopped() {
    let f = fixture(ds_store_memory::memory_substrate().0).await;
    let app = &f.app;
    for i in 0..3 {
        let path = format!("state/d{i}");
        app.create_json(&path).await;
        app.append(&path, &(0..200).map(|v| upsert(v % 2, v)).collect::<Vec<_>>()).await;
    }
    // A deadline already past: each pass examines one stream and stops.
    let past = Some(std::time::Instant::now());
    for round in 1..=3 {
        let pass = f.views.compaction_pass_until("users", &app.service, past).await;
        // The third reaches the end of the listing after its one stream.
        assert_eq!((pass.examined, pass.compacted, pass.complete), (1, 1, round == 3), "{pass:?}");
        let mut trimmed = 0;
        for i in 0..3 {
            trimmed += usize::from(app.service.head(&format!("state/d{i}")).await.unwrap().retained_from > 0);
        }
        assert_eq!(trimmed, round, "each pass went on after the last stream examined");
    }
    let last = f.views.compaction_pass_until("users", &app.service, past).await;
    assert!(last.complete && last.compacted == 0, "{last:?}");
    let summary = f.views.scheduled_passes(&app.service, None).await;
    assert_eq!(summary["compaction"]["users"]["complete"], true, "{summary}");
    assert_eq!(summary["compaction"]["users"]["compacted"], 0, "{summary}");
    for i in 0..3 {
        assert!(app.service.head(&format!("state/d{i}")).await.unwrap().retained_from > 0, "state/d{i}");
    }
}

/// The kind's own runner (it consumes no events) is not stopped by a trim of
/// history it had not read yet: it goes on from the earliest offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kinds_own_runner_goes_on_past_a_trim_it_had_not_read() {
    let substrate = ds_store_memory::memory_substrate().0;
    // Written and compacted before any host runs: the runner starts at 0.
    let plain = StreamService::new(substrate.clone(), ServiceConfig::default());
    let mut create = ds_core::contract::fixtures::create_request("state/late");
    create.content_type = Some("application/json".into());
    plain.create(create).await.unwrap();
    let batch: Vec<Value> = (0..200).map(|i| upsert(i % 3, i)).collect();
    plain.append(append_request("state/late", Value::Array(batch).to_string())).await.unwrap();
    let views = StateViews::from_config(&ProcessorsConfig::from_toml(CONFIG).unwrap()).unwrap();
    let report = views.compact("users", "state/late", &plain, true).await.unwrap();
    assert!(report.earliest_offset > 0, "{report:?}");

    let f = fixture(substrate).await;
    let listed = f.app.settle(1).await;
    let users = listed.iter().find(|p| p["processor"] == "users").unwrap();
    assert_eq!(users["lag"], 0, "{users}");
    assert!(users.get("lastError").is_none_or(Value::is_null), "{users}");
}
