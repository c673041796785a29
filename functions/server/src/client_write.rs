//! `durable-streams write`: content from the argument, a file or stdin,
//! cut into appends ([`ds_client::upload`]); as an idempotent producer with
//! `--producer-id`, so that rerunning an interrupted upload applies each
//! piece once.

use std::io::{IsTerminal, Read};
use std::path::PathBuf;

use ds_client::upload::{BytePieces, JsonPieces, Piece};
use ds_client::{AppendOptions, Error, Producer};
use http::StatusCode;

use crate::client_cmd::{connect, notice, ConnArgs, RetryArgs};

#[derive(clap::Args, Debug)]
pub struct WriteArgs {
    /// The stream's path.
    pub stream: String,
    /// What to write; `\n`, `\t`, `\r` and `\\` become the characters. Without it: --file, else stdin.
    pub content: Option<String>,
    /// Write this file's content.
    #[arg(long, conflicts_with = "content")]
    pub file: Option<PathBuf>,
    /// Content type of the message (default: the stream's own).
    #[arg(long)]
    pub content_type: Option<String>,
    /// Shorthand for --content-type application/json.
    #[arg(long)]
    pub json: bool,
    /// JSON input: a top-level array's elements are stored as separate messages (implies --json).
    #[arg(long)]
    pub batch_json: bool,
    /// Write as this idempotent producer: piece N of the upload is sequence N,
    /// so rerunning the same upload after a failure writes nothing twice.
    #[arg(long)]
    pub producer_id: Option<String>,
    /// The producer's epoch; a higher one fences older writers of the same id.
    #[arg(long, default_value_t = 0, requires = "producer_id")]
    pub epoch: u64,
    /// Most bytes per append (e.g. 1MiB, 64KiB).
    #[arg(long, default_value = "1MiB", value_parser = ds_config::parse_size_usize)]
    pub chunk_size: usize,
    /// Close the stream after the write.
    #[arg(long)]
    pub close: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(flatten)]
    pub retry: RetryArgs,
}

/// The upstream CLI's escapes in a content argument.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

