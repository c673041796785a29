//! P1's `state-upsert` body: each append is ONE State Protocol change
//! message, an upsert of row `k<seq mod keys>` (the key zero-padded to a
//! fixed width) whose value is [`VALUE_LEN`] bytes:
//!
//! `{"type":"row","key":"k007","value":{"v":<seq>,"pad":"w<writer>s<seq>…"},"headers":{"operation":"upsert"}}`
//!
//! and the check of a stream of them that a `state` processor may have
//! compacted meanwhile (a snapshot of the rows, the history before it
//! trimmed). The request is built once per writer (`raw::Template`); the
//! key and `v` are fields it rewrites before each send, `v` padded with
//! spaces before its digits (a JSON number has no leading zeros).

use crate::raw::Template;
use anyhow::{anyhow, bail, Result};
use serde_json::Value;
use std::collections::HashMap;

/// The rows' type.
pub const STATE_TYPE: &str = "row";
/// Size of each row's value, the JSON object `{"v":…,"pad":"…"}`.
pub const VALUE_LEN: usize = 200;
/// Keys of `--p1-state-keys`'s default.
pub const DEFAULT_KEYS: u64 = 1_000;
const V_MARKER: &[u8] = b"VVVVVVVVVVVV";

/// Width of the key's digits: that of the largest key.
fn key_width(keys: u64) -> usize {
    (keys.max(1) - 1).to_string().len()
}

