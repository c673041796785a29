//! Record-level store behaviour: touch, listing, chunk reads and meta
//! round-trips.

use bytes::Bytes;

use super::fixtures::{append, create, new_meta, unique_path, wall_clock_ms};
use super::SubstrateFactory;
use crate::{Chunk, Commit, Expect, ForkOrigin, Op, ProducerTriple, StreamMeta};

/// `touch` moves `touched_at_ms` forward without a version bump, ignores other
/// incarnations, and a later `PutMeta` still commits on the same version.
pub async fn touch_without_version_bump(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let meta = create(&s, &unique_path("touch")).await;
    let t1 = meta.touched_at_ms + 5_000;
    s.store.touch(&s.registry.enter(&meta.path), &meta.incarnation, t1).await.expect("touch");
    let m = s.store.read_meta(&s.registry.enter(&meta.path)).await.expect("read_meta").expect("exists");
    assert!(m.touched_at_ms >= t1, "touch is visible to the next read");
    assert_eq!(m.version, meta.version, "touch never bumps the version");
    s.store.touch(&s.registry.enter(&meta.path), &meta.incarnation, t1 - 3_000).await.expect("touch");
    let m = s.store.read_meta(&s.registry.enter(&meta.path)).await.expect("read_meta").expect("exists");
    assert!(m.touched_at_ms >= t1, "touched_at_ms never moves backwards");

    let other = create(&s, &unique_path("touch-other")).await;
    s.store
        .touch(&s.registry.enter(&other.path), "another-incarnation", other.touched_at_ms + 9_000)
        .await
        .expect("touch");
    let o = s.store.read_meta(&s.registry.enter(&other.path)).await.expect("read_meta").expect("exists");
    assert_eq!(o.touched_at_ms, other.touched_at_ms, "a touch of another incarnation is ignored");
    let missing = unique_path("touch-missing");
    s.store.touch(&s.registry.enter(&missing), "x", wall_clock_ms()).await.expect("touching a missing stream is fine");
    assert_eq!(s.store.read_meta(&s.registry.enter(&missing)).await.expect("read_meta"), None, "touch never creates");

    let mut next = meta.clone();
    next.version += 1;
    next.touched_at_ms = t1 + 10_000;
    let commit = Commit { ops: vec![Op::PutMeta { meta: next.clone(), expect: Expect::Version(meta.version) }] };
    s.store.commit(commit).await.expect("the version read before the touch still commits");
    let m = s.store.read_meta(&s.registry.enter(&meta.path)).await.expect("read_meta").expect("exists");
    assert_eq!(m.touched_at_ms, next.touched_at_ms, "PutMeta sets the core's touched_at_ms");
}

/// `list_streams` returns metas in byte-wise path order, strictly after
/// `after`, at most `limit` per page, without deleted streams.
pub async fn list_streams_pages(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let prefix = unique_path("list");
    let names = ["b", "a0", "a", "B", "a/b", "\u{e4}", "z", "a/a"];
    let mut created = Vec::new();
    for name in names {
        created.push(create(&s, &format!("{prefix}/{name}")).await);
    }
    let gone = created.remove(1);
    let delete = Op::DeleteStream { path: gone.path.clone(), incarnation: gone.incarnation.clone(), expect_version: 0 };
    s.store.commit(Commit { ops: vec![delete] }).await.expect("delete");
    created.sort_by(|x, y| x.path.cmp(&y.path));

    let mut seen: Vec<StreamMeta> = Vec::new();
    let mut after = prefix.clone();
    'pages: loop {
        let page = s.store.list_streams(Some(&after), 3).await.expect("list_streams");
        assert!(page.len() <= 3, "a page never exceeds the limit");
        for m in &page {
            assert!(*m.path > *after, "entries come strictly after `after`, in path order");
            if !m.path.starts_with(&format!("{prefix}/")) {
                break 'pages;
            }
            after = m.path.to_string();
            seen.push(m.clone());
        }
        if page.len() < 3 {
            break;
        }
    }
    assert_eq!(seen, created, "every live stream of the prefix, in byte-wise path order");
    assert!(s.store.list_streams(None, 0).await.expect("list_streams").is_empty(), "limit 0 is empty");
}

/// `list_streams_with_prefix` returns exactly the streams whose path starts
/// with the prefix (the prefix itself included, a longer sibling such as
/// `{prefix}x` too: it is a string prefix), in path order, paged like
/// `list_streams`.
pub async fn list_streams_by_prefix(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let root = unique_path("listp");
    let inside = ["ev", "ev/a", "ev/b/c", "evx", "ev/\u{e4}"];
    let outside = ["e", "eu", "ew/a", "other/ev"];
    for name in inside.iter().chain(outside.iter()) {
        create(&s, &format!("{root}/{name}")).await;
    }
    let prefix = format!("{root}/ev");
    let mut expected: Vec<String> = inside.iter().map(|n| format!("{root}/{n}")).collect();
    expected.sort();
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = s.store.list_streams_with_prefix(&prefix, after.as_deref(), 2).await.expect("list by prefix");
        assert!(page.len() <= 2, "a page never exceeds the limit");
        for m in &page {
            assert!(m.path.starts_with(&prefix), "{} is outside the prefix", m.path);
            assert!(after.as_ref().is_none_or(|a| *m.path > **a), "entries come strictly after `after`");
            after = Some(m.path.to_string());
            seen.push(m.path.to_string());
        }
        if page.len() < 2 {
            break;
        }
    }
    assert_eq!(seen, expected, "every stream under the prefix, in byte-wise path order");
    let none = s.store.list_streams_with_prefix(&format!("{root}/zz"), None, 10).await.expect("list by prefix");
    assert!(none.is_empty(), "no stream under an unused prefix");
}

