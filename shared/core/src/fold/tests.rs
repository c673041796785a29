use std::collections::HashMap;

use bytes::Bytes;

use super::*;
use crate::{Chunk, Record, RecordExpect};

/// Stored metas by path, stored chunks as (path, incarnation, start, end),
/// stored record revisions by (path, incarnation, key).
#[derive(Default)]
struct View(HashMap<String, (u64, String)>, Vec<(String, String, u64, u64)>, HashMap<(String, String, String), u64>);

/// Every stored meta of a [`View`] has this tail.
const STORED_TAIL: u64 = 40;

impl StateView for View {
    fn meta_stamp(&self, path: &str) -> Result<Option<MetaStamp>, StoreError> {
        Ok(self.0.get(path).map(|(v, i)| MetaStamp { version: *v, incarnation: i.as_str().into(), tail: STORED_TAIL }))
    }
    fn chunk_overlaps(&self, p: &str, i: &str, start: u64, end: u64) -> Result<bool, StoreError> {
        Ok(self.1.iter().any(|(cp, ci, s, e)| cp == p && ci == i && *s < end && start < *e))
    }
    fn record_revision(&self, p: &str, i: &str, key: &str) -> Result<Option<u64>, StoreError> {
        Ok(self.2.get(&(p.to_owned(), i.to_owned(), key.to_owned())).copied())
    }
}

fn stored(path: &str, version: u64, incarnation: &str) -> View {
    View(HashMap::from([(path.to_owned(), (version, incarnation.to_owned()))]), Vec::new(), HashMap::new())
}

fn meta(path: &str, incarnation: &str, version: u64) -> StreamMeta {
    StreamMeta::for_test(path, incarnation, version)
}

fn put(m: StreamMeta, expect: Expect) -> Op {
    Op::PutMeta { meta: m, expect }
}

fn delete(path: &str, incarnation: &str, expect_version: u64) -> Op {
    Op::DeleteStream { path: path.into(), incarnation: incarnation.into(), expect_version }
}

fn chunk(incarnation: &str, start: u64, len: usize) -> Op {
    Op::PutChunk {
        path: "a".into(),
        incarnation: incarnation.into(),
        chunk: Chunk { start, data: Bytes::from(vec![0u8; len]) },
    }
}

fn producer(incarnation: &str, seq: u64) -> Op {
    Op::PutProducer {
        path: "a".into(),
        incarnation: incarnation.into(),
        producer_id: "p".into(),
        state: ProducerState { epoch: 0, last_seq: seq },
    }
}

/// Fold, then check against `view`: whether the commit would apply.
fn applies(view: &View, ops: Vec<Op>) -> bool {
    NetWrites::fold(Commit { ops }).and_then(|w| w.check(view)).is_ok()
}

#[test]
fn version_expectations_are_per_incarnation() {
    let view = stored("a", 3, "new");
    assert!(applies(&view, vec![put(meta("a", "new", 4), Expect::Version(3))]));
    assert!(!applies(&view, vec![put(meta("a", "old", 4), Expect::Version(3))]));
    assert!(!applies(&view, vec![put(meta("a", "new", 4), Expect::Version(2))]));
    assert!(!applies(&view, vec![put(meta("a", "new", 0), Expect::Absent)]));
    assert!(applies(&View::default(), vec![put(meta("a", "new", 0), Expect::Absent)]));
}

#[test]
fn an_append_expects_the_stored_tail_too() {
    let view = stored("a", 3, "i");
    let at = |tail| Expect::VersionAt { version: 3, tail };
    assert!(applies(&view, vec![put(meta("a", "i", 4), at(STORED_TAIL))]));
    // Same version, other tail: planned on a state that was never stored.
    assert!(!applies(&view, vec![put(meta("a", "i", 4), at(STORED_TAIL + 6))]));
    assert!(!applies(&view, vec![put(meta("a", "j", 4), at(STORED_TAIL))]));
    // Within one commit, against the tail the earlier op wrote.
    let mut first = meta("a", "i", 4);
    first.tail = 50;
    let stacked = |tail| {
        vec![put(first.clone(), at(STORED_TAIL)), put(meta("a", "i", 5), Expect::VersionAt { version: 4, tail })]
    };
    assert!(applies(&view, stacked(50)));
    assert!(!applies(&view, stacked(44)));
}

#[test]
fn delete_then_create_folds_into_one_conditional_put() {
    let w = NetWrites::fold(Commit { ops: vec![delete("a", "old", 4), put(meta("a", "new", 0), Expect::Absent)] })
        .expect("folds");
    assert_eq!(w.metas.len(), 1);
    assert_eq!(w.metas[0].cond, MetaCond::Version { version: 4, incarnation: "old".into(), tail: None });
    assert!(matches!(&w.metas[0].effect, MetaEffect::Put(m) if &*m.incarnation == "new"));
    assert_eq!(w.wiped, vec![(Arc::from("a"), Arc::from("old"))]);
    assert!(w.check(&stored("a", 4, "old")).is_ok());
    assert!(w.check(&stored("a", 4, "other")).is_err());
}

