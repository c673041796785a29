//! Retention: dropping a stream's history before a position (PROTOCOL.md
//! §4: "Servers MAY implement retention policies that drop data older than
//! a certain age while the stream continues").
//!
//! A trim is a mutation like any other: under the stream's lock, one commit
//! raises the meta's `retained_from` (version-fenced, so it is re-planned
//! when it loses a race, and planned on the pipeline's prediction so it
//! queues behind appends in flight instead of conflicting with them). Only
//! then does the store free the chunks wholly below it
//! ([`crate::StreamStore::reclaim`]), so no reader ever finds a hole: a read
//! below `retained_from` is refused (`410`, [`ServiceError::NotRetained`])
//! before it looks for bytes, and a read that planned on an older meta and
//! finds its chunks gone re-reads the meta and is refused the same way.
//!
//! Forks: a fork's `retained_from` counts in its own position space and
//! starts at 0. It does not pin its source's history: a source trimmed past
//! what a fork inherited takes those bytes from the fork too, so the fork's
//! effective earliest position is `max(own, min(source's effective, base))`
//! ([`StreamService::earliest`]).

use bytes::Bytes;
use ds_protocol::headers::is_json;
use futures::future::BoxFuture;
use futures::FutureExt;

use super::{Plan, Predicted, Reads, ServiceError, ServiceResult, StreamService};
use crate::{Commit, Expect, Op, StreamHandle, StreamMeta};

/// A planned trim: the meta it commits (its prediction) and its answer.
struct Trimmed {
    meta: StreamMeta,
    outcome: TrimOutcome,
}

/// What a trim left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrimOutcome {
    /// The stream's `retained_from` after the trim.
    pub retained_from: u64,
    /// The trim raised it (`false`: it already was at or past the boundary).
    pub raised: bool,
}

impl StreamService {
    /// Drop the history of `path` before `up_to`: its `retained_from` is
    /// raised to the last append (JSON: message) boundary at or before
    /// `up_to` (clamped to the tail), never lowered. Idempotent. The store
    /// then reclaims the chunks wholly below it.
    pub async fn trim(&self, path: &str, up_to: u64) -> ServiceResult<TrimOutcome> {
        self.trim_lifetime(path, None, up_to).await
    }

    /// [`Self::trim`] of one life of the stream: a re-created stream at the
    /// path answers [`ServiceError::IncarnationChanged`] and is not touched
    /// (a caller that read positions in the old life must not trim the new
    /// one at them).
    pub async fn trim_incarnation(&self, path: &str, incarnation: &str, up_to: u64) -> ServiceResult<TrimOutcome> {
        self.trim_lifetime(path, Some(incarnation), up_to).await
    }

    async fn trim_lifetime(&self, path: &str, expected: Option<&str>, up_to: u64) -> ServiceResult<TrimOutcome> {
        ds_protocol::path::validate(path)?;
        self.refuse_registry_write(path)?;
        let stream = self.sub.registry.enter(path);
        // The boundary is found on a consistent read, outside the lock:
        // positions below the stored tail never change, so it stays a
        // boundary whatever is appended meanwhile.
        let meta = self.read_live_meta(&stream).await?;
        if let Some(expected) = expected.filter(|e| **e != *meta.incarnation) {
            return Err(ServiceError::IncarnationChanged {
                expected: expected.to_owned(),
                found: meta.incarnation.to_string(),
            });
        }
        let up_to = up_to.min(meta.tail);
        let boundary = if up_to <= meta.retained_from {
            meta.retained_from
        } else {
            self.boundary_at(&stream, &meta, up_to).await?.max(meta.retained_from)
        };
        let incarnation = meta.incarnation.clone();
        let planned = self
            .mutate(&stream, |reads| {
                let (stream, incarnation) = (&stream, &incarnation);
                async move { self.plan_trim(stream, incarnation, boundary, reads).await }
            })
            .await?;
        let outcome = planned.outcome;
        // Also when nothing was raised: a reclaim lost to a crash, or not
        // yet run, is asked for again (it is idempotent).
        if let Err(e) = self.sub.store.reclaim(&stream, &incarnation, outcome.retained_from).await {
            tracing::warn!(path, error = %e, "reclaiming trimmed chunks failed; retried on the next trim");
        }
        Ok(outcome)
    }

