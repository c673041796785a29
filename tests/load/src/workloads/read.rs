//! P2: catch-up read of a stream of N × 100 B from the start, following
//! `Stream-Next-Offset` until `Stream-Up-To-Date`.

use super::{fail_all, Outcome, Params};
use crate::client::{Client, BINARY};
use crate::metrics::Metric;
use crate::record::{record, verify, RECORD_LEN};
use crate::stats::median;
use anyhow::{bail, Result};
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
    for _ in 0..p.p2_reads.max(1) {
        let start = Instant::now();
        let read = client.read_all(&name).await?;
        let secs = start.elapsed().as_secs_f64();
        verify(&read.body, &acked)?;
        rates.push(read.body.len() as f64 / secs / 1e6);
        responses = read.responses;
    }
    if responses == 0 {
        bail!("no responses");
    }
    Ok((median(&rates), responses as f64))
}

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
