//! The bench loop: every round runs every server once, in the same order
//! (A B C D A B C D …), each in a fresh process on a fresh port and data
//! directory, so slow drift on the machine spreads evenly over servers.

use crate::calibrate::Calibration;
use crate::client::{Client, Target};
use crate::cpu::{is_busy, CpuMeter};
use crate::metrics::Metric;
use crate::server::{self, ServerSpec};
use crate::workloads::{append, create, live, memory, read, Outcome, Params};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every sample taken, per (server index, metric), one entry per round.
#[derive(Default)]
pub struct Results {
    pub samples: BTreeMap<(usize, Metric), Vec<Result<f64, String>>>,
    /// Other processes' CPU (cores) during the run behind each sample, in
    /// the same order as `samples` (None: not measured, e.g. P6).
    pub others: BTreeMap<(usize, Metric), Vec<Option<f64>>>,
    /// The load tool's ceiling, when the bench calibrated.
    pub calibration: Option<Calibration>,
    /// P1's concurrency, for comparing cells with the ceiling.
    pub p1_concurrency: usize,
}

/// Outcomes of one workload run with the others' CPU during it.
pub type Measured = (Vec<Outcome>, Option<f64>);

impl Results {
    pub fn record(&mut self, server: usize, measured: Vec<Measured>) {
        for (outcomes, others) in measured {
            for (m, r) in outcomes {
                self.samples.entry((server, m)).or_default().push(r);
                self.others.entry((server, m)).or_default().push(others);
            }
        }
    }

    pub fn get(&self, server: usize, m: Metric) -> &[Result<f64, String>] {
        self.samples.get(&(server, m)).map(Vec::as_slice).unwrap_or(&[])
    }

    pub fn others(&self, server: usize, m: Metric) -> &[Option<f64>] {
        self.others.get(&(server, m)).map(Vec::as_slice).unwrap_or(&[])
    }

    /// (runs flagged busy, runs measured), counting each workload run once
    /// per metric it produced.
    pub fn busy_runs(&self) -> (usize, usize) {
        let all: Vec<Option<f64>> = self.others.values().flatten().copied().filter(Option::is_some).collect();
        (all.iter().filter(|o| is_busy(**o)).count(), all.len())
    }

    /// True when `value` of `m` is above the load-bound share of the ceiling.
    pub fn load_bound(&self, m: Metric, value: f64) -> bool {
        match (&self.calibration, m.concurrency(self.p1_concurrency)) {
            (Some(cal), _) if m == Metric::P2ReadMbps => cal.is_read_bound(value),
            (Some(cal), Some(c)) => cal.is_load_bound(c, value),
            _ => false,
        }
    }

    /// True when any measurement of `server` failed.
    pub fn any_failed(&self, server: usize) -> bool {
        self.samples.iter().any(|((s, _), v)| *s == server && v.iter().any(Result::is_err))
    }
}

/// Which workloads to run: any of p1, p2, p3, p4, p6.
pub type Workloads = BTreeSet<String>;

pub async fn run(
    specs: &[ServerSpec],
    params: &Params,
    rounds: usize,
    workloads: &Workloads,
    work: &Path,
    calibration: Option<Calibration>,
) -> Results {
    let mut results = Results { calibration, p1_concurrency: params.p1_concurrency, ..Default::default() };
    for round in 1..=rounds {
        for (i, spec) in specs.iter().enumerate() {
            eprintln!("[round {round}/{rounds}] {} ...", spec.name);
            let measured = one_server(spec, params, workloads, work, round).await;
            for (outcomes, others) in &measured {
                for (m, r) in outcomes {
                    let info = m.info();
                    let o = others.map_or(String::new(), |o| format!("  (others {o:.2} cores)"));
                    match r {
                        Ok(v) => eprintln!("    {:<55} {v:>12.1} {}{o}", info.title, info.unit),
                        Err(e) => eprintln!("    {:<55} FAIL: {e}{o}", info.title),
                    }
                }
            }
            results.record(i, measured);
        }
    }
    results
}

/// How often a run that saw a busy machine is repeated
/// (`DS_BENCH_BUSY_RETRIES`, default 2); the quietest attempt is kept.
fn busy_retries() -> usize {
    std::env::var("DS_BENCH_BUSY_RETRIES").ok().and_then(|v| v.parse().ok()).unwrap_or(2)
}

