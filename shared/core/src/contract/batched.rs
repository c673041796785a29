//! Batched commits, seen through the service: many appends to one stream at
//! once, so that a substrate that groups them (AWS's group commit, the local
//! store's writer batches) groups them, and one that does not still answers
//! the same. Every append keeps its own checks and its own answer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ds_protocol::headers::ProducerHeaders;
use tokio::sync::Barrier;

use super::fixtures::{append_request, create_request, unique_path};
use super::SubstrateFactory;
use crate::{
    AppendOutcome, LiveMode, ReadRequest, ServiceConfig, ServiceError, ServiceResult, StreamService, Substrate,
};

fn service(s: Substrate) -> StreamService {
    let cfg = ServiceConfig { long_poll_timeout: Duration::from_secs(10), ..ServiceConfig::default() };
    StreamService::new(s, cfg)
}

/// Two services (two processes) over one storage.
async fn two_services(f: &dyn SubstrateFactory) -> [StreamService; 2] {
    [service(f.instance().await), service(f.instance().await)]
}

fn body(w: usize, i: usize) -> Bytes {
    Bytes::from(format!("<w{w}.{i}{}>", "=".repeat((w * 5 + i * 3) % 13)))
}

fn producer(id: String, epoch: u64, seq: u64) -> Option<ProducerHeaders> {
    Some(ProducerHeaders { id, epoch, seq })
}

/// Where an applied append landed: `[start, end)`.
fn span(outcome: &AppendOutcome, len: usize) -> (u64, u64) {
    match outcome {
        AppendOutcome::Appended { meta, .. } => (meta.tail - len as u64, meta.tail),
        other => panic!("expected an applied append, got {other:?}"),
    }
}

/// The whole stream, read through `svc` from the beginning.
async fn read_whole(svc: &StreamService, path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = ds_protocol::ReadOffset::Beginning;
    loop {
        let read = svc
            .read(ReadRequest { path: path.to_owned(), offset: Some(offset), live: LiveMode::None })
            .await
            .expect("read");
        out.extend_from_slice(&read.body);
        if read.up_to_date {
            return out;
        }
        offset = ds_protocol::ReadOffset::At(ds_protocol::Offset(read.next));
    }
}

/// Many concurrent writers over two processes, each appending in turn with
/// its own producer: every acknowledged append is whole at the offset it was
/// told, the acknowledged appends are the stream exactly, and an append
/// acknowledged before another was sent lies before it (offset order is
/// acknowledgement order).
pub async fn batched_appends_ordered(f: &dyn SubstrateFactory) {
    const WRITERS: usize = 48;
    const EACH: usize = 4;
    let services = two_services(f).await;
    let path = unique_path("batched-order");
    services[0].create(create_request(&path)).await.expect("create");
    let clock = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(WRITERS));
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (svc, path, clock, barrier) = (services[w % 2].clone(), path.clone(), clock.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut acked = Vec::new();
            for i in 0..EACH {
                let mut req = append_request(&path, body(w, i));
                req.producer = producer(format!("w{w}"), 0, i as u64);
                let sent = clock.fetch_add(1, Ordering::SeqCst);
                let outcome = svc.append(req).await.expect("a valid append is applied");
                let answered = clock.fetch_add(1, Ordering::SeqCst);
                acked.push((sent, answered, span(&outcome, body(w, i).len()), w, i));
            }
            acked
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("writer"));
    }
    all.sort_by_key(|a| a.2);
    let whole = read_whole(&services[1], &path).await;
    let mut expected_start = 0;
    for &(_, _, (start, end), w, i) in &all {
        assert_eq!(start, expected_start, "acknowledged appends tile the stream");
        let at = usize::try_from(start).expect("fits");
        assert_eq!(&whole[at..usize::try_from(end).expect("fits")], &body(w, i)[..], "writer {w}'s append {i}");
        expected_start = end;
    }
    assert_eq!(whole.len() as u64, expected_start, "nothing but the acknowledged appends");
    for a in &all {
        for b in all.iter().filter(|b| a.1 < b.0) {
            assert!(a.2 .1 <= b.2 .0, "append {:?} acknowledged before {:?} was sent lies before it", a, b);
        }
    }
}

