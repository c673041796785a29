//! Following a stream live over SSE (§5.8), resuming after every
//! disconnect from the last offset a `control` event confirmed.
//!
//! Exactly once across reconnects: a `data` event is handed out only with
//! the `control` event that follows it, which carries the offset after that
//! data. A connection lost between the two drops the data unseen, and the
//! next connection starts at the last confirmed offset and sends it again:
//! no gap, no duplicate.

use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use http_body_util::BodyExt;

use crate::error::Error;
use crate::retry::{Backoff, RetryPolicy};
use crate::sse::{Control, SseParser};
use crate::transport::{describe, status_error, Client};

/// Data confirmed by one `control` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The `data` events' payloads since the previous control, decoded (for
    /// a JSON stream each is a JSON array of messages).
    pub data: Vec<Bytes>,
    /// Where the next read starts: every byte before it has been handed out.
    pub next_offset: String,
    pub up_to_date: bool,
    /// The stream is closed and everything was handed out: the last batch.
    pub closed: bool,
}

type Body = hyper::body::Incoming;
type OnReconnect = Box<dyn FnMut(&Error, Duration) + Send>;

/// A live follower; [`Follow::next`] until it returns `Ok(None)`.
pub struct Follow {
    client: Client,
    path: String,
    offset: String,
    policy: RetryPolicy,
    on_reconnect: Option<OnReconnect>,
    conn: Option<Conn>,
    closed: bool,
    reconnects: u64,
}

struct Conn {
    body: Body,
    parser: SseParser,
    base64: bool,
    pending: Vec<Bytes>,
    ready: std::collections::VecDeque<Batch>,
}

impl Client {
    /// Follows `path` from `offset` (`-1`, `now`, or an offset a read gave).
    pub fn follow(&self, path: &str, offset: &str) -> Follow {
        Follow {
            client: self.clone(),
            path: path.to_owned(),
            offset: offset.to_owned(),
            policy: RetryPolicy::default(),
            on_reconnect: None,
            conn: None,
            closed: false,
            reconnects: 0,
        }
    }
}

impl Follow {
    /// How long to keep reconnecting without success before giving up.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Called with each failure that is followed by a reconnection, and the
    /// pause before it.
    pub fn on_reconnect(mut self, f: impl FnMut(&Error, Duration) + Send + 'static) -> Self {
        self.on_reconnect = Some(Box::new(f));
        self
    }

    /// The offset after everything handed out so far.
    pub fn offset(&self) -> &str {
        &self.offset
    }

    /// Connections made after the first (the server closed one, or it failed).
    pub fn reconnects(&self) -> u64 {
        self.reconnects
    }

    /// The next confirmed batch; `Ok(None)` once the stream is closed and
    /// all of it was handed out. An error is final: the stream is gone (404,
    /// 410), access was refused, or the server stayed unreachable longer
    /// than the retry policy allows.
    pub async fn next(&mut self) -> Result<Option<Batch>, Error> {
        let mut backoff = Backoff::new(self.policy);
        let mut connected_before = self.conn.is_some() || self.reconnects > 0;
        loop {
            if self.closed {
                return Ok(None);
            }
            if let Some(batch) = self.conn.as_mut().and_then(|c| c.ready.pop_front()) {
                self.offset.clone_from(&batch.next_offset);
                self.closed = batch.closed;
                if batch.closed {
                    self.conn = None;
                }
                return Ok(Some(batch));
            }
            let url = self.client_url()?;
            let step = match self.conn.as_mut() {
                Some(conn) => conn.read_more(&url).await,
                None => {
                    if connected_before {
                        self.reconnects += 1;
                    }
                    connected_before = true;
                    match self.connect().await {
                        Ok(conn) => {
                            self.conn = Some(conn);
                            Ok(true)
                        }
                        Err(e) => Err(e),
                    }
                }
            };
            match step {
                Ok(true) => backoff.reset(),
                // The server ended the response (it closes SSE connections
                // every minute or so): reconnect from the confirmed offset.
                Ok(false) => self.conn = None,
                Err(e) => {
                    self.conn = None;
                    let Some(pause) = backoff.next_delay(&e) else { return Err(e) };
                    if let Some(f) = &mut self.on_reconnect {
                        f(&e, pause);
                    }
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    fn client_url(&self) -> Result<url::Url, Error> {
        self.client.stream_url(&self.path)
    }

    async fn connect(&self) -> Result<Conn, Error> {
        let mut url = self.client_url()?;
        url.query_pairs_mut().append_pair("offset", &self.offset).append_pair("live", "sse");
        let mut headers = HeaderMap::new();
        headers.insert(http::header::ACCEPT, HeaderValue::from_static("text/event-stream"));
        let resp = self.client.send(Method::GET, &url, headers, Bytes::new()).await?;
        let (parts, body) = resp.into_parts();
        if !parts.status.is_success() {
            let text = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            return Err(status_error(&parts, &text, Method::GET, &url));
        }
        let base64 = parts
            .headers
            .get("stream-sse-data-encoding")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("base64"));
        Ok(Conn { body, parser: SseParser::default(), base64, pending: Vec::new(), ready: Default::default() })
    }
}

impl Conn {
    /// Reads one more piece of the body; `Ok(false)` at its end.
    async fn read_more(&mut self, url: &url::Url) -> Result<bool, Error> {
        let transport = |message: String| Error::Transport { method: Method::GET, url: url.to_string(), message };
        let protocol = |message: String| Error::Protocol { url: url.to_string(), message };
        let frame = match self.body.frame().await {
            None => return Ok(false),
            Some(Err(e)) => return Err(transport(describe(&e))),
            Some(Ok(frame)) => frame,
        };
        let Ok(bytes) = frame.into_data() else { return Ok(true) }; // trailers
        for event in self.parser.push(&bytes).map_err(protocol)? {
            match event.event.as_str() {
                "data" => {
                    let data = if self.base64 {
                        let text: String = event.data.chars().filter(|c| *c != '\n' && *c != '\r').collect();
                        base64::engine::general_purpose::STANDARD
                            .decode(text)
                            .map_err(|e| protocol(format!("a base64 data event that does not decode: {e}")))?
                    } else {
                        event.data.into_bytes()
                    };
                    self.pending.push(Bytes::from(data));
                }
                "control" => {
                    let c: Control = serde_json::from_str(&event.data)
                        .map_err(|e| protocol(format!("a control event that is not the protocol's JSON: {e}")))?;
                    self.ready.push_back(Batch {
                        data: std::mem::take(&mut self.pending),
                        next_offset: c.stream_next_offset,
                        up_to_date: c.up_to_date || c.stream_closed,
                        closed: c.stream_closed,
                    });
                }
                _ => {} // events a later protocol version may add
            }
        }
        Ok(true)
    }
}
