//! Calibration: the load tool's ceiling on this machine, measured against
//! the trivial server (`sink`) before any server under test runs, with the
//! same request shape as P1 (POST, 100 B body, one connection per writer).
//! A measured rate above `LOAD_BOUND_SHARE` of the ceiling at the same
//! concurrency says more about the tool than about the server: the report
//! marks such cells **load-bound**. When wrk is installed it is run against
//! the same sink, so the report also says how close ds-load gets to it.
//! P2's reader is calibrated the same way: catch-up reads of a body of P2's
//! size that the sink keeps ready, read by the reader P2 uses.

use crate::cpu::CpuMeter;
use crate::raw::{self, Reply};
use crate::workloads::append;
use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::Command;

/// Share of the ceiling above which a throughput cell is load-bound.
pub const LOAD_BOUND_SHARE: f64 = 0.5;

/// One calibration run.
#[derive(Clone, Debug)]
pub struct Point {
    pub concurrency: usize,
    pub rate: f64,
    /// Other processes' CPU during the run (cores).
    pub others: Option<f64>,
}

#[derive(Clone, Debug, Default)]
pub struct Calibration {
    pub secs: f64,
    pub threads: usize,
    pub tool: Vec<Point>,
    /// wrk's best rate (over -t1 and -t2) at the top concurrency.
    pub wrk: Option<(usize, Point)>,
    /// Why wrk was not measured.
    pub wrk_note: Option<String>,
    /// P2's reader against the sink: bytes per read and MB/s (median).
    pub read: Option<(usize, f64)>,
}

/// The catch-up reads the P2 reader is calibrated with.
#[derive(Clone, Copy, Debug)]
pub struct ReadShape {
    /// Body bytes of one read (P2's records × 100 B).
    pub bytes: usize,
    /// Reads measured; the ceiling is their median.
    pub reads: usize,
}

impl Default for ReadShape {
    fn default() -> Self {
        Self { bytes: 1_000_000, reads: 5 }
    }
}

impl Calibration {
    /// ds-load's ceiling at `concurrency` (the nearest calibrated one at or
    /// above it; the top one otherwise).
    pub fn ceiling(&self, concurrency: usize) -> Option<f64> {
        let by: BTreeMap<usize, f64> = self.tool.iter().map(|p| (p.concurrency, p.rate)).collect();
        by.range(concurrency..).next().or_else(|| by.iter().next_back()).map(|(_, r)| *r)
    }

    pub fn is_load_bound(&self, concurrency: usize, rate: f64) -> bool {
        self.ceiling(concurrency).is_some_and(|c| rate > LOAD_BOUND_SHARE * c)
    }

    /// A P2 figure (MB/s) above the load-bound share of the reader's ceiling.
    pub fn is_read_bound(&self, mbps: f64) -> bool {
        self.read.is_some_and(|(_, c)| mbps > LOAD_BOUND_SHARE * c)
    }

    /// The report's calibration line.
    pub fn markdown(&self) -> String {
        let fmt_others = |o: Option<f64>| o.map_or("?".to_string(), |o| format!("{o:.2}"));
        let points: Vec<String> = self
            .tool
            .iter()
            .map(|p| format!("c={} {:.0}/s (others {} cores)", p.concurrency, p.rate, fmt_others(p.others)))
            .collect();
        let mut s = format!(
            "**Calibration:** ds-load's ceiling against the trivial server (hyper, reads the body, answers 204; POST 100 B, {} s per point, {} load thread{}): {}.",
            self.secs,
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            points.join(", ")
        );
        match (&self.wrk, self.tool.iter().max_by_key(|p| p.concurrency)) {
            (Some((t, w)), Some(top)) if w.concurrency == top.concurrency => s.push_str(&format!(
                " wrk (-t{t} -c{}) against the same server: {:.0}/s (others {} cores): ds-load reaches {:.0}% of wrk.",
                w.concurrency,
                w.rate,
                fmt_others(w.others),
                100.0 * top.rate / w.rate
            )),
            _ => s.push_str(&format!(" wrk: {}.", self.wrk_note.as_deref().unwrap_or("not measured"))),
        }
        if let Some((bytes, mbps)) = self.read {
            s.push_str(&format!(
                " P2's reader against the same server answering a {bytes} B catch-up: {mbps:.1} MB/s."
            ));
        }
        s.push_str(&format!(
            " Throughput cells (and P2 figures) above {:.0}% of the ceiling at their concurrency are marked **load-bound**.",
            LOAD_BOUND_SHARE * 100.0
        ));
        s
    }
}

fn accept_any_2xx(r: &Reply) -> Result<()> {
    if (200..300).contains(&r.status) {
        Ok(())
    } else {
        bail!("HTTP {}", r.status)
    }
}

