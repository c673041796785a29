//! `StreamStore::commit`: one core [`Commit`] = one `TransactWriteItems`
//! (meta put(s) + chunk put(s) + producer put(s)), all-or-nothing.
//!
//! Order of events, and why:
//! 1. Chunk bodies above the inline threshold are written to S3 first, each
//!    under a fresh key, so the transaction only carries a pointer. Until the
//!    transaction commits nothing points at them: they are unreadable.
//! 2. The transaction runs. Every meta write is conditional on the stored
//!    version *and* incarnation (or absence); chunk puts on the key being
//!    free; producer puts on the state never moving backwards. Each item asks
//!    for `ALL_OLD` on condition failure, so a lost race returns the current
//!    meta and the caller's retry needs no extra read.
//! 3. Throttling and `TransactionConflict` are retried here with jittered
//!    backoff (nothing was written). A lost answer (timeout, 5xx) is retried
//!    with the same `ClientRequestToken` (DynamoDB's idempotency window), and
//!    the meta's commit id `cid` tells whether an earlier attempt was applied.
//! 4. On a definite failure the S3 objects of step 1 are deleted; when the
//!    outcome stays unknown they are kept (a late-applying attempt must find
//!    its object) and left to the sweeper.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};
use ds_core::{Commit, StoreError};
use tracing::{debug, warn};

use crate::backend::Backend;
use crate::codec::{self, n, s, ChunkBody, ChunkItem, Item};
use crate::error::{classify_commit, CommitFailure, FailedItem};
use crate::faults::{Fault, FaultPoint};
use crate::plan::{self, MetaCond, MetaEffect, Plan, PlanError};
use crate::registry::CachedMeta;
use crate::schema::{ItemKey, ObjectKey, PK};

/// DynamoDB's limit on items per transaction.
const MAX_TRANSACTION_ITEMS: usize = 100;

/// What each transaction item is, by index.
#[derive(Debug, Clone)]
enum Role {
    Meta(String),
    Chunk,
    Producer,
}

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
    let plan = match plan::plan(&commit) {
        Ok(p) => p,
        Err(PlanError::Conflict) => return Err(StoreError::Conflict),
    };
    if plan.item_count() == 0 {
        return Ok(());
    }
    if plan.item_count() > MAX_TRANSACTION_ITEMS {
        return Err(StoreError::Backend(format!(
            "commit needs {} items; a DynamoDB transaction holds at most {MAX_TRANSACTION_ITEMS}",
            plan.item_count()
        )));
    }
    let cid = uuid::Uuid::new_v4().to_string();
    let (bodies, uploaded) = upload_large_bodies(b, &plan).await?;
    let (items, roles) = build_items(b, &plan, &bodies, &cid)?;

    match run(b, &plan, items, &roles, &cid).await {
        Outcome::Applied => {
            after_success(b, &plan, &cid).await;
            Ok(())
        }
        Outcome::NotApplied(e) => {
            b.blobs.discard(&uploaded).await;
            Err(e)
        }
        Outcome::Unknown(msg) => {
            // Forget what we think we know about these streams: the next
            // read goes to DynamoDB and sees whichever way it went.
            for m in &plan.metas {
                if let Some(ctx) = b.registry.peek(&m.path) {
                    ctx.remember(None);
                    ctx.forget_producers();
                }
            }
            warn!(cid, %msg, "commit outcome unknown; its S3 objects are kept for the sweeper");
            Err(StoreError::Unavailable(format!("commit outcome unknown: {msg}")))
        }
    }
}

