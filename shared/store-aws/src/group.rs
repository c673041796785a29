//! Group commit: while a transaction for a stream is in flight, the commits
//! submitted for it in this process queue, and go together in its next
//! `TransactWriteItems` — one meta update for all of them.
//!
//! # Why in the store
//! The service already pipelines appends ([`ds_core::StreamStore::submit`]):
//! under the stream's lock it plans each append on the state the appends in
//! flight predict — so each keeps its own producer, `Stream-Seq`, closed
//! and content-type checks, evaluated in order against the state the earlier
//! ones leave, and a refused append fails alone without ever reaching a
//! queue — submits it, and waits for durability *without* the lock. What
//! AWS lacked was a submission that returns before the commit is durable:
//! its `submit` ran the transaction, so the lock was held for a whole round
//! trip and one stream made one commit per round trip. Here `submit` only
//! queues the commit's net writes and returns its acknowledgement; the store
//! is the one that knows what fits a transaction (items, bytes, the inline
//! threshold, S3 pointers) and how to fold many commits into one
//! ([`NetWrites::merge`], the shared commit rules).
//!
//! # Rules
//! - **Order.** One driver task per stream (spawned when its queue goes
//!   from idle to busy, gone when it empties) runs the queue in submission
//!   order: a group is the longest prefix that merges within the limits
//!   below. A lone writer's commit is sent at once: no added latency, one
//!   call. After a group is applied, the driver waits a moment (an eighth
//!   of its round trip, 0.5–4 ms) for that group's writers to send their
//!   next appends before it takes the next group, so a stream's writers
//!   stay in one group instead of splitting into cohorts that alternate
//!   ([`crate::group_queue::Queue::gather`]; it doubled one hot stream's
//!   appends per second under the AWS model).
//! - **Each commit its own answer.** The group's outcome is every member's:
//!   applied (each acknowledged in queue order, each with its own offset),
//!   lost race (`Conflict`: each re-planned by the service with the fresh
//!   meta the race returned, after its jittered back-off), unknown (each
//!   `Unavailable`, with the group's one commit id deciding a retried
//!   attempt exactly as for a single commit in [`crate::txn`]).
//! - **Alone when it does not stack.** A queued commit that cannot apply
//!   after the group before it (planned beside the pipeline, on a state the
//!   group will move past) fails alone with `Conflict`, never sent. After a
//!   group fails, the queued commits stacked on it fail with `Conflict` at
//!   once: a lost race costs one conditional-check failure per group, not
//!   one per queued commit. After a lost race the driver pauses (2–10 ms,
//!   jittered, growing with the races lost in a row) while the members,
//!   told the store paces ([`ds_core::StreamStore::paces_conflicts`]),
//!   re-plan at once on the meta the race returned: the whole batch goes
//!   again as one group.
//! - **Chains.** The service submits each pipelined append in its
//!   pipeline's [`ds_core::Chain`] (the store chains while group commit is
//!   on: a queued commit applies after `submit` returned, so appends are
//!   stacked on ones not yet applied). A commit that is not applied breaks
//!   its chain — the members of a group that failed in any way (lost race,
//!   refused, error, unknown outcome), before any of them is answered; a
//!   commit refused for not stacking, as it is taken off the queue; the
//!   ones a failed group takes down. A queued commit whose chain is broken
//!   when its turn comes fails with `Conflict`, never sent (merged into no
//!   group). Why the rule above is not enough: a condition names the state
//!   it was planned on by version and tail only, and another process can
//!   leave another state under the same pair. A commit stacked on a failed
//!   group but submitted after that group's queue emptied, or stacked on a
//!   commit refused beside the group, would pass its condition against
//!   that state and apply on a plan that never held (an idempotent
//!   producer's next `Stream-Seq` applied though the one before it never
//!   was; an append past another process's close). A commit not queued
//!   (below; every commit with group commit off) has its turn as it is
//!   submitted: refused then if its chain is broken, breaking it unless
//!   applied.
//! - **Apart.** Commits that delete a meta or wipe an incarnation go as
//!   their own transaction, in their place in the queue; commits of several
//!   streams (a fork and its source) are not queued and apply as submitted.
//! - **Bounded.** Each stream's queue holds at most [`MAX_QUEUED_BYTES`]
//!   (payload plus a fixed cost per commit); beyond it the submission waits
//!   (`submit`, or `submit_chained` keeping the commit's chain) — under the
//!   stream's lock, so the stream's other writers wait too.
//! - **Limits.** A group holds at most [`crate::txn::MAX_TRANSACTION_ITEMS`]
//!   items, [`MAX_GROUP_INLINE_BYTES`] of inline chunk bytes and
//!   [`MAX_GROUP_OBJECTS`] S3 bodies; consecutive small chunks are joined
//!   into one chunk item up to the inline threshold (a chunk may hold
//!   several whole appends: [`ds_core::StreamStore`]'s chunk invariants).

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::BytesMut;
use ds_core::fold::{ChunkWrite, Merge, NetWrites};
use ds_core::{Chain, Commit, Op, PendingCommit, StoreError, TrySubmit};
use tokio::sync::{oneshot, OwnedSemaphorePermit};

