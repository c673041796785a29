//! The lean HTTP/1.1 driver behind the throughput workloads (P1, P7), P2's
//! timed reads ([`Conn::fetch`]) and the calibration: one keep-alive TCP
//! connection per writer, the request bytes built once per connection and
//! only their sequence digits patched in place before each send, responses
//! parsed with `httparse` into a buffer that is reused. The throughput path
//! allocates nothing per request, so the tool's own CPU per request stays
//! close to wrk's and the server, not the tool, sets the rate.
//!
//! reqwest (`client`) is still what creates streams and reads them back for
//! verification and what the latency workloads use: its per-request cost
//! (pool, URL, header maps) does not matter there.

use anyhow::{anyhow, bail, Context, Result};
use bytes::BufMut;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Width of every patched decimal field (the record's sequence number and,
/// for creates, the stream name's counter).
pub const SEQ_DIGITS: usize = 12;

/// One request, serialized once; `patches` are the offsets of the
/// `SEQ_DIGITS`-wide decimal fields rewritten with the sequence number
/// before each send, `fields` those that carry a function of it.
#[derive(Clone, Debug)]
pub struct Template {
    bytes: Vec<u8>,
    patches: Vec<usize>,
    fields: Vec<Field>,
}

/// A field of the body rewritten before each send with `seq % modulus`,
/// right-aligned in `width` bytes, padded with `fill` (see
/// [`Template::with_field`]).
#[derive(Clone, Copy, Debug)]
struct Field {
    at: usize,
    width: usize,
    modulus: u64,
    fill: u8,
}

impl Template {
    /// `{method} {path} HTTP/1.1` with a body; every occurrence of `marker`
    /// (exactly `SEQ_DIGITS` bytes) in the path or body becomes a patch point.
    pub fn new(method: &str, host: &str, path: &str, content_type: &str, body: &[u8], marker: &[u8]) -> Result<Self> {
        // The same credential the reqwest client sends (client.rs), so the
        // raw driver works against a server with access control too.
        let auth = std::env::var("DS_LOAD_AUTHORIZATION").ok().filter(|a| !a.is_empty());
        Self::build(method, host, path, content_type, body, marker, auth.as_deref())
    }

    fn build(
        method: &str,
        host: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
        marker: &[u8],
        authorization: Option<&str>,
    ) -> Result<Self> {
        let mut headers = vec![("content-type", content_type)];
        if let Some(a) = authorization {
            headers.insert(0, ("authorization", a));
        }
        Self::with_headers(method, host, path, &headers, body, marker)
    }

    /// A request with exactly these headers (besides host and
    /// content-length), for APIs other than the protocol's (the AWS
    /// emulator's JSON calls).
    pub fn with_headers(
        method: &str,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        marker: &[u8],
    ) -> Result<Self> {
        if marker.len() != SEQ_DIGITS {
            bail!("patch marker must be {SEQ_DIGITS} bytes");
        }
        let lines: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
        let mut bytes =
            format!("{method} {path} HTTP/1.1\r\nhost: {host}\r\n{lines}content-length: {}\r\n\r\n", body.len())
                .into_bytes();
        bytes.extend_from_slice(body);
        let patches: Vec<usize> =
            bytes.windows(SEQ_DIGITS).enumerate().filter(|(_, w)| *w == marker).map(|(i, _)| i).collect();
        Ok(Self { bytes, patches, fields: Vec::new() })
    }

    /// Also rewrites every occurrence of `marker` in the body with
    /// `seq % modulus`, right-aligned in the marker's width and padded with
    /// `fill`: `b'0'`, or `b' '` where leading zeros are not allowed (a JSON
    /// number).
    pub fn with_field(mut self, marker: &[u8], modulus: u64, fill: u8) -> Result<Self> {
        let width = marker.len();
        if modulus == 0 || (modulus - 1).to_string().len() > width {
            bail!("a field of {width} bytes cannot hold every value below {modulus}");
        }
        let body = self.bytes.windows(4).position(|w| w == b"\r\n\r\n").map_or(0, |at| at + 4);
        let found: Vec<usize> = self.bytes[body..]
            .windows(width)
            .enumerate()
            .filter(|(_, w)| *w == marker)
            .map(|(i, _)| body + i)
            .collect();
        self.fields.extend(found.into_iter().map(|at| Field { at, width, modulus, fill }));
        Ok(self)
    }

    /// Writes `seq` (zero-padded) into every patch point, and each field's
    /// value of it into the field.
    pub fn set_seq(&mut self, seq: u64) {
        let mut digits = [b'0'; SEQ_DIGITS];
        let mut rest = seq;
        for d in digits.iter_mut().rev() {
            *d = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        for &at in &self.patches {
            self.bytes[at..at + SEQ_DIGITS].copy_from_slice(&digits);
        }
        for f in &self.fields {
            let mut v = seq % f.modulus;
            for (i, d) in self.bytes[f.at..f.at + f.width].iter_mut().rev().enumerate() {
                *d = if i == 0 || v > 0 { b'0' + (v % 10) as u8 } else { f.fill };
                v /= 10;
            }
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// The `authorization` header line (or nothing) requests carry.
fn auth_line(authorization: Option<&str>) -> String {
    authorization.map(|a| format!("authorization: {a}\r\n")).unwrap_or_default()
}

/// A `GET` of `path_and_query`, with the credential [`Template::new`] uses.
pub fn get_request(host: &str, path_and_query: &str) -> Vec<u8> {
    let auth = std::env::var("DS_LOAD_AUTHORIZATION").ok().filter(|a| !a.is_empty());
    format!("GET {path_and_query} HTTP/1.1\r\nhost: {host}\r\n{}\r\n", auth_line(auth.as_deref())).into_bytes()
}

/// A whole response, body kept: what a catch-up reader needs.
#[derive(Debug)]
pub struct Fetched {
    pub status: u16,
    pub next_offset: Option<String>,
    pub up_to_date: bool,
    pub body: Vec<u8>,
}

/// What the workloads check of a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    /// The response carried `Stream-Next-Offset`.
    pub next_offset: bool,
}

/// One keep-alive connection; reconnects if the server closed it.
pub struct Conn {
    addr: SocketAddr,
    stream: Option<TcpStream>,
    buf: Vec<u8>,
    /// Bytes of `buf` holding data not consumed yet.
    filled: usize,
}

const MAX_HEADERS: usize = 32;
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

impl Conn {
    pub fn new(addr: SocketAddr) -> Self {
        Self { addr, stream: None, buf: vec![0; 16 * 1024], filled: 0 }
    }

    async fn stream(&mut self) -> Result<&mut TcpStream> {
        if self.stream.is_none() {
            let s = TcpStream::connect(self.addr).await.with_context(|| format!("connecting to {}", self.addr))?;
            s.set_nodelay(true)?;
            self.stream = Some(s);
            self.filled = 0;
        }
        self.stream.as_mut().ok_or_else(|| anyhow!("no connection"))
    }

    /// Sends one request and reads its whole response (the body is
    /// discarded: the throughput workloads verify by reading streams back).
    pub async fn exchange(&mut self, request: &[u8]) -> Result<Reply> {
        self.stream().await?.write_all(request).await.context("sending the request")?;
        let head = self.read_head().await?;
        self.consume(head.len);
        match head.body {
            Body::None => {}
            Body::Length(n) => self.skip(n).await?,
            Body::Chunked => self.skip_chunked(None).await?,
        }
        if head.close {
            self.stream = None;
        }
        Ok(head.reply)
    }

    /// Connects now (so that a timed request does not include it).
    pub async fn connect(&mut self) -> Result<()> {
        self.stream().await.map(|_| ())
    }

    /// Sends one request and returns its whole response, body included,
    /// read straight into one buffer of the announced length.
    pub async fn fetch(&mut self, request: &[u8]) -> Result<Fetched> {
        self.stream().await?.write_all(request).await.context("sending the request")?;
        let head = self.read_head().await?;
        let next_offset = head.next_offset.map(|r| String::from_utf8_lossy(&self.buf[r]).into_owned());
        self.consume(head.len);
        let mut body = Vec::new();
        match head.body {
            Body::None => {}
            Body::Length(n) => self.take(n, &mut body).await?,
            Body::Chunked => self.skip_chunked(Some(&mut body)).await?,
        }
        if head.close {
            self.stream = None;
        }
        Ok(Fetched { status: head.reply.status, next_offset, up_to_date: head.up_to_date, body })
    }

    async fn read_head(&mut self) -> Result<Head> {
        loop {
            if let Some(head) = parse_head(&self.buf[..self.filled])? {
                return Ok(head);
            }
            if self.filled == self.buf.len() {
                if self.buf.len() >= MAX_RESPONSE_HEAD {
                    bail!("response head larger than {MAX_RESPONSE_HEAD} bytes");
                }
                self.buf.resize(self.buf.len() * 2, 0);
            }
            self.read_more().await?;
        }
    }

    async fn read_more(&mut self) -> Result<()> {
        let filled = self.filled;
        let stream = self.stream.as_mut().ok_or_else(|| anyhow!("no connection"))?;
        let n = stream.read(&mut self.buf[filled..]).await.context("reading the response")?;
        if n == 0 {
            self.stream = None;
            bail!("connection closed by the server mid-response");
        }
        self.filled += n;
        Ok(())
    }

    fn consume(&mut self, n: usize) {
        self.buf.copy_within(n..self.filled, 0);
        self.filled -= n;
    }

    /// Appends the next `n` body bytes to `out`: what is buffered, then
    /// reads from the socket into `out` itself (no copy through `buf`).
    async fn take(&mut self, n: usize, out: &mut Vec<u8>) -> Result<()> {
        let buffered = n.min(self.filled);
        out.reserve_exact(n);
        out.extend_from_slice(&self.buf[..buffered]);
        self.consume(buffered);
        let end = out.len() + (n - buffered);
        while out.len() < end {
            let stream = self.stream.as_mut().ok_or_else(|| anyhow!("no connection"))?;
            let want = end - out.len();
            let read = stream.read_buf(&mut (&mut *out).limit(want)).await.context("reading the response")?;
            if read == 0 {
                self.stream = None;
                bail!("connection closed by the server mid-response");
            }
        }
        Ok(())
    }

    async fn skip(&mut self, mut n: usize) -> Result<()> {
        loop {
            let take = n.min(self.filled);
            self.consume(take);
            n -= take;
            if n == 0 {
                return Ok(());
            }
            self.read_more().await?;
        }
    }

    /// Reads a chunked body: kept in `out` if given, else discarded.
    async fn skip_chunked(&mut self, mut out: Option<&mut Vec<u8>>) -> Result<()> {
        loop {
            let (head, size) = loop {
                match httparse::parse_chunk_size(&self.buf[..self.filled]) {
                    Ok(httparse::Status::Complete((head, size))) => break (head, size as usize),
                    Ok(httparse::Status::Partial) => self.read_more().await?,
                    Err(_) => bail!("bad chunk size line"),
                }
            };
            self.consume(head);
            // Chunk data and its CRLF; the last chunk (size 0) ends with an
            // empty trailer line (servers here send no trailers).
            match out.as_deref_mut() {
                Some(out) => {
                    self.take(size, out).await?;
                    self.skip(2).await?;
                }
                None => self.skip(size + 2).await?,
            }
            if size == 0 {
                return Ok(());
            }
        }
    }
}

enum Body {
    None,
    Length(usize),
    Chunked,
}

/// A parsed response head.
struct Head {
    reply: Reply,
    /// Its length in the buffer.
    len: usize,
    body: Body,
    /// The server closes the connection after this response.
    close: bool,
    /// Where the `Stream-Next-Offset` value lies in the buffer.
    next_offset: Option<std::ops::Range<usize>>,
    up_to_date: bool,
}

/// Parses a complete response head (no allocation: values are located, not
/// copied).
fn parse_head(buf: &[u8]) -> Result<Option<Head>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(buf).map_err(|e| anyhow!("bad response head: {e}"))? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return Ok(None),
    };
    let status = resp.code.ok_or_else(|| anyhow!("no status code"))?;
    let (mut length, mut chunked, mut close, mut next_offset, mut up_to_date) = (None, false, false, None, false);
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value).ok().and_then(|v| v.trim().parse::<usize>().ok());
            length = Some(v.ok_or_else(|| anyhow!("bad content-length"))?);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = h.value.eq_ignore_ascii_case(b"chunked");
        } else if h.name.eq_ignore_ascii_case("connection") {
            close = h.value.eq_ignore_ascii_case(b"close");
        } else if h.name.eq_ignore_ascii_case("stream-next-offset") {
            let at = h.value.as_ptr() as usize - buf.as_ptr() as usize;
            next_offset = Some(at..at + h.value.len());
        } else if h.name.eq_ignore_ascii_case("stream-up-to-date") {
            up_to_date = h.value.eq_ignore_ascii_case(b"true");
        }
    }
    let body = if status == 204 || status == 304 || (100..200).contains(&status) {
        Body::None
    } else if chunked {
        Body::Chunked
    } else if let Some(n) = length {
        Body::Length(n)
    } else {
        bail!("HTTP {status} response without a length (close-delimited bodies are not supported)");
    };
    let reply = Reply { status, next_offset: next_offset.is_some() };
    Ok(Some(Head { reply, len: head_len, body, close, next_offset, up_to_date }))
}

