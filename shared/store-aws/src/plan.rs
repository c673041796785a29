//! Turn a core [`Commit`] into the item writes of one `TransactWriteItems`.
//!
//! The core's commit semantics (shared with the memory store): ops are
//! evaluated in order, each against the state left by the ops before it. A
//! DynamoDB transaction may touch each item only once, so the meta ops of one
//! path are folded here: the transaction carries the **first** op's
//! precondition (checked by DynamoDB against the stored item) and the **last**
//! op's effect; the preconditions of the later ops are checked locally
//! against the staged state (a failure is a [`PlanError::Conflict`] without
//! any AWS call, exactly as the memory store would fail).

use std::collections::HashMap;

use bytes::Bytes;
use ds_core::{Commit, Expect, Op, ProducerState, StreamMeta};

/// Precondition on a stream's stored meta item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaCond {
    /// No meta item exists.
    Absent,
    /// The meta item exists with this version *and* incarnation (a stale
    /// writer of a deleted-and-re-created stream can never match).
    Version { version: u64, incarnation: String },
}

/// The net effect on a stream's meta item.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaEffect {
    Put(Box<StreamMeta>),
    Delete,
    /// Net no-op (e.g. create then delete in one commit): only the
    /// precondition is checked.
    CheckOnly,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MetaWrite {
    pub path: String,
    pub cond: MetaCond,
    pub effect: MetaEffect,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChunkWrite {
    pub path: String,
    pub incarnation: String,
    pub start: u64,
    pub data: Bytes,
}

impl ChunkWrite {
    pub fn end(&self) -> u64 {
        self.start + self.data.len() as u64
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProducerWrite {
    pub path: String,
    pub incarnation: String,
    pub producer_id: String,
    pub state: ProducerState,
}

/// Everything one commit writes, ready to become transaction items.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub metas: Vec<MetaWrite>,
    pub chunks: Vec<ChunkWrite>,
    pub producers: Vec<ProducerWrite>,
    /// `(path, incarnation)` whose chunks and producers become garbage once
    /// the commit is applied (a `DeleteStream`).
    pub wiped: Vec<(String, String)>,
}

impl Plan {
    /// Number of transaction items the plan needs.
    pub fn item_count(&self) -> usize {
        self.metas.len() + self.chunks.len() + self.producers.len()
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    /// A later op's precondition fails against the state staged by earlier
    /// ops of the same commit, or two chunks of the commit overlap.
    #[error("commit precondition fails within the commit itself")]
    Conflict,
}

/// Staged state of one path's meta while folding: `None` = absent.
struct Staged {
    cond: MetaCond,
    state: Option<(u64, String)>,
    effect: MetaEffect,
}

/// Fold `commit` into a [`Plan`] (see the module docs).
pub fn plan(commit: &Commit) -> Result<Plan, PlanError> {
    let mut order: Vec<String> = Vec::new();
    let mut staged: HashMap<String, Staged> = HashMap::new();
    let mut out = Plan::default();
    let mut producers: Vec<ProducerWrite> = Vec::new();

    for op in &commit.ops {
        match op {
            Op::PutMeta { meta, expect } => {
                let next = Some((meta.version, meta.incarnation.clone()));
                match staged.get_mut(&meta.path) {
                    None => {
                        let cond = match expect {
                            Expect::Absent => MetaCond::Absent,
                            Expect::Version(v) => {
                                MetaCond::Version { version: *v, incarnation: meta.incarnation.clone() }
                            }
                        };
                        order.push(meta.path.clone());
                        staged.insert(
                            meta.path.clone(),
                            Staged { cond, state: next, effect: MetaEffect::Put(Box::new(meta.clone())) },
                        );
                    }
                    Some(s) => {
                        let holds = match (expect, &s.state) {
                            (Expect::Absent, None) => true,
                            (Expect::Version(v), Some((stored, _))) => v == stored,
                            _ => false,
                        };
                        if !holds {
                            return Err(PlanError::Conflict);
                        }
                        s.state = next;
                        s.effect = MetaEffect::Put(Box::new(meta.clone()));
                    }
                }
            }
            Op::DeleteStream { path, incarnation, expect_version } => {
                match staged.get_mut(path) {
                    None => {
                        order.push(path.clone());
                        staged.insert(
                            path.clone(),
                            Staged {
                                cond: MetaCond::Version { version: *expect_version, incarnation: incarnation.clone() },
                                state: None,
                                effect: MetaEffect::Delete,
                            },
                        );
                    }
                    Some(s) => {
                        let holds = matches!(&s.state, Some((v, inc)) if v == expect_version && inc == incarnation);
                        if !holds {
                            return Err(PlanError::Conflict);
                        }
                        s.state = None;
                        s.effect = match s.cond {
                            MetaCond::Absent => MetaEffect::CheckOnly,
                            MetaCond::Version { .. } => MetaEffect::Delete,
                        };
                    }
                }
                out.wiped.push((path.clone(), incarnation.clone()));
            }
            Op::PutChunk { path, incarnation, chunk } => {
                if chunk.data.is_empty() {
                    continue; // empty chunks hold and are not stored
                }
                let w = ChunkWrite {
                    path: path.clone(),
                    incarnation: incarnation.clone(),
                    start: chunk.start,
                    data: chunk.data.clone(),
                };
                let overlaps = out.chunks.iter().any(|c| {
                    c.path == w.path && c.incarnation == w.incarnation && c.start < w.end() && w.start < c.end()
                });
                if overlaps {
                    return Err(PlanError::Conflict);
                }
                out.chunks.push(w);
            }
            Op::PutProducer { path, incarnation, producer_id, state } => {
                // One item per producer: the last write of the commit wins.
                producers
                    .retain(|p| !(p.path == *path && p.incarnation == *incarnation && p.producer_id == *producer_id));
                producers.push(ProducerWrite {
                    path: path.clone(),
                    incarnation: incarnation.clone(),
                    producer_id: producer_id.clone(),
                    state: *state,
                });
            }
        }
    }
    for path in order {
        if let Some(s) = staged.remove(&path) {
            out.metas.push(MetaWrite { path, cond: s.cond, effect: s.effect });
        }
    }
    out.producers = producers;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ds_core::Chunk;

    fn meta(path: &str, inc: &str, version: u64) -> StreamMeta {
        StreamMeta {
            path: path.into(),
            incarnation: inc.into(),
            version,
            content_type: "x".into(),
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

    #[test]
    fn delete_then_create_folds_into_one_conditional_put() {
        let commit = Commit {
            ops: vec![
                Op::DeleteStream { path: "a".into(), incarnation: "old".into(), expect_version: 4 },
                Op::PutMeta { meta: meta("a", "new", 0), expect: Expect::Absent },
            ],
        };
        let p = plan(&commit).expect("plans");
        assert_eq!(p.metas.len(), 1);
        assert_eq!(p.metas[0].cond, MetaCond::Version { version: 4, incarnation: "old".into() });
        assert!(matches!(&p.metas[0].effect, MetaEffect::Put(m) if m.incarnation == "new"));
        assert_eq!(p.wiped, vec![("a".to_owned(), "old".to_owned())]);
    }

    #[test]
    fn inner_preconditions_are_checked_locally() {
        let bad = Commit {
            ops: vec![
                Op::PutMeta { meta: meta("a", "i", 1), expect: Expect::Version(0) },
                Op::PutMeta { meta: meta("a", "i", 2), expect: Expect::Version(0) },
            ],
        };
        assert_eq!(plan(&bad), Err(PlanError::Conflict));
        let overlapping = Commit {
            ops: vec![
                Op::PutChunk {
                    path: "a".into(),
                    incarnation: "i".into(),
                    chunk: Chunk { start: 0, data: Bytes::from_static(b"abc") },
                },
                Op::PutChunk {
                    path: "a".into(),
                    incarnation: "i".into(),
                    chunk: Chunk { start: 2, data: Bytes::from_static(b"de") },
                },
            ],
        };
        assert_eq!(plan(&overlapping), Err(PlanError::Conflict));
        let create_then_delete = Commit {
            ops: vec![
                Op::PutMeta { meta: meta("a", "i", 0), expect: Expect::Absent },
                Op::DeleteStream { path: "a".into(), incarnation: "i".into(), expect_version: 0 },
            ],
        };
        let p = plan(&create_then_delete).expect("plans");
        assert_eq!(p.metas[0].effect, MetaEffect::CheckOnly);
        assert_eq!(p.metas[0].cond, MetaCond::Absent);
    }

    #[test]
    fn empty_chunks_vanish_and_last_producer_write_wins() {
        let commit = Commit {
            ops: vec![
                Op::PutChunk {
                    path: "a".into(),
                    incarnation: "i".into(),
                    chunk: Chunk { start: 0, data: Bytes::new() },
                },
                Op::PutProducer {
                    path: "a".into(),
                    incarnation: "i".into(),
                    producer_id: "p".into(),
                    state: ProducerState { epoch: 0, last_seq: 1 },
                },
                Op::PutProducer {
                    path: "a".into(),
                    incarnation: "i".into(),
                    producer_id: "p".into(),
                    state: ProducerState { epoch: 0, last_seq: 2 },
                },
            ],
        };
        let p = plan(&commit).expect("plans");
        assert!(p.chunks.is_empty());
        assert_eq!(p.producers.len(), 1);
        assert_eq!(p.producers[0].state.last_seq, 2);
    }
}
