//! Pipelined appends and the commits they are stacked on (`ds_core::Chain`).
//!
//! The writer applies commits after `submit` returned, so a service plans
//! the next append on the state its commits in flight predict. Version and
//! tail name that state without identifying it: another writer can leave a
//! different state under the same pair. Found by the contract suite's
//! batched checks (two services over one store, about one run in twenty): a
//! commit refused because another writer got there first, and the appends
//! stacked on it passing their preconditions against that writer's state —
//! a producer's append applied twice, an append past a close. These checks
//! provoke that collision on purpose (equal-length appends), many times.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ds_core::contract::fixtures::{
    append_commit, append_request, bytes_at, create, create_request, read_all, unique_path,
};
use ds_core::{
    AppendOutcome, Chain, PendingCommit, ServiceConfig, ServiceError, StoreError, StreamHandle, StreamService,
    StreamStore, Substrate, TrySubmit,
};
use ds_inproc::in_process_substrate;
use ds_protocol::headers::ProducerHeaders;
use ds_store_local::LocalStore;
use tokio::sync::Barrier;

fn chained(store: &Arc<dyn StreamStore>, commit: ds_core::Commit, chain: &Chain) -> PendingCommit {
    match store.try_submit_chained(commit, chain.clone()) {
        TrySubmit::Submitted(pending) => pending.unwrap(),
        TrySubmit::WouldWait(_) => panic!("the local store submits without waiting"),
    }
}

/// The interleaving itself, deterministically: another writer moves the
/// stream to (v1, tail 4); this writer's pipeline, planned on v0, submits R
/// (4 bytes, v0 → v1) and S stacked on R's prediction (v1, tail 4). R is
/// refused; S names the other writer's state exactly, and must be refused
/// all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_stacked_on_a_refused_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s: Substrate = in_process_substrate(Arc::new(LocalStore::open(dir.path()).unwrap())).0;
    let path = unique_path("chain-refused");
    let base = create(&s, &path).await;
    let (other, _) = append_commit(&base, &Bytes::from_static(b"AAAA"), None);
    s.store.commit(other).await.unwrap();

    let chain = Chain::default();
    let (r, predicted) = append_commit(&base, &Bytes::from_static(b"BBBB"), None);
    let (stacked, _) = append_commit(&predicted, &Bytes::from_static(b"CCCC"), None);
    let (r, stacked) = (chained(&s.store, r, &chain), chained(&s.store, stacked, &chain));
    assert!(matches!(r.await, Err(StoreError::Conflict)), "planned on a version the stream has left");
    assert!(matches!(stacked.await, Err(StoreError::Conflict)), "stacked on a refused commit");
    assert!(chain.is_broken());

    let stream = StreamHandle::detached(&path);
    let meta = s.store.read_meta(&stream).await.unwrap().unwrap();
    assert_eq!((meta.version, meta.tail), (1, 4), "only the other writer's append");
    assert_eq!(bytes_at(&read_all(&s, &path, &meta.incarnation, 4).await, 0, 4), b"AAAA");

    // A new pipeline planned on the stored state applies.
    let (next, _) = append_commit(&meta, &Bytes::from_static(b"DDDD"), None);
    chained(&s.store, next, &Chain::default()).await.unwrap();
}

fn service(s: Substrate) -> StreamService {
    StreamService::new(s, ServiceConfig { long_poll_timeout: Duration::from_secs(10), ..ServiceConfig::default() })
}

/// Two services (as two processes) over one store.
fn two_services(store: &Arc<LocalStore>) -> [StreamService; 2] {
    let one = || service(in_process_substrate(Arc::clone(store) as Arc<dyn StreamStore>).0);
    [one(), one()]
}

/// Eight bytes, unique per `(k, i)`: every append is the same length, so the
/// pipelines of the two services predict the states each other leaves.
fn body(k: usize, i: usize) -> Bytes {
    Bytes::from(format!("<{k:03}.{i:02}>"))
}