/// `127.0.0.1:port` of an `http://127.0.0.1:port` base URL.
pub fn socket_addr(base: &str) -> Result<SocketAddr> {
    let host = base.trim_start_matches("http://").trim_end_matches('/');
    host.parse().with_context(|| format!("{base} is not http://<ip>:<port>"))
}

/// Acknowledged requests per connection, and how long the run took (until
/// the last in-flight request was answered).
#[derive(Debug)]
pub struct Run {
    pub acked: Vec<u64>,
    pub elapsed: Duration,
    /// Send → whole answer of every acknowledged request, in µs (only when
    /// the run was asked to time them: see [`drive_each`]).
    pub latencies_us: Vec<f64>,
}

impl Run {
    pub fn rate(&self) -> f64 {
        self.acked.iter().sum::<u64>() as f64 / self.elapsed.as_secs_f64()
    }
}

/// Drives one connection per template until `duration` has passed, each
/// sending its next request as soon as the previous one is answered, on
/// `threads` OS threads with a single-threaded runtime each (like wrk's
/// `-t`). `check` judges every reply; the first failure stops that
/// connection and fails the run after the others finish.
pub async fn drive(
    addr: SocketAddr,
    templates: Vec<Template>,
    duration: Duration,
    threads: usize,
    check: fn(&Reply) -> Result<()>,
) -> Result<Run> {
    let targets = templates.into_iter().map(|t| (addr, t)).collect();
    drive_each(targets, duration, threads, check, false).await
}

