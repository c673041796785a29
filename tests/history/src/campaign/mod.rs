//! Campaigns: the workload's clients against real servers while faults are
//! injected, then the final state read with the faults off and the history
//! checked.
//!
//! - [`local`]: `kill -9` and restart of the local-store server; a full disk
//!   under it (a tmpfs shrunk to what is in use, then grown again).
//! - [`aws`]: two `--store aws` servers on a private emulator with injected
//!   AWS faults (throttles, errors, apply-then-error, slow answers), or with
//!   the fault proxy between them and the emulator (network faults).
//! - [`processor`]: the AWS processor plane under faults.

pub mod aws;
pub mod local;
pub mod processor;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::check::{self, FinalStream, Finals, Summary};
use crate::client::{Route, Shared};
use crate::history::History;
use crate::workload::{self, Streams};

/// How big a campaign is.
#[derive(Debug, Clone)]
pub struct Scale {
    /// Operations to record.
    pub ops: usize,
    pub clients: u32,
    pub seed: u64,
}

/// What a campaign did and found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub name: String,
    /// How the servers ran and what was injected, in words.
    pub setup: String,
    pub summary: Summary,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, u64>,
    pub kills: u64,
    pub violations: usize,
    /// Every violation found, each with its operations (identical ones are
    /// grouped when printed: [`grouped`]).
    pub findings: Vec<String>,
    pub elapsed: Duration,
    /// Why it did not run.
    pub skipped: Option<String>,
    /// Figures of campaigns that are not histories (the processor plane).
    pub extra: BTreeMap<String, u64>,
}

impl Report {
    pub fn skipped(name: &str, why: String) -> Self {
        Self { name: name.into(), skipped: Some(why), ..Self::default() }
    }

    /// One paragraph for the console.
    pub fn line(&self) -> String {
        if let Some(why) = &self.skipped {
            return format!("history {}: SKIPPED ({why})", self.name);
        }
        let s = &self.summary;
        let kinds: Vec<String> = s.by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let statuses: Vec<String> = s.fail_statuses.iter().map(|(k, n)| format!("{k}x{n}")).collect();
        let faults: Vec<String> = self.faults.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let extra: Vec<String> = self.extra.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let mut line = format!("history {}: ", self.name);
        if s.ops > 0 {
            line.push_str(&format!(
                "{} operations checked ({}); {} acknowledged, {} failed ({}), {} unknown; {} streams, {} records, {} \
                 read responses ({} bytes) compared; ",
                s.ops,
                kinds.join(", "),
                s.acknowledged,
                s.failed,
                statuses.join(" "),
                s.unknown,
                s.streams,
                s.records,
                s.segments,
                s.bytes_compared,
            ));
        }
        line.push_str(&format!(
            "kills {}; faults: {}",
            self.kills,
            if faults.is_empty() { "none".into() } else { faults.join(", ") }
        ));
        if !extra.is_empty() {
            line.push_str(&format!("; {}", extra.join(", ")));
        }
        line.push_str(&format!("; {} violations; {:.1} s", self.violations, self.elapsed.as_secs_f64()));
        let groups = grouped(&self.findings);
        for (finding, n) in groups.iter().take(CONSOLE_FINDINGS) {
            line.push_str(&format!("\n  violation{}: {finding}", times(*n)));
        }
        if groups.len() > CONSOLE_FINDINGS {
            line.push_str(&format!(
                "\n  … and {} more distinct violations (all of them are in the report)",
                groups.len() - CONSOLE_FINDINGS
            ));
        }
        line
    }
}

/// Distinct findings the console shows (the report shows all).
const CONSOLE_FINDINGS: usize = 50;

/// ` (×n)` for a finding seen more than once.
pub fn times(n: usize) -> String {
    if n > 1 {
        format!(" (×{n})")
    } else {
        String::new()
    }
}

/// Identical findings once each with how many times they were found, in
/// the order they were first found.
pub fn grouped(findings: &[String]) -> Vec<(&str, usize)> {
    let mut at: HashMap<&str, usize> = HashMap::new();
    let mut out: Vec<(&str, usize)> = Vec::new();
    for f in findings {
        match at.get(f.as_str()) {
            Some(&i) => out[i].1 += 1,
            None => {
                at.insert(f, out.len());
                out.push((f, 1));
            }
        }
    }
    out
}

