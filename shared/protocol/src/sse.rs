//! Server-Sent Events framing (§5.8): a `data` event per batch, always
//! followed by a `control` event.
//!
//! Text payloads are split on every SSE line terminator (CRLF, LF, CR) into
//! `data:` lines, so payload bytes can never end an event early or inject an
//! event of their own. Non-text streams are base64-encoded.

use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};

/// How data events carry the stream's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataEncoding {
    /// UTF-8 text (`text/*`, `application/json`).
    Text,
    /// Standard base64 (everything else); announced by `stream-sse-data-encoding: base64`.
    Base64,
}

impl DataEncoding {
    pub fn for_content_type(content_type: &str) -> Self {
        let essence = crate::headers::content_type_essence(content_type);
        if essence.starts_with("text/") || essence == "application/json" {
            Self::Text
        } else {
            Self::Base64
        }
    }
}

/// Frame one `data` event.
pub fn data_event(payload: &[u8], encoding: DataEncoding) -> Bytes {
    let mut out = BytesMut::with_capacity(payload.len() + 32);
    out.put_slice(b"event: data\n");
    match encoding {
        DataEncoding::Base64 => {
            let text = base64::engine::general_purpose::STANDARD.encode(payload);
            // Lines of 76 characters keep every line a multiple of 4 long.
            if text.is_empty() {
                out.put_slice(b"data:\n");
            }
            for line in text.as_bytes().chunks(76) {
                out.put_slice(b"data:");
                out.put_slice(line);
                out.put_u8(b'\n');
            }
        }
        DataEncoding::Text => {
            let text = String::from_utf8_lossy(payload);
            let mut rest = text.as_ref();
            loop {
                let cut = rest.find(['\r', '\n']);
                let (line, next) = match cut {
                    Some(i) => {
                        let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
                        (&rest[..i], Some(&rest[i + skip..]))
                    }
                    None => (rest, None),
                };
                // `data:` then the line; a line starting with a space gets one
                // more, because SSE parsers strip one leading space.
                out.put_slice(if line.starts_with(' ') { b"data: " } else { b"data:" });
                out.put_slice(line.as_bytes());
                out.put_u8(b'\n');
                match next {
                    Some(n) => rest = n,
                    None => break,
                }
            }
        }
    }
    out.put_u8(b'\n');
    out.freeze()
}

/// The `control` event's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Control {
    pub next_offset: String,
    pub cursor: Option<String>,
    pub up_to_date: bool,
    pub closed: bool,
}

/// Frame one `control` event.
pub fn control_event(c: &Control) -> Bytes {
    // Built by hand to keep the documented field order; offsets and cursors
    // are ASCII tokens we minted, escaped through serde_json all the same.
    let mut json = format!("{{\"streamNextOffset\":{}", serde_json::Value::from(c.next_offset.as_str()));
    if let Some(cursor) = &c.cursor {
        json.push_str(&format!(",\"streamCursor\":{}", serde_json::Value::from(cursor.as_str())));
    }
    if c.up_to_date || c.closed {
        json.push_str(",\"upToDate\":true");
    }
    if c.closed {
        json.push_str(",\"streamClosed\":true");
    }
    json.push('}');
    Bytes::from(format!("event: control\ndata:{json}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_data(event: &[u8]) -> String {
        let s = std::str::from_utf8(event).unwrap_or_default();
        s.lines()
            .filter_map(|l| l.strip_prefix("data:").map(|d| d.strip_prefix(' ').unwrap_or(d)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn text_lines_cannot_inject_events() {
        let ev = data_event(b"start\r\n\r\nevent: control\rdata: x\n\nend", DataEncoding::Text);
        let s = std::str::from_utf8(&ev).unwrap_or_default();
        // Only the final blank line ends the event; every payload line is a data: line.
        assert_eq!(s.matches("\n\n").count(), 1);
        assert!(s.lines().skip(1).all(|l| l.is_empty() || l.starts_with("data:")));
        assert_eq!(parse_data(&ev), "start\n\nevent: control\ndata: x\n\nend");
    }

    #[test]
    fn base64_lines_are_multiples_of_four() {
        let payload: Vec<u8> = (0..=255).collect();
        let ev = data_event(&payload, DataEncoding::Base64);
        let joined = parse_data(&ev).replace('\n', "");
        assert_eq!(base64::engine::general_purpose::STANDARD.decode(joined).unwrap_or_default(), payload);
        assert_eq!(DataEncoding::for_content_type("application/json; charset=utf-8"), DataEncoding::Text);
        assert_eq!(DataEncoding::for_content_type("image/png"), DataEncoding::Base64);
    }

    #[test]
    fn control_fields() {
        let c = control_event(&Control { next_offset: "o".into(), cursor: None, up_to_date: false, closed: true });
        assert_eq!(
            &c[..],
            b"event: control\ndata:{\"streamNextOffset\":\"o\",\"upToDate\":true,\"streamClosed\":true}\n\n"
        );
    }
}
