//! The body of a stored meta in format 3 ([`crate::codec`]): fixed-width
//! little-endian fields and length-prefixed strings, no field names.
//!
//! Why not JSON (formats 1 and 2, still read): every append logs its
//! stream's meta, and `serde_json` spent ~7k instructions per append
//! encoding it (11% of a local-store append, callgrind); this encoder is a
//! few hundred. Adding a field to `StreamMeta` means a format 4.
//!
//! Layout: `path`, `incarnation` (strings), `version` (u64),
//! `content_type` (string), `created_at_ms` (i64), `tail` (u64), `flags`
//! (u8), `touched_at_ms` (i64), `ref_count` (u64), then only the optional
//! fields the flags announce, in this order: `closed_by` (string, u64,
//! u64), `ttl_secs` (u64), `expires_at_ms` (i64), `last_stream_seq`
//! (string), `fork` (string, string, u64), `retained_from` (u64). A string
//! is a u32 byte length and UTF-8 bytes.
//!
//! `retained_from` came later: it has the flag byte's last bit and is
//! written only when above 0, so every body written before it still decodes
//! (as 0) and a stream never trimmed is stored exactly as before. The flag
//! byte is now full: the next field does mean a format 4.

use ds_core::{ForkOrigin, ProducerTriple, StreamMeta};

const CLOSED: u8 = 1;
const SOFT_DELETED: u8 = 1 << 1;
const CLOSED_BY: u8 = 1 << 2;
const TTL: u8 = 1 << 3;
const EXPIRES: u8 = 1 << 4;
const STREAM_SEQ: u8 = 1 << 5;
const FORK: u8 = 1 << 6;
const RETAINED: u8 = 1 << 7;

