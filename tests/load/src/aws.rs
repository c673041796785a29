//! AWS calls per protocol operation, for a server running `--store aws`
//! against the local emulator (infra/aws-emulator), which counts every AWS
//! call it serves (`POST /_emulator/calls/reset` returns the counts since the
//! last reset and zeroes them).

use crate::client::{Client, Target, BINARY, TEXT};
use crate::record::record;
use anyhow::{Context, Result};
use bytes::Bytes;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

/// Counts per "service:Operation" since the last reset, and resets them.
async fn take_counts(http: &reqwest::Client, calls_url: &str) -> Result<BTreeMap<String, u64>> {
    let url = format!("{}/reset", calls_url.trim_end_matches('/'));
    let body = http.post(&url).send().await?.error_for_status()?.bytes().await?;
    let v: Value = serde_json::from_slice(&body).context("emulator counts")?;
    let mut out = BTreeMap::new();
    if let Some(services) = v.get("calls").and_then(Value::as_object) {
        for (svc, ops) in services {
            for (op, n) in ops.as_object().into_iter().flatten() {
                out.insert(format!("{svc}:{op}"), n.as_u64().unwrap_or(0));
            }
        }
    }
    Ok(out)
}

/// Runs `ops` of each operation kind and returns a markdown table of AWS
/// calls per operation.
pub async fn calls_per_op(base: &str, prefix: &str, calls_url: &str, ops: usize) -> Result<String> {
    let client = Client::new(Target::new(base, prefix))?;
    let http = reqwest::Client::new();
    let tag = crate::workloads::unique_tag();
    let ops = ops.max(1);
    let mut rows: Vec<(String, BTreeMap<String, u64>, usize)> = Vec::new();

    take_counts(&http, calls_url).await?;
    for i in 0..ops {
        client.create(&format!("{tag}-c{i}"), BINARY, None).await?;
    }
    rows.push(("create (PUT)".into(), take_counts(&http, calls_url).await?, ops));

    let s = format!("{tag}-a");
    client.create(&s, BINARY, None).await?;
    take_counts(&http, calls_url).await?;
    for i in 0..ops {
        client.append(&s, BINARY, Bytes::from(record(0, i as u64 + 1))).await?;
    }
    rows.push(("append 100 B (POST)".into(), take_counts(&http, calls_url).await?, ops));

    for _ in 0..ops {
        client.read_all(&s).await?;
    }
    rows.push(("catch-up read to up-to-date (GET)".into(), take_counts(&http, calls_url).await?, ops));

    let lp = format!("{tag}-lp");
    client.create(&lp, TEXT, None).await?;
    let mut offset = client.read_all(&lp).await?.next_offset;
    let wakes = ops.min(50);
    take_counts(&http, calls_url).await?;
    for i in 0..wakes {
        let poll = {
            let (c, n, o) = (client.clone(), lp.clone(), offset.clone());
            tokio::spawn(async move { c.long_poll(&n, &o, None).await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        client.append(&lp, TEXT, Bytes::from(record(0, i as u64 + 1))).await?;
        offset = poll.await??.next_offset;
    }
    rows.push(("long-poll wake (append + woken GET)".into(), take_counts(&http, calls_url).await?, wakes));

    tokio::time::sleep(Duration::from_secs(5)).await;
    rows.push(("idle server, per second (5 s)".into(), take_counts(&http, calls_url).await?, 5));

    let mut md =
        String::from("| operation | AWS calls per operation | breakdown (calls per operation) |\n|---|---:|---|\n");
    for (name, counts, n) in rows {
        let total: u64 = counts.values().sum();
        let detail: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {:.2}", *v as f64 / n as f64)).collect();
        let _ = writeln!(md, "| {name} | {:.2} | {} |", total as f64 / n as f64, detail.join(", "));
    }
    Ok(md)
}
