//! Translate a commit's net writes ([`ds_core::fold::NetWrites`], the commit
//! rules every substrate shares) into the items of one `TransactWriteItems`:
//! each meta write becomes a conditional put, delete or condition check
//! whose condition expression is the fold's [`MetaCond`] on the stored item;
//! each chunk a put conditional on its key being free; each producer state a
//! put conditional on moving forward (every accepted append advances it).
//! A meta write that creates a stream (condition: absent) also puts the
//! stream's path index item, and one that deletes it deletes that item
//! ([`crate::schema::ItemKey::PathIndex`]): both unconditional, since the
//! meta item's own condition decides the whole transaction.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};
use ds_core::fold::{MetaCond, MetaEffect, NetWrites};
use ds_core::{RecordExpect, StoreError};

use crate::backend::Backend;
use crate::codec::{self, n, s, ChunkBody, ChunkItem, Item};
use crate::schema::{ItemKey, PK};

/// What each transaction item is, by index.
#[derive(Debug, Clone)]
pub(crate) enum Role {
    Meta(String),
    Chunk,
    Producer,
    Record,
    /// The path index item of a stream the commit creates or deletes.
    Index,
}

/// What a meta write does to the stream's path index item.
enum IndexWrite {
    Put,
    Delete,
}

fn index_write(effect: &MetaEffect, cond: &MetaCond) -> Option<IndexWrite> {
    match (effect, cond) {
        (MetaEffect::Put(_), MetaCond::Absent) => Some(IndexWrite::Put),
        (MetaEffect::Delete, _) => Some(IndexWrite::Delete),
        _ => None,
    }
}

/// Transaction items a commit's net writes need: one per row, plus one per
/// stream it creates or deletes (the path index item).
pub(crate) fn item_count(writes: &NetWrites) -> usize {
    writes.row_count() + writes.metas.iter().filter(|mw| index_write(&mw.effect, &mw.cond).is_some()).count()
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
        MetaCond::Version { version, incarnation, tail } => {
            let mut expr = String::from("#ver = :ver AND #inc = :inc");
            let mut nm = names(&[("#ver", m::VERSION), ("#inc", m::INCARNATION)]);
            let mut vals = values(vec![(":ver", n(version)), (":inc", s(&**incarnation))]);
            if let Some(tail) = tail {
                expr.push_str(" AND #tail = :tail");
                nm.insert("#tail".into(), m::TAIL.into());
                vals.insert(":tail".into(), n(tail));
            }
            (expr, nm, Some(vals))
        }
    }
}

fn build_err(e: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::backend("building a transaction item", e)
}

/// The part every transaction item shares, on any of the SDK's three item
/// builders (which share no trait): the table, the condition `Cond`, and
/// the old image returned when it fails (it becomes the conflict's
/// evidence, see `error::classify_commit`).
macro_rules! conditional {
    ($builder:expr, $table:expr, $cond:expr) => {{
        let (expr, names, vals): Cond = $cond;
        $builder
            .table_name($table)
            .condition_expression(expr)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(vals)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(build_err)
    }};
}

fn put(b: &Backend, item: Item, cond: Cond) -> Result<TransactWriteItem, StoreError> {
    let put = conditional!(Put::builder().set_item(Some(item)), &b.cfg.table, cond)?;
    Ok(TransactWriteItem::builder().put(put).build())
}

pub(crate) fn build_items(
    b: &Backend,
    writes: &NetWrites,
    bodies: &[ChunkBody],
    cid: &str,
) -> Result<(Vec<TransactWriteItem>, Vec<Role>), StoreError> {
    let mut items = Vec::with_capacity(item_count(writes));
    let mut roles = Vec::with_capacity(item_count(writes));
    for mw in &writes.metas {
        let cond = meta_condition(&mw.cond);
        let key = || Some(codec::key_of(&ItemKey::Meta { path: mw.path.to_string() }));
        let item = match &mw.effect {
            MetaEffect::Put(meta) => put(b, codec::meta_to_item(meta, cid), cond)?,
            MetaEffect::Delete => {
                let del = conditional!(Delete::builder().set_key(key()), &b.cfg.table, cond)?;
                TransactWriteItem::builder().delete(del).build()
            }
            MetaEffect::CheckOnly => {
                let check = conditional!(ConditionCheck::builder().set_key(key()), &b.cfg.table, cond)?;
                TransactWriteItem::builder().condition_check(check).build()
            }
        };
        items.push(item);
        roles.push(Role::Meta(mw.path.to_string()));
        let index = match index_write(&mw.effect, &mw.cond) {
            None => continue,
            Some(IndexWrite::Put) => {
                let put = Put::builder()
                    .table_name(&b.cfg.table)
                    .set_item(Some(codec::path_index_to_item(&mw.path)))
                    .build()
                    .map_err(build_err)?;
                TransactWriteItem::builder().put(put).build()
            }
            Some(IndexWrite::Delete) => {
                let key = codec::key_of(&ItemKey::PathIndex { path: mw.path.to_string() });
                let del = Delete::builder().table_name(&b.cfg.table).set_key(Some(key)).build().map_err(build_err)?;
                TransactWriteItem::builder().delete(del).build()
            }
        };
        items.push(index);
        roles.push(Role::Index);
    }
    for (c, body) in writes.chunks.iter().zip(bodies) {
        let chunk = ChunkItem { start: c.start, end: c.end(), body: body.clone() };
        let item = codec::chunk_to_item(&c.path, &c.incarnation, &chunk);
        items.push(put(b, item, ("attribute_not_exists(#pk)".into(), names(&[("#pk", PK)]), None))?);
        roles.push(Role::Chunk);
    }
    for p in &writes.producers {
        use crate::schema::producer_attr as pa;
        let item = codec::producer_to_item(&p.path, &p.incarnation, &p.producer_id, p.state);
        // Producer state only moves forward: every accepted append advances
        // (epoch, seq), so a put that would leave it where it is was planned
        // on a stale state (the same append applied already) and must fail.
        let cond = (
            "attribute_not_exists(#pk) OR #ep < :ep OR (#ep = :ep AND #seq < :seq)".into(),
            names(&[("#pk", PK), ("#ep", pa::EPOCH), ("#seq", pa::SEQ)]),
            Some(values(vec![(":ep", n(p.state.epoch)), (":seq", n(p.state.last_seq))])),
        );
        items.push(put(b, item, cond)?);
        roles.push(Role::Producer);
    }
    for r in &writes.records {
        let item = codec::record_to_item(&r.path, &r.incarnation, &r.key, &r.record);
        items.push(put(b, item, record_condition(r.expect))?);
        roles.push(Role::Record);
    }
    Ok((items, roles))
}

/// The condition of a record put. Without a precondition (the commit wiped
/// the incarnation first) the put is unconditional: it writes into a deleted
/// incarnation, whose rows the purge removes.
fn record_condition(expect: Option<RecordExpect>) -> Cond {
    use crate::schema::record_attr as ra;
    match expect {
        Some(RecordExpect::Absent) => ("attribute_not_exists(#pk)".into(), names(&[("#pk", PK)]), None),
        Some(RecordExpect::Revision(rev)) => {
            ("#rev = :rev".into(), names(&[("#rev", ra::REVISION)]), Some(values(vec![(":rev", n(rev))])))
        }
        None => ("attribute_exists(#pk) OR attribute_not_exists(#pk)".into(), names(&[("#pk", PK)]), None),
    }
}
