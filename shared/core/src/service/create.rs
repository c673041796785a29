//! PUT: create a stream (optionally closed, optionally with a body), or a
//! fork of another stream; idempotent when the configuration matches.

use bytes::Bytes;
use ds_protocol::fork::fork_lifetime;
use ds_protocol::headers::{content_types_match, is_json, Lifetime};
use ds_protocol::json::{self, EmptyArray};
use ds_protocol::{path, Offset};

use super::read::Cut;
use super::registry::Change;
use super::{Plan, ServiceError, ServiceResult, StreamService};
use crate::{Chunk, Commit, Expect, ForkOrigin, Op, StreamHandle, StreamMeta};

/// Content type of a stream created without one.
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// Whether a fork's offset must lie in its source's retained history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retained {
    Required,
    NotRequired,
}

#[derive(Debug, Clone)]
pub struct ForkRequest {
    pub source: String,
    pub offset: Option<Offset>,
    pub sub_offset: u64,
}

#[derive(Debug, Clone)]
pub struct CreateRequest {
    pub path: String,
    pub content_type: Option<String>,
    pub lifetime: Lifetime,
    pub closed: bool,
    pub body: Bytes,
    pub fork: Option<ForkRequest>,
}

#[derive(Debug, Clone)]
pub struct CreateOutcome {
    /// `true`: 201 Created; `false`: 200, an identical stream already existed.
    pub created: bool,
    pub meta: StreamMeta,
}

impl StreamService {
    pub async fn create(&self, req: CreateRequest) -> ServiceResult<CreateOutcome> {
        path::validate(&req.path)?;
        let stream = self.sub.registry.enter(&req.path);
        if let Some(fork) = &req.fork {
            path::validate(&fork.source)?;
            if fork.source == req.path {
                return Err(ServiceError::BadRequest("a stream cannot fork itself".into()));
            }
        }
        self.refuse_registry_write(&req.path)?;
        if let Some(fork) = &req.fork {
            if self.keeps_registry() && fork.source == super::REGISTRY_PATH {
                return Err(ServiceError::Reserved(format!("{} cannot be forked", super::REGISTRY_PATH)));
            }
        }
        let outcome = self.mutate(&stream, |_| self.plan_create(&stream, &req)).await?;
        if outcome.created {
            self.arm_expiry(&outcome.meta).await;
        }
        Ok(outcome)
    }

    async fn plan_create(&self, stream: &StreamHandle, req: &CreateRequest) -> ServiceResult<Plan<CreateOutcome>> {
        let now = self.clock.now_ms();
        if let Some(existing) = self.sub.store.read_meta(stream).await? {
            if existing.soft_deleted {
                return Err(ServiceError::Conflict(
                    "a deleted stream still referenced by forks holds this path".into(),
                ));
            }
            if !existing.is_expired(now) {
                return self.confirm_existing(req, existing).await.map(Plan::Done);
            }
            // An expired stream still on record: `mutate` removes it, then re-plans.
            return Err(ServiceError::Expired(Box::new(existing)));
        }

        let mut commit = Commit::new();
        let (content_type, lifetime, fork) = match &req.fork {
            None => (req.content_type.as_deref().unwrap_or(DEFAULT_CONTENT_TYPE).into(), req.lifetime, None),
            Some(f) => {
                let (source, base) = self.resolve_fork(req, f, Retained::Required).await?;
                let mut bumped = source.clone();
                bumped.ref_count += 1;
                bumped.version += 1;
                commit.push(Op::PutMeta { meta: bumped, expect: Expect::Version(source.version) });
                let source_lifetime = Lifetime { ttl_secs: source.ttl_secs, expires_at_ms: source.expires_at_ms };
                let origin =
                    ForkOrigin { source: source.path.clone(), source_incarnation: source.incarnation.clone(), base };
                (source.content_type.clone(), fork_lifetime(source_lifetime, req.lifetime), Some(origin))
            }
        };
        let data = if is_json(&content_type) {
            if req.body.is_empty() {
                Bytes::new()
            } else {
                json::frame_messages(&req.body, EmptyArray::Allow)?
            }
        } else {
            req.body.clone()
        };
        let base = fork.as_ref().map_or(0, |f| f.base);
        let meta = StreamMeta {
            path: req.path.as_str().into(),
            incarnation: uuid::Uuid::new_v4().simple().to_string().into(),
            version: 0,
            content_type,
            created_at_ms: now,
            tail: base + data.len() as u64,
            closed: req.closed,
            closed_by: None,
            ttl_secs: lifetime.ttl_secs,
            expires_at_ms: lifetime.expires_at_ms,
            touched_at_ms: now,
            last_stream_seq: None,
            fork,
            ref_count: 0,
            soft_deleted: false,
            retained_from: 0,
        };
        commit.push(Op::PutMeta { meta: meta.clone(), expect: Expect::Absent });
        if !data.is_empty() {
            commit.push(Op::PutChunk {
                path: meta.path.clone(),
                incarnation: meta.incarnation.clone(),
                chunk: Chunk { start: base, data },
            });
        }
        // Last: the registry's lock is taken only once the create will commit.
        let registry = self.plan_registry(&mut commit, Change::Created(&meta)).await?;
        Ok(Plan::Commit {
            commit,
            publish: Some(crate::TailSignal::of(&meta)),
            deleted: Vec::new(),
            value: CreateOutcome { created: true, meta },
            registry,
            predicted: None,
        })
    }

