//! Resident memory per idle live reader: open many SSE or long-poll
//! connections on a stream that never moves, and divide the server's RSS
//! growth by their number.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::procfs;

/// The two kinds of idle live reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Sse,
    LongPoll,
}

/// What one measurement found.
#[derive(Debug, Clone)]
pub struct IdleReport {
    pub kind: Kind,
    pub connections: usize,
    pub rss_before: u64,
    pub rss_after: u64,
    pub fds_after: usize,
}

impl IdleReport {
    pub fn per_connection(&self) -> u64 {
        self.rss_after.saturating_sub(self.rss_before) / self.connections.max(1) as u64
    }
}

/// Open `count` idle readers of `path` on the server at `addr` (process
/// `pid`), wait until the server holds them all, and measure.
pub async fn measure(
    addr: std::net::SocketAddr,
    pid: u32,
    path: &str,
    kind: Kind,
    count: usize,
) -> anyhow::Result<IdleReport> {
    let live = if kind == Kind::Sse { "sse" } else { "long-poll" };
    let request = format!("GET /v1/stream/{path}?offset=now&live={live} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n");
    // Warm up allocator arenas and the runtime with a few readers first, so
    // the figure is the steady cost of one more reader.
    let mut warm = Vec::new();
    for _ in 0..100 {
        warm.push(open(addr, &request, kind).await?);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before = procfs::rss_bytes(pid)?;
    let base_fds = procfs::open_fds(pid)?;
    let mut conns = Vec::with_capacity(count);
    for i in 0..count {
        conns.push(open(addr, &request, kind).await.with_context(|| format!("connection {i}"))?);
    }
    // Long-polls answer nothing until data or timeout: wait until the server
    // holds every connection (its descriptor count says so).
    let deadline = Instant::now() + Duration::from_secs(60);
    while procfs::open_fds(pid)? < base_fds + count {
        if Instant::now() > deadline {
            bail!("the server holds {} of {count} connections", procfs::open_fds(pid)? - base_fds);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let report = IdleReport {
        kind,
        connections: count,
        rss_before,
        rss_after: procfs::rss_bytes(pid)?,
        fds_after: procfs::open_fds(pid)?,
    };
    drop(conns);
    drop(warm);
    Ok(report)
}

/// Connect and send the live request; for SSE, read until the response head
/// and first event arrived (the reader is then parked in the server).
async fn open(addr: std::net::SocketAddr, request: &str, kind: Kind) -> anyhow::Result<TcpStream> {
    let mut tcp = TcpStream::connect(addr).await.context("connect")?;
    tcp.write_all(request.as_bytes()).await.context("send")?;
    if kind == Kind::Sse {
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tokio::time::timeout(Duration::from_secs(30), tcp.read(&mut buf)).await.context("SSE head")??;
            if n == 0 {
                bail!("closed before the SSE head");
            }
            got.extend_from_slice(&buf[..n]);
        }
        if !got.starts_with(b"HTTP/1.1 200") {
            bail!("SSE refused: {}", String::from_utf8_lossy(&got[..got.len().min(200)]));
        }
    }
    Ok(tcp)
}