/// A producer's append sent through both services at once, many writers,
/// each in turn: exactly one of each pair is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_producer_append_through_two_services_is_applied_once() {
    const WRITERS: usize = 16;
    const EACH: usize = 6;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(LocalStore::open(dir.path()).unwrap());
    for _round in 0..8 {
        let services = two_services(&store);
        let path = unique_path("chain-producer");
        services[0].create(create_request(&path)).await.unwrap();
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let (svcs, path) = (services.clone(), path.clone());
            tasks.push(tokio::spawn(async move {
                for i in 0..EACH {
                    let req = || {
                        let mut r = append_request(&path, body(w, i));
                        r.producer = Some(ProducerHeaders { id: format!("p{w}"), epoch: 0, seq: i as u64 });
                        r
                    };
                    let (a, b) = tokio::join!(svcs[0].append(req()), svcs[1].append(req()));
                    let outcomes = [a.unwrap(), b.unwrap()];
                    let applied = outcomes.iter().filter(|o| matches!(o, AppendOutcome::Appended { .. })).count();
                    assert_eq!(applied, 1, "writer {w}'s append {i}: {outcomes:?}");
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let meta = services[1].substrate().store.read_meta(&StreamHandle::detached(&path)).await.unwrap().unwrap();
        assert_eq!(meta.tail, (WRITERS * EACH * 8) as u64, "each append once");
    }
}

/// A close sent among appends of the same length through both services:
/// every append is applied before the close or refused as closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_append_is_applied_past_a_close() {
    const APPENDS: usize = 24;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(LocalStore::open(dir.path()).unwrap());
    for _round in 0..40 {
        let services = two_services(&store);
        let path = unique_path("chain-close");
        services[0].create(create_request(&path)).await.unwrap();
        let barrier = Arc::new(Barrier::new(APPENDS));
        let mut tasks = Vec::new();
        for k in 0..APPENDS {
            let (svc, path, barrier) = (services[k % 2].clone(), path.clone(), Arc::clone(&barrier));
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                // Each task appends twice, so each service keeps a pipeline.
                let mut out = Vec::new();
                for i in 0..2 {
                    let mut req = append_request(&path, body(k, i));
                    req.close = k == APPENDS / 2 && i == 1;
                    out.push((req.close, svc.append(req).await));
                }
                out
            }));
        }
        let mut results = Vec::new();
        for task in tasks {
            results.extend(task.await.unwrap());
        }
        let closed_at = results
            .iter()
            .find_map(|(close, r)| match (close, r) {
                (true, Ok(AppendOutcome::Appended { meta, .. })) if meta.closed => Some(meta.tail),
                _ => None,
            })
            .unwrap_or_else(|| panic!("the close was applied"));
        for (_, result) in &results {
            match result {
                Ok(outcome) => assert!(outcome.meta().tail <= closed_at, "applied past the close: {outcome:?}"),
                Err(ServiceError::StreamClosed { tail }) => assert_eq!(*tail, closed_at),
                Err(e) => panic!("an append: {e:?}"),
            }
        }
    }
}

/// One service (what the server runs), whose appends' callers go away
/// while their commits are queued, then retry: a dropped append counts as
/// finished for the prediction, which may drain while its commit is still
/// in the writer's queue. The next append is then planned on the store's
/// state without it, and the ones stacked on that plan name the dropped
/// commit's state if it has the same length. Each producer's append is
/// applied exactly once all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_service_with_cancelled_appends_applies_each_once() {
    const WRITERS: usize = 16;
    const EACH: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(LocalStore::open(dir.path()).unwrap());
    let svc = service(in_process_substrate(store as Arc<dyn StreamStore>).0);
    for round in 0..6 {
        let path = unique_path("chain-cancelled");
        svc.create(create_request(&path)).await.unwrap();
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let (svc, path) = (svc.clone(), path.clone());
            tasks.push(tokio::spawn(async move {
                // A cheap, varied cancellation point per attempt.
                let mut lcg = (round * WRITERS + w) as u64 * 2_654_435_761 + 1;
                for i in 0..EACH {
                    loop {
                        let mut req = append_request(&path, body(w, i));
                        req.producer = Some(ProducerHeaders { id: format!("p{w}"), epoch: 0, seq: i as u64 });
                        lcg = lcg.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                        let yields = (lcg >> 33) % 24;
                        let cancel = async {
                            for _ in 0..yields {
                                tokio::task::yield_now().await;
                            }
                        };
                        tokio::select! {
                            answer = svc.append(req) => {
                                answer.unwrap();
                                break;
                            }
                            () = cancel, if yields < 16 => {}
                        }
                    }
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let meta = svc.substrate().store.read_meta(&StreamHandle::detached(&path)).await.unwrap().unwrap();
        let whole = bytes_at(&read_all(svc.substrate(), &path, &meta.incarnation, meta.tail).await, 0, meta.tail);
        let twice: Vec<String> = whole
            .chunks(8)
            .enumerate()
            .filter(|(_, b)| whole.chunks(8).filter(|o| o == b).count() > 1)
            .map(|(at, b)| format!("{}@{}", String::from_utf8_lossy(b), at * 8))
            .collect();
        assert!(twice.is_empty(), "applied more than once (round {round}): {twice:?}");
        assert_eq!(meta.tail, (WRITERS * EACH * 8) as u64, "each append once (round {round})");
    }
}
