//! `ds-load aws-scale` (bench/aws-scale.sh): our server on `--store aws`,
//! several processes of it, over the AWS emulator with its latency and
//! limit model on. Measures appends at scale (one hot stream, many
//! streams), idle long-poll and SSE readers (what they cost while idle, how
//! fast they wake) and listing/backfill over a prefix, all counted at the
//! emulator; every run checks that every acknowledged append is readable
//! exactly once. The report starts with the emulator's own ceiling (model
//! off) and ds-load's, and states the model it ran under.

pub mod appends;
pub mod emulator;
pub mod listing;
pub mod readers;
mod report;

use crate::aws_ceiling;
use crate::calibrate;
use crate::server::{self, Class, Running, ServerSpec};
use anyhow::{bail, Context, Result};
use emulator::Emulator;
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

/// What to run (the CLI's knobs; see `ds-load aws-scale --help`).
#[derive(Clone, Debug)]
pub struct Params {
    /// Our server's command line, `{port}` substituted.
    pub server: String,
    /// The Lambda router's command line, `{port}` and `{processors}` substituted.
    pub router: Option<String>,
    pub emulator: String,
    pub sections: Vec<String>,
    /// (processes, writers, streams) per append row.
    pub append_rows: Vec<(usize, usize, usize)>,
    pub append_secs: f64,
    pub reader_modes: Vec<readers::Mode>,
    pub reader_counts: Vec<usize>,
    pub reader_processes: Vec<usize>,
    pub reader_window: Duration,
    pub wake_appends: usize,
    pub list_streams: usize,
    pub list_matches: usize,
    pub calibration_secs: f64,
    /// Every modeled latency (p50, p99, per item) times this; 1: AWS's
    /// figures. Above 1 it slows every call alike, so that a row whose
    /// calls would outrun the emulator's own ceiling at AWS's latencies
    /// (many independent streams) can still be measured against the same
    /// model's single-writer rate.
    pub model_scale: f64,
    pub work_dir: PathBuf,
    pub title: String,
    /// Markdown after the title.
    pub preamble: String,
}

/// Parses "1x64x1,4x64x1" (processes × writers × streams).
pub fn parse_rows(s: &str) -> Result<Vec<(usize, usize, usize)>> {
    s.split(',')
        .filter(|r| !r.trim().is_empty())
        .map(|r| {
            let n: Vec<usize> = r.trim().split('x').map(str::parse).collect::<Result<_, _>>()?;
            match n[..] {
                [p, w, s] if p >= 1 && w >= p && s >= 1 && w >= s => Ok((p, w, s)),
                _ => bail!("append row {r:?} is not PxWxS with 1 <= P <= W and 1 <= S <= W"),
            }
        })
        .collect()
}

pub struct Results {
    pub ceiling: Option<aws_ceiling::Ceiling>,
    pub tool: Option<calibrate::Calibration>,
    pub model: serde_json::Value,
    /// [`Params::model_scale`], for the report.
    pub model_scale: f64,
    pub appends: Vec<appends::Row>,
    pub readers: Vec<readers::Row>,
    pub listing: Option<Result<ListingResults, String>>,
}

pub struct ListingResults {
    pub fill: listing::Fill,
    pub listing: Result<listing::Measured, String>,
    pub backfill: Result<listing::Measured, String>,
}

fn failed(e: anyhow::Error) -> String {
    format!("{e:#}")
}

/// Runs everything `p` asks for and returns the markdown report.
pub async fn run(p: &Params) -> Result<String> {
    let emu = Emulator::new(&p.emulator)?;
    let threads = crate::workloads::append::load_threads();
    let mut results = Results {
        ceiling: None,
        tool: None,
        model: json!(null),
        model_scale: p.model_scale,
        appends: Vec::new(),
        readers: Vec::new(),
        listing: None,
    };
    if p.calibration_secs > 0.0 {
        eprintln!("aws-scale: the emulator's own ceiling (model off), then ds-load's");
        emu.model(&json!({"latency": false, "limits": false})).await?;
        results.ceiling = Some(aws_ceiling::measure(&p.emulator, 16, p.calibration_secs, threads).await?);
        let shape = calibrate::ReadShape { bytes: 100_000, reads: 3 };
        results.tool = Some(calibrate::run(&[1, 64], p.calibration_secs, threads, shape, &p.work_dir).await?);
    }
    emu.model(&json!({"preset": "aws"})).await?;
    if p.model_scale != 1.0 {
        let state = emu.model_state().await?;
        emu.model(&json!({ "latency": scaled_latency(&state["latency_ms"], p.model_scale) })).await?;
    }
    results.model = emu.model_state().await?;

    let needed = p.append_rows.iter().map(|r| r.0).chain(p.reader_processes.iter().copied()).max().unwrap_or(1).max(1);
    let mut servers = Vec::new();
    let outcome = async {
        for i in 0..needed {
            let spec = spec(&format!("ours-aws-{i}"), &p.server);
            servers.push(server::start(&spec, &p.work_dir, "scale").await?);
        }
        let bases: Vec<String> = servers.iter().map(|s| s.base.clone()).collect();
        let tag = crate::workloads::unique_tag();
        if p.sections.iter().any(|s| s == "listing") {
            results.listing = Some(listing_section(p, &emu, &bases[0], &tag).await.map_err(failed));
        }
        if p.sections.iter().any(|s| s == "appends") {
            for &shape in &p.append_rows {
                eprintln!("aws-scale: appends {}x{}x{}", shape.0, shape.1, shape.2);
                let row_tag = format!("{tag}-a{}x{}x{}", shape.0, shape.1, shape.2);
                let secs = Duration::from_secs_f64(p.append_secs);
                let result = appends::row(&bases, &emu, &row_tag, shape, secs).await.map_err(failed);
                results.appends.push(appends::Row { processes: shape.0, writers: shape.1, streams: shape.2, result });
            }
        }
        if p.sections.iter().any(|s| s == "readers") {
            for &mode in &p.reader_modes {
                for &processes in &p.reader_processes {
                    for &count in &p.reader_counts {
                        eprintln!("aws-scale: {count} idle {} readers over {processes} processes", mode.label());
                        let shape = (mode, processes, count);
                        let result =
                            readers::row(&bases, &emu, &format!("{tag}-r"), shape, p.reader_window, p.wake_appends)
                                .await
                                .map_err(failed);
                        results.readers.push(readers::Row { mode, processes, readers: count, result });
                    }
                }
            }
        }
        Ok::<(), anyhow::Error>(())
    }
    .await;
    for s in servers {
        let _ = s.stop().await;
    }
    outcome?;
    Ok(report::render(p, &results))
}

