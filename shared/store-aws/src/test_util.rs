//! Set-up the AWS tests of every crate share (feature `test-util`): the
//! emulator endpoint from the environment (`make test` starts it), the
//! resources, substrate instances that behave like separate Lambda instances
//! (own clients, own registry, one backing table/bucket), and the emulator's
//! call counter.

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType, StreamSpecification,
    StreamViewType,
};
use ds_core::contract::SubstrateFactory;
use ds_core::{ServiceConfig, StreamService, Substrate};

use crate::{AwsClients, AwsConfig, AwsSubstrate};

/// The emulator endpoint, or `None` (after a loud message) when the AWS
/// tests cannot run here.
pub fn endpoint(test: &str) -> Option<String> {
    match std::env::var("AWS_ENDPOINT_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            // `make test` sets this: there a missing emulator is a failure, not a skip.
            assert!(
                std::env::var_os("DS_TEST_REQUIRE_AWS").is_none(),
                "DS_TEST_REQUIRE_AWS is set but AWS_ENDPOINT_URL is not"
            );
            eprintln!(
                "\n!!!!!!!! SKIPPING AWS TEST `{test}`: AWS_ENDPOINT_URL is not set.\n\
                 !!!!!!!! Start the emulator first: eval \"$(infra/aws-emulator/start.sh)\"\n\
                 !!!!!!!! (`make test` does this for you.)\n"
            );
            None
        }
    }
}

/// The emulator's dummy credentials and region, unless already set.
fn default_env() {
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
}

pub async fn sdk_config() -> aws_config::SdkConfig {
    default_env();
    aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await
}

/// Substrate configuration from the environment (emulator defaults).
pub fn config() -> AwsConfig {
    default_env();
    AwsConfig::from_env().expect("config from env")
}

/// Create the table, bucket and schedule group if missing (the same shapes
/// as `infra/aws-emulator/create-resources`), so a test also runs against a
/// bare emulator.
pub async fn ensure_resources(conf: &aws_config::SdkConfig, cfg: &AwsConfig) {
    let clients = AwsClients::from_sdk_config(conf);
    let created = clients
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
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                // As template.yaml: the processor function reads old images only.
                .stream_view_type(StreamViewType::OldImage)
                .build()
                .expect("stream"),
        )
        .send()
        .await;
    if let Err(e) = created {
        let is_exists = e.as_service_error().is_some_and(|s| s.is_resource_in_use_exception());
        assert!(is_exists, "creating table {}: {e:?}", cfg.table);
    }
    let bucket = clients.s3.create_bucket().bucket(&cfg.bucket).send().await;
    if let Err(e) = bucket {
        let ok =
            e.as_service_error().is_some_and(|s| s.is_bucket_already_owned_by_you() || s.is_bucket_already_exists());
        assert!(ok, "creating bucket {}: {e:?}", cfg.bucket);
    }
    ensure_schedule_group(&clients.scheduler, &cfg.schedule_group).await;
}

/// Create the schedule group `name` unless it exists: the emulator's
/// `CreateScheduleGroup` replaces an existing group, wiping the schedules of
/// the tests running beside this one.
pub async fn ensure_schedule_group(scheduler: &aws_sdk_scheduler::Client, name: &str) {
    if scheduler.get_schedule_group().name(name).send().await.is_ok() {
        return;
    }
    let group = scheduler.create_schedule_group().name(name).send().await;
    if let Err(e) = group.map_err(crate::error::classify) {
        assert!(matches!(e, crate::error::AwsError::AlreadyExists), "creating schedule group {name}: {e:?}");
    }
}

/// Builds AWS substrate instances over one table and bucket. Every
/// `instance()` has its own SDK clients and registry, like a separate Lambda
/// instance.
pub struct AwsFactory {
    pub conf: aws_config::SdkConfig,
    pub cfg: AwsConfig,
}

impl AwsFactory {
    /// `None` (skip) without an emulator.
    pub async fn new(test: &str) -> Option<Self> {
        endpoint(test)?;
        let conf = sdk_config().await;
        let cfg = config();
        ensure_resources(&conf, &cfg).await;
        Some(Self { conf, cfg })
    }

    /// The same table and bucket through clients signing with `access_key`
    /// (the emulator takes any): its fault rules and call counts
    /// (`by_key`) can single out what these clients do.
    pub fn signing_as(&self, access_key: &str) -> Self {
        let creds = aws_sdk_dynamodb::config::Credentials::new(access_key, "test", None, None, "ds-test");
        let provider = aws_sdk_dynamodb::config::SharedCredentialsProvider::new(creds);
        Self { conf: self.conf.to_builder().credentials_provider(provider).build(), cfg: self.cfg.clone() }
    }

