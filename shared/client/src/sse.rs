//! Server-Sent Events framing (the WHATWG event-stream format), as the
//! protocol's live SSE mode uses it (§5.8): `event:` and `data:` fields,
//! comments, events dispatched on a blank line. Lines end in `\n` or `\r\n`
//! (what HTTP servers send); a lone `\r` is kept as data.

use serde::Deserialize;

/// Most bytes one event may take before it is refused: a server sends
/// events of at most its read size; this bounds what a broken one costs.
pub const MAX_EVENT_BYTES: usize = 64 << 20;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// `event:` (`data` when absent, as browsers default to `message`).
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Incremental parser: feed it the body's chunks as they come.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
    size: usize,
}

impl SseParser {
    /// Parses `bytes`; returns the events completed by them.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, String> {
        let mut out = Vec::new();
        for &b in bytes {
            if b != b'\n' {
                self.line.push(b);
                self.size += 1;
                if self.size > MAX_EVENT_BYTES {
                    return Err(format!("an SSE event longer than {MAX_EVENT_BYTES} bytes"));
                }
                continue;
            }
            if self.line.last() == Some(&b'\r') {
                self.line.pop();
            }
            let line = std::mem::take(&mut self.line);
            let line = String::from_utf8(line).map_err(|_| "an SSE line that is not UTF-8".to_owned())?;
            if line.is_empty() {
                if let Some(data) = self.data.take() {
                    out.push(SseEvent { event: self.event.take().unwrap_or_else(|| "data".into()), data });
                }
                self.event = None;
                self.size = 0;
                continue;
            }
            if line.starts_with(':') {
                continue; // a comment (keep-alive)
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line.as_str(), ""),
            };
            match field {
                "event" => self.event = Some(value.to_owned()),
                "data" => match &mut self.data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(value);
                    }
                    None => self.data = Some(value.to_owned()),
                },
                _ => {} // id, retry and unknown fields mean nothing here
            }
        }
        Ok(out)
    }
}

/// A `control` event's payload (§5.8).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Control {
    pub stream_next_offset: String,
    #[serde(default)]
    pub stream_cursor: Option<String>,
    #[serde(default)]
    pub up_to_date: bool,
    #[serde(default)]
    pub stream_closed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SAMPLE: &str = "event: data\ndata: [\ndata: {\"k\":\"v\"}\ndata: ]\n\n: keep-alive\n\nevent: control\r\ndata: {\"streamNextOffset\":\"1_2\",\"upToDate\":true}\r\n\r\n";

    fn expected() -> Vec<SseEvent> {
        vec![
            SseEvent { event: "data".into(), data: "[\n{\"k\":\"v\"}\n]".into() },
            SseEvent { event: "control".into(), data: "{\"streamNextOffset\":\"1_2\",\"upToDate\":true}".into() },
        ]
    }

    #[test]
    fn events_are_dispatched_on_blank_lines_and_comments_skipped() {
        let events = SseParser::default().push(SAMPLE.as_bytes()).expect("parses");
        assert_eq!(events, expected());
        let control: Control = serde_json::from_str(&events[1].data).expect("control");
        assert_eq!(control.stream_next_offset, "1_2");
        assert!(control.up_to_date && !control.stream_closed && control.stream_cursor.is_none());
    }

    #[test]
    fn an_event_cut_before_its_blank_line_is_not_dispatched() {
        let mut p = SseParser::default();
        let events = p.push(b"event: data\ndata: abc\n").expect("parses");
        assert!(events.is_empty());
    }

    proptest! {
        /// However the body is cut into chunks, the same events come out.
        #[test]
        fn chunking_does_not_change_the_events(cuts in proptest::collection::vec(0usize..SAMPLE.len(), 0..12)) {
            let bytes = SAMPLE.as_bytes();
            let mut cuts = cuts;
            cuts.sort_unstable();
            let mut p = SseParser::default();
            let mut events = Vec::new();
            let mut at = 0;
            for c in cuts.into_iter().chain([bytes.len()]) {
                events.extend(p.push(&bytes[at..c.max(at)]).expect("parses"));
                at = c.max(at);
            }
            prop_assert_eq!(events, expected());
        }
    }
}
