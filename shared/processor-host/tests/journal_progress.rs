//! The substrate journal and progress store beyond the adapter contract:
//! positions are offsets, a read after any position (a message boundary or
//! not, inherited through a fork or not) starts at the first message ending
//! past it, and an oversized progress record is a typed error on every
//! substrate (memory here and AWS on the emulator).

use std::sync::Arc;

use bytes::Bytes;
use ds_core::{CreateRequest, ForkRequest, ServiceConfig, StreamService};
use ds_processor::{
    Expectation, Fence, Journal, Processing, Progress, ProgressError, ProgressStore, Reduction, StoredProgress,
    StreamIncarnation,
};
use ds_processor_host::{RecordProgressStore, StreamJournal};
use ds_protocol::headers::Lifetime;
use ds_protocol::Offset;

fn memory() -> StreamService {
    let (sub, _due) = ds_store_memory::memory_substrate();
    StreamService::new(sub, ServiceConfig::default())
}

fn json(path: &str, fork: Option<ForkRequest>) -> CreateRequest {
    CreateRequest {
        path: path.to_owned(),
        content_type: Some("application/json".into()),
        lifetime: Lifetime::default(),
        closed: false,
        body: Bytes::new(),
        fork,
    }
}

async fn positions(journal: &StreamJournal, inc: &StreamIncarnation, after: u64) -> Vec<u64> {
    journal.read_after(inc, after, 100).await.expect("read").iter().map(|e| e.position).collect()
}

#[tokio::test]
async fn reads_start_at_the_first_message_ending_past_any_position() {
    let svc = memory();
    let created = svc.create(json("j", None)).await.expect("create");
    let inc = StreamIncarnation::new(created.meta.incarnation.to_string());
    let journal = StreamJournal::new(svc.clone(), "j");
    let mut ends = Vec::new();
    for (i, body) in [r#"{"a":1}"#, r#"{"b":22}"#, r#"{"c":333}"#].into_iter().enumerate() {
        let out = journal.append(&inc, Bytes::from(body), &format!("k{i}")).await.expect("append");
        assert!(!out.deduplicated);
        ends.push(out.position);
    }
    assert_eq!(ends, [8, 17, 27], "a position is the offset just past its message (with its newline)");
    let again = journal.append(&inc, Bytes::from(r#"{"b":22}"#), "k1").await.expect("append");
    assert_eq!((again.position, again.deduplicated), (17, true), "a used key answers its first position");
    assert_eq!(positions(&journal, &inc, 0).await, ends);
    assert_eq!(positions(&journal, &inc, 8).await, [17, 27], "after a boundary");
    assert_eq!(positions(&journal, &inc, 16).await, [17, 27], "inside the second message");
    assert_eq!(positions(&journal, &inc, 9).await, [17, 27]);
    assert!(positions(&journal, &inc, 27).await.is_empty(), "at the head");
    let entries = journal.read_after(&inc, 16, 100).await.expect("read");
    assert_eq!(entries[0].data, Bytes::from_static(br#"{"b":22}"#), "whole messages, without the newline");

    // A fork reads its inherited messages the same way, boundary or not.
    let fork = ForkRequest { source: "j".into(), offset: Some(Offset(17)), sub_offset: 0 };
    let forked = svc.create(json("f", Some(fork))).await.expect("fork");
    let fork_inc = StreamIncarnation::new(forked.meta.incarnation.to_string());
    let fork_journal = StreamJournal::new(svc.clone(), "f");
    fork_journal.append(&fork_inc, Bytes::from(r#"{"d":4}"#), "f0").await.expect("append");
    assert_eq!(positions(&fork_journal, &fork_inc, 0).await, [8, 17, 25]);
    assert_eq!(positions(&fork_journal, &fork_inc, 3).await, [8, 17, 25], "inside an inherited message");
    assert_eq!(positions(&fork_journal, &fork_inc, 17).await, [25]);

    // Bound to an incarnation: a re-created stream is refused, not read.
    svc.delete("f").await.expect("delete");
    svc.create(json("f", None)).await.expect("re-create");
    let err = fork_journal.read_after(&fork_inc, 0, 10).await.expect_err("incarnation changed");
    assert!(matches!(err, ds_processor::JournalError::IncarnationChanged { .. }), "{err:?}");
}

fn record(inc: &StreamIncarnation, state_bytes: usize) -> StoredProgress {
    StoredProgress {
        stream_incarnation: inc.clone(),
        progress: Progress {
            reduction: Reduction {
                reducer_version: "v1".into(),
                reduced_through: 0,
                state: serde_json::Value::String("x".repeat(state_bytes)),
            },
            processing: Some(Processing { acknowledged_through: 0, cursor_revision: 0 }),
        },
        pending_audit: None,
    }
}

async fn oversized_progress_is_a_typed_error(svc: StreamService, path: &str) {
    let created = svc.create(json(path, None)).await.expect("create");
    let inc = StreamIncarnation::new(created.meta.incarnation.to_string());
    let store = RecordProgressStore::new(svc.clone(), path, "big");
    let fence = Fence { stream_incarnation: inc.clone(), cursor_revision: 0, expect: Expectation::Monotonic };
    store.commit(&record(&inc, 1000), &fence).await.expect("a small record commits");
    let err = store.commit(&record(&inc, ds_core::MAX_RECORD_BYTES), &fence).await.expect_err("too large");
    assert!(matches!(err, ProgressError::TooLarge(_)), "{err:?}");
    let other = RecordProgressStore::new(svc, path, "big");
    assert_eq!(other.read(&inc).await.expect("read"), Some(record(&inc, 1000)), "nothing was stored");
}

#[tokio::test]
async fn oversized_progress_is_refused_on_memory() {
    oversized_progress_is_a_typed_error(memory(), "big").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_progress_is_refused_on_aws() {
    let Some(f) = ds_store_aws::test_util::AwsFactory::new("oversized_progress_is_refused_on_aws").await else {
        return;
    };
    let path = format!("processors/big/{}", uuid::Uuid::new_v4());
    oversized_progress_is_a_typed_error(Arc::new(f).service().1, &path).await;
}
