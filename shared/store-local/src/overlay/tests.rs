#![allow(clippy::unwrap_used)]
use ds_core::contract::fixtures::new_meta;
use ds_core::fold::{ChunkWrite, MetaCond, MetaWrite, ProducerWrite, RecordWrite};

use super::*;

fn put(meta: StreamMeta) -> NetWrites {
    let mut w = NetWrites::default();
    w.metas.push(MetaWrite { path: meta.path.clone(), cond: MetaCond::Absent, effect: MetaEffect::Put(meta) });
    w
}

fn chunk(path: &str, inc: &str, start: u64, data: &[u8]) -> NetWrites {
    let mut w = NetWrites::default();
    let data = Bytes::copy_from_slice(data);
    w.chunks.push(ChunkWrite { path: path.into(), incarnation: inc.into(), start, data, check_stored: true });
    w
}

fn wipe(path: &str, inc: &str) -> NetWrites {
    let mut w = NetWrites::default();
    w.wiped.push((path.into(), inc.into()));
    w.metas.push(MetaWrite { path: path.into(), cond: MetaCond::Absent, effect: MetaEffect::Delete });
    w
}

fn layout(chunks: &[Chunk]) -> Vec<(u64, usize)> {
    chunks.iter().map(|c| (c.start, c.data.len())).collect()
}

#[test]
fn an_entry_answers_for_its_key_and_defers_the_rest_to_the_tables() {
    let mut o = Overlay::default();
    let meta = new_meta("a");
    o.apply(&put(meta.clone()));
    let mut w = NetWrites::default();
    w.producers.push(ProducerWrite {
        path: "a".into(),
        incarnation: "i".into(),
        producer_id: "p".into(),
        state: ProducerState { epoch: 1, last_seq: 2 },
    });
    let record = Record { revision: 3, value: Bytes::from_static(b"v") };
    w.records.push(RecordWrite {
        path: "a".into(),
        incarnation: "i".into(),
        key: "k".into(),
        record: record.clone(),
        expect: None,
    });
    o.apply(&w);
    assert_eq!(o.meta("a"), Found::Here(Some(&meta)));
    assert_eq!(o.meta("b"), Found::Below);
    assert_eq!(o.producer("a", "i", "p"), Found::Here(Some(ProducerState { epoch: 1, last_seq: 2 })));
    assert_eq!(o.producer("a", "i", "q"), Found::Below, "another producer: the tables know");
    assert_eq!(o.record("a", "i", "k"), Found::Here(Some(&record)));
    assert_eq!(o.record("a", "other", "k"), Found::Below);
    assert_eq!(o.chunk_overlaps("a", "i", 0, 10), Found::Below);

    o.apply(&wipe("a", "i"));
    assert_eq!(o.meta("a"), Found::Here(None), "a deletion hides the stored meta");
    assert_eq!(o.producer("a", "i", "q"), Found::Here(None), "a wipe hides every stored producer");
    assert_eq!(o.record("a", "i", "k"), Found::Here(None));
    assert_eq!(o.chunk_overlaps("a", "i", 0, 10), Found::Here(None), "and every stored chunk");
    let part = o.chunks("a", "i", 0, 10);
    assert!(part.below.is_none() && part.chunks.is_empty(), "nothing is read from the tables");
}

#[test]
fn a_read_is_split_where_the_overlay_begins() {
    let mut o = Overlay::default();
    for i in 0..3u64 {
        o.apply(&chunk("s", "i", 1000 + i * 100, &[i as u8; 100]));
    }
    o.apply(&chunk("s", "i", 1300, &[9; JOINED_CHUNK_TARGET]));
    let part = o.chunks("s", "i", 0, 5000);
    assert_eq!(part.below, Some(1000), "the tables hold what lies before the overlay");
    assert_eq!(layout(&part.chunks), vec![(1000, 300), (1300, JOINED_CHUNK_TARGET)], "small appends joined");
    let part = o.chunks("s", "i", 1150, 1200);
    assert_eq!((part.below, layout(&part.chunks)), (None, vec![(1000, 300)]), "the chunk holding 1150");
    let part = o.chunks("s", "i", 0, 500);
    assert_eq!((part.below, part.chunks.len()), (Some(500), 0), "a range before the overlay");
    assert_eq!(o.chunk_overlaps("s", "i", 1299, 1301), Found::Here(Some(())));
    assert_eq!(o.chunk_overlaps("s", "i", 0, 1000), Found::Below, "not here, maybe in the tables");
    assert_eq!(o.chunk_overlaps("s", "i", 999, 1001), Found::Here(Some(())), "straddling the overlay's start");
    let tail = 1300 + JOINED_CHUNK_TARGET as u64;
    assert_eq!(
        o.chunk_overlaps("s", "i", tail, tail + 10),
        Found::Here(None),
        "past the overlay's start: not in the tables"
    );
    assert_eq!(o.chunk_overlaps("s", "other", tail, tail + 10), Found::Below, "another incarnation: ask the tables");
    let part = o.chunks("s", "other", 0, 10);
    assert_eq!((part.below, part.chunks.len()), (Some(10), 0));
}

