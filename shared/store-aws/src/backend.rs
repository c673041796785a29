//! The state one substrate instance shares between its service
//! implementations: clients, configuration and the per-stream registry. One per process (a Lambda instance, the local server); tests
//! build several to act as separate instances.

use std::sync::Arc;
use std::time::Duration;

use ds_clock::{Clock, Random};

use crate::blobs::Blobs;
use crate::clients::AwsClients;
use crate::config::AwsConfig;
use crate::registry::Registry;

pub struct Backend {
    pub cfg: AwsConfig,
    pub ddb: aws_sdk_dynamodb::Client,
    pub blobs: Blobs,
    pub scheduler: aws_sdk_scheduler::Client,
    pub registry: Arc<Registry>,
    /// The instance's clock (alarm times) and jitter (retry backoff).
    pub clock: Clock,
    pub random: Random,
}

impl Backend {
    pub fn new(cfg: AwsConfig, clients: AwsClients, clock: Clock, random: Random) -> Self {
        let registry = Arc::new(Registry::new(cfg.registry.clone()));
        Self {
            blobs: Blobs {
                s3: clients.s3,
                bucket: cfg.bucket.clone(),
                #[cfg(feature = "fault-injection")]
                faults: Arc::default(),
            },
            ddb: clients.ddb,
            scheduler: clients.scheduler,
            registry,
            cfg,
            clock,
            random,
        }
    }

    /// Full-jitter exponential backoff before retry `attempt` (0-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let r = &self.cfg.retry;
        let exp = r.base.saturating_mul(1u32 << attempt.min(16));
        let cap = exp.min(r.cap);
        let micros = u64::try_from(cap.as_micros()).unwrap_or(u64::MAX);
        Duration::from_micros(self.random.in_range(0..=micros))
    }
}
