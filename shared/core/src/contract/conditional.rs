//! Appends conditional on the tail (`AppendRequest::expect_tail`): one
//! lands exactly at the tail it names or is refused with what the tail is,
//! writing nothing, also while other appends are pipelined ahead of it.
//! State Protocol compaction rests on this: a snapshot must follow the
//! very state it was built from.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use super::fixtures::{append_request, create_request, unique_path};
use super::SubstrateFactory;
use crate::{AppendOutcome, AppendRequest, ServiceError, StreamService};

pub async fn append_at_expected_tail(f: &dyn SubstrateFactory) {
    let svc = StreamService::new(f.instance().await, crate::ServiceConfig::default());
    let path = unique_path("expect-tail");
    svc.create(create_request(&path)).await.expect("create");
    let tail = svc.head(&path).await.expect("head").tail;
    let at = |expect: u64, body: &'static [u8]| AppendRequest {
        expect_tail: Some(expect),
        ..append_request(&path, Bytes::from_static(body))
    };
    match svc.append(at(tail, b"first")).await.expect("append at the tail") {
        AppendOutcome::Appended { start, .. } => assert_eq!(start, tail),
        other => panic!("expected an append, got {other:?}"),
    }
    let now = svc.head(&path).await.expect("head").tail;
    match svc.append(at(tail, b"stale")).await {
        Err(ServiceError::TailMoved { expected, tail: found }) => assert_eq!((expected, found), (tail, now)),
        other => panic!("expected TailMoved, got {other:?}"),
    }
    assert_eq!(svc.head(&path).await.expect("head").tail, now, "a refused append writes nothing");

    // Racing plain appends: every conditional append that is acknowledged
    // starts where it said, and the stream holds exactly what was acknowledged.
    const WRITERS: usize = 4;
    const EACH: usize = 40;
    let done = Arc::new(AtomicBool::new(false));
    let conditional = {
        let (svc, path, done) = (svc.clone(), path.clone(), Arc::clone(&done));
        tokio::spawn(async move {
            let (mut landed, mut refused) = (0u64, 0u64);
            while !done.load(Ordering::Relaxed) || landed == 0 {
                let tail = svc.head(&path).await.expect("head").tail;
                let req =
                    AppendRequest { expect_tail: Some(tail), ..append_request(&path, Bytes::from_static(b"snapshot")) };
                match svc.append(req).await {
                    Ok(AppendOutcome::Appended { start, .. }) => {
                        assert_eq!(start, tail, "a conditional append lands at the tail it named");
                        landed += 8;
                    }
                    Err(ServiceError::TailMoved { expected, tail: found }) => {
                        assert_eq!(expected, tail);
                        assert!(found > tail, "the tail only moves forward");
                        refused += 1;
                    }
                    other => panic!("expected an append or TailMoved, got {other:?}"),
                }
                tokio::task::yield_now().await;
            }
            (landed, refused)
        })
    };
    let mut writers = Vec::new();
    for _ in 0..WRITERS {
        let (svc, path) = (svc.clone(), path.clone());
        writers.push(tokio::spawn(async move {
            for _ in 0..EACH {
                svc.append(append_request(&path, Bytes::from_static(b"w"))).await.expect("plain append");
            }
        }));
    }
    for w in writers {
        w.await.expect("writer");
    }
    done.store(true, Ordering::Relaxed);
    let (landed, _refused) = conditional.await.expect("conditional appender");
    let tail = svc.head(&path).await.expect("head").tail;
    assert_eq!(tail, now + (WRITERS * EACH) as u64 + landed, "the stream holds exactly what was acknowledged");
}
