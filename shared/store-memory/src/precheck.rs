//! Commit precondition evaluation, shared by every store that applies a
//! [`Commit`] itself (memory, local).
//!
//! Semantics (the contract both stores implement):
//! - Ops are evaluated **in order**, each against the state left by the ops
//!   before it in the same commit (so `DeleteStream` followed by
//!   `PutMeta { expect: Absent }` on the same path re-creates it).
//! - `PutMeta { expect: Absent }` holds when no meta record exists;
//!   `PutMeta { expect: Version(v) }` when the record exists with version `v`
//!   and the incarnation of the new meta (stricter than the trait requires:
//!   a stale writer never resurrects a deleted incarnation over a re-created
//!   stream that happens to be at the same version).
//! - `DeleteStream` holds when the record exists with `expect_version` *and*
//!   the named incarnation (a stale delete never removes a re-created stream).
//! - `PutChunk` holds when the chunk overlaps no stored chunk of its
//!   `(path, incarnation)` and no earlier chunk of the same commit: positions
//!   are stable forever, so an overlapping write can only come from a stale
//!   writer. Empty chunks always hold (and are not stored).
//! - `PutProducer` has no precondition.
//!
//! If any op fails the whole commit fails with [`StoreError::Conflict`] and the
//! caller applies nothing.

use std::collections::{HashMap, HashSet};

use ds_core::{Commit, Expect, Op, StoreError};

/// The stored state a commit's preconditions are checked against.
pub trait StateView {
    /// `(version, incarnation)` of the stored meta record at `path`.
    fn meta_version(&self, path: &str) -> Result<Option<(u64, String)>, StoreError>;
    /// Whether a stored chunk of `(path, incarnation)` overlaps `[start, end)`
    /// (`start < end`).
    fn chunk_overlaps(&self, path: &str, incarnation: &str, start: u64, end: u64) -> Result<bool, StoreError>;
}

/// Check every precondition of `commit` against `view` (see module docs).
/// `Ok(())` means the caller may apply all ops; nothing is modified here.
pub fn check_commit(commit: &Commit, view: &impl StateView) -> Result<(), StoreError> {
    // Meta records as left by the ops evaluated so far (None = removed).
    let mut staged: HashMap<&str, Option<(u64, &str)>> = HashMap::new();
    // (path, incarnation) whose stored chunks an earlier DeleteStream removed.
    let mut wiped: HashSet<(&str, &str)> = HashSet::new();
    // Chunks written by earlier ops of this commit: (path, incarnation, start, end).
    let mut written: Vec<(&str, &str, u64, u64)> = Vec::new();

    for op in &commit.ops {
        match op {
            Op::PutMeta { meta, expect } => {
                let current = current_version(&staged, view, &meta.path)?;
                let holds = match (expect, current) {
                    (Expect::Absent, None) => true,
                    // Same incarnation too: a version bump never changes it, and
                    // without this a writer holding a deleted incarnation's meta
                    // could overwrite a re-created stream that reached the same
                    // version (ABA across writers that share no lock).
                    (Expect::Version(v), Some((stored, inc))) => *v == stored && inc == meta.incarnation,
                    _ => false,
                };
                if !holds {
                    return Err(StoreError::Conflict);
                }
                staged.insert(&meta.path, Some((meta.version, &meta.incarnation)));
            }
            Op::DeleteStream { path, incarnation, expect_version } => {
                let current = current_version(&staged, view, path)?;
                let holds = current.is_some_and(|(v, inc)| v == *expect_version && inc == *incarnation);
                if !holds {
                    return Err(StoreError::Conflict);
                }
                staged.insert(path, None);
                wiped.insert((path, incarnation));
            }
            Op::PutChunk { path, incarnation, chunk } => {
                if chunk.data.is_empty() {
                    continue;
                }
                let (start, end) = (chunk.start, chunk.end());
                let clashes_written =
                    written.iter().any(|&(p, i, s, e)| p == path && i == incarnation && s < end && start < e);
                let clashes_stored = !wiped.contains(&(path.as_str(), incarnation.as_str()))
                    && view.chunk_overlaps(path, incarnation, start, end)?;
                if clashes_written || clashes_stored {
                    return Err(StoreError::Conflict);
                }
                written.push((path, incarnation, start, end));
            }
            Op::PutProducer { .. } => {}
        }
    }
    Ok(())
}