/// [`drive`] with each connection to its own address (several server
/// processes), and with every request's latency kept when `timed`.
pub async fn drive_each(
    targets: Vec<(SocketAddr, Template)>,
    duration: Duration,
    threads: usize,
    check: fn(&Reply) -> Result<()>,
    timed: bool,
) -> Result<Run> {
    let n = targets.len();
    let threads = threads.clamp(1, n.max(1));
    let start = Instant::now();
    let deadline = start + duration;
    let mut groups: Vec<Vec<(usize, SocketAddr, Template)>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, (addr, t)) in targets.into_iter().enumerate() {
        groups[i % threads].push((i, addr, t));
    }
    type Outcome = (usize, u64, Option<anyhow::Error>, Vec<f64>);
    let handles: Vec<_> = groups
        .into_iter()
        .map(|group| {
            std::thread::spawn(move || -> Result<Vec<Outcome>> {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                Ok(rt.block_on(futures::future::join_all(group.into_iter().map(|(i, addr, t)| async move {
                    let (acked, err, lat) = one_connection(addr, t, deadline, check, timed).await;
                    (i, acked, err, lat)
                }))))
            })
        })
        .collect();
    let mut acked = vec![0u64; n];
    let mut errors = Vec::new();
    let mut latencies_us = Vec::new();
    for h in handles {
        let joined = tokio::task::spawn_blocking(move || h.join()).await?;
        let results = joined.map_err(|_| anyhow!("a load thread panicked"))??;
        for (i, a, e, lat) in results {
            acked[i] = a;
            errors.extend(e);
            latencies_us.extend(lat);
        }
    }
    let elapsed = start.elapsed();
    if let Some(first) = errors.first() {
        bail!("{} of {n} connections saw a failed request; first: {first:#}", errors.len());
    }
    Ok(Run { acked, elapsed, latencies_us })
}

