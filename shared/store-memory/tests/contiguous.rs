//! `read_contiguous`: the one-buffer read of the memory store holds exactly
//! the bytes the chunk-wise read joins into, for every range.

use bytes::Bytes;
use ds_core::contract::fixtures::{append, create, read_all, unique_path};
use ds_core::Chunk;
use ds_store_memory::memory_substrate;

fn joined(chunks: &[Chunk], from: u64, until: u64) -> Vec<u8> {
    let mut all = Vec::new();
    for c in chunks {
        all.extend_from_slice(&c.data);
    }
    all[usize::try_from(from).expect("small")..usize::try_from(until).expect("small")].to_vec()
}

#[tokio::test]
async fn every_range_reads_the_joined_chunks() {
    let (s, _due) = memory_substrate();
    let path = unique_path("contiguous");
    let meta = create(&s, &path).await;
    // Appends of 1 to 5 bytes: ranges start and end inside and between them.
    for i in 0..12u8 {
        let piece: Vec<u8> = (0..=(i % 5)).map(|j| b'a' + (i + j) % 26).collect();
        append(&s, &path, Bytes::from(piece), None).await;
    }
    let stream = s.registry.enter(&path);
    let stored = s.store.read_meta(&stream).await.expect("meta").expect("exists");
    let chunks = read_all(&s, &path, &meta.incarnation, stored.tail).await;
    for from in 0..stored.tail {
        for until in from + 1..=stored.tail {
            let one = s.store.read_contiguous(&stream, &meta.incarnation, from, until, 1 << 20).await.expect("read");
            assert_eq!(one.as_deref(), Some(&joined(&chunks, from, until)[..]), "[{from}, {until})");
        }
    }
    let too_big = s.store.read_contiguous(&stream, &meta.incarnation, 0, stored.tail, 3).await.expect("read");
    assert_eq!(too_big, None, "a range over the budget is left to the chunk-wise read");
    let past_tail = s.store.read_contiguous(&stream, &meta.incarnation, 0, stored.tail + 1, 1 << 20).await;
    assert_eq!(past_tail.expect("read"), None, "bytes not stored are not invented");
    let other = s.store.read_contiguous(&stream, "no-such-incarnation", 0, 1, 1 << 20).await.expect("read");
    assert_eq!(other, None);
}
