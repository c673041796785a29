//! The protocol client: create, append, catch-up read and long-poll, with the
//! status checks the verification relies on. Any unexpected status is an
//! error, so a workload that sees one fails instead of counting it.

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use reqwest::{header::HeaderMap, StatusCode};
use std::time::Duration;

pub const NEXT_OFFSET: &str = "stream-next-offset";
pub const UP_TO_DATE: &str = "stream-up-to-date";
pub const CURSOR: &str = "stream-cursor";

/// Content type of the streams the workloads create. P3 uses text/plain so
/// that SSE data events carry the records verbatim (binary streams would be
/// base64 in SSE; `sse` handles that too, but text keeps peers comparable).
pub const BINARY: &str = "application/octet-stream";
pub const TEXT: &str = "text/plain";
/// P1's JSON event streams (the inline-processor benchmarks).
pub const JSON: &str = "application/json";

/// Upper bound on responses for one catch-up read: a server that never says
/// `Stream-Up-To-Date` must fail, not hang the bench.
const MAX_READ_RESPONSES: usize = 1_000_000;

/// Where a server's streams live: `{base}{prefix}/{name}`.
#[derive(Clone, Debug)]
pub struct Target {
    pub base: String,
    pub prefix: String,
}

impl Target {
    pub fn new(base: &str, prefix: &str) -> Self {
        Self { base: base.trim_end_matches('/').to_string(), prefix: prefix.trim_end_matches('/').to_string() }
    }

    pub fn url(&self, name: &str) -> String {
        format!("{}{}/{}", self.base, self.prefix, name)
    }
}

/// Result of a catch-up read of a whole stream.
pub struct ReadAll {
    pub body: Vec<u8>,
    pub responses: usize,
    pub next_offset: String,
}

/// One long-poll answer.
pub struct Poll {
    pub status: StatusCode,
    pub body: Bytes,
    pub next_offset: String,
    pub cursor: Option<String>,
}

#[derive(Clone)]
pub struct Client {
    pub http: reqwest::Client,
    pub target: Target,
}

impl Client {
    /// `DS_LOAD_AUTHORIZATION`, when set, is sent as the `Authorization`
    /// header of every request (a server with access control on).
    pub fn new(target: Target) -> Result<Self> {
        let mut headers = HeaderMap::new();
        if let Ok(auth) = std::env::var("DS_LOAD_AUTHORIZATION") {
            headers.insert(reqwest::header::AUTHORIZATION, auth.parse().context("DS_LOAD_AUTHORIZATION")?);
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .tcp_nodelay(true)
            // Long-polls wait up to the server's timeout (20 s for ours and the
            // Node server); anything slower than this is a failure.
            .timeout(Duration::from_secs(60))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self { http, target })
    }

    /// PUT: create the stream (201, or 200 if it already exists identically).
    pub async fn create(&self, name: &str, content_type: &str, body: Option<Bytes>) -> Result<()> {
        let mut req = self.http.put(self.target.url(name)).header("content-type", content_type);
        if let Some(b) = body {
            req = req.body(b);
        }
        let resp = req.send().await.with_context(|| format!("PUT {name}"))?;
        let status = resp.status();
        if status != StatusCode::CREATED && status != StatusCode::OK {
            bail!("PUT {name}: HTTP {status}: {}", snippet(resp).await);
        }
        Ok(())
    }

    /// POST one append; success is any 2xx that carries `Stream-Next-Offset`
    /// (the spec says 204; the header is how the writer learns the tail).
    pub async fn append(&self, name: &str, content_type: &str, body: Bytes) -> Result<String> {
        let resp = self
            .http
            .post(self.target.url(name))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .with_context(|| format!("POST {name}"))?;
        let status = resp.status();
        if !status.is_success() {
            bail!("POST {name}: HTTP {status}: {}", snippet(resp).await);
        }
        let next = header(resp.headers(), NEXT_OFFSET)
            .ok_or_else(|| anyhow!("POST {name}: HTTP {status} without Stream-Next-Offset"))?;
        // Drain the (normally empty) body so the connection goes back to the pool.
        resp.bytes().await?;
        Ok(next)
    }

    /// Catch-up read from the start, following `Stream-Next-Offset` until
    /// `Stream-Up-To-Date: true`.
    pub async fn read_all(&self, name: &str) -> Result<ReadAll> {
        self.read_from(name, "-1").await
    }

    pub async fn read_from(&self, name: &str, start: &str) -> Result<ReadAll> {
        let mut offset = start.to_string();
        let mut body = Vec::new();
        for responses in 1..=MAX_READ_RESPONSES {
            let url = self.offset_url(name, &offset, None, None)?;
            let resp = self.http.get(url).send().await.with_context(|| format!("GET {name}"))?;
            let status = resp.status();
            if status != StatusCode::OK {
                bail!("GET {name}?offset={offset}: HTTP {status}: {}", snippet(resp).await);
            }
            let next =
                header(resp.headers(), NEXT_OFFSET).ok_or_else(|| anyhow!("GET {name}: no Stream-Next-Offset"))?;
            let done = header(resp.headers(), UP_TO_DATE).as_deref() == Some("true");
            let chunk = resp.bytes().await?;
            if !done && chunk.is_empty() && next == offset {
                bail!("GET {name}?offset={offset}: no data, same offset, and not up to date");
            }
            body.extend_from_slice(&chunk);
            offset = next;
            if done {
                return Ok(ReadAll { body, responses, next_offset: offset });
            }
        }
        bail!("GET {name}: not up to date after {MAX_READ_RESPONSES} responses")
    }

    /// One long-poll request from `offset`.
    pub async fn long_poll(&self, name: &str, offset: &str, cursor: Option<&str>) -> Result<Poll> {
        let url = self.offset_url(name, offset, Some("long-poll"), cursor)?;
        let resp = self.http.get(url).send().await.with_context(|| format!("long-poll {name}"))?;
        let status = resp.status();
        if status != StatusCode::OK && status != StatusCode::NO_CONTENT {
            bail!("long-poll {name}?offset={offset}: HTTP {status}: {}", snippet(resp).await);
        }
        let next_offset = header(resp.headers(), NEXT_OFFSET)
            .ok_or_else(|| anyhow!("long-poll {name}: HTTP {status} without Stream-Next-Offset"))?;
        let cursor = header(resp.headers(), CURSOR);
        let body = resp.bytes().await?;
        Ok(Poll { status, body, next_offset, cursor })
    }

    /// `{stream}?offset=..[&live=..][&cursor=..]`, offset URL-encoded as the
    /// spec requires of clients (offsets are opaque).
    pub fn offset_url(
        &self,
        name: &str,
        offset: &str,
        live: Option<&str>,
        cursor: Option<&str>,
    ) -> Result<reqwest::Url> {
        let mut url = reqwest::Url::parse(&self.target.url(name))?;
        {
            let mut q = url.query_pairs_mut();
            if let Some(c) = cursor {
                q.append_pair("cursor", c);
            }
            if let Some(l) = live {
                q.append_pair("live", l);
            }
            q.append_pair("offset", offset);
        }
        Ok(url)
    }
}

pub fn header(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// First bytes of an error body, for failure messages.
async fn snippet(resp: reqwest::Response) -> String {
    let body = resp.bytes().await.unwrap_or_default();
    String::from_utf8_lossy(&body[..body.len().min(200)]).trim().to_string()
}