/// A producer's append and its retry sent together, the retry half the
/// time through the other process: exactly one is applied and the other is
/// a duplicate, and a retry after the answer is a duplicate too.
pub async fn batched_producer_retries(f: &dyn SubstrateFactory) {
    const WRITERS: usize = 24;
    const EACH: usize = 3;
    let services = two_services(f).await;
    let path = unique_path("batched-retry");
    services[0].create(create_request(&path)).await.expect("create");
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (svcs, path) = (services.clone(), path.clone());
        tasks.push(tokio::spawn(async move {
            let mut applied = 0;
            for i in 0..EACH {
                let req = || {
                    let mut r = append_request(&path, body(w, i));
                    r.producer = producer(format!("r{w}"), 1, i as u64);
                    r
                };
                let (a, b) = tokio::join!(svcs[0].append(req()), svcs[(w + i) % 2].append(req()));
                let outcomes = [a.expect("applied or duplicate"), b.expect("applied or duplicate")];
                let n = outcomes.iter().filter(|o| matches!(o, AppendOutcome::Appended { .. })).count();
                let dups = outcomes.iter().filter(|o| matches!(o, AppendOutcome::Duplicate { .. })).count();
                assert_eq!((n, dups), (1, 1), "writer {w}'s append {i}: {outcomes:?}");
                let late = svcs[(w + 1) % 2].append(req()).await.expect("a late retry");
                assert!(matches!(late, AppendOutcome::Duplicate { .. }), "a retry after the answer: {late:?}");
                applied += n;
            }
            applied
        }));
    }
    let mut applied = 0;
    for task in tasks {
        applied += task.await.expect("writer");
    }
    assert_eq!(applied, WRITERS * EACH);
    let whole = read_whole(&services[1], &path).await;
    let total: usize = (0..WRITERS).flat_map(|w| (0..EACH).map(move |i| body(w, i).len())).sum();
    assert_eq!(whole.len(), total, "each append once");
    for w in 0..WRITERS {
        for i in 0..EACH {
            let b = body(w, i);
            let found = whole.windows(b.len()).filter(|win| *win == &b[..]).count();
            assert_eq!(found, 1, "writer {w}'s append {i} is in the stream once");
        }
    }
}

/// What one concurrent append of [`batched_refusals_alone`] is.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Good,
    Fenced,
    WrongType,
    Gap,
    SeqRegression,
}

