//! AWS cost per protocol operation (`make aws-calls`): our server on
//! `--store aws` with its AWS traffic through the metering proxy
//! (`aws_meter`), each operation run several times over HTTP, and the bill
//! per operation priced at published on-demand rates.

use crate::aws_meter::{Bill, MeterProxy};
use crate::client::{Client, Target, BINARY, TEXT};
use crate::server::{self, Class, ServerSpec};
use anyhow::{bail, Result};
use bytes::Bytes;
use std::fmt::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// Published on-demand prices, US East (N. Virginia), in dollars.
pub struct Prices;

impl Prices {
    /// DynamoDB on-demand, per million write / read request units (the
    /// rates in force since 2024-11-01).
    pub const DDB_WRITE_PER_M: f64 = 0.625;
    pub const DDB_READ_PER_M: f64 = 0.125;
    /// S3 Standard, per million PUT/COPY/POST/LIST and GET/other requests
    /// ($0.005 and $0.0004 per 1,000).
    pub const S3_TIER1_PER_M: f64 = 5.0;
    pub const S3_TIER2_PER_M: f64 = 0.4;
    /// Lambda (x86): per million requests, per GB-second.
    pub const LAMBDA_REQ_PER_M: f64 = 0.20;
    pub const LAMBDA_GB_S: f64 = 0.000_016_666_7;

    pub const NOTE: &'static str = "Prices (US East, N. Virginia, on-demand, as published in 2025; no live lookup was possible here): \
DynamoDB $0.625 per million write request units and $0.125 per million read request units (the on-demand rates since the 2024-11-01 price cut; \
quoted by airbyte.com/data-engineering-resources/dynamodb-pricing, 2025-07-21, and jusdb.com's DynamoDB cost guide, 2025-08-19; page: aws.amazon.com/dynamodb/pricing/on-demand/); \
S3 Standard $0.005 per 1,000 PUT/COPY/POST/LIST and $0.0004 per 1,000 GET/SELECT/other requests, DELETE free (aws.amazon.com/s3/pricing/, as quoted by c3x.dev/blog/s3-request-fees-explained); \
Lambda x86 $0.20 per million requests and $0.0000166667 per GB-second (docs.aws.amazon.com/whitepapers/latest/how-aws-pricing-works/lambda.html, aws.amazon.com/lambda/pricing/). \
Free tiers, storage, data transfer and EventBridge Scheduler invocations are left out.";
}

/// One measured operation: the bill of `ops` repetitions and the Lambda
/// invocations and held seconds they take (one invocation per HTTP request).
struct Row {
    name: String,
    bill: Bill,
    ops: f64,
    invocations: f64,
    held_secs: Option<f64>,
}

/// Knobs of the run.
pub struct CostParams {
    /// Repetitions of each short operation.
    pub ops: usize,
    /// How long the idle reader waits (the row is scaled to one minute).
    pub idle: Duration,
    /// Lambda memory (MB) the held time is priced at.
    pub memory_mb: f64,
}

/// Starts ours with `command` (`{port}` substituted; AWS_ENDPOINT_URL is set
/// to the proxy), measures, renders the markdown.
pub async fn run(command: &str, proxy: &MeterProxy, p: &CostParams, work: &Path) -> Result<String> {
    let spec = ServerSpec {
        name: "ours-aws".into(),
        class: Class::Durable,
        ours: true,
        prefix: "/v1/stream".into(),
        binary: None,
        command: format!("env AWS_ENDPOINT_URL={} {command}", proxy.url()),
    };
    let running = server::start(&spec, work, "cost").await?;
    let client = Client::new(Target::new(&running.base, &spec.prefix))?;
    let rows = measure(&client, proxy, p).await;
    let _ = running.stop().await;
    Ok(render(&rows?, p))
}

