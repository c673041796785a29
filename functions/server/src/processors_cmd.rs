//! `durable-streams processors …`: the operator API (`/v1/processors`) from
//! the command line, against any server that hosts processors (the local
//! server, or the HTTP function on AWS).

use std::path::PathBuf;

use anyhow::{bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

#[derive(clap::Args, Debug)]
pub struct ProcessorsArgs {
    /// The server's base URL.
    #[arg(long, env = "DS_URL", default_value = "http://127.0.0.1:4437", global = true)]
    url: String,
    /// Bearer token sent as `Authorization: Bearer …`.
    #[arg(long, env = "DS_TOKEN", global = true, hide_env_values = true)]
    token: Option<String>,
    /// An extra request header, `Name: value`; repeatable.
    #[arg(long = "header", global = true)]
    headers: Vec<String>,
    /// A CA certificate (PEM) trusted for an https:// URL, besides the system's.
    #[arg(long, global = true)]
    ca_file: Option<PathBuf>,
    #[command(subcommand)]
    command: ProcessorsCommand,
}

#[derive(clap::Subcommand, Debug)]
enum ProcessorsCommand {
    /// Every processor on every stream, with its lag.
    List {
        /// Print the JSON answer instead of a table.
        #[arg(long)]
        json: bool,
        /// Only streams after this one (paging).
        #[arg(long)]
        after: Option<String>,
        /// Most streams in the answer.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// One processor on one stream: cursors, lag, runtime, state (JSON).
    Show { processor: String, stream: String },
    /// A `state` processor's live state: whole, one TYPE (paged), or one row (TYPE KEY).
    State {
        processor: String,
        stream: String,
        /// Only this entity type.
        #[arg(value_name = "TYPE")]
        entity_type: Option<String>,
        /// Only this row of TYPE.
        key: Option<String>,
        /// Continue after this key (the `next` of the previous page).
        #[arg(long, conflicts_with = "key")]
        after: Option<String>,
        /// With no TYPE: continue after this type (with --after).
        #[arg(long, conflicts_with = "entity_type", requires = "after")]
        after_type: Option<String>,
        /// Most rows in the answer (1..=1000).
        #[arg(long, conflicts_with = "key")]
        limit: Option<usize>,
    },
    /// A `state` processor: append a snapshot of the live state and trim the history before it, now.
    Compact { processor: String, stream: String },
    /// Rebuild the processor's state from the stream through its ack (no effects run).
    ReReduce {
        processor: String,
        stream: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Rewind to POSITION: events from there are reduced and processed again (new idempotency keys).
    ReprocessFrom(Move),
    /// Move past a poison event: everything through POSITION is reduced, none of it processed.
    SkipThrough(Move),
    /// Inline processors: start over from the initial state at the stream's tail (also ends a skip).
    Reset { processor: String, stream: String },
    /// Inline processors: let appends pass unchecked until a reset (a refold that fails, a schema gone wrong).
    Skip {
        processor: String,
        stream: String,
        #[arg(long)]
        reason: Option<String>,
    },
}

/// A control that moves a processor's cursor, guarded by its revision.
#[derive(Debug, clap::Args)]
pub struct Move {
    processor: String,
    stream: String,
    #[arg(long)]
    position: u64,
    /// The cursor revision you read (`show`); a stale one is refused with 409.
    #[arg(long)]
    expected_revision: u64,
    #[arg(long)]
    reason: Option<String>,
}

impl Move {
    fn control(&self, action: &str) -> (String, Value) {
        let body =
            json!({ "position": self.position, "expectedRevision": self.expected_revision, "reason": self.reason });
        (control_path(action, &self.processor, &self.stream), body)
    }
}

fn control_path(action: &str, processor: &str, stream: &str) -> String {
    format!("/v1/processors/{}/{action}/{}", encode(processor), encode_path(stream))
}

pub async fn run(args: ProcessorsArgs) -> anyhow::Result<()> {
    let client = Client::new(&args)?;
    let (path, body) = match &args.command {
        ProcessorsCommand::List { json, after, limit } => {
            let mut query = Vec::new();
            if let Some(a) = after {
                query.push(format!("after={}", encode(a)));
            }
            if let Some(l) = limit {
                query.push(format!("limit={l}"));
            }
            let path = if query.is_empty() {
                "/v1/processors".to_owned()
            } else {
                format!("/v1/processors?{}", query.join("&"))
            };
            let page = client.call("GET", &path, None).await?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&page)?);
            } else {
                print_table(&page);
            }
            return Ok(());
        }
        ProcessorsCommand::Show { processor, stream } => {
            let path = format!("/v1/processors/{}/streams/{}", encode(processor), encode_path(stream));
            (path, None)
        }
        ProcessorsCommand::State { processor, stream, entity_type, key, after, after_type, limit } => {
            let mut query = Vec::new();
            let pairs = [("type", entity_type), ("key", key), ("afterType", after_type), ("after", after)];
            for (name, value) in pairs {
                if let Some(v) = value {
                    query.push(format!("{name}={}", encode(v)));
                }
            }
            if let Some(l) = limit {
                query.push(format!("limit={l}"));
            }
            let mut path = format!("/v1/processors/{}/state/{}", encode(processor), encode_path(stream));
            if !query.is_empty() {
                path = format!("{path}?{}", query.join("&"));
            }
            (path, None)
        }
        ProcessorsCommand::ReReduce { processor, stream, reason } => {
            (control_path("re-reduce", processor, stream), Some(json!({ "reason": reason })))
        }
        ProcessorsCommand::Reset { processor, stream } => (control_path("reset", processor, stream), Some(json!({}))),
        ProcessorsCommand::Compact { processor, stream } => {
            (control_path("compact", processor, stream), Some(json!({})))
        }
        ProcessorsCommand::Skip { processor, stream, reason } => {
            (control_path("skip", processor, stream), Some(json!({ "reason": reason })))
        }
        ProcessorsCommand::ReprocessFrom(m) => {
            let (p, b) = m.control("reprocess-from");
            (p, Some(b))
        }
        ProcessorsCommand::SkipThrough(m) => {
            let (p, b) = m.control("skip-through");
            (p, Some(b))
        }
    };
    let method = if body.is_some() { "POST" } else { "GET" };
    let answer = client.call(method, &path, body).await?;
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(())
}

