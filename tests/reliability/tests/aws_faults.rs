//! AWS faults: two `durable-streams serve --store aws` processes share one
//! emulator (a private one: its fault rules are global) while a fifth of all
//! DynamoDB and S3 calls fail (throttled, 500 before or after applying, slow
//! S3 answers). Idempotent producers append through either server at random
//! and retry anything unacknowledged with the same sequence number. Then:
//! every acknowledged append present once and in order, no read during the
//! run showed a partial commit, and after the sweeper no S3 object is left
//! that no chunk item points at (and none that one points at is missing).
//!
//! `DS_AWS_FAULT_APPENDS` sets the appends per producer (default 12).
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use ds_e2e::{client, header, read_all, record, Emulator, Server, ServerOpts, Store};
use rand::Rng;

const PRODUCERS: u32 = 8;
const STREAMS: u32 = 2;

fn stream_path(s: u32) -> String {
    format!("faults/s{s}")
}

#[derive(Default)]
struct Shared {
    bases: Vec<String>,
    acked: AtomicU64,
    retries: AtomicU64,
    duplicates: AtomicU64,
    reads: AtomicU64,
    statuses: Mutex<BTreeMap<u16, u64>>,
    failures: Mutex<Vec<String>>,
    done: AtomicBool,
}

impl Shared {
    fn base(&self) -> &str {
        &self.bases[rand::thread_rng().gen_range(0..self.bases.len())]
    }
    fn fail(&self, msg: String) {
        self.failures.lock().unwrap().push(msg);
    }
    fn count(&self, status: u16) {
        *self.statuses.lock().unwrap().entry(status).or_default() += 1;
    }
}

/// Append batches `0..n` as producer `p`, each retried (same seq, either
/// server) until acknowledged.
async fn producer(shared: Arc<Shared>, p: u32, n: u64) {
    let http = client();
    for seq in 0..n {
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            let url = format!("{}/v1/stream/{}", shared.base(), stream_path(p % STREAMS));
            let sent = http
                .post(&url)
                .header("content-type", "application/octet-stream")
                .header("producer-id", format!("p{p}"))
                .header("producer-epoch", "0")
                .header("producer-seq", seq.to_string())
                .body(record::encode(p, seq))
                .send()
                .await;
            let status = sent.as_ref().map_or(0, |r| r.status().as_u16());
            shared.count(status);
            match (status, sent) {
                (200, Ok(r)) | (204, Ok(r)) if header(&r, "producer-seq") == Some(seq.to_string()) => {
                    if status == 204 {
                        if attempt == 0 {
                            shared.fail(format!("p{p} seq {seq}: 204 duplicate on the first attempt"));
                        }
                        shared.duplicates.fetch_add(1, SeqCst);
                    }
                    shared.acked.fetch_add(1, SeqCst);
                    break;
                }
                (s, _) if s == 0 || s >= 500 => {
                    attempt += 1;
                    shared.retries.fetch_add(1, SeqCst);
                    if started.elapsed() > Duration::from_secs(120) {
                        shared.fail(format!("p{p} seq {seq}: not acknowledged within 120 s"));
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20 * attempt.min(10))).await;
                }
                (s, r) => {
                    let body = match r {
                        Ok(r) => r.text().await.unwrap_or_default(),
                        Err(e) => e.to_string(),
                    };
                    shared.fail(format!("p{p} seq {seq} attempt {attempt}: {s} {body}"));
                    return;
                }
            }
        }
    }
}

