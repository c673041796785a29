//! A subscription's configuration (§6.2): parsed from the `PUT` body,
//! validated, normalized, and hashed for idempotent re-confirmation. Pure,
//! except that webhook URLs are checked by [`crate::webhook_url`].

use std::collections::BTreeSet;

use ds_protocol::glob::Glob;
use ds_protocol::path;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::SubscriptionError;

/// Shortest lease (§6.2: 1 second).
pub const MIN_LEASE_TTL_MS: u64 = 1_000;
/// Longest lease (§6.2: 10 minutes).
pub const MAX_LEASE_TTL_MS: u64 = 600_000;
/// Lease when none is given (§6.2: 30 seconds).
pub const DEFAULT_LEASE_TTL_MS: u64 = 30_000;
/// Longest `description`, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 1024;
/// Longest subscription id, in bytes.
pub const MAX_ID_BYTES: usize = 128;
/// Most explicit streams one request may name.
pub const MAX_STREAMS_PER_REQUEST: usize = 1000;

/// How a subscription wakes its workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Signed `POST` to `webhook.url` (§7.1).
    Webhook,
    /// Wake events appended to `wake_stream`, claimed by workers (§7.2).
    PullWake,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Webhook => "webhook",
            Kind::PullWake => "pull-wake",
        }
    }
}

/// The normalized configuration. Field order is the hash order: changing it
/// changes every stored hash (a persisted format).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    #[serde(rename = "type")]
    pub kind: Kind,
    pub pattern: Option<String>,
    /// Explicit streams of the `PUT`, sorted and deduplicated.
    pub streams: Vec<String>,
    pub webhook_url: Option<String>,
    pub wake_stream: Option<String>,
    pub lease_ttl_ms: u64,
    pub description: Option<String>,
}

impl Config {
    /// SHA-256 (hex) of the normalized configuration's canonical JSON.
    pub fn hash(&self) -> String {
        let canonical = serde_json::to_vec(self).unwrap_or_default();
        hex::encode(Sha256::digest(&canonical))
    }

    /// The parsed `pattern` (validated when the config was built).
    pub fn glob(&self) -> Option<Glob> {
        self.pattern.as_deref().and_then(|p| Glob::parse(p).ok())
    }
}

/// The `PUT` body as sent; unknown fields are ignored.
#[derive(Debug, Deserialize)]
struct Body {
    #[serde(rename = "type")]
    kind: Option<String>,
    pattern: Option<String>,
    streams: Option<Vec<String>>,
    webhook: Option<WebhookBody>,
    wake_stream: Option<String>,
    lease_ttl_ms: Option<serde_json::Value>,
    description: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WebhookBody {
    url: Option<String>,
}

fn invalid(message: impl Into<String>) -> SubscriptionError {
    SubscriptionError::Invalid(message.into())
}

/// A subscription id: 1-128 bytes of `A-Z a-z 0-9 . _ ~ -`, not `.` or `..`.
pub fn validate_id(id: &str) -> Result<(), SubscriptionError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '~' | '-');
    if id.is_empty() || id.len() > MAX_ID_BYTES || !id.chars().all(allowed) || id == "." || id == ".." {
        return Err(invalid(format!(
            "subscription id must be 1-{MAX_ID_BYTES} characters of A-Z, a-z, 0-9, '.', '_', '~' or '-'"
        )));
    }
    Ok(())
}

/// A stream path named in a request body: valid, and not a control path.
pub fn validate_stream_path(field: &str, p: &str) -> Result<(), SubscriptionError> {
    path::validate(p).map_err(|e| invalid(format!("{field}: {e}")))?;
    if path::is_reserved(p) {
        return Err(invalid(format!("{field}: {p:?} is under the reserved __ds prefix")));
    }
    Ok(())
}

/// Sorted, deduplicated, validated explicit stream paths.
pub fn normalize_streams(field: &str, streams: Vec<String>) -> Result<Vec<String>, SubscriptionError> {
    if streams.len() > MAX_STREAMS_PER_REQUEST {
        return Err(invalid(format!("{field}: at most {MAX_STREAMS_PER_REQUEST} streams per request")));
    }
    for s in &streams {
        validate_stream_path(field, s)?;
    }
    Ok(streams.into_iter().collect::<BTreeSet<_>>().into_iter().collect())
}

fn lease_ttl(value: Option<serde_json::Value>) -> Result<u64, SubscriptionError> {
    let Some(value) = value else { return Ok(DEFAULT_LEASE_TTL_MS) };
    let ms = value.as_u64().ok_or_else(|| invalid("lease_ttl_ms must be a whole number of milliseconds"))?;
    if !(MIN_LEASE_TTL_MS..=MAX_LEASE_TTL_MS).contains(&ms) {
        return Err(invalid(format!(
            "lease_ttl_ms must be between {MIN_LEASE_TTL_MS} (1 s) and {MAX_LEASE_TTL_MS} (10 min), got {ms}"
        )));
    }
    Ok(ms)
}

