//! Request header validation. Inputs are the raw header values (`None` when
//! absent); outputs are typed values or a [`ProtocolError`] naming the rule.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::ProtocolError;

/// Largest integer JavaScript clients represent exactly (2^53 - 1).
pub const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// Parse a strict non-negative decimal integer: digits only, no sign, no
/// leading zeros (except `0` itself), at most 2^53 - 1.
pub fn parse_strict_u64(value: &str) -> Option<u64> {
    let bytes = value.as_bytes();
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if bytes.len() > 1 && bytes[0] == b'0' {
        return None;
    }
    value.parse::<u64>().ok().filter(|v| *v <= MAX_SAFE_INTEGER)
}

/// `Stream-TTL`: seconds, digits only, no leading zeros.
pub fn parse_ttl(value: &str) -> Result<u64, ProtocolError> {
    parse_strict_u64(value).ok_or_else(|| {
        ProtocolError::InvalidTtl(format!(
            "{value:?} must be a non-negative integer without sign, leading zeros or fraction"
        ))
    })
}

/// `Stream-Expires-At`: an RFC 3339 timestamp; returns epoch milliseconds.
pub fn parse_expires_at(value: &str) -> Result<i64, ProtocolError> {
    let at = OffsetDateTime::parse(value.trim(), &Rfc3339)
        .map_err(|e| ProtocolError::InvalidExpiresAt(format!("{value:?} is not an RFC 3339 timestamp ({e})")))?;
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000)
        .map_err(|_| ProtocolError::InvalidExpiresAt(format!("{value:?} is out of range")))
}

/// Render epoch milliseconds as RFC 3339 (UTC, `Z`).
pub fn format_rfc3339_ms(ms: i64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    OffsetDateTime::from_unix_timestamp_nanos(nanos).ok().and_then(|t| t.format(&Rfc3339).ok()).unwrap_or_default()
}

/// The stream lifetime requested on create: TTL and absolute expiry exclude each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lifetime {
    pub ttl_secs: Option<u64>,
    pub expires_at_ms: Option<i64>,
}

pub fn parse_lifetime(ttl: Option<&str>, expires_at: Option<&str>) -> Result<Lifetime, ProtocolError> {
    match (ttl, expires_at) {
        (Some(_), Some(_)) => Err(ProtocolError::TtlAndExpiresAt),
        (Some(t), None) => Ok(Lifetime { ttl_secs: Some(parse_ttl(t)?), expires_at_ms: None }),
        (None, Some(e)) => Ok(Lifetime { ttl_secs: None, expires_at_ms: Some(parse_expires_at(e)?) }),
        (None, None) => Ok(Lifetime::default()),
    }
}

