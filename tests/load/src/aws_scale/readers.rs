//! Idle readers: R long-poll or SSE readers parked at the tail of one stream,
//! spread over P server processes. Over an idle window the emulator counts
//! what they cost (DynamoDB reads and read units); then appends go to the
//! first process one at a time and every reader's wake is timed, from the
//! append being sent to the reader holding its record. Every reader must
//! end up with exactly the appended records, in order, and a catch-up read
//! must agree.

use super::emulator::{Counts, Emulator};
use crate::client::{Client, Target, TEXT};
use crate::record::{record, verify, RECORD_LEN};
use crate::sse::{Event, SseReader};
use crate::stats::percentile;
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use reqwest::StatusCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    LongPoll,
    Sse,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::LongPoll => "long-poll",
            Mode::Sse => "SSE",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        match s.trim() {
            "long-poll" | "longpoll" | "lp" => Ok(Mode::LongPoll),
            "sse" | "SSE" => Ok(Mode::Sse),
            other => bail!("reader mode {other:?} is not long-poll|sse"),
        }
    }
}

pub struct Row {
    pub mode: Mode,
    pub processes: usize,
    pub readers: usize,
    pub result: Result<Figures, String>,
}

pub struct Figures {
    pub window_s: f64,
    /// Everything the emulator counted during the idle window.
    pub idle: Counts,
    pub wake_p50_ms: f64,
    pub wake_p99_ms: f64,
    pub wakes: usize,
    /// Everything the emulator counted while the appends woke the readers.
    pub waking: Counts,
    pub appends: usize,
}

impl Figures {
    pub fn reads_per_minute(&self) -> f64 {
        self.idle.ddb_reads() as f64 * 60.0 / self.window_s
    }

    pub fn per_reader_minute(&self, x: f64, readers: usize) -> f64 {
        x * 60.0 / self.window_s / readers as f64
    }
}

/// What one reader received: (when, bytes) per delivery.
type Inbox = Arc<Mutex<Vec<(Instant, Vec<u8>)>>>;

/// Parks a long-poll reader at `offset` and keeps it parked.
async fn long_poll_reader(client: Client, name: String, mut offset: String, inbox: Inbox) -> Result<()> {
    let mut cursor: Option<String> = None;
    loop {
        let r = client.long_poll(&name, &offset, cursor.as_deref()).await?;
        if r.status == StatusCode::OK && !r.body.is_empty() {
            let at = Instant::now();
            inbox.lock().map_err(|_| anyhow!("poisoned"))?.push((at, r.body.to_vec()));
        }
        offset = r.next_offset;
        cursor = r.cursor;
    }
}

/// Keeps an SSE connection open at `offset` (re-opened where it was closed);
/// `ready` is told once its first control event arrived.
async fn sse_reader(
    client: Client,
    name: String,
    mut offset: String,
    inbox: Inbox,
    ready: tokio::sync::mpsc::UnboundedSender<()>,
) -> Result<()> {
    let mut told = false;
    loop {
        let mut reader = SseReader::open(&client, &name, &offset).await?;
        while let Some(ev) = reader.next_event().await? {
            match ev {
                Event::Data(d) => inbox.lock().map_err(|_| anyhow!("poisoned"))?.push((Instant::now(), d)),
                Event::Control(c) => {
                    if let Some(o) = c.get("streamNextOffset").and_then(|v| v.as_str()) {
                        offset = o.to_string();
                    }
                    if !told {
                        told = true;
                        let _ = ready.send(());
                    }
                }
            }
        }
    }
}

/// Runs one row on the first `processes` of `bases`.
pub async fn row(
    bases: &[String],
    emulator: &Emulator,
    tag: &str,
    (mode, processes, readers): (Mode, usize, usize),
    window: Duration,
    appends: usize,
) -> Result<Figures> {
    let clients =
        bases[..processes].iter().map(|b| Client::new(Target::new(b, "/v1/stream"))).collect::<Result<Vec<_>>>()?;
    let name = format!("{tag}-{}-{processes}x{readers}", mode.label().to_lowercase());
    clients[0].create(&name, TEXT, None).await?;
    let tail = clients[0].read_all(&name).await?.next_offset;
    let inboxes: Vec<Inbox> = (0..readers).map(|_| Arc::new(Mutex::new(Vec::new()))).collect();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = JoinSet::new();
    for (r, inbox) in inboxes.iter().enumerate() {
        let (c, n, o, i) = (clients[r % processes].clone(), name.clone(), tail.clone(), inbox.clone());
        match mode {
            Mode::LongPoll => tasks.spawn(long_poll_reader(c, n, o, i)),
            Mode::Sse => tasks.spawn(sse_reader(c, n, o, i, ready_tx.clone())),
        };
    }
    // Parked: every SSE reader has its first control event; long-polls are
    // given the same time to reach their servers.
    let settle = Instant::now() + Duration::from_secs(30);
    if mode == Mode::Sse {
        for _ in 0..readers {
            tokio::time::timeout_at(settle.into(), ready_rx.recv()).await.context("SSE readers not all open")?;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let result = measure(&clients[0], emulator, &name, &inboxes, window, appends, &mut tasks).await;
    tasks.abort_all();
    result
}

async fn measure(
    writer: &Client,
    emulator: &Emulator,
    name: &str,
    inboxes: &[Inbox],
    window: Duration,
    appends: usize,
    tasks: &mut JoinSet<Result<()>>,
) -> Result<Figures> {
    emulator.take().await?;
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let idle = emulator.take().await?;
    let window_s = t0.elapsed().as_secs_f64();
    if let Some(done) = tasks.try_join_next() {
        bail!("a reader stopped while idle: {:?}", done.map_err(|e| anyhow!(e))?.err());
    }
    let mut wakes = Vec::with_capacity(inboxes.len() * appends);
    emulator.take().await?;
    for k in 1..=appends {
        let sent = Instant::now();
        writer.append(name, TEXT, Bytes::from(record(0, k as u64))).await?;
        let deadline = sent + Duration::from_secs(10);
        for (r, inbox) in inboxes.iter().enumerate() {
            loop {
                let got = {
                    let held = inbox.lock().map_err(|_| anyhow!("poisoned"))?;
                    let bytes: usize = held.iter().map(|(_, b)| b.len()).sum();
                    (bytes >= k * RECORD_LEN).then(|| held.last().map(|(at, _)| *at))
                };
                if let Some(at) = got.flatten() {
                    wakes.push(at.saturating_duration_since(sent).as_secs_f64() * 1e3);
                    break;
                }
                if Instant::now() > deadline {
                    bail!("reader {r} not woken within 10 s of append {k}");
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let waking = emulator.take().await?;
    let acked = [appends as u64];
    for (r, inbox) in inboxes.iter().enumerate() {
        let got: Vec<u8> = inbox.lock().map_err(|_| anyhow!("poisoned"))?.iter().flat_map(|(_, b)| b.clone()).collect();
        verify(&got, &acked).with_context(|| format!("reader {r}"))?;
    }
    verify(&writer.read_all(name).await?.body, &acked).context("catch-up read")?;
    Ok(Figures {
        window_s,
        idle,
        wake_p50_ms: percentile(&wakes, 50.0),
        wake_p99_ms: percentile(&wakes, 99.0),
        wakes: wakes.len(),
        waking,
        appends,
    })
}
