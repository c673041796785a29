//! Inline processors in the real server binary (`serve --processors-toml`,
//! local store): a schema rejection over HTTP (400 naming the processor,
//! nothing written, the producer's sequence number still free), the
//! inline counter's state and the rejection through the operator API and
//! the `processors` CLI, and `kill -9` with appends in flight: after every
//! restart each stream's reduction is exactly the fold of what the stream
//! holds (an append and its reduction commit together or not at all), and
//! every acknowledged append is there.
#![allow(clippy::unwrap_used)]

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use ds_e2e::server::server_bin;
use ds_e2e::{client, read_all, Server, ServerOpts};
use serde_json::{json, Value};

const CONFIG: &str = r#"
[[processor]]
kind = "json-schema"
slug = "tick-schema"
streams = "inline/*"
schemas.tick = '''{"type":"object","required":["n"],"properties":{"n":{"type":"integer","minimum":0}}}'''

[[processor]]
kind = "counter"
slug = "tick-count"
streams = "inline/*"
inline = true
"#;

async fn start(dir: &std::path::Path, port: Option<u16>) -> Server {
    let opts = ServerOpts {
        data_dir: Some(dir.to_path_buf()),
        extra_args: vec!["--processors-toml".into(), CONFIG.into()],
        port,
        ..ServerOpts::default()
    };
    Server::start(opts).await.unwrap()
}

fn ticks(from: u64, n: u64) -> String {
    let events: Vec<Value> = (from..from + n).map(|i| json!({"type": "tick", "payload": {"n": i}})).collect();
    Value::Array(events).to_string()
}

async fn count_of(server: &Server, stream: &str) -> (u64, u64, u64) {
    let url = format!("{}/v1/processors/tick-count/streams/{stream}", server.base);
    let detail: Value =
        serde_json::from_slice(&client().get(url).send().await.unwrap().bytes().await.unwrap()).unwrap();
    let n = |k: &str| detail[k].as_u64().unwrap_or_else(|| panic!("{k} in {detail}"));
    (detail["state"]["count"].as_u64().unwrap(), n("reducedThrough"), n("tail"))
}

async fn messages(server: &Server, stream: &str) -> Vec<Value> {
    let (body, _) = read_all(&client(), &server.url(stream)).await.unwrap();
    let mut all = Vec::new();
    // Each read answers a JSON array; concatenated reads are `][`-joined.
    let text = String::from_utf8(body).unwrap().replace("][", ",");
    if !text.is_empty() {
        all = serde_json::from_str(&text).unwrap();
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rejection_writes_nothing_and_shows_in_the_operator_api() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start(tmp.path(), None).await;
    let url = server.url("inline/orders");
    let http = client();
    let put = http.put(&url).header("content-type", "application/json").send().await.unwrap();
    assert_eq!(put.status(), 201);
    let post = |body: String, seq: u64| {
        http.post(&url)
            .header("content-type", "application/json")
            .header("producer-id", "p")
            .header("producer-epoch", "0")
            .header("producer-seq", seq.to_string())
            .body(body)
            .send()
    };
    assert_eq!(post(ticks(1, 2), 0).await.unwrap().status(), 200);
    let bad = json!([{"type": "tick", "payload": {"n": 3}}, {"type": "tick", "payload": {"n": -1}}]).to_string();
    let refused = post(bad, 1).await.unwrap();
    assert_eq!(refused.status(), 400);
    let body: Value = serde_json::from_slice(&refused.bytes().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "APPEND_REJECTED", "{body}");
    assert_eq!(body["error"]["processor"], "tick-schema", "{body}");
    assert!(body["error"]["reason"].as_str().unwrap().contains("payload/n"), "{body}");
    assert_eq!(messages(&server, "inline/orders").await.len(), 2, "nothing of the refused append");
    assert_eq!(post(ticks(3, 1), 1).await.unwrap().status(), 200, "seq 1 is still free for the corrected event");
    let (count, through, tail) = count_of(&server, "inline/orders").await;
    assert_eq!((count, through), (3, tail), "the counter folded the three accepted events through the tail");

    let out = Command::new(server_bin())
        .args(["processors", "--url", &server.base, "list"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}{}", String::from_utf8_lossy(&out.stderr));
    let schema_row = table.lines().find(|l| l.starts_with("tick-schema")).unwrap_or_else(|| panic!("{table}"));
    assert!(schema_row.contains("inline (json-schema), 1 rejected, last: event \"tick\""), "{schema_row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill9_never_separates_an_append_from_its_reduction() {
    const STREAMS: u64 = 2;
    const WRITERS: u64 = 8;
    const CYCLES: usize = 5;
    let tmp = tempfile::tempdir().unwrap();
    let mut server = start(tmp.path(), None).await;
    let port = server.base.rsplit(':').next().unwrap().parse::<u16>().unwrap();
    for s in 0..STREAMS {
        let url = server.url(&format!("inline/k{s}"));
        client().put(url).header("content-type", "application/json").send().await.unwrap();
    }
    let acked = Arc::new(AtomicU64::new(0));
    for cycle in 0..CYCLES {
        let base = server.base.clone();
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let (base, acked) = (base.clone(), Arc::clone(&acked));
            writers.push(tokio::spawn(async move {
                let http = client();
                for i in 0u64.. {
                    let url = format!("{base}/v1/stream/inline/k{}", w % STREAMS);
                    let body = ticks(i, 1 + (i + w) % 4);
                    match http.post(url).header("content-type", "application/json").body(body).send().await {
                        Ok(r) if r.status().is_success() => acked.fetch_add(1, SeqCst),
                        _ => return,
                    };
                }
            }));
        }
        let target = acked.load(SeqCst) + 300;
        while acked.load(SeqCst) < target {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        server.kill9().unwrap();
        for w in writers {
            w.await.unwrap();
        }
        server = start(tmp.path(), Some(port)).await;
        for s in 0..STREAMS {
            let stream = format!("inline/k{s}");
            let held = messages(&server, &stream).await.len() as u64;
            let (count, through, tail) = count_of(&server, &stream).await;
            assert_eq!(count, held, "cycle {cycle}, {stream}: the reduction counts exactly what the stream holds");
            assert_eq!(through, tail, "cycle {cycle}, {stream}: folded through the tail");
        }
    }
    let held: u64 = {
        let mut n = 0;
        for s in 0..STREAMS {
            n += messages(&server, &format!("inline/k{s}")).await.len() as u64;
        }
        n
    };
    assert!(held >= acked.load(SeqCst), "every acknowledged append (≥ 1 event each) is there");
}