#[test]
fn later_ops_are_checked_against_the_earlier_ones() {
    let view = stored("a", 3, "old");
    assert!(!applies(&view, vec![delete("a", "old", 3), delete("a", "old", 3)]));
    let twice = vec![put(meta("a", "i", 1), Expect::Version(0)), put(meta("a", "i", 2), Expect::Version(0))];
    assert!(matches!(NetWrites::fold(Commit { ops: twice }), Err(StoreError::Conflict)));
}

#[test]
fn create_then_delete_only_checks() {
    let w = NetWrites::fold(Commit {
        ops: vec![put(meta("a", "i", 0), Expect::Absent), chunk("i", 0, 3), delete("a", "i", 0)],
    })
    .expect("folds");
    assert_eq!(w.metas[0].effect, MetaEffect::CheckOnly);
    assert_eq!(w.metas[0].cond, MetaCond::Absent);
    assert!(w.chunks.is_empty(), "the wipe removes the commit's own chunks of that incarnation");
}

#[test]
fn overlapping_chunks_conflict_but_adjacent_ones_do_not() {
    let view = View(HashMap::new(), vec![("a".to_owned(), "i".to_owned(), 0, 10)], HashMap::new());
    assert!(applies(&view, vec![chunk("i", 10, 5), chunk("i", 15, 1), chunk("i", 16, 0)]));
    assert!(!applies(&view, vec![chunk("i", 9, 5)]), "overlaps a stored chunk");
    assert!(!applies(&view, vec![chunk("i", 10, 5), chunk("i", 14, 2)]), "overlaps an earlier chunk of the commit");
    assert!(applies(&view, vec![chunk("other", 0, 5)]), "other incarnations do not clash");
}

#[test]
fn a_wiped_incarnation_is_not_checked_against_its_stored_chunks() {
    let mut view = stored("a", 3, "i");
    view.1.push(("a".to_owned(), "i".to_owned(), 0, 10));
    assert!(applies(&view, vec![delete("a", "i", 3), chunk("i", 0, 4)]));
    // The first chunk is wiped with its incarnation, so the third clashes with nothing.
    assert!(applies(&view, vec![chunk("i", 0, 4), delete("a", "i", 3), chunk("i", 2, 4)]));
}

#[test]
fn empty_chunks_vanish_and_the_last_producer_write_wins() {
    let w = NetWrites::fold(Commit { ops: vec![chunk("i", 0, 0), producer("i", 1), producer("i", 2)] }).expect("folds");
    assert!(w.chunks.is_empty());
    assert_eq!(w.producers.len(), 1);
    assert_eq!(w.producers[0].state.last_seq, 2);
    let w = NetWrites::fold(Commit { ops: vec![producer("i", 1), delete("a", "i", 0)] }).expect("folds");
    assert!(w.producers.is_empty(), "a wipe removes the producer states it follows");
}

fn record(incarnation: &str, key: &str, revision: u64, expect: RecordExpect) -> Op {
    Op::PutRecord {
        path: "a".into(),
        incarnation: incarnation.into(),
        key: key.into(),
        record: Record { revision, value: Bytes::from_static(b"v") },
        expect,
    }
}

#[test]
fn records_are_written_under_their_precondition() {
    let mut view = stored("a", 1, "i");
    view.2.insert(("a".into(), "i".into(), "k".into()), 3);
    assert!(applies(&view, vec![record("i", "k", 4, RecordExpect::Revision(3))]));
    assert!(!applies(&view, vec![record("i", "k", 3, RecordExpect::Revision(2))]), "stale revision");
    assert!(!applies(&view, vec![record("i", "k", 1, RecordExpect::Absent)]), "exists");
    assert!(applies(&view, vec![record("i", "new", 1, RecordExpect::Absent)]));
    assert!(applies(&view, vec![record("other", "k", 1, RecordExpect::Absent)]), "per incarnation");
}

#[test]
fn later_record_writes_see_earlier_ones_and_wipes() {
    let mut view = stored("a", 1, "i");
    view.2.insert(("a".into(), "i".into(), "k".into()), 3);
    let chained = vec![record("i", "k", 4, RecordExpect::Revision(3)), record("i", "k", 5, RecordExpect::Revision(4))];
    let w = NetWrites::fold(Commit { ops: chained.clone() }).expect("folds");
    assert_eq!(w.records.len(), 1, "one write per key");
    assert_eq!((w.records[0].record.revision, w.records[0].expect), (5, Some(RecordExpect::Revision(3))));
    assert!(applies(&view, chained));
    assert!(!applies(
        &view,
        vec![record("i", "k", 4, RecordExpect::Revision(3)), record("i", "k", 4, RecordExpect::Revision(3))]
    ));
    // After a wipe of its incarnation the key is absent, whatever is stored.
    assert!(applies(&view, vec![delete("a", "i", 1), record("i", "k", 1, RecordExpect::Absent)]));
    assert!(!applies(&view, vec![delete("a", "i", 1), record("i", "k", 4, RecordExpect::Revision(3))]));
    let w = NetWrites::fold(Commit { ops: vec![record("i", "k", 4, RecordExpect::Revision(3)), delete("a", "i", 1)] })
        .expect("folds");
    assert!(w.records.is_empty(), "a wipe removes the record writes it follows");
}

