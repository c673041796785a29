//! Disk trouble on the local store, through the real server binary:
//! - a full disk (a size-limited tmpfs; needs root, else skipped with a
//!   message) answers a clear 5xx with the reason, corrupts nothing, and
//!   appends succeed again once space returns, without a restart;
//! - a corrupted record (a flipped byte in the database file) is detected
//!   on read and reported, never served.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ds_e2e::tmpfs::Tmpfs;
use ds_e2e::{client, header, read_all, Server, ServerOpts};

const OCTET: &str = "application/octet-stream";

fn payload(seq: u64) -> Vec<u8> {
    let mut body = format!("<record {seq}>").into_bytes();
    body.resize(64 * 1024, b'0' + (seq % 10) as u8);
    body
}

/// POST batch `seq` of producer `d`; the status and the response body.
async fn append(http: &reqwest::Client, url: &str, seq: u64) -> (u16, Option<String>, String) {
    let resp = http
        .post(url)
        .header("content-type", OCTET)
        .header("producer-id", "d")
        .header("producer-epoch", "0")
        .header("producer-seq", seq.to_string())
        .body(payload(seq))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let retry_after = header(&resp, "retry-after");
    (status, retry_after, resp.text().await.unwrap_or_default())
}

/// The stream holds batches `0..acked` (and at most the one batch whose
/// outcome was unknown), each once, in order.
async fn check_content(http: &reqwest::Client, url: &str, acked: u64, unknown: Option<u64>) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let bytes = loop {
        match read_all(http, url).await {
            Ok((bytes, _)) => break bytes,
            // While the store reopens its file, reads may answer 503.
            Err(e) if Instant::now() < deadline && e.to_string().contains("503") => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("reading {url}: {e:#}"),
        }
    };
    let have = (bytes.len() / payload(0).len()) as u64;
    let want: Vec<u8> = (0..have).flat_map(payload).collect();
    assert!(bytes == want, "the stream is not batches 0..{have} exactly ({} bytes)", bytes.len());
    assert!(have >= acked, "{acked} acknowledged batches, only {have} present: acknowledged data lost");
    assert!(have <= acked + u64::from(unknown == Some(acked)), "{have} present, {acked} acknowledged");
    have
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disk_answers_5xx_corrupts_nothing_and_recovers() {
    let fs = match Tmpfs::mount("6m") {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("SKIPPED full-disk test: {why}");
            return;
        }
    };
    let opts = ServerOpts { data_dir: Some(fs.path().join("data")), ..ServerOpts::default() };
    let mut server = Server::start(opts.clone()).await.unwrap();
    let http = client();
    let url = server.url("disk/s");
    let resp = http.put(&url).header("content-type", OCTET).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 201);

    // Fill the disk: append until the store refuses.
    let mut acked = 0u64;
    let refusal = loop {
        let (status, retry_after, body) = append(&http, &url, acked).await;
        match status {
            200 => acked += 1,
            s if s >= 500 => break (s, retry_after, body),
            s => panic!("append {acked}: {s} {body}"),
        }
        assert!(acked < 500, "a 6 MiB disk never filled up");
    };
    eprintln!("disk full after {acked} acknowledged 64 KiB appends: {refusal:?}");
    let (status, retry_after, body) = &refusal;
    assert_eq!(*status, 503, "a full disk is retryable: {body}");
    assert!(retry_after.is_some(), "503 without Retry-After");
    assert!(body.contains("disk full") || body.contains("I/O error"), "no reason given: {body}");
    // Still full: more refusals, no crash; reads serve exactly what was acknowledged.
    for _ in 0..3 {
        let (status, _, body) = append(&http, &url, acked).await;
        assert!(status == 503 || status == 200, "{status} {body}");
        if status == 200 {
            acked += 1;
        }
    }
    check_content(&http, &url, acked, Some(acked)).await;
    server.assert_answers().await;

    // Space returns: the same producer's next batch is taken, without a restart.
    fs.resize("64m").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _, body) = append(&http, &url, acked).await;
        if matches!(status, 200 | 204) {
            acked += 1;
            break;
        }
        assert!(status == 503 && Instant::now() < deadline, "after freeing space: {status} {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for _ in 0..5 {
        let (status, _, body) = append(&http, &url, acked).await;
        assert_eq!(status, 200, "{body}");
        acked += 1;
    }
    let have = check_content(&http, &url, acked, None).await;
    assert_eq!(have, acked);

    // And all of it survives a restart.
    let exit = server.terminate(Duration::from_secs(15)).await.unwrap();
    assert!(matches!(exit, Some(s) if s.success()), "{exit:?}\n{}", server.log_tail());
    let server = Server::start(opts).await.unwrap();
    assert_eq!(check_content(&http, &server.url("disk/s"), acked, None).await, acked);
}

/// Flip one byte of every occurrence of `marker` in `file`; returns how many.
fn flip(file: &Path, marker: &[u8]) -> usize {
    let mut bytes = std::fs::read(file).unwrap();
    let at: Vec<usize> =
        bytes.windows(marker.len()).enumerate().filter(|(_, w)| *w == marker).map(|(i, _)| i).collect();
    for i in &at {
        bytes[i + marker.len() - 1] ^= 0x20;
    }
    std::fs::write(file, bytes).unwrap();
    at.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_records_are_detected_and_never_served() {
    let tmp = tempfile::tempdir().unwrap();
    let data: PathBuf = tmp.path().join("data");
    let opts = ServerOpts { data_dir: Some(data.clone()), ..ServerOpts::default() };
    let mut server = Server::start(opts.clone()).await.unwrap();
    let http = client();
    let chunk_marker = b"chunk-to-corrupt-4e1f".to_vec();
    for (name, body) in
        [("c/chunk", chunk_marker.clone()), ("c/meta-victim", b"fine".to_vec()), ("c/ok", b"ok".to_vec())]
    {
        let resp = http.put(server.url(name)).header("content-type", OCTET).body(body).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 201);
    }
    let exit = server.terminate(Duration::from_secs(15)).await.unwrap();
    assert!(matches!(exit, Some(s) if s.success()));

    let file = data.join(ds_store_local::DB_FILE);
    assert!(flip(&file, &chunk_marker) >= 1, "chunk bytes not found in the file");
    // The meta record (format 3: the path, length-prefixed, opens the body;
    // the table key holds the path without the prefix): damage its path.
    let victim = [&13u32.to_le_bytes()[..], b"c/meta-victim"].concat();
    assert!(flip(&file, &victim) >= 1, "meta record not found in the file");

    let mut server = Server::start(opts).await.unwrap();
    let resp = http.get(format!("{}?offset=-1", server.url("c/chunk"))).send().await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.bytes().await.unwrap();
    assert_eq!(status, 500, "a corrupt chunk must be an error, got {status} {:?}", String::from_utf8_lossy(&body));
    assert!(!body.windows(5).any(|w| w == b"chunk"), "corrupt bytes were served: {:?}", String::from_utf8_lossy(&body));
    for method in ["GET", "HEAD"] {
        let req = http.request(method.parse().unwrap(), format!("{}?offset=-1", server.url("c/meta-victim")));
        let status = req.send().await.unwrap().status().as_u16();
        assert_eq!(status, 500, "{method} of a stream whose meta record is corrupt");
    }
    let resp = http.get(format!("{}?offset=-1", server.url("c/ok"))).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200, "healthy records stay readable");
    assert_eq!(resp.bytes().await.unwrap().as_ref(), b"ok");
    let log = server.log();
    assert!(log.contains("checksum mismatch"), "the corruption is not reported in the log:\n{}", server.log_tail());
    server.assert_answers().await;
}