/// The upsert `writer` sends, with `seq_marker`'s digits where its sequence
/// number goes: a template's body, before [`with_fields`].
pub fn upsert_body(writer: u32, seq_marker: u64, keys: u64) -> Vec<u8> {
    let v = String::from_utf8_lossy(V_MARKER);
    let head = format!(r#"{{"v":{v},"pad":"w{writer:06}s{seq_marker:012}"#);
    let tail = r#""}"#;
    let pad = ".".repeat(VALUE_LEN.saturating_sub(head.len() + tail.len()));
    let key = "K".repeat(key_width(keys));
    format!(r#"{{"type":"{STATE_TYPE}","key":"k{key}","value":{head}{pad}{tail},"headers":{{"operation":"upsert"}}}}"#)
        .into_bytes()
}

/// `t` (built from an [`upsert_body`]) with its key and `v` fields.
pub fn with_fields(t: Template, keys: u64) -> Result<Template> {
    let key = "K".repeat(key_width(keys));
    t.with_field(key.as_bytes(), keys.max(1), b'0')?.with_field(V_MARKER, 10u64.pow(V_MARKER.len() as u32), b' ')
}

/// `(writer, seq)` of a row P1 wrote, after checking that its key and `v`
/// are the ones its seq gives.
fn row_of(m: &Value, keys: u64) -> Result<(String, u32, u64)> {
    let pad = m.pointer("/value/pad").and_then(Value::as_str).unwrap_or("");
    let parsed = (pad.get(1..7).and_then(|w| w.parse().ok()), pad.get(8..20).and_then(|s| s.parse().ok()));
    let (Some(STATE_TYPE), Some(key), (Some(w), Some(seq))) = (m["type"].as_str(), m["key"].as_str(), parsed) else {
        bail!("not a row P1 wrote: {m}");
    };
    let expected_key = format!("k{:0width$}", seq % keys.max(1), width = key_width(keys));
    if key != expected_key || m.pointer("/value/v").and_then(Value::as_u64) != Some(seq) {
        bail!("row of writer {w} seq {seq} has key {key:?} (expected {expected_key:?}) or a wrong v: {m}");
    }
    Ok((key.to_owned(), w, seq))
}

/// Checks a catch-up read of a stream of P1 upserts (JSON arrays,
/// concatenated), compacted or not: `acked[w]` appends of writer `w` were
/// acknowledged (its seqs 1..=n, one after the other). Each writer's
/// upserts must follow each other with no gap, duplicate or reordering,
/// start at seq 1 unless a snapshot precedes them, and end at its
/// acknowledged count; and the rows the whole read folds to (snapshot
/// inserts and upserts, in order) must be exactly the live ones: each key
/// written holds the last write of one of the writers to it (a writer's
/// last seq with that key), no other key is there.
pub fn verify_state(body: &[u8], acked: &[u64], keys: u64) -> Result<()> {
    let mut rows: HashMap<String, (u32, u64)> = HashMap::new();
    let mut last: Vec<Option<u64>> = vec![None; acked.len()];
    let mut snapshot = false;
    for page in serde_json::Deserializer::from_slice(body).into_iter::<Vec<Value>>() {
        let page = page.map_err(|e| anyhow!("the stream's body is not JSON arrays: {e}"))?;
        for m in &page {
            match (m.pointer("/headers/control").and_then(Value::as_str), m.pointer("/headers/operation")) {
                (Some("snapshot-start"), _) => snapshot = true,
                (Some("snapshot-end"), _) => {}
                (None, Some(op)) if op == "upsert" || (op == "insert" && snapshot) => {
                    let (key, w, seq) = row_of(m, keys)?;
                    if op == "upsert" {
                        let Some(slot) = last.get_mut(w as usize) else { bail!("row names unknown writer {w}") };
                        let expected = slot.map(|s| s + 1).or((!snapshot).then_some(1));
                        if expected.is_some_and(|e| e != seq) {
                            bail!("writer {w}: upsert seq {seq} where {expected:?} was due (lost, duplicated or reordered)");
                        }
                        *slot = Some(seq);
                    }
                    rows.insert(key, (w, seq));
                }
                _ => bail!("not a message of P1's state stream: {m}"),
            }
        }
    }
    for (w, (&n, got)) in acked.iter().zip(&last).enumerate() {
        if got.is_some_and(|s| s != n) || (got.is_none() && !snapshot && n > 0) {
            bail!("writer {w}: its last upsert in the stream is {got:?}, {n} were acknowledged");
        }
    }
    let keys = keys.max(1);
    let mut live = 0;
    for k in 0..keys {
        // Each writer's last seq with key k: the candidates for its value.
        let last_of = |n: u64| (n >= k).then(|| n - (n - k) % keys).filter(|&s| s > 0);
        let candidates: Vec<(u32, u64)> =
            acked.iter().enumerate().filter_map(|(w, &n)| last_of(n).map(|s| (w as u32, s))).collect();
        let key = format!("k{k:0width$}", width = key_width(keys));
        match rows.get(&key) {
            None if candidates.is_empty() => {}
            Some(row) if candidates.contains(row) => live += 1,
            got => bail!("row {key}: holds {got:?}, expected one of the last writes {candidates:?}"),
        }
    }
    if rows.len() != live {
        bail!("{} rows, {live} of them keys P1 wrote", rows.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARKER: u64 = 999_999_999_999;

    /// Upsert `seq` of `writer` as the raw driver sends it.
    fn upsert(writer: u32, seq: u64, keys: u64) -> String {
        let t =
            Template::new("POST", "h", "/s", "application/json", &upsert_body(writer, MARKER, keys), b"999999999999");
        let mut t = with_fields(t.expect("template"), keys).expect("fields");
        t.set_seq(seq);
        let text = String::from_utf8(t.bytes().to_vec()).expect("utf8");
        text.split("\r\n\r\n").nth(1).expect("body").to_owned()
    }

    fn page(messages: &[String]) -> String {
        format!("[{}]", messages.join(","))
    }

    #[test]
    fn upserts_are_rows_with_200_byte_values() {
        let m: Value = serde_json::from_str(&upsert(3, 1207, 1000)).expect("JSON");
        assert_eq!(m["key"], "k207");
        assert_eq!(m["headers"]["operation"], "upsert");
        assert_eq!(m.pointer("/value/v"), Some(&serde_json::json!(1207)));
        assert_eq!(serde_json::to_string(&m["value"]).expect("JSON").len(), VALUE_LEN - 8, "v's padding spaces go");
        assert_eq!(upsert(3, 1207, 1000).len(), upsert(3, 5, 1000).len(), "one length for every seq");
        assert_eq!(row_of(&m, 1000).expect("a P1 row"), ("k207".to_owned(), 3, 1207));
    }

    #[test]
    fn verifies_whole_and_compacted_streams() {
        let all: Vec<String> = (1..=5).map(|s| upsert(0, s, 3)).collect();
        let body = format!("{}{}", page(&all[..2]), page(&all[2..]));
        verify_state(body.as_bytes(), &[5], 3).expect("whole");
        assert!(verify_state(body.as_bytes(), &[6], 3).is_err(), "an acknowledged upsert is missing");
        let gap = page(&[all[0].clone(), all[2].clone()]);
        assert!(verify_state(gap.as_bytes(), &[3], 3).is_err(), "a lost upsert");
        // A snapshot after seq 4 (rows k0 = 3, k1 = 4, k2 = 2), then seq 5.
        let insert = |s: u64| upsert(0, s, 3).replace("\"upsert\"", "\"insert\"");
        let control = |c: &str| format!(r#"{{"headers":{{"control":"{c}","offset":"x"}}}}"#);
        let snapshot = [control("snapshot-start"), insert(2), insert(3), insert(4), control("snapshot-end")];
        let compacted = format!("{}{}", page(&snapshot), page(&all[4..]));
        verify_state(compacted.as_bytes(), &[5], 3).expect("compacted");
        let lost_row = format!("{}{}", page(&[control("snapshot-start"), insert(2), insert(4)]), page(&all[4..]));
        assert!(verify_state(lost_row.as_bytes(), &[5], 3).is_err(), "the snapshot lost row k0");
        let stale =
            format!("{}{}", page(&[control("snapshot-start"), insert(2), insert(3), insert(1)]), page(&all[4..]));
        assert!(verify_state(stale.as_bytes(), &[5], 3).is_err(), "k1 holds seq 1, not its last write 4");
        verify_state(page(&snapshot).as_bytes(), &[4], 3).expect("all of it in the snapshot");
    }

    #[test]
    fn two_writers_each_last_write_may_win() {
        let body = page(&[upsert(0, 1, 2), upsert(1, 1, 2), upsert(1, 2, 2), upsert(0, 2, 2)]);
        verify_state(body.as_bytes(), &[2, 2], 2).expect("interleaved");
        assert!(verify_state(body.as_bytes(), &[2, 3], 2).is_err());
    }
}