/// `Stream-Closed` counts only when exactly `true`, case-insensitively;
/// anything else is as if absent (never an error).
pub fn is_stream_closed(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Validated idempotent producer headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerHeaders {
    pub id: String,
    pub epoch: u64,
    pub seq: u64,
}

/// `Producer-Id`, `Producer-Epoch`, `Producer-Seq`: all or none.
pub fn parse_producer(
    id: Option<&str>,
    epoch: Option<&str>,
    seq: Option<&str>,
) -> Result<Option<ProducerHeaders>, ProtocolError> {
    match (id, epoch, seq) {
        (None, None, None) => Ok(None),
        (Some(id), Some(epoch), Some(seq)) => {
            if id.is_empty() {
                return Err(ProtocolError::InvalidProducer("Producer-Id must not be empty".into()));
            }
            let int = |name: &str, v: &str| {
                parse_strict_u64(v).ok_or_else(|| {
                    ProtocolError::InvalidProducer(format!("{name} {v:?} must be an integer in 0..=2^53-1"))
                })
            };
            Ok(Some(ProducerHeaders {
                id: id.to_owned(),
                epoch: int("Producer-Epoch", epoch)?,
                seq: int("Producer-Seq", seq)?,
            }))
        }
        _ => Err(ProtocolError::InvalidProducer(
            "Producer-Id, Producer-Epoch and Producer-Seq must be sent together".into(),
        )),
    }
}

/// `Stream-Fork-Sub-Offset`: a non-negative integer.
pub fn parse_sub_offset(value: &str) -> Result<u64, ProtocolError> {
    parse_strict_u64(value).ok_or_else(|| {
        ProtocolError::InvalidFork(format!("Stream-Fork-Sub-Offset {value:?} must be a non-negative integer"))
    })
}

/// A content type's essence (`type/subtype`), lowercased, without parameters.
pub fn content_type_essence(value: &str) -> String {
    essence(value).to_ascii_lowercase()
}

/// The essence as written (case kept): the checks below compare it without
/// allocating a lower-cased copy (they run on every append).
fn essence(value: &str) -> &str {
    value.split_once(';').map_or(value, |(essence, _)| essence).trim()
}

/// Check a content type is syntactically a MIME type (`type/subtype`).
pub fn validate_content_type(value: &str) -> Result<(), ProtocolError> {
    let essence = essence(value);
    let mut parts = essence.splitn(2, '/');
    let ok = matches!((parts.next(), parts.next()), (Some(t), Some(s)) if !t.is_empty() && !s.is_empty()
        && !s.contains('/') && essence.bytes().all(|b| b.is_ascii_graphic()));
    if ok {
        Ok(())
    } else {
        Err(ProtocolError::InvalidContentType(format!("{value:?} is not a MIME type")))
    }
}

/// Two content types name the same format (essence compared case-insensitively).
pub fn content_types_match(a: &str, b: &str) -> bool {
    essence(a).eq_ignore_ascii_case(essence(b))
}

/// JSON mode applies to `application/json` (with any parameters).
pub fn is_json(content_type: &str) -> bool {
    essence(content_type).eq_ignore_ascii_case("application/json")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ttl_rules() {
        assert_eq!(parse_ttl("3600").unwrap(), 3600);
        assert_eq!(parse_ttl("0").unwrap(), 0);
        for bad in ["+3600", "03600", "3600.0", "3.6e3", "-1", "", " 1", "abc", "9007199254740992"] {
            assert!(parse_ttl(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn expiry_rules() {
        assert_eq!(parse_expires_at("1970-01-01T00:00:01Z").unwrap(), 1000);
        assert_eq!(parse_expires_at("1970-01-01T01:00:01+01:00").unwrap(), 1000);
        assert!(parse_expires_at("tomorrow").is_err());
        assert!(parse_expires_at("2025-13-01T00:00:00Z").is_err());
        assert_eq!(parse_lifetime(Some("1"), Some("1970-01-01T00:00:01Z")), Err(ProtocolError::TtlAndExpiresAt));
        assert_eq!(format_rfc3339_ms(1000), "1970-01-01T00:00:01Z");
    }

    #[test]
    fn closed_header_is_exactly_true() {
        assert!(is_stream_closed(Some("true")));
        assert!(is_stream_closed(Some("TRUE")));
        for no in ["false", "yes", "1", "", "truee"] {
            assert!(!is_stream_closed(Some(no)));
        }
        assert!(!is_stream_closed(None));
    }

    #[test]
    fn producer_headers_all_or_none() {
        assert_eq!(parse_producer(None, None, None).unwrap(), None);
        assert!(parse_producer(Some("p"), Some("0"), None).is_err());
        assert!(parse_producer(Some(""), Some("0"), Some("0")).is_err());
        assert!(parse_producer(Some("p"), Some("-1"), Some("0")).is_err());
        assert!(parse_producer(Some("p"), Some("1.5"), Some("0")).is_err());
        assert!(parse_producer(Some("p"), Some("0"), Some("9007199254740992")).is_err());
        let p = parse_producer(Some("p"), Some("2"), Some("9007199254740991")).unwrap().unwrap();
        assert_eq!((p.epoch, p.seq), (2, MAX_SAFE_INTEGER));
    }

    #[test]
    fn content_types() {
        assert!(content_types_match("Text/Plain", "text/plain; charset=utf-8"));
        assert!(is_json("application/json; charset=utf-8"));
        assert!(validate_content_type("text/plain").is_ok());
        assert!(validate_content_type("garbage").is_err());
    }
}
