//! Listing and backfill over a prefix: a table of N streams of which M share
//! a prefix, then, on the Lambda HTTP function's router (ds-lambda-router,
//! processors configured on that prefix), what `GET /v1/processors` paged to
//! its end and a new subscription's backfill over the prefix cost in
//! DynamoDB calls and read units. Both must find exactly the M streams.

use super::emulator::{Counts, Emulator};
use crate::client::{Client, Target, BINARY};
use anyhow::{bail, ensure, Context, Result};
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// Streams created per second at most is the emulator's; this many at once.
const FILL_CONCURRENCY: usize = 32;
/// Processors listed per page (so the listing pages).
pub const LIST_PAGE: usize = 5;

pub struct Fill {
    pub total: usize,
    pub matching: usize,
    pub prefix: String,
    pub secs: f64,
}

/// Creates `total` streams, the first `matching` of them JSON streams under
/// `{root}/match/`, the others under `{root}/other/`.
pub async fn fill(base: &str, root: &str, total: usize, matching: usize) -> Result<Fill> {
    let client = Client::new(Target::new(base, "/v1/stream"))?;
    let t0 = std::time::Instant::now();
    let results: Vec<Result<()>> = stream::iter(0..total)
        .map(|i| {
            let client = client.clone();
            async move {
                if i < matching {
                    client.create(&format!("{root}/match/s{i:05}"), "application/json", None).await
                } else {
                    client.create(&format!("{root}/other/s{i:05}"), BINARY, None).await
                }
            }
        })
        .buffer_unordered(FILL_CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<()>>>()?;
    Ok(Fill { total, matching, prefix: format!("{root}/match/"), secs: t0.elapsed().as_secs_f64() })
}

/// The processors configuration the router runs with: one counter on the
/// matching streams.
pub fn processors_toml(root: &str) -> String {
    format!(
        "[host]\nlag_log_interval = \"off\"\n\n[[processor]]\nkind = \"counter\"\nslug = \"scale-count\"\nstreams = \"{root}/match/*\"\n"
    )
}

pub struct Measured {
    /// HTTP requests the operation took.
    pub requests: usize,
    pub found: usize,
    pub counts: Counts,
}

/// `GET /v1/processors?limit=LIST_PAGE`, following `next` to the end.
pub async fn listing(router: &str, emulator: &Emulator, fill: &Fill) -> Result<Measured> {
    let http = reqwest::Client::new();
    emulator.take().await?;
    let (mut after, mut requests, mut streams) = (None::<String>, 0, BTreeSet::new());
    loop {
        let mut url = reqwest::Url::parse(&format!("{router}/v1/processors"))?;
        url.query_pairs_mut().append_pair("limit", &LIST_PAGE.to_string());
        if let Some(a) = &after {
            url.query_pairs_mut().append_pair("after", a);
        }
        let resp = http.get(url).send().await.context("GET /v1/processors")?;
        requests += 1;
        ensure!(resp.status().is_success(), "GET /v1/processors: HTTP {}", resp.status());
        let page: Value = serde_json::from_slice(&resp.bytes().await?)?;
        for p in page["processors"].as_array().into_iter().flatten() {
            if let Some(s) = p["stream"].as_str() {
                streams.insert(s.to_string());
            }
        }
        match page["next"].as_str() {
            Some(n) if requests < 10_000 => after = Some(n.to_string()),
            Some(_) => bail!("GET /v1/processors did not end"),
            None => break,
        }
    }
    let counts = emulator.take().await?;
    check_found(&streams, fill, "GET /v1/processors")?;
    Ok(Measured { requests, found: streams.len(), counts })
}

/// A webhook subscription on `{prefix}*`: its creation backfills the
/// matching streams; the subscription is deleted afterwards (not counted).
pub async fn backfill(router: &str, emulator: &Emulator, fill: &Fill, hook: &str) -> Result<Measured> {
    let http = reqwest::Client::new();
    let url = format!("{router}/v1/stream/__ds/subscriptions/scale-backfill");
    let config = json!({"type": "webhook", "pattern": format!("{}*", fill.prefix), "webhook": {"url": hook}});
    emulator.take().await?;
    let resp = http
        .put(&url)
        .header("content-type", "application/json")
        .body(config.to_string())
        .send()
        .await
        .context("PUT subscription")?;
    let status = resp.status();
    let body: Value = serde_json::from_slice(&resp.bytes().await?).unwrap_or(Value::Null);
    let counts = emulator.take().await?;
    ensure!(status == reqwest::StatusCode::CREATED, "PUT subscription: HTTP {status}: {body}");
    let streams: BTreeSet<String> = body["streams"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["path"].as_str().map(str::to_string))
        .collect();
    let _ = http.delete(&url).send().await;
    check_found(&streams, fill, "subscription backfill")?;
    Ok(Measured { requests: 1, found: streams.len(), counts })
}

fn check_found(found: &BTreeSet<String>, fill: &Fill, what: &str) -> Result<()> {
    let want: BTreeSet<String> = (0..fill.matching).map(|i| format!("{}s{i:05}", fill.prefix)).collect();
    if *found != want {
        let missing: Vec<_> = want.difference(found).take(3).collect();
        let extra: Vec<_> = found.difference(&want).take(3).collect();
        bail!(
            "{what} found {} streams, want the {} matching: missing {missing:?}, extra {extra:?}",
            found.len(),
            want.len()
        );
    }
    Ok(())
}

/// A webhook receiver on 127.0.0.1 that answers every request 204 (the
/// backfilled streams are empty: nothing should arrive); returns its URL.
pub async fn hook_receiver() -> Result<(String, tokio::task::JoinHandle<()>)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n").await;
            });
        }
    });
    Ok((url, task))
}
