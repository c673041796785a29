//! A minimal HTTP/1.1 client that sends the request target byte for byte.
//!
//! URL libraries (reqwest's `url`) resolve `.`/`..` and `%2e%2e` segments
//! before sending, so traversal attempts would never reach the server.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A parsed raw response.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    /// Header lines, lowercased names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Send `{method} {target} HTTP/1.1` with `body` and `Connection: close`,
/// and read the whole response.
pub async fn request(addr: SocketAddr, method: &str, target: &str, body: &[u8]) -> anyhow::Result<RawResponse> {
    let head = format!(
        "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/octet-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let io = async {
        let mut stream = TcpStream::connect(addr).await.context("connect")?;
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body).await?;
        stream.flush().await?;
        let mut buf = Vec::new();
        stream.read_to_end(&mut buf).await?;
        anyhow::Ok(buf)
    };
    let buf = tokio::time::timeout(Duration::from_secs(20), io).await.context("raw request timed out")??;
    parse(&buf).with_context(|| format!("{method} {target}: response {:?}", String::from_utf8_lossy(&buf)))
}

/// A persistent connection: send raw requests one after another, reading
/// one `Content-Length`-delimited response each.
pub struct Conn(TcpStream);

impl Conn {
    pub async fn open(addr: SocketAddr) -> anyhow::Result<Self> {
        Ok(Self(TcpStream::connect(addr).await.context("connect")?))
    }

    /// Write `request` (a whole raw request: head and body) and read one
    /// response. Write errors are ignored if a response still arrives (a
    /// server may answer before it has read the whole body).
    pub async fn exchange(&mut self, request: &[u8]) -> anyhow::Result<RawResponse> {
        let io = async {
            let written = self.0.write_all(request).await;
            let mut buf = Vec::new();
            let mut chunk = [0u8; 8192];
            loop {
                if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let resp = parse(&buf[..end + 4])?;
                    let len: usize = resp.header("content-length").map_or(Ok(0), str::parse)?;
                    if buf.len() >= end + 4 + len {
                        return Ok(RawResponse { body: buf[end + 4..end + 4 + len].to_vec(), ..resp });
                    }
                }
                let n = self.0.read(&mut chunk).await.context("reading the response")?;
                if n == 0 {
                    bail!("connection closed before a complete response (write: {written:?}, got {} bytes)", buf.len());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        };
        tokio::time::timeout(Duration::from_secs(20), io).await.context("raw exchange timed out")?
    }
}

fn parse(buf: &[u8]) -> anyhow::Result<RawResponse> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { bail!("no end of headers") };
    let head = std::str::from_utf8(&buf[..end]).context("non-UTF-8 response head")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok());
    let Some(status) = status else { bail!("bad status line {status_line:?}") };
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(RawResponse { status, headers, body: buf[end + 4..].to_vec() })
}