use crate::backend::Backend;
use crate::group_queue::{lock, Queue, Queued};
use crate::registry::StreamCtx;
use crate::txn::{self, MAX_TRANSACTION_ITEMS};

pub use crate::group_queue::MAX_QUEUED_BYTES;
/// What a queued commit costs beyond its payload (its writes, its channel).
const COMMIT_COST: usize = 1024;
/// Most inline chunk and record bytes in one group: DynamoDB caps a
/// transaction at 4 MB, keys and attributes included.
pub const MAX_GROUP_INLINE_BYTES: usize = 2 * 1024 * 1024;
/// Most S3 bodies in one group (uploaded one after another before the
/// transaction).
pub const MAX_GROUP_OBJECTS: usize = 4;

/// The one stream whose meta `commit` writes, if it writes exactly one.
fn queued_path(commit: &Commit) -> Option<String> {
    let mut paths = commit.meta_paths();
    let first = paths.next()?;
    paths.all(|p| p == first).then(|| first.to_owned())
}

fn cost_of(commit: &Commit) -> u32 {
    let payload: usize = commit
        .ops
        .iter()
        .map(|op| match op {
            Op::PutChunk { chunk, .. } => chunk.data.len(),
            Op::PutRecord { record, .. } => record.value.len(),
            _ => 0,
        })
        .sum();
    u32::try_from(payload.saturating_add(COMMIT_COST).min(MAX_QUEUED_BYTES)).unwrap_or(u32::MAX)
}

/// [`ds_core::StreamStore::try_submit`] (and `try_submit_chained`, with
/// the commit's `chain`): queued at once when the stream's queue has room.
pub(crate) fn try_submit(b: &Arc<Backend>, commit: Commit, chain: Option<&Chain>) -> TrySubmit {
    let Some(path) = queued_path(&commit).filter(|_| b.cfg.group_commit) else { return TrySubmit::WouldWait(commit) };
    let ctx = b.registry.get(&path);
    match Arc::clone(&ctx.group.room).try_acquire_many_owned(cost_of(&commit)) {
        Ok(room) => TrySubmit::Submitted(enqueue(b, &ctx, commit, room, chain)),
        Err(_) => TrySubmit::WouldWait(commit),
    }
}

