//! On-disk encoding of records, each with a CRC-32 so a damaged record is
//! detected on read and reported ([`StoreError::Backend`]), never served.
//! redb checksums its pages only when it repairs a file, not on reads.
//!
//! - meta: one format byte, then (format 3) the CRC-32 of the body, then the
//!   binary body ([`crate::meta_codec`]). Formats 2 (CRC-32 and JSON) and 1
//!   (JSON without a checksum), written by earlier versions, are still read.
//! - chunks: `(crc32, bytes)`; producers: `(epoch, last_seq, crc32)`;
//!   records: `(revision, crc32 of revision and value, value)`.

use ds_core::{ProducerState, StoreError, StreamMeta};

const FORMAT_JSON_V1: u8 = 1;
const FORMAT_JSON_CRC32: u8 = 2;
const FORMAT_BIN_CRC32: u8 = 3;

pub(crate) fn encode_meta(meta: &StreamMeta) -> Result<Vec<u8>, StoreError> {
    let mut out = vec![FORMAT_BIN_CRC32, 0, 0, 0, 0];
    crate::meta_codec::encode(meta, &mut out);
    let sum = crc32fast::hash(&out[5..]);
    out[1..5].copy_from_slice(&sum.to_le_bytes());
    Ok(out)
}

/// The stored encoding of each meta a commit puts, aligned with
/// `writes.metas` (`None` where it deletes or only checks). Encoded once per
/// commit: the tables and the log entry store the same bytes.
pub(crate) fn encode_metas(writes: &ds_core::fold::NetWrites) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
    writes
        .metas
        .iter()
        .map(|m| match &m.effect {
            ds_core::fold::MetaEffect::Put(meta) => encode_meta(meta).map(Some),
            _ => Ok(None),
        })
        .collect()
}

pub(crate) fn decode_meta(path: &str, bytes: &[u8]) -> Result<StreamMeta, StoreError> {
    if let Some((&FORMAT_BIN_CRC32, rest)) = bytes.split_first() {
        let (sum, body) = rest.split_at_checked(4).ok_or_else(|| corrupt(format!("meta record for {path}")))?;
        if crc32fast::hash(body).to_le_bytes() != sum {
            return Err(corrupt(format!("meta record for {path}")));
        }
        return crate::meta_codec::decode(body)
            .ok_or_else(|| StoreError::corrupt(format!("meta record for {path}"), "malformed body"));
    }
    let json = match bytes.split_first() {
        Some((&FORMAT_JSON_CRC32, rest)) if rest.len() >= 4 => {
            let (sum, json) = rest.split_at(4);
            if crc32fast::hash(json).to_le_bytes() != sum {
                return Err(corrupt(format!("meta record for {path}")));
            }
            json
        }
        Some((&FORMAT_JSON_V1, json)) => json,
        Some((format, _)) => {
            return Err(StoreError::corrupt(format!("meta record for {path}"), format!("unknown format {format}")))
        }
        None => return Err(StoreError::corrupt(format!("meta record for {path}"), "empty")),
    };
    serde_json::from_slice(json).map_err(|e| StoreError::corrupt(format!("meta record for {path}"), e))
}

fn corrupt(what: String) -> StoreError {
    tracing::error!(record = %what, "local store: checksum mismatch (corrupt record); not served");
    StoreError::corrupt(what, "checksum mismatch")
}

/// The checksum stored with a chunk's bytes.
pub(crate) fn chunk_sum(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

/// Check a stored chunk against its checksum.
pub(crate) fn check_chunk(path: &str, start: u64, sum: u32, data: &[u8]) -> Result<(), StoreError> {
    if crc32fast::hash(data) == sum {
        Ok(())
    } else {
        Err(corrupt(format!("chunk of {path} at {start}")))
    }
}

fn producer_sum(epoch: u64, last_seq: u64) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&epoch.to_le_bytes());
    h.update(&last_seq.to_le_bytes());
    h.finalize()
}

/// The checksum stored with a keyed record: over its revision and value.
pub(crate) fn record_sum(revision: u64, value: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&revision.to_le_bytes());
    h.update(value);
    h.finalize()
}

/// Check a stored keyed record against its checksum.
pub(crate) fn check_record(path: &str, key: &str, revision: u64, sum: u32, value: &[u8]) -> Result<(), StoreError> {
    if record_sum(revision, value) == sum {
        Ok(())
    } else {
        Err(corrupt(format!("record {key:?} of {path}")))
    }
}

pub(crate) fn encode_producer(state: ProducerState) -> (u64, u64, u32) {
    (state.epoch, state.last_seq, producer_sum(state.epoch, state.last_seq))
}

pub(crate) fn decode_producer(id: &str, (epoch, last_seq, sum): (u64, u64, u32)) -> Result<ProducerState, StoreError> {
    if producer_sum(epoch, last_seq) != sum {
        return Err(corrupt(format!("producer record {id}")));
    }
    Ok(ProducerState { epoch, last_seq })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn meta() -> StreamMeta {
        serde_json::from_value(serde_json::json!({
            "path": "a", "incarnation": "i", "version": 3, "content_type": "text/plain",
            "created_at_ms": 1, "tail": 10, "closed": false, "closed_by": null, "ttl_secs": null,
            "expires_at_ms": null, "touched_at_ms": 2, "last_stream_seq": null, "fork": null,
            "ref_count": 0, "soft_deleted": false
        }))
        .unwrap()
    }

    #[test]
    fn roundtrips_and_rejects_garbage() {
        let m = meta();
        assert_eq!(decode_meta("a", &encode_meta(&m).unwrap()).unwrap(), m);
        let json = serde_json::to_vec(&m).unwrap();
        let legacy = [&[FORMAT_JSON_V1][..], &json].concat();
        assert_eq!(decode_meta("a", &legacy).unwrap(), m, "format 1 is still read");
        let format2 = [&[FORMAT_JSON_CRC32][..], &crc32fast::hash(&json).to_le_bytes(), &json].concat();
        assert_eq!(decode_meta("a", &format2).unwrap(), m, "format 2 is still read");
        for bad in [&b""[..], b"\x01{", b"\x02{}", b"\x03", b"\x03\0\0\0\0", b"\x09{}", b"\x01{\"path\":\"a\"}"] {
            assert!(matches!(decode_meta("a", bad), Err(StoreError::Corrupt { .. })), "{bad:?}");
        }
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let good = encode_meta(&meta()).unwrap();
        for i in 0..good.len() * 8 {
            let mut bad = good.clone();
            bad[i / 8] ^= 1 << (i % 8);
            assert!(decode_meta("a", &bad).is_err(), "meta bit {i}");
        }
        let data = b"some chunk bytes";
        let sum = chunk_sum(data);
        check_chunk("a", 0, sum, data).unwrap();
        for i in 0..data.len() * 8 {
            let mut bad = data.to_vec();
            bad[i / 8] ^= 1 << (i % 8);
            assert!(check_chunk("a", 0, sum, &bad).is_err(), "chunk bit {i}");
        }
        let state = ProducerState { epoch: 3, last_seq: 9 };
        assert_eq!(decode_producer("p", encode_producer(state)).unwrap(), state);
        let (e, s, sum) = encode_producer(state);
        assert!(decode_producer("p", (e, s + 1, sum)).is_err());
        assert!(decode_producer("p", (e ^ 4, s, sum)).is_err());
        let sum = record_sum(7, b"value");
        check_record("a", "k", 7, sum, b"value").unwrap();
        assert!(check_record("a", "k", 8, sum, b"value").is_err(), "revision");
        assert!(check_record("a", "k", 7, sum, b"valuf").is_err(), "value");
    }
}
