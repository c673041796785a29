//! `StreamStore::commit`: one core [`Commit`] = one `TransactWriteItems`
//! (meta put(s) + chunk put(s) + producer put(s)), all-or-nothing. The commit
//! is folded by the shared rules ([`ds_core::fold`]) and its net writes
//! translated into items ([`crate::plan`]).
//!
//! The transaction also keeps the path index ([`crate::index`]): the commit
//! that creates a stream puts its index item, the one that deletes it
//! deletes that item, so listing never sees one without the other.
//!
//! Order of events, and why:
//! 1. Chunk bodies above the inline threshold are written to S3 first, each
//!    under a fresh key, so the transaction only carries a pointer. Until the
//!    transaction commits nothing points at them: they are unreadable.
//! 2. The transaction runs. Every meta write is conditional on the stored
//!    version *and* incarnation (or absence); chunk puts on the key being
//!    free; producer puts on the state moving forward. Each item asks
//!    for `ALL_OLD` on condition failure, so a lost race returns the current
//!    meta and the caller's retry needs no extra read.
//! 3. Throttling and `TransactionConflict` are retried here with jittered
//!    backoff (nothing was written) for as long as the retry budget lasts
//!    ([`crate::retry`], [`crate::config::RetryConfig`]: about 5 s, so a
//!    throttling burst of a second passes); the SDK's own retries are off
//!    for this call, so every attempt's answer is seen here. A lost answer (timeout, 5xx) is retried
//!    with the same `ClientRequestToken` (DynamoDB's idempotency window), and
//!    the meta's commit id `cid` tells whether an earlier attempt was applied.
//! 4. On a definite failure the S3 objects of step 1 are deleted; when the
//!    outcome stays unknown they are kept (a late-applying attempt must find
//!    its object) and left to [`crate::cleanup::sweep_path`].

use aws_sdk_dynamodb::types::TransactWriteItem;
use ds_core::fold::{MetaCond, MetaEffect, NetWrites};
use ds_core::{Commit, StoreError};
use tracing::{debug, warn};

use crate::backend::Backend;
use crate::codec::{self, ChunkBody};
use crate::error::{classify_commit, CommitFailure, FailedItem};
#[cfg(feature = "fault-injection")]
use crate::faults::{Fault, FaultPoint};
use crate::plan::{build_items, Role};
use crate::registry::CachedMeta;
use crate::retry::{sdk_retries_off, Budget};
use crate::schema::ObjectKey;

/// DynamoDB's limit on items per transaction.
pub(crate) const MAX_TRANSACTION_ITEMS: usize = 100;

/// Result of running the transaction.
enum Outcome {
    Applied,
    /// Definitely not applied.
    NotApplied(StoreError),
    /// May or may not have been applied.
    Unknown(String),
}

/// Apply `commit` all-or-nothing (see the module docs).
#[tracing::instrument(level = "debug", skip_all, fields(ops = commit.ops.len()))]
pub async fn commit(b: &Backend, commit: Commit) -> Result<(), StoreError> {
    commit_writes(b, NetWrites::fold(commit)?).await
}

/// [`commit`] of writes already folded (one commit's, or a group's joined
/// by [`crate::group`]): one transaction, one commit id for all of them.
pub(crate) async fn commit_writes(b: &Backend, writes: NetWrites) -> Result<(), StoreError> {
    if writes.row_count() == 0 {
        return Ok(());
    }
    let needed = crate::plan::item_count(&writes);
    if needed > MAX_TRANSACTION_ITEMS {
        return Err(StoreError::backend(
            "DynamoDB TransactWriteItems",
            format!("commit needs {needed} items; a transaction holds at most {MAX_TRANSACTION_ITEMS}"),
        ));
    }
    let cid = uuid::Uuid::new_v4().to_string();
    let (bodies, uploaded) = upload_large_bodies(b, &writes).await?;
    let (items, roles) = build_items(b, &writes, &bodies, &cid)?;

    match run(b, &writes, items, &roles, &cid).await {
        Outcome::Applied => {
            after_success(b, &writes, &cid).await;
            Ok(())
        }
        Outcome::NotApplied(e) => {
            b.blobs.discard(&uploaded).await;
            Err(e)
        }
        Outcome::Unknown(msg) => {
            // Forget what we think we know about these streams: the next
            // read goes to DynamoDB and sees whichever way it went.
            for m in &writes.metas {
                if let Some(ctx) = b.registry.peek(&m.path) {
                    ctx.remember(None);
                    ctx.forget_producers();
                }
            }
            warn!(cid, %msg, "commit outcome unknown; its S3 objects are kept for cleanup::sweep_path");
            Err(StoreError::Unavailable(format!("commit outcome unknown: {msg}")))
        }
    }
}

