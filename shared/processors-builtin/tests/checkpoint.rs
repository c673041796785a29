//! `checkpoint = "…"` in the configuration file reaches the runner: an
//! outbox checkpointing every 100 events writes a hundredth of the progress
//! records one checkpointing every event writes, and a kill during a
//! checkpoint replays only the events since the last one that landed, with
//! every relay still in the target exactly once.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use ds_core::{CreateRequest, ServiceConfig, StreamService};
use ds_processor::{
    Adapters, Fence, Journal, OutgoingEvent, ProgressError, ProgressStore, RunnerConfig, StoredProgress,
    StreamIncarnation,
};
use ds_processor_host::{RecordProgressStore, StreamJournal};
use ds_processors_builtin::Catalog;
use serde_json::{json, Value};

const EVENTS: u64 = 1000;

fn config(checkpoint: &str) -> String {
    format!(
        r#"
[[processor]]
kind = "outbox"
slug = "o"
streams = "orders/*"
checkpoint = "{checkpoint}"
target = "feed"
create_target = true
template = {{ type = "feed/order", payload = {{ id = "$/payload/id" }} }}
"#
    )
}

/// The real progress record, counting commits; the commit numbered `die_at`
/// never returns (the process dies while writing it, so it never lands).
struct Counting {
    inner: RecordProgressStore,
    commits: AtomicU64,
    die_at: Option<u64>,
}

#[async_trait]
impl ProgressStore for Counting {
    async fn read(&self, incarnation: &StreamIncarnation) -> Result<Option<StoredProgress>, ProgressError> {
        self.inner.read(incarnation).await
    }

    async fn commit(&self, record: &StoredProgress, fence: &Fence) -> Result<(), ProgressError> {
        let n = self.commits.fetch_add(1, SeqCst) + 1;
        if Some(n) == self.die_at {
            std::future::pending::<()>().await;
        }
        self.inner.commit(record, fence).await
    }
}

/// A fresh store of one kind (a local one in its own directory, kept
/// while the store is used).
#[derive(Clone, Copy, Debug)]
enum Store {
    Memory,
    Local,
}

/// A service on a fresh `store` with `orders/1` holding [`EVENTS`] placed
/// orders; the positions just past each.
async fn world(store: Store) -> (StreamService, StreamIncarnation, Vec<u64>, Option<tempfile::TempDir>) {
    let (substrate, dir) = match store {
        Store::Memory => (ds_store_memory::memory_substrate().0, None),
        Store::Local => {
            let dir = tempfile::tempdir().unwrap();
            (ds_store_local::local_substrate(dir.path()).unwrap().0, Some(dir))
        }
    };
    let svc = StreamService::new(substrate, ServiceConfig::default());
    let req = CreateRequest {
        path: "orders/1".into(),
        content_type: Some("application/json".into()),
        lifetime: Default::default(),
        closed: false,
        body: Bytes::new(),
        fork: None,
    };
    let inc = StreamIncarnation::new(svc.create(req).await.unwrap().meta.incarnation.to_string());
    let journal = StreamJournal::new(svc.clone(), "orders/1");
    let mut positions = Vec::new();
    for id in 0..EVENTS {
        let event = OutgoingEvent::new("order/placed", json!({ "id": id })).encode();
        positions.push(journal.append(&inc, event, &format!("k{id}")).await.unwrap().position);
    }
    (svc, inc, positions, dir)
}

async fn feed_ids(svc: &StreamService) -> Vec<u64> {
    let inc = svc.head("feed").await.unwrap().incarnation;
    let page = svc.read_journal("feed", &inc, 0, 1 << 24).await.unwrap();
    page.entries
        .iter()
        .map(|(_, d)| serde_json::from_slice::<Value>(d).unwrap()["payload"]["id"].as_u64().unwrap())
        .collect()
}

/// Runs the outbox of `checkpoint` over `svc` until caught up (or until the
/// commit numbered `die_at`, where it is killed); its progress store.
async fn run(svc: &StreamService, checkpoint: &str, die_at: Option<u64>) -> Arc<Counting> {
    let (_, registry) = Catalog::builtin().load(&config(checkpoint), svc).await.unwrap();
    let spec = registry.for_path("orders/1").remove(0);
    let progress = Arc::new(Counting {
        inner: RecordProgressStore::new(svc.clone(), "orders/1", "o"),
        commits: AtomicU64::new(0),
        die_at,
    });
    let journal = Arc::new(StreamJournal::new(svc.clone(), "orders/1"));
    let adapters = Adapters::without_recovery(journal, progress.clone());
    // The host's default is every event: only the file can thin it out.
    let runner = spec.open_on("orders/1", adapters, RunnerConfig::default()).await.unwrap();
    let drive = tokio::spawn(async move { runner.catch_up().await.map(|_| ()) });
    if die_at.is_some() {
        while progress.commits.load(SeqCst) < die_at.unwrap_or(0) {
            tokio::task::yield_now().await;
        }
        drive.abort();
        assert!(drive.await.unwrap_err().is_cancelled(), "killed mid-batch");
    } else {
        drive.await.unwrap().unwrap();
    }
    progress
}

#[tokio::test]
async fn every_100_events_writes_a_hundredth_of_the_progress_records() {
    for store in [Store::Memory, Store::Local] {
        a_hundredth(store).await;
    }
}

async fn a_hundredth(store: Store) {
    let (svc, _, _, _dir) = world(store).await;
    let every = run(&svc, "every event", None).await.commits.load(SeqCst);
    let (svc, _, _, _dir) = world(store).await;
    let hundred = run(&svc, "every 100 events", None).await.commits.load(SeqCst);
    assert_eq!(every, EVENTS, "{store:?}: one checkpoint per event");
    // 10 after 100 events each; the one at the head has nothing new to write.
    assert!((EVENTS / 100..=EVENTS / 100 + 1).contains(&hundred), "{store:?}: {hundred} checkpoints");
    assert_eq!(feed_ids(&svc).await, (0..EVENTS).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_kill_mid_batch_replays_only_what_was_not_checkpointed_and_relays_once() {
    for store in [Store::Memory, Store::Local] {
        killed_mid_batch(store).await;
    }
}

async fn killed_mid_batch(store: Store) {
    let (svc, inc, positions, _dir) = world(store).await;
    // Killed while writing its third checkpoint (after the 300th event):
    // the first two (events 100 and 200) landed.
    let killed = run(&svc, "every 100 events", Some(3)).await;
    let stored = killed.inner.read(&inc).await.unwrap().unwrap();
    assert_eq!(stored.progress.acknowledged_through(), positions[199], "the last checkpoint that landed");
    let relayed_before = feed_ids(&svc).await;
    assert_eq!(relayed_before, (0..300).collect::<Vec<_>>(), "events 201-300 took effect before the kill");

    // The next instance starts after the 200th event: it replays 100
    // events (those since the checkpoint), and the target dedupes them.
    let next = run(&svc, "every 100 events", None).await;
    assert_eq!(feed_ids(&svc).await, (0..EVENTS).collect::<Vec<_>>(), "every order relayed exactly once");
    let stored = next.inner.read(&inc).await.unwrap().unwrap();
    assert_eq!(stored.progress.acknowledged_through(), positions[EVENTS as usize - 1]);
    assert_eq!(stored.progress.reduction.state, json!({ "forwarded": EVENTS }), "the fold counts each event once");
    assert!(next.commits.load(SeqCst) <= 9, "800 events from the checkpoint: 8 checkpoints (+1 at the head)");
}
