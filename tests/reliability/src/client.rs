//! A raw HTTP/1.1 client: writes a request's bytes verbatim over any byte
//! stream (TCP, or an in-memory pipe to the router in-process) and reads one
//! response, classifying what happened: a response, a close, or nothing
//! within the deadline (a hung connection).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};

use crate::gen::After;

/// A connection's byte stream.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

type Connecting<'a> = Pin<Box<dyn Future<Output = io::Result<Box<dyn Io>>> + Send + 'a>>;

/// Where connections go.
pub trait Target: Send + Sync {
    fn connect(&self) -> Connecting<'_>;
}

/// A server listening on a TCP address.
pub struct Tcp(pub SocketAddr);

impl Target for Tcp {
    fn connect(&self) -> Connecting<'_> {
        Box::pin(async move {
            let tcp = tokio::net::TcpStream::connect(self.0).await?;
            tcp.set_nodelay(true)?;
            Ok(Box::new(tcp) as Box<dyn Io>)
        })
    }
}

/// The app served in-process: each connection is an in-memory pipe whose
/// other end is served by `ds_serve::serve_connection` (the real HTTP/1.1
/// parsing and connection limits, no socket).
pub struct InProcess {
    pub app: ds_http::App,
    pub limits: Arc<ds_serve::ConnLimits>,
}

impl Target for InProcess {
    fn connect(&self) -> Connecting<'_> {
        Box::pin(async move {
            let (client, server) = tokio::io::duplex(64 * 1024);
            tokio::spawn(ds_serve::serve_connection(server, self.app.clone(), Arc::clone(&self.limits)));
            Ok(Box::new(client) as Box<dyn Io>)
        })
    }
}

/// One parsed response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Lowercased names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The server announced it closes the connection.
    pub fn closes(&self) -> bool {
        self.header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

/// What came back for one request.
#[derive(Debug)]
pub enum Outcome {
    Response(Response),
    /// The server closed (or reset) the connection without a complete response.
    Closed(String),
    /// No response and no close before the deadline.
    Hung,
}

/// An open connection and the bytes read past the last response.
pub struct Conn {
    rd: ReadHalf<Box<dyn Io>>,
    wr: WriteHalf<Box<dyn Io>>,
    buf: Vec<u8>,
    /// Exchanges completed on this connection.
    pub used: u32,
}

const MAX_HEAD: usize = 1 << 20;

impl Conn {
    pub async fn open(target: &dyn Target) -> io::Result<Self> {
        let (rd, wr) = tokio::io::split(target.connect().await?);
        Ok(Self { rd, wr, buf: Vec::new(), used: 0 })
    }

    /// Write `bytes`, do `after`, and read one response (skipping `1xx`),
    /// all within `deadline`. Reading starts at once, so a server that
    /// answers before taking the whole request is heard.
    pub async fn exchange(&mut self, bytes: &[u8], after: After, head: bool, deadline: Duration) -> Outcome {
        self.used += 1;
        let Self { rd, wr, buf, .. } = self;
        let write = async {
            wr.write_all(bytes).await?;
            if after == After::HalfClose {
                wr.shutdown().await?;
            }
            io::Result::Ok(())
        };
        let read = read_response(rd, buf, head);
        let both = async {
            tokio::pin!(write, read);
            let mut writing = true;
            loop {
                tokio::select! {
                    // A failed write (the server closed early) is not the
                    // verdict: the response may still be readable.
                    _ = &mut write, if writing => writing = false,
                    r = &mut read => return r,
                }
            }
        };
        match tokio::time::timeout(deadline, both).await {
            Err(_) => Outcome::Hung,
            Ok(Ok(Some(resp))) => Outcome::Response(resp),
            Ok(Ok(None)) => Outcome::Closed("end of stream before a complete response".into()),
            Ok(Err(e)) => Outcome::Closed(format!("{e:#}")),
        }
    }

    /// Whether the server closes the connection within `wait` (reads to EOF).
    pub async fn closed_within(&mut self, wait: Duration) -> bool {
        let mut chunk = [0u8; 4096];
        let drain = async {
            loop {
                match self.rd.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(wait, drain).await.is_ok()
    }
}

async fn fill(rd: &mut ReadHalf<Box<dyn Io>>, buf: &mut Vec<u8>) -> anyhow::Result<bool> {
    let mut chunk = [0u8; 16 * 1024];
    let n = rd.read(&mut chunk).await.context("read")?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n > 0)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One response from `buf` and the stream; `Ok(None)` on EOF before it is complete.
async fn read_response(
    rd: &mut ReadHalf<Box<dyn Io>>,
    buf: &mut Vec<u8>,
    head_request: bool,
) -> anyhow::Result<Option<Response>> {
    loop {
        let end = loop {
            if let Some(end) = find(buf, b"\r\n\r\n") {
                break end;
            }
            if buf.len() > MAX_HEAD {
                bail!("response head over {MAX_HEAD} bytes");
            }
            if !fill(rd, buf).await? {
                return Ok(None);
            }
        };
        let (status, headers) = parse_head(&buf[..end])?;
        buf.drain(..end + 4);
        if (100..200).contains(&status) {
            continue; // 100 Continue: the real response follows
        }
        let mut resp = Response { status, headers, body: Vec::new() };
        let chunked = resp.header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
        let length = resp.header("content-length").map(str::parse::<usize>).transpose().context("content-length")?;
        let complete = if head_request || status == 204 || status == 304 {
            true
        } else if chunked {
            read_chunked(rd, buf, &mut resp.body).await?
        } else if let Some(len) = length {
            while buf.len() < len {
                if !fill(rd, buf).await? {
                    return Ok(None);
                }
            }
            resp.body = buf.drain(..len).collect();
            true
        } else {
            while fill(rd, buf).await? {}
            resp.body = std::mem::take(buf);
            true
        };
        return Ok(complete.then_some(resp));
    }
}

async fn read_chunked(rd: &mut ReadHalf<Box<dyn Io>>, buf: &mut Vec<u8>, out: &mut Vec<u8>) -> anyhow::Result<bool> {
    loop {
        let line_end = loop {
            if let Some(i) = find(buf, b"\r\n") {
                break i;
            }
            if !fill(rd, buf).await? {
                return Ok(false);
            }
        };
        let line = std::str::from_utf8(&buf[..line_end]).context("chunk size line")?;
        let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16).context("chunk size")?;
        buf.drain(..line_end + 2);
        if size == 0 {
            // Trailers (none expected), then the empty line.
            loop {
                if let Some(i) = find(buf, b"\r\n") {
                    buf.drain(..i + 2);
                    if i == 0 {
                        return Ok(true);
                    }
                    continue;
                }
                if !fill(rd, buf).await? {
                    return Ok(false);
                }
            }
        }
        while buf.len() < size + 2 {
            if !fill(rd, buf).await? {
                return Ok(false);
            }
        }
        out.extend_from_slice(&buf[..size]);
        buf.drain(..size + 2);
    }
}

fn parse_head(head: &[u8]) -> anyhow::Result<(u16, Vec<(String, String)>)> {
    let head = std::str::from_utf8(head).context("response head is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let Some(status) = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()) else {
        bail!("bad status line {status_line:?}")
    };
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok((status, headers))
}
