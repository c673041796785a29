//! The bench loop: every round runs every server once, in the same order
//! (A B C D A B C D …), each in a fresh process on a fresh port and data
//! directory, so slow drift on the machine spreads evenly over servers.

use crate::client::{Client, Target};
use crate::metrics::Metric;
use crate::server::{self, ServerSpec};
use crate::workloads::{append, live, memory, read, Outcome, Params};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every sample taken, per (server index, metric), one entry per round.
#[derive(Default)]
pub struct Results {
    pub samples: BTreeMap<(usize, Metric), Vec<Result<f64, String>>>,
}

impl Results {
    pub fn record(&mut self, server: usize, outcomes: Vec<Outcome>) {
        for (m, r) in outcomes {
            self.samples.entry((server, m)).or_default().push(r);
        }
    }

    pub fn get(&self, server: usize, m: Metric) -> &[Result<f64, String>] {
        self.samples.get(&(server, m)).map(Vec::as_slice).unwrap_or(&[])
    }

    /// True when any measurement of `server` failed.
    pub fn any_failed(&self, server: usize) -> bool {
        self.samples.iter().any(|((s, _), v)| *s == server && v.iter().any(Result::is_err))
    }
}

/// Which workloads to run: any of p1, p2, p3, p4, p6.
pub type Workloads = BTreeSet<String>;

pub async fn run(specs: &[ServerSpec], params: &Params, rounds: usize, workloads: &Workloads, work: &Path) -> Results {
    let mut results = Results::default();
    for round in 1..=rounds {
        for (i, spec) in specs.iter().enumerate() {
            eprintln!("[round {round}/{rounds}] {} ...", spec.name);
            let outcomes = one_server(spec, params, workloads, work, round).await;
            for (m, r) in &outcomes {
                let info = m.info();
                match r {
                    Ok(v) => eprintln!("    {:<55} {v:>12.1} {}", info.title, info.unit),
                    Err(e) => eprintln!("    {:<55} FAIL: {e}", info.title),
                }
            }
            results.record(i, outcomes);
        }
    }
    results
}

/// Starts one server, runs the selected workloads against it, stops it.
async fn one_server(
    spec: &ServerSpec,
    params: &Params,
    workloads: &Workloads,
    work: &Path,
    round: usize,
) -> Vec<Outcome> {
    let selected = |w: &str| workloads.contains(w);
    let running = match server::start(spec, work, &format!("r{round}")).await {
        Ok(r) => r,
        Err(e) => {
            // Nothing can be measured: every selected metric fails this round.
            let all: Vec<Metric> = Metric::ALL.into_iter().filter(|m| selected(m.workload())).collect();
            return crate::workloads::fail_all(&all, &e);
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
    out.extend(measure(&running.base, &spec.prefix, Some(running.pid), &p, workloads).await);
    let log = running.log.clone();
    if let Err(e) = running.stop().await {
        eprintln!("    warning: stopping {}: {e:#} (log {})", spec.name, log.display());
    }
    out
}

/// Runs the selected workloads once against a server that is already up.
pub async fn run_attached(
    base: &str,
    prefix: &str,
    pid: Option<u32>,
    params: &Params,
    workloads: &Workloads,
) -> Results {
    let mut results = Results::default();
    results.record(0, measure(base, prefix, pid, params, workloads).await);
    results
}

async fn measure(base: &str, prefix: &str, pid: Option<u32>, p: &Params, workloads: &Workloads) -> Vec<Outcome> {
    let selected = |w: &str| workloads.contains(w);
    let client = match Client::new(Target::new(base, prefix)) {
        Ok(c) => c,
        Err(e) => {
            let all: Vec<Metric> = Metric::ALL.into_iter().filter(|m| selected(m.workload())).collect();
            return crate::workloads::fail_all(&all, &e);
        }
    };
    let mut out = Vec::new();
    // P4 first, on the fresh process, so earlier workloads' garbage does not
    // blur the before/after difference.
    for w in ["p4", "p1", "p2", "p3"].into_iter().filter(|w| selected(w)) {
        let t = std::time::Instant::now();
        out.extend(match w {
            "p4" => memory::run(&client, p, pid).await,
            "p1" => append::run(&client, p).await,
            "p2" => read::run(&client, p).await,
            _ => live::run(&client, p).await,
        });
        eprintln!("    ({w} took {:.1} s)", t.elapsed().as_secs_f64());
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
