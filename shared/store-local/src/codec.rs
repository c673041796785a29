//! On-disk encoding of meta records: one format byte, then JSON.
//!
//! The format byte lets a later version change the encoding without guessing;
//! anything unreadable is reported as [`StoreError::Backend`], never a panic.

use ds_core::{StoreError, StreamMeta};

const FORMAT_JSON_V1: u8 = 1;

pub(crate) fn encode_meta(meta: &StreamMeta) -> Result<Vec<u8>, StoreError> {
    let mut out = vec![FORMAT_JSON_V1];
    serde_json::to_writer(&mut out, meta)
        .map_err(|e| StoreError::Backend(format!("encoding meta of {}: {e}", meta.path)))?;
    Ok(out)
}

pub(crate) fn decode_meta(path: &str, bytes: &[u8]) -> Result<StreamMeta, StoreError> {
    match bytes.split_first() {
        Some((&FORMAT_JSON_V1, json)) => serde_json::from_slice(json)
            .map_err(|e| StoreError::Backend(format!("corrupt meta record for {path}: {e}"))),
        Some((format, _)) => Err(StoreError::Backend(format!("meta record for {path} has unknown format {format}"))),
        None => Err(StoreError::Backend(format!("empty meta record for {path}"))),
    }
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
        for bad in [&b""[..], b"\x01{", b"\x02{}", b"\x01{\"path\":\"a\"}"] {
            assert!(matches!(decode_meta("a", bad), Err(StoreError::Backend(_))), "{bad:?}");
        }
    }
}
