//! A protocol client that records every operation it makes: invocation
//! right before the request, completion right after the answer (or the
//! error that stands for its absence), and what the answer said.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ds_protocol::offset::Offset;
use rand::Rng;
use reqwest::header::HeaderMap;

use crate::history::{segment, Answer, Call, OpId, Outcome, Pos, ProducerTag, ReadMode, RecordKey, Recorder, Segment};

const OCTET: &str = "application/octet-stream";

/// Where requests go: one of the servers, each time.
pub trait Route: Send + Sync {
    fn base(&self) -> String;
}

/// Any of these servers, at random (several servers on one AWS store).
pub struct Servers(pub Vec<String>);

impl Route for Servers {
    fn base(&self) -> String {
        self.0[rand::thread_rng().gen_range(0..self.0.len())].clone()
    }
}

/// One server whose address changes when it restarts.
#[derive(Default)]
pub struct Restarting(pub RwLock<String>);

impl Route for Restarting {
    fn base(&self) -> String {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// Settings shared by a campaign's clients.
pub struct Shared {
    pub recorder: Arc<Recorder>,
    pub route: Arc<dyn Route>,
    pub http: reqwest::Client,
    /// Requests sent and not yet answered.
    pub in_flight: AtomicUsize,
    /// How long an SSE read listens.
    pub sse_for: Duration,
}

impl Shared {
    pub fn new(route: Arc<dyn Route>, timeout: Duration) -> Self {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(3))
            .pool_idle_timeout(Duration::from_secs(20))
            .build()
            .expect("building the HTTP client");
        Self {
            recorder: Arc::new(Recorder::default()),
            route,
            http,
            in_flight: AtomicUsize::new(0),
            sse_for: Duration::from_millis(1500),
        }
    }
}

/// `0000…_{pos}`: our offsets are positions.
pub fn token(pos: Pos) -> String {
    Offset(pos).to_string()
}

fn header(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

fn position(h: &HeaderMap) -> Option<Pos> {
    header(h, "stream-next-offset").and_then(|t| Offset::parse(&t).ok()).map(Offset::position)
}

fn flag(h: &HeaderMap, name: &str) -> bool {
    header(h, name).is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// An answer that is not success.
fn fail(status: u16, h: &HeaderMap, body: &[u8]) -> Outcome {
    let mut detail = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
    for name in ["producer-epoch", "producer-expected-seq", "producer-received-seq"] {
        if let Some(v) = header(h, name) {
            detail.push_str(&format!(" {name}={v}"));
        }
    }
    Outcome::Fail { status, closed: flag(h, "stream-closed"), detail }
}

/// A 2xx without the offset it must carry.
fn no_offset(status: u16) -> Outcome {
    Outcome::Fail { status, closed: false, detail: "success without a valid Stream-Next-Offset".into() }
}

/// One client: its operations are sequential.
pub struct Client {
    pub id: u32,
    pub shared: Arc<Shared>,
}

impl Client {
    fn url(&self, stream: &str) -> String {
        format!("{}/v1/stream/{stream}", self.shared.route.base())
    }

    /// Send, read the whole answer, record the operation.
    async fn run(
        &self,
        call: Call,
        req: reqwest::RequestBuilder,
        judge: impl FnOnce(u16, &HeaderMap, &[u8]) -> Outcome,
    ) -> (OpId, Outcome) {
        let rec = &self.shared.recorder;
        let invoked = rec.invoke(self.id, call);
        self.shared.in_flight.fetch_add(1, SeqCst);
        let answer = async {
            let resp = req.send().await?;
            let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
            let body = resp.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        }
        .await;
        self.shared.in_flight.fetch_sub(1, SeqCst);
        let outcome = match answer {
            Ok((status, headers, body)) => judge(status, &headers, &body),
            Err(e) => Outcome::Unknown(format!("{e:#}")),
        };
        (rec.complete(invoked, outcome.clone()), outcome)
    }

    pub async fn create(&self, stream: &str) -> Outcome {
        let req = self.shared.http.put(self.url(stream)).header("content-type", OCTET);
        self.run(Call::Create { stream: stream.into() }, req, created).await.1
    }

    pub async fn fork(&self, stream: &str, source: &str, at: Pos) -> Outcome {
        let req = self
            .shared
            .http
            .put(self.url(stream))
            .header("content-type", OCTET)
            .header("stream-forked-from", format!("/v1/stream/{source}"))
            .header("stream-fork-offset", token(at));
        let call = Call::Fork { stream: stream.into(), source: source.into(), at };
        self.run(call, req, created).await.1
    }

    /// Append record `record`, as producer `p{writer}` when `producer` is given.
    pub async fn append(
        &self,
        stream: &str,
        record: RecordKey,
        producer: Option<ProducerTag>,
        zombie: bool,
    ) -> Outcome {
        let mut req = self
            .shared
            .http
            .post(self.url(stream))
            .header("content-type", OCTET)
            .body(ds_e2e::record::encode(record.writer, record.seq));
        if let Some(tag) = producer {
            req = req
                .header("producer-id", format!("p{}", record.writer))
                .header("producer-epoch", tag.epoch.to_string())
                .header("producer-seq", tag.seq.to_string());
        }
        let call = Call::Append { stream: stream.into(), record, producer, zombie };
        let judge = |status: u16, h: &HeaderMap, body: &[u8]| match (status, position(h)) {
            (200..=299, Some(next)) => Outcome::Ok(Answer::Appended { status, next, closed: flag(h, "stream-closed") }),
            (200..=299, None) => no_offset(status),
            _ => fail(status, h, body),
        };
        self.run(call, req, judge).await.1
    }

    pub async fn close(&self, stream: &str) -> Outcome {
        let req = self.shared.http.post(self.url(stream)).header("stream-closed", "true");
        let judge = |status: u16, h: &HeaderMap, body: &[u8]| match (status, position(h)) {
            (200..=299, Some(next)) => Outcome::Ok(Answer::Closed { next }),
            (200..=299, None) => no_offset(status),
            _ => fail(status, h, body),
        };
        self.run(Call::Close { stream: stream.into() }, req, judge).await.1
    }

    pub async fn head(&self, stream: &str) -> Outcome {
        let req = self.shared.http.head(self.url(stream));
        let judge = |status: u16, h: &HeaderMap, body: &[u8]| match (status, position(h)) {
            (200, Some(tail)) => Outcome::Ok(Answer::Head { tail, closed: flag(h, "stream-closed") }),
            (200, None) => no_offset(status),
            _ => fail(status, h, body),
        };
        self.run(Call::Head { stream: stream.into() }, req, judge).await.1
    }

    /// A catch-up (`mode` CatchUp) or long-poll read at `from`.
    pub async fn read(&self, stream: &str, from: Pos, mode: ReadMode) -> Outcome {
        if mode == ReadMode::Sse {
            return self.sse(stream, from).await;
        }
        let mut url = format!("{}?offset={}", self.url(stream), token(from));
        if mode == ReadMode::LongPoll {
            url.push_str("&live=long-poll");
        }
        let req = self.shared.http.get(url);
        let judge = move |status: u16, h: &HeaderMap, body: &[u8]| match (status, position(h)) {
            (200 | 204, Some(next)) => {
                let seg = segment(from, body, next, flag(h, "stream-up-to-date"), flag(h, "stream-closed"));
                Outcome::Ok(Answer::Read { segments: vec![seg] })
            }
            (200 | 204, None) => no_offset(status),
            _ => fail(status, h, body),
        };
        self.run(Call::Read { stream: stream.into(), mode, from }, req, judge).await.1
    }

    /// Listen to `live=sse` at `from` for a while: each control event ends
    /// a segment (with the data event before it, if any).
    async fn sse(&self, stream: &str, from: Pos) -> Outcome {
        use ds_load::sse::{Event, SseReader};
        let rec = &self.shared.recorder;
        let invoked = rec.invoke(self.id, Call::Read { stream: stream.into(), mode: ReadMode::Sse, from });
        let target = ds_load::client::Target::new(&self.shared.route.base(), "/v1/stream");
        let load_client = ds_load::client::Client { http: self.shared.http.clone(), target };
        self.shared.in_flight.fetch_add(1, SeqCst);
        let mut segments: Vec<Segment> = Vec::new();
        let listen = async {
            let mut reader = SseReader::open(&load_client, stream, &token(from)).await?;
            let (mut pos, mut data) = (from, Vec::new());
            while let Some(event) = reader.next_event().await? {
                match event {
                    Event::Data(bytes) => data.extend_from_slice(&bytes),
                    Event::Control(c) => {
                        let next = c["streamNextOffset"]
                            .as_str()
                            .and_then(|t| Offset::parse(t).ok())
                            .ok_or_else(|| anyhow::anyhow!("control event without a valid streamNextOffset: {c}"))?
                            .position();
                        let up_to_date = c["upToDate"] == true || c["streamClosed"] == true;
                        segments.push(segment(pos, &data, next, up_to_date, c["streamClosed"] == true));
                        (pos, data) = (next, Vec::new());
                    }
                }
            }
            anyhow::Ok(())
        };
        // Listening ends by the clock (the usual way), the server, or an error.
        let ended = match tokio::time::timeout(self.shared.sse_for, listen).await {
            Ok(Err(e)) => Some(format!("{e:#}")),
            Ok(Ok(())) | Err(_) => None,
        };
        self.shared.in_flight.fetch_sub(1, SeqCst);
        let outcome = match (ended, segments.is_empty()) {
            (Some(why), true) => Outcome::Unknown(why),
            _ => Outcome::Ok(Answer::Read { segments }),
        };
        rec.complete(invoked, outcome.clone());
        outcome
    }
}

fn created(status: u16, h: &HeaderMap, body: &[u8]) -> Outcome {
    match status {
        200 | 201 => Outcome::Ok(Answer::Created { status }),
        _ => fail(status, h, body),
    }
}
