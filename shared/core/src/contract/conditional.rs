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
    let writers = plain_writers(&svc, &path, WRITERS, EACH);
    for w in writers {
        w.await.expect("writer");
    }
    done.store(true, Ordering::Relaxed);
    let (landed, _refused) = conditional.await.expect("conditional appender");
    let tail = svc.head(&path).await.expect("head").tail;
    assert_eq!(tail, now + (WRITERS * EACH) as u64 + landed, "the stream holds exactly what was acknowledged");
}

/// Builds an append at the tail it reads ([`StreamService::append_built`]).
struct AtTheTail {
    svc: StreamService,
    path: String,
    /// The tail each build read.
    built_at: Vec<u64>,
}

#[async_trait::async_trait]
impl crate::BuildAppend for AtTheTail {
    async fn build(&mut self) -> Option<AppendRequest<'static>> {
        let tail = self.svc.head(&self.path).await.expect("head").tail;
        self.built_at.push(tail);
        Some(AppendRequest { expect_tail: Some(tail), ..append_request(&self.path, Bytes::from_static(b"snapshot")) })
    }
}

/// An append built under the stream's lock, behind the appends in flight,
/// lands at the tail its build read at the first try, however busy the
/// stream (one process: nothing else can move the tail in between), and
/// the stream holds exactly what was acknowledged.
pub async fn append_built_under_the_lock(f: &dyn SubstrateFactory) {
    let svc = StreamService::new(f.instance().await, crate::ServiceConfig::default());
    let path = unique_path("built");
    svc.create(create_request(&path)).await.expect("create");
    const WRITERS: usize = 4;
    const EACH: usize = 40;
    const BUILT: usize = 10;
    let writers = plain_writers(&svc, &path, WRITERS, EACH);
    let mut build = AtTheTail { svc: svc.clone(), path: path.clone(), built_at: Vec::new() };
    for _ in 0..BUILT {
        match svc.append_built(&path, &mut build).await.expect("built append") {
            Some(AppendOutcome::Appended { start, .. }) => {
                assert_eq!(Some(&start), build.built_at.last(), "it lands at the tail its build read");
            }
            other => panic!("expected an append, got {other:?}"),
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(build.built_at.len(), BUILT, "one build per append: no try was refused");
    for w in writers {
        w.await.expect("writer");
    }
    let tail = svc.head(&path).await.expect("head").tail;
    assert_eq!(tail, (WRITERS * EACH + BUILT * 8) as u64, "the stream holds exactly what was acknowledged");

    // A builder that makes nothing writes nothing.
    struct Nothing;
    #[async_trait::async_trait]
    impl crate::BuildAppend for Nothing {
        async fn build(&mut self) -> Option<AppendRequest<'static>> {
            None
        }
    }
    assert!(svc.append_built(&path, &mut Nothing).await.expect("declined").is_none());
    assert_eq!(svc.head(&path).await.expect("head").tail, tail);
}

/// `writers` tasks appending `each` one-byte appends to `path`.
fn plain_writers(svc: &StreamService, path: &str, writers: usize, each: usize) -> Vec<tokio::task::JoinHandle<()>> {
    (0..writers)
        .map(|_| {
            let (svc, path) = (svc.clone(), path.to_owned());
            tokio::spawn(async move {
                for _ in 0..each {
                    svc.append(append_request(&path, Bytes::from_static(b"w"))).await.expect("plain append");
                }
            })
        })
        .collect()
}
