//! Retention through the service (`StreamService::trim`): reads before the
//! earliest retained offset are refused with it, `-1` starts there, what is
//! retained reads as before, live readers at the tail are not disturbed,
//! forks answer for their source lineage's trims, and a trim racing
//! pipelined appends loses none of them.
//!
//! These are the core's rules, so they hold on every substrate whether or
//! not its store reclaims the trimmed storage yet. JSON streams are used
//! where an exact boundary is asserted: a trim's boundary is a message
//! boundary whatever chunks a store joined appends into.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ds_protocol::{Offset, ReadOffset};
use futures::StreamExt;

use super::fixtures::{create_request, unique_path};
use super::SubstrateFactory;
use crate::{
    AppendOutcome, AppendRequest, ForkRequest, LiveMode, ReadOutcome, ReadRequest, ServiceConfig, ServiceError,
    StreamService,
};

const JSON: &str = "application/json";

fn service(s: crate::Substrate) -> StreamService {
    let cfg = ServiceConfig { long_poll_timeout: Duration::from_secs(10), ..ServiceConfig::default() };
    StreamService::new(s, cfg)
}

async fn create_json(svc: &StreamService, path: &str) {
    let mut req = create_request(path);
    req.content_type = Some(JSON.into());
    svc.create(req).await.expect("create a JSON stream");
}

/// Append one JSON message; returns the offset just past it.
async fn append_json(svc: &StreamService, path: &str, message: &str) -> u64 {
    let req = AppendRequest {
        content_type: Some(JSON.into()),
        ..super::fixtures::append_request(path, Bytes::from(message.to_owned()))
    };
    match svc.append(req).await.expect("append") {
        AppendOutcome::Appended { meta, .. } => meta.tail,
        other => panic!("expected an append, got {other:?}"),
    }
}

/// `path` with messages `{"i":0}` … `{"i":n-1}`; returns the boundaries:
/// `b[i]` is where message `i` starts, `b[n]` the tail.
async fn json_stream(svc: &StreamService, path: &str, n: usize) -> Vec<u64> {
    create_json(svc, path).await;
    let mut bounds = vec![0];
    for i in 0..n {
        bounds.push(append_json(svc, path, &format!("{{\"i\":{i}}}")).await);
    }
    bounds
}

async fn read_at(svc: &StreamService, path: &str, offset: ReadOffset) -> Result<ReadOutcome, ServiceError> {
    svc.read(ReadRequest { path: path.to_owned(), offset: Some(offset), live: LiveMode::None }).await
}

fn at(pos: u64) -> ReadOffset {
    ReadOffset::At(Offset(pos))
}

/// The `i` of each message of a JSON read's body.
fn ids(body: &[u8]) -> Vec<u64> {
    let page: Vec<serde_json::Value> = serde_json::from_slice(body).expect("a JSON page is an array");
    page.iter().map(|m| m["i"].as_u64().expect("a message has an i")).collect()
}

fn assert_not_retained(result: Result<ReadOutcome, ServiceError>, earliest: u64, what: &str) {
    match result {
        Err(ServiceError::NotRetained { earliest: e }) => assert_eq!(e, earliest, "{what}: the earliest offset"),
        other => panic!("{what}: expected 410 NotRetained, got {other:?}"),
    }
}

