//! Fixed-size, self-describing append payloads and the check that a stream
//! holds exactly the acknowledged ones.
//!
//! Every append carries `w<writer>s<seq>` padded to 100 bytes, so the final
//! stream can be checked record by record: a server that acknowledges an
//! append and then drops, duplicates or reorders it fails the check even if
//! the byte count happened to match. No newlines, so SSE text framing cannot
//! alter a record.

use anyhow::{bail, Result};

/// Size of every append in bytes (the issue's "100-byte POSTs").
pub const RECORD_LEN: usize = 100;
const HEADER_LEN: usize = 20; // "w" + 6 digits + "s" + 12 digits

/// The payload of append number `seq` (1-based) of writer `writer`.
pub fn record(writer: u32, seq: u64) -> Vec<u8> {
    let mut out = format!("w{writer:06}s{seq:012}").into_bytes();
    debug_assert_eq!(out.len(), HEADER_LEN);
    out.resize(RECORD_LEN, b'.');
    out
}

/// Parses one record back into `(writer, seq)`.
pub fn parse(rec: &[u8]) -> Option<(u32, u64)> {
    if rec.len() != RECORD_LEN || rec[0] != b'w' || rec[7] != b's' {
        return None;
    }
    if rec[HEADER_LEN..].iter().any(|&b| b != b'.') {
        return None;
    }
    let writer = std::str::from_utf8(&rec[1..7]).ok()?.parse().ok()?;
    let seq = std::str::from_utf8(&rec[8..HEADER_LEN]).ok()?.parse().ok()?;
    Some((writer, seq))
}

/// Checks that `body` is exactly the acknowledged appends: `acked[w]` is how
/// many appends writer `w` had acknowledged (its seqs 1..=n, sent one after
/// the other), so the stream must hold exactly those records, each once, in
/// each writer's order, and nothing else.
pub fn verify(body: &[u8], acked: &[u64]) -> Result<()> {
    let expected: u64 = acked.iter().sum();
    let expected_len = expected as usize * RECORD_LEN;
    if body.len() != expected_len {
        bail!(
            "stream holds {} bytes but {} appends × {} B = {} B were acknowledged{}",
            body.len(),
            expected,
            RECORD_LEN,
            expected_len,
            if body.len() < expected_len { " (data lost)" } else { "" }
        );
    }
    let mut next = vec![1u64; acked.len()];
    for (i, rec) in body.chunks(RECORD_LEN).enumerate() {
        let Some((w, seq)) = parse(rec) else {
            bail!("corrupt record at byte {}", i * RECORD_LEN);
        };
        let Some(slot) = next.get_mut(w as usize) else {
            bail!("record {i} names unknown writer {w}");
        };
        if seq != *slot {
            bail!("record {i}: writer {w} seq {seq}, expected {} (lost, duplicated or reordered)", *slot);
        }
        *slot += 1;
    }
    for (w, (&n, &got)) in acked.iter().zip(&next).enumerate() {
        if got - 1 != n {
            bail!("writer {w}: {} records in stream, {n} acknowledged", got - 1);
        }
    }
    Ok(())
}

/// Event type of [`json_event`].
pub const EVENT_TYPE: &str = "order.placed";

/// Append number `seq` of `writer` as one JSON event of [`RECORD_LEN`]
/// bytes, its id the record's header: `{"type":"order.placed","payload":
/// {"id":"w…s…","qty":1,"note":"…"}}`. `valid = false` gives `"qty":0`,
/// same length, which a schema asking for `qty >= 1` refuses: the accept
/// and reject runs then send bodies that differ in one byte.
pub fn json_event(writer: u32, seq: u64, valid: bool) -> Vec<u8> {
    let head = format!(
        r#"{{"type":"{EVENT_TYPE}","payload":{{"id":"w{writer:06}s{seq:012}","qty":{},"note":""#,
        u8::from(valid)
    );
    let tail = r#""}}"#;
    let pad = RECORD_LEN.saturating_sub(head.len() + tail.len());
    format!("{head}{}{tail}", ".".repeat(pad)).into_bytes()
}