async fn measure(client: &Client, proxy: &MeterProxy, p: &CostParams) -> Result<Vec<Row>> {
    let tag = crate::workloads::unique_tag();
    let n = p.ops.max(1);
    let mut rows = Vec::new();
    let small = Bytes::from(vec![b's'; 100]);

    let a = format!("{tag}-append");
    client.create(&a, BINARY, None).await?;
    client.append(&a, BINARY, small.clone()).await?; // warms the meta cache
    proxy.take();
    for _ in 0..n {
        client.append(&a, BINARY, small.clone()).await?;
    }
    rows.push(row("append 100 B (POST, warm)", proxy.take(), n, n, None));

    let big = format!("{tag}-mib");
    client.create(&big, BINARY, None).await?;
    client.append(&big, BINARY, small.clone()).await?;
    proxy.take();
    let mib = Bytes::from(vec![b'm'; 1 << 20]);
    let big_n = n.min(3);
    for _ in 0..big_n {
        client.append(&big, BINARY, mib.clone()).await?;
    }
    rows.push(row("append 1 MiB (POST, chunk to S3)", proxy.take(), big_n, big_n, None));
    let read = client.read_all(&big).await?;
    if read.body.len() != 100 + big_n * (1 << 20) {
        bail!("{big}: read back {} bytes", read.body.len());
    }
    rows.push(row("catch-up read, per 1 MiB from S3 chunks (GET)", proxy.take(), big_n, read.responses, None));

    let c = format!("{tag}-catchup");
    client.create(&c, BINARY, None).await?;
    let record = Bytes::from(vec![b'c'; 10_000]);
    for _ in 0..100 {
        client.append(&c, BINARY, record.clone()).await?;
    }
    proxy.take();
    let mut responses = 0;
    for _ in 0..n.min(5) {
        let r = client.read_all(&c).await?;
        if r.body.len() != 1_000_000 {
            bail!("{c}: read back {} bytes", r.body.len());
        }
        responses += r.responses;
    }
    rows.push(row(
        "catch-up read of 1 MB (100 × 10 KB records inline in DynamoDB)",
        proxy.take(),
        n.min(5),
        responses,
        None,
    ));

    let idle = format!("{tag}-idle");
    client.create(&idle, TEXT, None).await?;
    let tail = client.read_all(&idle).await?.next_offset;
    proxy.take();
    let start = Instant::now();
    let mut polls = 0;
    while start.elapsed() < p.idle {
        let poll = client.long_poll(&idle, &tail, None).await?;
        if poll.status != reqwest::StatusCode::NO_CONTENT {
            bail!("idle long-poll answered {} on a stream nobody writes", poll.status);
        }
        polls += 1;
    }
    let held = start.elapsed().as_secs_f64();
    let minutes = held / 60.0;
    let mut r = row("one idle long-poll reader, per minute", proxy.take(), 1, polls, Some(held));
    r.ops = minutes;
    rows.push(r);
    Ok(rows)
}

fn row(name: &str, bill: Bill, ops: usize, invocations: usize, held_secs: Option<f64>) -> Row {
    Row { name: name.into(), bill, ops: ops as f64, invocations: invocations as f64, held_secs }
}

fn render(rows: &[Row], p: &CostParams) -> String {
    let mut md = String::from(
        "| operation | AWS calls | WCU | RCU | S3 PUT/LIST | S3 GET | DynamoDB + S3 $ per million ops | Lambda $ per million ops | calls per operation |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    let gb = p.memory_mb / 1024.0;
    for r in rows {
        let per = |x: f64| x / r.ops;
        let (w, rd) = (per(r.bill.write_units), per(r.bill.read_units));
        let (t1, t2) = (per(r.bill.s3_tier1 as f64), per(r.bill.s3_tier2 as f64));
        let data = w * Prices::DDB_WRITE_PER_M
            + rd * Prices::DDB_READ_PER_M
            + t1 * Prices::S3_TIER1_PER_M
            + t2 * Prices::S3_TIER2_PER_M;
        let requests = per(r.invocations) * Prices::LAMBDA_REQ_PER_M;
        let lambda = match r.held_secs {
            Some(s) => format!("{:.2}", requests + per(s) * gb * Prices::LAMBDA_GB_S * 1e6),
            None => format!("{requests:.2} + duration"),
        };
        let detail: Vec<String> = r.bill.calls.iter().map(|(k, v)| format!("{k} {:.2}", per(*v as f64))).collect();
        let _ = writeln!(
            md,
            "| {} | {:.2} | {w:.2} | {rd:.2} | {t1:.2} | {t2:.2} | {data:.2} | {lambda} | {} |",
            r.name,
            per(r.bill.total_calls() as f64),
            detail.join(", ")
        );
    }
    let _ = writeln!(
        md,
        "| one processed batch (stream processor) | – | – | – | – | – | – | – | not measured: the processor runner does not run on the AWS substrate yet |"
    );
    let per_ms = gb * Prices::LAMBDA_GB_S * 1e6 / 1000.0;
    let _ = write!(
        md,
        "\nCounted at the metering proxy in front of the emulator (moto) over {} runs of each short operation; WCU/RCU are on-demand request units computed from the items' sizes with DynamoDB's rules (a transaction bills twice, condition checks included). \
\"+ duration\": Lambda also bills each invocation's duration, which depends on AWS latency and is not measured here: ${per_ms:.4} per million invocations per billed millisecond at {} MB. \
The idle reader holds one execution environment for the whole wait (priced as held time at {} MB) and its invocation polls DynamoDB while it waits.\n\n{}\n",
        p.ops,
        p.memory_mb,
        p.memory_mb,
        Prices::NOTE
    );
    md
}
