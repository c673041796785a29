//! What idle readers cost (issue 41, "readers that cost little"), counted at
//! the emulator (`/_emulator/calls`): R long-poll or SSE readers parked at
//! the tail of one stream in one process cost the DynamoDB reads of the
//! stream's one poller, whatever R is. The readers re-issue their requests
//! during the window (long-poll timeout 1 s, SSE connections end after
//! 2 s), as idle readers do, so each reader's own requests are counted too.
//!
//! Bar: 200 readers cost the same DynamoDB calls over the window as 1
//! reader, within 10% (or 2 calls, whichever is more: the poller's phase
//! against the window's edges). Then an append made by another instance
//! wakes every reader with exactly its bytes.
//!
//! The cost test runs its phases in sequence and counts at the emulator,
//! whose counter is global: the other test of this binary waits for it (a
//! shared lock), so nothing runs beside it.
//!
//! `a_reader_arriving_after_a_remote_append_is_never_answered_from_before_it`
//! is the rule that keeps the cheap readers correct across processes (the
//! history checker caught an earlier design answering from the poller's
//! older view): whatever a live read answers "up to date" is current at a
//! moment after the request arrived.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ds_core::contract::fixtures;
use ds_core::{AppendRequest, CreateRequest, LiveMode, ReadRequest, ServiceConfig, StreamService};
use ds_protocol::{Offset, ReadOffset};
use ds_store_aws::test_util::{total, AwsFactory, CallCounter, Calls};
use futures::StreamExt;
use tokio::task::JoinSet;

const WINDOW: Duration = Duration::from_secs(8);
/// One test at a time in this binary (the emulator's call counter is global).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const RECORD: &[u8] = b"wake-up";

// Text, so an SSE data event carries the record as it is.
fn create_req(path: &str) -> CreateRequest {
    CreateRequest { content_type: Some("text/plain".into()), ..fixtures::create_request(path) }
}