/// The meta `(version, incarnation)` at `path` as seen by the next op.
fn current_version<'a>(
    staged: &HashMap<&'a str, Option<(u64, &'a str)>>,
    view: &impl StateView,
    path: &str,
) -> Result<Option<(u64, String)>, StoreError> {
    match staged.get(path) {
        Some(entry) => Ok(entry.map(|(v, inc)| (v, inc.to_owned()))),
        None => view.meta_version(path),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use ds_core::{Chunk, StreamMeta};

    use super::*;

    /// Stored metas by path, and stored chunks as (path, incarnation, start, end).
    struct View(HashMap<String, (u64, String)>, Vec<(String, String, u64, u64)>);

    impl StateView for View {
        fn meta_version(&self, path: &str) -> Result<Option<(u64, String)>, StoreError> {
            Ok(self.0.get(path).cloned())
        }
        fn chunk_overlaps(&self, p: &str, i: &str, start: u64, end: u64) -> Result<bool, StoreError> {
            Ok(self.1.iter().any(|(cp, ci, s, e)| cp == p && ci == i && *s < end && start < *e))
        }
    }

    fn meta(path: &str, incarnation: &str, version: u64) -> StreamMeta {
        StreamMeta {
            path: path.into(),
            incarnation: incarnation.into(),
            version,
            content_type: String::new(),
            created_at_ms: 0,
            tail: 0,
            closed: false,
            closed_by: None,
            ttl_secs: None,
            expires_at_ms: None,
            touched_at_ms: 0,
            last_stream_seq: None,
            fork: None,
            ref_count: 0,
            soft_deleted: false,
        }
    }

    fn put(m: StreamMeta, expect: Expect) -> Op {
        Op::PutMeta { meta: m, expect }
    }

    fn chunk(start: u64, len: usize) -> Op {
        let data = bytes::Bytes::from(vec![0u8; len]);
        Op::PutChunk { path: "a".into(), incarnation: "new".into(), chunk: Chunk { start, data } }
    }

    fn check(view: &View, ops: Vec<Op>) -> bool {
        check_commit(&Commit { ops }, view).is_ok()
    }

    #[test]
    fn version_expectations_are_per_incarnation() {
        let view = View(HashMap::from([("a".to_owned(), (3, "new".to_owned()))]), Vec::new());
        assert!(check(&view, vec![put(meta("a", "new", 4), Expect::Version(3))]));
        assert!(!check(&view, vec![put(meta("a", "old", 4), Expect::Version(3))]));
    }

    #[test]
    fn ops_see_the_earlier_ops_of_their_commit() {
        let view = View(HashMap::from([("a".to_owned(), (3, "old".to_owned()))]), Vec::new());
        let delete = Op::DeleteStream { path: "a".into(), incarnation: "old".into(), expect_version: 3 };
        assert!(check(&view, vec![delete.clone(), put(meta("a", "new", 0), Expect::Absent)]));
        assert!(!check(&view, vec![delete.clone(), delete]));
    }

    #[test]
    fn overlapping_chunks_conflict_but_adjacent_ones_do_not() {
        let stored = vec![("a".to_owned(), "new".to_owned(), 0, 10)];
        let view = View(HashMap::new(), stored);
        assert!(check(&view, vec![chunk(10, 5), chunk(15, 1), chunk(16, 0)]));
        assert!(!check(&view, vec![chunk(9, 5)]));
        assert!(!check(&view, vec![chunk(10, 5), chunk(14, 2)]));
    }
}
