//! The fault proxy, mode by mode, against an upstream on loopback that
//! answers `ok` to every request and counts the requests it got.
#![allow(clippy::unwrap_used)]

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ds_history::proxy::{FaultProxy, Mode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An upstream answering every request (a chunk ending in a blank line).
async fn upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let (mut conn, _) = listener.accept().await.unwrap();
            let counter = Arc::clone(&counter);
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = conn.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                    counter.fetch_add(1, SeqCst);
                    if conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// What one request through the proxy got back.
#[derive(Debug, PartialEq)]
enum Got {
    Answer,
    /// End of stream before any byte.
    Closed,
    Reset,
    Nothing,
}

async fn request(proxy: &FaultProxy, head: &str, wait: Duration) -> Got {
    let mut conn = TcpStream::connect(proxy.addr).await.unwrap();
    let _ = conn.write_all(format!("GET / HTTP/1.1\r\n{head}\r\n\r\n").as_bytes()).await;
    let mut buf = Vec::new();
    match tokio::time::timeout(wait, async {
        let mut chunk = [0u8; 1024];
        loop {
            match conn.read(&mut chunk).await {
                Ok(0) => return if buf.is_empty() { Got::Closed } else { Got::Answer },
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    if buf.ends_with(b"ok") {
                        return Got::Answer;
                    }
                }
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Got::Reset,
                Err(e) => panic!("unexpected error {e}"),
            }
        }
    })
    .await
    {
        Ok(got) => got,
        Err(_) => Got::Nothing,
    }
}

const WAIT: Duration = Duration::from_secs(2);

#[tokio::test]
async fn each_mode_does_what_it_says() {
    let (addr, seen) = upstream().await;
    let proxy = FaultProxy::start(addr).await.unwrap();
    assert_eq!(request(&proxy, "x: 1", WAIT).await, Got::Answer, "pass");

    proxy.set(Mode::Delay(Duration::from_millis(300)));
    let started = Instant::now();
    assert_eq!(request(&proxy, "x: 1", WAIT).await, Got::Answer, "delay");
    assert!(started.elapsed() >= Duration::from_millis(600), "both ways delayed: {:?}", started.elapsed());

    let before = seen.load(SeqCst);
    proxy.set(Mode::Drop);
    // Closed unanswered (a reset when the request had arrived before the close).
    let dropped = request(&proxy, "x: 1", WAIT).await;
    assert!(matches!(dropped, Got::Closed | Got::Reset), "drop: {dropped:?}");
    proxy.set(Mode::Reset);
    assert_eq!(request(&proxy, "x: 1", WAIT).await, Got::Reset, "reset");
    assert_eq!(seen.load(SeqCst), before, "dropped and reset connections reach nobody");

    proxy.set(Mode::Blackhole);
    let held = tokio::spawn({
        let addr = proxy.addr;
        async move {
            let mut conn = TcpStream::connect(addr).await.unwrap();
            conn.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
            let mut chunk = [0u8; 64];
            conn.read(&mut chunk).await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!held.is_finished(), "a blackholed connection hangs");
    proxy.set(Mode::Pass);
    let ended = tokio::time::timeout(WAIT, held).await.unwrap().unwrap();
    assert!(ended.is_err_and(|e| e.kind() == ErrorKind::ConnectionReset), "reset when the blackhole ends");
    assert_eq!(seen.load(SeqCst), before, "nothing got through the blackhole");

    proxy.set(Mode::CutAnswers);
    assert_eq!(request(&proxy, "x: 1", WAIT).await, Got::Reset, "answer cut");
    proxy.set(Mode::CloseAnswers);
    assert_eq!(request(&proxy, "x: 1", WAIT).await, Got::Closed, "answer closed");
    assert_eq!(seen.load(SeqCst), before + 2, "the cut and closed requests were delivered");

    proxy.only_requests_containing(Some("x-target: commit"));
    assert_eq!(request(&proxy, "x-target: read", WAIT).await, Got::Answer, "other requests pass");
    assert_eq!(request(&proxy, "x-target: commit", WAIT).await, Got::Closed, "the marked one is closed");
    proxy.set(Mode::Pass);
    assert_eq!(request(&proxy, "x-target: commit", WAIT).await, Got::Answer, "pass again");

    let counts = proxy.counts();
    for (what, n) in [
        ("connections dropped", 1),
        ("connections reset", 1),
        ("connections blackholed", 1),
        ("answers cut", 1),
        ("answers closed", 2),
        ("delay episodes", 1),
        ("blackhole episodes", 1),
    ] {
        // At least: a connection still open from an earlier request is reset too.
        assert!(counts.get(what).is_some_and(|c| *c >= n), "{what}: {counts:?}");
    }
}
