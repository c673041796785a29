//! The AWS substrate: every substrate trait of `ds-core` over DynamoDB, S3
//! and EventBridge Scheduler, for the multi-instance Lambda deployment.
//!
//! | trait | implementation |
//! | --- | --- |
//! | [`StreamStore`](ds_core::StreamStore) | [`store::AwsStore`]: one table (layout in [`schema`]); `commit` = one `TransactWriteItems` ([`txn`]), the appends queued while one is in flight grouped into the next ([`group`]); large bodies and sealed segments in S3 ([`blobs`], [`segments`]) |
//! | [`StreamMutex`](ds_core::StreamMutex) | [`mutex::AwsMutex`]: in-process semaphore as an optimization; the guarantee is the commit's version condition |
//! | [`StreamHub`](ds_core::StreamHub) | [`hub::PollHub`]: one adaptive poller of the meta item per stream per process; local commits wake at once |
//! | [`ExpiryScheduler`](ds_core::ExpiryScheduler) | [`scheduler::EventBridgeScheduler`]: one-shot `at()` schedule per incarnation ([`schedules`]), re-armed lazily |
//! | [`ForkPeer`](ds_core::ForkPeer) | [`ds_core::StoreForkPeer`] over the same table (reference counts move inside the fork's commit) |
//! | [`StreamRegistry`](ds_core::StreamRegistry) | [`registry::AwsRegistry`]: per-process contexts (cached meta, lock, poller), idle-evicted, bounded |
//!
//! Build one [`AwsSubstrate`] per process ([`AwsSubstrate::from_env`]): it
//! owns the SDK clients and the registry.

pub mod backend;
pub mod blobs;
pub mod cleanup;
pub mod clients;
pub mod codec;
pub mod config;
pub mod error;
#[cfg(feature = "fault-injection")]
pub mod faults;
pub mod group;
pub mod group_queue;
pub mod hub;
pub mod index;
pub mod mutex;
pub mod plan;
pub mod reader;
pub mod reclaim;
pub mod registry;
pub mod retry;
pub mod scheduler;
pub mod schedules;
pub mod schema;
pub mod segments;
pub mod store;
#[cfg(feature = "test-util")]
pub mod test_util;
pub mod txn;

use std::sync::Arc;

use ds_core::{Clock, Random, StoreForkPeer, StreamStore, Substrate};

/// Largest read budget that keeps a catch-up read of inline chunks within one
/// meta `GetItem` plus one chunk `Query` page: DynamoDB pages Query results at
/// 1 MB of item data (keys and attributes included), so a 1 MiB budget of
/// payload can spill into a second page. The store reports it as its
/// `StreamStore::max_read_bytes`, so the core clamps its read budget to it.
pub const MAX_READ_BYTES: usize = 900 * 1024;

pub use clients::AwsClients;
pub use config::AwsConfig;
pub use ds_config::ConfigError;
#[cfg(feature = "fault-injection")]
pub use faults::{Fault, FaultPoint};
pub use scheduler::{schedule_name, AlarmInput};

use backend::Backend;

/// One AWS substrate instance (one per process).
#[derive(Clone)]
pub struct AwsSubstrate {
    backend: Arc<Backend>,
}

impl AwsSubstrate {
    pub fn new(cfg: AwsConfig, clients: AwsClients) -> Self {
        Self::on(cfg, clients, Clock::system(), Random::system())
    }

    /// [`Self::new`] on the given clock and jitter source (tests fix them).
    pub fn on(cfg: AwsConfig, clients: AwsClients, clock: Clock, random: Random) -> Self {
        Self { backend: Arc::new(Backend::new(cfg, clients, clock, random)) }
    }

    /// Configuration and clients from the environment (see
    /// [`AwsConfig::from_env`] and [`AwsClients::from_env`]).
    pub async fn from_env() -> Result<Self, ConfigError> {
        let cfg = AwsConfig::from_env()?;
        Ok(Self::new(cfg, AwsClients::from_env().await))
    }

