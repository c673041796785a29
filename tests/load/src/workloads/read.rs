//! P2: catch-up read of a stream of N × 100 B from the start, following
//! `Stream-Next-Offset` until `Stream-Up-To-Date`.
//!
//! The timed reads go through the lean driver ([`raw::Conn::fetch`]: one
//! keep-alive connection, each body read straight into one buffer of its
//! announced length). Through reqwest a 1 MB read took the client longer
//! than the server (same server, same stream: 1.85 ms a read with reqwest,
//! 0.40 ms with curl), so P2 measured the client.

use super::{fail_all, Outcome, Params};
use crate::client::{Client, BINARY};
use crate::metrics::Metric;
use crate::raw;
use crate::record::{record, verify, RECORD_LEN};
use crate::stats::median;
use anyhow::{anyhow, bail, Result};
use bytes::Bytes;
use futures::future::try_join_all;
use std::time::Instant;

/// Writers used to fill the stream (filling is not measured).
const FILL_WRITERS: usize = 8;

pub async fn run(client: &Client, p: &Params) -> Vec<Outcome> {
    match measure(client, p).await {
        Ok((mbps, responses)) => vec![(Metric::P2ReadMbps, Ok(mbps)), (Metric::P2Responses, Ok(responses))],
        Err(e) => fail_all(&[Metric::P2ReadMbps, Metric::P2Responses], &e),
    }
}

async fn measure(client: &Client, p: &Params) -> Result<(f64, f64)> {
    let name = format!("{}-p2", p.tag);
    client.create(&name, BINARY, None).await?;
    let acked = fill(client, &name, p.p2_records).await?;
    let mut rates = Vec::new();
    let mut responses = 0;
    let addr = raw::socket_addr(&client.target.base)?;
    let mut conn = raw::Conn::new(addr);
    conn.connect().await?;
    for _ in 0..p.p2_reads.max(1) {
        let start = Instant::now();
        let (body, n) = read_all(client, &mut conn, &addr.to_string(), &name).await?;
        let secs = start.elapsed().as_secs_f64();
        verify(&body, &acked)?;
        rates.push(body.len() as f64 / secs / 1e6);
        responses = n;
    }
    if responses == 0 {
        bail!("no responses");
    }
    Ok((median(&rates), responses as f64))
}

/// Reads `name` from the start until up to date over `conn`; returns the
/// bytes and how many responses it took.
async fn read_all(client: &Client, conn: &mut raw::Conn, host: &str, name: &str) -> Result<(Vec<u8>, usize)> {
    let mut offset = "-1".to_string();
    let mut body = Vec::new();
    for responses in 1..=MAX_RESPONSES {
        // The reqwest client's URL, so offsets are encoded the same way.
        let url = client.offset_url(name, &offset, None, None)?;
        let target = format!("{}?{}", url.path(), url.query().unwrap_or_default());
        let resp = conn.fetch(&raw::get_request(host, &target)).await?;
        if resp.status != 200 {
            bail!("GET {name}?offset={offset}: HTTP {}", resp.status);
        }
        let next = resp.next_offset.ok_or_else(|| anyhow!("GET {name}: no Stream-Next-Offset"))?;
        if !resp.up_to_date && resp.body.is_empty() && next == offset {
            bail!("GET {name}?offset={offset}: no data, same offset, and not up to date");
        }
        if body.is_empty() {
            body = resp.body;
        } else {
            body.extend_from_slice(&resp.body);
        }
        offset = next;
        if resp.up_to_date {
            return Ok((body, responses));
        }
    }
    bail!("GET {name}: not up to date after {MAX_RESPONSES} responses")
}

/// More responses than any server needs for the stream P2 reads.
const MAX_RESPONSES: usize = 100_000;

/// Appends `records` records with a few concurrent writers; returns each
/// writer's acknowledged count for `verify`.
async fn fill(client: &Client, name: &str, records: usize) -> Result<Vec<u64>> {
    let per = records.div_ceil(FILL_WRITERS);
    let jobs = (0..FILL_WRITERS).map(|w| {
        let n = per.min(records.saturating_sub(w * per)) as u64;
        async move {
            for seq in 1..=n {
                client.append(name, BINARY, Bytes::from(record(w as u32, seq))).await?;
            }
            anyhow::Ok(n)
        }
    });
    let acked = try_join_all(jobs).await?;
    debug_assert_eq!(acked.iter().sum::<u64>() as usize * RECORD_LEN, records * RECORD_LEN);
    Ok(acked)
}