/// Run the workload until it has recorded `settings.ops` operations while
/// `faults` runs beside it (it must end once the clients are done).
pub async fn with_faults<F, Fut>(shared: &Arc<Shared>, settings: workload::Settings, faults: F) -> anyhow::Result<()>
where
    F: FnOnce(Arc<Streams>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let streams = Arc::new(Streams::new(settings));
    let clients = tokio::spawn(workload::run(Arc::clone(shared), Arc::clone(&streams)));
    // The fault task ends when the clients are done (it watches the
    // budget), or on an error of its own: then the clients stop too.
    let injected = faults(Arc::clone(&streams)).await;
    if injected.is_err() {
        streams.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    clients.await.context("the clients")?;
    injected
}

/// Whether the clients are done: the budget is spent or they were stopped.
pub fn clients_done(shared: &Shared, streams: &Streams, ops: usize) -> bool {
    streams.stop.load(std::sync::atomic::Ordering::SeqCst) || shared.recorder.len() >= ops
}

/// Wait `d`, or less if the clients finish first; whether they are done.
pub async fn idle(shared: &Shared, streams: &Streams, ops: usize, d: Duration) -> bool {
    let deadline = Instant::now() + d;
    while Instant::now() < deadline {
        if clients_done(shared, streams, ops) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    clients_done(shared, streams, ops)
}

/// The final state of every stream the history names (streams that do not
/// exist are left out), and the streams that could not be read.
#[derive(Debug, Default)]
pub struct FinalRead {
    pub finals: Finals,
    /// Streams that stayed unreadable for a minute, with the last error.
    pub unreadable: Vec<(String, String)>,
}

/// Read every stream the history names whole (retrying while the servers
/// recover), with its closed flag.
pub async fn read_finals(route: &dyn Route, history: &History) -> FinalRead {
    let http = ds_e2e::client();
    let mut names: Vec<&str> = history.ops.iter().map(|o| o.call.stream()).collect();
    names.sort_unstable();
    names.dedup();
    let mut out = FinalRead::default();
    for name in names {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match read_one(&http, &route.base(), name).await {
                Ok(Some(f)) => {
                    out.finals.insert(name.to_owned(), f);
                    break;
                }
                Ok(None) => break,
                Err(e) if Instant::now() > deadline => {
                    out.unreadable.push((name.to_owned(), format!("{e:#}")));
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    out
}

async fn read_one(http: &reqwest::Client, base: &str, name: &str) -> anyhow::Result<Option<FinalStream>> {
    let url = format!("{base}/v1/stream/{name}");
    let head = http.head(&url).send().await?;
    match head.status().as_u16() {
        404 | 410 => return Ok(None),
        200 => {}
        s => anyhow::bail!("HEAD {url}: {s}"),
    }
    let closed = ds_e2e::header(&head, "stream-closed").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let (bytes, _) = ds_e2e::read_all(http, &url).await?;
    Ok(Some(FinalStream { bytes, closed }))
}

/// The end of a campaign: read the final state of every stream its
/// history names, check the history, fill the report's verdict and time.
pub async fn conclude(report: &mut Report, shared: &Shared, route: &dyn Route, started: Instant) {
    let history = shared.recorder.history();
    let read = read_finals(route, &history).await;
    verdict(report, &history, &read);
    report.elapsed = started.elapsed();
}

/// Check the history and fill the report's verdict. A stream that cannot
/// be read after the run is a violation of its own; the operations on it
/// (and on forks of it) are left out of the check.
pub fn verdict(report: &mut Report, history: &History, read: &FinalRead) {
    let broken = |s: &str| read.unreadable.iter().any(|(n, _)| n == s);
    let mut kept = History::default();
    for op in history.ops.iter().filter(|o| {
        !broken(o.call.stream()) && !matches!(&o.call, crate::history::Call::Fork { source, .. } if broken(source))
    }) {
        kept.push(op.client, op.call.clone(), op.invoke, op.complete, op.outcome.clone());
    }
    let checked = check::check(&kept, &read.finals);
    report.summary = checked.summary.clone();
    report.violations = checked.violations.len() + read.unreadable.len();
    report.findings = read
        .unreadable
        .iter()
        .map(|(name, e)| format!("final stream {name} is unreadable after the run: {e}"))
        .chain(checked.violations.iter().map(|v| v.render(&kept)))
        .collect();
}

/// Which campaigns to run, and how big.
#[derive(Debug, Clone)]
pub struct Plan {
    pub campaigns: Vec<String>,
    pub kill9_ops: usize,
    pub disk_ops: usize,
    pub aws_ops: usize,
    pub network_ops: usize,
    pub clients: u32,
    pub seed: u64,
    pub kill_every: Duration,
    pub aws_rate: f64,
    pub processor: processor::Settings,
}

/// The campaign names, in the order they run.
pub const ALL: [&str; 5] = ["local-kill9", "disk-full", "aws-faults", "network", "processor"];

/// Run the plan's campaigns one after the other, printing each one's line.
pub async fn run_plan(plan: &Plan) -> anyhow::Result<Vec<Report>> {
    let mut reports = Vec::new();
    for name in ALL.iter().filter(|n| plan.campaigns.iter().any(|c| c == *n)) {
        let scale = |ops| Scale { ops, clients: plan.clients, seed: plan.seed };
        let report = match *name {
            "local-kill9" => local::kill9(&scale(plan.kill9_ops), plan.kill_every).await,
            "disk-full" => local::disk_full(&scale(plan.disk_ops), plan.kill_every).await,
            "aws-faults" => aws::faults(&scale(plan.aws_ops), plan.aws_rate).await,
            "network" => aws::network(&scale(plan.network_ops)).await,
            _ => processor::run(&plan.processor).await,
        }
        .with_context(|| format!("campaign {name}"))?;
        println!("{}", report.line());
        reports.push(report);
    }
    Ok(reports)
}