/// `read_chunks` returns whole chunks covering `[from, until)` from the one
/// containing `from`, each starting and ending where appends did (a store
/// may join appends), honours `max_bytes` (but returns at least one chunk)
/// and keeps incarnations apart.
pub async fn read_chunks_ranges(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let meta = create(&s, &unique_path("read-ranges")).await;
    let mut stored = Vec::new();
    let mut boundaries = vec![0u64];
    for (i, len) in [5usize, 3, 7, 1, 4].into_iter().enumerate() {
        let data = vec![b'0' + i as u8; len];
        stored.extend_from_slice(&data);
        boundaries.push(stored.len() as u64);
        append(&s, &meta.path, Bytes::from(data), None).await;
    }
    let read = |from: u64, until: u64, max: usize| {
        let (store, stream, i) = (&s.store, s.registry.enter(&meta.path), meta.incarnation.clone());
        async move { store.read_chunks(&stream, &i, from, until, max).await.expect("read_chunks") }
    };
    // Whole chunks, contiguous, on append boundaries, holding the stored bytes.
    let check = |from: u64, until: u64, max: usize, chunks: &[Chunk]| {
        let first = chunks.first().expect("a chunk overlaps a non-empty stored range");
        assert!(
            first.start <= from && from < first.end(),
            "read({from}, {until}, {max}) begins at the chunk containing {from}"
        );
        let mut pos = first.start;
        for c in chunks {
            assert_eq!(c.start, pos, "chunks are contiguous");
            assert!(
                boundaries.contains(&c.start) && boundaries.contains(&c.end()),
                "chunk {}..{} splits an append",
                c.start,
                c.end()
            );
            assert_eq!(&c.data[..], &stored[c.start as usize..c.end() as usize], "bytes of chunk at {}", c.start);
            pos = c.end();
        }
        let before_last: usize = chunks[..chunks.len() - 1].iter().map(|c| c.data.len()).sum();
        assert!(before_last < max, "read({from}, {until}, {max}) stops adding chunks once the budget is reached");
        assert!(chunks.last().is_some_and(|c| c.start < until), "no chunk starts at or past until");
        pos
    };
    for (from, until) in [(6, 20), (8, 16), (0, 20), (19, 20)] {
        let chunks = read(from, until, usize::MAX).await;
        assert!(check(from, until, usize::MAX, &chunks) >= until, "an unbounded read({from}, {until}) covers it");
    }
    let one = read(0, 20, 1).await;
    check(0, 20, 1, &one);
    assert_eq!(one.len(), 1, "exactly one chunk over budget");
    let six = read(0, 20, 6).await;
    let covered = check(0, 20, 6, &six);
    assert!(covered >= 6, "a read with budget 6 returns at least 6 bytes when stored");
    assert!(read(20, 100, usize::MAX).await.is_empty(), "nothing at or past the tail");
    assert!(read(3, 3, usize::MAX).await.is_empty(), "empty range");
    let other = s.store.read_chunks(&s.registry.enter(&meta.path), "other-incarnation", 0, 20, usize::MAX).await;
    assert!(other.expect("read_chunks").is_empty(), "incarnations never share chunks");
}

/// Every field of a meta record survives the store byte-for-byte.
pub async fn meta_roundtrip(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let meta = rich_meta(&unique_path("meta-roundtrip"));
    let commit = Commit { ops: vec![Op::PutMeta { meta: meta.clone(), expect: Expect::Absent }] };
    s.store.commit(commit).await.expect("commit");
    assert_eq!(s.store.read_meta(&s.registry.enter(&meta.path)).await.expect("read_meta"), Some(meta.clone()));
    let other = f.instance().await;
    assert_eq!(
        other.store.read_meta(&other.registry.enter(&meta.path)).await.expect("read_meta"),
        Some(meta),
        "read-your-writes across instances"
    );
}

/// A meta record with every optional field set (non-ASCII included).
pub fn rich_meta(path: &str) -> StreamMeta {
    let mut meta = new_meta(path);
    meta.content_type = "application/json; charset=utf-8".into();
    meta.closed = true;
    meta.closed_by = Some(ProducerTriple { id: "pr\u{f8}d\u{fc}cer".into(), epoch: 3, seq: u64::MAX - 1 });
    meta.ttl_secs = Some(3_600);
    meta.expires_at_ms = Some(i64::MAX - 5);
    meta.last_stream_seq = Some("seq-\u{1f600}".into());
    meta.fork = Some(ForkOrigin { source: "src/\u{e9}".into(), source_incarnation: "inc-0".into(), base: 1 << 40 });
    meta.ref_count = 2;
    meta.soft_deleted = true;
    meta.created_at_ms = -1;
    meta
}
