//! AWS SDK clients, built once per process and shared (they pool connections
//! and cache credentials internally).

use aws_config::BehaviorVersion;

/// The three service clients the substrate uses.
#[derive(Clone, Debug)]
pub struct AwsClients {
    pub ddb: aws_sdk_dynamodb::Client,
    pub s3: aws_sdk_s3::Client,
    pub scheduler: aws_sdk_scheduler::Client,
}

impl AwsClients {
    /// Load region, credentials and endpoint overrides (`AWS_ENDPOINT_URL`,
    /// `AWS_ENDPOINT_URL_S3`, ...) from the environment.
    pub async fn from_env() -> Self {
        let conf = aws_config::defaults(BehaviorVersion::latest()).load().await;
        Self::from_sdk_config(&conf)
    }

    pub fn from_sdk_config(conf: &aws_config::SdkConfig) -> Self {
        // An endpoint override means a local emulator on 127.0.0.1, where
        // virtual-hosted bucket names (`bucket.127.0.0.1`) do not resolve.
        let path_style = conf.endpoint_url().is_some() || std::env::var_os("AWS_ENDPOINT_URL_S3").is_some();
        let s3 =
            aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(conf).force_path_style(path_style).build());
        Self { ddb: aws_sdk_dynamodb::Client::new(conf), s3, scheduler: aws_sdk_scheduler::Client::new(conf) }
    }
}
