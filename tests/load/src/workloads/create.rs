//! P7: stream creation rate: PUTs of new streams, each with a 100 B first
//! record, `CREATE_IN_FLIGHT` at a time (one keep-alive connection each,
//! driven by `raw`), then every acknowledged stream is read back and must
//! hold exactly its record.

use super::{fail_all, Outcome, Params};
use crate::client::{Client, BINARY};
use crate::metrics::Metric;
use crate::raw::{self, Reply, Template, SEQ_DIGITS};
use crate::record::record;
use anyhow::{bail, Result};
use futures::{stream, TryStreamExt};

pub use crate::metrics::CREATE_IN_FLIGHT;
const SEQ_MARKER: u64 = 999_999_999_999;

pub async fn run(client: &Client, p: &Params) -> Vec<Outcome> {
    match measure(client, p).await {
        Ok(rate) => vec![(Metric::P7CreatesPerSec, Ok(rate))],
        Err(e) => fail_all(&[Metric::P7CreatesPerSec], &e),
    }
}

fn name(tag: &str, conn: usize, seq: u64) -> String {
    format!("{tag}-p7-{conn}-{seq:0width$}", width = SEQ_DIGITS)
}

/// A create succeeded: 201 (a fresh name can never be "already exists").
fn created(r: &Reply) -> Result<()> {
    if r.status != 201 {
        bail!("create: HTTP {} (expected 201 for a new stream)", r.status);
    }
    Ok(())
}

async fn measure(client: &Client, p: &Params) -> Result<f64> {
    let addr = raw::socket_addr(&client.target.base)?;
    let host = addr.to_string();
    let marker = format!("{SEQ_MARKER:012}");
    let templates = (0..CREATE_IN_FLIGHT)
        .map(|c| {
            let path = format!("{}/{}", client.target.prefix, name(&p.tag, c, SEQ_MARKER));
            Template::new("PUT", &host, &path, BINARY, &record(c as u32, SEQ_MARKER), marker.as_bytes())
        })
        .collect::<Result<Vec<_>>>()?;
    let run = raw::drive(addr, templates, p.p1_duration, super::append::load_threads(), created).await?;
    // Every acknowledged create: the stream exists and holds its record.
    let all: Vec<(usize, u64)> =
        run.acked.iter().enumerate().flat_map(|(c, &n)| (1..=n).map(move |s| (c, s))).collect();
    stream::iter(all.into_iter().map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(CREATE_IN_FLIGHT, |(c, s)| async move {
            let n = name(&p.tag, c, s);
            let read = client.read_all(&n).await?;
            if read.body != record(c as u32, s) {
                bail!("stream {n} does not hold exactly its 100 B first record ({} bytes)", read.body.len());
            }
            Ok(())
        })
        .await?;
    Ok(run.rate())
}
