//! The adapter contract suite (`ds_processor::adapter_contract`) against the
//! in-memory adapters of the harness.

ds_processor::adapter_contract_suite!(ds_processor::harness::MemoryAdapterFactory::new());
