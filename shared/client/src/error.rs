//! What can go wrong talking to a server, typed so that a caller (the CLI's
//! exit codes, a retry loop) can tell a refusal from a lost connection.

use http::{Method, StatusCode};

/// The client's error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered, and refused: the status and the reason it gave
    /// (`{"error":{"message":…}}` from this project's servers, the first line
    /// of a text body from others).
    #[error("{status}: {reason} ({method} {url})")]
    Status { status: StatusCode, reason: String, method: Method, url: String, producer: Option<ProducerRefusal> },
    /// No answer: connection refused or reset, DNS, TLS, or no answer in time.
    /// Whether a write sent this way was applied is unknown.
    #[error("{method} {url}: {message}")]
    Transport { method: Method, url: String, message: String },
    /// The server answered with something the protocol does not allow
    /// (a missing `Stream-Next-Offset`, a malformed SSE control event, …).
    #[error("{url}: unexpected answer: {message}")]
    Protocol { url: String, message: String },
    /// The caller's input cannot make a request (an empty stream path, a
    /// JSON body that does not parse, an unreadable CA file, …).
    #[error("{0}")]
    Invalid(String),
}

/// The producer headers of a refused idempotent append (protocol §5.2.1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerRefusal {
    /// `Producer-Epoch` on 403: the epoch the server holds.
    pub current_epoch: Option<u64>,
    /// `Producer-Expected-Seq` on 409.
    pub expected_seq: Option<u64>,
}

impl Error {
    /// The HTTP status, when the server answered.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Error::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Worth sending again as it was: the server was not reached, or said it
    /// could not serve now (408, 429, 5xx). A caller must only resend writes
    /// that are idempotent (a producer's append, a PUT, a DELETE it can
    /// re-check).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Transport { .. } => true,
            Error::Status { status, .. } => {
                status.is_server_error()
                    || *status == StatusCode::TOO_MANY_REQUESTS
                    || *status == StatusCode::REQUEST_TIMEOUT
            }
            Error::Protocol { .. } | Error::Invalid(_) => false,
        }
    }
}

/// The reason in an error answer's body: the JSON message this project's
/// servers send, else the body's first non-empty line, at most 300 bytes.
pub(crate) fn reason_of(body: &[u8], status: StatusCode) -> String {
    let text = String::from_utf8_lossy(body);
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
        if let Some(m) =
            v["error"]["message"].as_str().or_else(|| v["error"].as_str()).or_else(|| v["message"].as_str())
        {
            return clip(m);
        }
    }
    match text.lines().map(str::trim).find(|l| !l.is_empty()) {
        Some(line) => clip(line),
        None => status.canonical_reason().unwrap_or("no reason given").to_owned(),
    }
}

fn clip(s: &str) -> String {
    const MAX: usize = 300;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_come_from_json_messages_or_the_first_text_line() {
        let json = br#"{"error":{"code":"stream_closed","message":"the stream is closed"}}"#;
        assert_eq!(reason_of(json, StatusCode::CONFLICT), "the stream is closed");
        assert_eq!(reason_of(b"\n  Stream not found\nmore", StatusCode::NOT_FOUND), "Stream not found");
        assert_eq!(reason_of(b"", StatusCode::NOT_FOUND), "Not Found");
        let long = "x".repeat(1000);
        assert_eq!(reason_of(long.as_bytes(), StatusCode::BAD_REQUEST).chars().count(), 301);
    }

    #[test]
    fn only_unreached_or_overloaded_answers_are_transient() {
        let status = |s: u16| Error::Status {
            status: StatusCode::from_u16(s).expect("valid status"),
            reason: String::new(),
            method: Method::GET,
            url: String::new(),
            producer: None,
        };
        assert!(status(503).is_transient());
        assert!(status(429).is_transient());
        assert!(!status(404).is_transient());
        assert!(!status(409).is_transient());
        assert!(Error::Transport { method: Method::GET, url: String::new(), message: String::new() }.is_transient());
    }
}
