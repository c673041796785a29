//! `ds-history`: run history campaigns under faults, check every history,
//! print one line per campaign and write the Markdown report. Exits 1 on
//! any violation, or when the totals stay under `--min-checked-ops` /
//! `--min-processor-events`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use ds_history::campaign::{self, processor, Plan};
use ds_history::report;

#[derive(Parser)]
#[command(name = "ds-history", about = "History campaigns under faults, checked")]
struct Cli {
    /// Comma-separated: local-kill9, disk-full, aws-faults, network, processor.
    #[arg(long, value_delimiter = ',', default_value = "local-kill9,disk-full,aws-faults,network,processor")]
    campaigns: Vec<String>,
    #[arg(long, default_value_t = 3000)]
    kill9_ops: usize,
    #[arg(long, default_value_t = 2000)]
    disk_ops: usize,
    #[arg(long, default_value_t = 1500)]
    aws_ops: usize,
    #[arg(long, default_value_t = 1500)]
    network_ops: usize,
    /// Source events of the processor campaign.
    #[arg(long, default_value_t = 1000)]
    events: u64,
    #[arg(long, default_value_t = 16)]
    clients: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Mean time between kill -9 (and between disk-full phases).
    #[arg(long, default_value = "2s", value_parser = ds_config::parse_duration)]
    kill_every: Duration,
    /// Share of DynamoDB and S3 calls faulted at the emulator.
    #[arg(long, default_value_t = 0.1)]
    aws_rate: f64,
    /// Share of processor invocations killed mid-batch.
    #[arg(long, default_value_t = 0.2)]
    kill_rate: f64,
    #[arg(long, default_value_t = 0)]
    min_checked_ops: u64,
    #[arg(long, default_value_t = 0)]
    min_processor_events: u64,
    /// Write the Markdown report here.
    #[arg(long)]
    report: Option<PathBuf>,
    #[arg(long, default_value = "History campaigns")]
    title: String,
    /// Text under the report's title (how it was run).
    #[arg(long, default_value = "")]
    preamble: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Off unless RUST_LOG asks: the in-process processor function's own
    // spans and warnings (a drive stopped at its deadline, a failed effect)
    // are how a slow drain is told apart from a slow emulator.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    if let Some(bad) = cli.campaigns.iter().find(|c| !campaign::ALL.contains(&c.as_str())) {
        anyhow::bail!("unknown campaign {bad}; known: {}", campaign::ALL.join(", "));
    }
    let processor = processor::Settings {
        events: cli.events,
        writers: 8,
        streams: 6,
        kill_rate: cli.kill_rate,
        aws_rate: cli.aws_rate,
        seed: cli.seed,
    };
    let plan = Plan {
        campaigns: cli.campaigns,
        kill9_ops: cli.kill9_ops,
        disk_ops: cli.disk_ops,
        aws_ops: cli.aws_ops,
        network_ops: cli.network_ops,
        clients: cli.clients,
        seed: cli.seed,
        kill_every: cli.kill_every,
        aws_rate: cli.aws_rate,
        processor,
    };
    let reports = campaign::run_plan(&plan).await?;
    if let Some(path) = &cli.report {
        let text = report::markdown(&cli.title, &cli.preamble, &reports);
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    let (checked, events, violations) =
        (report::checked_ops(&reports), report::processor_events(&reports), report::violations(&reports));
    println!(
        "history: {checked} operations checked under kill -9, AWS faults and network faults, {events} processor \
         events, {violations} violations"
    );
    anyhow::ensure!(violations == 0, "{violations} violations");
    anyhow::ensure!(checked >= cli.min_checked_ops, "only {checked} operations checked (want {})", cli.min_checked_ops);
    anyhow::ensure!(
        events >= cli.min_processor_events,
        "only {events} processor events (want {})",
        cli.min_processor_events
    );
    Ok(())
}
