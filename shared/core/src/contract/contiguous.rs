//! `read_contiguous`: a store may decline any range (`None`), but what it
//! answers is exactly the bytes the chunk-wise read joins into.

use bytes::Bytes;

use super::fixtures::{append, create, read_all, unique_path};
use super::SubstrateFactory;
use crate::{Chunk, Commit, Op, StreamMeta, Substrate};

/// Appends of 1 to 5 bytes, so ranges start and end inside and between them.
async fn small_appends(s: &Substrate) -> (StreamMeta, Vec<u8>) {
    let meta = create(s, &unique_path("contiguous")).await;
    for i in 0..12u8 {
        let piece: Vec<u8> = (0..=(i % 5)).map(|j| b'a' + (i + j) % 26).collect();
        append(s, &meta.path, Bytes::from(piece), None).await;
    }
    let stored = s.store.read_meta(&s.registry.enter(&meta.path)).await.expect("read_meta").expect("exists");
    let chunks: Vec<Chunk> = read_all(s, &meta.path, &meta.incarnation, stored.tail).await;
    (stored, chunks.iter().flat_map(|c| c.data.iter().copied()).collect())
}

/// Every answered range equals the joined chunks; a range over the budget,
/// past the tail or of another incarnation is never answered.
pub async fn read_contiguous_ranges(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let (meta, all) = small_appends(&s).await;
    let stream = s.registry.enter(&meta.path);
    let read = |from: u64, until: u64, max: usize| {
        let (store, stream, incarnation) = (&s.store, &stream, meta.incarnation.clone());
        async move { store.read_contiguous(stream, &incarnation, from, until, max).await.expect("read_contiguous") }
    };
    for from in 0..meta.tail {
        for until in from + 1..=meta.tail {
            if let Some(one) = read(from, until, 1 << 20).await {
                assert_eq!(&one[..], &all[from as usize..until as usize], "[{from}, {until})");
            }
        }
    }
    assert_eq!(read(0, meta.tail, 3).await, None, "a range over the budget is left to the chunk-wise read");
    assert_eq!(read(0, meta.tail + 1, 1 << 20).await, None, "bytes not stored are not invented");
    let other = s.store.read_contiguous(&stream, "no-such-incarnation", 0, 1, 1 << 20).await;
    assert_eq!(other.expect("read_contiguous"), None, "incarnations never share bytes");
}

/// For stores that serve contiguous reads: every stored range within the
/// budget is answered.
pub async fn read_contiguous_served(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let (meta, all) = small_appends(&s).await;
    let stream = s.registry.enter(&meta.path);
    for from in 0..meta.tail {
        for until in from + 1..=meta.tail {
            let one = s.store.read_contiguous(&stream, &meta.incarnation, from, until, 1 << 20).await;
            let one = one.expect("read_contiguous");
            assert_eq!(one.as_deref(), Some(&all[from as usize..until as usize]), "[{from}, {until})");
        }
    }
}

/// Large contiguous reads, repeated (a store may keep what it answered, see
/// [`crate::read_cache`]), stay exactly the stored bytes as the stream grows,
/// and a deleted incarnation's bytes are never answered again, not even
/// after a re-creation at the same path.
pub async fn read_contiguous_repeated_and_deleted(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let path = unique_path("contiguous-repeated");
    let old = create(&s, &path).await;
    let stream = s.registry.enter(&path);
    let mut all = Vec::new();
    let mut last = None;
    let grow = |all: &mut Vec<u8>, round: u8| {
        let piece: Vec<u8> = (0..1000u32).map(|j| (j as u8).wrapping_mul(7).wrapping_add(round)).collect();
        all.extend_from_slice(&piece);
        Bytes::from(piece)
    };
    for round in 0..40u8 {
        last = Some(append(&s, &path, grow(&mut all, round), None).await);
    }
    let read = |incarnation: std::sync::Arc<str>, from: u64, until: u64| {
        let (store, stream) = (&s.store, &stream);
        async move { store.read_contiguous(stream, &incarnation, from, until, 1 << 20).await.expect("read_contiguous") }
    };
    let tail = all.len() as u64;
    for (from, until) in [(0, tail), (0, tail), (999, tail - 1), (0, tail), (20_000, 20_001)] {
        if let Some(one) = read(old.incarnation.clone(), from, until).await {
            assert_eq!(&one[..], &all[from as usize..until as usize], "[{from}, {until})");
        }
    }
    for round in 40..45u8 {
        last = Some(append(&s, &path, grow(&mut all, round), None).await);
    }
    let tail = all.len() as u64;
    for (from, until) in [(0, tail), (0, tail), (500, tail)] {
        if let Some(one) = read(old.incarnation.clone(), from, until).await {
            assert_eq!(&one[..], &all[from as usize..until as usize], "[{from}, {until}) after more appends");
        }
    }
    let version = last.expect("appended").meta.version;
    let delete =
        Op::DeleteStream { path: path.as_str().into(), incarnation: old.incarnation.clone(), expect_version: version };
    s.store.commit(Commit { ops: vec![delete] }).await.expect("delete commits");
    assert_eq!(read(old.incarnation.clone(), 0, tail).await, None, "a deleted incarnation's bytes are gone");
    let new = create(&s, &path).await;
    let fresh = Bytes::from(vec![b'n'; 40_000]);
    append(&s, &path, fresh.clone(), None).await;
    assert_eq!(read(old.incarnation.clone(), 0, tail).await, None, "and stay gone after a re-creation");
    if let Some(one) = read(new.incarnation.clone(), 0, 40_000).await {
        assert_eq!(one, fresh, "the new incarnation's own bytes");
    }
}