/// Reads before the earliest retained offset are refused with it; `-1`
/// starts at it; reads at or after it are unchanged; trims are idempotent
/// and monotonic, never split a message, and stop at the tail.
pub async fn retention_trim_and_reads(f: &dyn SubstrateFactory) {
    let svc = service(f.instance().await);
    let path = unique_path("retention-reads");
    let b = json_stream(&svc, &path, 10).await;
    let before = read_at(&svc, &path, at(b[6])).await.expect("read before the trim");

    let trimmed = svc.trim(&path, b[4] + 3).await.expect("trim");
    assert_eq!((trimmed.retained_from, trimmed.raised), (b[4], true), "a trim stops at a message boundary");
    assert_eq!(svc.head(&path).await.expect("head").retained_from, b[4]);

    assert_not_retained(read_at(&svc, &path, at(0)).await, b[4], "offset 0");
    assert_not_retained(read_at(&svc, &path, at(b[3])).await, b[4], "one message before the earliest");
    let from_earliest = read_at(&svc, &path, at(b[4])).await.expect("read at the earliest");
    assert_eq!(ids(&from_earliest.body), (4..10).collect::<Vec<_>>());
    assert_eq!(from_earliest.earliest, b[4]);
    let beginning = read_at(&svc, &path, ReadOffset::Beginning).await.expect("read from -1");
    assert_eq!((beginning.start, ids(&beginning.body)), (b[4], (4..10).collect()), "-1 starts at the earliest");
    let after = read_at(&svc, &path, at(b[6])).await.expect("read after the earliest");
    assert_eq!(after.body, before.body, "what is retained reads as before");
    assert_eq!(after.next, before.next);
    // Processors read the journal: the same boundary, whether or not the
    // store has reclaimed the bytes yet.
    let incarnation = svc.head(&path).await.expect("head").incarnation.to_string();
    match svc.read_journal(&path, &incarnation, b[3], 1 << 20).await {
        Err(ServiceError::NotRetained { earliest }) => assert_eq!(earliest, b[4], "a journal read before the earliest"),
        other => panic!("a journal read before the earliest: expected NotRetained, got {other:?}"),
    }
    let journal = svc.read_journal(&path, &incarnation, b[4], 1 << 20).await.expect("a journal read at the earliest");
    assert_eq!(journal.entries.first().map(|(position, _)| *position), Some(b[5]));

    let again = svc.trim(&path, b[4] + 3).await.expect("the same trim again");
    assert_eq!((again.retained_from, again.raised), (b[4], false), "idempotent");
    let lower = svc.trim(&path, b[2]).await.expect("a lower trim");
    assert_eq!((lower.retained_from, lower.raised), (b[4], false), "retained_from never goes back");
    assert_eq!(svc.trim(&path, b[7]).await.expect("a higher trim").retained_from, b[7]);
    assert_eq!(svc.trim(&path, u64::MAX).await.expect("trim everything").retained_from, b[10], "at most the tail");
    let empty = read_at(&svc, &path, ReadOffset::Beginning).await.expect("read a wholly trimmed stream");
    assert_eq!((empty.start, empty.up_to_date), (b[10], true));
    assert_eq!(append_json(&svc, &path, "{\"i\":10}").await, b[10] + 9, "appends go on after a trim");
    let rest = read_at(&svc, &path, ReadOffset::Beginning).await.expect("read the new message");
    assert_eq!(ids(&rest.body), vec![10]);
}

/// In a byte stream a trim stops at an append boundary: the bytes read
/// from `-1` start where one append started.
pub async fn retention_keeps_whole_appends(f: &dyn SubstrateFactory) {
    let svc = service(f.instance().await);
    let path = unique_path("retention-bytes");
    svc.create(create_request(&path)).await.expect("create");
    let mut bounds = vec![0u64];
    for (i, len) in [5000usize, 5000, 300, 300].into_iter().enumerate() {
        let body = Bytes::from(vec![b'a' + i as u8; len]);
        let out = svc.append(super::fixtures::append_request(&path, body)).await.expect("append");
        bounds.push(out.meta().tail);
    }
    let trimmed = svc.trim(&path, 7000).await.expect("trim").retained_from;
    assert!(trimmed <= 7000 && bounds.contains(&trimmed), "{trimmed} is an append boundary at or before 7000");
    let read = read_at(&svc, &path, ReadOffset::Beginning).await.expect("read from -1");
    assert_eq!(read.start, trimmed);
    let first = bounds.iter().position(|&b| b == trimmed).expect("a boundary");
    assert_eq!(read.body.first().copied(), Some(b'a' + first as u8), "the read starts with a whole append");
    assert_eq!(read.next, bounds[4]);
}

