//! `ds-reliability`: the long campaigns' drivers, against a running server.
//!
//! - `soak`: mixed load for a duration, sampling the server's memory and
//!   descriptors; writes a Markdown report; fails on any error, on resident
//!   memory growing 10% or more after warm-up, or on a lost append.
//! - `idle-rss`: resident memory per idle SSE or long-poll reader.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use ds_reliability::{idle, procfs, soak};

#[derive(Parser)]
#[command(name = "ds-reliability", about = "Reliability campaigns against a running Durable Streams server")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Mixed load for a while; report the memory/descriptor curve.
    Soak {
        #[arg(long)]
        base: String,
        /// The server's process id (sampled through /proc).
        #[arg(long)]
        pid: u32,
        #[arg(long, default_value = "10m", value_parser = ds_config::parse_duration)]
        duration: Duration,
        #[arg(long, default_value = "5s", value_parser = ds_config::parse_duration)]
        every: Duration,
        #[arg(long, default_value = "60s", value_parser = ds_config::parse_duration)]
        warm_up: Duration,
        /// Write the Markdown report here.
        #[arg(long)]
        report: Option<PathBuf>,
        /// Text placed under the report's title (how the server was run).
        #[arg(long, default_value = "")]
        preamble: String,
    },
    /// Resident memory per idle live reader.
    IdleRss {
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long)]
        pid: u32,
        #[arg(long, value_enum)]
        kind: idle::Kind,
        #[arg(long, default_value_t = 10_000)]
        count: usize,
        /// An existing stream that receives no appends meanwhile.
        #[arg(long, default_value = "idle/s")]
        path: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Cmd::Soak { base, pid, duration, every, warm_up, report, preamble } => {
            let load_before = procfs::load_average();
            let r = soak::run(&base, pid, duration, every).await?;
            let preamble = format!(
                "{preamble}\n\nLoad average (1, 5, 15 min) at the start: {load_before}; at the end: {}.",
                procfs::load_average()
            );
            let text = r.markdown("Soak", warm_up, &preamble);
            if let Some(path) = report {
                std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
            }
            let growth = r.rss_growth(warm_up);
            println!(
                "soak: {} appends, {} reads, {} SSE events, {} churned, {} expired, {} generations rotated, {} errors, \
                 {} of {} acknowledged appends readable, RSS growth after warm-up {:+.1}%, fds {:?}",
                r.appends,
                r.reads,
                r.sse_events,
                r.churned,
                r.expired,
                r.rotations,
                r.error_count,
                r.verified,
                r.appends,
                growth * 100.0,
                r.fd_range(warm_up)
            );
            for e in &r.errors {
                println!("  error: {e}");
            }
            anyhow::ensure!(r.error_count == 0, "{} errors", r.error_count);
            anyhow::ensure!(
                r.verified == r.appends,
                "only {} of {} acknowledged appends readable",
                r.verified,
                r.appends
            );
            anyhow::ensure!(growth < 0.10, "resident memory grew {:.1}% after warm-up", growth * 100.0);
        }
        Cmd::IdleRss { addr, pid, kind, count, path } => {
            let r = idle::measure(addr, pid, &path, kind, count).await?;
            println!(
                "idle {:?}: {} connections, RSS {} -> {} bytes, {} bytes per connection, {} fds",
                r.kind,
                r.connections,
                r.rss_before,
                r.rss_after,
                r.per_connection(),
                r.fds_after
            );
        }
    }
    Ok(())
}
