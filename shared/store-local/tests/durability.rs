//! Local-store-only checks: acknowledged commits survive dropping the store
//! without any shutdown and a `kill -9` of the process; group commit shares
//! syncs without letting a failed commit affect its batch; corrupt records are
//! errors, not panics.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ds_core::contract::fixtures::{append, assert_tiles, bytes_at, create, new_meta, read_all};
use ds_core::{Commit, Expect, Op, ProducerState, StoreError, StreamHandle, StreamStore, Substrate};
use ds_store_local::{local_substrate, LocalStore, DB_FILE, WAL_FILE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_commit_survives_drop_without_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let (path, acked, touched) = {
        let (s, _due) = local_substrate(dir.path()).unwrap();
        let meta = create(&s, "drop/stream").await;
        let done = append(&s, "drop/stream", Bytes::from_static(b"acknowledged"), None).await;
        // A touch is only in memory until the next flush; dropping keeps it too.
        s.store
            .touch(&StreamHandle::detached("drop/stream"), &meta.incarnation, done.meta.touched_at_ms + 60_000)
            .await
            .unwrap();
        let touched = s.store.read_meta(&StreamHandle::detached("drop/stream")).await.unwrap().unwrap().touched_at_ms;
        assert_eq!(touched, done.meta.touched_at_ms + 60_000, "touch is visible at once");
        (meta.path, done.meta, touched)
        // `s` is dropped here: no close or flush call.
    };
    let log = std::fs::metadata(dir.path().join(WAL_FILE)).unwrap().len();
    assert_eq!(log, 0, "dropping the store checkpointed and gave the log's space back");
    let store = Arc::new(LocalStore::open(dir.path()).unwrap());
    assert_eq!(store.stats().replayed, 0, "dropping the store checkpointed: nothing left in the log to replay");
    let (s, _due) = ds_inproc::in_process_substrate(store);
    let meta = s.store.read_meta(&StreamHandle::detached(&path)).await.unwrap().unwrap();
    assert_eq!(meta.tail, acked.tail);
    assert_eq!(meta.version, acked.version);
    assert_eq!(meta.touched_at_ms, touched, "pending touches are flushed when the store is dropped");
    let chunks = read_all(&s, &path, &meta.incarnation, meta.tail).await;
    assert_eq!(chunks[0].data, Bytes::from_static(b"acknowledged"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commits_share_syncs_and_failures_stay_isolated() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(LocalStore::open(dir.path()).unwrap());
    let before = store.stats();
    let mut tasks = Vec::new();
    // 64 independent creates and 64 creates of ONE path: the latter conflict
    // (but one) while riding in the same batches as the former.
    for i in 0..128 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let path = if i % 2 == 0 { format!("group/{i}") } else { "group/contended".to_owned() };
            let commit = Commit { ops: vec![Op::PutMeta { meta: new_meta(&path), expect: Expect::Absent }] };
            (i, store.commit(commit).await)
        }));
    }
    let mut contended_wins = 0;
    for task in tasks {
        match task.await.unwrap() {
            (i, Ok(())) if i % 2 == 1 => contended_wins += 1,
            (_, Ok(())) => {}
            (i, Err(StoreError::Conflict)) => {
                assert_eq!(i % 2, 1, "an independent create conflicted")
            }
            (i, Err(e)) => panic!("commit {i} failed: {e}"),
        }
    }
    assert_eq!(contended_wins, 1, "exactly one create of the contended path wins");
    for i in (0..128).step_by(2) {
        assert!(store.read_meta(&StreamHandle::detached(&format!("group/{i}"))).await.unwrap().is_some());
    }
    let after = store.stats();
    assert_eq!(after.commits - before.commits, 128);
    assert!(
        after.syncs - before.syncs < 128,
        "group commit: 128 concurrent commits took {} syncs",
        after.syncs - before.syncs
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_meta_record_is_a_backend_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = redb::Database::create(dir.path().join(DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(redb::TableDefinition::<&str, &[u8]>::new("meta")).unwrap();
            meta.insert("bad/json", &b"\x01{not json"[..]).unwrap();
            meta.insert("bad/format", &b"\x09{}"[..]).unwrap();
            meta.insert("bad/empty", &b""[..]).unwrap();
        }
        txn.commit().unwrap();
    }
    let store = LocalStore::open(dir.path()).unwrap();
    for path in ["bad/json", "bad/format", "bad/empty"] {
        let read = store.read_meta(&StreamHandle::detached(path)).await;
        assert!(matches!(read, Err(StoreError::Corrupt { .. })), "{path}: {read:?}");
        let mut next = new_meta(path);
        next.version = 1;
        let commit = Commit { ops: vec![Op::PutMeta { meta: next, expect: Expect::Version(0) }] };
        assert!(matches!(store.commit(commit).await, Err(StoreError::Corrupt { .. })), "{path}: commit");
    }
    assert!(matches!(store.list_streams(None, 10).await, Err(StoreError::Corrupt { .. })));
    // The store stays usable for healthy records.
    let good = new_meta("good");
    store.commit(Commit { ops: vec![Op::PutMeta { meta: good.clone(), expect: Expect::Absent }] }).await.unwrap();
    assert_eq!(store.read_meta(&StreamHandle::detached("good")).await.unwrap(), Some(good));
}

