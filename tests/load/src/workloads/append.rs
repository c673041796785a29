//! P1: append throughput with 100-byte POSTs (driven by `raw`), then a full
//! read-back check.

use super::{fail_all, Outcome, Params};
use crate::client::{Client, BINARY};
use crate::metrics::Metric;
use crate::raw::{self, Reply, Template};
use crate::record::{record, verify};
use anyhow::{bail, Result};
use std::time::Duration;

pub async fn run(client: &Client, p: &Params) -> Vec<Outcome> {
    let c = p.p1_concurrency;
    let cases = [(Metric::P1OneStreamC1, 1, 1), (Metric::P1OneStreamC64, 1, c), (Metric::P1ManyStreams, c, c)];
    let mut out = Vec::new();
    for (metric, streams, writers) in cases {
        let tag = format!("{}-p1-{streams}x{writers}", p.tag);
        match throughput(client, &tag, streams, writers, p.p1_duration).await {
            Ok(v) => out.push((metric, Ok(v))),
            Err(e) => out.extend(fail_all(&[metric], &e)),
        }
    }
    out
}

/// Placeholder sequence number whose digits `raw::Template` patches.
const SEQ_MARKER: u64 = 999_999_999_999;

/// One request template per writer: writer `w` appends to stream
/// `{tag}-{w % streams}` and names itself by its index among that stream's
/// writers (`w / streams`), so `verify` can check each stream.
pub fn templates(host: &str, prefix: &str, tag: &str, streams: usize, writers: usize) -> Result<Vec<Template>> {
    let marker = format!("{SEQ_MARKER:012}");
    (0..writers)
        .map(|w| {
            let path = format!("{}/{tag}-{}", prefix.trim_end_matches('/'), w % streams);
            let body = record((w / streams) as u32, SEQ_MARKER);
            Template::new("POST", host, &path, BINARY, &body, marker.as_bytes())
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

/// `writers` sequential writers (writer w on stream w % streams), one
/// keep-alive connection each, append until `duration` has passed; returns
/// acknowledged appends per second after checking that every stream holds
/// exactly the acknowledged records, each once, in each writer's order.
pub async fn throughput(client: &Client, tag: &str, streams: usize, writers: usize, duration: Duration) -> Result<f64> {
    let names: Vec<String> = (0..streams).map(|s| format!("{tag}-{s}")).collect();
    for n in &names {
        client.create(n, BINARY, None).await?;
    }
    let addr = raw::socket_addr(&client.target.base)?;
    let host = addr.to_string();
    let t = templates(&host, &client.target.prefix, tag, streams, writers)?;
    let run = raw::drive(addr, t, duration, load_threads(), appended).await?;
    for (s, name) in names.iter().enumerate() {
        // Acknowledged counts of this stream's writers, by local index.
        let mine: Vec<u64> = run.acked.iter().skip(s).step_by(streams).copied().collect();
        let read = client.read_all(name).await?;
        verify(&read.body, &mine).map_err(|e| e.context(format!("stream {name}")))?;
    }
    Ok(run.rate())
}

/// OS threads of the raw driver (`DS_LOAD_THREADS`, default 2: on the
/// 2-core bench machine two threads reached wrk's best rate against the
/// sink, where one thread fell short at 64 connections).
pub fn load_threads() -> usize {
    std::env::var("DS_LOAD_THREADS").ok().and_then(|v| v.parse().ok()).filter(|&n| n >= 1).unwrap_or(2)
}
