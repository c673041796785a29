//! Minimal Server-Sent Events reader for `live=sse` (PROTOCOL.md 5.8):
//! `data` events carry stream bytes (base64 when the server says
//! `stream-sse-data-encoding: base64`), `control` events carry JSON with
//! `streamNextOffset`.

use crate::client::{header, Client};
use anyhow::{bail, Context, Result};
use base64::Engine;
use reqwest::StatusCode;

pub enum Event {
    Data(Vec<u8>),
    Control(serde_json::Value),
}

pub struct SseReader {
    resp: reqwest::Response,
    buf: Vec<u8>,
    base64: bool,
}

impl SseReader {
    pub async fn open(client: &Client, name: &str, offset: &str) -> Result<Self> {
        let url = client.offset_url(name, offset, Some("sse"), None)?;
        // SSE responses stay open: no whole-request timeout on this one.
        let resp = client
            .http
            .get(url)
            .timeout(std::time::Duration::from_secs(3600))
            .send()
            .await
            .with_context(|| format!("SSE {name}"))?;
        if resp.status() != StatusCode::OK {
            bail!("SSE {name}?offset={offset}: HTTP {}", resp.status());
        }
        let ct = header(resp.headers(), "content-type").unwrap_or_default();
        if !ct.starts_with("text/event-stream") {
            bail!("SSE {name}: content-type {ct:?}, expected text/event-stream");
        }
        let base64 = header(resp.headers(), "stream-sse-data-encoding").as_deref() == Some("base64");
        Ok(Self { resp, buf: Vec::new(), base64 })
    }

    /// Next `data` or `control` event; `None` when the server closed the
    /// connection (the caller reconnects from the last control offset).
    pub async fn next_event(&mut self) -> Result<Option<Event>> {
        loop {
            if let Some((end, skip)) = find_boundary(&self.buf) {
                let raw: Vec<u8> = self.buf.drain(..end + skip).take(end).collect();
                if let Some(ev) = parse_event(&raw, self.base64)? {
                    return Ok(Some(ev));
                }
                continue;
            }
            match self.resp.chunk().await? {
                Some(chunk) => self.buf.extend_from_slice(&chunk),
                None => return Ok(None),
            }
        }
    }
}

/// Position of the blank line ending the first event, and its length.
fn find_boundary(buf: &[u8]) -> Option<(usize, usize)> {
    (0..buf.len()).find_map(|i| {
        if buf[i..].starts_with(b"\n\n") {
            Some((i, 2))
        } else if buf[i..].starts_with(b"\n\r\n") {
            Some((i, 3))
        } else {
            None
        }
    })
}

fn parse_event(raw: &[u8], base64: bool) -> Result<Option<Event>> {
    let text = std::str::from_utf8(raw).context("SSE event is not UTF-8")?;
    let mut kind = "message";
    let mut data: Vec<&str> = Vec::new();
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => kind = value,
            "data" => data.push(value),
            _ => {} // comments (": keep-alive"), id, retry
        }
    }
    match kind {
        "data" => {
            let bytes = if base64 {
                let joined: String = data.concat();
                base64::engine::general_purpose::STANDARD
                    .decode(joined.trim())
                    .context("bad base64 in SSE data event")?
            } else {
                data.join("\n").into_bytes()
            };
            Ok(Some(Event::Data(bytes)))
        }
        "control" => {
            let json = serde_json::from_str(&data.join("\n")).context("bad JSON in SSE control event")?;
            Ok(Some(Event::Control(json)))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_text_and_base64_events() {
        let ev = parse_event(b"event: data\r\ndata: abc\r\ndata: def", false).expect("parse");
        assert!(matches!(ev, Some(Event::Data(d)) if d == b"abc\ndef"));
        let ev = parse_event(b"event: data\ndata: aGVs\ndata: bG8=", true).expect("parse");
        assert!(matches!(ev, Some(Event::Data(d)) if d == b"hello"));
        let ev = parse_event(b"event: control\ndata: {\"streamNextOffset\":\"5\"}", false).expect("parse");
        assert!(matches!(ev, Some(Event::Control(v)) if v["streamNextOffset"] == "5"));
        assert!(parse_event(b": keep-alive", false).expect("parse").is_none());
    }

    #[test]
    fn finds_both_boundaries() {
        assert_eq!(find_boundary(b"a\n\nb"), Some((1, 2)));
        assert_eq!(find_boundary(b"a\r\n\r\nb"), Some((2, 3)));
        assert_eq!(find_boundary(b"a\nb"), None);
    }
}