#[test]
fn oversized_records_are_refused_whole() {
    let big = Op::PutRecord {
        path: "a".into(),
        incarnation: "i".into(),
        key: "k".into(),
        record: Record { revision: 1, value: Bytes::from(vec![0u8; crate::MAX_RECORD_BYTES + 1]) },
        expect: RecordExpect::Absent,
    };
    assert!(matches!(NetWrites::fold(Commit { ops: vec![big] }), Err(StoreError::TooLarge(_))));
    let long_key = record("i", &"k".repeat(crate::MAX_RECORD_KEY_BYTES + 1), 1, RecordExpect::Absent);
    assert!(matches!(NetWrites::fold(Commit { ops: vec![long_key] }), Err(StoreError::TooLarge(_))));
}

/// The net writes of one append on top of `base` (version, tail): meta,
/// a chunk of `len` bytes and producer seq `seq`.
fn append_writes(version: u64, tail: u64, len: usize, seq: u64) -> NetWrites {
    let mut next = meta("a", "i", version + 1);
    next.tail = tail + len as u64;
    NetWrites::fold(Commit {
        ops: vec![put(next, Expect::VersionAt { version, tail }), chunk("i", tail, len), producer("i", seq)],
    })
    .expect("folds")
}

#[test]
fn merged_appends_are_one_commit_of_all_their_ops() {
    let mut group = append_writes(3, STORED_TAIL, 5, 0);
    group.merge(append_writes(4, STORED_TAIL + 5, 2, 1)).expect("stacks on the first");
    group.merge(append_writes(5, STORED_TAIL + 7, 3, 2)).expect("stacks on the second");
    assert_eq!(group.metas.len(), 1, "one meta write for the group");
    assert_eq!(group.metas[0].cond, MetaCond::Version { version: 3, incarnation: "i".into(), tail: Some(STORED_TAIL) });
    assert!(matches!(&group.metas[0].effect, MetaEffect::Put(m) if m.version == 6 && m.tail == STORED_TAIL + 10));
    assert_eq!(group.chunks.len(), 3);
    assert_eq!(group.producers.len(), 1, "the producer's last state only");
    assert_eq!(group.producers[0].state.last_seq, 2);
    assert!(group.check(&stored("a", 3, "i")).is_ok());
    assert!(group.check(&stored("a", 4, "i")).is_err());
}

#[test]
fn a_merge_that_does_not_stack_changes_nothing() {
    let mut group = append_writes(3, STORED_TAIL, 5, 0);
    let before = group.clone();
    // Planned on the stored state too (beside the first, not on it).
    assert!(matches!(group.merge(append_writes(3, STORED_TAIL, 2, 1)), Err(Merge::Conflict)));
    // Planned on the right version but another tail.
    assert!(matches!(group.merge(append_writes(4, STORED_TAIL + 6, 2, 1)), Err(Merge::Conflict)));
    assert_eq!(group, before);
    assert!(group.stacks_on(&append_writes(4, STORED_TAIL + 5, 1, 1)));
    assert!(!group.stacks_on(&append_writes(3, STORED_TAIL, 1, 1)));
    // A delete is its own commit.
    let del = NetWrites::fold(Commit { ops: vec![delete("a", "i", 4)] }).expect("folds");
    assert!(matches!(group.merge(del), Err(Merge::Apart(_))));
    assert_eq!(group, before);
}

#[test]
fn merged_records_keep_the_first_precondition() {
    let rec = |revision: u64, expect| Op::PutRecord {
        path: "a".into(),
        incarnation: "i".into(),
        key: "k".into(),
        record: Record { revision, value: Bytes::from_static(b"v") },
        expect,
    };
    let mut group = NetWrites::fold(Commit { ops: vec![rec(1, RecordExpect::Absent)] }).expect("folds");
    let again = NetWrites::fold(Commit { ops: vec![rec(1, RecordExpect::Absent)] }).expect("folds");
    assert!(matches!(group.merge(again), Err(Merge::Conflict)), "a second writer of one key");
    let next = NetWrites::fold(Commit { ops: vec![rec(2, RecordExpect::Revision(1))] }).expect("folds");
    group.merge(next).expect("the next revision stacks");
    assert_eq!(group.records.len(), 1);
    assert_eq!(group.records[0].expect, Some(RecordExpect::Absent));
    assert_eq!(group.records[0].record.revision, 2);
}
