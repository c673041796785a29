//! The shared substrate contract-test suite (`ds_core::contract`), run against
//! the AWS substrate on the emulator. Every `instance()` is a separate
//! substrate instance (own SDK clients, own registry), so the concurrency
//! checks race separate "Lambda instances" on one table.

mod common;

use common::AwsFactory;
use ds_core::contract;

macro_rules! contract_test {
    ($name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            let Some(f) = AwsFactory::new(stringify!($name)).await else { return };
            contract::$name(&f).await;
        }
    };
}

contract_test!(create_expect_absent);
contract_test!(expect_version);
contract_test!(commit_all_or_nothing);
contract_test!(producer_and_data_atomic);
contract_test!(delete_and_recreate);
contract_test!(touch_without_version_bump);
contract_test!(list_streams_pages);
contract_test!(read_chunks_ranges);
contract_test!(meta_roundtrip);
contract_test!(hub_wakes_after_commit);
contract_test!(hub_no_missed_wakeup);
contract_test!(hub_deadline);
contract_test!(mutex_serializes);
contract_test!(registry_bounded);
contract_test!(scheduler_accepts_calls);

// Durable substrate: a fresh instance sees everything committed by a dropped one.
contract_test!(restart_keeps_committed);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_commits_all_or_nothing() {
    let Some(f) = AwsFactory::new("concurrent_commits_all_or_nothing").await else { return };
    contract::concurrent_commits_all_or_nothing(&f, 8, 10).await;
}

/// The acceptance bar: 32 writers, each its own substrate instance, on one
/// stream: no acknowledged append lost, duplicated or reordered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_32_separate_instances() {
    let Some(f) = AwsFactory::new("concurrent_appends_32_separate_instances").await else { return };
    contract::concurrent_appends_one_stream(&f, 32, 6).await;
}
