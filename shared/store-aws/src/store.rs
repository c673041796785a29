//! [`StreamStore`] over DynamoDB + S3.
//!
//! Reads are consistent (`ConsistentRead=true`). The two *for-update* reads
//! the core uses to plan a mutation are served from the per-process context
//! cache when it has the record, which is what makes a warm append cost one
//! DynamoDB call (the transaction): the cache is kept current by this
//! process's commits and by the `ALL_OLD` image every lost race returns, and
//! a stale entry can only cost a failed transaction, never a wrong answer —
//! the commit's version + incarnation condition rejects it, and the core
//! re-plans every outcome that writes nothing with consistent reads.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ds_core::{
    Chain, Chunk, Commit, PendingCommit, ProducerState, Record, StoreError, StreamHandle, StreamMeta, StreamStore,
    TrySubmit,
};
use tracing::debug;

use crate::backend::Backend;
use crate::codec::{self, n, s};
use crate::error::{classify, AwsError};
use crate::registry::{CachedMeta, StreamCtx};
use crate::retry::{sdk_retries_off, Budget};
use crate::schema::{meta_attr as m, ItemKey, TTL_ATTR};

/// How long a cached meta may plan a mutation without having been confirmed
/// by DynamoDB (a read, a commit, or a lost race's ALL_OLD). Past it the
/// next for-update read goes to DynamoDB: on a stream that other instances
/// also write, an old entry is likely stale and would cost a lost race.
pub const CACHE_TRUST: Duration = Duration::from_secs(30);

/// The AWS [`StreamStore`].
pub struct AwsStore {
    pub(crate) b: Arc<Backend>,
}

/// Consistent `GetItem` of the meta item; refreshes the context cache.
pub(crate) async fn fetch_meta(b: &Backend, ctx: &StreamCtx) -> Result<Option<StreamMeta>, StoreError> {
    let read = ctx.begin_read();
    let out = b
        .ddb
        .get_item()
        .table_name(&b.cfg.table)
        .consistent_read(true)
        .set_key(Some(codec::key_of(&ItemKey::Meta { path: ctx.path.clone() })))
        .send()
        .await
        .map_err(classify)?;
    match out.item() {
        None => {
            ctx.remember_read(None, read);
            Ok(None)
        }
        Some(item) => {
            let meta = codec::meta_from_item(item)?;
            ctx.remember_read(
                Some(CachedMeta::new(meta.clone(), codec::meta_commit_id(item).map(str::to_owned))),
                read,
            );
            Ok(Some(meta))
        }
    }
}

impl AwsStore {
    pub(crate) async fn fetch_meta(&self, ctx: &StreamCtx) -> Result<Option<StreamMeta>, StoreError> {
        fetch_meta(&self.b, ctx).await
    }

    /// Consistent `GetItem` of one producer; refreshes the context's cache.
    async fn read_producer_of(
        &self,
        ctx: &StreamCtx,
        incarnation: &str,
        producer_id: &str,
    ) -> Result<Option<ProducerState>, StoreError> {
        let key = ItemKey::Producer {
            path: ctx.path.clone(),
            incarnation: incarnation.to_owned(),
            producer_id: producer_id.to_owned(),
        };
        let at = ctx.producer_tag();
        let out = self
            .b
            .ddb
            .get_item()
            .table_name(&self.b.cfg.table)
            .consistent_read(true)
            .set_key(Some(codec::key_of(&key)))
            .send()
            .await
            .map_err(classify)?;
        let state = match out.item() {
            None => None,
            Some(item) => Some(codec::producer_from_item(item)?),
        };
        ctx.remember_producer(&at, incarnation, producer_id, state);
        Ok(state)
    }

    fn usable_cache(&self, ctx: &StreamCtx) -> Option<StreamMeta> {
        let cached = ctx.cached()?;
        (cached.confirmed_at.elapsed() <= CACHE_TRUST).then_some(cached.meta)
    }

    /// The touch interval for `meta`: at most the configured one, and at most
    /// a tenth of a sliding TTL so a short TTL is never cut short by more
    /// than 10% by coalescing.
    fn touch_interval_ms(&self, ttl_secs: Option<u64>) -> i64 {
        let base = i64::try_from(self.b.cfg.touch_interval.as_millis()).unwrap_or(i64::MAX);
        match ttl_secs {
            Some(ttl) => base.min(i64::try_from(ttl.saturating_mul(100)).unwrap_or(i64::MAX)),
            None => base,
        }
    }
}

#[async_trait]
impl StreamStore for AwsStore {
    #[tracing::instrument(level = "debug", skip(self, stream), fields(path = stream.path()))]
    async fn read_meta(&self, stream: &StreamHandle) -> Result<Option<StreamMeta>, StoreError> {
        let ctx = self.b.registry.context_of(stream);
        self.fetch_meta(&ctx).await
    }

