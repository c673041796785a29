//! P1: append throughput with 100-byte POSTs (driven by `raw`), then a full
//! read-back check; with the server's PID, also the server's CPU time per
//! acknowledged append during the timed run.
//!
//! Why the CPU figure: on the 2-core bench machine the load tool and the
//! server share the cores, so the fastest servers' throughput is capped by
//! the tool (the cells the report marks load-bound) and the rates stop
//! telling the servers apart. The CPU each append costs the server (user +
//! system, from `/proc/<pid>/stat`) does not depend on that ceiling.

use super::{fail_all, Outcome, P1Body, Params};
use crate::client::{Client, BINARY, JSON};
use crate::cpu::process_cpu_secs;
use crate::metrics::Metric;
use crate::raw::{self, Reply, Template};
use crate::record::{json_event, record, verify, verify_json};
use crate::state_record;
use anyhow::{bail, Result};
use std::time::Duration;

pub async fn run(client: &Client, p: &Params, pid: Option<u32>) -> Vec<Outcome> {
    let c = p.p1_concurrency;
    let cases = [
        (Metric::P1OneStreamC1, Metric::P1CpuOneStreamC1, 1, 1),
        (Metric::P1OneStreamC64, Metric::P1CpuOneStreamC64, 1, c),
        (Metric::P1ManyStreams, Metric::P1CpuManyStreams, c, c),
    ];
    let mut out = Vec::new();
    for (metric, cpu_metric, streams, writers) in cases {
        let tag = format!("{}{}-p1-{streams}x{writers}", p.p1_stream_prefix, p.tag);
        match throughput_of(client, &tag, streams, writers, p.p1_duration, pid, p.p1_body).await {
            Ok(t) => {
                out.push((metric, Ok(t.rate)));
                if let Some(us) = t.server_cpu_us {
                    out.push((cpu_metric, Ok(us)));
                }
            }
            Err(e) => out.extend(fail_all(&[metric, cpu_metric], &e)),
        }
    }
    out
}

/// What one throughput run measured.
#[derive(Debug, Clone, Copy)]
pub struct Throughput {
    /// Acknowledged appends per second.
    pub rate: f64,
    /// The server's CPU time (user + system) per acknowledged append, in
    /// µs, over the timed part of the run; None without the server's PID.
    pub server_cpu_us: Option<f64>,
}

/// CPU µs per append from the server's CPU seconds before and after `appends`.
fn cpu_per_append_us(before: Option<f64>, after: Option<f64>, appends: u64) -> Option<f64> {
    let (before, after) = (before?, after?);
    (appends > 0).then(|| (after - before).max(0.0) * 1e6 / appends as f64)
}

/// Placeholder sequence number whose digits `raw::Template` patches.
const SEQ_MARKER: u64 = 999_999_999_999;

/// One request template per writer: writer `w` appends to stream
/// `{tag}-{w % streams}` and names itself by its index among that stream's
/// writers (`w / streams`), so `verify` can check each stream.
pub fn templates(host: &str, prefix: &str, tag: &str, streams: usize, writers: usize) -> Result<Vec<Template>> {
    templates_of(host, prefix, tag, streams, writers, P1Body::Binary)
}

/// [`templates`] with appends carrying `body`.
pub fn templates_of(
    host: &str,
    prefix: &str,
    tag: &str,
    streams: usize,
    writers: usize,
    body: P1Body,
) -> Result<Vec<Template>> {
    let marker = format!("{SEQ_MARKER:012}");
    (0..writers)
        .map(|w| {
            let path = format!("{}/{tag}-{}", prefix.trim_end_matches('/'), w % streams);
            let writer = (w / streams) as u32;
            let (content_type, bytes) = match body {
                P1Body::Binary => (BINARY, record(writer, SEQ_MARKER)),
                P1Body::JsonEvent => (JSON, json_event(writer, SEQ_MARKER, true)),
                P1Body::JsonInvalid => (JSON, json_event(writer, SEQ_MARKER, false)),
                P1Body::StateUpsert { keys } => (JSON, state_record::upsert_body(writer, SEQ_MARKER, keys)),
            };
            let t = Template::new("POST", host, &path, content_type, &bytes, marker.as_bytes())?;
            match body {
                P1Body::StateUpsert { keys } => state_record::with_fields(t, keys),
                _ => Ok(t),
            }
        })
        .collect()
}

/// An append succeeded: a 2xx carrying `Stream-Next-Offset` (the spec says
/// 204; the header is how a writer learns the tail).
fn appended(r: &Reply) -> Result<()> {
    if !(200..300).contains(&r.status) {
        bail!("append: HTTP {}", r.status);
    }
    if !r.next_offset {
        bail!("append: HTTP {} without Stream-Next-Offset", r.status);
    }
    Ok(())
}