/// [`verify`] for a JSON stream of [`json_event`]s: `body` is what a
/// catch-up read returned (one JSON array per response, concatenated);
/// each event must be a valid one, and their ids must be exactly the
/// acknowledged appends, each once, in each writer's order.
pub fn verify_json(body: &[u8], acked: &[u64]) -> Result<()> {
    let mut records = Vec::new();
    for page in serde_json::Deserializer::from_slice(body).into_iter::<Vec<serde_json::Value>>() {
        let page = page.map_err(|e| anyhow::anyhow!("the stream's body is not JSON arrays: {e}"))?;
        for (i, event) in page.iter().enumerate() {
            let id = event.pointer("/payload/id").and_then(|v| v.as_str());
            let (Some(id), Some(EVENT_TYPE), Some(1)) = (
                id,
                event.get("type").and_then(|v| v.as_str()),
                event.pointer("/payload/qty").and_then(|v| v.as_u64()),
            ) else {
                bail!("event {i} of a page is not one P1 wrote: {event}");
            };
            let Some((w, seq)) = parse(&record_with_header(id)) else {
                bail!("event {i} of a page has a corrupt id {id:?}");
            };
            records.extend(record(w, seq));
        }
    }
    verify(&records, acked)
}

/// A record whose header is `header` (a JSON event's id).
fn record_with_header(header: &str) -> Vec<u8> {
    let mut out = header.as_bytes().to_vec();
    out.resize(RECORD_LEN, b'.');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_events_are_record_sized_and_verify() {
        let (ok, bad) = (json_event(3, 7, true), json_event(3, 7, false));
        assert_eq!((ok.len(), bad.len()), (RECORD_LEN, RECORD_LEN));
        let v: serde_json::Value = serde_json::from_slice(&ok).expect("JSON");
        assert_eq!(v.pointer("/payload/qty"), Some(&serde_json::json!(1)));
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&bad).expect("JSON")["payload"]["qty"], 0);
        // Two responses' pages, writer 0 then writer 1 interleaved.
        let page = |evs: &[(u32, u64)]| {
            let items: Vec<String> =
                evs.iter().map(|&(w, s)| String::from_utf8(json_event(w, s, true)).expect("utf8")).collect();
            format!("[{}]", items.join(","))
        };
        let body = format!("{}{}", page(&[(0, 1), (1, 1)]), page(&[(0, 2)]));
        verify_json(body.as_bytes(), &[2, 1]).expect("valid");
        assert!(verify_json(body.as_bytes(), &[2, 2]).is_err(), "a lost event fails");
        assert!(verify_json(b"[]", &[0]).is_ok(), "an empty stream holds no appends");
        let invalid = format!("[{}]", String::from_utf8(bad).expect("utf8"));
        assert!(verify_json(invalid.as_bytes(), &[1]).is_err(), "a refused event must not be there");
    }

    fn stream(recs: &[(u32, u64)]) -> Vec<u8> {
        recs.iter().flat_map(|&(w, s)| record(w, s)).collect()
    }

    #[test]
    fn record_round_trips() {
        let r = record(12, 345);
        assert_eq!(r.len(), RECORD_LEN);
        assert_eq!(parse(&r), Some((12, 345)));
    }

    #[test]
    fn interleaved_writers_pass() {
        let body = stream(&[(0, 1), (1, 1), (1, 2), (0, 2)]);
        verify(&body, &[2, 2]).expect("valid");
    }

    #[test]
    fn dropped_record_fails() {
        let body = stream(&[(0, 1), (0, 3)]);
        assert!(verify(&body, &[3]).is_err());
        assert!(verify(&body, &[2]).is_err());
    }

    #[test]
    fn duplicate_or_reorder_fails() {
        assert!(verify(&stream(&[(0, 1), (0, 1)]), &[2]).is_err());
        assert!(verify(&stream(&[(0, 2), (0, 1)]), &[2]).is_err());
    }
}
