//! The snapshot a compaction appends, as bytes (pure: see `compact.rs` for
//! when and why): `snapshot-start` naming its own position and the
//! processor, one insert per live row in (type, key) order, `snapshot-end`.
//! Apart from the compaction so that the view, which recognizes a
//! processor's own snapshots while folding, does not depend on it.

use ds_protocol::Offset;
use serde_json::{json, Value};

use super::fold::Materialized;

/// The snapshot of `fold` as the body of one JSON append: `snapshot-start`
/// (naming its own position `at` and the processor), an insert per live
/// row, `snapshot-end`.
pub fn snapshot_messages(fold: &Materialized, slug: &str, at: u64) -> Vec<u8> {
    let offset = Offset(at).to_string();
    let mut out = Vec::with_capacity(fold.bytes() + fold.rows() * 64 + 256);
    out.push(b'[');
    let start = json!({"headers": {"control": "snapshot-start", "offset": offset, "compactedBy": slug}});
    serde_json::to_writer(&mut out, &start).expect("JSON to memory");
    for (entity_type, _) in fold.types() {
        for (key, value) in fold.rows_after(entity_type, None) {
            out.push(b',');
            let insert = json!({"type": entity_type, "key": key, "value": value, "headers": {"operation": "insert"}});
            serde_json::to_writer(&mut out, &insert).expect("JSON to memory");
        }
    }
    out.push(b',');
    let end = json!({"headers": {"control": "snapshot-end", "offset": offset, "compactedBy": slug}});
    serde_json::to_writer(&mut out, &end).expect("JSON to memory");
    out.push(b']');
    out
}

/// Whether the message `data`, starting at position `start`, opens a
/// snapshot this processor appended (see the module docs).
pub(crate) fn is_own_snapshot(data: &[u8], slug: &str, start: u64) -> bool {
    // Cheap refusals first: this runs on every folded message.
    const NEEDLE: &[u8] = b"snapshot-start";
    if data.len() > 1024 || !data.windows(NEEDLE.len()).any(|w| w == NEEDLE) {
        return false;
    }
    let Ok(message) = serde_json::from_slice::<Value>(data) else { return false };
    let headers = &message["headers"];
    headers["control"] == "snapshot-start"
        && headers["compactedBy"] == slug
        && headers["offset"].as_str() == Some(Offset(start).to_string().as_str())
}