/// Upload every chunk body above the inline threshold; returns each chunk's
/// body (inline or pointer) and the keys written.
async fn upload_large_bodies(b: &Backend, plan: &Plan) -> Result<(Vec<ChunkBody>, Vec<String>), StoreError> {
    let mut bodies = Vec::with_capacity(plan.chunks.len());
    let mut uploaded = Vec::new();
    for c in &plan.chunks {
        if c.data.len() <= b.cfg.inline_threshold {
            bodies.push(ChunkBody::Inline(c.data.clone()));
            continue;
        }
        let key = ObjectKey::Chunk {
            path: c.path.clone(),
            incarnation: c.incarnation.clone(),
            start: c.start,
            nonce: uuid::Uuid::new_v4().simple().to_string(),
        }
        .render();
        if let Err(e) = b.blobs.put_new(&key, c.data.clone(), &b.faults).await {
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

fn names(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn values(pairs: Vec<(&str, AttributeValue)>) -> HashMap<String, AttributeValue> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

type Cond = (String, HashMap<String, String>, Option<HashMap<String, AttributeValue>>);

fn meta_condition(cond: &MetaCond) -> Cond {
    use crate::schema::meta_attr as m;
    match cond {
        MetaCond::Absent => ("attribute_not_exists(#pk)".into(), names(&[("#pk", PK)]), None),
        MetaCond::Version { version, incarnation } => (
            "#ver = :ver AND #inc = :inc".into(),
            names(&[("#ver", m::VERSION), ("#inc", m::INCARNATION)]),
            Some(values(vec![(":ver", n(version)), (":inc", s(incarnation))])),
        ),
    }
}

fn build_err(e: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::Backend(format!("building a transaction item: {e}"))
}

fn put(b: &Backend, item: Item, (expr, names, vals): Cond) -> Result<TransactWriteItem, StoreError> {
    let put = Put::builder()
        .table_name(&b.cfg.table)
        .set_item(Some(item))
        .condition_expression(expr)
        .set_expression_attribute_names(Some(names))
        .set_expression_attribute_values(vals)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .map_err(build_err)?;
    Ok(TransactWriteItem::builder().put(put).build())
}

fn build_items(
    b: &Backend,
    plan: &Plan,
    bodies: &[ChunkBody],
    cid: &str,
) -> Result<(Vec<TransactWriteItem>, Vec<Role>), StoreError> {
    let mut items = Vec::with_capacity(plan.item_count());
    let mut roles = Vec::with_capacity(plan.item_count());
    for mw in &plan.metas {
        let (expr, nm, vals) = meta_condition(&mw.cond);
        let key = codec::key_of(&ItemKey::Meta { path: mw.path.clone() });
        let item = match &mw.effect {
            MetaEffect::Put(meta) => put(b, codec::meta_to_item(meta, cid), (expr, nm, vals))?,
            MetaEffect::Delete => {
                let del = Delete::builder()
                    .table_name(&b.cfg.table)
                    .set_key(Some(key))
                    .condition_expression(expr)
                    .set_expression_attribute_names(Some(nm))
                    .set_expression_attribute_values(vals)
                    .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                    .build()
                    .map_err(build_err)?;
                TransactWriteItem::builder().delete(del).build()
            }
            MetaEffect::CheckOnly => {
                let check = ConditionCheck::builder()
                    .table_name(&b.cfg.table)
                    .set_key(Some(key))
                    .condition_expression(expr)
                    .set_expression_attribute_names(Some(nm))
                    .set_expression_attribute_values(vals)
                    .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                    .build()
                    .map_err(build_err)?;
                TransactWriteItem::builder().condition_check(check).build()
            }
        };
        items.push(item);
        roles.push(Role::Meta(mw.path.clone()));
    }
    for (c, body) in plan.chunks.iter().zip(bodies) {
        let chunk = ChunkItem { start: c.start, end: c.end(), body: body.clone() };
        let item = codec::chunk_to_item(&c.path, &c.incarnation, &chunk);
        items.push(put(b, item, ("attribute_not_exists(#pk)".into(), names(&[("#pk", PK)]), None))?);
        roles.push(Role::Chunk);
    }
    for p in &plan.producers {
        use crate::schema::producer_attr as pa;
        let item = codec::producer_to_item(&p.path, &p.incarnation, &p.producer_id, p.state);
        // Producer state only moves forward: (epoch, seq) never decreases.
        let cond = (
            "attribute_not_exists(#pk) OR #ep < :ep OR (#ep = :ep AND #seq <= :seq)".into(),
            names(&[("#pk", PK), ("#ep", pa::EPOCH), ("#seq", pa::SEQ)]),
            Some(values(vec![(":ep", n(p.state.epoch)), (":seq", n(p.state.last_seq))])),
        );
        items.push(put(b, item, cond)?);
        roles.push(Role::Producer);
    }
    Ok((items, roles))
}

/// Run the transaction with bounded retries (see the module docs).
async fn run(b: &Backend, plan: &Plan, items: Vec<TransactWriteItem>, roles: &[Role], cid: &str) -> Outcome {
    let mut token = uuid::Uuid::new_v4().to_string();
    let mut ambiguous = false;
    let attempts = b.cfg.retry.attempts.max(1);
    let mut last_error = String::new();
    for attempt in 0..attempts {
        if attempt > 0 {
            tokio::time::sleep(b.backoff(attempt - 1)).await;
        }
        let result = send(b, &items, &token).await;
        match result {
            Ok(()) => return Outcome::Applied,
            Err(CommitFailure::Conflict { failed }) => {
                if ambiguous && applied_by_us(&failed, roles, cid) {
                    debug!(cid, "an earlier attempt whose answer was lost had applied the commit");
                    return Outcome::Applied;
                }
                learn_from_conflict(b, &failed, roles, plan);
                return Outcome::NotApplied(StoreError::Conflict);
            }
            Err(CommitFailure::Contended) | Err(CommitFailure::Throttled(_)) if !ambiguous => {
                // Definitely not applied: a fresh token for the next attempt.
                token = uuid::Uuid::new_v4().to_string();
                last_error = "throttled or contended".into();
            }
            Err(CommitFailure::Contended) | Err(CommitFailure::Throttled(_)) => {
                last_error = "throttled or contended after an unknown outcome".into();
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
                return Outcome::NotApplied(StoreError::Backend(m));
            }
        }
    }
    if ambiguous {
        return Outcome::Unknown(last_error);
    }
    Outcome::NotApplied(StoreError::Unavailable(format!("commit not applied after {attempts} attempts: {last_error}")))
}

async fn send(b: &Backend, items: &[TransactWriteItem], token: &str) -> Result<(), CommitFailure> {
    let request = b.ddb.transact_write_items().set_transact_items(Some(items.to_vec())).client_request_token(token);
    match b.faults.take(FaultPoint::Transact) {
        Some(Fault::Throttle) => Err(CommitFailure::Throttled("injected: ThrottlingError".into())),
        Some(Fault::Reject) => Err(CommitFailure::Rejected("injected: ValidationError".into())),
        Some(Fault::LoseAck) => {
            request.send().await.map_err(classify_commit)?;
            Err(CommitFailure::Ambiguous("injected: answer lost after the transaction was applied".into()))
        }
        None => request.send().await.map(|_| ()).map_err(classify_commit),
    }
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
fn learn_from_conflict(b: &Backend, failed: &[FailedItem], roles: &[Role], plan: &Plan) {
    // Whatever we cached about producers of these streams may be what lost.
    for p in &plan.producers {
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
async fn after_success(b: &Backend, plan: &Plan, cid: &str) {
    for mw in &plan.metas {
        let ctx = b.registry.get(&mw.path);
        match &mw.effect {
            MetaEffect::Put(meta) => ctx.remember(Some(CachedMeta::new((**meta).clone(), Some(cid.to_owned())))),
            MetaEffect::Delete | MetaEffect::CheckOnly => {
                ctx.remember(None);
                ctx.forget_producers();
            }
        }
    }
    for p in &plan.producers {
        b.registry.get(&p.path).remember_producer(&p.incarnation, &p.producer_id, Some(p.state));
    }
    for (path, incarnation) in &plan.wiped {
        if let Err(e) = crate::cleanup::purge_incarnation(b, path, incarnation).await {
            // Unreachable garbage (its incarnation is gone); the sweeper retries.
            warn!(path, incarnation, error = %e, "purging a deleted stream's items failed");
        }
    }
}