// ---- kill -9 ----------------------------------------------------------------

const CHILD_DIR_ENV: &str = "DS_STORE_LOCAL_CRASH_CHILD_DIR";
const STREAMS: usize = 8;
/// Acknowledgements the parent waits for before killing the child.
const KILL_AFTER_ACKS: usize = 400;
/// Run time after which the second crash test kills the child: past several
/// checkpoints (one a second under load), so recovery replays only the tail.
const KILL_AFTER_CHECKPOINTS: Duration = Duration::from_millis(2500);

fn payload(stream: usize, seq: u64) -> Bytes {
    Bytes::from(format!("s{stream}-{seq};"))
}

/// The child: appends to `STREAMS` streams concurrently and prints one line
/// per acknowledged commit, until killed (or, if orphaned, for at most 30 s).
fn child_main(dir: &Path) -> ! {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let (s, _due) = local_substrate(dir).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        for i in 0..STREAMS {
            create(&s, &format!("crash/{i}")).await;
        }
        let mut tasks = Vec::new();
        for i in 0..STREAMS {
            let s: Substrate = s.clone();
            tasks.push(tokio::spawn(async move {
                for seq in 0u64.. {
                    if Instant::now() > deadline {
                        break;
                    }
                    let state = ProducerState { epoch: 0, last_seq: seq };
                    let done = append(&s, &format!("crash/{i}"), payload(i, seq), Some(("p", state))).await;
                    println!("ACK {i} {seq} {}", done.position);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    std::process::exit(0)
}

/// Killed early: every acknowledged commit is only in the log (the tables'
/// durable state predates them).
#[test]
fn acked_commits_survive_kill_9() {
    if let Some(dir) = std::env::var_os(CHILD_DIR_ENV) {
        child_main(Path::new(&dir));
    }
    crash_and_check("acked_commits_survive_kill_9", KILL_AFTER_ACKS, Duration::ZERO);
}

/// Killed after checkpoints: the tables hold most commits durably, the log
/// the rest.
#[test]
fn acked_commits_survive_kill_9_after_checkpoints() {
    if let Some(dir) = std::env::var_os(CHILD_DIR_ENV) {
        child_main(Path::new(&dir));
    }
    crash_and_check("acked_commits_survive_kill_9_after_checkpoints", KILL_AFTER_ACKS, KILL_AFTER_CHECKPOINTS);
}

/// Run this test binary's `test` as a child appending to the store, kill it
/// (SIGKILL) once it acknowledged `acks` commits and ran for `min_run`, then
/// reopen the store and check every acknowledged commit.
fn crash_and_check(test: &str, acks: usize, min_run: Duration) {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut acked: Vec<Vec<(u64, u64)>> = vec![Vec::new(); STREAMS];
    let mut count = 0;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let Some(rest) = line.strip_prefix("ACK ") else {
            continue;
        };
        let nums: Vec<u64> = rest.split(' ').map(|n| n.parse().unwrap()).collect();
        acked[nums[0] as usize].push((nums[1], nums[2]));
        count += 1;
        if count >= acks && started.elapsed() >= min_run {
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL: no destructor, flush or shutdown runs
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "the child died of SIGKILL mid-run: {status:?}");
    assert!(count >= acks, "the child acknowledged enough commits before dying");

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let store = Arc::new(LocalStore::open(dir.path()).unwrap());
        assert!(store.stats().replayed > 0, "the log held acknowledged commits at the kill: recovery replayed it");
        let (s, _due) = ds_inproc::in_process_substrate(store);
        for (i, acks) in acked.iter().enumerate() {
            let path = format!("crash/{i}");
            let meta =
                s.store.read_meta(&StreamHandle::detached(&path)).await.unwrap().expect("acknowledged stream exists");
            let chunks = read_all(&s, &path, &meta.incarnation, meta.tail).await;
            assert_tiles(&chunks, meta.tail);
            // The stored bytes are exactly this stream's first `version`
            // appends (acked or not) in order: nothing torn, nothing lost or
            // out of order; chunks start where appends did.
            let mut expected = Vec::new();
            let mut starts = Vec::new();
            for seq in 0..meta.version {
                starts.push(expected.len() as u64);
                expected.extend_from_slice(&payload(i, seq));
            }
            assert_eq!(
                bytes_at(&chunks, 0, meta.tail),
                expected,
                "stream {i} holds its first {} appends",
                meta.version
            );
            for chunk in &chunks {
                assert!(
                    starts.contains(&chunk.start),
                    "stream {i}: chunk at {} starts where an append did",
                    chunk.start
                );
            }
            for &(seq, position) in acks {
                let start = starts.get(seq as usize).expect("an acknowledged append survived");
                assert_eq!(*start, position, "stream {i} append {seq} at its acknowledged position");
            }
            let producer = s.store.read_producer(&StreamHandle::detached(&path), &meta.incarnation, "p").await.unwrap();
            assert_eq!(producer.map(|p| p.last_seq + 1), Some(meta.version).filter(|n| *n > 0));
        }
    });
}