    /// The trim's commit is planned like an append's: on the pipeline's
    /// prediction when appends are in flight, fenced by the version and
    /// tail it names, chained behind them and predicting its own meta. So
    /// it queues behind pipelined appends instead of racing them (planned
    /// on the store, it would conflict with every append in flight), a
    /// refusal of one it is stacked on refuses it too (it is re-planned),
    /// and appends keep stacking on it.
    async fn plan_trim(
        &self,
        stream: &StreamHandle,
        incarnation: &str,
        boundary: u64,
        reads: Reads,
    ) -> ServiceResult<Plan<Trimmed>> {
        let current = self.live_meta(stream, reads).await?;
        if *current.incarnation != *incarnation {
            return Err(ServiceError::IncarnationChanged {
                expected: incarnation.to_owned(),
                found: current.incarnation.to_string(),
            });
        }
        if boundary <= current.retained_from {
            let outcome = TrimOutcome { retained_from: current.retained_from, raised: false };
            return Ok(Plan::Done(Trimmed { meta: current, outcome }));
        }
        let mut next = current.clone();
        next.retained_from = boundary;
        next.version += 1;
        let mut commit = Commit::with_capacity(1);
        let expect = Expect::VersionAt { version: current.version, tail: current.tail };
        commit.push(Op::PutMeta { meta: next.clone(), expect });
        Ok(Plan::Commit {
            commit,
            // Nothing a live reader waits for changed (tail, closed).
            publish: None,
            deleted: Vec::new(),
            value: Trimmed { meta: next, outcome: TrimOutcome { retained_from: boundary, raised: true } },
            predicted: Some(Predicted { meta: |t: &Trimmed| &t.meta, producer: None, records: Vec::new() }),
            registry: None,
        })
    }

    /// The earliest position a read of `meta` may start at: its own
    /// `retained_from`, raised, for a fork, by what its source lineage
    /// still holds of the bytes it inherited. Reads one source meta per
    /// fork level (none for a stream that is not a fork, or a fork trimmed
    /// past its base).
    pub fn earliest<'a>(&'a self, meta: &'a StreamMeta) -> BoxFuture<'a, ServiceResult<u64>> {
        async move {
            let own = meta.retained_from;
            let Some(origin) = meta.fork.as_ref().filter(|o| own < o.base) else {
                return Ok(own);
            };
            let inherited = match self.sub.fork_peer.source_meta(&origin.source).await? {
                Some(source) if source.incarnation == origin.source_incarnation => self.earliest(&source).await?,
                // Held by the fork's reference; gone only if removed by hand:
                // nothing of it is readable.
                _ => origin.base,
            };
            Ok(own.max(inherited.min(origin.base)))
        }
        .boxed()
    }

    /// The last append (JSON: message) boundary at or before `up_to`, which
    /// is below `meta.tail`: the start of the stored chunk holding `up_to`
    /// (chunks hold whole appends), or for JSON the end of the last message
    /// in it that ends by `up_to`. Inherited positions are looked up in the
    /// source lineage; a fork's base is a boundary.
    fn boundary_at<'a>(
        &'a self,
        stream: &'a StreamHandle,
        meta: &'a StreamMeta,
        up_to: u64,
    ) -> BoxFuture<'a, ServiceResult<u64>> {
        async move {
            if up_to >= meta.tail {
                return Ok(meta.tail);
            }
            if let Some(origin) = meta.fork.as_ref().filter(|o| up_to < o.base) {
                let source = match self.sub.fork_peer.source_meta(&origin.source).await? {
                    Some(s) if s.incarnation == origin.source_incarnation => s,
                    _ => return Ok(meta.retained_from),
                };
                if up_to < source.retained_from {
                    // Already gone from the source: nothing to find there.
                    return Ok(meta.retained_from);
                }
                let limited = StreamMeta { tail: origin.base.min(source.tail), ..source };
                return self.boundary_at(&StreamHandle::detached(&origin.source), &limited, up_to).await;
            }
            let chunks = self.sub.store.read_chunks(stream, &meta.incarnation, up_to, up_to + 1, 1).await?;
            let Some(chunk) = chunks.into_iter().find(|c| c.start <= up_to && up_to < c.end()) else {
                return Err(
                    crate::StoreError::corrupt(format!("chunks of {}", meta.path), format!("gap at {up_to}")).into()
                );
            };
            if !is_json(&meta.content_type) {
                return Ok(chunk.start);
            }
            Ok(chunk.start + json_boundary(&chunk.data, up_to - chunk.start))
        }
        .boxed()
    }
}

/// The length of the longest prefix of `data[..within]` made of whole
/// messages (each ends with `\n` as stored).
fn json_boundary(data: &Bytes, within: u64) -> u64 {
    let within = usize::try_from(within).unwrap_or(usize::MAX).min(data.len());
    data[..within].iter().rposition(|&b| b == b'\n').map_or(0, |i| i as u64 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_boundaries_never_split_a_message() {
        let data = Bytes::from_static(b"{\"a\":1}\n{\"b\":2}\n[3]\n");
        assert_eq!(json_boundary(&data, 0), 0);
        assert_eq!(json_boundary(&data, 7), 0, "inside the first message");
        assert_eq!(json_boundary(&data, 8), 8, "just after it");
        assert_eq!(json_boundary(&data, 12), 8);
        assert_eq!(json_boundary(&data, 16), 16);
        assert_eq!(json_boundary(&data, 100), data.len() as u64);
    }
}
