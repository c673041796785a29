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
    Serve(Box<ServeArgs>),
    /// Make API tokens and token files; mint test JWTs.
    #[command(subcommand)]
    Token(crate::token_cmd::TokenCommand),
    /// Operate hosted processors: list (with lag), show, re-reduce, reprocess-from, skip-through.
    Processors(crate::processors_cmd::ProcessorsArgs),
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
    #[arg(long, env = "DS_LONG_POLL_TIMEOUT", default_value = "20s", value_parser = ds_config::parse_duration)]
    pub long_poll_timeout: Duration,
    /// How long one SSE connection stays open before the server closes it.
    #[arg(long, env = "DS_SSE_MAX_DURATION", default_value = "60s", value_parser = ds_config::parse_duration)]
    pub sse_max_duration: Duration,
    /// Most stream bytes per read response (e.g. 1048576, 900KiB, 1MiB).
    #[arg(long, env = "DS_MAX_READ_BYTES", default_value = "1MiB", value_parser = ds_config::parse_size_usize)]
    pub max_read_bytes: usize,
    /// Largest accepted request body; larger ones get 413.
    #[arg(long, env = "DS_MAX_BODY_BYTES", default_value = "16MiB", value_parser = ds_config::parse_size_usize)]
    pub max_body_bytes: usize,
    /// Processors configuration file (TOML): run the processors it names in this process (see README, "Processors").
    #[arg(long, env = "DS_PROCESSORS")]
    pub processors: Option<PathBuf>,
    /// Log format.
    #[arg(long, env = "DS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Allow webhook URLs on loopback (http://localhost, http://127.0.0.x):
    /// development and tests only. Private, link-local and other internal
    /// addresses stay refused.
    #[arg(long, env = "DS_WEBHOOK_ALLOW_LOOPBACK")]
    pub webhook_allow_loopback: bool,
    #[command(flatten)]
    pub security: crate::security::SecurityArgs,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines on stderr.
    Text,
    /// One JSON object per line (structured logs).
    Json,
}