/// A refused append (the reject path of an inline processor): exactly 400,
/// so a server that accepts the invalid event, or fails otherwise, fails
/// the run.
fn refused(r: &Reply) -> Result<()> {
    if r.status != 400 {
        bail!("an append that should be refused: HTTP {} (expected 400)", r.status);
    }
    Ok(())
}

/// [`throughput_of`] with binary records.
pub async fn throughput(
    client: &Client,
    tag: &str,
    streams: usize,
    writers: usize,
    duration: Duration,
    pid: Option<u32>,
) -> Result<Throughput> {
    throughput_of(client, tag, streams, writers, duration, pid, P1Body::Binary).await
}

/// `writers` sequential writers (writer w on stream w % streams), one
/// keep-alive connection each, append until `duration` has passed; returns
/// acknowledged appends per second (and, given the server's `pid`, its CPU
/// per append) after checking that every stream holds exactly the
/// acknowledged records, each once, in each writer's order. With
/// [`P1Body::JsonInvalid`] the figures are per refused request (every one
/// must be a 400) and every stream must stay empty.
pub async fn throughput_of(
    client: &Client,
    tag: &str,
    streams: usize,
    writers: usize,
    duration: Duration,
    pid: Option<u32>,
    body: P1Body,
) -> Result<Throughput> {
    let names: Vec<String> = (0..streams).map(|s| format!("{tag}-{s}")).collect();
    let content_type = if body == P1Body::Binary { BINARY } else { JSON };
    for n in &names {
        client.create(n, content_type, None).await?;
    }
    let addr = raw::socket_addr(&client.target.base)?;
    let host = addr.to_string();
    let t = templates_of(&host, &client.target.prefix, tag, streams, writers, body)?;
    let check = if body == P1Body::JsonInvalid { refused } else { appended };
    let cpu_before = pid.and_then(process_cpu_secs);
    let run = raw::drive(addr, t, duration, load_threads(), check).await?;
    let cpu_after = pid.and_then(process_cpu_secs);
    for (s, name) in names.iter().enumerate() {
        // Acknowledged counts of this stream's writers, by local index.
        let mine: Vec<u64> = run.acked.iter().skip(s).step_by(streams).copied().collect();
        let read = read_back(client, name, body).await?;
        let checked = match body {
            P1Body::Binary => verify(&read.body, &mine),
            P1Body::JsonEvent => verify_json(&read.body, &mine),
            // Refused appends leave nothing.
            P1Body::JsonInvalid => verify_json(&read.body, &vec![0; mine.len()]),
            P1Body::StateUpsert { keys } => state_record::verify_state(&read.body, &mine, keys),
        };
        checked.map_err(|e| e.context(format!("stream {name}")))?;
    }
    let server_cpu_us = cpu_per_append_us(cpu_before, cpu_after, run.acked.iter().sum());
    Ok(Throughput { rate: run.rate(), server_cpu_us })
}

/// The stream `name` from its earliest retained offset. A `state`
/// processor may compact a stream of upserts while it is read (its trim
/// answers the read's next page 410): such a read starts over, at most 5
/// times.
async fn read_back(client: &Client, name: &str, body: P1Body) -> Result<crate::client::ReadAll> {
    let tries = if matches!(body, P1Body::StateUpsert { .. }) { 5 } else { 1 };
    let mut read = client.read_all(name).await;
    for _ in 1..tries {
        if read.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        read = client.read_all(name).await;
    }
    read
}

/// OS threads of the raw driver (`DS_LOAD_THREADS`, default 2: on the
/// 2-core bench machine two threads reached wrk's best rate against the
/// sink, where one thread fell short at 64 connections).
pub fn load_threads() -> usize {
    std::env::var("DS_LOAD_THREADS").ok().and_then(|v| v.parse().ok()).filter(|&n| n >= 1).unwrap_or(2)
}

#[cfg(test)]
mod tests {
    use super::cpu_per_append_us;

    #[test]
    fn cpu_per_append_is_the_cpu_difference_over_the_appends() {
        assert_eq!(cpu_per_append_us(Some(1.0), Some(1.5), 50_000), Some(10.0));
        // No PID, no reading, or nothing acknowledged: no figure.
        assert_eq!(cpu_per_append_us(None, Some(1.5), 10), None);
        assert_eq!(cpu_per_append_us(Some(1.0), None, 10), None);
        assert_eq!(cpu_per_append_us(Some(1.0), Some(2.0), 0), None);
        // Tick rounding never gives a negative cost.
        assert_eq!(cpu_per_append_us(Some(2.0), Some(1.99), 10), Some(0.0));
    }
}
