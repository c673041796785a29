//! Processor effect latency: an append to a source stream is acknowledged;
//! how long until the outbox processor's transformed event is readable on
//! its target stream? A long-poll is parked at the target's tail before each
//! append; the clock runs from the append's acknowledgement (and, for
//! reference, from its send) to the long-poll's answer holding the event.
//! Every answer is checked (exactly the one event, the right id), and at the
//! end the target must hold each event exactly once.
//!
//! The server must run an outbox from `source` to `target` that forwards
//! `{"type": "bench/appended", "payload": {"i": N}}` with the payload's `i`
//! at `/payload/i` (bench/processors.sh writes that configuration).

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use reqwest::StatusCode;
use serde_json::Value;
use tokio::time::timeout;

use crate::client::Client;
use crate::cpu::CpuMeter;
use crate::stats::percentile;

const JSON: &str = "application/json";
/// An effect slower than this is a failure.
const VISIBLE_LIMIT: Duration = Duration::from_secs(10);

/// One run's samples (µs).
pub struct Latency {
    pub ack_to_visible: Vec<f64>,
    pub send_to_visible: Vec<f64>,
    pub ack: Vec<f64>,
    /// Effects visible before the append's acknowledgement reached the client.
    pub before_ack: usize,
    /// Other processes' CPU during the run (cores).
    pub others: Option<f64>,
}

/// `iterations` appends to `source`, each waited for on `target`.
pub async fn run(
    client: &Client,
    source: &str,
    target: &str,
    iterations: usize,
    settle: Duration,
    server_pid: Option<u32>,
) -> Result<Latency> {
    client.create(source, JSON, None).await?;
    let mut offset = client.read_all(target).await?.next_offset;
    let already = count(&client.read_all(target).await?.body)?;
    let meter = CpuMeter::start(&server_pid.into_iter().collect::<Vec<_>>());
    let mut out = Latency {
        ack_to_visible: Vec::new(),
        send_to_visible: Vec::new(),
        ack: Vec::new(),
        before_ack: 0,
        others: None,
    };
    let mut cursor: Option<String> = None;
    for i in 0..iterations {
        let poll = {
            let (client, target, offset, cursor) = (client.clone(), target.to_owned(), offset.clone(), cursor.clone());
            tokio::spawn(async move {
                let r = client.long_poll(&target, &offset, cursor.as_deref()).await;
                (r, Instant::now())
            })
        };
        tokio::time::sleep(settle).await;
        let body = Bytes::from(format!(r#"[{{"type":"bench/appended","payload":{{"i":{i}}}}}]"#));
        let sent = Instant::now();
        client.append(source, JSON, body).await?;
        let acked = Instant::now();
        let (r, visible) = timeout(VISIBLE_LIMIT, poll)
            .await
            .map_err(|_| anyhow!("iteration {i}: no effect within {VISIBLE_LIMIT:?}"))??;
        let r = r?;
        if r.status != StatusCode::OK {
            bail!("iteration {i}: the target's long-poll answered HTTP {}", r.status);
        }
        let events: Vec<Value> = serde_json::from_slice(&r.body).context("the target's answer is not a JSON array")?;
        let ids: Vec<Option<u64>> = events.iter().map(|e| e["payload"]["i"].as_u64()).collect();
        if ids != [Some(i as u64)] {
            bail!("iteration {i}: the target got {ids:?}, not exactly event {i}");
        }
        out.before_ack += usize::from(visible < acked);
        out.ack_to_visible.push(visible.saturating_duration_since(acked).as_secs_f64() * 1e6);
        out.send_to_visible.push(visible.duration_since(sent).as_secs_f64() * 1e6);
        out.ack.push(acked.duration_since(sent).as_secs_f64() * 1e6);
        offset = r.next_offset;
        cursor = r.cursor;
    }
    out.others = meter.others_cores();
    let total = count(&client.read_all(target).await?.body)?;
    if total != already + iterations {
        bail!("the target holds {total} events, expected {}: an effect was lost or doubled", already + iterations);
    }
    Ok(out)
}

fn count(body: &[u8]) -> Result<usize> {
    if body.is_empty() {
        return Ok(0);
    }
    // A catch-up read of a JSON stream is one array per response; count the
    // events over all of them.
    let mut n = 0;
    for value in serde_json::Deserializer::from_slice(body).into_iter::<Vec<Value>>() {
        n += value.context("reading the target stream")?.len();
    }
    Ok(n)
}

impl Latency {
    /// The report's table rows.
    pub fn markdown(&self) -> String {
        let ms = |v: &[f64], p: f64| percentile(v, p) / 1e3;
        let row = |name: &str, v: &[f64]| {
            format!("| {name} | {:.2} | {:.2} | {:.2} | {} |\n", ms(v, 50.0), ms(v, 99.0), ms(v, 100.0), v.len())
        };
        let mut s = String::from("| latency | p50 (ms) | p99 (ms) | max (ms) | samples |\n|---|---|---|---|---|\n");
        s.push_str(&row("append acknowledged → outbox event readable on the target", &self.ack_to_visible));
        s.push_str(&row("append sent → outbox event readable on the target", &self.send_to_visible));
        s.push_str(&row("append sent → acknowledged (for reference)", &self.ack));
        s.push_str(&format!(
            "\nEffects readable before the append's acknowledgement reached the client (counted as 0 ms above): {} of {}. Other processes' CPU during the run: {} cores.\n",
            self.before_ack,
            self.ack_to_visible.len(),
            self.others.map_or("?".into(), |o| format!("{o:.2}"))
        ));
        s
    }
}