/// Upload every chunk body above the inline threshold; returns each chunk's
/// body (inline or pointer) and the keys written.
async fn upload_large_bodies(b: &Backend, writes: &NetWrites) -> Result<(Vec<ChunkBody>, Vec<String>), StoreError> {
    let mut bodies = Vec::with_capacity(writes.chunks.len());
    let mut uploaded = Vec::new();
    for c in &writes.chunks {
        if c.data.len() <= b.cfg.inline_threshold {
            bodies.push(ChunkBody::Inline(c.data.clone()));
            continue;
        }
        let key = ObjectKey::Chunk {
            path: c.path.to_string(),
            incarnation: c.incarnation.to_string(),
            start: c.start,
            nonce: uuid::Uuid::new_v4().simple().to_string(),
        }
        .render();
        if let Err(e) = b.blobs.put_new(&key, c.data.clone()).await {
            // A failed put may still have created the object: discard it too.
            uploaded.push(key);
            b.blobs.discard(&uploaded).await;
            return Err(e.into());
        }
        uploaded.push(key.clone());
        bodies.push(ChunkBody::Object { key, offset: 0 });
    }
    Ok((bodies, uploaded))
}

/// Run the transaction with retries under the budget (see the module docs).
async fn run(b: &Backend, writes: &NetWrites, items: Vec<TransactWriteItem>, roles: &[Role], cid: &str) -> Outcome {
    let mut token = uuid::Uuid::new_v4().to_string();
    let mut ambiguous = false;
    let mut budget = Budget::start();
    let mut last_error;
    loop {
        let result = send(b, &items, &token).await;
        match result {
            Ok(()) => return Outcome::Applied,
            Err(CommitFailure::Conflict { failed }) => {
                // The commit id is unique to this commit, so seeing it is
                // proof whether or not we saw an ambiguous answer before.
                if applied_by_us(&failed, roles, cid) {
                    debug!(cid, ambiguous, "an earlier attempt whose answer was lost had applied the commit");
                    return Outcome::Applied;
                }
                learn_from_conflict(b, &failed, roles, writes);
                return Outcome::NotApplied(StoreError::Conflict);
            }
            Err(CommitFailure::Contended) | Err(CommitFailure::Throttled(_)) if !ambiguous => {
                // Definitely not applied: a fresh token for the next attempt.
                token = uuid::Uuid::new_v4().to_string();
                last_error = "throttled or contended".to_owned();
            }
            Err(CommitFailure::Contended) | Err(CommitFailure::Throttled(_)) => {
                last_error = "throttled or contended after an unknown outcome".to_owned();
            }
            Err(CommitFailure::Ambiguous(m)) => {
                // Keep the token: if the lost attempt was applied, DynamoDB
                // answers this retry from its idempotency window.
                ambiguous = true;
                last_error = m;
            }
            Err(CommitFailure::Rejected(m)) => {
                if ambiguous {
                    return Outcome::Unknown(m);
                }
                return Outcome::NotApplied(StoreError::backend("DynamoDB TransactWriteItems", m));
            }
        }
        if !budget.next(b).await {
            break;
        }
    }
    if ambiguous {
        return Outcome::Unknown(last_error);
    }
    let attempts = budget.attempts();
    Outcome::NotApplied(StoreError::Unavailable(format!("commit not applied after {attempts} attempts: {last_error}")))
}

