//! The in-memory adapter sets behind the adapter contract suite.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::crash::CrashSwitch;
use super::journal::MemoryJournal;
use super::progress::MemoryProgressStore;
use super::recovery::MemoryRecovery;
use super::timeline::Timeline;
use crate::adapter_contract::{AdapterFactory, AdapterSet};
use crate::lock;
use ds_processor::Alarm;

/// The storage of one stream: its journal, its alarms, one progress store
/// per processor.
struct StreamStorage {
    journal: Arc<MemoryJournal>,
    recovery: Arc<MemoryRecovery>,
    progress: HashMap<String, Arc<MemoryProgressStore>>,
    lives: u64,
}

/// Many streams in memory. An instance is a set of handles on the shared
/// storage objects: in memory the storage is the object, so any two
/// instances see each other's writes at once, as two processes over one
/// database do.
#[derive(Default)]
pub struct MemoryAdapterFactory {
    streams: Mutex<HashMap<String, StreamStorage>>,
    next: AtomicU64,
}

impl MemoryAdapterFactory {
    pub fn new() -> Self {
        Self::default()
    }

    fn with_stream<T>(&self, stream: &str, f: impl FnOnce(&mut StreamStorage) -> T) -> T {
        let mut streams = lock(&self.streams);
        let storage = streams.get_mut(stream).unwrap_or_else(|| panic!("no stream {stream} was created"));
        f(storage)
    }
}

#[async_trait]
impl AdapterFactory for MemoryAdapterFactory {
    async fn create_stream(&self) -> String {
        let name = format!("contract/stream-{}", self.next.fetch_add(1, Ordering::Relaxed));
        let journal = Arc::new(MemoryJournal::new(&format!("{name}#1")));
        let recovery = Arc::new(MemoryRecovery::new(Arc::clone(&journal), CrashSwitch::new()));
        let storage = StreamStorage { journal, recovery, progress: HashMap::new(), lives: 1 };
        lock(&self.streams).insert(name.clone(), storage);
        name
    }

    async fn recreate_stream(&self, stream: &str) {
        self.with_stream(stream, |s| {
            s.lives += 1;
            s.journal.recreate(&format!("{stream}#{}", s.lives));
        });
    }

    async fn instance(&self, stream: &str, slug: &str) -> AdapterSet {
        self.with_stream(stream, |s| {
            let progress = s
                .progress
                .entry(slug.to_owned())
                .or_insert_with(|| Arc::new(MemoryProgressStore::new(CrashSwitch::new(), Timeline::new())));
            AdapterSet { journal: s.journal.clone(), progress: progress.clone(), recovery: s.recovery.clone() }
        })
    }

    async fn take_due_alarms(&self, stream: &str, now_ms: u64) -> Vec<Alarm> {
        self.with_stream(stream, |s| s.recovery.take_due(now_ms))
    }
}
