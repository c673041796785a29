//! The persisted layout of the streams table and the chunk bucket.
//!
//! **This is a persisted format.** Every item written carries `fmt` =
//! [`FORMAT_VERSION`]; changing a key shape or an attribute's meaning is a
//! migration (bump the version, keep reading the old one), never an edit.
//!
//! One DynamoDB table, keys `pk` (S, partition) and `sk` (S, sort). All items
//! of one stream share the partition `pk = "stream#" + path`, so one stream's
//! data is one item collection and deleting a stream is a `Query` on one key.
//! Sort keys order as `c#…` (chunks) < `meta` < `p#…` (producers) < `r#…`
//! (records), so a chunk range query never touches the other items.
//!
//! One more partition, `pk = "index#paths"` ([`PATH_INDEX_PK`]), holds the
//! **path index**: one item per meta item, sort key = the stream's path, so
//! listing streams by prefix is one `Query` (`begins_with(sk, prefix)`, paged
//! by `ExclusiveStartKey`) that reads only the matches, in byte-wise path
//! order, instead of a scan of the table. An index item is written and
//! removed inside the very `TransactWriteItems` that creates or deletes the
//! meta item ([`crate::plan`]), so the two never disagree — with one
//! exception the listing tolerates: DynamoDB's TTL backstop removes a meta
//! item alone, leaving its index item behind until the processor function
//! (which sees the TTL removal) or the next listing that meets it removes it
//! ([`crate::index`]).
//!
//! S3 keys (bucket `DS_AWS_BUCKET`) are listed in [`ObjectKey`].

use sha2::{Digest, Sha256};

/// Version stamped into every item as attribute `fmt`.
pub const FORMAT_VERSION: u32 = 1;

/// Partition key attribute name.
pub const PK: &str = "pk";
/// Sort key attribute name.
pub const SK: &str = "sk";
/// DynamoDB TTL attribute (epoch seconds), the table's TTL backstop for expiry.
pub const TTL_ATTR: &str = "ttl";

/// Longest path or producer id stored verbatim in a key; longer ones are
/// replaced by `h:<sha256 hex>` so keys stay under DynamoDB's limits
/// (partition key 2048 bytes, sort key 1024 bytes). The verbatim value is
/// always kept in an attribute.
const MAX_VERBATIM_KEY_PART: usize = 512;

/// The kinds of item in the streams table, with their key shapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemKey {
    /// One per stream: the stream's metadata, rewritten by every mutation
    /// under a version precondition (the optimistic lock).
    ///
    /// - `pk` = `stream#<path>` (see [`stream_pk`]), `sk` = `meta`
    /// - attributes (see [`meta_attr`]): `path` S, `inc` S (incarnation id),
    ///   `ver` N (bumped by one per committed change), `ct` S (content type),
    ///   `created` N (ms), `tail` N (next byte position), `closed` BOOL,
    ///   `cb_id` S / `cb_ep` N / `cb_seq` N (producer that closed it, optional),
    ///   `ttl_s` N (sliding TTL seconds, optional), `exp` N (absolute expiry
    ///   ms, optional), `touched` N (last access ms; written by `touch` without
    ///   a version bump), `sseq` S (last `Stream-Seq`, optional), `f_src` S /
    ///   `f_inc` S / `f_base` N (fork origin, optional), `refs` N (live forks
    ///   referencing this stream), `sdel` BOOL (soft-deleted), `cid` S (id of
    ///   the commit that wrote this version: detects a retried commit that
    ///   was in fact applied), `ttl` N (DynamoDB TTL backstop: expiry deadline
    ///   in epoch seconds plus a grace period; absent while forks reference
    ///   the stream or it never expires), `fmt` N.
    Meta { path: String },
    /// One per `(stream incarnation, producer id)`: idempotent producer state.
    ///
    /// - `pk` = `stream#<path>`, `sk` = `p#<incarnation>#<producer id>`
    ///   (the id hashed as `h:<sha256>` when longer than 512 bytes)
    /// - attributes: `pid` S (producer id), `ep` N (epoch), `seq` N (last
    ///   accepted seq), `fmt` N. Written only inside a commit that also bumps
    ///   the meta version, and only forward (epoch, seq never decrease).
    Producer { path: String, incarnation: String, producer_id: String },
    /// One per committed chunk of a stream incarnation, keyed by its **end**
    /// position (exclusive), so the chunk containing position `x` is the first
    /// item with key > `x`: one ascending query, no look-back.
    ///
    /// - `pk` = `stream#<path>`, `sk` = `c#<incarnation>#<end as 16 hex digits>`
    /// - attributes: `start` N (first position), `fmt` N, and exactly one body:
    ///   - inline: `data` B (the bytes; at most the inline threshold), or
    ///   - pointer: `obj` S (S3 key, see [`ObjectKey`]) and `obj_off` N (byte
    ///     offset of this chunk's first byte inside that object). The object
    ///     is immutable; the chunk's bytes are `[obj_off, obj_off + end - start)`.
    ///
    /// Chunk items are immutable except for one change: sealing swaps an
    /// inline body for a pointer into a segment object holding the same bytes.
    Chunk { path: String, incarnation: String, end: u64 },
    /// One per `(stream incarnation, record key)`: a keyed record of a
    /// feature built on the stream (`ds_core::Record`).
    ///
    /// - `pk` = `stream#<path>`, `sk` = `r#<incarnation>#<key>` (the key
    ///   hashed as `h:<sha256>` when longer than 512 bytes)
    /// - attributes (see [`record_attr`]): `rkey` S (the key), `rev` N
    ///   (revision: the condition of the next write), `val` B (the value,
    ///   at most `ds_core::MAX_RECORD_BYTES`), `fmt` N.
    Record { path: String, incarnation: String, key: String },
    /// One per meta item: the stream's entry in the path index (see the
    /// module docs), present exactly while the meta item is (up to a TTL
    /// removal, which [`crate::index`] finishes).
    ///
    /// - `pk` = [`PATH_INDEX_PK`], `sk` = the path (see [`path_index_sk`]:
    ///   verbatim up to 1024 bytes, DynamoDB's sort-key limit, which is also
    ///   the protocol's longest path)
    /// - attributes: `path` S (the path, verbatim), `fmt` N. Never modified:
    ///   put by the commit that creates the stream (its meta condition is
    ///   `attribute_not_exists`), deleted by the commit that deletes it.
    ///
    /// One partition takes every create and delete of the table: at
    /// DynamoDB's 1,000 WCU/s per partition and 2 WCU per transactional
    /// write of a small item, about 500 stream creations plus deletions per
    /// second. Appends never touch it.
    PathIndex { path: String },
}

