//! Stream path validation: stream-root-relative paths such as `events/abc`.
//!
//! Paths become storage keys (and, for some substrates, parts of object
//! names), so anything that could escape a namespace is refused: `.` and
//! `..` segments, empty segments, control characters, backslashes and
//! over-long paths.

use crate::ProtocolError;

/// Longest accepted path, in bytes.
pub const MAX_PATH_LEN: usize = 1024;

/// The reserved control-API prefix (§6): not an application stream.
pub const RESERVED_PREFIX: &str = "__ds";

/// Validate a decoded stream path (without the `/v1/stream/` prefix).
pub fn validate(path: &str) -> Result<(), ProtocolError> {
    let bad = |why: &str| Err(ProtocolError::InvalidPath(why.to_owned()));
    if path.is_empty() {
        return bad("empty stream path");
    }
    if path.len() > MAX_PATH_LEN {
        return bad("stream path longer than 1024 bytes");
    }
    if path.chars().any(|c| c.is_control() || c == '\\') {
        return bad("stream path contains a control character or backslash");
    }
    for segment in path.split('/') {
        match segment {
            "" => return bad("stream path has an empty segment"),
            "." | ".." => return bad("stream path has a '.' or '..' segment"),
            _ => {}
        }
    }
    Ok(())
}

/// Whether the path is under the reserved `__ds` control prefix.
pub fn is_reserved(path: &str) -> bool {
    path.split('/').next() == Some(RESERVED_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traversal_and_garbage_rejected() {
        for bad in ["", "..", "a/../b", "./a", "a//b", "a/", "/a", "a\\b", "a\u{0}b", "a\nb", &"x".repeat(1025)] {
            assert!(validate(bad).is_err(), "{bad:?}");
        }
        for good in ["a", "events/abc", "a.b/c..d", "日本/ストリーム"] {
            assert!(validate(good).is_ok(), "{good:?}");
        }
        assert!(is_reserved("__ds/subscriptions/x"));
        assert!(!is_reserved("__dsx/y"));
    }
}
