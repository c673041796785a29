//! Self-delimiting, checksummed batch records.
//!
//! One record is one batch (one POST body):
//!
//! ```text
//! "DSR1" | producer u32 BE | seq u64 BE | len u32 BE | payload (len bytes) | FNV-1a-64 BE of all before
//! ```
//!
//! The payload is a pure function of `(producer, seq)`, so every record in a
//! stream can be checked byte for byte against what its producer sent. A
//! stream is a concatenation of records; any torn, interleaved or foreign
//! bytes make [`parse`] fail with the position.

const MAGIC: &[u8; 4] = b"DSR1";
const HEADER: usize = 4 + 4 + 8 + 4;
const TRAILER: usize = 8;
/// Largest payload [`encode`] produces.
pub const MAX_PAYLOAD: usize = 600;

/// A record found in a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub producer: u32,
    pub seq: u64,
    /// Byte position of the record in the stream.
    pub at: usize,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

fn seed(producer: u32, seq: u64) -> u64 {
    // splitmix64 of the pair: distinct, well-spread lengths and contents.
    let mut z = (u64::from(producer) << 40 ^ seq).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The batch body producer `producer` sends as sequence number `seq`.
pub fn encode(producer: u32, seq: u64) -> Vec<u8> {
    let mut state = seed(producer, seq) | 1;
    let len = 1 + usize::try_from(state % MAX_PAYLOAD as u64).unwrap_or(0);
    let mut out = Vec::with_capacity(HEADER + len + TRAILER);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&producer.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&u32::try_from(len).unwrap_or(0).to_be_bytes());
    for _ in 0..len {
        // xorshift64: every byte value, including \r, \n, 0 and "DSR1" pieces.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.push(state.to_le_bytes()[3]);
    }
    let sum = fnv1a(&out);
    out.extend_from_slice(&sum.to_be_bytes());
    out
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

fn around(bytes: &[u8], at: usize) -> String {
    let end = (at + 32).min(bytes.len());
    format!("{:02x?}", &bytes[at..end])
}

/// Split a whole stream into records, checking every one is intact and
/// byte-identical to what its producer sent.
pub fn parse(bytes: &[u8]) -> Result<Vec<Record>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < HEADER + TRAILER {
            return Err(format!("torn record at byte {at}: only {} bytes left: {}", rest.len(), around(bytes, at)));
        }
        if &rest[..4] != MAGIC {
            return Err(format!("no record magic at byte {at} (torn or foreign bytes): {}", around(bytes, at)));
        }
        let producer = be_u32(&rest[4..8]);
        let seq = be_u64(&rest[8..16]);
        let len = be_u32(&rest[16..20]) as usize;
        if len == 0 || len > MAX_PAYLOAD {
            return Err(format!("record at byte {at} has impossible payload length {len}"));
        }
        let total = HEADER + len + TRAILER;
        if rest.len() < total {
            return Err(format!("torn record at byte {at}: needs {total} bytes, {} left", rest.len()));
        }
        let sum = be_u64(&rest[HEADER + len..total]);
        if fnv1a(&rest[..HEADER + len]) != sum {
            return Err(format!("checksum mismatch in record at byte {at} (producer {producer}, seq {seq})"));
        }
        if rest[..total] != encode(producer, seq)[..] {
            return Err(format!("record at byte {at} (producer {producer}, seq {seq}) differs from what was sent"));
        }
        out.push(Record { producer, seq, at });
        at += total;
    }
    Ok(out)
}

/// The intact record starting at byte `at`, and its length; `None` when
/// the bytes there are not one (torn, foreign, damaged or cut short).
pub fn record_at(bytes: &[u8], at: usize) -> Option<(Record, usize)> {
    let rest = bytes.get(at..)?;
    if rest.len() < HEADER + TRAILER || &rest[..4] != MAGIC {
        return None;
    }
    let (producer, seq, len) = (be_u32(&rest[4..8]), be_u64(&rest[8..16]), be_u32(&rest[16..20]) as usize);
    let total = HEADER + len + TRAILER;
    if len == 0
        || len > MAX_PAYLOAD
        || rest.len() < total
        || fnv1a(&rest[..HEADER + len]) != be_u64(&rest[HEADER + len..total])
    {
        return None;
    }
    (rest[..total] == encode(producer, seq)[..]).then_some((Record { producer, seq, at }, total))
}

/// Every intact record in `bytes`, a piece of a stream that may begin or
/// end inside a record (a read cut by the server's size limit): records
/// are followed one after the other, and past bytes that begin none the
/// scan resumes at the next record magic.
pub fn scan(bytes: &[u8]) -> Vec<Record> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match record_at(bytes, at) {
            Some((r, total)) => {
                out.push(r);
                at += total;
            }
            None => match bytes[at + 1..].windows(MAGIC.len()).position(|w| w == MAGIC) {
                Some(i) => at += 1 + i,
                None => break,
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn round_trip_and_damage_detected() {
        let mut stream = Vec::new();
        for (p, s) in [(1, 0), (2, 0), (1, 1), (7, 123_456)] {
            stream.extend(encode(p, s));
        }
        let recs = parse(&stream).unwrap();
        let got: Vec<(u32, u64)> = recs.iter().map(|r| (r.producer, r.seq)).collect();
        assert_eq!(got, [(1, 0), (2, 0), (1, 1), (7, 123_456)]);
        assert!(parse(&stream[..stream.len() - 1]).is_err(), "truncated tail");
        let mut flipped = stream.clone();
        flipped[30] ^= 1;
        assert!(parse(&flipped).is_err(), "flipped bit");
        let first = encode(1, 0).len();
        let mut torn = encode(1, 0)[..first / 2].to_vec();
        torn.extend(encode(1, 1));
        assert!(parse(&torn).is_err(), "torn then whole");
        assert!(encode(3, 4) != encode(4, 3));
    }

    #[test]
    fn scan_finds_the_intact_records_of_a_cut_piece() {
        let stream: Vec<u8> = [encode(1, 0), encode(2, 5), encode(1, 1)].concat();
        let keys = |rs: Vec<Record>| rs.iter().map(|r| (r.producer, r.seq, r.at)).collect::<Vec<_>>();
        let second = encode(1, 0).len();
        assert_eq!(keys(scan(&stream)), [(1, 0, 0), (2, 5, second), (1, 1, second + encode(2, 5).len())]);
        // Cut inside the first and the last record: only the middle one is whole.
        let piece = &stream[3..stream.len() - 2];
        assert_eq!(keys(scan(piece)), [(2, 5, second - 3)]);
        let mut damaged = stream.clone();
        damaged[second + 25] ^= 1;
        assert_eq!(scan(&damaged).len(), 2, "a damaged record is not counted");
    }
}