/// [`ds_core::StreamStore::submit`] (and `submit_chained`, with the
/// commit's `chain`): queued once the stream's queue has room; a commit of
/// several streams (or any, with group commit off) is applied before
/// returning.
pub(crate) async fn submit(
    b: &Arc<Backend>,
    commit: Commit,
    chain: Option<&Chain>,
) -> Result<PendingCommit, StoreError> {
    let Some(path) = queued_path(&commit).filter(|_| b.cfg.group_commit) else {
        let result = commit_alone(b, commit, chain).await;
        if b.cfg.group_commit && matches!(result, Err(StoreError::Conflict)) {
            // The core re-plans at once (`paces_conflicts`): the pause is here.
            tokio::time::sleep(race_backoff(b, 1)).await;
        }
        result?;
        return Ok(PendingCommit::done(Ok(())));
    };
    let ctx = b.registry.get(&path);
    let Ok(room) = Arc::clone(&ctx.group.room).acquire_many_owned(cost_of(&commit)).await else {
        chain.iter().for_each(|c| c.break_off());
        return Err(StoreError::backend("group commit", "the stream's queue was closed"));
    };
    enqueue(b, &ctx, commit, room, chain)
}

/// A commit not queued, applied as it is submitted: its turn is now, so a
/// broken `chain` refuses it unsent, and it breaks `chain` unless applied.
async fn commit_alone(b: &Backend, commit: Commit, chain: Option<&Chain>) -> Result<(), StoreError> {
    if chain.is_some_and(Chain::is_broken) {
        return Err(StoreError::Conflict);
    }
    let result = txn::commit(b, commit).await;
    if result.is_err() {
        chain.iter().for_each(|c| c.break_off());
    }
    result
}

fn enqueue(
    b: &Arc<Backend>,
    ctx: &Arc<StreamCtx>,
    commit: Commit,
    room: OwnedSemaphorePermit,
    chain: Option<&Chain>,
) -> Result<PendingCommit, StoreError> {
    let writes = NetWrites::fold(commit).inspect_err(|_| chain.iter().for_each(|c| c.break_off()))?;
    let (ack, acked) = oneshot::channel();
    let start = {
        let mut state = lock(&ctx.group.state);
        state.waiting.push_back(Queued { writes, ack, chain: chain.cloned(), _room: room });
        !std::mem::replace(&mut state.driving, true)
    };
    ctx.group.arrivals.notify_waiters();
    if start {
        tokio::spawn(drive(Arc::clone(b), Arc::clone(ctx)));
    }
    Ok(PendingCommit::acked(acked))
}

/// Run `ctx`'s queue until it is empty (see the module docs).
async fn drive(b: Arc<Backend>, ctx: Arc<StreamCtx>) {
    let mut lost_races = 0u32;
    while let Some(Group { writes, members, refused }) = next_group(&ctx.group, b.cfg.inline_threshold) {
        // What a failed group leaves behind for the queued commits stacked on it.
        let metas = NetWrites { metas: writes.metas.clone(), ..NetWrites::default() };
        let sent = tokio::time::Instant::now();
        let result = txn::commit_writes(&b, writes).await;
        let round_trip = sent.elapsed();
        let answered = members.len();
        let failed = result.is_err();
        let lost = matches!(result, Err(StoreError::Conflict));
        if failed {
            // Not applied, or not known to be: every member's chain breaks
            // before anyone hears of it, so no commit stacked on a member
            // (queued, or submitted once this queue empties) is sent.
            members.iter().for_each(Queued::break_chain);
        }
        for member in members {
            // A member whose caller went away: its outcome is the group's all the same.
            member.answer(result.clone());
        }
        // Answered only now the group is settled (its outcome in the
        // cache): re-planned at once, they would read the state they were
        // planned on again and be refused again while the group is in flight.
        for r in refused {
            r.answer(Err(StoreError::Conflict));
        }
        if failed {
            drop_stacked(&ctx.group, metas);
        }
        lost_races = if lost { lost_races.saturating_add(1) } else { 0 };
        if lost {
            // Another process committed first. The members re-plan at once
            // on the meta the race returned and re-queue meanwhile: the
            // whole batch goes again as one group (not the first re-planned
            // append alone, the rest behind it), a little apart from the
            // other processes' next attempts.
            tokio::time::sleep(race_backoff(&b, lost_races)).await;
        } else if !failed {
            // The writers just answered rejoin the ones queued meanwhile.
            let queued = lock(&ctx.group.state).waiting.len();
            ctx.group.gather(queued + answered, linger(round_trip)).await;
        }
    }
}