/// Read a stream whole, again and again: whole records only, each read
/// extending the last.
async fn reader(shared: Arc<Shared>, s: u32) {
    let http = client();
    let mut seen = Vec::new();
    while !shared.done.load(SeqCst) {
        let url = format!("{}/v1/stream/{}", shared.base(), stream_path(s));
        let Ok((bytes, _)) = read_all(&http, &url).await else {
            continue; // a faulted read answers 5xx; correctness is what is checked here
        };
        if let Err(e) = record::parse(&bytes) {
            shared.fail(format!("read of stream {s} shows a partial commit: {e}"));
        } else if !bytes.starts_with(&seen) {
            shared.fail(format!("read of stream {s} does not extend an earlier read: data vanished"));
        }
        seen = bytes;
        shared.reads.fetch_add(1, SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_under_aws_faults_lose_and_duplicate_nothing() {
    let Some(mut emulator) = Emulator::start_or_skip("AWS fault test") else { return };
    // Chunks over 512 bytes go to S3, so S3 faults hit appends too.
    emulator.env.push(("DS_AWS_INLINE_THRESHOLD".into(), "512".into()));
    let appends: u64 = std::env::var("DS_AWS_FAULT_APPENDS").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    let opts = ServerOpts { store: Store::Aws, env: emulator.env.clone(), ..ServerOpts::default() };
    let servers = [Server::start(opts.clone()).await.unwrap(), Server::start(opts).await.unwrap()];
    let http = client();
    for s in 0..STREAMS {
        let resp = http
            .put(servers[0].url(&stream_path(s)))
            .header("content-type", "application/octet-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 201);
    }

    let rules = serde_json::json!({"rules": [
        {"service": "dynamodb", "fault": ["throttle", "error", "apply_then_error"], "rate": 0.2, "seed": 1},
        {"service": "s3", "fault": ["throttle", "error", "apply_then_error", "slow"], "rate": 0.2,
         "delay_ms": 300, "seed": 2},
    ]});
    emulator.faults(reqwest::Method::POST, Some(rules)).await;
    let shared = Arc::new(Shared { bases: servers.iter().map(|s| s.base.clone()).collect(), ..Shared::default() });
    let started = Instant::now();
    let readers: Vec<_> = (0..STREAMS).map(|s| tokio::spawn(reader(shared.clone(), s))).collect();
    let producers: Vec<_> = (0..PRODUCERS).map(|p| tokio::spawn(producer(shared.clone(), p, appends))).collect();
    for p in producers {
        p.await.unwrap();
    }
    shared.done.store(true, SeqCst);
    for r in readers {
        r.await.unwrap();
    }
    let injected = emulator.faults(reqwest::Method::DELETE, None).await;
    let failures = shared.failures.lock().unwrap().clone();
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Every acknowledged append once, in order, byte-exact.
    for s in 0..STREAMS {
        let (bytes, _) = read_all(&http, &servers[1].url(&stream_path(s))).await.unwrap();
        let records = record::parse(&bytes).unwrap_or_else(|e| panic!("stream {s}: {e}"));
        let mut next: BTreeMap<u32, u64> = BTreeMap::new();
        for r in &records {
            assert_eq!(r.producer % STREAMS, s, "record of producer {} in stream {s}", r.producer);
            let want = next.entry(r.producer).or_default();
            assert_eq!(r.seq, *want, "stream {s} producer {}: duplicate, gap or reorder at byte {}", r.producer, r.at);
            *want += 1;
        }
        for p in (0..PRODUCERS).filter(|p| p % STREAMS == s) {
            assert_eq!(next.get(&p).copied().unwrap_or(0), appends, "producer {p}: acknowledged appends lost");
        }
    }

    let (swept, unreferenced, dangling, objects) = sweep_and_audit(&emulator).await;
    eprintln!(
        "AWS faults: {} appends acknowledged through 2 servers in {:.1}s, {} retries, {} answered 204 duplicate \
         on retry, {} whole-stream reads checked; statuses {:?}; faults injected {}: {}; sweeper removed {swept} \
         objects, {objects} left, {unreferenced} unreferenced, {dangling} missing",
        shared.acked.load(SeqCst),
        started.elapsed().as_secs_f64(),
        shared.retries.load(SeqCst),
        shared.duplicates.load(SeqCst),
        shared.reads.load(SeqCst),
        shared.statuses.lock().unwrap(),
        injected["total"],
        injected["injected"],
    );
    for server in &servers {
        for line in server.log().lines().filter(|l| l.contains("storage failure")) {
            eprintln!("server log: {line}");
        }
    }
    assert!(injected["total"].as_u64().unwrap() > 0, "no fault was injected");
    assert_eq!(unreferenced, 0, "S3 objects no chunk item points at, after the sweeper");
    assert_eq!(dangling, 0, "chunk items point at missing S3 objects (acknowledged data lost)");
    for mut server in servers {
        server.assert_answers().await;
    }
}

/// Deterministic cases of the unknown outcome: an S3 PUT stored and then
/// answered 500 (the SDK's retry found the object there: was a 500 "object
/// key collision"), and a TransactWriteItems applied and then answered 500
/// (retried with the same ClientRequestToken: applied once), also when the
/// retries that follow are throttled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_lost_after_applying_are_neither_errors_nor_duplicates() {
    let Some(mut emulator) = Emulator::start_or_skip("AWS fault test") else { return };
    // Chunks over 512 bytes go to S3, so S3 faults hit appends too.
    emulator.env.push(("DS_AWS_INLINE_THRESHOLD".into(), "512".into()));
    let opts = ServerOpts { store: Store::Aws, env: emulator.env.clone(), ..ServerOpts::default() };
    let mut server = Server::start(opts).await.unwrap();
    let http = client();
    let url = server.url("lost/answers");
    let resp = http.put(&url).header("content-type", "application/octet-stream").send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let big = vec![b'b'; 2048]; // above the 512-byte inline threshold: goes to S3
    let lost = |service: &str, operation: &str| serde_json::json!({"service": service, "operation": operation, "fault": "apply_then_error", "count": 1});
    // The third case once hid the lost answer: the SDK retried the 500 by
    // itself, met two throttles and reported only "throttled", so the commit
    // was taken as not applied and appended a second time.
    let throttled = serde_json::json!({"service": "dynamodb", "operation": "TransactWriteItems",
        "fault": "throttle", "count": 2});
    let cases = [
        ("PutObject applied, then 500", vec![lost("s3", "PutObject")], 1, big.clone()),
        ("TransactWriteItems applied, then 500", vec![lost("dynamodb", "TransactWriteItems")], 1, b"small".to_vec()),
        (
            "TransactWriteItems applied, then 500, then throttled twice",
            vec![lost("dynamodb", "TransactWriteItems"), throttled],
            3,
            b"after".to_vec(),
        ),
    ];
    for (case, rules, faults, body) in &cases {
        emulator.faults(reqwest::Method::POST, Some(serde_json::json!({ "rules": rules }))).await;
        let resp =
            http.post(&url).header("content-type", "application/octet-stream").body(body.clone()).send().await.unwrap();
        let status = resp.status().as_u16();
        assert_eq!(status, 204, "{case}: {}", resp.text().await.unwrap_or_default());
        let state = emulator.faults(reqwest::Method::DELETE, None).await;
        assert_eq!(state["total"], *faults, "{case}: faults injected: {state}");
    }
    let (bytes, _) = read_all(&http, &url).await.unwrap();
    assert_eq!(bytes, [big, b"small".to_vec(), b"after".to_vec()].concat(), "each append exactly once");
    server.assert_answers().await;
}

/// Run the sweeper (no grace period) over both streams, then compare the
/// bucket with the object pointers of the chunk items: (objects removed,
/// unreferenced objects, pointers to missing objects, objects left).
async fn sweep_and_audit(emulator: &Emulator) -> (usize, usize, usize, usize) {
    let table = emulator.var("DS_AWS_TABLE").unwrap_or_else(|| "durable-streams".into());
    let bucket = emulator.var("DS_AWS_BUCKET").unwrap_or_else(|| "durable-streams-chunks".into());
    // This test binary holds only this test: the process environment is ours.
    for (k, v) in &emulator.env {
        std::env::set_var(k, v);
    }
    let aws = ds_store_aws::AwsSubstrate::from_env().await.unwrap();
    let now =
        i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap();
    let mut swept = 0;
    for s in 0..STREAMS {
        swept += aws.sweep(&stream_path(s), 0, now + 1_000).await.unwrap().objects_deleted;
    }
    let conf = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
    let ddb = aws_sdk_dynamodb::Client::new(&conf);
    let s3 = aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(&conf).force_path_style(true).build());
    let mut referenced = HashSet::new();
    for s in 0..STREAMS {
        let mut start = None;
        loop {
            let page = ddb
                .query()
                .table_name(&table)
                .consistent_read(true)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", AttributeValue::S(ds_store_aws::schema::stream_pk(&stream_path(s))))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .unwrap();
            for item in page.items() {
                if let Some(AttributeValue::S(key)) = item.get(ds_store_aws::schema::chunk_attr::OBJECT) {
                    referenced.insert(key.clone());
                }
            }
            match page.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => break,
            }
        }
    }
    let mut objects = HashSet::new();
    let mut token = None;
    loop {
        let page = s3.list_objects_v2().bucket(&bucket).set_continuation_token(token.take()).send().await.unwrap();
        objects.extend(page.contents().iter().filter_map(|o| o.key().map(str::to_owned)));
        match page.next_continuation_token() {
            Some(t) => token = Some(t.to_owned()),
            None => break,
        }
    }
    let unreferenced = objects.difference(&referenced).count();
    let dangling = referenced.difference(&objects).count();
    (swept, unreferenced, dangling, objects.len())
}
