//! The adapter contract suite's factory over any substrate:
//! `ds_processor_testkit::adapter_contract_suite!` runs against the
//! substrate-backed adapters with it.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use ds_core::{CreateRequest, StreamService};
use ds_processor::Alarm;
use ds_processor_testkit::adapter_contract::{AdapterFactory, AdapterSet};
use ds_protocol::headers::Lifetime;

use ds_processor_host::{InProcAlarms, RecordProgressStore, StreamJournal, StreamRecovery};

/// Makes a service over a new instance of the substrate under test (all
/// instances over one backing storage).
pub type ServiceMaker = Arc<dyn Fn() -> StreamService + Send + Sync>;

/// [`AdapterFactory`] over the substrate `make` builds instances of. Alarms
/// are kept by one manual [`InProcAlarms`] per factory (the suite plays the
/// scheduler through `take_due_alarms`).
pub struct SubstrateAdapters {
    make: ServiceMaker,
    alarms: Arc<InProcAlarms>,
}

impl SubstrateAdapters {
    pub fn new(make: ServiceMaker) -> Self {
        let alarms = InProcAlarms::manual(make());
        Self { make, alarms }
    }
}

fn json_stream(path: &str) -> CreateRequest {
    CreateRequest {
        path: path.to_owned(),
        content_type: Some("application/json".into()),
        lifetime: Lifetime::default(),
        closed: false,
        body: Bytes::new(),
        fork: None,
    }
}

#[async_trait]
impl AdapterFactory for SubstrateAdapters {
    async fn create_stream(&self) -> String {
        let path = format!("processors/contract/{}", uuid::Uuid::new_v4());
        (self.make)().create(json_stream(&path)).await.expect("create the journal stream");
        path
    }

    async fn recreate_stream(&self, stream: &str) {
        let svc = (self.make)();
        svc.delete(stream).await.expect("delete the journal stream");
        svc.create(json_stream(stream)).await.expect("create it again");
    }

    async fn instance(&self, stream: &str, slug: &str) -> AdapterSet {
        let svc = (self.make)();
        AdapterSet {
            journal: Arc::new(StreamJournal::new(svc.clone(), stream)),
            progress: Arc::new(RecordProgressStore::new(svc.clone(), stream, slug)),
            recovery: Arc::new(StreamRecovery::new(svc, stream, Arc::clone(&self.alarms) as _)),
        }
    }

    async fn take_due_alarms(&self, stream: &str, now_ms: u64) -> Vec<Alarm> {
        self.alarms.take_due(stream, now_ms)
    }
}
