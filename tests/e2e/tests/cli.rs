//! The client commands of the real `durable-streams` binary against a real
//! server (local store): each command, `read` following live through a
//! server restart without gaps or duplicates, and interrupted uploads rerun
//! as an idempotent producer without duplicates.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use ds_e2e::server::server_bin;
use ds_e2e::{Server, ServerOpts};

/// The CLI pointed at `server` through the upstream variable.
fn cli(server: &Server) -> Command {
    let mut c = Command::new(server_bin());
    c.env("STREAM_URL", format!("{}/v1/stream", server.base)).env_remove("STREAM_AUTH");
    c
}

fn run(server: &Server, args: &[&str]) -> Output {
    cli(server).args(args).stdin(Stdio::null()).output().unwrap()
}

fn run_with_stdin(server: &Server, args: &[&str], input: &[u8]) -> Output {
    let mut child =
        cli(server).args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "exit {:?}, stderr: {}", out.status.code(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn each_command_against_a_local_server() {
    let server = Server::local().await.unwrap();
    let s = &server;
    assert!(stderr(&run(s, &["create", "chat/1", "--json"])).contains("created chat/1"));
    // PUT again with the same configuration: fine, and says so.
    assert!(stderr(&run(s, &["create", "chat/1", "--json"])).contains("already exists"));
    ok(&run(s, &["write", "chat/1", r#"{"user":"alice","text":"hi"}"#, "--json"]));
    // Without --batch-json an array is one message; with it, one per element.
    ok(&run_with_stdin(s, &["write", "chat/1", "--json"], b"[1,2]"));
    ok(&run_with_stdin(s, &["write", "chat/1", "--batch-json"], br#"[{"n":3}, {"n":4}]"#));
    let read = ok(&run(s, &["read", "chat/1", "--no-follow"]));
    assert_eq!(read, "{\"user\":\"alice\",\"text\":\"hi\"}\n[1,2]\n{\"n\":3}\n{\"n\":4}\n");

    // The content type defaults to the stream's own; escapes in the argument.
    ok(&run(s, &["create", "logs", "--content-type", "text/plain"]));
    ok(&run(s, &["write", "logs", r"one\ntwo\n"]));
    assert_eq!(ok(&run(s, &["read", "logs", "--no-follow"])), "one\ntwo\n");

    let head = ok(&run(s, &["head", "logs"]));
    assert!(head.contains("content-type: text/plain") && head.contains("closed: false"), "{head}");
    let tail = head.lines().find_map(|l| l.strip_prefix("next-offset: ")).unwrap().to_owned();
    // --from an offset reads what follows it.
    ok(&run(s, &["write", "logs", "three"]));
    assert_eq!(ok(&run(s, &["read", "logs", "--no-follow", "--from", &tail])), "three");

    // Fork at the tail that HEAD gave: the fork holds the first two lines only.
    ok(&run(s, &["fork", "logs-fork", "--from", "logs", "--offset", &tail]));
    assert_eq!(ok(&run(s, &["read", "logs-fork", "--no-follow"])), "one\ntwo\n");

    // Close: a later write is a conflict (5), with the server's reason.
    ok(&run(s, &["close", "logs"]));
    assert!(ok(&run(s, &["head", "logs"])).contains("closed: true"));
    let refused = run(s, &["write", "logs", "four"]);
    assert_eq!(code(&refused), 5, "{}", stderr(&refused));
    assert!(stderr(&refused).contains("409"), "{}", stderr(&refused));
    // A closed stream's follow ends at its end instead of waiting.
    assert_eq!(ok(&run(s, &["read", "logs"])), "one\ntwo\nthree");

    // Delete, then the stream is gone (4); bad JSON and no input are usage errors (2).
    ok(&run(s, &["delete", "logs-fork"]));
    assert_eq!(code(&run(s, &["head", "logs-fork"])), 4);
    assert_eq!(code(&run(s, &["write", "chat/1", "{not json"])), 2);
    assert_eq!(code(&run(s, &["read", "no/such", "--no-follow"])), 4);
    // Nothing listens on port 1: unreachable (3), after the retry window.
    let unreachable = cli(s)
        .args(["--url", "http://127.0.0.1:1/v1/stream", "head", "chat/1", "--retry-for", "300ms"])
        .output()
        .unwrap();
    assert_eq!(code(&unreachable), 3, "{}", stderr(&unreachable));

    // ls folds the server's registry stream: the streams that exist.
    assert_eq!(ok(&run(s, &["ls"])), "chat/1\nlogs\n");
    assert_eq!(ok(&run(s, &["ls", "chat/"])), "chat/1\n");
    let long = ok(&run(s, &["--url", &format!("{}/v1/stream", s.base), "ls", "-l", "logs"]));
    let fields: Vec<&str> = long.trim_end().split('\t').collect();
    assert_eq!(fields[..2], ["logs", "text/plain"], "{long}");
    assert!(fields[2].parse::<i64>().is_ok_and(|ms| ms > 1_700_000_000_000), "created at, epoch ms: {long}");
    assert_eq!(fields.get(3), Some(&"closed"), "logs was closed above: {long}");
    let open = ok(&run(s, &["ls", "-l", "chat/"]));
    assert_eq!(open.trim_end().split('\t').count(), 3, "an open stream has no fourth field: {open}");
    // A server that keeps no registry: ls says why it cannot list (4).
    let off = vec!["--registry".to_owned(), "off".to_owned()];
    let bare = Server::start(ServerOpts { extra_args: off, ..ServerOpts::default() }).await.unwrap();
    let none = run(&bare, &["ls"]);
    assert_eq!(code(&none), 4);
    assert!(stderr(&none).contains("__registry__"), "{}", stderr(&none));
}

/// Reads lines of a following `read` on a thread, so the test can wait with a deadline.
fn lines_of(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    rx
}

async fn append(client: &reqwest::Client, url: &str, n: usize) {
    let resp = client
        .post(url)
        .header("content-type", "application/json")
        .body(format!("{{\"n\":{n}}}"))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "append {n}: {}", resp.status());
}

#[tokio::test]
async fn follow_survives_a_server_restart_without_gaps_or_duplicates() {
    let mut server = Server::local().await.unwrap();
    let http = reqwest::Client::new();
    let url = server.url("live");
    ok(&run(&server, &["create", "live", "--json"]));
    for n in 0..50 {
        append(&http, &url, n).await;
    }
    let mut reader = cli(&server)
        .args(["read", "live", "--retry-for", "60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut reader);
    let mut seen = Vec::new();
    let wait_for = |count: usize, seen: &mut Vec<String>| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while seen.len() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            seen.push(lines.recv_timeout(left).unwrap_or_else(|_| panic!("only {} lines within 60 s", seen.len())));
        }
    };
    wait_for(50, &mut seen);
    // Live now: appends reach the follower over SSE.
    for n in 50..100 {
        append(&http, &url, n).await;
    }
    wait_for(100, &mut seen);

    // kill -9 and a restart at the same address while the follower waits,
    // then more appends: it reconnects from its last confirmed offset.
    let (port, data_dir) = (server.addr.port(), server.data_dir.clone());
    server.kill9().unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let server = Server::start(ServerOpts { port: Some(port), data_dir: Some(data_dir), ..ServerOpts::default() })
        .await
        .unwrap();
    for n in 100..150 {
        append(&http, &url, n).await;
    }
    wait_for(150, &mut seen);
    // Closing the stream ends the follow by itself.
    ok(&run(&server, &["close", "live"]));
    let out = reader.wait_with_output().unwrap();
    assert!(out.status.success(), "read exited {:?}", out.status);
    assert!(stderr(&out).contains("retrying"), "the follower lost its connection and reconnected: {}", stderr(&out));
    let expected: Vec<String> = (0..150).map(|n| format!("{{\"n\":{n}}}")).collect();
    assert_eq!(seen, expected, "every message once, in order");
    assert!(lines.recv_timeout(Duration::from_millis(200)).is_err(), "nothing after the close");
}

/// A file that no two pieces of share content, so a duplicated or lost
/// piece shows.
fn upload_file(dir: &std::path::Path, bytes: usize) -> (std::path::PathBuf, Vec<u8>) {
    let data: Vec<u8> = (0..bytes).map(|i| ((i * 7 + i / 4099) % 251) as u8).collect();
    let path = dir.join("upload.bin");
    std::fs::write(&path, &data).unwrap();
    (path, data)
}

async fn read_bytes(http: &reqwest::Client, url: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = "-1".to_owned();
    loop {
        let resp = http.get(format!("{url}?offset={offset}")).send().await.unwrap();
        assert!(resp.status().is_success());
        let up_to_date = resp.headers().contains_key("stream-up-to-date");
        offset = resp.headers()["stream-next-offset"].to_str().unwrap().to_owned();
        out.extend_from_slice(&resp.bytes().await.unwrap());
        if up_to_date {
            return out;
        }
    }
}

/// Waits until the stream holds some bytes (the upload is under way).
async fn wait_for_progress(http: &reqwest::Client, url: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let resp = http.head(url).send().await.unwrap();
        let tail = resp.headers()["stream-next-offset"].to_str().unwrap().to_owned();
        if !tail.ends_with("_0000000000000000") {
            return;
        }
        assert!(Instant::now() < deadline, "the upload made no progress in 60 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn an_interrupted_upload_rerun_as_a_producer_writes_nothing_twice() {
    let server = Server::local().await.unwrap();
    let http = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let (file, data) = upload_file(dir.path(), 8 << 20);
    let file = file.to_str().unwrap();
    ok(&run(&server, &["create", "up"]));
    let args = ["write", "up", "--file", file, "--producer-id", "upload-1", "--chunk-size", "8KiB"];

    // The uploader is killed part way (SIGKILL: no chance to finish a piece).
    let mut first = cli(&server).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    wait_for_progress(&http, &server.url("up")).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(first.try_wait().unwrap().is_none(), "the upload finished before it could be interrupted");
    first.kill().unwrap();
    first.wait().unwrap();
    let partial = read_bytes(&http, &server.url("up")).await;
    assert!(
        !partial.is_empty() && partial.len() < data.len(),
        "killed after {} of {} bytes",
        partial.len(),
        data.len()
    );
    assert_eq!(partial[..], data[..partial.len()], "what landed is a prefix of the file");

    // The same command again: the pieces already there are answered 204
    // and skipped, the rest appended once.
    ok(&run(&server, &args));
    assert!(read_bytes(&http, &server.url("up")).await == data, "the stream is the file, exactly once");
    // A third run changes nothing either.
    ok(&run(&server, &args));
    assert!(read_bytes(&http, &server.url("up")).await == data);
}

#[tokio::test]
async fn an_upload_rides_out_a_server_restart_as_a_producer() {
    let mut server = Server::local().await.unwrap();
    let http = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let (file, data) = upload_file(dir.path(), 8 << 20);
    ok(&run(&server, &["create", "up"]));
    let mut upload = cli(&server)
        .args(["write", "up", "--file", file.to_str().unwrap(), "--producer-id", "p", "--chunk-size", "8KiB"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_progress(&http, &server.url("up")).await;
    // kill -9 mid-upload (requests in flight), restart at the same address:
    // the CLI resends the unanswered piece under the same sequence number.
    let (port, data_dir) = (server.addr.port(), server.data_dir.clone());
    server.kill9().unwrap();
    assert!(upload.try_wait().unwrap().is_none(), "the upload finished before the kill");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let server = Server::start(ServerOpts { port: Some(port), data_dir: Some(data_dir), ..ServerOpts::default() })
        .await
        .unwrap();
    let out = upload.wait_with_output().unwrap();
    ok(&out);
    assert!(stderr(&out).contains("retrying"), "the CLI saw the restart: {}", stderr(&out));
    assert!(read_bytes(&http, &server.url("up")).await == data, "the stream is the file, exactly once");
}

#[tokio::test]
async fn a_binary_stream_followed_live_arrives_byte_for_byte() {
    // Over SSE a binary stream's data is base64 (protocol §5.8): the CLI
    // decodes it back to the exact bytes, zeros and line breaks included.
    let server = Server::local().await.unwrap();
    let http = reqwest::Client::new();
    ok(&run(&server, &["create", "bin"]));
    let mut reader = cli(&server).args(["read", "bin"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdout = reader.stdout.take().unwrap();
    let collected = std::thread::spawn(move || {
        let mut all = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut all).unwrap();
        all
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut sent = Vec::new();
    for i in 0..40u32 {
        let piece: Vec<u8> = (0..(i * 37 % 500 + 1)).map(|j| (j * 31 + i) as u8).chain([0, b'\n', b'\r']).collect();
        let resp =
            http.post(server.url("bin")).header("content-type", "application/octet-stream").body(piece.clone()).send();
        assert!(resp.await.unwrap().status().is_success());
        sent.extend(piece);
    }
    ok(&run(&server, &["close", "bin"]));
    let out = reader.wait_with_output().unwrap();
    assert!(out.status.success(), "read exited {:?}: {}", out.status, stderr(&out));
    assert!(collected.join().unwrap() == sent, "the followed bytes are the appended bytes");
}