/// Starts the sink (this executable's `sink` subcommand), measures ds-load
/// at each concurrency and wrk at the largest, stops the sink.
pub async fn run(
    concurrencies: &[usize],
    secs: f64,
    threads: usize,
    read: ReadShape,
    work: &Path,
) -> Result<Calibration> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let exe = std::env::current_exe()?;
    let mut sink = Command::new(&exe)
        .args(["sink", "--bind", &format!("127.0.0.1:{port}"), "--read-bytes", &read.bytes.to_string()])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting the sink")?;
    let pid = sink.id().ok_or_else(|| anyhow!("sink has no pid"))?;
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let t0 = Instant::now();
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        if t0.elapsed() > Duration::from_secs(10) {
            bail!("the sink did not listen within 10 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let duration = Duration::from_secs_f64(secs);
    let mut cal = Calibration { secs, threads, ..Default::default() };
    let mut cs = concurrencies.to_vec();
    cs.sort_unstable();
    cs.dedup();
    for &c in &cs {
        let host = format!("127.0.0.1:{port}");
        let templates = append::templates(&host, "/v1/stream", &format!("calibration-c{c}"), 1, c)?;
        let meter = CpuMeter::start(&[pid]);
        let run = raw::drive(addr, templates, duration, threads, accept_any_2xx).await?;
        cal.tool.push(Point { concurrency: c, rate: run.rate(), others: meter.others_cores() });
        eprintln!("    calibration: ds-load c={c}: {:.0}/s", run.rate());
    }
    let mbps = read_ceiling(addr, read).await?;
    eprintln!("    calibration: P2 reader: {mbps:.1} MB/s");
    cal.read = Some((read.bytes, mbps));
    match cs.last() {
        Some(&top) => match wrk_best(port, top, secs, pid, work).await {
            Ok(best) => cal.wrk = Some(best),
            Err(e) => cal.wrk_note = Some(format!("{e:#}")),
        },
        None => cal.wrk_note = Some("no concurrency calibrated".into()),
    }
    let _ = sink.start_kill();
    let _ = sink.wait().await;
    Ok(cal)
}

/// Median MB/s of P2's reader fetching the sink's catch-up body.
async fn read_ceiling(addr: std::net::SocketAddr, read: ReadShape) -> Result<f64> {
    let mut conn = raw::Conn::new(addr);
    conn.connect().await?;
    let request = raw::get_request(&addr.to_string(), "/v1/stream/calibration-read?offset=-1");
    let mut rates = Vec::new();
    for _ in 0..read.reads.max(1) {
        let start = Instant::now();
        let got = conn.fetch(&request).await?;
        let secs = start.elapsed().as_secs_f64();
        if got.status != 200 || got.body.len() != read.bytes || !got.up_to_date {
            bail!("sink read: HTTP {}, {} of {} B", got.status, got.body.len(), read.bytes);
        }
        rates.push(got.body.len() as f64 / secs / 1e6);
    }
    Ok(crate::stats::median(&rates))
}

/// wrk with 1 and 2 threads; the faster.
async fn wrk_best(port: u16, c: usize, secs: f64, sink: u32, work: &Path) -> Result<(usize, Point)> {
    let script = work.join("calibration-post.lua");
    std::fs::write(
        &script,
        format!(
            "wrk.method = \"POST\"\nwrk.body = string.rep(\".\", {})\nwrk.headers[\"Content-Type\"] = \"application/octet-stream\"\n",
            crate::record::RECORD_LEN
        ),
    )?;
    let mut best: Option<(usize, Point)> = None;
    for t in [1usize, 2] {
        let meter = CpuMeter::start(&[sink]);
        let out = Command::new("wrk")
            .args([
                &format!("-t{t}"),
                &format!("-c{c}"),
                &format!("-d{}s", secs.ceil().max(1.0) as u64),
                "-s",
                &script.display().to_string(),
                &format!("http://127.0.0.1:{port}/v1/stream/calibration-wrk"),
            ])
            .stdin(Stdio::null())
            .output()
            .await
            .context("wrk not installed (Debian package wrk)")?;
        let others = meter.others_cores();
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!("wrk failed: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        let rate = parse_wrk(&text)?;
        eprintln!("    calibration: wrk -t{t} -c{c}: {rate:.0}/s");
        if best.as_ref().is_none_or(|(_, b)| rate > b.rate) {
            best = Some((t, Point { concurrency: c, rate, others }));
        }
    }
    best.ok_or_else(|| anyhow!("no wrk run"))
}

/// Requests/sec from wrk's summary; any non-2xx answer or socket error
/// makes the calibration fail rather than count.
pub fn parse_wrk(text: &str) -> Result<f64> {
    if let Some(l) = text.lines().find(|l| l.contains("Non-2xx or 3xx responses") || l.contains("Socket errors")) {
        bail!("wrk saw errors: {}", l.trim());
    }
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("Requests/sec:"))
        .ok_or_else(|| anyhow!("no Requests/sec in wrk output"))?;
    line.split(':').nth(1).and_then(|v| v.trim().parse().ok()).ok_or_else(|| anyhow!("bad wrk line {line:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_wrk_output() {
        let ok = "Running 2s test @ http://127.0.0.1:1/x\n  1 threads and 64 connections\nRequests/sec:  95123.45\nTransfer/sec:      7.53MB\n";
        assert!((parse_wrk(ok).expect("rate") - 95123.45).abs() < 1e-6);
        assert!(parse_wrk("Requests/sec: 10\n  Non-2xx or 3xx responses: 3\n").is_err());
    }

    #[test]
    fn ceilings_and_load_bound_cells() {
        let p = |c, rate| Point { concurrency: c, rate, others: Some(0.0) };
        let cal = Calibration { tool: vec![p(1, 10_000.0), p(16, 60_000.0), p(64, 80_000.0)], ..Default::default() };
        assert_eq!(cal.ceiling(1), Some(10_000.0));
        assert_eq!(cal.ceiling(8), Some(60_000.0));
        assert_eq!(cal.ceiling(128), Some(80_000.0));
        assert!(cal.is_load_bound(1, 5_001.0));
        assert!(!cal.is_load_bound(64, 40_000.0));
        assert!(Calibration::default().ceiling(1).is_none());
        let read = Calibration { read: Some((1_000_000, 2_000.0)), ..Default::default() };
        assert!(read.is_read_bound(1_001.0) && !read.is_read_bound(999.0));
        assert!(!Calibration::default().is_read_bound(1e9), "no calibration, no mark");
    }
}