    /// PUT on an existing stream: 200 when the configuration matches, else 409.
    async fn confirm_existing(&self, req: &CreateRequest, existing: StreamMeta) -> ServiceResult<CreateOutcome> {
        let mismatch = |what: &str| Err(ServiceError::Conflict(format!("stream exists with a different {what}")));
        match (&req.fork, &existing.fork) {
            (None, None) => {}
            (Some(f), Some(origin)) => {
                if *f.source != *origin.source {
                    return mismatch("fork source");
                }
                if f.offset.is_some() {
                    let (_, base) = self.resolve_fork(req, f, Retained::NotRequired).await.or_else(|e| match e {
                        ServiceError::NotFound | ServiceError::Gone => Ok((existing.clone(), u64::MAX)),
                        // The sub-offset's append was trimmed away since: the
                        // offset cannot be resolved again, only its anchor.
                        ServiceError::NotRetained { .. } => Ok((existing.clone(), origin.base)),
                        other => Err(other),
                    })?;
                    if base != origin.base {
                        return mismatch("fork offset");
                    }
                }
            }
            _ => return mismatch("fork configuration"),
        }
        let requested_type = match (&req.content_type, &req.fork) {
            (Some(ct), _) => ct.as_str(),
            (None, Some(_)) => &*existing.content_type,
            (None, None) => DEFAULT_CONTENT_TYPE,
        };
        if !content_types_match(requested_type, &existing.content_type) {
            return mismatch("content type");
        }
        let lifetime_matches = if req.fork.is_some() && req.lifetime == Lifetime::default() {
            true // the fork's lifetime was inherited; an omitted one matches it
        } else {
            req.lifetime.ttl_secs == existing.ttl_secs && req.lifetime.expires_at_ms == existing.expires_at_ms
        };
        if !lifetime_matches {
            return mismatch("TTL or expiry");
        }
        if req.closed != existing.closed {
            return mismatch("closure status");
        }
        Ok(CreateOutcome { created: false, meta: existing })
    }

    /// Validate a fork request against its source; returns the source's meta
    /// and the fork's base position (fork offset plus the resolved sub-offset).
    /// A new fork must branch at or after the source's earliest retained
    /// position (it would inherit bytes already dropped); the repeated PUT
    /// of an existing fork is compared, not refused, when its source was
    /// trimmed past its base since.
    async fn resolve_fork(
        &self,
        req: &CreateRequest,
        f: &ForkRequest,
        retained: Retained,
    ) -> ServiceResult<(StreamMeta, u64)> {
        let source = match self.sub.fork_peer.source_meta(&f.source).await? {
            None => return Err(ServiceError::NotFound),
            Some(m) if m.is_expired(self.clock.now_ms()) => return Err(ServiceError::NotFound),
            Some(m) if m.soft_deleted => {
                return Err(ServiceError::Conflict("the fork source is deleted".into()));
            }
            Some(m) => m,
        };
        if let Some(ct) = &req.content_type {
            if !content_types_match(ct, &source.content_type) {
                return Err(ServiceError::Conflict("content type differs from the fork source's".into()));
            }
        }
        let anchor = f.offset.map_or(source.tail, Offset::position);
        if anchor > source.tail {
            return Err(ServiceError::BadRequest("Stream-Fork-Offset is beyond the source stream's tail".into()));
        }
        if retained == Retained::Required {
            let earliest = self.earliest(&source).await?;
            if anchor < earliest {
                return Err(ServiceError::NotRetained { earliest });
            }
        }
        if f.sub_offset == 0 {
            return Ok((source, anchor));
        }
        // The sub-offset counts into the one append that starts at the anchor.
        let source_stream = StreamHandle::detached(&source.path);
        let pieces = self.read_pieces(&source_stream, &source, anchor, 1, Cut::Never).await?;
        let first = pieces.first().map(|p| p.as_ref()).unwrap_or_default();
        let overshoot = || ServiceError::BadRequest("Stream-Fork-Sub-Offset is past the next data boundary".into());
        let skip = if is_json(&source.content_type) {
            json::prefix_len(first, f.sub_offset).ok_or_else(overshoot)? as u64
        } else if f.sub_offset <= first.len() as u64 {
            f.sub_offset
        } else {
            return Err(overshoot());
        };
        Ok((source, anchor + skip))
    }
}
