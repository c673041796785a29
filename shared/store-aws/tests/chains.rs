//! Pipelined appends on AWS and the commits they are stacked on
//! (`ds_core::Chain`), against the emulator.
//!
//! With group commit, `submit` returns before the transaction runs, so the
//! service plans the next append on the state its commits in flight
//! predict. Version and tail name that state without identifying it:
//! another process can leave a different state under the same pair. The
//! queue refuses the commits stacked on a failed group while they are
//! queued, but not one submitted after that group's queue emptied: it went
//! into a fresh queue and its condition passed against the other process's
//! state (an idempotent producer's next `Stream-Seq` applied though the one
//! before it never was). Each check runs two stores over one table, as two
//! processes (own clients, own registry): B commits first, A's group G1
//! planned on the state before loses its race, and G2, stacked on G1's
//! prediction in the same chain, names B's state exactly.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ds_core::contract::fixtures::{append_commit, bytes_at, create, read_all, unique_path};
use ds_core::{
    Chain, Commit, PendingCommit, ProducerState, StoreError, StreamHandle, StreamMeta, StreamStore, Substrate,
    TrySubmit,
};
use ds_store_aws::test_util::{AwsFactory, CallCounter};
use ds_store_aws::AwsConfig;
use serde_json::json;

/// Submit `commit` in `chain` as the service does: `try_submit_chained`,
/// and `submit_chained` (still in order) when that would wait.
async fn chained(store: &Arc<dyn StreamStore>, commit: Commit, chain: &Chain) -> Result<PendingCommit, StoreError> {
    match store.try_submit_chained(commit, chain.clone()) {
        TrySubmit::Submitted(submitted) => submitted,
        TrySubmit::WouldWait(commit) => store.submit_chained(commit, chain.clone()).await,
    }
}

/// A submission's outcome, whether refused at once or once resolved.
async fn outcome(submitted: Result<PendingCommit, StoreError>) -> Result<(), StoreError> {
    match submitted {
        Ok(pending) => pending.await,
        Err(e) => Err(e),
    }
}

/// Producer `p`'s state after its append `seq`.
fn producer(seq: u64) -> Option<(&'static str, ProducerState)> {
    Some(("p", ProducerState { epoch: 0, last_seq: seq }))
}

/// The race set up: a stream created through `a`, and B's own append of
/// four bytes committed through `b` on the state it was created in.
/// Returns that state (what A's pipeline is planned on), then G1 (`BBBB`,
/// producer `p`'s seq 0, planned on it) and G2 (`CCCC`, seq 1, planned on
/// G1's prediction: the version and tail B's append left).
async fn race_lost_to_b(a: &Substrate, b: &Substrate, name: &str) -> (StreamMeta, Commit, Commit) {
    let base = create(a, &unique_path(name)).await;
    let (theirs, _) = append_commit(&base, &Bytes::from_static(b"AAAA"), None);
    b.store.commit(theirs).await.expect("B's append applies");
    let (g1, predicted) = append_commit(&base, &Bytes::from_static(b"BBBB"), producer(0));
    let (g2, _) = append_commit(&predicted, &Bytes::from_static(b"CCCC"), producer(1));
    (base, g1, g2)
}

/// The stream holds B's append only, producer `p` never appended; a new
/// pipeline planned on that state applies through `a`.
async fn holds_only_bs_append(a: &Substrate, base: &StreamMeta) {
    let stream = StreamHandle::detached(&base.path);
    let meta = a.store.read_meta(&stream).await.expect("read_meta").expect("the stream exists");
    assert_eq!((meta.version, meta.tail), (base.version + 1, 4), "only B's append: {meta:?}");
    assert_eq!(bytes_at(&read_all(a, &base.path, &meta.incarnation, 4).await, 0, 4), b"AAAA");
    let p = a.store.read_producer(&stream, &meta.incarnation, "p").await.expect("read_producer");
    assert_eq!(p, None, "producer p's appends were all refused");
    let (next, _) = append_commit(&meta, &Bytes::from_static(b"DDDD"), None);
    outcome(chained(&a.store, next, &Chain::default()).await).await.expect("a new chain on the stored state applies");
}