    /// The six substrate services, sharing this instance's clients and registry.
    pub fn substrate(&self) -> Substrate {
        let b = &self.backend;
        let store: Arc<dyn StreamStore> = Arc::new(store::AwsStore { b: Arc::clone(b) });
        Substrate {
            store: Arc::clone(&store),
            mutex: Arc::new(mutex::AwsMutex { registry: Arc::clone(&b.registry) }),
            hub: Arc::new(hub::PollHub { b: Arc::clone(b) }),
            scheduler: Arc::new(scheduler::EventBridgeScheduler { b: Arc::clone(b) }),
            fork_peer: Arc::new(StoreForkPeer::new(store)),
            registry: Arc::new(registry::AwsRegistry { registry: Arc::clone(&b.registry) }),
            clock: b.clock.clone(),
            random: b.random.clone(),
        }
    }

    pub fn config(&self) -> &AwsConfig {
        &self.backend.cfg
    }

    /// Queue injected failures (tests of failing commits).
    #[cfg(feature = "fault-injection")]
    pub fn inject_fault(&self, point: FaultPoint, fault: Fault, count: usize) {
        self.backend.blobs.faults.inject(point, fault, count);
    }

    /// Injected failures not consumed yet.
    #[cfg(feature = "fault-injection")]
    pub fn pending_faults(&self) -> usize {
        self.backend.blobs.faults.pending()
    }

    /// Pack old inline chunks of a stream into one sealed S3 segment (see
    /// [`segments::seal`]).
    pub async fn seal(
        &self,
        path: &str,
        opts: segments::SealOptions,
    ) -> Result<segments::SealReport, ds_core::StoreError> {
        segments::seal(&self.backend, path, opts).await
    }

    /// Remove every item and object of a deleted `(path, incarnation)` (see
    /// [`cleanup::purge_incarnation`]); idempotent.
    pub async fn purge(&self, path: &str, incarnation: &str) -> Result<(), ds_core::StoreError> {
        Ok(cleanup::purge_incarnation(&self.backend, path, incarnation).await?)
    }

    /// The stream path whose items live under partition key `pk` (read from
    /// its meta item: a path too long for the key is stored hashed there);
    /// `None` if the stream has no meta item.
    pub async fn path_of_partition(&self, pk: &str) -> Result<Option<String>, ds_core::StoreError> {
        use aws_sdk_dynamodb::types::AttributeValue;
        let b = &self.backend;
        let out = b
            .ddb
            .get_item()
            .table_name(&b.cfg.table)
            .consistent_read(true)
            .key(schema::PK, AttributeValue::S(pk.to_owned()))
            .key(schema::SK, AttributeValue::S(schema::META_SK.to_owned()))
            .send()
            .await
            .map_err(error::classify)?;
        Ok(out.item().map(codec::meta_from_item).transpose()?.map(|meta| meta.path.to_string()))
    }

    /// The one-off migration of a table written before the path index
    /// existed (see [`index::backfill`]); idempotent.
    pub async fn backfill_path_index(&self) -> Result<index::BackfillReport, ds_core::StoreError> {
        index::backfill(&self.backend).await
    }

    /// Remove `path`'s path index item if its stream has no meta item (after
    /// a TTL removal; see [`index::remove_dangling`]): `false` if the stream
    /// exists and keeps its entry.
    pub async fn remove_dangling_index(&self, path: &str) -> Result<bool, ds_core::StoreError> {
        Ok(index::remove_dangling(&self.backend, path).await?)
    }

    /// Free `(path, incarnation)`'s chunk items and objects wholly below
    /// `below` (see [`reclaim::reclaim`]); idempotent, bounded per call.
    pub async fn reclaim(
        &self,
        path: &str,
        incarnation: &str,
        below: u64,
    ) -> Result<reclaim::ReclaimReport, ds_core::StoreError> {
        Ok(reclaim::reclaim(&self.backend, path, incarnation, below).await?)
    }

    /// Remove garbage of one stream path (see [`cleanup::sweep_path`]).
    pub async fn sweep(
        &self,
        path: &str,
        grace_ms: i64,
        now_ms: i64,
    ) -> Result<cleanup::SweepReport, ds_core::StoreError> {
        Ok(cleanup::sweep_path(&self.backend, path, grace_ms, now_ms).await?)
    }
}
