//! Fixed-size, self-describing append payloads and the check that a stream
//! holds exactly the acknowledged ones.
//!
//! Every append carries `w<writer>s<seq>` padded to 100 bytes, so the final
//! stream can be checked record by record: a server that acknowledges an
//! append and then drops, duplicates or reorders it fails the check even if
//! the byte count happened to match. No newlines, so SSE text framing cannot
//! alter a record.

use anyhow::{bail, Result};

/// Size of every append in bytes (the "100-byte POSTs").
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

#[cfg(test)]
mod tests {
    use super::*;

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