fn print_table(page: &Value) {
    let rows = page["processors"].as_array().cloned().unwrap_or_default();
    let cell = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    };
    let mut table =
        vec![["PROCESSOR", "STREAM", "TAIL", "REDUCED", "ACKED", "LAG", "REVISION", "STATE"].map(String::from)];
    for r in &rows {
        let inline = &r["inline"];
        let state = match (&r["phase"], &r["lastError"]) {
            (_, Value::String(e)) => format!("retrying: {e}"),
            (Value::String(p), _) if inline.is_object() => {
                let mut s = format!("{p} ({}), {} rejected", cell(&inline["kind"]), cell(&inline["rejections"]));
                if let Some(last) = inline["lastRejection"]["reason"].as_str() {
                    s.push_str(&format!(", last: {last}"));
                }
                s
            }
            (Value::String(p), _) if r["materialized"].is_object() => {
                let m = &r["materialized"];
                let mut s = format!("{p} (state), {} rows, {} malformed", cell(&m["rows"]), cell(&m["malformed"]));
                if let Some(last) = m["lastMalformed"]["reason"].as_str() {
                    s.push_str(&format!(", last at {}: {last}", cell(&m["lastMalformed"]["offset"])));
                }
                s
            }
            (Value::String(p), _) => p.clone(),
            _ => "not running".to_owned(),
        };
        let fields = ["processor", "stream", "tail", "reducedThrough", "acknowledgedThrough", "lag", "cursorRevision"];
        let [a, b, c, d, e, f, g] = fields.map(|k| cell(&r[k]));
        table.push([a, b, c, d, e, f, g, state]);
    }
    let widths: Vec<usize> = (0..8).map(|i| table.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    for row in &table {
        let line: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("{}", line.join("  ").trim_end());
    }
    if let Some(next) = page["next"].as_str() {
        println!("(more: --after {next})");
    }
}

/// A path segment, percent-encoded.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A stream path (its `/` kept).
fn encode_path(s: &str) -> String {
    s.split('/').map(encode).collect::<Vec<_>>().join("/")
}

struct Client {
    http: hyper_util::client::legacy::Client<ds_client::Connector, Full<Bytes>>,
    base: String,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

impl Client {
    fn new(args: &ProcessorsArgs) -> anyhow::Result<Self> {
        let ca = match &args.ca_file {
            Some(ca) => Some(std::fs::read(ca).with_context(|| format!("reading --ca-file {}", ca.display()))?),
            None => None,
        };
        let connector = ds_client::connector(ca.as_deref()).context("--ca-file")?;
        let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
        let mut headers = Vec::new();
        if let Some(token) = &args.token {
            headers.push((http::header::AUTHORIZATION, format!("Bearer {token}").parse().context("--token")?));
        }
        for h in &args.headers {
            let Some((name, value)) = h.split_once(':') else { bail!("--header {h:?}: expected `Name: value`") };
            headers
                .push((name.trim().parse().context("--header name")?, value.trim().parse().context("--header value")?));
        }
        Ok(Self { http, base: args.url.trim_end_matches('/').to_owned(), headers })
    }

    /// Sends one request; a non-2xx answer is an error carrying its code and message.
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut req = http::Request::builder().method(method).uri(&url);
        for (name, value) in &self.headers {
            req = req.header(name, value);
        }
        let bytes = match &body {
            Some(b) => {
                req = req.header(http::header::CONTENT_TYPE, "application/json");
                Bytes::from(serde_json::to_vec(b)?)
            }
            None => Bytes::new(),
        };
        let req = req.body(Full::new(bytes)).with_context(|| format!("{method} {url}: not a valid URL (--url)"))?;
        let send = self.http.request(req);
        let resp = tokio::time::timeout(std::time::Duration::from_secs(60), send)
            .await
            .with_context(|| format!("{method} {url}: no answer within 60 s"))?
            .with_context(|| format!("{method} {url}"))?;
        let status = resp.status();
        let text = resp.into_body().collect().await.with_context(|| format!("reading the answer of {url}"))?.to_bytes();
        let value: Value = serde_json::from_slice(&text)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&text).into_owned()));
        if !status.is_success() {
            let code = value["error"]["code"].as_str().unwrap_or("");
            let message = value["error"]["message"].as_str().map_or_else(|| value.to_string(), str::to_owned);
            bail!("{method} {url}: {status} {code}: {message}");
        }
        Ok(value)
    }
}
