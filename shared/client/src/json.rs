//! JSON mode (protocol §7.1 of the base spec's JSON section): a JSON
//! stream's reads are JSON arrays of messages; an append's top-level array
//! is flattened one level into messages.

use serde_json::value::RawValue;

/// `true` for `application/json` (any case, any parameters).
pub fn is_json(content_type: &str) -> bool {
    media_type(content_type) == "application/json"
}

/// `true` for `text/*`.
pub fn is_text(content_type: &str) -> bool {
    media_type(content_type).starts_with("text/")
}

fn media_type(content_type: &str) -> String {
    content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase()
}

/// The messages of a JSON stream's read body (a JSON array; an empty body
/// is no messages), each exactly as stored.
pub fn messages(body: &[u8]) -> Result<Vec<Box<RawValue>>, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    serde_json::from_slice::<Vec<Box<RawValue>>>(body)
        .map_err(|e| format!("a JSON stream's read is not a JSON array: {e}"))
}

/// One append body carrying `messages` as separate messages.
pub fn batch_body<'a>(messages: impl IntoIterator<Item = &'a RawValue>) -> Vec<u8> {
    let mut out = vec![b'['];
    for (i, m) in messages.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(m.get().as_bytes());
    }
    out.push(b']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_are_compared_by_media_type() {
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(!is_json("application/jsonl"));
        assert!(is_text("text/plain"));
        assert!(!is_text("application/octet-stream"));
    }

    #[test]
    fn messages_keep_their_exact_text_and_batches_flatten_one_level() {
        let msgs = messages(br#" [ {"b":1, "a":2}, [1,2], 3.10 ] "#).expect("array");
        let texts: Vec<&str> = msgs.iter().map(|m| m.get()).collect();
        assert_eq!(texts, [r#"{"b":1, "a":2}"#, "[1,2]", "3.10"]);
        assert_eq!(batch_body(msgs.iter().map(AsRef::as_ref)), br#"[{"b":1, "a":2},[1,2],3.10]"#);
        assert!(messages(b"").expect("empty").is_empty());
        assert!(messages(b"{}").is_err());
    }
}