impl ItemKey {
    pub fn pk(&self) -> String {
        match self {
            ItemKey::Meta { path }
            | ItemKey::Producer { path, .. }
            | ItemKey::Chunk { path, .. }
            | ItemKey::Record { path, .. } => stream_pk(path),
            ItemKey::PathIndex { .. } => PATH_INDEX_PK.to_owned(),
        }
    }

    pub fn sk(&self) -> String {
        match self {
            ItemKey::Meta { .. } => META_SK.to_owned(),
            ItemKey::Producer { incarnation, producer_id, .. } => {
                format!("{}{}", producer_sk_prefix(incarnation), bounded(producer_id))
            }
            ItemKey::Chunk { incarnation, end, .. } => chunk_sk(incarnation, *end),
            ItemKey::Record { incarnation, key, .. } => format!("{}{}", record_sk_prefix(incarnation), bounded(key)),
            ItemKey::PathIndex { path } => path_index_sk(path),
        }
    }
}

/// Sort key of the meta item.
pub const META_SK: &str = "meta";

/// Partition key of the path index (see [`ItemKey::PathIndex`]). Not of the
/// form `stream#…`, so nothing that reads stream partitions (the processor
/// function's record filter) mistakes an index item for a stream's.
pub const PATH_INDEX_PK: &str = "index#paths";

/// DynamoDB's longest sort key, in bytes.
const MAX_SORT_KEY: usize = 1024;

/// Sort key of `path`'s index item: the path itself, so the index sorts in
/// byte-wise path order and a path prefix is a sort-key prefix. A path
/// longer than a sort key (the protocol refuses those; only a direct
/// caller of the store could make one) keeps its first 950 bytes (cut at a
/// character boundary) followed by `#h:<sha256 hex>`: unique, found by any
/// prefix of up to 950 bytes, sorted by its first 950 bytes.
pub fn path_index_sk(path: &str) -> String {
    if path.len() <= MAX_SORT_KEY {
        return path.to_owned();
    }
    let mut cut = 950;
    while !path.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}#h:{}", &path[..cut], hex::encode(Sha256::digest(path.as_bytes())))
}

/// Partition key of every item of the stream at `path`.
pub fn stream_pk(path: &str) -> String {
    format!("stream#{}", bounded(path))
}

