//! The client commands (`create`, `write`, `read`, `head`, `fork`, `ls`,
//! `close`, `delete`): the upstream CLI's (`@durable-streams/cli`) commands,
//! variables and defaults, against any server, on `ds-client`.
//!
//! Exit codes (docs/cli.md): 0 done; 1 the server refused for another
//! reason; 2 bad usage or input; 3 the server could not be reached; 4 no
//! such stream (404, 410); 5 conflict (409, or a fenced producer epoch);
//! 6 not authorized (401, 403).

use std::path::PathBuf;
use std::time::Duration;

use ds_client::{Client, CreateOptions, Error, ForkOptions, RetryPolicy};
use http::StatusCode;

/// Where the server is and who we are: the upstream CLI's `STREAM_URL` and
/// `STREAM_AUTH`, `--url` and `--auth`; `--token` for a bearer token.
///
/// The ids differ from the flags' names: `processors` has global `--url`,
/// `--token` and `--ca-file` of its own, and clap hands a global
/// argument's value to every command holding an argument of the same id,
/// the top level's included.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnArgs {
    /// Streams base URL [env: STREAM_URL] [default: http://localhost:4437/v1/stream].
    #[arg(long = "url", id = "stream_url", value_name = "URL")]
    pub url: Option<String>,
    /// Authorization header value, sent as is, e.g. "Bearer abc" [env: STREAM_AUTH].
    #[arg(long = "auth", id = "stream_auth", value_name = "VALUE", conflicts_with = "stream_token")]
    pub auth: Option<String>,
    /// A bearer token (sent as "Authorization: Bearer TOKEN").
    #[arg(long = "token", id = "stream_token", value_name = "TOKEN")]
    pub token: Option<String>,
    /// A CA certificate (PEM) to trust for https besides the system's.
    #[arg(long = "ca-file", id = "stream_ca_file", value_name = "PEM")]
    pub ca_file: Option<PathBuf>,
}

impl ConnArgs {
    /// This command's options over the ones given before the command name,
    /// over the environment.
    fn or(&self, outer: &ConnArgs) -> ConnArgs {
        ConnArgs {
            url: self.url.clone().or_else(|| outer.url.clone()),
            auth: self.auth.clone().or_else(|| outer.auth.clone()),
            token: self.token.clone().or_else(|| outer.token.clone()),
            ca_file: self.ca_file.clone().or_else(|| outer.ca_file.clone()),
        }
    }

    fn client(&self) -> Result<Client, Error> {
        let url = self
            .url
            .clone()
            .or_else(|| std::env::var("STREAM_URL").ok().filter(|v| !v.is_empty()))
            .unwrap_or_else(|| "http://localhost:4437/v1/stream".into());
        let mut builder = Client::builder(url);
        let auth = match (&self.auth, &self.token) {
            (Some(a), _) => Some(a.clone()),
            (None, Some(t)) => Some(format!("Bearer {t}")),
            (None, None) => std::env::var("STREAM_AUTH").ok().filter(|v| !v.is_empty()),
        };
        if let Some(auth) = auth {
            builder = builder.authorization(auth);
        }
        if let Some(ca) = &self.ca_file {
            let pem = std::fs::read(ca).map_err(|e| Error::Invalid(format!("--ca-file {}: {e}", ca.display())))?;
            builder = builder.ca_pem(pem);
        }
        builder.build()
    }
}

/// How long the commands keep retrying a server that does not answer.
#[derive(clap::Args, Debug, Clone)]
pub struct RetryArgs {
    /// Keep retrying an unreachable or overloaded server this long (e.g. 30s, 10m).
    #[arg(long, default_value = "60s", value_parser = ds_config::parse_duration)]
    pub retry_for: Duration,
}

impl RetryArgs {
    pub fn policy(&self) -> RetryPolicy {
        RetryPolicy { give_up_after: self.retry_for, ..RetryPolicy::default() }
    }
}

#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    /// The stream's path, e.g. chat/room-1.
    pub stream: String,
    /// Content type of the stream.
    #[arg(long, default_value = "application/octet-stream")]
    pub content_type: String,
    /// Shorthand for --content-type application/json.
    #[arg(long)]
    pub json: bool,
    /// Expire after this many idle seconds (Stream-TTL).
    #[arg(long, conflicts_with = "expires_at")]
    pub ttl: Option<u64>,
    /// Expire at this RFC 3339 time (Stream-Expires-At).
    #[arg(long)]
    pub expires_at: Option<String>,
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(flatten)]
    pub retry: RetryArgs,
}

#[derive(clap::Args, Debug)]
pub struct PathArgs {
    /// The stream's path.
    pub stream: String,
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(flatten)]
    pub retry: RetryArgs,
}

#[derive(clap::Args, Debug)]
pub struct ForkArgs {
    /// The new stream's path.
    pub stream: String,
    /// The source stream's path.
    #[arg(long)]
    pub from: String,
    /// Fork at this offset of the source (default: its tail).
    #[arg(long)]
    pub offset: Option<String>,
    /// Messages (JSON) or bytes past --offset to inherit as well.
    #[arg(long)]
    pub sub_offset: Option<u64>,
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(flatten)]
    pub retry: RetryArgs,
}

