//! Processors in the real server binary (`serve --processors FILE`, local
//! store): appends through HTTP while the server is `kill -9`ed twice and
//! restarted on the same data; the outbox stream must then hold every
//! order exactly once (none duplicated, none skipped) and the counters must
//! be right. The `processors` CLI lists lag 0, and a control with a stale
//! revision fails with 409 and changes nothing. A bad configuration stops
//! the server at start-up with a message naming the field.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use ds_e2e::server::server_bin;
use ds_e2e::{client, Server, ServerOpts};
use serde_json::{json, Value};

const STREAMS: usize = 3;
const PER_STREAM: u64 = 120;
/// Total acknowledged appends at which the server is killed.
const KILLS: [u64; 2] = [90, 220];

const CONFIG: &str = r#"
[host]
lag_log_interval = "1s"

[[processor]]
kind = "outbox"
slug = "order-feed"
streams = "orders/*"
target = "feed"
create_target = true
consumes = ["order/placed"]
template = { type = "feed/order", payload = { id = "$/payload/id", from = "$/stream" } }

[[processor]]
kind = "counter"
slug = "by-status"
streams = "orders/*"
consumes = ["order/placed"]
group_by = "/payload/status"
"#;

fn opts(dir: &Path, config: &Path) -> ServerOpts {
    ServerOpts {
        data_dir: Some(dir.to_path_buf()),
        extra_args: vec!["--processors".into(), config.display().to_string()],
        ..ServerOpts::default()
    }
}