    #[tracing::instrument(level = "debug", skip(self, stream), fields(path = stream.path()))]
    async fn read_meta_for_update(&self, stream: &StreamHandle) -> Result<Option<StreamMeta>, StoreError> {
        let ctx = self.b.registry.context_of(stream);
        if let Some(meta) = self.usable_cache(&ctx) {
            debug!("meta for update served from the context cache");
            return Ok(Some(meta));
        }
        self.fetch_meta(&ctx).await
    }

    #[tracing::instrument(level = "debug", skip(self, stream), fields(path = stream.path()))]
    async fn read_producer_for_update(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        producer_id: &str,
    ) -> Result<Option<ProducerState>, StoreError> {
        let ctx = self.b.registry.context_of(stream);
        if let Some(state) = ctx.cached_producer(incarnation, producer_id) {
            return Ok(state);
        }
        self.read_producer_of(&ctx, incarnation, producer_id).await
    }

    #[tracing::instrument(level = "debug", skip(self, stream), fields(path = stream.path()))]
    async fn read_chunks(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        from: u64,
        until: u64,
        max_bytes: usize,
    ) -> Result<Vec<Chunk>, StoreError> {
        crate::reader::read_chunks(&self.b, stream.path(), incarnation, from, until, max_bytes).await
    }

    /// Consistent read; refreshes the context's producer cache.
    #[tracing::instrument(level = "debug", skip(self, stream), fields(path = stream.path()))]
    async fn read_producer(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        producer_id: &str,
    ) -> Result<Option<ProducerState>, StoreError> {
        let ctx = self.b.registry.context_of(stream);
        self.read_producer_of(&ctx, incarnation, producer_id).await
    }

    /// Consistent `GetItem` of the record item.
    #[tracing::instrument(level = "debug", skip(self, stream), fields(path = stream.path()))]
    /// From the stream's cache when this process read or committed the
    /// record (see `StreamCtx::cached_record`), else [`Self::read_record`].
    async fn read_record_for_update(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        key: &str,
    ) -> Result<Option<Record>, StoreError> {
        let ctx = self.b.registry.context_of(stream);
        if let Some(record) = ctx.cached_record(incarnation, key) {
            return Ok(Some(record));
        }
        let record = self.read_record(stream, incarnation, key).await?;
        if let Some(r) = &record {
            ctx.remember_record(incarnation, key, r.clone());
        }
        Ok(record)
    }