#[derive(clap::Args, Debug)]
pub struct LsArgs {
    /// Only streams whose path starts with this.
    pub prefix: Option<String>,
    /// Also the content type and creation time.
    #[arg(short, long)]
    pub long: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(flatten)]
    pub retry: RetryArgs,
}

/// The client commands.
#[derive(Debug)]
pub enum ClientCommand {
    Create(CreateArgs),
    Write(crate::client_write::WriteArgs),
    Read(crate::client_read::ReadArgs),
    Head(PathArgs),
    Fork(ForkArgs),
    Ls(LsArgs),
    Close(PathArgs),
    Delete(PathArgs),
}

/// Runs one client command; prints a one-line error and exits with its code on failure.
pub async fn run(cmd: ClientCommand, outer: &ConnArgs) -> ! {
    let result = match cmd {
        ClientCommand::Create(a) => create(a, outer).await,
        ClientCommand::Write(a) => crate::client_write::run(a, outer).await,
        ClientCommand::Read(a) => crate::client_read::run(a, outer).await,
        ClientCommand::Head(a) => head(a, outer).await,
        ClientCommand::Fork(a) => fork(a, outer).await,
        ClientCommand::Ls(a) => crate::client_read::ls(a, outer).await,
        ClientCommand::Close(a) => close(a, outer).await,
        ClientCommand::Delete(a) => delete(a, outer).await,
    };
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("durable-streams: {e}");
            std::process::exit(exit_code(&e))
        }
    }
}

/// The documented exit code of an error.
pub fn exit_code(e: &Error) -> i32 {
    match e {
        Error::Invalid(_) => 2,
        Error::Transport { .. } => 3,
        Error::Protocol { .. } => 1,
        Error::Status { status, producer, .. } => match *status {
            StatusCode::NOT_FOUND | StatusCode::GONE => 4,
            StatusCode::CONFLICT => 5,
            StatusCode::FORBIDDEN if producer.is_some() => 5,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => 6,
            _ => 1,
        },
    }
}

pub fn connect(conn: &ConnArgs, outer: &ConnArgs) -> Result<Client, Error> {
    conn.or(outer).client()
}

/// Prints a retry notice on stderr.
pub fn notice(e: &Error, pause: Duration) {
    eprintln!("durable-streams: {e}; retrying in {} ms", pause.as_millis());
}

async fn create(a: CreateArgs, outer: &ConnArgs) -> Result<(), Error> {
    let client = connect(&a.conn, outer)?;
    let content_type = if a.json { "application/json".to_owned() } else { a.content_type.clone() };
    let opts = CreateOptions {
        content_type: Some(content_type.clone()),
        ttl_seconds: a.ttl,
        expires_at: a.expires_at.clone(),
        ..CreateOptions::default()
    };
    // A PUT is idempotent: resending it after a lost answer finds the stream.
    let created = ds_client::retry::retry(a.retry.policy(), notice, || client.create(&a.stream, &opts)).await?;
    let what = if created.created { "created" } else { "already exists, same configuration:" };
    eprintln!("{what} {} ({content_type})", a.stream);
    Ok(())
}

async fn head(a: PathArgs, outer: &ConnArgs) -> Result<(), Error> {
    let client = connect(&a.conn, outer)?;
    let info = ds_client::retry::retry(a.retry.policy(), notice, || client.head(&a.stream)).await?;
    println!("path: {}", a.stream);
    println!("content-type: {}", info.content_type.as_deref().unwrap_or("-"));
    println!("next-offset: {}", info.next_offset);
    println!("closed: {}", info.closed);
    if let Some(ttl) = info.ttl_seconds {
        println!("ttl: {ttl}");
    }
    if let Some(at) = &info.expires_at {
        println!("expires-at: {at}");
    }
    Ok(())
}

async fn fork(a: ForkArgs, outer: &ConnArgs) -> Result<(), Error> {
    let client = connect(&a.conn, outer)?;
    let opts =
        ForkOptions { from: a.from.clone(), offset: a.offset.clone(), sub_offset: a.sub_offset, content_type: None };
    let created = ds_client::retry::retry(a.retry.policy(), notice, || client.fork(&a.stream, &opts)).await?;
    let at = created.next_offset.as_deref().unwrap_or("?");
    let what = if created.created { "forked" } else { "already forked, same configuration:" };
    eprintln!("{what} {} from {} (next offset {at})", a.stream, a.from);
    Ok(())
}

async fn close(a: PathArgs, outer: &ConnArgs) -> Result<(), Error> {
    let client = connect(&a.conn, outer)?;
    let end = ds_client::retry::retry(a.retry.policy(), notice, || client.close(&a.stream)).await?;
    eprintln!("closed {} at {}", a.stream, end.as_deref().unwrap_or("?"));
    Ok(())
}

async fn delete(a: PathArgs, outer: &ConnArgs) -> Result<(), Error> {
    let client = connect(&a.conn, outer)?;
    // Not retried: after a lost answer the delete may have happened, and a
    // second one would report 404 for a stream this command did delete.
    client.delete(&a.stream).await?;
    eprintln!("deleted {}", a.stream);
    Ok(())
}