/// One idempotent producer per stream: seq n carries order `s-n`; an
/// unanswered append is retried with the same seq until answered.
async fn writer(base: Arc<RwLock<String>>, acked: Arc<AtomicU64>, stream: usize) {
    let http = client();
    for seq in 0..PER_STREAM {
        let status = ["new", "paid", "shipped"][seq as usize % 3];
        let body =
            json!([{ "type": "order/placed", "payload": { "id": format!("{stream}-{seq}"), "status": status } }]);
        let started = Instant::now();
        loop {
            let url = format!("{}/v1/stream/orders/{stream}", base.read().unwrap());
            let sent = http
                .post(&url)
                .header("content-type", "application/json")
                .header("producer-id", format!("writer-{stream}"))
                .header("producer-epoch", "0")
                .header("producer-seq", seq.to_string())
                .body(body.to_string())
                .send()
                .await;
            match sent {
                Ok(r) if r.status().is_success() => break,
                Ok(r) => panic!("orders/{stream} seq {seq}: {}", r.status()),
                Err(_) => {
                    assert!(
                        started.elapsed() < Duration::from_secs(60),
                        "orders/{stream} seq {seq}: no answer for 60 s"
                    );
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        acked.fetch_add(1, SeqCst);
    }
}

async fn get_json(url: &str) -> Value {
    let resp = client().get(url).send().await.unwrap();
    assert_eq!(resp.status(), 200, "GET {url}");
    serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap()
}

/// Waits until every (stream, processor) pair is listed with lag 0.
async fn wait_caught_up(server: &Server, pairs: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = get_json(&format!("{}/v1/processors", server.base)).await["processors"].as_array().cloned().unwrap();
        if list.len() == pairs && list.iter().all(|p| p["lag"] == 0) {
            return list;
        }
        assert!(Instant::now() < deadline, "processors did not catch up: {list:#?}\nlog:\n{}", server.log_tail());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn cli(args: &[&str]) -> Output {
    Command::new(server_bin()).arg("processors").args(args).stdin(Stdio::null()).output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill9_mid_stream_neither_duplicates_nor_skips_an_outbox_event() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, config) = (tmp.path().join("data"), tmp.path().join("processors.toml"));
    std::fs::write(&config, CONFIG).unwrap();
    let mut server = Server::start(opts(&dir, &config)).await.unwrap();
    let http = client();
    for s in 0..STREAMS {
        let put = http.put(server.url(&format!("orders/{s}"))).header("content-type", "application/json").send().await;
        assert_eq!(put.unwrap().status(), 201);
    }
    let base = Arc::new(RwLock::new(server.base.clone()));
    let acked = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> =
        (0..STREAMS).map(|s| tokio::spawn(writer(Arc::clone(&base), Arc::clone(&acked), s))).collect();
    for at in KILLS {
        while acked.load(SeqCst) < at {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let forwarded = client().get(format!("{}?offset=-1", server.url("feed"))).send().await;
        let forwarded = match forwarded {
            Ok(r) => serde_json::from_slice::<Vec<Value>>(&r.bytes().await.unwrap_or_default()).map_or(0, |v| v.len()),
            Err(_) => 0,
        };
        server.kill9().unwrap();
        eprintln!("kill -9 at {} acknowledged appends ({forwarded} forwarded just before)", acked.load(SeqCst));
        server = Server::start(opts(&dir, &config)).await.unwrap();
        *base.write().unwrap() = server.base.clone();
    }
    for w in writers {
        w.await.unwrap();
    }
    let list = wait_caught_up(&server, 2 * STREAMS).await;
    assert!(list.iter().all(|p| p["acknowledgedThrough"] == p["tail"]), "{list:#?}");

    // Every order of every source stream reached the feed exactly once.
    let mut want: Vec<String> = Vec::new();
    for s in 0..STREAMS {
        let events = get_json(&format!("{}?offset=-1", server.url(&format!("orders/{s}")))).await;
        want.extend(events.as_array().unwrap().iter().map(|e| e["payload"]["id"].as_str().unwrap().to_owned()));
    }
    assert_eq!(want.len(), STREAMS * PER_STREAM as usize, "the producers appended each order once");
    let feed = get_json(&format!("{}?offset=-1", server.url("feed"))).await;
    let mut got: Vec<String> =
        feed.as_array().unwrap().iter().map(|m| m["payload"]["id"].as_str().unwrap().to_owned()).collect();
    let mut seen = BTreeMap::new();
    for id in &got {
        *seen.entry(id.clone()).or_insert(0) += 1;
    }
    let doubled: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "forwarded more than once: {doubled:?}");
    got.sort();
    want.sort();
    assert_eq!(got, want, "every order forwarded, none skipped");
    for s in 0..STREAMS {
        let shown = get_json(&format!("{}/v1/processors/by-status/streams/orders/{s}", server.base)).await;
        let third = PER_STREAM / 3;
        assert_eq!(
            shown["state"],
            json!({ "count": PER_STREAM, "by": { "new": third, "paid": third, "shipped": third }, "other": 0 })
        );
    }

    // The CLI: lag 0 everywhere; a stale revision is refused and changes nothing.
    let out = cli(&["list", "--url", &server.base]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "list: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(table.lines().count(), 1 + 2 * STREAMS, "{table}");
    for row in table.lines().skip(1) {
        assert_eq!(row.split_whitespace().nth(5), Some("0"), "LAG column: {row}");
    }
    let shown = cli(&["show", "order-feed", "orders/0", "--url", &server.base]);
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    let stale = (shown["cursorRevision"].as_u64().unwrap() + 1).to_string();
    let out = cli(&[
        "reprocess-from",
        "order-feed",
        "orders/0",
        "--position",
        "1",
        "--expected-revision",
        &stale,
        "--url",
        &server.base,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("409") && err.contains("REVISION_MISMATCH"), "{err}");
    let after = get_json(&format!("{}?offset=-1", server.url("feed"))).await;
    assert_eq!(after, feed, "the refused control changed nothing");

    let status = server.terminate(Duration::from_secs(15)).await.unwrap();
    assert!(matches!(status, Some(s) if s.success()), "SIGTERM: {status:?}; log:\n{}", server.log_tail());
    assert!(server.log_tail().contains("processor host stopped"), "{}", server.log_tail());
}

/// `serve` with `config`: must exit non-zero on its own, saying `expect`.
fn refuses(config: &str, expect: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("bad.toml");
    std::fs::write(&path, config).unwrap();
    refuses_with(&["--processors".into(), path.display().to_string()], &[], expect);
}

/// `serve` with these extra arguments and environment: must exit non-zero
/// on its own, saying `expect`.
fn refuses_with(args: &[String], env: &[(&str, &str)], expect: &str) {
    let mut child = Command::new(server_bin())
        .args(["serve", "--store", "memory", "--bind", "127.0.0.1:0"])
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the server started with a bad configuration: {args:?} {env:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit status {}", out.status);
    assert!(err.contains(expect), "want {expect:?} in:\n{err}");
}

#[test]
fn a_bad_configuration_is_a_start_up_error_naming_the_field() {
    let head = "[[processor]]\nslug = \"p\"\n";
    refuses(&format!("{head}kind = \"outbx\"\nstreams = \"a/*\""), "field `kind`: unknown processor kind \"outbx\"");
    refuses(&format!("{head}kind = \"counter\"\nstreams = \"a/b*\""), "field `streams`");
    refuses(
        &format!("{head}kind = \"outbox\"\nstreams = \"a/*\"\ntarget = \"missing\""),
        "field `target`: stream \"missing\" does not exist",
    );
    refuses("[[processor]\n", "line 1");
}

/// `DS_PROCESSORS` is a file and `DS_PROCESSORS_TOML` the TOML itself, on the
/// server as on Lambda: the text is read as configuration (its mistakes name
/// the field), and naming both is refused.
#[test]
fn the_toml_itself_is_taken_inline_and_never_together_with_a_file() {
    let typo = "[[processor]]\nslug = \"p\"\nkind = \"outbx\"\nstreams = \"a/*\"";
    refuses_with(&["--processors-toml".into(), typo.into()], &[], "field `kind`: unknown processor kind \"outbx\"");
    refuses_with(&[], &[("DS_PROCESSORS_TOML", typo)], "field `kind`: unknown processor kind \"outbx\"");
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("p.toml");
    std::fs::write(&file, "").unwrap();
    refuses_with(&["--processors".into(), file.display().to_string()], &[("DS_PROCESSORS_TOML", "[host]")], "not both");
    // The TOML where a file is expected is a file that does not exist.
    refuses_with(&[], &[("DS_PROCESSORS", typo)], "DS_PROCESSORS: cannot read");
}

/// A `state` processor in the real server, read through the CLI: the whole
/// state, one type, one row, a missing row, and the malformed message in
/// `processors list`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_a_state_processors_live_state() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, config) = (tmp.path().join("data"), tmp.path().join("processors.toml"));
    std::fs::write(&config, "[[processor]]\nkind = \"state\"\nslug = \"live\"\nstreams = \"rooms/*\"\n").unwrap();
    let mut server = Server::start(opts(&dir, &config)).await.unwrap();
    let http = client();
    let messages = json!([
        { "type": "member", "key": "ann", "value": { "role": "host" }, "headers": { "operation": "insert" } },
        { "type": "member", "key": "bo", "value": { "role": "guest" }, "headers": { "operation": "insert" } },
        { "type": "member", "key": "bo", "headers": { "operation": "delete" } },
        { "type": "topic", "key": "t", "value": "rust", "headers": { "operation": "upsert" } },
        { "type": "member", "key": "cy", "headers": { "operation": "insert" } },
    ]);
    let put = http
        .put(server.url("rooms/1"))
        .header("content-type", "application/json")
        .body(messages.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201);

    let state = |args: &[&str]| {
        let mut all = vec!["state", "live", "rooms/1"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--url", &server.base]);
        cli(&all)
    };
    let out = state(&[]);
    assert!(out.status.success(), "state: {}", String::from_utf8_lossy(&out.stderr));
    let whole: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(whole["state"], json!({ "member": { "ann": { "role": "host" } }, "topic": { "t": "rust" } }));
    assert_eq!(whole["summary"]["malformed"], 1, "the insert without a value: {whole}");
    let one_type: Value = serde_json::from_slice(&state(&["member", "--limit", "1"]).stdout).unwrap();
    assert_eq!(one_type["state"], json!({ "ann": { "role": "host" } }));
    let row: Value = serde_json::from_slice(&state(&["topic", "t"]).stdout).unwrap();
    assert_eq!(row["state"], json!("rust"));
    let missing = state(&["member", "bo"]);
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success() && err.contains("404") && err.contains("ROW_NOT_FOUND"), "{err}");

    wait_caught_up(&server, 1).await;
    let out = cli(&["list", "--url", &server.base]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("2 rows, 1 malformed"), "{table}");
    let status = server.terminate(Duration::from_secs(15)).await.unwrap();
    assert!(matches!(status, Some(s) if s.success()), "SIGTERM: {status:?}; log:\n{}", server.log_tail());
}
