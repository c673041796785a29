//! Set-up shared by the handler tests: the emulator (skip loudly without
//! one; `ds_store_aws::test_util`), a service over a fresh AWS substrate
//! instance, and the event fixtures.
#![allow(dead_code)] // each test binary uses its own subset

use std::time::Duration;

use ds_core::{ServiceConfig, StreamService};
use ds_store_aws::test_util::AwsFactory;

/// Whether the emulator is configured (else the test skips, loudly).
pub fn emulator(test: &str) -> bool {
    ds_store_aws::test_util::endpoint(test).is_some()
}

/// A core service over a new substrate instance (own clients and registry),
/// with a short long-poll timeout.
pub async fn service() -> StreamService {
    let factory = AwsFactory::new("lambda-http").await.expect("emulator configured");
    let cfg = ServiceConfig { long_poll_timeout: Duration::from_millis(500), ..ServiceConfig::default() };
    factory.service_with(cfg).1
}

/// A fixture with `{{PATH}}` replaced.
pub fn fixture(name: &str, path: &str) -> String {
    let file = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&file).expect("fixture exists").replace("{{PATH}}", path)
}
