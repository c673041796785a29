//! Measures the local store: durable commits/s of 100-byte appends (core loop:
//! lock → read_meta → commit) at concurrency 1 and 64, against the raw
//! `write + fdatasync` floor of the same disk, and read throughput.
//!
//! `cargo run --release -p ds-store-local --example throughput [DIR] [SECS]`
//! (DIR defaults to a temp dir; it must be on the disk you care about).
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ds_core::contract::fixtures::{append, create};
use ds_core::{StreamHandle, StreamStore, Substrate};
use ds_inproc::in_process_substrate;
use ds_store_local::LocalStore;
use rand::Rng;

const APPEND: usize = 100;

fn raw_fsync_floor(dir: &Path, secs: f64) -> f64 {
    let mut file = std::fs::File::create(dir.join("fsync-probe")).unwrap();
    let (start, mut n) = (Instant::now(), 0u64);
    while start.elapsed().as_secs_f64() < secs {
        file.write_all(&[7u8; APPEND]).unwrap();
        file.sync_data().unwrap();
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// `writers` tasks appending 100 bytes in a loop for `secs`; `one_stream`
/// puts them all on the same stream (serialized by its lock).
async fn commits_per_sec(
    store: &Arc<LocalStore>,
    s: &Substrate,
    writers: usize,
    one_stream: bool,
    secs: f64,
) -> (f64, f64) {
    let tag = uuid::Uuid::new_v4();
    for w in 0..writers {
        if w == 0 || !one_stream {
            create(s, &format!("bench/{tag}/{}", if one_stream { 0 } else { w })).await;
        }
    }
    let before = store.stats();
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (s, done) = (s.clone(), Arc::clone(&done));
        let path = format!("bench/{tag}/{}", if one_stream { 0 } else { w });
        tasks.push(tokio::spawn(async move {
            let data = Bytes::from(vec![b'x'; APPEND]);
            while start.elapsed().as_secs_f64() < secs {
                append(&s, &path, data.clone(), None).await;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let after = store.stats();
    let commits = done.load(Ordering::Relaxed) as f64;
    let per_sync = (after.commits - before.commits) as f64 / (after.syncs - before.syncs).max(1) as f64;
    (commits / elapsed, per_sync)
}

/// `readers` tasks reading up to 64 KiB from random positions for `secs`.
async fn reads_per_sec(store: &Arc<LocalStore>, path: &str, readers: usize, secs: f64) -> (f64, f64) {
    let meta = store.read_meta(&StreamHandle::detached(path)).await.unwrap().unwrap();
    let (ops, bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..readers {
        let (store, meta, ops, bytes) = (Arc::clone(store), meta.clone(), Arc::clone(&ops), Arc::clone(&bytes));
        tasks.push(tokio::spawn(async move {
            while start.elapsed().as_secs_f64() < secs {
                let from = rand::thread_rng().gen_range(0..meta.tail);
                let chunks = store
                    .read_chunks(&StreamHandle::detached(&meta.path), &meta.incarnation, from, meta.tail, 64 << 10)
                    .await
                    .unwrap();
                ops.fetch_add(1, Ordering::Relaxed);
                bytes.fetch_add(chunks.iter().map(|c| c.data.len() as u64).sum(), Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    (ops.load(Ordering::Relaxed) as f64 / elapsed, bytes.load(Ordering::Relaxed) as f64 / elapsed / 1e6)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let tmp = tempfile::tempdir().unwrap();
    let dir = args.get(1).map_or_else(|| tmp.path().to_owned(), Into::into);
    let secs: f64 = args.get(2).map_or(3.0, |s| s.parse().unwrap());
    println!("dir {} ({secs} s per phase)", dir.display());

    println!("raw write(100 B) + fdatasync: {:.0}/s", raw_fsync_floor(&dir, secs));
    let store = Arc::new(LocalStore::open(&dir).unwrap());
    let s = in_process_substrate(Arc::clone(&store) as Arc<dyn StreamStore>).0;
    for (writers, one_stream) in [(1, false), (64, false), (64, true)] {
        let (rate, per_sync) = commits_per_sec(&store, &s, writers, one_stream, secs).await;
        let streams = if one_stream { "one stream" } else { "own streams" };
        println!("durable 100 B appends, {writers:>2} writers on {streams}: {rate:.0} commits/s, {per_sync:.1} commits per fsync");
    }

    // A 4 MB stream of 100-byte chunks for the read phases.
    let path = format!("bench/read/{}", uuid::Uuid::new_v4());
    create(&s, &path).await;
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (s, path) = (s.clone(), path.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..640 {
                append(&s, &path, Bytes::from(vec![b'r'; APPEND]), None).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for readers in [1, 16] {
        let (ops, mb) = reads_per_sec(&store, &path, readers, secs).await;
        println!("read_chunks(64 KiB budget), {readers:>2} readers: {ops:.0} reads/s, {mb:.0} MB/s");
    }
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_secs_f64(secs) {
        store.read_meta(&StreamHandle::detached(&path)).await.unwrap();
        n += 1;
    }
    println!("read_meta, 1 reader: {:.0}/s", n as f64 / start.elapsed().as_secs_f64());
}