async fn one_connection(
    addr: SocketAddr,
    mut t: Template,
    deadline: Instant,
    check: fn(&Reply) -> Result<()>,
    timed: bool,
) -> (u64, Option<anyhow::Error>, Vec<f64>) {
    let mut conn = Conn::new(addr);
    let mut acked = 0u64;
    let mut lat = Vec::new();
    while Instant::now() < deadline {
        t.set_seq(acked + 1);
        let sent = timed.then(Instant::now);
        match conn.exchange(t.bytes()).await.and_then(|r| check(&r)) {
            Ok(()) => acked += 1,
            Err(e) => return (acked, Some(e), lat),
        }
        if let Some(sent) = sent {
            lat.push(sent.elapsed().as_secs_f64() * 1e6);
        }
    }
    (acked, None, lat)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_every_marker() {
        let mut t =
            Template::new("PUT", "h", "/s/x-XXXXXXXXXXXX", "text/plain", b"body XXXXXXXXXXXX.", b"XXXXXXXXXXXX")
                .expect("template");
        t.set_seq(42);
        let text = String::from_utf8(t.bytes().to_vec()).expect("utf8");
        assert!(text.starts_with("PUT /s/x-000000000042 HTTP/1.1\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nbody 000000000042."), "{text}");
        assert!(text.contains("content-length: 18\r\n"), "{text}");
    }

    #[test]
    fn patches_fields_modulo() {
        let t = Template::new("POST", "h", "/s/KK", "text/plain", b"k=KK v=VVVV s=XXXXXXXXXXXX", b"XXXXXXXXXXXX");
        let mut t =
            t.and_then(|t| t.with_field(b"KK", 100, b'0')?.with_field(b"VVVV", 10_000, b' ')).expect("template");
        t.set_seq(1207);
        let text = String::from_utf8(t.bytes().to_vec()).expect("utf8");
        assert!(text.starts_with("POST /s/KK HTTP/1.1\r\n"), "only the body is patched: {text}");
        assert!(text.ends_with("\r\n\r\nk=07 v=1207 s=000000001207"), "{text}");
        t.set_seq(5);
        assert!(String::from_utf8_lossy(t.bytes()).ends_with("k=05 v=   5 s=000000000005"));
        assert!(Template::new("POST", "h", "/", "t", b"KK", b"XXXXXXXXXXXX")
            .expect("t")
            .with_field(b"KK", 101, b'0')
            .is_err());
    }

    #[test]
    fn carries_the_credential() {
        let t = Template::build("POST", "h", "/s/x", "text/plain", b"b", b"XXXXXXXXXXXX", Some("Bearer abc"))
            .expect("template");
        let text = String::from_utf8(t.bytes().to_vec()).expect("utf8");
        assert!(text.contains("\r\nauthorization: Bearer abc\r\n"), "{text}");
        let t = Template::build("POST", "h", "/s/x", "text/plain", b"b", b"XXXXXXXXXXXX", None).expect("template");
        assert!(!String::from_utf8_lossy(t.bytes()).contains("authorization"));
    }

    #[test]
    fn parses_heads() {
        let head = b"HTTP/1.1 204 No Content\r\nStream-Next-Offset: 1\r\n\r\n";
        let with_more = [&head[..], b"rest"].concat();
        let h = parse_head(&with_more).expect("ok").expect("complete");
        assert_eq!(h.reply, Reply { status: 204, next_offset: true });
        assert_eq!(h.len, head.len(), "the head ends where the next bytes begin");
        assert!(matches!(h.body, Body::None) && !h.close && !h.up_to_date);
        assert_eq!(h.next_offset.map(|r| &with_more[r]), Some(&b"1"[..]));
        let h =
            parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\nstream-up-to-date: true\r\n\r\n")
                .expect("ok")
                .expect("complete");
        assert!(matches!(h.body, Body::Length(5)) && h.close && h.up_to_date);
        assert!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-le").expect("ok").is_none());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\n\r\n").is_err(), "close-delimited body refused");
    }

    /// Serves `responses` in order, one per request read, on one connection.
    async fn canned(responses: Vec<Vec<u8>>) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            for resp in responses {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                // In two writes, so the reader sees the body arrive in parts.
                let (a, b) = resp.split_at(resp.len() / 2);
                s.write_all(a).await.expect("write");
                tokio::time::sleep(Duration::from_millis(5)).await;
                s.write_all(b).await.expect("write");
            }
        });
        addr
    }

    #[tokio::test]
    async fn fetches_whole_bodies_by_length_and_chunked() {
        let body = vec![b'x'; 100_000];
        let mut by_length = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nstream-next-offset: 0_7\r\nstream-up-to-date: true\r\n\r\n",
            body.len()
        )
        .into_bytes();
        by_length.extend_from_slice(&body);
        let chunked =
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nstream-next-offset: 9\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
                .to_vec();
        let mut conn = Conn::new(canned(vec![by_length, chunked]).await);
        let request = get_request("h", "/s?offset=-1");
        let got = conn.fetch(&request).await.expect("fetch");
        assert_eq!((got.status, got.up_to_date), (200, true));
        assert_eq!(got.next_offset.as_deref(), Some("0_7"));
        assert_eq!(got.body, body);
        let got = conn.fetch(&request).await.expect("fetch");
        assert_eq!((got.next_offset.as_deref(), got.up_to_date), (Some("9"), false));
        assert_eq!(got.body, b"abcde");
    }
}