pub(crate) fn encode(m: &StreamMeta, out: &mut Vec<u8>) {
    let optional = m.closed_by.as_ref().map_or(0, |c| c.id.len() + 20)
        + m.last_stream_seq.as_ref().map_or(0, |s| s.len() + 4)
        + m.fork.as_ref().map_or(0, |f| f.source.len() + f.source_incarnation.len() + 16)
        + if m.retained_from > 0 { 8 } else { 0 };
    out.reserve(m.path.len() + m.incarnation.len() + m.content_type.len() + 69 + optional);
    put_str(out, &m.path);
    put_str(out, &m.incarnation);
    out.extend_from_slice(&m.version.to_le_bytes());
    put_str(out, &m.content_type);
    out.extend_from_slice(&m.created_at_ms.to_le_bytes());
    out.extend_from_slice(&m.tail.to_le_bytes());
    let flag = |on: bool, bit: u8| if on { bit } else { 0 };
    out.push(
        flag(m.closed, CLOSED)
            | flag(m.soft_deleted, SOFT_DELETED)
            | flag(m.closed_by.is_some(), CLOSED_BY)
            | flag(m.ttl_secs.is_some(), TTL)
            | flag(m.expires_at_ms.is_some(), EXPIRES)
            | flag(m.last_stream_seq.is_some(), STREAM_SEQ)
            | flag(m.fork.is_some(), FORK)
            | flag(m.retained_from > 0, RETAINED),
    );
    out.extend_from_slice(&m.touched_at_ms.to_le_bytes());
    out.extend_from_slice(&m.ref_count.to_le_bytes());
    if let Some(c) = &m.closed_by {
        put_str(out, &c.id);
        out.extend_from_slice(&c.epoch.to_le_bytes());
        out.extend_from_slice(&c.seq.to_le_bytes());
    }
    if let Some(ttl) = m.ttl_secs {
        out.extend_from_slice(&ttl.to_le_bytes());
    }
    if let Some(at) = m.expires_at_ms {
        out.extend_from_slice(&at.to_le_bytes());
    }
    if let Some(seq) = &m.last_stream_seq {
        put_str(out, seq);
    }
    if let Some(f) = &m.fork {
        put_str(out, &f.source);
        put_str(out, &f.source_incarnation);
        out.extend_from_slice(&f.base.to_le_bytes());
    }
    if m.retained_from > 0 {
        out.extend_from_slice(&m.retained_from.to_le_bytes());
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Stream paths, ids and content types are far below 4 GiB (requests are
    // size-limited); saturating keeps a pathological one from wrapping.
    out.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// `None`: not a well-formed format 3 body (truncated, trailing bytes, a
/// string that is not UTF-8).
pub(crate) fn decode(body: &[u8]) -> Option<StreamMeta> {
    let mut r = Reader(body);
    let path = r.str()?;
    let incarnation = r.str()?;
    let version = r.u64()?;
    let content_type = r.str()?;
    let created_at_ms = r.i64()?;
    let tail = r.u64()?;
    let flags = r.u8()?;
    let touched_at_ms = r.i64()?;
    let ref_count = r.u64()?;
    let has = |bit: u8| flags & bit != 0;
    let closed_by = if has(CLOSED_BY) {
        Some(ProducerTriple { id: r.str()?.to_owned(), epoch: r.u64()?, seq: r.u64()? })
    } else {
        None
    };
    let ttl_secs = if has(TTL) { Some(r.u64()?) } else { None };
    let expires_at_ms = if has(EXPIRES) { Some(r.i64()?) } else { None };
    let last_stream_seq = if has(STREAM_SEQ) { Some(r.str()?.to_owned()) } else { None };
    let fork = if has(FORK) {
        Some(ForkOrigin { source: r.str()?.into(), source_incarnation: r.str()?.into(), base: r.u64()? })
    } else {
        None
    };
    let retained_from = if has(RETAINED) { r.u64()? } else { 0 };
    if !r.0.is_empty() {
        return None;
    }
    Some(StreamMeta {
        path: path.into(),
        incarnation: incarnation.into(),
        version,
        content_type: content_type.into(),
        created_at_ms,
        tail,
        closed: has(CLOSED),
        closed_by,
        ttl_secs,
        expires_at_ms,
        touched_at_ms,
        last_stream_seq,
        fork,
        ref_count,
        soft_deleted: has(SOFT_DELETED),
        retained_from,
    })
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u64(&mut self) -> Option<u64> {
        self.take(8)?.try_into().ok().map(u64::from_le_bytes)
    }

    fn i64(&mut self) -> Option<i64> {
        self.take(8)?.try_into().ok().map(i64::from_le_bytes)
    }

    fn str(&mut self) -> Option<&'a str> {
        let len = u32::from_le_bytes(self.take(4)?.try_into().ok()?);
        std::str::from_utf8(self.take(usize::try_from(len).ok()?)?).ok()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ds_core::contract::fixtures::new_meta;
    use proptest::prelude::*;

    fn meta_strategy() -> impl Strategy<Value = StreamMeta> {
        let text = "\\PC{0,12}";
        (
            (text, text, any::<u64>(), text, any::<i64>(), any::<u64>(), any::<bool>(), any::<bool>()),
            (
                proptest::option::of((text, any::<u64>(), any::<u64>())),
                proptest::option::of(any::<u64>()),
                proptest::option::of(any::<i64>()),
                any::<i64>(),
                proptest::option::of(text),
                proptest::option::of((text, text, any::<u64>())),
                any::<u64>(),
                any::<u64>(),
            ),
        )
            .prop_map(
                |(
                    (path, incarnation, version, content_type, created_at_ms, tail, closed, soft_deleted),
                    (
                        closed_by,
                        ttl_secs,
                        expires_at_ms,
                        touched_at_ms,
                        last_stream_seq,
                        fork,
                        ref_count,
                        retained_from,
                    ),
                )| {
                    let mut m = new_meta(&path);
                    m.incarnation = incarnation.into();
                    m.version = version;
                    m.content_type = content_type.into();
                    m.created_at_ms = created_at_ms;
                    m.tail = tail;
                    m.closed = closed;
                    m.closed_by = closed_by.map(|(id, epoch, seq)| ProducerTriple { id, epoch, seq });
                    m.ttl_secs = ttl_secs;
                    m.expires_at_ms = expires_at_ms;
                    m.touched_at_ms = touched_at_ms;
                    m.last_stream_seq = last_stream_seq;
                    m.fork =
                        fork.map(|(s, i, base)| ForkOrigin { source: s.into(), source_incarnation: i.into(), base });
                    m.ref_count = ref_count;
                    m.soft_deleted = soft_deleted;
                    m.retained_from = retained_from;
                    m
                },
            )
    }

    proptest! {
        #[test]
        fn every_meta_roundtrips(m in meta_strategy()) {
            let mut body = Vec::new();
            encode(&m, &mut body);
            prop_assert_eq!(decode(&body), Some(m));
        }

        #[test]
        fn truncated_or_extended_bodies_are_rejected(m in meta_strategy(), cut in any::<prop::sample::Index>()) {
            let mut body = Vec::new();
            encode(&m, &mut body);
            prop_assert_eq!(decode(&body[..cut.index(body.len())]), None);
            body.push(0);
            prop_assert_eq!(decode(&body), None);
        }
    }

    #[test]
    fn a_flag_without_its_field_and_bad_utf8_are_rejected() {
        let m = new_meta("a");
        let mut body = Vec::new();
        encode(&m, &mut body);
        let flags_at = 4 + m.path.len() + 4 + m.incarnation.len() + 8 + 4 + m.content_type.len() + 8 + 8;
        let mut bad = body.clone();
        bad[flags_at] = RETAINED;
        assert_eq!(decode(&bad), None, "a flag whose field is missing");
        let mut bad = body.clone();
        bad[4] = 0xff;
        assert_eq!(decode(&bad), None, "path not UTF-8");
        assert_eq!(decode(&body).map(|d| d.path), Some("a".into()));
    }

    #[test]
    fn an_untrimmed_meta_is_stored_as_before_retention_existed() {
        let m = new_meta("a");
        let mut body = Vec::new();
        encode(&m, &mut body);
        let flags_at = 4 + m.path.len() + 4 + m.incarnation.len() + 8 + 4 + m.content_type.len() + 8 + 8;
        assert_eq!(body[flags_at] & RETAINED, 0);
        assert_eq!(body.len(), flags_at + 1 + 16, "no bytes for a retained_from of 0");
        let mut trimmed = m.clone();
        trimmed.retained_from = 4096;
        let mut longer = Vec::new();
        encode(&trimmed, &mut longer);
        assert_eq!(longer.len(), body.len() + 8);
        assert_eq!(decode(&longer), Some(trimmed));
    }
}
