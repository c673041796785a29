//! Command line: every flag has a `DS_*` environment fallback and a default.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "durable-streams",
    version,
    about = "Durable Streams: the server, and a client of any Durable Streams server",
    after_help = "Client commands take STREAM_URL (default http://localhost:4437/v1/stream) and STREAM_AUTH \
                  as the upstream CLI does. Exit codes: 0 done, 1 refused, 2 bad usage or input, \
                  3 server unreachable, 4 no such stream, 5 conflict, 6 not authorized (docs/cli.md)."
)]
pub struct Cli {
    /// Client options given before the command name (`durable-streams --auth "Bearer t" read s`).
    #[command(flatten)]
    pub conn: crate::client_cmd::ConnArgs,
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
    /// An AWS deployment's failures: list dead letters (with the reason), redrive them.
    Aws(Box<crate::aws_cmd::AwsArgs>),
    /// Create a stream (client).
    Create(crate::client_cmd::CreateArgs),
    /// Write to a stream from an argument, a file or stdin (client).
    Write(Box<crate::client_write::WriteArgs>),
    /// Read a stream to its tail, then follow it live (client).
    Read(crate::client_read::ReadArgs),
    /// A stream's metadata: content type, tail offset, closed, expiry (client).
    Head(crate::client_cmd::PathArgs),
    /// Fork a stream at an offset (client).
    Fork(crate::client_cmd::ForkArgs),
    /// List streams from the server's __registry__ stream (client).
    Ls(crate::client_cmd::LsArgs),
    /// Close a stream: no more appends (client).
    Close(crate::client_cmd::PathArgs),
    /// Delete a stream (client).
    Delete(crate::client_cmd::PathArgs),
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
    /// Keep the `__registry__` stream, the list of streams clients read
    /// (`ls`): each create and delete appends to it in its own commit.
    /// `off` for a server that creates streams faster than one registry
    /// append per commit allows; the path is then an ordinary one.
    #[arg(long, env = "DS_REGISTRY", default_value = "on", value_parser = ds_config::parse_switch, action = clap::ArgAction::Set)]
    pub registry: bool,
    /// Largest accepted request body; larger ones get 413.
    #[arg(long, env = "DS_MAX_BODY_BYTES", default_value = "16MiB", value_parser = ds_config::parse_size_usize)]
    pub max_body_bytes: usize,
    /// Processors configuration file (TOML): run the processors it names in this process (see docs/processors.md).
    #[arg(long, env = "DS_PROCESSORS")]
    pub processors: Option<PathBuf>,
    /// The processors configuration's TOML itself, instead of a file (what the Lambda functions take too).
    #[arg(long, env = "DS_PROCESSORS_TOML")]
    pub processors_toml: Option<String>,
    /// A retention policy, repeatable: `prefix=logs/,max-age=168h,max-bytes=1GiB` (at least one of
    /// max-age and max-bytes; `prefix=` for every stream). The history of matching streams before
    /// it is dropped; reads of it answer 410 with Stream-Earliest-Offset. In DS_RETENTION,
    /// policies are separated by `;`. The longest matching prefix governs a stream.
    #[arg(long = "retention", env = "DS_RETENTION", value_delimiter = ';', value_parser = crate::retention::parse_policy)]
    pub retention: Vec<ds_core::RetentionPolicy>,
    /// How often the retention policies are applied.
    #[arg(long, env = "DS_RETENTION_INTERVAL", default_value = "60s", value_parser = ds_config::parse_duration)]
    pub retention_interval: Duration,
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
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// Resource limits: what one client, or many, may hold of the server.
#[derive(clap::Args, Debug, Clone)]
pub struct LimitArgs {
    /// Most live readers (long-poll and SSE requests) at once; more get 503 with Retry-After.
    #[arg(long, env = "DS_MAX_LIVE_READERS", default_value_t = 10_000)]
    pub max_live_readers: usize,
    /// A connection must deliver a complete request head within this time (from accept, or
    /// from the first byte of a later request), else it is closed.
    #[arg(long, env = "DS_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = ds_config::parse_duration)]
    pub header_read_timeout: Duration,
    /// A keep-alive connection with no request in progress is closed after this.
    #[arg(long, env = "DS_IDLE_TIMEOUT", default_value = "60s", value_parser = ds_config::parse_duration)]
    pub idle_timeout: Duration,
    /// Largest request head (request line and headers, at most 100 lines); larger gets 431.
    #[arg(long, env = "DS_MAX_HEADER_BYTES", default_value = "64KiB", value_parser = parse_header_bytes)]
    pub max_header_bytes: usize,
    /// Longest silence while a request body arrives; then 408 and the connection is closed.
    #[arg(long, env = "DS_BODY_READ_TIMEOUT", default_value = "30s", value_parser = ds_config::parse_duration)]
    pub body_read_timeout: Duration,
    /// A client that accepts no response bytes for this long is disconnected.
    #[arg(long, env = "DS_SEND_TIMEOUT", default_value = "30s", value_parser = ds_config::parse_duration)]
    pub send_timeout: Duration,
}

/// A head limit below 1 KiB would refuse ordinary requests.
fn parse_header_bytes(s: &str) -> Result<usize, String> {
    let n = ds_config::parse_size_usize(s).map_err(|e| e.to_string())?;
    if n < 1024 {
        return Err(format!("{s:?} is below the minimum of 1KiB"));
    }
    Ok(n)
}

impl LimitArgs {
    pub fn conn_limits(&self) -> ds_serve::ConnLimits {
        ds_serve::ConnLimits {
            header_read_timeout: self.header_read_timeout,
            idle_timeout: self.idle_timeout,
            max_header_bytes: self.max_header_bytes,
            send_timeout: self.send_timeout,
        }
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines on stderr.
    Text,
    /// One JSON object per line (structured logs).
    Json,
}
