#![allow(clippy::unwrap_used)]

use super::*;

fn joined(pieces: &[Bytes]) -> Vec<u8> {
    pieces.iter().flat_map(|p| p.iter().copied()).collect()
}

fn got(cache: &ReadCache, path: &str, incarnation: &str, from: u64, until: u64) -> Vec<Bytes> {
    cache.prefix(path, incarnation, from, until).0
}

fn bytes(range: std::ops::Range<u8>) -> Bytes {
    Bytes::from(range.collect::<Vec<u8>>())
}

#[test]
fn prefix_chains_adjacent_pieces_and_stops_at_a_gap() {
    let cache = ReadCache::with_budget(1 << 20);
    let e = cache.epoch();
    cache.insert("s", "i1", 0, bytes(0..10), e);
    cache.insert("s", "i1", 10, bytes(10..20), e);
    cache.insert("s", "i1", 30, bytes(30..40), e);
    assert_eq!(joined(&got(&cache, "s", "i1", 3, 25)), (3..20).collect::<Vec<u8>>(), "two pieces, then the gap");
    assert_eq!(joined(&got(&cache, "s", "i1", 12, 15)), (12..15).collect::<Vec<u8>>(), "cut at `until`");
    assert!(got(&cache, "s", "i1", 20, 40).is_empty(), "the gap itself");
    assert_eq!(joined(&got(&cache, "s", "i1", 35, 100)), (35..40).collect::<Vec<u8>>());
    assert!(got(&cache, "s", "other", 0, 10).is_empty(), "incarnations never share bytes");
    assert!(got(&cache, "t", "i1", 0, 10).is_empty());
    assert_eq!(cache.hits(), 3);
}

#[test]
fn an_insert_replaces_the_pieces_it_overlaps() {
    let cache = ReadCache::with_budget(1 << 20);
    let e = cache.epoch();
    cache.insert("s", "i1", 0, bytes(0..10), e);
    cache.insert("s", "i1", 20, bytes(20..30), e);
    cache.insert("s", "i1", 5, bytes(5..25), e);
    assert_eq!(cache.held(), (20, 1), "both older pieces overlapped the new one");
    assert_eq!(joined(&got(&cache, "s", "i1", 5, 30)), (5..25).collect::<Vec<u8>>());
    assert!(got(&cache, "s", "i1", 0, 5).is_empty());
}

#[test]
fn the_budget_evicts_oldest_first() {
    let cache = ReadCache::with_budget(100);
    let e = cache.epoch();
    for i in 0..5u64 {
        cache.insert("s", "i1", i * 25, Bytes::from(vec![i as u8; 25]), e);
    }
    assert_eq!(cache.held(), (100, 4), "the first piece went");
    assert!(got(&cache, "s", "i1", 0, 25).is_empty());
    assert_eq!(joined(&got(&cache, "s", "i1", 25, 125)).len(), 100);
    cache.insert("s", "i1", 0, Bytes::from(vec![9; 25]), e);
    assert_eq!(cache.held(), (100, 4), "never past the budget");
    assert!(got(&cache, "s", "i1", 25, 50).is_empty(), "the oldest piece left went");
    assert_eq!(joined(&got(&cache, "s", "i1", 0, 25)), vec![9; 25]);
    cache.insert("big", "i1", 0, Bytes::from(vec![0; 26]), e);
    assert!(got(&cache, "big", "i1", 0, 26).is_empty(), "a piece of more than a quarter of the budget is not kept");
}

#[test]
fn the_queue_stays_bounded_when_pieces_are_replaced() {
    let cache = ReadCache::with_budget(1 << 20);
    let e = cache.epoch();
    for _ in 0..10_000 {
        cache.insert("s", "i1", 0, bytes(0..10), e);
    }
    assert_eq!(cache.held(), (10, 1));
    assert!(cache.inner().order.len() <= 2 + 64, "{}", cache.inner().order.len());
}

#[test]
fn a_wipe_forgets_the_stream_and_refuses_reads_begun_before_it() {
    let cache = ReadCache::with_budget(1 << 20);
    let before = cache.epoch();
    cache.insert("s", "i1", 0, bytes(0..10), before);
    cache.forget("s");
    assert!(got(&cache, "s", "i1", 0, 10).is_empty(), "forgotten");
    cache.insert("s", "i1", 0, bytes(0..10), before);
    assert!(got(&cache, "s", "i1", 0, 10).is_empty(), "a read begun before the wipe is not admitted");
    assert_eq!(cache.held(), (0, 0));
    cache.insert("s", "i2", 0, bytes(0..10), cache.epoch());
    assert_eq!(joined(&got(&cache, "s", "i2", 0, 10)).len(), 10, "reads begun after it are");
}

#[test]
fn a_newer_incarnation_replaces_the_older_ones_pieces() {
    let cache = ReadCache::with_budget(1 << 20);
    let e = cache.epoch();
    cache.insert("s", "i1", 0, bytes(0..10), e);
    cache.insert("s", "i2", 0, bytes(0..4), e);
    assert_eq!(cache.held(), (4, 1));
    assert!(got(&cache, "s", "i1", 0, 10).is_empty());
}