/// Sort key of the chunk of `incarnation` ending at `end`.
pub fn chunk_sk(incarnation: &str, end: u64) -> String {
    format!("{}{end:016x}", chunk_sk_prefix(incarnation))
}

/// Common prefix of every chunk sort key of `incarnation`.
pub fn chunk_sk_prefix(incarnation: &str) -> String {
    format!("c#{incarnation}#")
}

/// Common prefix of every producer sort key of `incarnation`.
pub fn producer_sk_prefix(incarnation: &str) -> String {
    format!("p#{incarnation}#")
}

/// Common prefix of every record sort key of `incarnation`.
pub fn record_sk_prefix(incarnation: &str) -> String {
    format!("r#{incarnation}#")
}

/// The chunk end position encoded in a chunk sort key, if `sk` is one.
pub fn chunk_end_from_sk(sk: &str) -> Option<u64> {
    let rest = sk.strip_prefix("c#")?;
    let (_, hex_end) = rest.rsplit_once('#')?;
    u64::from_str_radix(hex_end, 16).ok()
}

/// The incarnation named in a chunk, producer or record sort key.
pub fn incarnation_from_sk(sk: &str) -> Option<&str> {
    let rest = sk.strip_prefix("c#").or_else(|| sk.strip_prefix("p#")).or_else(|| sk.strip_prefix("r#"))?;
    rest.split_once('#').map(|(inc, _)| inc)
}

fn bounded(part: &str) -> String {
    if part.len() <= MAX_VERBATIM_KEY_PART {
        part.to_owned()
    } else {
        format!("h:{}", hex::encode(Sha256::digest(part.as_bytes())))
    }
}

/// Short, stable, key-safe digest of a stream path, used in S3 keys and
/// schedule names (which restrict characters and length).
pub fn path_digest(path: &str) -> String {
    hex::encode(&Sha256::digest(path.as_bytes())[..16])
}

/// Attribute names of the meta item (see [`ItemKey::Meta`]).
pub mod meta_attr {
    pub const PATH: &str = "path";
    pub const INCARNATION: &str = "inc";
    pub const VERSION: &str = "ver";
    pub const CONTENT_TYPE: &str = "ct";
    pub const CREATED: &str = "created";
    pub const TAIL: &str = "tail";
    pub const CLOSED: &str = "closed";
    pub const CLOSED_BY_ID: &str = "cb_id";
    pub const CLOSED_BY_EPOCH: &str = "cb_ep";
    pub const CLOSED_BY_SEQ: &str = "cb_seq";
    pub const TTL_SECS: &str = "ttl_s";
    pub const EXPIRES_AT: &str = "exp";
    pub const TOUCHED: &str = "touched";
    pub const STREAM_SEQ: &str = "sseq";
    pub const FORK_SOURCE: &str = "f_src";
    pub const FORK_SOURCE_INC: &str = "f_inc";
    pub const FORK_BASE: &str = "f_base";
    pub const REF_COUNT: &str = "refs";
    pub const SOFT_DELETED: &str = "sdel";
    /// `StreamMeta::retained_from`, written only when above 0 (so a stream
    /// never trimmed keeps the item it had; an item without it reads as 0).
    pub const RETAINED_FROM: &str = "ret";
    pub const COMMIT_ID: &str = "cid";
}

/// Attribute names of path index items (see [`ItemKey::PathIndex`]).
pub mod index_attr {
    pub const PATH: &str = "path";
}

/// Attribute names of producer items (see [`ItemKey::Producer`]).
pub mod producer_attr {
    pub const ID: &str = "pid";
    pub const EPOCH: &str = "ep";
    pub const SEQ: &str = "seq";
}

/// Attribute names of record items (see [`ItemKey::Record`]).
pub mod record_attr {
    pub const KEY: &str = "rkey";
    pub const REVISION: &str = "rev";
    pub const VALUE: &str = "val";
}

/// Attribute names of chunk items (see [`ItemKey::Chunk`]).
pub mod chunk_attr {
    pub const START: &str = "start";
    pub const DATA: &str = "data";
    pub const OBJECT: &str = "obj";
    pub const OBJECT_OFFSET: &str = "obj_off";
}

/// Attribute holding [`FORMAT_VERSION`] on every item.
pub const FORMAT_ATTR: &str = "fmt";

