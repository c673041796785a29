//! Command line: every flag has a `DS_*` environment fallback and a default.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(name = "durable-streams", version, about = "Durable Streams server")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve the Durable Streams protocol at {bind}/v1/stream/{path}.
    Serve(ServeArgs),
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// Embedded durable store on disk (the default).
    Local,
    /// In memory: lost on exit (tests, benchmarks).
    Memory,
    /// DynamoDB + S3 + EventBridge Scheduler, configured by AWS_* and DS_AWS_* env vars.
    Aws,
}

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "DS_BIND", default_value = "127.0.0.1:4437")]
    pub bind: SocketAddr,
    /// Storage substrate.
    #[arg(long, env = "DS_STORE", value_enum, default_value_t = StoreKind::Local)]
    pub store: StoreKind,
    /// Data directory of the local store.
    #[arg(long, env = "DS_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
    /// How long a long-poll waits for data before answering 204 (e.g. 500ms, 20s).
    #[arg(long, env = "DS_LONG_POLL_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub long_poll_timeout: Duration,
    /// How long one SSE connection stays open before the server closes it.
    #[arg(long, env = "DS_SSE_MAX_DURATION", default_value = "60s", value_parser = parse_duration)]
    pub sse_max_duration: Duration,
    /// Most stream bytes per read response.
    #[arg(long, env = "DS_MAX_READ_BYTES", default_value_t = 1024 * 1024)]
    pub max_read_bytes: usize,
    /// Largest accepted request body; larger ones get 413.
    #[arg(long, env = "DS_MAX_BODY_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Log format.
    #[arg(long, env = "DS_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

/// `500ms`, `20s`, `2m`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.find(|c: char| !c.is_ascii_digit()).map_or((s, "s"), |i| s.split_at(i));
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a duration like 500ms, 20s or 2m"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("{s:?}: unit must be ms, s or m")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("2h").is_err());
        assert!(parse_duration("x").is_err());
    }
}