/// A long-poll reader and an SSE reader live at the tail keep receiving
/// every message in order while, after each append, everything before
/// their position is trimmed (`retained_from` reaches the offset they read
/// next).
pub async fn retention_live_readers_cross_trims(f: &dyn SubstrateFactory) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    const N: usize = 8;
    let svc = service(f.instance().await);
    let path = unique_path("retention-live");
    create_json(&svc, &path).await;
    let start = append_json(&svc, &path, "{\"i\":0}").await;
    svc.trim(&path, start).await.expect("trim to the tail");
    let progress = [Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0))];

    let long_poll = {
        let (svc, path, seen) = (svc.clone(), path.clone(), Arc::clone(&progress[0]));
        tokio::spawn(async move {
            let (mut pos, mut got) = (start, Vec::new());
            while got.len() < N {
                let req = ReadRequest { path: path.clone(), offset: Some(at(pos)), live: LiveMode::LongPoll };
                let out = svc.read(req).await.expect("a long-poll at the tail is never refused");
                if !out.no_content {
                    got.extend(ids(&out.body));
                    seen.store(got.len(), Ordering::SeqCst);
                }
                pos = out.next;
            }
            got
        })
    };
    let sse = {
        let (svc, path, seen) = (svc.clone(), path.clone(), Arc::clone(&progress[1]));
        tokio::spawn(async move {
            let req = ReadRequest { path: path.clone(), offset: Some(at(start)), live: LiveMode::Sse };
            let (_, mut events) = svc.sse(req, None).await.expect("open SSE at the tail");
            let mut got = Vec::new();
            while got.len() < N {
                let event = events.next().await.expect("the SSE stream goes on across trims");
                got.extend(sse_ids(&event));
                seen.store(got.len(), Ordering::SeqCst);
            }
            got
        })
    };
    let mut tail = start;
    for i in 1..=N {
        // Both readers wait at `tail`: trim everything before it.
        let caught_up = async {
            while progress.iter().any(|p| p.load(Ordering::SeqCst) < i - 1) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(20), caught_up).await.expect("the readers keep up");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let reader_at = tail;
        tail = append_json(&svc, &path, &format!("{{\"i\":{i}}}")).await;
        assert_eq!(svc.trim(&path, reader_at).await.expect("trim").retained_from, reader_at);
    }
    let expected: Vec<u64> = (1..=N as u64).collect();
    let within = Duration::from_secs(20);
    assert_eq!(tokio::time::timeout(within, long_poll).await.expect("in time").expect("reader"), expected);
    assert_eq!(tokio::time::timeout(within, sse).await.expect("in time").expect("reader"), expected);
}

/// The message ids of one SSE data event (none for a control event).
fn sse_ids(event: &[u8]) -> Vec<u64> {
    let text = std::str::from_utf8(event).expect("SSE is text");
    if !text.starts_with("event: data") {
        return Vec::new();
    }
    let payload: String = text.lines().filter_map(|l| l.strip_prefix("data:")).collect();
    ids(payload.as_bytes())
}