/// Starts one server, runs the selected workloads against it, stops it.
async fn one_server(
    spec: &ServerSpec,
    params: &Params,
    workloads: &Workloads,
    work: &Path,
    round: usize,
) -> Vec<Measured> {
    let selected = |w: &str| workloads.contains(w);
    let running = match server::start(spec, work, &format!("r{round}")).await {
        Ok(r) => r,
        Err(e) => {
            // Nothing can be measured: every selected metric fails this round.
            let all: Vec<Metric> = Metric::ALL.into_iter().filter(|m| selected(m.workload())).collect();
            return vec![(crate::workloads::fail_all(&all, &e), None)];
        }
    };
    let mut out: Vec<Outcome> = Vec::new();
    if selected("p6") {
        out.push((Metric::P6ColdStart, Ok(running.cold_start.as_secs_f64() * 1e3)));
        if let Some(bin) = &spec.binary {
            let size =
                std::fs::metadata(bin).map(|m| m.len() as f64 / 1e6).map_err(|e| format!("{}: {e}", bin.display()));
            out.push((Metric::P6BinarySize, size));
            if let Some(stripped) = stripped_mb(bin, &work.join(format!("{}.stripped", spec.name))) {
                out.push((Metric::P6StrippedSize, Ok(stripped)));
            }
        }
    }
    let p = Params { tag: format!("{}-r{round}", params.tag), ..params.clone() };
    let mut measured = vec![(out, None)];
    measured.extend(measure(&running.base, &spec.prefix, Some(running.pid), &p, workloads).await);
    let log = running.log.clone();
    if let Err(e) = running.stop().await {
        eprintln!("    warning: stopping {}: {e:#} (log {})", spec.name, log.display());
    }
    measured
}

/// Runs the selected workloads once against a server that is already up.
pub async fn run_attached(
    base: &str,
    prefix: &str,
    pid: Option<u32>,
    params: &Params,
    workloads: &Workloads,
) -> Results {
    let mut results = Results { p1_concurrency: params.p1_concurrency, ..Default::default() };
    results.record(0, measure(base, prefix, pid, params, workloads).await);
    results
}

/// Runs each selected workload under the busy-machine guard: the others'
/// CPU is measured during every run, and a run that saw more than
/// `cpu::BUSY_LIMIT` cores of other work is repeated (up to
/// `busy_retries()` times, fresh stream names each time) and the quietest
/// attempt kept (a failed attempt always stands). P4 is never repeated: it
/// must run on the fresh process.
async fn measure(base: &str, prefix: &str, pid: Option<u32>, p: &Params, workloads: &Workloads) -> Vec<Measured> {
    let selected = |w: &str| workloads.contains(w);
    let client = match Client::new(Target::new(base, prefix)) {
        Ok(c) => c,
        Err(e) => {
            let all: Vec<Metric> = Metric::ALL.into_iter().filter(|m| selected(m.workload())).collect();
            return vec![(crate::workloads::fail_all(&all, &e), None)];
        }
    };
    let pids: Vec<u32> = pid.into_iter().collect();
    let mut out = Vec::new();
    // P4 first, on the fresh process, so earlier workloads' garbage does not
    // blur the before/after difference.
    for w in ["p4", "p1", "p7", "p2", "p3"].into_iter().filter(|w| selected(w)) {
        let retries = if w == "p4" { 0 } else { busy_retries() };
        let mut best: Option<Measured> = None;
        for attempt in 0..=retries {
            let t = std::time::Instant::now();
            let p = Params { tag: format!("{}-a{attempt}", p.tag), ..p.clone() };
            let meter = CpuMeter::start(&pids);
            let outcomes = match w {
                "p4" => memory::run(&client, &p, pid).await,
                "p1" => append::run(&client, &p, pid).await,
                "p7" => create::run(&client, &p).await,
                "p2" => read::run(&client, &p).await,
                _ => live::run(&client, &p).await,
            };
            let others = meter.others_cores();
            let busy = is_busy(others);
            eprintln!(
                "    ({w} took {:.1} s; others used {} cores{})",
                t.elapsed().as_secs_f64(),
                others.map_or("?".into(), |o| format!("{o:.2}")),
                if busy { ": busy" } else { "" }
            );
            // A failure is never traded for a quieter success: it stands.
            if outcomes.iter().any(|(_, r)| r.is_err()) {
                best = Some((outcomes, others));
                break;
            }
            let quieter = best.as_ref().is_none_or(|(_, b)| others.unwrap_or(f64::MAX) < b.unwrap_or(f64::MAX));
            if quieter {
                best = Some((outcomes, others));
            }
            if !busy {
                break;
            }
        }
        out.extend(best);
    }
    out
}

/// Size of `bin` after `strip` (debug info and symbols removed), so builds
/// that keep line tables for profiling compare fairly; None without strip(1).
fn stripped_mb(bin: &Path, scratch: &Path) -> Option<f64> {
    let ok = std::process::Command::new("strip")
        .arg("-o")
        .arg(scratch)
        .arg(bin)
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?
        .success();
    let size = std::fs::metadata(scratch).ok().filter(|_| ok).map(|m| m.len() as f64 / 1e6);
    let _ = std::fs::remove_file(scratch);
    size
}