/// The kinds of object in the chunk bucket.
///
/// Every object is written once with `If-None-Match: *` under a key no other
/// write uses, and never modified. An object is only ever read through a
/// chunk item pointing at it, so an object whose commit failed is unreachable;
/// it is deleted right after the failure, and [`crate::cleanup`] removes any
/// left behind by a crash (its key names the stream and incarnation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectKey {
    /// The body of one large append, written before the commit that points
    /// a chunk item at it (offset 0).
    ///
    /// `chunks/<path digest>/<incarnation>/<start as 16 hex>-<uuid>`
    Chunk { path: String, incarnation: String, start: u64, nonce: String },
    /// A sealed segment: the bytes of several consecutive chunks
    /// `[start, end)` packed by compaction; chunk items point into it with
    /// their `obj_off`, read with ranged GETs.
    ///
    /// `segments/<path digest>/<incarnation>/<start hex>-<end hex>-<uuid>`
    Segment { path: String, incarnation: String, start: u64, end: u64, nonce: String },
}

impl ObjectKey {
    pub fn render(&self) -> String {
        match self {
            ObjectKey::Chunk { path, incarnation, start, nonce } => {
                format!("{}{start:016x}-{nonce}", chunk_object_prefix(path, incarnation))
            }
            ObjectKey::Segment { path, incarnation, start, end, nonce } => {
                format!("{}{start:016x}-{end:016x}-{nonce}", segment_object_prefix(path, incarnation))
            }
        }
    }
}

/// Prefix of every large-chunk object of `(path, incarnation)`.
pub fn chunk_object_prefix(path: &str, incarnation: &str) -> String {
    format!("chunks/{}/{incarnation}/", path_digest(path))
}

/// Prefix of every segment object of `(path, incarnation)`.
pub fn segment_object_prefix(path: &str, incarnation: &str) -> String {
    format!("segments/{}/{incarnation}/", path_digest(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_keys_sort_by_end_and_before_meta_and_producers() {
        let a = chunk_sk("inc", 9);
        let b = chunk_sk("inc", 10);
        let c = chunk_sk("inc", 0x1_0000);
        assert!(a < b && b < c, "{a} {b} {c}");
        assert!(c.as_str() < META_SK);
        let p = ItemKey::Producer { path: "x".into(), incarnation: "inc".into(), producer_id: "p".into() };
        assert!(META_SK < p.sk().as_str());
        assert_eq!(chunk_end_from_sk(&c), Some(0x1_0000));
        assert_eq!(incarnation_from_sk(&c), Some("inc"));
        assert_eq!(incarnation_from_sk(&p.sk()), Some("inc"));
        assert_eq!(chunk_end_from_sk(META_SK), None);
    }

    #[test]
    fn long_key_parts_are_hashed() {
        let long = "x".repeat(2000);
        let pk = stream_pk(&long);
        assert!(pk.len() < 100);
        assert!(pk.starts_with("stream#h:"));
        assert_eq!(stream_pk("a/b"), "stream#a/b");
    }

    #[test]
    fn path_index_keys_sort_as_paths_and_fit_a_sort_key() {
        let key = |p: &str| ItemKey::PathIndex { path: p.into() };
        assert_eq!(key("a/b").pk(), PATH_INDEX_PK);
        assert!(!PATH_INDEX_PK.starts_with("stream#"));
        assert_eq!(key("a/b").sk(), "a/b");
        let mut paths = vec!["b", "a0", "a", "B", "a/b", "\u{e4}", "z", "a/a"];
        let mut sks: Vec<String> = paths.iter().map(|p| key(p).sk()).collect();
        paths.sort_unstable();
        sks.sort_unstable();
        assert_eq!(sks, paths, "byte-wise path order");
        let longest = "x".repeat(1024);
        assert_eq!(path_index_sk(&longest), longest);
        let over = format!("{}\u{e4}{}", "y".repeat(949), "z".repeat(200));
        let sk = path_index_sk(&over);
        assert!(sk.len() <= 1024 && sk.starts_with(&"y".repeat(949)), "{}", sk.len());
        assert_ne!(sk, path_index_sk(&format!("{over}z")), "long paths stay apart");
    }

    #[test]
    fn object_keys_are_scoped_to_stream_and_incarnation() {
        let k = ObjectKey::Chunk { path: "a".into(), incarnation: "i1".into(), start: 16, nonce: "n".into() };
        assert!(k.render().starts_with(&chunk_object_prefix("a", "i1")));
        let s = ObjectKey::Segment { path: "a".into(), incarnation: "i1".into(), start: 0, end: 32, nonce: "n".into() };
        assert!(s.render().starts_with(&segment_object_prefix("a", "i1")));
        assert_ne!(chunk_object_prefix("a", "i1"), chunk_object_prefix("a", "i2"));
    }
}
