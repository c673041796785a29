//! DELETE (hard, soft, cascading GC up the fork chain), expiry, and HEAD.

use futures::future::BoxFuture;
use futures::FutureExt;

use super::registry::Change;
use super::{Plan, ServiceResult, StreamService};
use crate::{Commit, Expect, Op, Record, RecordExpect, StreamMeta};

/// Longest fork chain a cascade walks in one commit (bounds the commit size).
const MAX_CASCADE: usize = 32;

impl StreamService {
    /// HEAD: metadata without touching the TTL.
    pub async fn head(&self, path: &str) -> ServiceResult<StreamMeta> {
        ds_protocol::path::validate(path)?;
        let stream = self.sub.registry.enter(path);
        self.read_live_meta(&stream).await
    }

    pub async fn delete(&self, path: &str) -> ServiceResult<()> {
        ds_protocol::path::validate(path)?;
        self.refuse_registry_write(path)?;
        let stream = self.sub.registry.enter(path);
        self.mutate(&stream, |reads| {
            let stream = &stream;
            async move {
                let meta = self.live_meta(stream, reads).await?;
                self.plan_delete(meta).await
            }
        })
        .await
    }

    /// Delete `meta`: soft when forks still reference it, otherwise hard,
    /// releasing its source's reference (and collecting soft-deleted
    /// ancestors whose last reference this was) in the same commit.
    /// Either way the stream leaves the registry in the same commit (a
    /// soft-deleted stream no longer exists to clients; the sources a cascade
    /// collects left it when they were soft-deleted).
    async fn plan_delete(&self, meta: StreamMeta) -> ServiceResult<Plan<()>> {
        let mut commit = Commit::new();
        if meta.ref_count > 0 {
            let mut soft = meta.clone();
            soft.soft_deleted = true;
            soft.version += 1;
            commit.push(Op::PutMeta { meta: soft.clone(), expect: Expect::Version(meta.version) });
            let registry = self.plan_registry(&mut commit, Change::Deleted(&meta.path)).await?;
            return Ok(Plan::Commit {
                commit,
                publish: None,
                deleted: vec![soft],
                value: (),
                predicted: None,
                registry,
            });
        }
        let mut deleted = vec![meta.clone()];
        commit.push(Op::DeleteStream {
            path: meta.path.clone(),
            incarnation: meta.incarnation.clone(),
            expect_version: meta.version,
        });
        let path = meta.path.clone();
        self.release_sources(&mut commit, &mut deleted, meta, None).await?;
        let registry = self.plan_registry(&mut commit, Change::Deleted(&path)).await?;
        Ok(Plan::Commit { commit, publish: None, deleted, value: (), predicted: None, registry })
    }

    /// Adds to `commit` the release of the reference `child` (gone, or going
    /// in the same commit) holds on its fork source: the source's count drops
    /// by one, or, for a soft-deleted source whose last reference this was,
    /// the source is deleted too and the walk goes on up the chain. `marker`
    /// (a record key) is written on the source whose count drops, absent
    /// before, so a release that must happen once can tell it already did.
    async fn release_sources(
        &self,
        commit: &mut Commit,
        deleted: &mut Vec<StreamMeta>,
        mut child: StreamMeta,
        marker: Option<&str>,
    ) -> ServiceResult<()> {
        for _ in 0..MAX_CASCADE {
            let Some(origin) = child.fork.clone() else {
                break;
            };
            let source_stream = self.sub.registry.enter(&origin.source);
            let Some(source) = self.sub.store.read_meta(&source_stream).await? else {
                break;
            };
            if source.incarnation != origin.source_incarnation {
                break;
            }
            if source.soft_deleted && source.ref_count <= 1 {
                commit.push(Op::DeleteStream {
                    path: source.path.clone(),
                    incarnation: source.incarnation.clone(),
                    expect_version: source.version,
                });
                deleted.push(source.clone());
                child = source;
            } else {
                let mut released = source.clone();
                released.ref_count = released.ref_count.saturating_sub(1);
                released.version += 1;
                commit.push(Op::PutMeta { meta: released, expect: Expect::Version(source.version) });
                if let Some(key) = marker {
                    commit.push(Op::PutRecord {
                        path: source.path.clone(),
                        incarnation: source.incarnation.clone(),
                        key: key.to_owned(),
                        record: Record { revision: 1, value: bytes::Bytes::new() },
                        expect: RecordExpect::Absent,
                    });
                }
                break;
            }
        }
        Ok(())
    }

