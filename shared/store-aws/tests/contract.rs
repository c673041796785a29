//! The shared substrate contract suite (`ds_core::contract_suite!`), run
//! against the AWS substrate on the emulator. Every `instance()` is a separate
//! substrate instance (own SDK clients, own registry), so the concurrency
//! checks race separate "Lambda instances" on one table.

use ds_core::contract;
use ds_store_aws::test_util::AwsFactory;

ds_core::contract_suite!(AwsFactory::new);

// Durable substrate: a fresh instance sees everything committed by a dropped one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restart_keeps_committed() {
    let Some(f) = AwsFactory::new("restart_keeps_committed").await else { return };
    contract::restart_keeps_committed(&f).await;
}
