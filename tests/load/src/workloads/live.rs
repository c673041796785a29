//! P3: live wake latency. A reader is parked at the tail (a long-poll request
//! or an open SSE connection); the clock starts when the append is sent and
//! stops when the reader holds the appended bytes. Every received byte is
//! checked against what was appended.

use super::{fail_all, Outcome, Params};
use crate::client::{Client, TEXT};
use crate::metrics::Metric;
use crate::record::{record, verify};
use crate::sse::{Event, SseReader};
use crate::stats::percentile;
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use reqwest::StatusCode;
use std::time::{Duration, Instant};
use tokio::time::timeout;

/// A wake-up slower than this is reported as a failure.
const WAKE_LIMIT: Duration = Duration::from_secs(10);

pub async fn run(client: &Client, p: &Params) -> Vec<Outcome> {
    let mut out = Vec::new();
    let lp = [Metric::P3LongPollP50, Metric::P3LongPollP99];
    match long_poll(client, p).await {
        Ok(lat) => out.extend(summarize(&lat, lp)),
        Err(e) => out.extend(fail_all(&lp, &e)),
    }
    let sse = [Metric::P3SseP50, Metric::P3SseP99];
    match sse_latency(client, p).await {
        Ok(lat) => out.extend(summarize(&lat, sse)),
        Err(e) => out.extend(fail_all(&sse, &e)),
    }
    out
}

fn summarize(lat_us: &[f64], [p50, p99]: [Metric; 2]) -> Vec<Outcome> {
    vec![(p50, Ok(percentile(lat_us, 50.0))), (p99, Ok(percentile(lat_us, 99.0)))]
}

/// Returns one latency (µs) per iteration.
pub async fn long_poll(client: &Client, p: &Params) -> Result<Vec<f64>> {
    let name = format!("{}-p3-lp", p.tag);
    client.create(&name, TEXT, None).await?;
    let mut offset = client.read_all(&name).await?.next_offset;
    let mut cursor: Option<String> = None;
    let mut received = Vec::new();
    let mut lat = Vec::with_capacity(p.p3_iterations);
    for i in 0..p.p3_iterations {
        let poll = {
            let (client, name, offset, cursor) = (client.clone(), name.clone(), offset.clone(), cursor.clone());
            tokio::spawn(async move {
                let r = client.long_poll(&name, &offset, cursor.as_deref()).await;
                (r, Instant::now())
            })
        };
        // Give the request time to reach the server and park there.
        tokio::time::sleep(p.p3_settle).await;
        let t0 = Instant::now();
        client.append(&name, TEXT, Bytes::from(record(0, i as u64 + 1))).await?;
        let (r, t1) = timeout(WAKE_LIMIT, poll)
            .await
            .map_err(|_| anyhow!("long-poll not woken within {WAKE_LIMIT:?} of an append"))??;
        let r = r?;
        if r.status != StatusCode::OK || r.body.is_empty() {
            bail!("iteration {i}: long-poll answered HTTP {} with {} bytes after an append", r.status, r.body.len());
        }
        lat.push(t1.saturating_duration_since(t0).as_secs_f64() * 1e6);
        received.extend_from_slice(&r.body);
        offset = r.next_offset;
        cursor = r.cursor;
    }
    check_received(client, &name, &received, p.p3_iterations).await?;
    Ok(lat)
}

/// Returns one latency (µs) per iteration over a single SSE connection
/// (re-opened from the last control offset if the server closes it).
pub async fn sse_latency(client: &Client, p: &Params) -> Result<Vec<f64>> {
    let name = format!("{}-p3-sse", p.tag);
    client.create(&name, TEXT, None).await?;
    let mut offset = client.read_all(&name).await?.next_offset;
    let mut reader = SseReader::open(client, &name, &offset).await?;
    // The first control event says the connection is set up and caught up.
    match timeout(WAKE_LIMIT, reader.next_event()).await.context("no first SSE control event")?? {
        Some(Event::Control(c)) => offset = control_offset(&c).unwrap_or(offset),
        Some(Event::Data(d)) => bail!("SSE sent {} bytes of data on an empty stream", d.len()),
        None => bail!("SSE connection closed before its first event"),
    }
    let mut received = Vec::new();
    let mut lat = Vec::with_capacity(p.p3_iterations);
    for i in 0..p.p3_iterations {
        tokio::time::sleep(p.p3_settle).await;
        let body = Bytes::from(record(0, i as u64 + 1));
        let t0 = Instant::now();
        let append = {
            let (client, name) = (client.clone(), name.clone());
            tokio::spawn(async move { client.append(&name, TEXT, body).await })
        };
        let want = received.len() + crate::record::RECORD_LEN;
        let deadline = t0 + WAKE_LIMIT;
        while received.len() < want {
            let ev = tokio::time::timeout_at(deadline.into(), reader.next_event())
                .await
                .map_err(|_| anyhow!("iteration {i}: SSE reader not woken within {WAKE_LIMIT:?}"))??;
            match ev {
                Some(Event::Data(d)) => received.extend_from_slice(&d),
                Some(Event::Control(c)) => offset = control_offset(&c).unwrap_or(offset),
                None => reader = SseReader::open(client, &name, &offset).await?,
            }
        }
        lat.push(t0.elapsed().as_secs_f64() * 1e6);
        append.await??;
    }
    check_received(client, &name, &received, p.p3_iterations).await?;
    Ok(lat)
}

fn control_offset(c: &serde_json::Value) -> Option<String> {
    c.get("streamNextOffset").and_then(|v| v.as_str()).map(str::to_string)
}

/// The reader must have seen exactly the appended records, and a fresh
/// catch-up read must agree.
async fn check_received(client: &Client, name: &str, received: &[u8], iterations: usize) -> Result<()> {
    let acked = [iterations as u64];
    verify(received, &acked).with_context(|| format!("live reader of {name}"))?;
    let read = client.read_all(name).await?;
    verify(&read.body, &acked).with_context(|| format!("catch-up read of {name}"))
}
