//! `durable-streams read` and `ls`: catch-up reads to the tail, then (by
//! default, as the upstream CLI) live over SSE, resuming after disconnects
//! from the last confirmed offset; `ls` folds the `__registry__` stream.

use std::io::{IsTerminal, Write};

use ds_client::registry::{Registry, REGISTRY_PATH};
use ds_client::{Client, Error};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::client_cmd::{connect, notice, ConnArgs, LsArgs, RetryArgs};

#[derive(clap::Args, Debug)]
pub struct ReadArgs {
    /// The stream's path.
    pub stream: String,
    /// Start here: -1 (the beginning), now (the tail), or an offset a read gave.
    #[arg(long, default_value = "-1", allow_hyphen_values = true)]
    pub from: String,
    /// Follow live after catching up (the default, as upstream).
    #[arg(long, conflicts_with = "no_follow")]
    pub follow: bool,
    /// Stop at the tail: read what is there now and exit.
    #[arg(long)]
    pub no_follow: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(flatten)]
    pub retry: RetryArgs,
}

/// A progress display on stderr when it is a terminal, nothing otherwise:
/// a bar when the total is known, a byte counter when not.
pub fn progress(total: Option<u64>, what: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = match total {
        Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()).with_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()).with_style(
            ProgressStyle::with_template("{spinner} {msg} {bytes} {bytes_per_sec}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    };
    bar.set_message(what);
    bar
}

/// Writes what a read returned: raw bytes, or for a JSON stream one message
/// per line (pretty-printed on a terminal, compact otherwise, for `jq`).
struct Output {
    json: bool,
    pretty: bool,
    out: std::io::BufWriter<std::io::Stdout>,
}

impl Output {
    fn write(&mut self, data: &[u8]) -> Result<(), Error> {
        let io = |e: std::io::Error| Error::Invalid(format!("writing to stdout: {e}"));
        if !self.json {
            return self.out.write_all(data).map_err(io);
        }
        for m in ds_client::json::messages(data).map_err(Error::Invalid)? {
            let text = if self.pretty { pretty(&compact(m.get())) } else { compact(m.get()) };
            self.out.write_all(text.as_bytes()).map_err(io)?;
            self.out.write_all(b"\n").map_err(io)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Error> {
        self.out.flush().map_err(|e| Error::Invalid(format!("writing to stdout: {e}")))
    }
}

/// Calls `f` with each character of JSON text and whether it belongs to a
/// string literal (its quotes included).
fn each_char(json: &str, mut f: impl FnMut(char, bool)) {
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        let literal = in_string || c == '"';
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        }
        f(c, literal);
    }
}

/// JSON text without the whitespace between tokens: one line, members in
/// the order they were stored.
fn compact(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    each_char(json, |c, literal| {
        if literal || !c.is_whitespace() {
            out.push(c);
        }
    });
    out
}

/// Compact JSON text indented two spaces per level, members in their
/// stored order (a `serde_json::Value` would sort them).
fn pretty(compact: &str) -> String {
    let mut out = String::with_capacity(compact.len() * 2);
    let (mut depth, mut opened) = (0usize, false);
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.extend(std::iter::repeat_n("  ", depth));
    };
    each_char(compact, |c, literal| {
        if std::mem::take(&mut opened) {
            if !literal && matches!(c, '}' | ']') {
                out.push(c); // {} and [] stay on one line
                return;
            }
            depth += 1;
            newline(&mut out, depth);
        }
        match c {
            _ if literal => out.push(c),
            '{' | '[' => {
                out.push(c);
                opened = true;
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            _ => out.push(c),
        }
    });
    out
}

pub async fn run(a: ReadArgs, outer: &ConnArgs) -> Result<(), Error> {
    let client = connect(&a.conn, outer)?;
    let policy = a.retry.policy();
    let first = ds_client::retry::retry(policy, notice, || client.read(&a.stream, &a.from)).await?;
    let json = first.content_type.as_deref().is_some_and(ds_client::json::is_json);
    let mut out =
        Output { json, pretty: std::io::stdout().is_terminal(), out: std::io::BufWriter::new(std::io::stdout()) };
    // A progress counter only for a catch-up that takes more than one read.
    let mut bar = ProgressBar::hidden();
    let mut chunk = first;
    loop {
        out.write(&chunk.data)?;
        out.flush()?;
        bar.inc(chunk.data.len() as u64);
        if chunk.closed || chunk.up_to_date {
            break;
        }
        if bar.is_hidden() {
            bar = progress(None, "catching up");
            bar.inc(chunk.data.len() as u64);
        }
        let offset = chunk.next_offset.clone();
        chunk = ds_client::retry::retry(policy, notice, || client.read(&a.stream, &offset)).await?;
    }
    bar.finish_and_clear();
    if a.no_follow || chunk.closed {
        return Ok(());
    }
    follow(&client, &a.stream, &chunk.next_offset, &a.retry, &mut out).await
}

async fn follow(client: &Client, path: &str, from: &str, retry: &RetryArgs, out: &mut Output) -> Result<(), Error> {
    let mut live = client.follow(path, from).retry(retry.policy()).on_reconnect(notice);
    while let Some(batch) = live.next().await? {
        for data in &batch.data {
            out.write(data)?;
        }
        out.flush()?;
    }
    Ok(())
}

pub async fn ls(a: LsArgs, outer: &ConnArgs) -> Result<(), Error> {
    let client = connect(&a.conn, outer)?;
    let policy = a.retry.policy();
    let mut registry = Registry::default();
    let mut offset = "-1".to_owned();
    loop {
        let chunk = match ds_client::retry::retry(policy, notice, || client.read(REGISTRY_PATH, &offset)).await {
            Err(Error::Status { status, reason, method, url, producer }) if status == http::StatusCode::NOT_FOUND => {
                let reason = format!("{reason}: this server keeps no {REGISTRY_PATH} stream to list streams from");
                return Err(Error::Status { status, reason, method, url, producer });
            }
            other => other?,
        };
        for m in ds_client::json::messages(&chunk.data).map_err(Error::Invalid)? {
            registry.apply(&m).map_err(Error::Invalid)?;
        }
        if chunk.up_to_date || chunk.closed {
            break;
        }
        offset = chunk.next_offset;
    }
    let mut out = std::io::BufWriter::new(std::io::stdout());
    for e in registry.under(a.prefix.as_deref().unwrap_or("")) {
        let line = if a.long {
            let created = e.created_at.as_ref().map_or_else(|| "-".to_owned(), |v| v.to_string());
            let closed = if e.closed { "\tclosed" } else { "" };
            format!("{}\t{}\t{created}{closed}", e.path, e.content_type.as_deref().unwrap_or("-"))
        } else {
            e.path.clone()
        };
        writeln!(out, "{line}").map_err(|e| Error::Invalid(format!("writing to stdout: {e}")))?;
    }
    out.flush().map_err(|e| Error::Invalid(format!("writing to stdout: {e}")))
}

#[cfg(test)]
mod tests {
    use super::{compact, pretty};

    #[test]
    fn pretty_indents_and_keeps_the_members_order() {
        let text = compact("{\"z\": [1, {}], \"a\": \"x, {y}: \\\"q\\\"\", \"e\": []}");
        assert_eq!(
            pretty(&text),
            "{\n  \"z\": [\n    1,\n    {}\n  ],\n  \"a\": \"x, {y}: \\\"q\\\"\",\n  \"e\": []\n}"
        );
        assert_eq!(pretty("3"), "3");
    }

    #[test]
    fn compact_drops_whitespace_between_tokens_only() {
        assert_eq!(compact("{ \"a b\" : [1, 2],\n \"c\":\"x\\\" y\" }"), "{\"a b\":[1,2],\"c\":\"x\\\" y\"}");
    }
}