fn spec(name: &str, command: &str) -> ServerSpec {
    ServerSpec {
        name: name.into(),
        class: Class::Durable,
        ours: true,
        prefix: "/v1/stream".into(),
        binary: None,
        command: command.into(),
    }
}

async fn listing_section(p: &Params, emu: &Emulator, base: &str, tag: &str) -> Result<ListingResults> {
    let router_cmd = p.router.as_deref().context("the listing section needs --router")?;
    let root = format!("scale-list-{tag}");
    eprintln!("aws-scale: filling the table with {} streams (model latency off while filling)", p.list_streams);
    emu.model(&json!({"latency": false})).await?;
    let fill = listing::fill(base, &root, p.list_streams, p.list_matches).await;
    emu.model(&json!({"latency": true})).await?;
    let fill = fill?;
    let toml = p.work_dir.join("scale-processors.toml");
    std::fs::write(&toml, listing::processors_toml(&root))?;
    let spec = spec("lambda-router", &router_cmd.replace("{processors}", &toml.display().to_string()));
    let router: Running = server::start(&spec, &p.work_dir, "scale").await?;
    let (hook, hook_task) = listing::hook_receiver().await?;
    eprintln!("aws-scale: listing and backfill over {} on the Lambda router", fill.prefix);
    let listed = listing::listing(&router.base, emu, &fill).await.map_err(failed);
    let backfilled = listing::backfill(&router.base, emu, &fill, &hook).await.map_err(failed);
    hook_task.abort();
    let _ = router.stop().await;
    Ok(ListingResults { fill, listing: listed, backfill: backfilled })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_parse_and_are_checked() {
        assert_eq!(parse_rows("1x1x1, 4x64x1,1x64x64").expect("rows"), vec![(1, 1, 1), (4, 64, 1), (1, 64, 64)]);
        assert!(parse_rows("4x2x1").is_err(), "more processes than writers");
        assert!(parse_rows("1x2").is_err());
        assert!(parse_rows("1x2x4").is_err(), "more streams than writers");
    }
}

/// The model's latency table (`latency_ms` of `/_emulator/model`) with every
/// duration times `scale`: p50, p99 and their per-item slopes; item counts
/// are kept.
fn scaled_latency(latency: &serde_json::Value, scale: f64) -> serde_json::Value {
    use serde_json::Value;
    let mut out = latency.clone();
    for dist in out.as_object_mut().into_iter().flat_map(|s| s.values_mut()).filter_map(Value::as_object_mut) {
        for dist in dist.values_mut().filter_map(Value::as_object_mut) {
            for key in ["p50", "p99", "p50_per_item", "p99_per_item"] {
                if let Some(v) = dist.get(key).and_then(Value::as_f64) {
                    dist.insert(key.to_owned(), json!(v * scale));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod scale_tests {
    use super::*;

    #[test]
    fn scaling_multiplies_every_duration_and_keeps_item_counts() {
        let model = json!({"dynamodb": {"TransactWriteItems": {"p50": 25.0, "p99": 90.0, "items": 5, "p50_per_item": 0.5, "p99_per_item": 0.25}},
                           "s3": {"*": {"p50": 30.0, "p99": 200.0}}});
        let scaled = scaled_latency(&model, 4.0);
        let twi = &scaled["dynamodb"]["TransactWriteItems"];
        assert_eq!((twi["p50"].as_f64(), twi["p99"].as_f64()), (Some(100.0), Some(360.0)));
        assert_eq!((twi["p50_per_item"].as_f64(), twi["p99_per_item"].as_f64()), (Some(2.0), Some(1.0)));
        assert_eq!(twi["items"].as_u64(), Some(5), "an item count is not a duration");
        assert_eq!(scaled["s3"]["*"]["p99"].as_f64(), Some(800.0));
    }
}