/// G1 loses its race and resolves; its queue is empty when G2 arrives.
/// G1 (lost its race) resolves, then G2 is submitted on the same chain:
/// both refused, the stream holds only B's append, the chain is broken.
async fn submit_g1_then_g2_and_see_both_refused(a: &Substrate, g1: Commit, g2: Commit, base: &StreamMeta) {
    let chain = Chain::default();
    let first = outcome(chained(&a.store, g1, &chain).await).await;
    assert!(matches!(first, Err(StoreError::Conflict)), "G1 was planned on a version B moved past: {first:?}");
    let stacked = outcome(chained(&a.store, g2, &chain).await).await;
    assert!(matches!(stacked, Err(StoreError::Conflict)), "G2 is stacked on G1, which lost its race: {stacked:?}");
    holds_only_bs_append(a, base).await;
    assert!(chain.is_broken(), "G1 was not applied: its chain is broken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_stacked_on_a_lost_race_is_refused_after_the_queue_emptied() {
    let Some(f) = AwsFactory::new("a_commit_stacked_on_a_lost_race_is_refused_after_the_queue_emptied").await else {
        return;
    };
    let (a, b) = (f.aws().substrate(), f.aws().substrate());
    let (base, g1, g2) = race_lost_to_b(&a, &b, "aws-chain-emptied").await;

    submit_g1_then_g2_and_see_both_refused(&a, g1, g2, &base).await;
    assert!(a.store.chains_submissions(), "with group commit on, the service chains its pipelined appends");
}

/// G2 is queued behind G1 while G1's transaction is in flight (slowed at
/// the emulator, for A's calls only), then G1 loses its race.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_queued_behind_a_group_that_loses_its_race_is_refused() {
    let Some(f) = AwsFactory::new("a_commit_queued_behind_a_group_that_loses_its_race_is_refused").await else {
        return;
    };
    let counter = CallCounter::new().expect("an emulator");
    let key = format!("chains-{}", uuid::Uuid::new_v4().simple());
    let (a, b) = (f.signing_as(&key).aws().substrate(), f.aws().substrate());
    let (base, g1, g2) = race_lost_to_b(&a, &b, "aws-chain-queued").await;

    let slow = json!({"rules": [{"service": "dynamodb", "operation": "TransactWriteItems", "fault": "slow",
        "delay_ms": 600, "count": 1, "access_key": key}]});
    counter.add_fault_rules(slow).await;
    let chain = Chain::default();
    let mut first = chained(&a.store, g1, &chain).await.expect("G1 queued");
    // G1's group is in flight alone by now: G2 queues behind it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(futures::poll!(&mut first).is_pending(), "G1's transaction is still in flight");
    let stacked = chained(&a.store, g2, &chain).await;
    let first = first.await;
    assert!(matches!(first, Err(StoreError::Conflict)), "G1 was planned on a version B moved past: {first:?}");
    let stacked = outcome(stacked).await;
    assert!(matches!(stacked, Err(StoreError::Conflict)), "G2 is stacked on G1, which lost its race: {stacked:?}");
    holds_only_bs_append(&a, &base).await;
    assert!(chain.is_broken(), "G1 and G2 were not applied: their chain is broken");
}

/// Group commit off: every commit its own transaction, applied as it is
/// submitted. A chain given to the store is honoured all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_not_queued_honours_its_chain() {
    let Some(f) = AwsFactory::new("a_commit_not_queued_honours_its_chain").await else { return };
    let a = f.aws_with(AwsConfig { group_commit: false, ..f.cfg.clone() }).substrate();
    let b = f.aws().substrate();
    let (base, g1, g2) = race_lost_to_b(&a, &b, "aws-chain-solo").await;

    submit_g1_then_g2_and_see_both_refused(&a, g1, g2, &base).await;
    assert!(!a.store.chains_submissions(), "nothing in flight to stack on: the service chains nothing");
}