    /// A fork whose meta record vanished without a delete (AWS: the table's
    /// TTL backstop removed it) still holds a reference on its source:
    /// release it, exactly once however often this runs for `removed` (a
    /// marker record `fork-released/<incarnation>` on the source says it
    /// happened — incarnation ids are unique across paths —; a source the
    /// release deletes needs none). Returns whether this call released it.
    pub async fn release_removed_fork(&self, removed: &StreamMeta) -> ServiceResult<bool> {
        let Some(origin) = removed.fork.clone() else {
            return Ok(false);
        };
        let source = self.sub.registry.enter(&origin.source);
        let marker = format!("fork-released/{}", removed.incarnation);
        self.mutate(&source, |_| {
            let (source, marker, origin) = (&source, marker.as_str(), &origin);
            async move {
                let Some(meta) = self.sub.store.read_meta(source).await? else {
                    return Ok(Plan::Done(false));
                };
                if meta.incarnation != origin.source_incarnation
                    || self.sub.store.read_record(source, &meta.incarnation, marker).await?.is_some()
                {
                    return Ok(Plan::Done(false));
                }
                let (mut commit, mut deleted) = (Commit::new(), Vec::new());
                self.release_sources(&mut commit, &mut deleted, removed.clone(), Some(marker)).await?;
                Ok(Plan::Commit { commit, publish: None, deleted, value: true, predicted: None, registry: None })
            }
        })
        .await
    }

    /// A stream whose meta record vanished without a delete (AWS: the
    /// table's TTL backstop removed it) leaves the registry, exactly once
    /// however often this runs for `removed` (a marker record on the
    /// registry says it happened), and not at all when the path holds a
    /// stream again (its create's entry stands). Returns whether this call
    /// removed the entry.
    pub async fn forget_removed(&self, removed: &StreamMeta) -> ServiceResult<bool> {
        let stream = self.sub.registry.enter(&removed.path);
        self.mutate(&stream, |_| {
            let stream = &stream;
            async move {
                if self.sub.store.read_meta(stream).await?.is_some() {
                    return Ok(Plan::Done(false));
                }
                let mut commit = Commit::new();
                let change = Change::Removed { path: &removed.path, incarnation: &removed.incarnation };
                Ok(match self.plan_registry(&mut commit, change).await? {
                    None => Plan::Done(false),
                    registry => Plan::Commit {
                        commit,
                        publish: None,
                        deleted: Vec::new(),
                        value: true,
                        predicted: None,
                        registry,
                    },
                })
            }
        })
        .await
    }

    /// Remove an expired stream (best effort: a failure leaves it for the
    /// next access or alarm, and it already reads as gone).
    /// Boxed: `mutate` calls back into it when a plan meets an expired stream.
    pub(crate) fn expire<'a>(&'a self, meta: &'a StreamMeta) -> BoxFuture<'a, ()> {
        async move {
            if let Err(e) = self.remove_expired(meta).await {
                tracing::warn!(path = %meta.path, error = %e, "could not remove expired stream");
            }
        }
        .boxed()
    }

    /// Delete `meta`'s incarnation if it is still there and expired.
    async fn remove_expired(&self, meta: &StreamMeta) -> ServiceResult<()> {
        let stream = self.sub.registry.enter(&meta.path);
        let incarnation = meta.incarnation.clone();
        self.mutate(&stream, |_| async {
            match self.sub.store.read_meta(&stream).await? {
                Some(m) if m.incarnation == incarnation && !m.soft_deleted && m.is_expired(self.clock.now_ms()) => {
                    self.plan_delete(m).await
                }
                _ => Ok(Plan::Done(())),
            }
        })
        .await
    }

    /// An expiry alarm fired for `(path, incarnation)`: delete the stream if
    /// it has expired, or re-arm for its (moved) deadline. Unlike expiry on
    /// access, a failure is returned: the alarm that fired is gone, so its
    /// caller must fail for the alarm to be retried.
    pub async fn run_expiry(&self, path: &str, incarnation: &str) -> ServiceResult<()> {
        let stream = self.sub.registry.enter(path);
        let Some(meta) = self.sub.store.read_meta(&stream).await? else {
            return Ok(());
        };
        if *meta.incarnation != *incarnation || meta.soft_deleted {
            return Ok(());
        }
        if meta.is_expired(self.clock.now_ms()) {
            self.remove_expired(&meta).await
        } else {
            self.schedule_expiry(&meta).await
        }
    }
}
