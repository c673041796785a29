//! JSON mode (§9.1): validation, one-level array flattening, and the storage
//! framing that keeps message boundaries without re-parsing on reads.
//!
//! Storage framing: every message is stored minified (insignificant
//! whitespace removed, numbers and key order byte-for-byte as sent) followed
//! by `\n`. Minified JSON never contains a raw newline (JSON forbids raw
//! control characters inside strings), so `\n` marks boundaries exactly and a
//! read renders `[` + messages joined by `,` + `]` with one pass.

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::value::RawValue;

use crate::ProtocolError;

/// Whether an empty top-level array is an error (POST) or an empty create (PUT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmptyArray {
    Reject,
    Allow,
}

/// Validate a JSON request body and frame its messages for storage. A
/// top-level array is flattened one level; any other value is one message.
/// Returns the framed bytes (empty only for an allowed `[]`).
pub fn frame_messages(body: &[u8], empty: EmptyArray) -> Result<Bytes, ProtocolError> {
    let text = std::str::from_utf8(body).map_err(|_| ProtocolError::InvalidJson("body is not UTF-8".into()))?;
    let value: &RawValue = serde_json::from_str(text).map_err(|e| ProtocolError::InvalidJson(e.to_string()))?;
    let raw = value.get();
    let mut out = BytesMut::with_capacity(raw.len() + 1);
    if raw.starts_with('[') {
        // Element by element: collecting the elements first would cost 16
        // bytes per element (128 MiB for a 16 MiB body of `0,0,0,...`).
        let mut de = serde_json::Deserializer::from_str(raw);
        let count = serde::Deserializer::deserialize_seq(&mut de, Flatten { out: &mut out })
            .map_err(|e| ProtocolError::InvalidJson(e.to_string()))?;
        if count == 0 && empty == EmptyArray::Reject {
            return Err(ProtocolError::EmptyJsonArray);
        }
    } else {
        push_minified(&mut out, raw);
    }
    Ok(out.freeze())
}

/// Frames each element of a JSON array as it is parsed; counts them.
struct Flatten<'a> {
    out: &'a mut BytesMut,
}

impl<'de> serde::de::Visitor<'de> for Flatten<'_> {
    type Value = usize;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON array")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        let mut count = 0;
        while let Some(item) = seq.next_element::<&'de RawValue>()? {
            push_minified(self.out, item.get());
            count += 1;
        }
        Ok(count)
    }
}

/// Append `raw` (valid JSON) without insignificant whitespace, then `\n`.
fn push_minified(out: &mut BytesMut, raw: &str) {
    let mut in_string = false;
    let mut escaped = false;
    for &b in raw.as_bytes() {
        if in_string {
            out.put_u8(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
            out.put_u8(b);
        } else if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            out.put_u8(b);
        }
    }
    out.put_u8(b'\n');
}

/// Render framed messages as one JSON array.
pub fn render_array(framed: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(framed.len() + 2);
    out.put_u8(b'[');
    let body = framed.strip_suffix(b"\n").unwrap_or(framed);
    for &b in body {
        out.put_u8(if b == b'\n' { b',' } else { b });
    }
    out.put_u8(b']');
    out.freeze()
}

/// Number of framed messages in `framed`.
pub fn message_count(framed: &[u8]) -> usize {
    framed.iter().filter(|b| **b == b'\n').count()
}

/// Byte length of the first `n` framed messages, or `None` if fewer exist.
pub fn prefix_len(framed: &[u8], n: u64) -> Option<usize> {
    if n == 0 {
        return Some(0);
    }
    let mut seen = 0u64;
    for (i, b) in framed.iter().enumerate() {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return Some(i + 1);
            }
        }
    }
    None
}

/// Largest prefix of `framed` of at most `max` bytes that ends on a message
/// boundary; at least one whole message even when it alone exceeds `max`.
pub fn boundary_prefix(framed: &[u8], max: usize) -> usize {
    if framed.len() <= max {
        return framed.len();
    }
    match framed[..max].iter().rposition(|b| *b == b'\n') {
        Some(i) => i + 1,
        None => framed.iter().position(|b| *b == b'\n').map_or(framed.len(), |i| i + 1),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn stored(body: &str) -> String {
        String::from_utf8(frame_messages(body.as_bytes(), EmptyArray::Reject).unwrap().to_vec()).unwrap()
    }

    #[test]
    fn flattens_exactly_one_level() {
        assert_eq!(stored(r#"{"event": "created"}"#), "{\"event\":\"created\"}\n");
        assert_eq!(stored(r#"[{"a":1}, {"b":2}]"#), "{\"a\":1}\n{\"b\":2}\n");
        assert_eq!(stored("[[1,2], [3,4]]"), "[1,2]\n[3,4]\n");
        assert_eq!(stored("[[[1,2,3]]]"), "[[1,2,3]]\n");
        assert_eq!(stored(r#" "a b\n" "#), "\"a b\\n\"\n");
    }

    #[test]
    fn flattens_large_arrays_element_by_element() {
        let body = format!("[{}]", vec!["[]"; 100_000].join(","));
        let framed = frame_messages(body.as_bytes(), EmptyArray::Reject).unwrap();
        assert_eq!(message_count(&framed), 100_000);
        assert_eq!(&framed[..6], b"[]\n[]\n");
        assert_eq!(stored("[ 1 , [ 2 ] , { \"a\" : [ ] } ]"), "1\n[2]\n{\"a\":[]}\n");
    }

    #[test]
    fn rejects_bad_json_and_empty_post_arrays() {
        assert_eq!(frame_messages(b"[]", EmptyArray::Reject), Err(ProtocolError::EmptyJsonArray));
        assert_eq!(frame_messages(b" [ ] ", EmptyArray::Allow).unwrap().len(), 0);
        assert!(frame_messages(b"{", EmptyArray::Allow).is_err());
        assert!(frame_messages(b"{} {}", EmptyArray::Allow).is_err());
        assert!(frame_messages(b"", EmptyArray::Allow).is_err());
    }

    #[test]
    fn renders_arrays() {
        assert_eq!(&render_array(b"")[..], b"[]");
        assert_eq!(&render_array(b"1\n{\"a\":2}\n")[..], b"[1,{\"a\":2}]");
        assert_eq!(prefix_len(b"1\n22\n", 2), Some(5));
        assert_eq!(prefix_len(b"1\n22\n", 3), None);
        assert_eq!(boundary_prefix(b"1\n22\n333\n", 6), 5);
        assert_eq!(boundary_prefix(b"4444\n1\n", 2), 5);
    }

    proptest! {
        #[test]
        fn framing_round_trips(values in proptest::collection::vec(any::<(i32, String)>(), 1..8)) {
            let body = serde_json::to_string(&values.iter().map(|(n, s)| serde_json::json!({"n": n, "s": s})).collect::<Vec<_>>()).unwrap();
            let framed = frame_messages(body.as_bytes(), EmptyArray::Reject).unwrap();
            prop_assert_eq!(message_count(&framed), values.len());
            let back: serde_json::Value = serde_json::from_slice(&render_array(&framed)).unwrap();
            let orig: serde_json::Value = serde_json::from_str(&body).unwrap();
            prop_assert_eq!(back, orig);
        }
    }
}
