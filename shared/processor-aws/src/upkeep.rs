//! The table's upkeep, done by the processor function because it sees every
//! chunk insert and every TTL removal go by:
//!
//! - **TTL removals.** The table's TTL (a backstop for a lost expiry alarm)
//!   deletes only a stream's meta item. What it leaves is finished here: the
//!   reference a fork held on its source is released (exactly once, see
//!   `StreamService::release_removed_fork`), the incarnation's chunk,
//!   producer and record items and its S3 objects are purged, and the
//!   stream's path index item is removed (`ds_store_aws::index`).
//! - **Sealing.** Every [`UpkeepPolicy::seal_every`] chunk inserts of a
//!   stream seen by this instance, a seal packs its oldest inline chunks
//!   into an S3 segment (repeated while it finds work, at most
//!   `seal_rounds` times). The count is per instance and starts at zero on a
//!   cold start: sealing is an optimisation, so a late one costs nothing
//!   but item reads.
//! - **Sweeping.** Every [`UpkeepPolicy::sweep_every`] chunk inserts, the
//!   stream's path is swept: objects left by commits whose outcome stayed
//!   unknown (older than `sweep_grace_ms`) and items of dead incarnations.
//!
//! Seal and sweep failures are logged and never fail a batch: the next
//! trigger tries again, and nothing they touch is reachable garbage.

use std::collections::HashMap;
use std::sync::Mutex;

use ds_core::{ServiceError, StoreError, StreamMeta, StreamService};
use ds_store_aws::segments::SealOptions;
use ds_store_aws::AwsSubstrate;

/// When upkeep runs.
#[derive(Debug, Clone)]
pub struct UpkeepPolicy {
    /// Seal after this many chunk inserts of a stream (per instance).
    pub seal_every: u32,
    pub seal: SealOptions,
    /// Seals per trigger, each packing at most `seal.max_chunks` chunks.
    pub seal_rounds: usize,
    /// Sweep after this many chunk inserts of a stream (per instance).
    pub sweep_every: u32,
    /// Objects younger than this may belong to a commit still in flight.
    pub sweep_grace_ms: i64,
}

impl Default for UpkeepPolicy {
    fn default() -> Self {
        Self {
            seal_every: 64,
            seal: SealOptions::default(),
            seal_rounds: 4,
            sweep_every: 1024,
            sweep_grace_ms: 15 * 60 * 1000,
        }
    }
}

/// Bounds the per-stream counters: past this many streams they start over.
const MAX_COUNTED_STREAMS: usize = 10_000;

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    since_seal: u32,
    since_sweep: u32,
}

/// What upkeep did for one stream.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UpkeepReport {
    pub sealed_chunks: usize,
    pub swept_objects: usize,
    pub swept_items: usize,
}

/// Upkeep failed; the caller decides whether that fails its record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpkeepError {
    #[error("releasing the fork reference of {path}: {source}")]
    Release { path: String, source: ServiceError },
    #[error("purging {path} ({incarnation}): {source}")]
    Purge { path: String, incarnation: String, source: StoreError },
}

pub struct Upkeep {
    aws: AwsSubstrate,
    service: StreamService,
    policy: UpkeepPolicy,
    counts: Mutex<HashMap<String, Counts>>,
}

impl Upkeep {
    pub fn new(aws: AwsSubstrate, service: StreamService, policy: UpkeepPolicy) -> Self {
        Self { aws, service, policy, counts: Mutex::default() }
    }

    /// The table's TTL removed `meta`: release its fork reference, purge its
    /// items and objects. Idempotent: a redelivered record changes nothing.
    pub async fn ttl_removed(&self, meta: &StreamMeta) -> Result<(), UpkeepError> {
        let released = self
            .service
            .release_removed_fork(meta)
            .await
            .map_err(|source| UpkeepError::Release { path: meta.path.to_string(), source })?;
        let forgotten = self
            .service
            .forget_removed(meta)
            .await
            .map_err(|source| UpkeepError::Release { path: meta.path.to_string(), source })?;
        self.aws.purge(&meta.path, &meta.incarnation).await.map_err(|source| UpkeepError::Purge {
            path: meta.path.to_string(),
            incarnation: meta.incarnation.to_string(),
            source,
        })?;
        // The TTL removed the meta item alone: its path index entry goes too
        // (unless the stream was created again meanwhile).
        self.aws.remove_dangling_index(&meta.path).await.map_err(|source| UpkeepError::Purge {
            path: meta.path.to_string(),
            incarnation: meta.incarnation.to_string(),
            source,
        })?;
        tracing::info!(path = %meta.path, incarnation = %meta.incarnation, released, forgotten, "finished a TTL removal");
        Ok(())
    }

    /// `chunks` chunk inserts of `path` went by: seal and sweep when due.
    pub async fn chunks_inserted(&self, path: &str, chunks: u32) -> UpkeepReport {
        let (seal, sweep) = self.count(path, chunks);
        let mut report = UpkeepReport::default();
        if seal {
            for _ in 0..self.policy.seal_rounds.max(1) {
                match self.aws.seal(path, self.policy.seal.clone()).await {
                    Ok(sealed) if sealed.chunks > 0 => report.sealed_chunks += sealed.chunks,
                    Ok(_) => break,
                    Err(error) => {
                        tracing::warn!(path, %error, "sealing failed; the next trigger tries again");
                        break;
                    }
                }
            }
        }
        if sweep {
            match self.aws.sweep(path, self.policy.sweep_grace_ms, self.service.clock().now_ms()).await {
                Ok(swept) => {
                    report.swept_objects = swept.objects_deleted;
                    report.swept_items = swept.items_deleted;
                }
                Err(error) => tracing::warn!(path, %error, "sweeping failed; the next trigger tries again"),
            }
        }
        report
    }

    /// Counts `chunks` for `path`; returns whether a seal and a sweep are due
    /// (and restarts their counts).
    fn count(&self, path: &str, chunks: u32) -> (bool, bool) {
        let mut counts = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if counts.len() >= MAX_COUNTED_STREAMS && !counts.contains_key(path) {
            counts.clear();
        }
        let c = counts.entry(path.to_owned()).or_default();
        c.since_seal = c.since_seal.saturating_add(chunks);
        c.since_sweep = c.since_sweep.saturating_add(chunks);
        let seal = c.since_seal >= self.policy.seal_every.max(1);
        let sweep = c.since_sweep >= self.policy.sweep_every.max(1);
        if seal {
            c.since_seal = 0;
        }
        if sweep {
            c.since_sweep = 0;
        }
        (seal, sweep)
    }
}
