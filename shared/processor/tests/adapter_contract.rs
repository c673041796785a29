//! The adapter contract suite (`ds_processor_testkit::adapter_contract`) against the
//! in-memory adapters of the harness.

use ds_processor_testkit::adapter_contract::AdapterFactory;
use ds_processor_testkit::harness::MemoryAdapterFactory;

/// A fresh in-memory storage per check.
async fn factory(_check: &'static str) -> Option<impl AdapterFactory> {
    Some(MemoryAdapterFactory::new())
}

ds_processor_testkit::adapter_contract_suite!(factory);