/// Parse and validate a `PUT` body. The webhook URL's SSRF rules are checked
/// by `check_url` (the caller's policy), before anything is stored.
pub fn parse(
    body: &[u8],
    check_url: impl Fn(&str) -> Result<(), SubscriptionError>,
) -> Result<Config, SubscriptionError> {
    let body: Body =
        serde_json::from_slice(body).map_err(|e| invalid(format!("body is not a subscription JSON object: {e}")))?;
    let kind = match body.kind.as_deref() {
        Some("webhook") => Kind::Webhook,
        Some("pull-wake") => Kind::PullWake,
        Some(other) => return Err(invalid(format!("unknown type {other:?} (expected \"webhook\" or \"pull-wake\")"))),
        None => return Err(invalid("type is required (\"webhook\" or \"pull-wake\")")),
    };
    if let Some(p) = &body.pattern {
        Glob::parse(p).map_err(|e| invalid(format!("pattern: {e}")))?;
    }
    let streams = normalize_streams("streams", body.streams.unwrap_or_default())?;
    if body.pattern.is_none() && streams.is_empty() {
        return Err(invalid("at least one of pattern or streams is required"));
    }
    let (webhook_url, wake_stream) = match kind {
        Kind::Webhook => {
            if body.wake_stream.is_some() {
                return Err(invalid("wake_stream is for pull-wake subscriptions"));
            }
            let url = body.webhook.and_then(|w| w.url).ok_or_else(|| invalid("webhook.url is required"))?;
            check_url(&url)?;
            (Some(url), None)
        }
        Kind::PullWake => {
            if body.webhook.is_some() {
                return Err(invalid("webhook is for webhook subscriptions"));
            }
            let wake = body.wake_stream.ok_or_else(|| invalid("wake_stream is required for pull-wake"))?;
            validate_stream_path("wake_stream", &wake)?;
            (None, Some(wake))
        }
    };
    if let Some(d) = &body.description {
        if d.len() > MAX_DESCRIPTION_BYTES {
            return Err(invalid(format!("description is longer than {MAX_DESCRIPTION_BYTES} bytes")));
        }
    }
    Ok(Config {
        kind,
        pattern: body.pattern,
        streams,
        webhook_url,
        wake_stream,
        lease_ttl_ms: lease_ttl(body.lease_ttl_ms)?,
        description: body.description,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ok(_: &str) -> Result<(), SubscriptionError> {
        Ok(())
    }

    fn err(body: &str) -> String {
        match parse(body.as_bytes(), ok) {
            Err(SubscriptionError::Invalid(m)) => m,
            other => panic!("{body}: {other:?}"),
        }
    }

    #[test]
    fn normalizes_and_hashes_identically() {
        let a = parse(br#"{"type":"webhook","streams":["b","a","b"],"webhook":{"url":"https://x.test/h"}}"#, ok);
        let b = parse(br#"{"webhook":{"url":"https://x.test/h"},"streams":["a","b"],"type":"webhook","x":1}"#, ok);
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.streams, vec!["a", "b"]);
        assert_eq!(a.lease_ttl_ms, DEFAULT_LEASE_TTL_MS);
        assert_eq!(a.hash(), b.hash());
        let c = parse(br#"{"type":"webhook","streams":["a"],"webhook":{"url":"https://x.test/h"}}"#, ok).unwrap();
        assert_ne!(a.hash(), c.hash());
        let d = parse(
            br#"{"type":"webhook","streams":["a","b"],"webhook":{"url":"https://x.test/h"},"lease_ttl_ms":30000}"#,
            ok,
        )
        .unwrap();
        assert_eq!(a.hash(), d.hash(), "the default lease is part of the normalized form");
    }

    #[test]
    fn bad_input_is_refused_with_a_reason() {
        assert!(err(r#"{"type":"carrier-pigeon","pattern":"a/*"}"#).contains("unknown type"));
        assert!(err(r#"{"pattern":"a/*"}"#).contains("type is required"));
        assert!(err(r#"{"type":"webhook","webhook":{"url":"https://x.test"}}"#).contains("pattern or streams"));
        assert!(err(r#"{"type":"webhook","streams":[],"webhook":{"url":"https://x.test"}}"#).contains("pattern or"));
        assert!(err(r#"{"type":"webhook","pattern":"a/b*","webhook":{"url":"https://x.test"}}"#).contains("pattern"));
        assert!(err(r#"{"type":"webhook","pattern":"a//b","webhook":{"url":"https://x.test"}}"#).contains("pattern"));
        assert!(err(r#"{"type":"webhook","pattern":"a/*"}"#).contains("webhook.url"));
        assert!(err(r#"{"type":"pull-wake","pattern":"a/*"}"#).contains("wake_stream"));
        assert!(err(r#"{"type":"pull-wake","pattern":"a/*","wake_stream":"__ds/x"}"#).contains("reserved"));
        assert!(
            err(r#"{"type":"webhook","streams":["a/../b"],"webhook":{"url":"https://x.test"}}"#).contains("streams")
        );
        for lease in ["999", "600001", "0", "-5", "1.5", "\"30000\""] {
            let body = format!(
                r#"{{"type":"webhook","pattern":"a","webhook":{{"url":"https://x.test"}},"lease_ttl_ms":{lease}}}"#
            );
            assert!(err(&body).contains("lease_ttl_ms"), "{lease}");
        }
        for lease in ["1000", "600000"] {
            let body = format!(
                r#"{{"type":"webhook","pattern":"a","webhook":{{"url":"https://x.test"}},"lease_ttl_ms":{lease}}}"#
            );
            assert!(parse(body.as_bytes(), ok).is_ok(), "{lease}");
        }
        let long = "d".repeat(MAX_DESCRIPTION_BYTES + 1);
        let body = format!(
            r#"{{"type":"webhook","pattern":"a","webhook":{{"url":"https://x.test"}},"description":"{long}"}}"#
        );
        assert!(err(&body).contains("description"));
        assert!(err("not json").contains("JSON"));
        assert!(err("[1]").contains("JSON"));
    }

    #[test]
    fn ids() {
        for good in ["sub-1", "a.b_c~d", &"x".repeat(MAX_ID_BYTES)] {
            assert!(validate_id(good).is_ok(), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "a%2F", &"x".repeat(MAX_ID_BYTES + 1)] {
            assert!(validate_id(bad).is_err(), "{bad}");
        }
    }
}
