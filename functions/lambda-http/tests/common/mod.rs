//! Set-up shared by the handler tests: the emulator (skip loudly without
//! one), a router over a fresh AWS substrate instance, and the fixtures.
#![allow(dead_code)]

use std::time::Duration;

use ds_core::{ServiceConfig, StreamService};
use ds_store_aws::{AwsClients, AwsConfig, AwsSubstrate};

pub fn emulator(test: &str) -> bool {
    if std::env::var("AWS_ENDPOINT_URL").map(|v| !v.is_empty()).unwrap_or(false) {
        for (k, v) in [
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ] {
            if std::env::var_os(k).is_none() {
                std::env::set_var(k, v);
            }
        }
        return true;
    }
    // `make test` sets this: there a missing emulator is a failure, not a skip.
    assert!(
        std::env::var_os("DS_TEST_REQUIRE_AWS").is_none(),
        "DS_TEST_REQUIRE_AWS is set but AWS_ENDPOINT_URL is not"
    );
    eprintln!(
        "\n!!!!!!!! SKIPPING LAMBDA HANDLER TEST `{test}`: AWS_ENDPOINT_URL is not set.\n\
         !!!!!!!! Start the emulator first: eval \"$(infra/aws-emulator/start.sh)\" (make test does).\n"
    );
    false
}

/// A core service over a new substrate instance (own clients and registry).
pub async fn service() -> StreamService {
    let conf = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
    let cfg = AwsConfig::from_env().expect("config");
    let clients = AwsClients::from_sdk_config(&conf);
    ensure_resources(&clients, &cfg).await;
    let aws = AwsSubstrate::new(cfg, clients);
    let svc_cfg = ServiceConfig { long_poll_timeout: Duration::from_millis(500), ..ServiceConfig::default() };
    StreamService::new(aws.substrate(), svc_cfg)
}

async fn ensure_resources(clients: &AwsClients, cfg: &AwsConfig) {
    use aws_sdk_dynamodb::types::{AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType};
    let _ = clients
        .ddb
        .create_table()
        .table_name(&cfg.table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("pk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("attr"),
        )
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("sk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("attr"),
        )
        .key_schema(KeySchemaElement::builder().attribute_name("pk").key_type(KeyType::Hash).build().expect("key"))
        .key_schema(KeySchemaElement::builder().attribute_name("sk").key_type(KeyType::Range).build().expect("key"))
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await;
    let _ = clients.s3.create_bucket().bucket(&cfg.bucket).send().await;
    let _ = clients.scheduler.create_schedule_group().name(&cfg.schedule_group).send().await;
}

/// A fixture with `{{PATH}}` replaced.
pub fn fixture(name: &str, path: &str) -> String {
    let file = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&file).expect("fixture exists").replace("{{PATH}}", path)
}
