//! P1: append throughput with 100-byte POSTs, then a full read-back check.

use super::{fail_all, Outcome, Params};
use crate::client::{Client, BINARY};
use crate::metrics::Metric;
use crate::record::{record, verify};
use anyhow::{bail, Result};
use bytes::Bytes;
use std::time::{Duration, Instant};

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

/// `writers` sequential writers (writer w on stream w % streams) append until
/// `duration` has passed; returns acknowledged appends per second after
/// checking that every stream holds exactly the acknowledged records.
pub async fn throughput(client: &Client, tag: &str, streams: usize, writers: usize, duration: Duration) -> Result<f64> {
    let names: Vec<String> = (0..streams).map(|s| format!("{tag}-{s}")).collect();
    for n in &names {
        client.create(n, BINARY, None).await?;
    }
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::with_capacity(writers);
    for w in 0..writers {
        let client = client.clone();
        let name = names[w % streams].clone();
        // Records name the writer by its index among its stream's writers.
        let local = (w / streams) as u32;
        tasks.push(tokio::spawn(async move {
            let mut acked = 0u64;
            while Instant::now() < deadline {
                let body = Bytes::from(record(local, acked + 1));
                if let Err(e) = client.append(&name, BINARY, body).await {
                    return (acked, Some(e));
                }
                acked += 1;
            }
            (acked, None)
        }));
    }
    let mut acked = vec![0u64; writers];
    let mut errors = Vec::new();
    for (w, t) in tasks.into_iter().enumerate() {
        let (n, err) = t.await?;
        acked[w] = n;
        errors.extend(err);
    }
    let elapsed = start.elapsed().as_secs_f64();
    if let Some(first) = errors.first() {
        bail!("{} of {writers} writers saw a failed append; first: {first:#}", errors.len());
    }
    for (s, name) in names.iter().enumerate() {
        // Acknowledged counts of this stream's writers, by local index.
        let mine: Vec<u64> = acked.iter().skip(s).step_by(streams).copied().collect();
        let read = client.read_all(name).await?;
        verify(&read.body, &mine).map_err(|e| e.context(format!("stream {name}")))?;
    }
    let total: u64 = acked.iter().sum();
    Ok(total as f64 / elapsed)
}