fn append_req(path: &str, body: &'static [u8]) -> AppendRequest<'static> {
    AppendRequest {
        content_type: Some("text/plain".into()),
        ..fixtures::append_request(path, Bytes::from_static(body))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    LongPoll,
    Sse,
}

/// Keeps one long-poll reader parked at `tail`; counts the record's arrival.
async fn long_poll_reader(svc: StreamService, path: String, tail: u64, woken: Arc<AtomicUsize>) {
    let mut at = tail;
    loop {
        let req =
            ReadRequest { path: path.clone(), offset: Some(ReadOffset::At(Offset(at))), live: LiveMode::LongPoll };
        let out = svc.read(req).await.expect("long-poll");
        if !out.body.is_empty() {
            assert_eq!(out.body, Bytes::from_static(RECORD), "a woken long-poll gets exactly the appended bytes");
            woken.fetch_add(1, Ordering::SeqCst);
        }
        at = out.next;
    }
}

/// Keeps one SSE connection open at `tail` (re-opened when it ends); counts
/// the data events that carry the record.
async fn sse_reader(svc: StreamService, path: String, tail: u64, woken: Arc<AtomicUsize>) {
    loop {
        let req = ReadRequest { path: path.clone(), offset: Some(ReadOffset::At(Offset(tail))), live: LiveMode::Sse };
        let (_, mut events) = svc.sse(req, None).await.expect("SSE open");
        while let Some(event) = events.next().await {
            if event.starts_with(b"event: data") {
                assert!(event.windows(RECORD.len()).any(|w| w == RECORD), "the data event carries the record");
                woken.fetch_add(1, Ordering::SeqCst);
                // Parked at the old tail, a re-opened connection would
                // deliver the record again: this reader is done.
                std::future::pending::<()>().await;
            }
        }
    }
}

struct Phase {
    mode: Mode,
    readers: usize,
    idle: Calls,
    wake: Duration,
}

/// R readers of a fresh stream on `reader`; the idle window's calls, then
/// one append on `writer` (another instance) and the time until every reader
/// has it.
async fn phase(f: &AwsFactory, counter: &CallCounter, reader: &StreamService, mode: Mode, readers: usize) -> Phase {
    let path = format!("idle/{mode:?}-{readers}/{}", uuid::Uuid::new_v4());
    let (_writer_aws, writer) = f.service();
    writer.create(create_req(&path)).await.expect("create");
    writer.append(append_req(&path, b"first")).await.expect("append");
    let tail = writer.head(&path).await.expect("head").tail;
    let woken = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    for _ in 0..readers {
        let (svc, path, woken) = (reader.clone(), path.clone(), woken.clone());
        match mode {
            Mode::LongPoll => tasks.spawn(long_poll_reader(svc, path, tail, woken)),
            Mode::Sse => tasks.spawn(sse_reader(svc, path, tail, woken)),
        };
    }
    // Parked, and the poller backed off to its longest interval.
    tokio::time::sleep(Duration::from_secs(2)).await;
    counter.reset().await;
    tokio::time::sleep(WINDOW).await;
    let idle = counter.calls().await;
    if let Some(done) = tasks.try_join_next() {
        panic!("a reader stopped while idle: {done:?}");
    }
    let sent = Instant::now();
    writer.append(append_req(&path, RECORD)).await.expect("append");
    while woken.load(Ordering::SeqCst) < readers {
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "{} of {readers} {mode:?} readers woken 10 s after the append",
            woken.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let wake = sent.elapsed();
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    Phase { mode, readers, idle, wake }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_readers_cost_one_poller() {
    let _serial = SERIAL.lock().await;
    let Some(f) = AwsFactory::new("idle_readers_cost_one_poller").await else { return };
    let counter = CallCounter::new().expect("emulator endpoint");
    let cfg = ServiceConfig {
        long_poll_timeout: Duration::from_secs(1),
        sse_max_duration: Duration::from_secs(2),
        ..ServiceConfig::default()
    };
    // One instance (one process's substrate) for every reader.
    let (_reader_aws, reader) = f.service_with(cfg);
    let mut phases = Vec::new();
    for mode in [Mode::LongPoll, Mode::Sse] {
        for readers in [1, 200] {
            phases.push(phase(&f, &counter, &reader, mode, readers).await);
        }
    }
    let mut report = format!("\nIdle readers of one stream in one process, {} s window:\n", WINDOW.as_secs());
    for p in &phases {
        report.push_str(&format!(
            "{:<9} {:>4} readers: {:>4} DynamoDB calls ({:.1}/min) {:?}; all woken {:?} after a remote append\n",
            format!("{:?}", p.mode),
            p.readers,
            total(&p.idle, "dynamodb"),
            total(&p.idle, "dynamodb") as f64 * 60.0 / WINDOW.as_secs_f64(),
            p.idle.get("dynamodb"),
            p.wake
        ));
    }
    println!("{report}");
    for pair in phases.chunks(2) {
        let (one, many) = (total(&pair[0].idle, "dynamodb"), total(&pair[1].idle, "dynamodb"));
        assert!(one > 0, "the poller reads while a reader waits{report}");
        let slack = (one / 10).max(2);
        assert!(
            many.abs_diff(one) <= slack,
            "{:?}: {} readers cost {many} DynamoDB calls, 1 reader {one} (allowed ±{slack}){report}",
            pair[1].mode,
            pair[1].readers
        );
    }
}

/// Another process's acknowledged append must be in every live answer that
/// begins after it, even while this process's poller (parked readers keep it
/// running, backed off to its longest interval) has not seen it yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_arriving_after_a_remote_append_is_never_answered_from_before_it() {
    let _serial = SERIAL.lock().await;
    let Some(f) = AwsFactory::new("a_reader_arriving_after_a_remote_append").await else { return };
    let cfg = ServiceConfig { long_poll_timeout: Duration::from_millis(300), ..ServiceConfig::default() };
    let (_reader_aws, reader) = f.service_with(cfg);
    let (_writer_aws, writer) = f.service();
    let path = format!("idle/fresh/{}", uuid::Uuid::new_v4());
    writer.create(create_req(&path)).await.expect("create");
    writer.append(append_req(&path, b"first")).await.expect("append");
    let first = writer.head(&path).await.expect("head").tail;
    // A parked reader keeps this process's poller running.
    let parked = {
        let (svc, path) = (reader.clone(), path.clone());
        tokio::spawn(async move {
            let mut at = first;
            loop {
                let offset = Some(ReadOffset::At(Offset(at)));
                at = svc
                    .read(ReadRequest { path: path.clone(), offset, live: LiveMode::LongPoll })
                    .await
                    .expect("long-poll")
                    .next;
            }
        })
    };
    for round in 0..8 {
        // Let the poller back off to its longest interval, then append
        // through the other process.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let before = writer.head(&path).await.expect("head").tail;
        writer.append(append_req(&path, b"remote")).await.expect("append");
        let acked = writer.head(&path).await.expect("head").tail;
        // At this process's last known tail, at an offset behind it, and
        // at `now`: none may say "up to date" short of the acknowledged tail.
        for (what, offset) in [
            ("behind it", ReadOffset::At(Offset(first))),
            ("at the old tail", ReadOffset::At(Offset(before))),
            ("offset=now", ReadOffset::Now),
        ] {
            let req = ReadRequest { path: path.clone(), offset: Some(offset), live: LiveMode::LongPoll };
            let out = reader.read(req).await.expect("long-poll");
            if out.up_to_date {
                assert!(
                    out.meta.tail >= acked && (out.no_content || out.next >= acked),
                    "round {round}, long-poll {what}: up to date at {} (tail {}), but {acked} was acknowledged before it began",
                    out.next,
                    out.meta.tail
                );
            }
        }
        let req = ReadRequest { path: path.clone(), offset: Some(ReadOffset::At(Offset(before))), live: LiveMode::Sse };
        let (meta, mut events) = reader.sse(req, None).await.expect("SSE open");
        assert!(meta.tail >= acked, "round {round}: SSE opened on tail {} after {acked} was acknowledged", meta.tail);
        let first_event = events.next().await.expect("an SSE event");
        assert!(
            first_event.starts_with(b"event: data"),
            "round {round}: SSE at the old tail starts with the remote append's data"
        );
    }
    parked.abort();
}