    async fn read_record(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        key: &str,
    ) -> Result<Option<Record>, StoreError> {
        let item_key = ItemKey::Record {
            path: stream.path().to_owned(),
            incarnation: incarnation.to_owned(),
            key: key.to_owned(),
        };
        let out = self
            .b
            .ddb
            .get_item()
            .table_name(&self.b.cfg.table)
            .consistent_read(true)
            .set_key(Some(codec::key_of(&item_key)))
            .send()
            .await
            .map_err(classify)?;
        Ok(out.item().map(codec::record_from_item).transpose()?)
    }

    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        crate::txn::commit(&self.b, commit).await
    }

    /// Queued for the stream's next transaction ([`crate::group`]).
    async fn submit(&self, commit: Commit) -> Result<PendingCommit, StoreError> {
        match crate::group::try_submit(&self.b, commit, None) {
            TrySubmit::Submitted(submitted) => submitted,
            TrySubmit::WouldWait(commit) => crate::group::submit(&self.b, commit, None).await,
        }
    }

    fn try_submit(&self, commit: Commit) -> TrySubmit {
        crate::group::try_submit(&self.b, commit, None)
    }

    /// With group commit on: a queued commit is applied after `submit`
    /// returned, so the service may stack an append on one that is later
    /// refused ([`crate::group`]'s rule on chains).
    fn chains_submissions(&self) -> bool {
        self.b.cfg.group_commit
    }

    /// Queued with its chain; [`TrySubmit::WouldWait`] as `try_submit`'s
    /// (the queue full, or a commit not queued): the service then calls
    /// [`Self::submit_chained`].
    fn try_submit_chained(&self, commit: Commit, chain: Chain) -> TrySubmit {
        crate::group::try_submit(&self.b, commit, Some(&chain))
    }

    /// [`Self::submit`] keeping the commit's chain: refused if the chain is
    /// broken when its turn comes, breaking it unless applied.
    async fn submit_chained(&self, commit: Commit, chain: Chain) -> Result<PendingCommit, StoreError> {
        match crate::group::try_submit(&self.b, commit, Some(&chain)) {
            TrySubmit::Submitted(submitted) => submitted,
            TrySubmit::WouldWait(commit) => crate::group::submit(&self.b, commit, Some(&chain)).await,
        }
    }

    /// With group commit on: the group's driver pauses after a lost race.
    fn paces_conflicts(&self) -> bool {
        self.b.cfg.group_commit
    }

    /// Coalesced: skipped when this process already wrote (or committed) a
    /// `touched_at_ms` within the touch interval of `at_ms`. Otherwise one
    /// conditional `UpdateItem` that only moves `touched_at_ms` forward, for
    /// the same incarnation, and moves the TTL backstop with it (retried
    /// under the retry budget, [`crate::retry`]).
    #[tracing::instrument(level = "debug", skip(self, stream), fields(path = stream.path()))]
    async fn touch(&self, stream: &StreamHandle, incarnation: &str, at_ms: i64) -> Result<(), StoreError> {
        let ctx = self.b.registry.context_of(stream);
        for attempt in 0..2 {
            let cached = match ctx.cached() {
                Some(c) => c.meta,
                // Unknown here: one read tells whether a backstop must move.
                None => match self.fetch_meta(&ctx).await? {
                    Some(meta) => meta,
                    None => return Ok(()),
                },
            };
            if *cached.incarnation != *incarnation {
                return Ok(()); // another incarnation: a touch never crosses over
            }
            let interval = self.touch_interval_ms(cached.ttl_secs);
            let last = ctx.last_touch_written.load(Ordering::Relaxed);
            if at_ms < last.saturating_add(interval) {
                return Ok(());
            }
            let mut next = cached;
            next.touched_at_ms = next.touched_at_ms.max(at_ms);
            // The backstop moves with the deadline, but only where one is set
            // (none while forks reference the stream).
            let backstop = codec::ttl_backstop_secs(&next);
            let mut req = self
                .b
                .ddb
                .update_item()
                .table_name(&self.b.cfg.table)
                .set_key(Some(codec::key_of(&ItemKey::Meta { path: ctx.path.clone() })))
                .expression_attribute_names("#inc", m::INCARNATION)
                .expression_attribute_names("#t", m::TOUCHED)
                .expression_attribute_names("#ttl", TTL_ATTR)
                .expression_attribute_values(":inc", s(incarnation))
                .expression_attribute_values(":t", n(at_ms));
            req = match backstop {
                Some(ttl) => req
                    .update_expression("SET #t = :t, #ttl = :ttl")
                    .condition_expression("#inc = :inc AND #t < :t AND attribute_exists(#ttl)")
                    .expression_attribute_values(":ttl", n(ttl)),
                None => req
                    .update_expression("SET #t = :t")
                    .condition_expression("#inc = :inc AND #t < :t AND attribute_not_exists(#ttl)"),
            };
            match send_with_retries(&self.b, req).await {
                Ok(_) => {
                    ctx.last_touch_written.fetch_max(at_ms, Ordering::Relaxed);
                    ctx.note_touch(incarnation, at_ms);
                    return Ok(());
                }
                // Gone, re-created, already touched later, or our view of the
                // backstop was stale (a fork appeared or went): re-read once.
                Err(AwsError::ConditionFailed { .. }) if attempt == 0 => {
                    ctx.remember(None);
                }
                Err(AwsError::ConditionFailed { .. }) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    fn max_read_bytes(&self) -> Option<usize> {
        Some(crate::MAX_READ_BYTES)
    }

    /// The path index ([`crate::index`]): every stream, paged in byte-wise
    /// path order (sweeps and `GET /v1/processors`).
    async fn list_streams(&self, after: Option<&str>, limit: usize) -> Result<Vec<StreamMeta>, StoreError> {
        crate::index::list(&self.b, "", after, limit).await
    }

    /// One `Query` of the path index by prefix (plus the matches' metas):
    /// subscription backfill. Costs grow with the matches, not the table.
    async fn list_streams_with_prefix(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StreamMeta>, StoreError> {
        crate::index::list(&self.b, prefix, after, limit).await
    }

    /// Deletes the chunk items wholly below `below` and the objects only
    /// they pointed at ([`crate::reclaim`]), a bounded amount per call (the
    /// next trim's reclaim continues). Called by retention trims, which on
    /// AWS run in the alarm function, never in the HTTP function.
    async fn reclaim(&self, stream: &StreamHandle, incarnation: &str, below: u64) -> Result<(), StoreError> {
        crate::reclaim::reclaim(&self.b, stream.path(), incarnation, below).await?;
        Ok(())
    }
}

/// The touch's `UpdateItem`, SDK retries off, retried here under the retry
/// budget while throttled or of unknown outcome (a touch applied twice is
/// one touch: its condition only lets `touched` move forward).
async fn send_with_retries(
    b: &Backend,
    req: aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder,
) -> Result<aws_sdk_dynamodb::operation::update_item::UpdateItemOutput, AwsError> {
    let mut budget = Budget::start();
    loop {
        let sent = req.clone().customize().config_override(sdk_retries_off()).send().await.map_err(classify);
        match sent {
            Err(AwsError::Throttled(_) | AwsError::Ambiguous(_)) => {
                if !budget.next(b).await {
                    return sent;
                }
            }
            other => return other,
        }
    }
}