/// How long the driver waits for the writers of a group just applied to
/// rejoin the queue ([`crate::group_queue::Queue::gather`]): an eighth of
/// the transaction's round trip, within 0.5–4 ms — a small share of the
/// round it saves, and enough for a client's answer-to-next-request turn.
fn linger(round_trip: std::time::Duration) -> std::time::Duration {
    (round_trip / 8).clamp(std::time::Duration::from_micros(500), std::time::Duration::from_millis(4))
}

/// The driver's pause after its `lost`-th lost race in a row: longer than
/// the core's re-plan of a refused commit (at most 1 ms: the store paces,
/// [`ds_core::StreamStore::paces_conflicts`]), jittered, growing a little.
/// Short on purpose: the race returned the stream's current meta, so the
/// sooner the re-planned group goes, the better its chance; a lost race
/// costs one conditional-check failure for a whole group.
fn race_backoff(b: &Backend, lost: u32) -> std::time::Duration {
    let spread = (1u64 << lost.min(3)) * 1000;
    std::time::Duration::from_micros(2000 + b.random.in_range(0..=spread))
}

/// One transaction's worth of the queue.
struct Group {
    /// The members' writes merged, chunks joined.
    writes: NetWrites,
    /// In queue order; each answered with the transaction's outcome.
    members: Vec<Queued>,
    /// Taken off the queue but not stacking on the group (planned beside
    /// it), or of a broken chain: answered `Conflict` once the group is
    /// settled.
    refused: Vec<Queued>,
}

/// Take the next group off the queue, chunks joined up to `limit` (the
/// inline threshold). `None` (and the driver stops) when the queue is empty.
fn next_group(queue: &Queue, limit: usize) -> Option<Group> {
    let mut state = lock(&queue.state);
    let mut head = loop {
        let Some(head) = state.waiting.pop_front() else {
            state.driving = false;
            return None;
        };
        if !head.chain_broken() {
            break head;
        }
        // Stacked on a commit not applied: refused unsent, at once (nothing
        // of this queue is in flight to re-plan beside).
        head.answer(Err(StoreError::Conflict));
    };
    let mut group = std::mem::take(&mut head.writes);
    let mut members = vec![head];
    let mut refused = Vec::new();
    while let Some(next) = state.waiting.front() {
        let broken = next.chain_broken();
        if !broken && !fits(&group, &next.writes, limit) {
            break;
        }
        let Some(mut next) = state.waiting.pop_front() else { break };
        if broken {
            // Its condition may name another process's state: never merged.
            refused.push(next);
            continue;
        }
        match group.merge(std::mem::take(&mut next.writes)) {
            Ok(()) => members.push(next),
            // It cannot apply after the group: it fails alone, unsent, and
            // breaks its chain now, so what is stacked on it joins no group.
            Err(Merge::Conflict) => {
                next.break_chain();
                refused.push(next);
            }
            Err(Merge::Apart(writes)) => {
                next.writes = *writes;
                state.waiting.push_front(next);
                break;
            }
        }
    }
    drop(state);
    group.chunks = join_chunks(std::mem::take(&mut group.chunks), limit);
    Some(Group { writes: group, members, refused })
}

/// Whether `group` with `next` merged in stays within a transaction's
/// limits (an upper bound: producer rows written twice count twice).
fn fits(group: &NetWrites, next: &NetWrites, limit: usize) -> bool {
    let (pieces, inline, objects) = footprint(group.chunks.iter().chain(&next.chunks), limit);
    let new_metas = next.metas.iter().filter(|m| !group.metas.iter().any(|g| g.path == m.path)).count();
    let items = group.metas.len()
        + new_metas
        + pieces
        + group.producers.len()
        + next.producers.len()
        + group.records.len()
        + next.records.len();
    let records: usize = group.records.iter().chain(&next.records).map(|r| r.record.value.len()).sum();
    items <= MAX_TRANSACTION_ITEMS && inline + records <= MAX_GROUP_INLINE_BYTES && objects <= MAX_GROUP_OBJECTS
}

