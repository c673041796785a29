//! Shows the local store's data file plateauing under a steady append +
//! trim load: 8 writers append 1 KiB each to one stream; after each round a
//! trim keeps only the newest `KEEP` bytes, and the trimmed chunk rows are
//! deleted at the next checkpoint, so redb reuses their pages.
//!
//! `cargo run --release -p ds-store-local --example retention_plateau [DIR] [MiB]`
//! (DIR defaults to a temp dir; MiB, the total appended, to 256.) Prints
//! the file size after every 16 MiB appended; with the trims off
//! (`NO_TRIM=1`) the file grows with everything appended.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ds_core::contract::fixtures::{append_request, create_request};
use ds_core::{ServiceConfig, StreamService, StreamStore};
use ds_store_local::{LocalStore, DB_FILE};

const APPEND: usize = 1024;
const WRITERS: usize = 8;
const KEEP: u64 = 4 << 20;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let temp = tempfile::tempdir().unwrap();
    let dir = args.get(1).map_or_else(|| temp.path().to_owned(), std::path::PathBuf::from);
    let total_mib: u64 = args.get(2).map_or(256, |s| s.parse().unwrap());
    let trim = std::env::var_os("NO_TRIM").is_none();
    let store: Arc<dyn StreamStore> = Arc::new(LocalStore::open(&dir).unwrap());
    let (sub, _) = ds_inproc::in_process_substrate(store);
    let svc = StreamService::new(sub, ServiceConfig { registry: false, ..ServiceConfig::default() });
    svc.create(create_request("plateau")).await.unwrap();
    let file = dir.join(DB_FILE);
    let started = Instant::now();
    let (mut appended, mut next_report) = (0u64, 16u64 << 20);
    println!("appended_mib,file_mib,retained_mib,secs");
    while appended < total_mib << 20 {
        let mut round = Vec::with_capacity(WRITERS);
        for _ in 0..WRITERS {
            let svc = svc.clone();
            round.push(tokio::spawn(async move {
                for _ in 0..16 {
                    svc.append(append_request("plateau", Bytes::from(vec![7u8; APPEND]))).await.unwrap();
                }
            }));
        }
        for w in round {
            w.await.unwrap();
        }
        appended += (WRITERS * 16 * APPEND) as u64;
        if trim {
            let tail = svc.head("plateau").await.unwrap().tail;
            svc.trim("plateau", tail.saturating_sub(KEEP)).await.unwrap();
        }
        if appended >= next_report {
            next_report += 16 << 20;
            // Let a checkpoint apply the reclaims before measuring.
            tokio::time::sleep(Duration::from_millis(1100)).await;
            let meta = svc.head("plateau").await.unwrap();
            let size = std::fs::metadata(&file).unwrap().len();
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            println!(
                "{:.0},{:.1},{:.1},{:.1}",
                mib(appended),
                mib(size),
                mib(meta.tail - meta.retained_from),
                started.elapsed().as_secs_f64()
            );
        }
    }
}