    pub fn aws(&self) -> AwsSubstrate {
        AwsSubstrate::new(self.cfg.clone(), AwsClients::from_sdk_config(&self.conf))
    }

    pub fn aws_with(&self, cfg: AwsConfig) -> AwsSubstrate {
        AwsSubstrate::new(cfg, AwsClients::from_sdk_config(&self.conf))
    }

    pub fn clients(&self) -> AwsClients {
        AwsClients::from_sdk_config(&self.conf)
    }

    /// A core service over a fresh instance.
    pub fn service(&self) -> (AwsSubstrate, StreamService) {
        self.service_with(ServiceConfig::default())
    }

    /// A core service with `cfg` over a fresh instance.
    pub fn service_with(&self, cfg: ServiceConfig) -> (AwsSubstrate, StreamService) {
        let aws = self.aws();
        let svc = StreamService::new(aws.substrate(), cfg);
        (aws, svc)
    }
}

#[async_trait]
impl SubstrateFactory for AwsFactory {
    async fn instance(&self) -> Substrate {
        self.aws().substrate()
    }
}

/// The emulator's call counter (`/_emulator/calls`), read over plain HTTP.
pub struct CallCounter {
    base: String,
}

/// `service -> operation -> count`.
pub type Calls = BTreeMap<String, BTreeMap<String, u64>>;

impl CallCounter {
    pub fn new() -> Option<Self> {
        std::env::var("AWS_ENDPOINT_URL").ok().map(|base| Self { base: base.trim_end_matches('/').to_owned() })
    }

    async fn request(&self, method: &str, path: &str) -> serde_json::Value {
        self.request_with(method, path, bytes::Bytes::new()).await
    }

    async fn request_with(&self, method: &str, path: &str, body: bytes::Bytes) -> serde_json::Value {
        let url = format!("{}{path}", self.base);
        let authority = url.trim_start_matches("http://").split('/').next().unwrap_or("").to_owned();
        let stream = tokio::net::TcpStream::connect(&authority).await.expect("connect to the emulator");
        let (mut sender, conn) = hyper_handshake(stream).await;
        tokio::spawn(conn);
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", authority)
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(body))
            .expect("request");
        let resp = sender.send_request(req).await.expect("emulator answers");
        let body = http_body_util::BodyExt::collect(resp.into_body()).await.expect("body").to_bytes();
        serde_json::from_slice(&body).expect("json")
    }

    /// Adds fault rules (`/_emulator/faults`, see the emulator's README):
    /// a rule naming an `access_key` fails only the calls of clients
    /// signing with it, so a test on the shared emulator can make one
    /// function instance fail and no one else.
    pub async fn add_fault_rules(&self, rules: serde_json::Value) {
        let answer = self.request_with("POST", "/_emulator/faults", rules.to_string().into()).await;
        assert!(answer.get("rules").is_some(), "the emulator took the rules: {answer}");
    }

    /// Removes every fault rule (`DELETE /_emulator/faults`); answers what
    /// was injected.
    pub async fn clear_fault_rules(&self) -> serde_json::Value {
        self.request("DELETE", "/_emulator/faults").await
    }

    /// Everything `/_emulator/calls` answers (calls, `by_key`, capacity,
    /// `sdk_retries`, ...).
    pub async fn snapshot(&self) -> serde_json::Value {
        self.request("GET", "/_emulator/calls").await
    }

    /// Zero the counts.
    pub async fn reset(&self) {
        self.request("POST", "/_emulator/calls/reset").await;
    }

    /// Counts since the last reset.
    pub async fn calls(&self) -> Calls {
        let v = self.request("GET", "/_emulator/calls").await;
        let mut out = Calls::new();
        if let Some(services) = v.get("calls").and_then(|c| c.as_object()) {
            for (svc, ops) in services {
                let entry = out.entry(svc.clone()).or_default();
                for (op, n) in ops.as_object().into_iter().flatten() {
                    entry.insert(op.clone(), n.as_u64().unwrap_or(0));
                }
            }
        }
        out
    }
}

async fn hyper_handshake(
    stream: tokio::net::TcpStream,
) -> (hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>, impl std::future::Future<Output = ()>)
{
    let io = hyper_util::rt::TokioIo::new(stream);
    let (sender, conn) = hyper::client::conn::http1::handshake(io).await.expect("handshake");
    (sender, async move {
        let _ = conn.await;
    })
}

/// Total calls of one service.
pub fn total(calls: &Calls, service: &str) -> u64 {
    calls.get(service).map_or(0, |ops| ops.values().sum())
}

/// Calls of one operation.
pub fn count(calls: &Calls, service: &str, op: &str) -> u64 {
    calls.get(service).and_then(|ops| ops.get(op)).copied().unwrap_or(0)
}