/// Chunk items, inline bytes and S3 bodies of `chunks` once joined.
fn footprint<'a>(chunks: impl Iterator<Item = &'a ChunkWrite>, limit: usize) -> (usize, usize, usize) {
    let (mut pieces, mut inline, mut objects) = (0, 0, 0);
    let mut run: Option<(&ChunkWrite, usize)> = None;
    for c in chunks {
        if c.data.len() > limit {
            objects += 1;
            pieces += 1;
            run = None;
            continue;
        }
        inline += c.data.len();
        match run {
            Some((last, len)) if joins(last, c, len, limit) => run = Some((c, len + c.data.len())),
            _ => {
                pieces += 1;
                run = Some((c, c.data.len()));
            }
        }
    }
    (pieces, inline, objects)
}

/// Whether `next` continues `last` (a run of `len` bytes ending with it)
/// within one inline chunk item.
fn joins(last: &ChunkWrite, next: &ChunkWrite, len: usize, limit: usize) -> bool {
    last.path == next.path
        && last.incarnation == next.incarnation
        && last.end() == next.start
        && last.check_stored == next.check_stored
        && len + next.data.len() <= limit
}

/// Consecutive small chunks joined into one chunk item each run (fewer
/// items per transaction, fewer pieces to read back).
fn join_chunks(chunks: Vec<ChunkWrite>, limit: usize) -> Vec<ChunkWrite> {
    let mut out: Vec<ChunkWrite> = Vec::with_capacity(chunks.len());
    let mut run: Vec<ChunkWrite> = Vec::new();
    let mut run_len = 0;
    let flush = |run: &mut Vec<ChunkWrite>, out: &mut Vec<ChunkWrite>| {
        if run.len() <= 1 {
            out.append(run);
            return;
        }
        let mut data = BytesMut::with_capacity(run.iter().map(|c| c.data.len()).sum());
        run.iter().for_each(|c| data.extend_from_slice(&c.data));
        let first = run.swap_remove(0);
        run.clear();
        out.push(ChunkWrite { data: data.freeze(), ..first });
    };
    for c in chunks {
        let small = c.data.len() <= limit;
        let continues = small && run.last().is_some_and(|last| joins(last, &c, run_len, limit));
        if !continues {
            flush(&mut run, &mut out);
            run_len = 0;
        }
        if small {
            run_len += c.data.len();
            run.push(c);
        } else {
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// After a failed group: the queued commits stacked on it (planned on the
/// state it would have left) cannot apply either; they fail with `Conflict`
/// now, unsent (breaking their chains), and so do the ones stacked on them.
fn drop_stacked(queue: &Queue, mut failed: NetWrites) {
    let mut state = lock(&queue.state);
    let mut kept = VecDeque::with_capacity(state.waiting.len());
    for queued in state.waiting.drain(..) {
        if failed.stacks_on(&queued.writes) {
            let metas = NetWrites { metas: queued.writes.metas.clone(), ..NetWrites::default() };
            let _ = failed.merge(metas);
            queued.answer(Err(StoreError::Conflict));
        } else {
            kept.push_back(queued);
        }
    }
    state.waiting = kept;
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn chunk(start: u64, len: usize) -> ChunkWrite {
        ChunkWrite {
            path: "a".into(),
            incarnation: "i".into(),
            start,
            data: Bytes::from(vec![u8::try_from(start % 251).unwrap_or(0); len]),
            check_stored: true,
        }
    }

    /// The net writes of an append at `(version, tail)` of `len` bytes, with
    /// producer `p` when given.
    fn append(version: u64, tail: u64, len: usize, p: Option<usize>) -> NetWrites {
        let mut next = ds_core::contract::fixtures::new_meta("a");
        (next.incarnation, next.version, next.tail) = ("i".into(), version + 1, tail + len as u64);
        let mut ops = vec![
            Op::PutMeta { meta: next, expect: ds_core::Expect::VersionAt { version, tail } },
            Op::PutChunk {
                path: "a".into(),
                incarnation: "i".into(),
                chunk: ds_core::Chunk { start: tail, data: Bytes::from(vec![b'x'; len]) },
            },
        ];
        if let Some(p) = p {
            ops.push(Op::PutProducer {
                path: "a".into(),
                incarnation: "i".into(),
                producer_id: format!("p{p}"),
                state: ds_core::ProducerState { epoch: 0, last_seq: 0 },
            });
        }
        NetWrites::fold(Commit { ops }).expect("folds")
    }

    type Answers = Vec<oneshot::Receiver<Result<(), StoreError>>>;

    /// Queue `writes`; the receivers of their answers.
    fn queued(all: Vec<NetWrites>) -> (Queue, Answers) {
        queued_in(all.into_iter().map(|writes| (writes, None)).collect())
    }

    /// Queue `writes`, each in its chain if it has one.
    fn queued_in(all: Vec<(NetWrites, Option<&Chain>)>) -> (Queue, Answers) {
        let queue = Queue::default();
        let mut answers = Vec::new();
        for (writes, chain) in all {
            let (ack, rx) = oneshot::channel();
            let room = Arc::clone(&queue.room).try_acquire_many_owned(1).expect("room");
            lock(&queue.state).waiting.push_back(Queued { writes, ack, chain: chain.cloned(), _room: room });
            answers.push(rx);
        }
        (queue, answers)
    }

    #[test]
    fn a_group_stays_within_a_transaction() {
        // 150 appends of 100 B, each with a producer of its own: 1 meta +
        // 1 joined chunk + a producer row each, at most 100 items.
        let all = (0..150).map(|k| append(k, k * 100, 100, Some(k as usize))).collect();
        let (queue, _answers) = queued(all);
        let Group { writes: first, members, .. } = next_group(&queue, 32 * 1024).expect("a group");
        assert_eq!(first.metas.len(), 1, "one meta update");
        assert!(first.row_count() <= MAX_TRANSACTION_ITEMS, "{} items", first.row_count());
        assert_eq!(members.len(), first.producers.len());
        assert_eq!(first.chunks.len(), 1, "the bodies joined");
        assert!(members.len() >= 90, "as many as fit: {}", members.len());
        let Group { writes: second, members: rest, .. } = next_group(&queue, 32 * 1024).expect("the rest");
        assert_eq!(members.len() + rest.len(), 150);
        assert!(second.row_count() <= MAX_TRANSACTION_ITEMS);
        assert!(next_group(&queue, 32 * 1024).is_none(), "drained");
        assert!(!lock(&queue.state).driving, "the driver stops");
        // Without producers: bounded by the inline bytes (2 MiB of 30 KiB bodies).
        let all = (0..100).map(|k| append(k, k * 30_000, 30_000, None)).collect();
        let (queue, _answers) = queued(all);
        let Group { writes: group, members, .. } = next_group(&queue, 32 * 1024).expect("a group");
        assert!(group.chunk_bytes() <= MAX_GROUP_INLINE_BYTES);
        assert_eq!(members.len(), MAX_GROUP_INLINE_BYTES / 30_000);
    }

    #[test]
    fn a_commit_that_does_not_stack_fails_alone_and_a_failed_group_takes_its_stack_down() {
        // The second was planned beside the first (same base): refused,
        // unsent; the third stacks on the first and joins it.
        let (queue, mut answers) =
            queued(vec![append(0, 0, 10, None), append(0, 0, 10, None), append(1, 10, 10, None)]);
        let Group { writes: group, members, refused } = next_group(&queue, 32 * 1024).expect("a group");
        assert_eq!((members.len(), refused.len()), (2, 1));
        assert!(answers[1].try_recv().is_err(), "answered once the group is settled, not before");
        assert!(matches!(&group.metas[0].effect, ds_core::fold::MetaEffect::Put(m) if m.version == 2));
        // The group fails: the commits queued on top of it meanwhile fail too,
        // one planned on the stored state stays.
        let (queue, mut answers) = queued(vec![append(2, 20, 5, None), append(3, 25, 5, None), append(0, 0, 7, None)]);
        drop_stacked(&queue, NetWrites { metas: group.metas.clone(), ..NetWrites::default() });
        assert!(matches!(answers[0].try_recv(), Ok(Err(StoreError::Conflict))));
        assert!(matches!(answers[1].try_recv(), Ok(Err(StoreError::Conflict))));
        assert!(answers[2].try_recv().is_err(), "still queued");
        assert_eq!(lock(&queue.state).waiting.len(), 1);
    }

    #[test]
    fn a_commit_of_a_broken_chain_is_refused_unsent_even_where_its_condition_holds() {
        // R, planned beside the head (same base), is refused and breaks its
        // chain; S, stacked on R's prediction, names the state the head
        // leaves (same length) and would merge onto it: refused all the
        // same. The head's chain goes on.
        let (h, r) = (Chain::default(), Chain::default());
        let (queue, mut answers) = queued_in(vec![
            (append(0, 0, 10, None), Some(&h)),
            (append(0, 0, 10, Some(1)), Some(&r)),
            (append(1, 10, 10, Some(1)), Some(&r)),
            (append(1, 10, 5, None), Some(&h)),
        ]);
        let Group { writes: group, members, refused } = next_group(&queue, 32 * 1024).expect("a group");
        assert_eq!((members.len(), refused.len()), (2, 2), "the head and its chain's next; R and S refused");
        assert!(group.producers.is_empty(), "S joined no group");
        assert!(matches!(&group.metas[0].effect, ds_core::fold::MetaEffect::Put(m) if m.tail == 15));
        assert!(r.is_broken() && !h.is_broken());
        assert!(answers[2].try_recv().is_err(), "answered once the group is settled, not before");
        // A head of a broken chain is answered at once; the next one leads.
        let (queue, mut answers) = queued_in(vec![(append(1, 10, 10, None), Some(&r)), (append(0, 0, 4, None), None)]);
        let Group { members, refused, .. } = next_group(&queue, 32 * 1024).expect("a group");
        assert!(matches!(answers[0].try_recv(), Ok(Err(StoreError::Conflict))));
        assert_eq!((members.len(), refused.len()), (1, 0));
        // The commits a failed group takes down break their chains.
        let d = Chain::default();
        let (queue, mut answers) = queued_in(vec![(append(2, 15, 5, None), Some(&d))]);
        drop_stacked(&queue, NetWrites { metas: group.metas.clone(), ..NetWrites::default() });
        assert!(matches!(answers[0].try_recv(), Ok(Err(StoreError::Conflict))));
        assert!(d.is_broken());
    }

    #[test]
    fn consecutive_small_chunks_join_up_to_the_limit() {
        let chunks = vec![chunk(0, 4), chunk(4, 4), chunk(8, 4), chunk(12, 20), chunk(32, 3), chunk(40, 1)];
        let (pieces, inline, objects) = footprint(chunks.iter(), 12);
        let joined = join_chunks(chunks.clone(), 12);
        let spans: Vec<(u64, u64)> = joined.iter().map(|c| (c.start, c.end())).collect();
        // 0..12 joined; the 20-byte body stays alone (an S3 body); 32..35
        // alone; 40..41 does not continue it (a gap).
        assert_eq!(spans, vec![(0, 12), (12, 32), (32, 35), (40, 41)]);
        assert_eq!((pieces, inline, objects), (4, 16, 1));
        let bytes: Vec<u8> = joined.iter().flat_map(|c| c.data.to_vec()).collect();
        let original: Vec<u8> = chunks.iter().flat_map(|c| c.data.to_vec()).collect();
        assert_eq!(bytes, original, "the same bytes at the same positions");
    }
}