/// Refused appends sent among valid ones (a fenced producer, a content-type
/// mismatch, a sequence gap, a `Stream-Seq` regression): each fails alone
/// with its own error, every valid neighbour is applied; then a close among
/// appends: each append is applied before it or refused as closed.
pub async fn batched_refusals_alone(f: &dyn SubstrateFactory) {
    let services = two_services(f).await;
    let path = unique_path("batched-refusals");
    services[0].create(create_request(&path)).await.expect("create");
    // Producer "z" moves to epoch 1; a Stream-Seq is set.
    let mut first = append_request(&path, Bytes::from_static(b"[first]"));
    first.producer = producer("z".into(), 1, 0);
    first.seq = Some("m".into());
    services[0].append(first).await.expect("first");

    let kinds: Vec<Kind> = (0..40)
        .map(|k| match k % 8 {
            1 => Kind::Fenced,
            3 => Kind::WrongType,
            5 => Kind::Gap,
            7 => Kind::SeqRegression,
            _ => Kind::Good,
        })
        .collect();
    let barrier = Arc::new(Barrier::new(kinds.len()));
    let mut tasks = Vec::new();
    for (k, kind) in kinds.iter().copied().enumerate() {
        let (svc, path, barrier) = (services[k % 3 / 2].clone(), path.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let mut req = append_request(&path, body(k, 0));
            match kind {
                Kind::Good => req.producer = producer(format!("g{k}"), 0, 0),
                Kind::Fenced => req.producer = producer("z".into(), 0, 1),
                Kind::WrongType => req.content_type = Some("text/plain".into()),
                Kind::Gap => req.producer = producer(format!("gap{k}"), 0, 3),
                Kind::SeqRegression => req.seq = Some("a".into()),
            }
            barrier.wait().await;
            (k, kind, svc.append(req).await)
        }));
    }
    let mut good = Vec::new();
    for task in tasks {
        let (k, kind, result) = task.await.expect("appender");
        match (kind, &result) {
            (Kind::Good, Ok(outcome)) => good.push((span(outcome, body(k, 0).len()), k)),
            (Kind::Fenced, Err(ServiceError::StaleEpoch { current: 1 }))
            | (Kind::WrongType, Err(ServiceError::Conflict(_)))
            | (Kind::Gap, Err(ServiceError::SeqGap { expected: 0, received: 3 }))
            | (Kind::SeqRegression, Err(ServiceError::Conflict(_))) => {}
            _ => panic!("append {k} ({kind:?}) answered {result:?}"),
        }
    }
    good.sort();
    let whole = read_whole(&services[1], &path).await;
    let mut at = b"[first]".len() as u64;
    for ((start, end), k) in good {
        assert_eq!(start, at, "the applied appends follow each other");
        let b = body(k, 0);
        assert_eq!(&whole[usize::try_from(start).expect("fits")..usize::try_from(end).expect("fits")], &b[..]);
        at = end;
    }
    assert_eq!(whole.len() as u64, at, "refused appends left nothing behind");

    // A close among appends.
    let barrier = Arc::new(Barrier::new(17));
    let mut tasks = Vec::new();
    for k in 0..17 {
        let (svc, path, barrier) = (services[k % 2].clone(), path.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let mut req = append_request(&path, body(100 + k, 0));
            req.close = k == 8;
            barrier.wait().await;
            (k, svc.append(req).await)
        }));
    }
    let mut results: Vec<(usize, ServiceResult<AppendOutcome>)> = Vec::new();
    for task in tasks {
        results.push(task.await.expect("appender"));
    }
    let closed_at = match &results[8].1 {
        Ok(AppendOutcome::Appended { meta, .. }) if meta.closed => meta.tail,
        other => panic!("the close: {other:?}"),
    };
    let mut applied: u64 = 0;
    for (k, result) in &results {
        match result {
            Ok(outcome) => {
                let (_, end) = span(outcome, body(100 + k, 0).len());
                assert!(end <= closed_at, "append {k} applied past the close");
                applied += body(100 + k, 0).len() as u64;
            }
            Err(ServiceError::StreamClosed { tail }) => assert_eq!(*tail, closed_at),
            Err(e) => panic!("append {k}: {e:?}"),
        }
    }
    assert_eq!(closed_at, at + applied, "the applied appends and nothing else before the close");
    assert_eq!(read_whole(&services[0], &path).await.len() as u64, closed_at);
}

/// A live reader woken by batched appends finds them committed: what a
/// long-poll answers is what a reader of another process reads afterwards,
/// and following the stream with long-polls yields exactly the stream.
pub async fn batched_wake_after_commit(f: &dyn SubstrateFactory) {
    const WRITERS: usize = 32;
    let services = two_services(f).await;
    let path = unique_path("batched-wake");
    services[0].create(create_request(&path)).await.expect("create");
    let total: u64 = (0..WRITERS).map(|w| body(w, 0).len() as u64).sum();
    let reader = {
        let (svc, other, path) = (services[0].clone(), services[1].clone(), path.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while (seen.len() as u64) < total {
                let offset = ds_protocol::ReadOffset::At(ds_protocol::Offset(seen.len() as u64));
                let read = svc
                    .read(ReadRequest { path: path.clone(), offset: Some(offset), live: LiveMode::LongPoll })
                    .await
                    .expect("long-poll");
                assert!(!read.no_content, "woken by appends, not by the timeout");
                let confirm = other
                    .read(ReadRequest { path: path.clone(), offset: Some(offset), live: LiveMode::None })
                    .await
                    .expect("read");
                assert!(confirm.next >= read.next, "a reader was shown data not yet committed");
                assert_eq!(&confirm.body[..read.body.len()], &read.body[..], "the same bytes");
                seen.extend_from_slice(&read.body);
            }
            seen
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (svc, path) = (services[0].clone(), path.clone());
        tasks.push(tokio::spawn(async move { svc.append(append_request(&path, body(w, 0))).await.expect("append") }));
    }
    for task in tasks {
        task.await.expect("writer");
    }
    let seen = reader.await.expect("reader");
    assert_eq!(seen, read_whole(&services[1], &path).await, "the reader followed the stream exactly");
}