/// A fork does not pin its source's history: one created below the
/// source's earliest offset is refused with it, and a fork's reads below
/// its lineage's earliest offset are refused with the fork's earliest.
pub async fn retention_forks_follow_their_lineage(f: &dyn SubstrateFactory) {
    let svc = service(f.instance().await);
    let source = unique_path("retention-src");
    let b = json_stream(&svc, &source, 10).await;
    let fork = unique_path("retention-fork");
    let fork_at = |path: &str, offset: u64| {
        let mut req = create_request(path);
        req.content_type = None;
        req.fork = Some(ForkRequest { source: source.clone(), offset: Some(Offset(offset)), sub_offset: 0 });
        req
    };
    svc.create(fork_at(&fork, b[6])).await.expect("fork at message 6");
    let own = append_json(&svc, &fork, "{\"i\":100}").await;

    svc.trim(&source, b[4]).await.expect("trim the source");
    match svc.create(fork_at(&unique_path("retention-late"), b[2])).await {
        Err(ServiceError::NotRetained { earliest }) => assert_eq!(earliest, b[4]),
        other => panic!("a fork below the source's earliest offset: expected 410, got {other:?}"),
    }
    svc.create(fork_at(&unique_path("retention-ok"), b[5])).await.expect("a fork at a retained offset");

    assert_not_retained(read_at(&svc, &fork, at(b[3])).await, b[4], "a fork's inherited bytes below the source's");
    let head = svc.head(&fork).await.expect("head");
    assert_eq!((head.retained_from, svc.earliest(&head).await.expect("earliest")), (0, b[4]));
    let beginning = read_at(&svc, &fork, ReadOffset::Beginning).await.expect("fork from -1");
    assert_eq!((beginning.start, ids(&beginning.body)), (b[4], vec![4, 5, 100]));

    // Past the fork's base: nothing inherited is left.
    svc.trim(&source, b[8]).await.expect("trim the source past the fork's base");
    assert_not_retained(read_at(&svc, &fork, at(b[4])).await, b[6], "everything the fork inherited is gone");
    let beginning = read_at(&svc, &fork, ReadOffset::Beginning).await.expect("fork from -1");
    assert_eq!((beginning.start, ids(&beginning.body)), (b[6], vec![100]));
    let own_read = read_at(&svc, &fork, at(b[6])).await.expect("the fork's own bytes");
    assert_eq!((ids(&own_read.body), own_read.next), (vec![100], own));

    // The fork's own trim counts in its own position space.
    let tail = append_json(&svc, &fork, "{\"i\":101}").await;
    assert_eq!(svc.trim(&fork, own).await.expect("trim the fork").retained_from, own);
    assert_not_retained(read_at(&svc, &fork, at(b[6])).await, own, "the fork's own trim");
    let rest = read_at(&svc, &fork, ReadOffset::Beginning).await.expect("fork from -1");
    assert_eq!((rest.start, ids(&rest.body), rest.next), (own, vec![101], tail));
    let source_rest = read_at(&svc, &source, ReadOffset::Beginning).await.expect("the source from -1");
    assert_eq!(ids(&source_rest.body), vec![8, 9], "the fork's trim leaves its source alone");
}

/// Trims racing pipelined appends (several writers on one stream) neither
/// fail nor lose an acknowledged append: the tail holds every one, and
/// what is retained reads as the acknowledged appends in offset order.
pub async fn retention_trim_races_appends(f: &dyn SubstrateFactory) {
    const WRITERS: u64 = 4;
    const EACH: u64 = 25;
    let svc = service(f.instance().await);
    let path = unique_path("retention-race");
    create_json(&svc, &path).await;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trimmer = {
        let (svc, path, done) = (svc.clone(), path.clone(), Arc::clone(&done));
        tokio::spawn(async move {
            let mut trims = 0u32;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let tail = svc.head(&path).await.expect("head").tail;
                svc.trim(&path, tail.saturating_sub(40)).await.expect("a trim racing appends succeeds");
                trims += 1;
                tokio::task::yield_now().await;
            }
            trims
        })
    };
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (svc, path) = (svc.clone(), path.clone());
        writers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for k in 0..EACH {
                let i = w * 1000 + k;
                let message = format!("{{\"i\":{i}}}");
                let req = AppendRequest {
                    content_type: Some(JSON.into()),
                    ..super::fixtures::append_request(&path, Bytes::from(message.clone()))
                };
                match svc.append(req).await.expect("append") {
                    AppendOutcome::Appended { start, .. } => acked.push((start, i, message.len() as u64 + 1)),
                    other => panic!("expected an append, got {other:?}"),
                }
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.await.expect("writer"));
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(trimmer.await.expect("trimmer") > 0);
    acked.sort_unstable();
    let total: u64 = acked.iter().map(|(_, _, len)| len).sum();
    let meta = svc.head(&path).await.expect("head");
    assert_eq!(meta.tail, total, "every acknowledged append is in the stream");
    let mut read = Vec::new();
    let mut offset = ReadOffset::Beginning;
    loop {
        let out = read_at(&svc, &path, offset).await.expect("read the retained messages");
        read.extend(ids(&out.body));
        if out.up_to_date {
            break;
        }
        offset = at(out.next);
    }
    let expected: Vec<u64> =
        acked.iter().filter(|(start, _, _)| *start >= meta.retained_from).map(|(_, i, _)| *i).collect();
    assert!(!expected.is_empty(), "the last trim kept the newest messages");
    assert_eq!(read, expected, "what is retained is the acknowledged appends, in offset order");
}
