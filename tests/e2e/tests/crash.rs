//! Crash recovery of the local store with idempotent producers (§5.2.1).
//!
//! 16 producers (4 streams x 4 producers, epoch 0, seq 0,1,2,... one batch
//! per POST, one batch in flight each) append checksummed records while the
//! server is `kill -9`ed five times mid-run (with requests in flight) and
//! restarted on the same data dir; producers retry unacknowledged batches with
//! the same (epoch, seq). A last kill abandons the in-flight batches for
//! good. Then every stream must hold, per producer, seq 0..n exactly once, in
//! order, byte-exact, where n covers every acknowledged batch and at most the
//! one abandoned batch beyond it.
//!
//! Meanwhile one reader per stream reads it whole again and again, through
//! every kill and restart: each read must parse into whole records (no
//! partial commit visible) and extend the previous read (nothing once
//! visible disappears).
//!
//! `DS_CRASH_TRIALS` (kills before the final one, default 5) and
//! `DS_CRASH_PRODUCERS` (a multiple of 4, default 16) scale it up; `make
//! test-long` runs 20 trials under 64 producers.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use ds_e2e::{client, header, read_all, record, Server, ServerOpts};

const PER_STREAM: u32 = 4;
/// Acknowledged batches between (re)start and the next kill.
const ACKS_PER_CYCLE: u64 = 300;
/// Requests that must be in flight at the moment of a kill.
const MIN_IN_FLIGHT: usize = 4;

