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
    // One pass over the bytes (every append validates its path): a
    // control character is C0, DEL or C1 (U+0080..=U+009F, encoded as 0xC2
    // then 0x80..=0x9F); a segment ends at each '/' and at the end.
    let bytes = path.as_bytes();
    let mut segment_start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let c1 = b == 0xC2 && bytes.get(i + 1).is_some_and(|next| (0x80..=0x9F).contains(next));
        if b < 0x20 || b == 0x7F || b == b'\\' || c1 {
            return bad("stream path contains a control character or backslash");
        }
        if b == b'/' {
            check_segment(&bytes[segment_start..i])?;
            segment_start = i + 1;
        }
    }
    check_segment(&bytes[segment_start..])
}

fn check_segment(segment: &[u8]) -> Result<(), ProtocolError> {
    let why = match segment {
        b"" => "stream path has an empty segment",
        b"." | b".." => "stream path has a '.' or '..' segment",
        _ => return Ok(()),
    };
    Err(ProtocolError::InvalidPath(why.to_owned()))
}

/// Whether the path is under the reserved `__ds` control prefix.
pub fn is_reserved(path: &str) -> bool {
    path.strip_prefix(RESERVED_PREFIX).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
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
        assert!(is_reserved("__ds"));
        assert!(!is_reserved("__dsx/y"));
        assert!(!is_reserved("a/__ds"));
    }

    /// The byte scan refuses exactly what `char::is_control` and a split on
    /// '/' refuse, over every code point class the scan distinguishes.
    #[test]
    fn the_byte_scan_agrees_with_the_char_rules() {
        let by_chars = |path: &str| {
            !path.is_empty()
                && path.len() <= MAX_PATH_LEN
                && !path.chars().any(|c| c.is_control() || c == '\\')
                && path.split('/').all(|s| !matches!(s, "" | "." | ".."))
        };
        let pieces = [
            "a",
            "/",
            ".",
            "..",
            "\\",
            "\u{0}",
            "\u{1f}",
            "\u{7f}",
            "\u{80}",
            "\u{9f}",
            "\u{a0}",
            "\u{c2}",
            "é",
            "日",
            "\u{85}",
            "\u{2028}",
            "\u{10ffff}",
        ];
        let mut checked = 0;
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    let path = format!("{a}{b}{c}");
                    assert_eq!(validate(&path).is_ok(), by_chars(&path), "{path:?}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, pieces.len().pow(3));
    }
}