#[test]
fn absorbing_a_later_batch_wipes_joins_and_replaces() {
    let mut o = Overlay::default();
    o.apply(&chunk("s", "old", 0, b"old bytes"));
    o.apply(&chunk("s", "i", 0, b"abc"));
    o.apply(&put(new_meta("s")));

    let mut newer = Overlay::default();
    newer.apply(&wipe("s", "old"));
    newer.apply(&chunk("s", "i", 3, b"def"));
    o.absorb(newer);
    assert_eq!(o.meta("s"), Found::Here(None), "the later deletion wins");
    let part = o.chunks("s", "old", 0, 100);
    assert!(part.below.is_none() && part.chunks.is_empty(), "the wiped incarnation is empty and hides the tables");
    let part = o.chunks("s", "i", 0, 100);
    assert_eq!(layout(&part.chunks), vec![(0, 6)], "the later append joined the earlier chunk");
    assert_eq!(&part.chunks[0].data[..], b"abcdef");
}

#[test]
fn merged_reads_skip_what_the_tables_returned_and_respect_the_budget() {
    let c = |start: u64, data: &'static [u8]| Chunk { start, data: Bytes::from_static(data) };
    // The tables' row already reaches into the overlay (read right after a
    // checkpoint): the overlay's copy of those appends is skipped.
    let merged = merge_chunks(vec![c(0, b"abcdef")], vec![c(3, b"def"), c(6, b"gh")], usize::MAX);
    assert_eq!(layout(&merged), vec![(0, 6), (6, 2)]);
    // Budget: stop once max_bytes are gathered, but never return nothing.
    let merged = merge_chunks(vec![c(0, b"abc")], vec![c(3, b"def"), c(6, b"gh")], 3);
    assert_eq!(layout(&merged), vec![(0, 3)]);
    let merged = merge_chunks(Vec::new(), vec![c(3, b"def"), c(6, b"gh")], 1);
    assert_eq!(layout(&merged), vec![(3, 3)]);

    let chunks = [c(0, b"abc"), c(3, b"defg"), c(10, b"x")];
    assert_eq!(join_chunks(&chunks, 4, 6).unwrap(), &b"ef"[..], "one chunk: a slice");
    assert_eq!(join_chunks(&chunks, 1, 7).unwrap(), &b"bcdefg"[..], "across chunks: joined");
    assert_eq!(join_chunks(&chunks, 5, 11), None, "a gap");
    assert_eq!(join_chunks(&chunks, 7, 7).unwrap(), &b""[..]);
}

#[test]
fn listings_merge_in_path_order_with_deletions_hidden() {
    let mut o = Overlay::default();
    for path in ["b", "d", "x/1", "x/2"] {
        o.apply(&put(new_meta(path)));
    }
    o.apply(&wipe("c", "i"));
    let upper = o.metas_after("", None, 10);
    let paths: Vec<_> = upper.iter().map(|(p, m)| (p.as_str(), m.is_some())).collect();
    assert_eq!(paths, vec![("b", true), ("c", false), ("d", true), ("x/1", true), ("x/2", true)]);
    let upper = o.metas_after("x/", None, 1);
    assert_eq!(upper.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(), vec!["x/1"], "stops after `limit` live");
    let upper = o.metas_after("x/", Some("x/1"), 10);
    assert_eq!(upper.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(), vec!["x/2"]);

    let mut stale_b = new_meta("b");
    stale_b.version = 99;
    let lower = vec![new_meta("a"), stale_b, new_meta("c"), new_meta("e")];
    let listed = merge_listing(lower.clone(), o.metas_after("", None, 10), 10);
    let got: Vec<_> = listed.iter().map(|m| (&*m.path, m.version)).collect();
    let fresh = new_meta("b").version;
    assert_eq!(got, vec![("a", 0), ("b", fresh), ("d", 0), ("e", 0), ("x/1", 0), ("x/2", 0)]);
    let listed = merge_listing(lower, o.metas_after("", None, 3), 3);
    assert_eq!(listed.iter().map(|m| &*m.path).collect::<Vec<_>>(), vec!["a", "b", "d"]);
}

#[test]
fn a_stream_with_one_incarnation_reserves_one_slot() {
    // P4 (bytes per idle stream) counts every slot: a default-grown Vec
    // reserved four incarnations per stream in the overlay.
    let mut o = Overlay::default();
    o.apply(&chunk("a", "i", 0, b"x"));
    o.absorb({
        let mut later = Overlay::default();
        later.apply(&chunk("b", "j", 0, b"y"));
        later
    });
    for path in ["a", "b"] {
        assert_eq!(o.paths[path].incarnations.capacity(), 1, "{path}");
    }
}