pub async fn run(a: WriteArgs, outer: &ConnArgs) -> Result<(), Error> {
    let client = connect(&a.conn, outer)?;
    let policy = a.retry.policy();
    let content_type = match (&a.content_type, a.json || a.batch_json) {
        (Some(ct), _) => ct.clone(),
        (None, true) => "application/json".into(),
        // The stream's own type, so that `write logs "line"` works on a
        // text/plain stream without repeating its type.
        (None, false) => ds_client::retry::retry(policy, notice, || client.head(&a.stream))
            .await?
            .content_type
            .unwrap_or_else(|| "application/octet-stream".into()),
    };
    let json = ds_client::json::is_json(&content_type);
    let (input, total): (Box<dyn Read + Send>, Option<u64>) = match (&a.content, &a.file) {
        (Some(c), _) => {
            let bytes = unescape(c).into_bytes();
            let len = bytes.len() as u64;
            (Box::new(std::io::Cursor::new(bytes)), Some(len))
        }
        (None, Some(path)) => {
            let f = std::fs::File::open(path).map_err(|e| Error::Invalid(format!("--file {}: {e}", path.display())))?;
            let len = f.metadata().ok().map(|m| m.len());
            (Box::new(f), len)
        }
        (None, None) => {
            if std::io::stdin().is_terminal() {
                return Err(Error::Invalid("nothing to write: give CONTENT, --file, or pipe it to stdin".into()));
            }
            (Box::new(std::io::stdin()), None)
        }
    };
    // Pieces are cut on a thread (blocking reads) and handed over two at a
    // time: memory stays at a few pieces whatever the input's size.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<Piece>>(2);
    let (chunk, flatten) = (a.chunk_size, a.batch_json);
    std::thread::spawn(move || {
        let pieces: Box<dyn Iterator<Item = std::io::Result<Piece>>> = if json {
            Box::new(JsonPieces::new(input, chunk, flatten))
        } else {
            Box::new(BytePieces::new(input, chunk))
        };
        for p in pieces {
            if tx.blocking_send(p).is_err() {
                break;
            }
        }
    });
    // A bar for files and stdin; an argument is written at once.
    let bar = match a.content {
        Some(_) => indicatif::ProgressBar::hidden(),
        None => crate::client_read::progress(total, "writing"),
    };
    let (mut seq, mut written, mut duplicates, mut bytes) = (0u64, 0u64, 0u64, 0u64);
    let mut next_offset = None;
    while let Some(piece) = rx.recv().await {
        let piece = piece.map_err(|e| Error::Invalid(format!("reading the input: {e}")))?;
        let opts = AppendOptions {
            content_type: Some(content_type.clone()),
            producer: a.producer_id.as_ref().map(|id| Producer { id: id.clone(), epoch: a.epoch, seq }),
            close: false,
        };
        let body = bytes::Bytes::from(piece.body);
        let sent = if opts.producer.is_some() {
            // Safe to resend: the server applies (id, epoch, seq) once.
            ds_client::retry::retry(policy, notice, || client.append(&a.stream, body.clone(), &opts)).await
        } else {
            client.append(&a.stream, body.clone(), &opts).await
        };
        let appended = sent.map_err(|e| explain(e, &a, seq, bytes))?;
        if appended.duplicate {
            duplicates += 1;
        } else {
            written += 1;
        }
        next_offset = appended.next_offset.or(next_offset);
        seq += 1;
        bytes += body.len() as u64;
        bar.set_position(piece.input_end);
    }
    bar.finish_and_clear();
    if a.close {
        next_offset = ds_client::retry::retry(policy, notice, || client.close(&a.stream)).await?.or(next_offset);
    }
    if std::io::stderr().is_terminal() {
        let again = if duplicates > 0 { format!(", {duplicates} already there") } else { String::new() };
        let at = next_offset.map(|o| format!("; next offset {o}")).unwrap_or_default();
        eprintln!("wrote {written} append(s), {bytes} bytes{again}{at}");
    }
    Ok(())
}

/// What a failed upload means for the user, in the error's reason.
fn explain(e: Error, a: &WriteArgs, seq: u64, bytes_before: u64) -> Error {
    let hint = match (&e, &a.producer_id) {
        (Error::Status { status, producer: Some(p), .. }, Some(id)) if *status == StatusCode::FORBIDDEN => {
            let epoch = p.current_epoch.unwrap_or(a.epoch);
            format!("producer {id:?} is fenced: the server holds epoch {epoch}; a new upload under this id needs --epoch {}", epoch + 1)
        }
        (Error::Status { status, producer: Some(p), .. }, Some(id)) if *status == StatusCode::CONFLICT => format!(
            "producer {id:?} epoch {}: the server expects sequence {}, this upload sent {seq}: it is not the upload \
             that used this id and epoch before (use another --producer-id or a higher --epoch)",
            a.epoch,
            p.expected_seq.map_or_else(|| "?".into(), |s| s.to_string())
        ),
        (_, Some(_)) => return e,
        (_, None) if e.is_transient() => format!(
            "whether this append landed is unknown; {bytes_before} bytes were acknowledged before it; \
             write with --producer-id to make a rerun safe"
        ),
        (_, None) if bytes_before > 0 => format!("{bytes_before} bytes were acknowledged before this refusal"),
        (_, None) => return e,
    };
    match e {
        Error::Status { status, reason, method, url, producer } => {
            Error::Status { status, reason: format!("{reason}: {hint}"), method, url, producer }
        }
        Error::Transport { method, url, message } => {
            Error::Transport { method, url, message: format!("{message}: {hint}") }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::unescape;

    #[test]
    fn escapes_become_characters_and_unknown_ones_stay() {
        assert_eq!(unescape(r"a\nb\tc\\d\re\q\"), "a\nb\tc\\d\re\\q\\");
    }
}