fn env_knob(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[derive(Default)]
struct Shared {
    /// Current server base URL (changes on restart: new port).
    base: RwLock<String>,
    acked: AtomicU64,
    in_flight: AtomicUsize,
    duplicates: AtomicU64,
    retries: AtomicU64,
    /// Final kill: abandon in-flight batches instead of retrying.
    abandon: AtomicBool,
    /// Whole-stream reads checked while producers and kills went on.
    reads: AtomicU64,
    failures: Mutex<Vec<String>>,
}

impl Shared {
    fn fail(&self, msg: String) {
        self.failures.lock().unwrap().push(msg);
    }
    fn failed(&self) -> bool {
        !self.failures.lock().unwrap().is_empty()
    }
}

/// What one producer knows when it stops.
#[derive(Debug, Clone, Copy)]
struct Outcome {
    producer: u32,
    stream: u32,
    /// Batches 0..acked were acknowledged (200, or 204 duplicate on retry).
    acked: u64,
    /// The batch sent but never acknowledged (abandoned at the final kill).
    unacked: Option<u64>,
}

fn stream_path(stream: u32) -> String {
    format!("crash/s{stream}")
}

async fn producer(shared: Arc<Shared>, producer: u32, stream: u32) -> Outcome {
    let http = client();
    let id = format!("producer-{producer}");
    let mut out = Outcome { producer, stream, acked: 0, unacked: None };
    loop {
        if shared.abandon.load(SeqCst) || shared.failed() {
            return out;
        }
        let seq = out.acked;
        let body = record::encode(producer, seq);
        let started = Instant::now();
        let mut attempt = 0u32;
        loop {
            let url = format!("{}/v1/stream/{}", shared.base.read().unwrap(), stream_path(stream));
            shared.in_flight.fetch_add(1, SeqCst);
            let sent = http
                .post(&url)
                .header("content-type", "application/octet-stream")
                .header("producer-id", &id)
                .header("producer-epoch", "0")
                .header("producer-seq", seq.to_string())
                .body(body.clone())
                .send()
                .await;
            shared.in_flight.fetch_sub(1, SeqCst);
            let resp = match sent {
                Ok(resp) => resp,
                Err(e) => {
                    if shared.abandon.load(SeqCst) {
                        out.unacked = Some(seq);
                        return out;
                    }
                    if started.elapsed() > Duration::from_secs(60) {
                        shared.fail(format!("{id} seq {seq}: no answer for 60s, last error {e}"));
                        return out;
                    }
                    // The server is down (killed): retry the same (epoch, seq).
                    attempt += 1;
                    shared.retries.fetch_add(1, SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let status = resp.status().as_u16();
            let (epoch_h, seq_h) = (header(&resp, "producer-epoch"), header(&resp, "producer-seq"));
            let ok_headers = epoch_h.as_deref() == Some("0") && seq_h == Some(seq.to_string());
            match status {
                200 | 204 if !ok_headers => shared.fail(format!(
                    "{id} seq {seq}: {status} with Producer-Epoch {epoch_h:?}, Producer-Seq {seq_h:?} (want 0, {seq})"
                )),
                200 => {}
                204 if attempt > 0 => {
                    shared.duplicates.fetch_add(1, SeqCst);
                }
                204 => shared.fail(format!("{id} seq {seq}: 204 duplicate on the first attempt (never sent before)")),
                _ => {
                    let text = resp.text().await.unwrap_or_default();
                    shared.fail(format!("{id} seq {seq} (attempt {attempt}): status {status}, body {text:?}"));
                }
            }
            if shared.failed() {
                return out;
            }
            out.acked += 1;
            shared.acked.fetch_add(1, SeqCst);
            break;
        }
    }
}

/// Wait until `acked >= target` and enough requests are in flight.
async fn wait_for(shared: &Shared, target: u64, in_flight: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while shared.acked.load(SeqCst) < target || shared.in_flight.load(SeqCst) < in_flight {
        assert!(!shared.failed(), "producer failure before {what}: {:?}", shared.failures.lock().unwrap());
        assert!(
            Instant::now() < deadline,
            "timed out before {what}: {} acked (want {target}), {} in flight",
            shared.acked.load(SeqCst),
            shared.in_flight.load(SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn restart(shared: &Shared, dir: &std::path::Path) -> Server {
    let server = Server::start(ServerOpts { data_dir: Some(dir.to_path_buf()), ..ServerOpts::default() })
        .await
        .expect("restarting the server on the same data dir");
    *shared.base.write().unwrap() = server.base.clone();
    server
}

/// Read `stream` whole until `abandon`: every read is whole records and
/// extends the previous one. Reads failing because the server is down are
/// retried.
async fn reader(shared: Arc<Shared>, stream: u32) {
    let http = client();
    let mut seen: Vec<u8> = Vec::new();
    while !shared.abandon.load(SeqCst) && !shared.failed() {
        let url = format!("{}/v1/stream/{}", shared.base.read().unwrap(), stream_path(stream));
        let Ok((bytes, _)) = read_all(&http, &url).await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        if let Err(e) = record::parse(&bytes) {
            shared.fail(format!("read of stream {stream} during the run shows a partial commit: {e}"));
        } else if !bytes.starts_with(&seen) {
            shared.fail(format!(
                "read of stream {stream} ({} bytes) does not extend an earlier read ({} bytes): data vanished",
                bytes.len(),
                seen.len()
            ));
        }
        seen = bytes;
        shared.reads.fetch_add(1, SeqCst);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill9_mid_run_loses_and_duplicates_nothing() {
    let trials = env_knob("DS_CRASH_TRIALS", 5) as usize;
    let producers = u32::try_from(env_knob("DS_CRASH_PRODUCERS", 16)).unwrap();
    assert!(producers >= PER_STREAM && producers % PER_STREAM == 0, "DS_CRASH_PRODUCERS must be a multiple of 4");
    let streams = producers / PER_STREAM;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let shared = Arc::new(Shared::default());
    let mut server = restart(&shared, &dir).await;
    let http = client();
    for s in 0..streams {
        let resp = http
            .put(server.url(&stream_path(s)))
            .header("content-type", "application/octet-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 201, "PUT {}", stream_path(s));
    }

    let mut tasks = Vec::new();
    for s in 0..streams {
        for i in 0..PER_STREAM {
            tasks.push(tokio::spawn(producer(shared.clone(), s * PER_STREAM + i, s)));
        }
    }
    let readers: Vec<_> = (0..streams).map(|s| tokio::spawn(reader(shared.clone(), s))).collect();

    let mut target = 0;
    for cycle in 1..=trials {
        target += ACKS_PER_CYCLE;
        wait_for(&shared, target, MIN_IN_FLIGHT, &format!("kill {cycle}")).await;
        let (acked, in_flight) = (shared.acked.load(SeqCst), shared.in_flight.load(SeqCst));
        server.kill9().unwrap();
        eprintln!("kill -9 #{cycle}: {acked} acked, {in_flight} in flight");
        server = restart(&shared, &dir).await;
        target = acked;
    }
    // Recovery progress (the retries of the last kill included), then the final kill.
    wait_for(&shared, target + ACKS_PER_CYCLE / 2, MIN_IN_FLIGHT, "final kill").await;
    let in_flight = shared.in_flight.load(SeqCst);
    // Killed first, then told to abandon. The other order stops new sends
    // before the kill, and the batches in flight could all be acknowledged
    // (one group commit) before it lands: seen once in CI, 16 in flight and
    // none abandoned. A producer that fails before it sees the flag retries
    // once against the dead server and abandons then.
    server.kill9().unwrap();
    shared.abandon.store(true, SeqCst);
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.unwrap());
    }
    for r in readers {
        r.await.unwrap();
    }
    let failures = shared.failures.lock().unwrap().clone();
    assert!(failures.is_empty(), "producer failures:\n{}\nserver log:\n{}", failures.join("\n"), server.log_tail());
    let abandoned = outcomes.iter().filter(|o| o.unacked.is_some()).count();
    eprintln!(
        "final kill -9: {} acked, {in_flight} in flight, {abandoned} abandoned; {} retries, {} answered 204 duplicate; \
         {} whole-stream reads checked during the run",
        shared.acked.load(SeqCst),
        shared.retries.load(SeqCst),
        shared.duplicates.load(SeqCst),
        shared.reads.load(SeqCst)
    );
    assert!(shared.reads.load(SeqCst) > 0, "no read was checked during the run");
    assert!(abandoned > 0, "the final kill should leave some batches unacknowledged");

    let mut server = restart(&shared, &dir).await;
    let mut bytes_checked = 0;
    for s in 0..streams {
        let url = server.url(&stream_path(s));
        let (bytes, next) = read_all(&http, &url)
            .await
            .unwrap_or_else(|e| panic!("{e}\nserver log after recovery:\n{}", server.log_tail()));
        let records = record::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", stream_path(s)));
        bytes_checked += bytes.len();
        check_stream(s, &records, &outcomes);
        let head = http.head(&url).send().await.unwrap();
        assert_eq!(head.status().as_u16(), 200);
        assert_eq!(header(&head, "stream-next-offset"), Some(next), "HEAD tail = end of the full read");
    }
    let acked_total: u64 = outcomes.iter().map(|o| o.acked).sum();
    eprintln!(
        "crash campaign: {} kill -9 trials (and a final one) under {producers} idempotent producers; {acked_total} \
         acknowledged batches, 0 lost, 0 duplicated, 0 torn; {bytes_checked} bytes verified after recovery",
        trials
    );

    // The recovered server still takes new batches from the same producers, and
    // still deduplicates the last acknowledged one.
    for o in &outcomes {
        let url = server.url(&stream_path(o.stream));
        let id = format!("producer-{}", o.producer);
        let present = present_count(&http, &url, o.producer).await;
        for (seq, want) in [(present - 1, 204), (present, 200)] {
            let resp = http
                .post(&url)
                .header("content-type", "application/octet-stream")
                .header("producer-id", &id)
                .header("producer-epoch", "0")
                .header("producer-seq", seq.to_string())
                .body(record::encode(o.producer, seq))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), want, "{id} seq {seq} after recovery");
        }
    }

    // A graceful stop (SIGTERM) exits cleanly.
    let status = server.terminate(Duration::from_secs(15)).await.unwrap();
    assert!(matches!(status, Some(s) if s.success()), "SIGTERM: exit {status:?}; log:\n{}", server.log_tail());
}

async fn present_count(http: &reqwest::Client, url: &str, producer: u32) -> u64 {
    let (bytes, _) = read_all(http, url).await.unwrap();
    record::parse(&bytes).unwrap().iter().filter(|r| r.producer == producer).count() as u64
}

/// Per producer: seq 0, 1, 2, ... exactly once and in order; every
/// acknowledged batch present; beyond that at most the abandoned one.
fn check_stream(stream: u32, records: &[record::Record], outcomes: &[Outcome]) {
    let mut next: HashMap<u32, u64> = HashMap::new();
    for r in records {
        let owner = outcomes.iter().find(|o| o.producer == r.producer);
        assert!(
            owner.is_some_and(|o| o.stream == stream),
            "stream {stream}: record of producer {} (not one of its producers) at byte {}",
            r.producer,
            r.at
        );
        let want = next.entry(r.producer).or_insert(0);
        assert_eq!(
            r.seq, *want,
            "stream {stream}, producer {}: seq {} at byte {} but expected seq {} (duplicate, gap or reorder)",
            r.producer, r.seq, r.at, *want
        );
        *want += 1;
    }
    for o in outcomes.iter().filter(|o| o.stream == stream) {
        let present = next.get(&o.producer).copied().unwrap_or(0);
        assert!(
            present >= o.acked,
            "stream {stream}, producer {}: {} acknowledged batches but only seq 0..{present} present (lost acked data)",
            o.producer,
            o.acked
        );
        let allowed = o.acked + u64::from(o.unacked == Some(o.acked));
        assert!(
            present <= allowed,
            "stream {stream}, producer {}: {present} batches present, but only {} acknowledged and unacked {:?}",
            o.producer,
            o.acked,
            o.unacked
        );
    }
}
