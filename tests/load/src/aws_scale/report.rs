//! The markdown report of `ds-load aws-scale`.

use super::{readers, ListingResults, Params, Results};
use serde_json::Value;
use std::fmt::Write;

/// A cell of a rate whose TransactWriteItems rate is at least this share of
/// the emulator's own ceiling says more about the emulator than the server.
const EMULATOR_BOUND_SHARE: f64 = 0.5;

fn ms(x: f64) -> String {
    if x.is_nan() {
        "–".into()
    } else if x < 10.0 {
        format!("{x:.1} ms")
    } else {
        format!("{x:.0} ms")
    }
}

fn num(x: f64) -> String {
    if x.is_nan() {
        "–".into()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

pub fn render(p: &Params, r: &Results) -> String {
    let mut md = format!("# {}\n\n", p.title);
    if !p.preamble.trim().is_empty() {
        let _ = writeln!(md, "{}\n", p.preamble.trim());
    }
    if let Some(c) = &r.ceiling {
        let _ = writeln!(md, "{}\n", c.markdown());
    }
    if let Some(t) = &r.tool {
        let _ = writeln!(md, "{}\n", t.markdown());
    }
    model_section(&mut md, &r.model, r);
    if !r.appends.is_empty() {
        appends_section(&mut md, p, r);
    }
    if !r.readers.is_empty() {
        let get_ceiling = r.ceiling.as_ref().and_then(|c| c.rate("GetItem"));
        readers_section(&mut md, p, &r.readers, get_ceiling);
    }
    if let Some(l) = &r.listing {
        listing_section(&mut md, l);
    }
    md
}

fn dist(model: &Value, svc: &str, op: &str) -> Option<(f64, f64)> {
    let ops = model.get("latency_ms")?.get(svc)?;
    let d = ops.get(op).or_else(|| ops.get("*"))?;
    Some((d.get("p50")?.as_f64()?, d.get("p99")?.as_f64()?))
}

/// The TransactWriteItems row's label: the item count its p50/p99 are for,
/// and what each item more adds (from the model, scaled or not).
fn transact_label(model: &Value) -> String {
    let d = &model["latency_ms"]["dynamodb"]["TransactWriteItems"];
    match (d["items"].as_f64(), d["p50_per_item"].as_f64(), d["p99_per_item"].as_f64()) {
        (Some(items), Some(p50), Some(p99)) => {
            format!("DynamoDB TransactWriteItems ({items} items; +{} / +{} ms per item more)", num(p50), num(p99))
        }
        _ => "DynamoDB TransactWriteItems".to_owned(),
    }
}

fn model_section(md: &mut String, model: &Value, r: &Results) {
    md.push_str("## The model the runs used\n\n");
    if r.model_scale != 1.0 {
        let _ = writeln!(
            md,
            "**Every latency below is AWS's default × {} (`--model-scale {}`)**: slower calls alike, so that rows whose calls would outrun the emulator's own ceiling at AWS's latencies stay below it; compare a row with this run's own 1 × 1 × 1, not with figures at AWS's latencies.\n",
            r.model_scale, r.model_scale
        );
    }
    md.push_str("Latency per call (log-normal through the median and 99th percentile, capped at 3 × p99; the emulator's own time counts towards it, the rest is slept outside its locks). Sources for each default: infra/aws-emulator/README.md, \"Latency and limit model\".\n\n| API | p50 | p99 |\n|---|---:|---:|\n");
    for (svc, op, label) in [
        ("dynamodb", "GetItem", "DynamoDB GetItem, Query, Scan, PutItem, UpdateItem, DeleteItem"),
        ("dynamodb", "TransactWriteItems", &transact_label(model)),
        ("s3", "PutObject", "S3 PutObject"),
        ("s3", "GetObject", "S3 GetObject (and other S3 calls)"),
        ("sqs", "*", "SQS"),
        ("scheduler", "*", "EventBridge Scheduler"),
    ] {
        if let Some((p50, p99)) = dist(model, svc, op) {
            let _ = writeln!(md, "| {label} | {p50} ms | {p99} ms |");
        }
    }
    let lim = |k: &str| model.get("limits").and_then(|l| l.get(k)).and_then(Value::as_f64).unwrap_or(f64::NAN);
    let _ = writeln!(
        md,
        "\nLimits: {} WCU and {} RCU per second per partition key, {} / {} per table, {} s of burst; beyond them a call is throttled as DynamoDB throttles it (ProvisionedThroughputExceededException, or a cancelled transaction with ThrottlingError) and consumes nothing. Transactional writes cost twice; capacity is counted per call at the emulator.",
        lim("partition_wcu"),
        lim("partition_rcu"),
        lim("table_wcu"),
        lim("table_rcu"),
        lim("burst_s")
    );
    let warm = r.appends.iter().find(|a| (a.processes, a.writers, a.streams) == (1, 1, 1));
    if let Some(Ok(f)) = warm.map(|a| &a.result) {
        let wcu = f.wcu_per_append();
        let _ = writeln!(
            md,
            "\n**Physical ceiling of one stream, one append per commit**: each commit is one transaction on the stream's partition key; a lone writer (1 × 1 × 1) commits every append alone, so its stream is bounded by the per-partition write limit ÷ WCU per commit = {} ÷ {} = **{:.0} appends/s** (WCU per commit measured at 1 × 1 × 1). Appends in flight together on one stream share a commit (group commit, shared/store-aws `group.rs`), so with many writers the bound is this figure times the appends per commit, less the extra units their bytes cost.",
            lim("partition_wcu"),
            num(wcu),
            lim("partition_wcu") / wcu
        );
    }
    md.push('\n');
}

fn appends_section(md: &mut String, p: &Params, r: &Results) {
    let _ = writeln!(
        md,
        "## Appends\n\n100 B records, {} s per row; writer w appends to stream w mod S through process w mod P (one keep-alive connection each, the next append sent when the last is acknowledged). Latency: send → acknowledgement. Counted at the emulator over the timed run: conditional-check failures (a transaction cancelled for a failed condition, or a conditional write refused), retries (TransactWriteItems beyond one per acknowledged append), all AWS calls, DynamoDB write and read units, and their on-demand price (US East; DynamoDB only: 100 B appends stay inline). Every stream is then read back and holds exactly the acknowledged records, each once, in each writer's order.\n",
        p.append_secs
    );
    md.push_str("| processes × writers × streams | appends/s | p50 | p99 | cond. failures / append | retries / append | AWS calls / append | WCU / append | RCU / append | $ / million appends | DynamoDB calls in the run | notes |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
    let ceiling = r.ceiling.as_ref().and_then(|c| c.rate("TransactWriteItems×2"));
    for row in &r.appends {
        let label = format!("{} × {} × {}", row.processes, row.writers, row.streams);
        match &row.result {
            Err(e) => {
                let _ = writeln!(md, "| {label} | **FAIL** | | | | | | | | | | {} |", e.replace('|', "/"));
            }
            Ok(f) => {
                let mut notes = Vec::new();
                if let Some(c) = ceiling {
                    if f.transactions_per_s() >= EMULATOR_BOUND_SHARE * c {
                        notes.push(format!(
                            "**emulator-bound**: {:.0} TransactWriteItems/s ≥ {:.0}% of its ceiling",
                            f.transactions_per_s(),
                            EMULATOR_BOUND_SHARE * 100.0
                        ));
                    }
                }
                if f.counts.throttled() > 0 {
                    notes.push(format!("{} calls throttled", f.counts.throttled()));
                }
                let _ = writeln!(
                    md,
                    "| {label} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {} | {} |",
                    f.rate(),
                    ms(f.p50_ms),
                    ms(f.p99_ms),
                    num(f.condition_failures_per_append()),
                    num(f.retries_per_append()),
                    num(f.calls_per_append()),
                    num(f.wcu_per_append()),
                    num(f.rcu_per_append()),
                    f.dollars_per_million(),
                    f.counts.ddb_breakdown(),
                    notes.join("; ")
                );
            }
        }
    }
    md.push('\n');
}

fn readers_section(md: &mut String, p: &Params, rows: &[readers::Row], get_ceiling: Option<f64>) {
    let _ = writeln!(
        md,
        "## Idle readers\n\nR readers of one stream parked at its tail (long-poll requests re-issued as they end, or SSE connections), reader r on process r mod P. Idle window {:.0} s: DynamoDB reads (GetItem, Query, Scan) and read units counted at the emulator, per minute for all readers and per reader-minute. Then {} appends to process 0, 0.5 s apart: wake latency is append sent → the reader holds its record, over every reader and append. Every reader ends with exactly the appended records, and a catch-up read agrees. \"Calls per wake\": every DynamoDB call of the wake phase (the append and what the woken readers read) per append; when the emulator's own time for them, at its GetItem ceiling, is at least half the wake p50, the row is marked **emulator-bound**.\n",
        p.reader_window.as_secs_f64(),
        p.wake_appends
    );
    md.push_str("| mode | processes | readers | DynamoDB reads / min (all readers) | reads / reader-minute | RCU / reader-minute | wake p50 | wake p99 | DynamoDB calls per wake | DynamoDB calls in the idle window | notes |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
    for row in rows {
        let head = format!("| {} | {} | {} |", row.mode.label(), row.processes, row.readers);
        match &row.result {
            Err(e) => {
                let _ = writeln!(md, "{head} **FAIL** | | | | | | | | {} |", e.replace('|', "/"));
            }
            Ok(f) => {
                let per_min = f.reads_per_minute();
                let per_wake = f.waking.ddb_total() as f64 / f.appends.max(1) as f64;
                let floor_ms = get_ceiling.map(|c| per_wake / c * 1000.0);
                let note = match floor_ms {
                    Some(t) if t >= 0.5 * f.wake_p50_ms => {
                        format!("**emulator-bound**: its own time for one wake's calls ≥ {}", ms(t))
                    }
                    _ => String::new(),
                };
                let _ = writeln!(
                    md,
                    "{head} {} | {} | {} | {} | {} | {} | {} | {note} |",
                    num(per_min),
                    num(per_min / row.readers as f64),
                    num(f.per_reader_minute(f.idle.rcu, row.readers)),
                    ms(f.wake_p50_ms),
                    ms(f.wake_p99_ms),
                    num(per_wake),
                    f.idle.ddb_breakdown()
                );
            }
        }
    }
    md.push('\n');
}

fn listing_section(md: &mut String, l: &Result<ListingResults, String>) {
    md.push_str("## Listing and backfill over a prefix\n\n");
    let l = match l {
        Ok(l) => l,
        Err(e) => {
            let _ = writeln!(md, "**FAIL**: {e}\n");
            return;
        }
    };
    let _ = writeln!(
        md,
        "A table of {} streams created for this section (plus a few from start-up probes), {} of them under `{}`. On the Lambda HTTP function's router (ds-lambda-router: functions/lambda-http's router over plain HTTP, `DS_PROCESSORS` = one counter on `{}*`): `GET /v1/processors?limit={}` followed to its end, and the creation of a webhook subscription on `{}*` (its backfill). Counted at the emulator; both must find exactly the {} streams.\n",
        l.fill.total,
        l.fill.matching,
        l.fill.prefix,
        l.fill.prefix,
        super::listing::LIST_PAGE,
        l.fill.prefix,
        l.fill.matching
    );
    md.push_str("| operation | HTTP requests | DynamoDB calls | by operation | RCU | streams found |\n|---|---:|---:|---|---:|---:|\n");
    for (name, m) in [("GET /v1/processors, all pages", &l.listing), ("subscription backfill (PUT)", &l.backfill)] {
        match m {
            Err(e) => {
                let _ = writeln!(md, "| {name} | **FAIL** | | | | {} |", e.replace('|', "/"));
            }
            Ok(m) => {
                let _ = writeln!(
                    md,
                    "| {name} | {} | {} | {} | {} | {} |",
                    m.requests,
                    m.counts.ddb_total(),
                    m.counts.ddb_breakdown(),
                    num(m.counts.rcu),
                    m.found
                );
            }
        }
    }
    let _ = writeln!(md, "\n(Filling the table took {:.1} s, with the model's latency off.)\n", l.fill.secs);
}