async fn send(b: &Backend, items: &[TransactWriteItem], token: &str) -> Result<(), CommitFailure> {
    // The SDK's own retries are off for this call (`crate::retry`): `run`
    // must see every failed attempt. Otherwise a 500 after applying, retried inside the SDK
    // and then throttled, reaches `run` as a plain throttle — "definitely not
    // applied" — and the S3 objects a committed chunk points at get discarded.
    let request = b
        .ddb
        .transact_write_items()
        .set_transact_items(Some(items.to_vec()))
        .client_request_token(token)
        .customize()
        .config_override(sdk_retries_off());
    #[cfg(feature = "fault-injection")]
    match b.blobs.faults.take(FaultPoint::Transact) {
        Some(Fault::Throttle) => return Err(CommitFailure::Throttled("injected: ThrottlingError".into())),
        Some(Fault::Reject) => return Err(CommitFailure::Rejected("injected: ValidationError".into())),
        Some(Fault::LoseAck) => {
            request.send().await.map_err(classify_commit)?;
            return Err(CommitFailure::Ambiguous("injected: answer lost after the transaction was applied".into()));
        }
        None => {}
    }
    request.send().await.map(|_| ()).map_err(classify_commit)
}

/// Whether a failed meta condition shows our own commit id (an earlier
/// attempt of this very commit was applied).
fn applied_by_us(failed: &[FailedItem], roles: &[Role], cid: &str) -> bool {
    failed.iter().any(|f| {
        matches!(roles.get(f.index), Some(Role::Meta(_))) && f.old.as_ref().and_then(codec::meta_commit_id) == Some(cid)
    })
}

/// A lost race returned the current meta items (ALL_OLD): cache them so the
/// caller's retry reads them without another round trip.
fn learn_from_conflict(b: &Backend, failed: &[FailedItem], roles: &[Role], writes: &NetWrites) {
    // Whatever we cached about producers of these streams may be what lost.
    for p in &writes.producers {
        if let Some(ctx) = b.registry.peek(&p.path) {
            ctx.forget_producers();
        }
    }
    for f in failed {
        let Some(Role::Meta(path)) = roles.get(f.index) else { continue };
        let Some(ctx) = b.registry.peek(path) else { continue };
        match &f.old {
            None => ctx.remember(None),
            Some(item) => match codec::meta_from_item(item) {
                Ok(meta) => ctx.remember(Some(CachedMeta::new(meta, codec::meta_commit_id(item).map(str::to_owned)))),
                Err(_) => ctx.remember(None),
            },
        }
    }
}

/// Update caches with what the commit wrote, then purge wiped incarnations.
async fn after_success(b: &Backend, writes: &NetWrites, cid: &str) {
    for mw in &writes.metas {
        let ctx = b.registry.get(&mw.path);
        match &mw.effect {
            MetaEffect::Put(meta) => {
                let previous = match &mw.cond {
                    MetaCond::Version { version, incarnation, .. } => Some((incarnation.to_string(), *version)),
                    MetaCond::Absent => None,
                };
                ctx.remember_committed(CachedMeta::new(meta.clone(), Some(cid.to_owned())), previous);
            }
            MetaEffect::Delete | MetaEffect::CheckOnly => {
                ctx.remember(None);
                ctx.forget_producers();
            }
        }
    }
    for p in &writes.producers {
        let ctx = b.registry.get(&p.path);
        let at = ctx.producer_tag();
        ctx.remember_producer(&at, &p.incarnation, &p.producer_id, Some(p.state));
    }
    for r in &writes.records {
        b.registry.get(&r.path).remember_record(&r.incarnation, &r.key, r.record.clone());
    }
    for (path, incarnation) in &writes.wiped {
        if let Err(e) = crate::cleanup::purge_incarnation(b, path, incarnation).await {
            // Unreachable garbage (its incarnation is gone): `cleanup::sweep_path`
            // removes it later.
            warn!(path = &**path, incarnation = &**incarnation, error = %e, "purging a deleted stream's items failed");
        }
    }
}
