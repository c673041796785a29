//! The adapter contract suite catches broken adapters: each test wraps the
//! in-memory adapters so that they break one rule, and expects the check
//! that guards that rule to fail.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use ds_processor::{
    check_fence, Alarm, AppendOutcome, Fence, Journal, JournalEntry, JournalError, ProgressError, ProgressStore,
    Recovery, RecoveryError, StoredProgress, StreamIncarnation,
};
use ds_processor_testkit::adapter_contract::{self, AdapterFactory, AdapterSet};
use ds_processor_testkit::harness::MemoryAdapterFactory;

#[derive(Clone, Copy)]
enum Flaw {
    /// Reads whatever incarnation the stream is at now.
    ReadsAnyIncarnation,
    /// Remembers idempotency keys per instance, not in the storage.
    DedupesPerInstance,
    /// Checks the fence, then writes, in two steps.
    CheckThenWrite,
    /// Arming again adds an alarm instead of replacing it.
    AlarmsStack,
}

struct Broken {
    inner: MemoryAdapterFactory,
    flaw: Flaw,
    instances: AtomicU64,
    /// The check-then-write store's records, shared by its instances.
    records: Arc<Mutex<HashMap<(String, StreamIncarnation), StoredProgress>>>,
}

fn broken(flaw: Flaw) -> Broken {
    Broken { inner: MemoryAdapterFactory::new(), flaw, instances: AtomicU64::new(0), records: Arc::default() }
}

#[async_trait]
impl AdapterFactory for Broken {
    async fn create_stream(&self) -> String {
        self.inner.create_stream().await
    }

    async fn recreate_stream(&self, stream: &str) {
        self.inner.recreate_stream(stream).await;
    }

    async fn instance(&self, stream: &str, slug: &str) -> AdapterSet {
        let mut set = self.inner.instance(stream, slug).await;
        let id = self.instances.fetch_add(1, Ordering::Relaxed);
        match self.flaw {
            Flaw::ReadsAnyIncarnation => set.journal = Arc::new(AnyIncarnation(set.journal)),
            Flaw::DedupesPerInstance => set.journal = Arc::new(PerInstanceKeys(set.journal, id)),
            Flaw::CheckThenWrite => {
                set.progress = Arc::new(CheckThenWrite(format!("{stream}/{slug}"), Arc::clone(&self.records)))
            }
            Flaw::AlarmsStack => set.recovery = Arc::new(Stacking(set.recovery, AtomicU64::new(0), id)),
        }
        set
    }

    async fn take_due_alarms(&self, stream: &str, now_ms: u64) -> Vec<Alarm> {
        self.inner.take_due_alarms(stream, now_ms).await
    }
}

struct AnyIncarnation(Arc<dyn Journal>);

#[async_trait]
impl Journal for AnyIncarnation {
    async fn incarnation(&self) -> Result<StreamIncarnation, JournalError> {
        self.0.incarnation().await
    }

    async fn read_after(
        &self,
        _: &StreamIncarnation,
        after: u64,
        limit: usize,
    ) -> Result<Vec<JournalEntry>, JournalError> {
        let current = self.0.incarnation().await?;
        self.0.read_after(&current, after, limit).await
    }

    async fn append(&self, inc: &StreamIncarnation, data: Bytes, key: &str) -> Result<AppendOutcome, JournalError> {
        self.0.append(inc, data, key).await
    }
}

struct PerInstanceKeys(Arc<dyn Journal>, u64);

#[async_trait]
impl Journal for PerInstanceKeys {
    async fn incarnation(&self) -> Result<StreamIncarnation, JournalError> {
        self.0.incarnation().await
    }

    async fn read_after(
        &self,
        inc: &StreamIncarnation,
        after: u64,
        limit: usize,
    ) -> Result<Vec<JournalEntry>, JournalError> {
        self.0.read_after(inc, after, limit).await
    }

    async fn append(&self, inc: &StreamIncarnation, data: Bytes, key: &str) -> Result<AppendOutcome, JournalError> {
        self.0.append(inc, data, &format!("{key}@instance-{}", self.1)).await
    }
}

struct CheckThenWrite(String, Arc<Mutex<HashMap<(String, StreamIncarnation), StoredProgress>>>);

#[async_trait]
impl ProgressStore for CheckThenWrite {
    async fn read(&self, inc: &StreamIncarnation) -> Result<Option<StoredProgress>, ProgressError> {
        Ok(self.1.lock().unwrap().get(&(self.0.clone(), inc.clone())).cloned())
    }

    async fn commit(&self, record: &StoredProgress, fence: &Fence) -> Result<(), ProgressError> {
        let stored = self.read(&fence.stream_incarnation).await?;
        check_fence(stored.as_ref(), record, fence)?;
        // The gap between the check and the write: another host's commit
        // lands here.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        self.1.lock().unwrap().insert((self.0.clone(), fence.stream_incarnation.clone()), record.clone());
        Ok(())
    }
}

struct Stacking(Arc<dyn Recovery>, AtomicU64, u64);

#[async_trait]
impl Recovery for Stacking {
    async fn arm(&self, slug: &str, inc: &StreamIncarnation, at_ms: u64) -> Result<(), RecoveryError> {
        let n = self.1.fetch_add(1, Ordering::Relaxed);
        self.0.arm(&format!("{slug}~{}~{n}", self.2), inc, at_ms).await
    }

    async fn disarm(&self, slug: &str) -> Result<(), RecoveryError> {
        self.0.disarm(slug).await
    }

    async fn handle_alarm(&self, alarm: &Alarm) -> Result<AppendOutcome, RecoveryError> {
        self.0.handle_alarm(alarm).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "never reads the new incarnation")]
async fn a_journal_reading_any_incarnation_fails_the_incarnation_check() {
    adapter_contract::incarnation_change_isolates_the_old_incarnation(&broken(Flaw::ReadsAnyIncarnation)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "deduplicated: true")]
async fn a_journal_deduping_per_instance_fails_the_dedupe_check() {
    adapter_contract::append_dedupes_by_key_across_instances(&broken(Flaw::DedupesPerInstance)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "exactly one commit must land")]
async fn a_store_checking_then_writing_fails_the_commit_race() {
    adapter_contract::concurrent_commits_one_winner(&broken(Flaw::CheckThenWrite)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "armed twice, fires once")]
async fn stacking_alarms_fail_the_alarm_check() {
    adapter_contract::alarm_armed_twice_revives_once(&broken(Flaw::AlarmsStack)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unbroken_memory_adapters_pass_every_check() {
    adapter_contract::run_all(&MemoryAdapterFactory::new()).await;
}
