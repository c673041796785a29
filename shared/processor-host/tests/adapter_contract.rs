//! The runner's adapter contract suite (`ds_processor_testkit::adapter_contract`)
//! against the substrate-backed adapters, on the memory, local and AWS
//! substrates. Every instance is a separate substrate instance over one
//! backing store (own lock, hub and registry), like another process.

use std::sync::Arc;

use ds_core::{ServiceConfig, StreamService, StreamStore};
use ds_processor::Alarm;
use ds_processor_testkit::adapter_contract::{AdapterFactory, AdapterSet};
use substrate_adapters::SubstrateAdapters;

mod substrate_adapters;

fn services_over(store: Arc<dyn StreamStore>) -> SubstrateAdapters {
    SubstrateAdapters::new(Arc::new(move || {
        StreamService::new(ds_inproc::in_process_substrate(Arc::clone(&store)).0, ServiceConfig::default())
    }))
}

mod memory {
    use super::*;

    async fn factory(_check: &'static str) -> Option<SubstrateAdapters> {
        Some(services_over(Arc::new(ds_store_memory::MemoryStore::new())))
    }

    ds_processor_testkit::adapter_contract_suite!(factory);
}

mod local {
    use super::*;

    /// The adapters over a local store in a temp dir that lives as long.
    pub struct Local {
        _dir: tempfile::TempDir,
        adapters: SubstrateAdapters,
    }

    #[async_trait::async_trait]
    impl AdapterFactory for Local {
        async fn create_stream(&self) -> String {
            self.adapters.create_stream().await
        }
        async fn recreate_stream(&self, stream: &str) {
            self.adapters.recreate_stream(stream).await;
        }
        async fn instance(&self, stream: &str, slug: &str) -> AdapterSet {
            self.adapters.instance(stream, slug).await
        }
        async fn take_due_alarms(&self, stream: &str, now_ms: u64) -> Vec<Alarm> {
            self.adapters.take_due_alarms(stream, now_ms).await
        }
    }

    async fn factory(_check: &'static str) -> Option<Local> {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = ds_store_local::LocalStore::open(dir.path()).expect("open the local store");
        Some(Local { adapters: services_over(Arc::new(store)), _dir: dir })
    }

    ds_processor_testkit::adapter_contract_suite!(factory);
}

mod aws {
    use super::*;
    use ds_store_aws::test_util::AwsFactory;

    async fn factory(check: &'static str) -> Option<SubstrateAdapters> {
        let aws = Arc::new(AwsFactory::new(check).await?);
        Some(SubstrateAdapters::new(Arc::new(move || aws.service().1)))
    }

    ds_processor_testkit::adapter_contract_suite!(factory);
}
