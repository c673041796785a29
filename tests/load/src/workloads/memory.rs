//! P4: resident memory per idle stream: the server's VmRSS before and after
//! creating N small streams, divided by N.

use super::{fail_all, Outcome, Params};
use crate::client::{Client, BINARY};
use crate::metrics::Metric;
use crate::record::record;
use crate::server::rss_bytes;
use anyhow::{Context, Result};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

/// Creates in flight at once (creation speed is not what P4 measures).
const CREATE_CONCURRENCY: usize = 16;

pub async fn run(client: &Client, p: &Params, pid: Option<u32>) -> Vec<Outcome> {
    let m = [Metric::P4RssPerStream];
    let Some(pid) = pid else {
        return fail_all(&m, &anyhow::anyhow!("P4 needs the server's PID (--pid)"));
    };
    match per_stream(client, p, pid).await {
        Ok(v) => vec![(Metric::P4RssPerStream, Ok(v))],
        Err(e) => fail_all(&m, &e),
    }
}

async fn per_stream(client: &Client, p: &Params, pid: u32) -> Result<f64> {
    let before = rss_bytes(pid)?;
    // "Small" streams: each is created holding one 100-byte record, so the
    // figure includes a stream's first data, not only its name.
    futures::stream::iter(0..p.p4_streams)
        .map(|i| async move {
            let name = format!("{}-p4-{i}", p.tag);
            client.create(&name, BINARY, Some(Bytes::from(record(0, 1)))).await
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await
        .context("creating P4 streams")?;
    let after = rss_bytes(pid)?;
    // Spot-check that the streams exist and hold their record.
    for i in [0, p.p4_streams / 2, p.p4_streams.saturating_sub(1)] {
        let name = format!("{}-p4-{i}", p.tag);
        let read = client.read_all(&name).await?;
        crate::record::verify(&read.body, &[1]).with_context(|| format!("stream {name}"))?;
    }
    Ok((after as f64 - before as f64) / p.p4_streams as f64)
}
