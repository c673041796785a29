//! Appends planned through the inline processors bound to their stream
//! (see [`crate::inline`] for the model), and the operator's controls of
//! one processor's reduction on one stream.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use ds_protocol::headers::is_json;

use super::{Plan, Reads, ServiceError, ServiceResult, StreamService};
use crate::inline::{inline_record_key, InlineMessage, InlineProcessor, InlineReduction, RefoldLimits};
use crate::{Commit, Op, Record, RecordExpect, StreamHandle, StreamMeta, MAX_RECORD_BYTES};

/// Bytes one refold step reads (its memory bound, with one state).
const REFOLD_PAGE_BYTES: usize = 256 * 1024;

/// One reduction record an append writes.
pub(crate) struct InlineWrite {
    pub key: String,
    pub record: Record,
    pub expect: RecordExpect,
}

/// Where one processor starts from for an append.
enum Base {
    /// Keeps no state: validates only.
    Stateless,
    /// Skipped by an operator: the append passes it unchecked.
    Skipped,
    /// Its reduction through the append's base, and the stored record it
    /// replaces (`None`: none stored yet).
    State { state: Bytes, stored: Option<Record> },
}

/// An operator's action on one processor's reduction of one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InlineControl {
    /// Start over from the processor's initial state at the current tail,
    /// without folding history (also ends a skip).
    Reset,
    /// Let appends pass the processor unchecked until a reset.
    Skip { reason: String },
    /// Refold the reduction from the stream's whole history now.
    ReReduce,
}

/// One processor's reduction of one stream, as the operator API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineView {
    pub meta: StreamMeta,
    /// `None`: nothing stored yet (a stateless processor, or no append
    /// since it was bound).
    pub reduction: Option<InlineReduction>,
}

impl StreamService {
    /// Binds inline processors to this service and every clone of it; `false`
    /// if a gate was already set (it stays).
    pub fn set_inline_gate(&self, gate: Arc<dyn crate::InlineGate>) -> bool {
        self.inline.set(gate).is_ok()
    }

    /// The gate [`Self::set_inline_gate`] set.
    pub fn inline_gate(&self) -> Option<&Arc<dyn crate::InlineGate>> {
        self.inline.get()
    }

    /// Whether any inline processor is configured (a gate is bound).
    pub(crate) fn inline_configured(&self) -> bool {
        self.inline.get().is_some()
    }

    /// The reduction records an append of `data` (framed messages landing
    /// at `meta.tail`) writes, or the refusal of one of its processors.
    /// Everything that awaits comes first; the verdicts are made after it,
    /// without awaiting, on the state the commit's preconditions name.
    pub(crate) async fn plan_inline(
        &self,
        stream: &StreamHandle,
        meta: &StreamMeta,
        data: &Bytes,
        reads: Reads,
    ) -> ServiceResult<Vec<InlineWrite>> {
        let Some(gate) = self.inline.get() else {
            return Ok(Vec::new());
        };
        if data.is_empty() || !is_json(&meta.content_type) {
            return Ok(Vec::new());
        }
        let bound = gate.bound(stream.path());
        if bound.is_empty() {
            return Ok(Vec::new());
        }
        let mut bases = Vec::with_capacity(bound.len());
        for p in &bound {
            bases.push(self.inline_base(stream, meta, p.as_ref(), gate.refold_limits(), reads).await?);
        }
        let messages = split_messages(data, meta.tail);
        let end = meta.tail + data.len() as u64;
        let mut writes = Vec::new();
        for (p, base) in bound.iter().zip(bases) {
            let refused = |r: crate::InlineRefusal| ServiceError::InlineRejected {
                processor: p.slug().to_owned(),
                position: r.position,
                reason: r.reason,
            };
            match base {
                Base::Skipped => {}
                Base::Stateless => {
                    p.admit(None, &messages).map_err(refused)?;
                }
                Base::State { state, stored } => {
                    let next = p.admit(Some(&state), &messages).map_err(refused)?.unwrap_or(state);
                    let reduction = InlineReduction {
                        reducer_version: p.reducer_version().to_owned(),
                        reduced_through: end,
                        state: next,
                        skipped: None,
                    };
                    let value = encode_bounded(p.as_ref(), &reduction).map_err(|reason| {
                        ServiceError::InlineRejected { processor: p.slug().to_owned(), position: end, reason }
                    })?;
                    writes.push(next_write(p.slug(), value, stored.as_ref()));
                }
            }
        }
        Ok(writes)
    }

    /// After an append failed: tells the processor that refused it.
    pub(crate) fn report_inline_rejection(&self, path: &str, error: &ServiceError) {
        let (Some(gate), ServiceError::InlineRejected { processor, position, reason }) = (self.inline.get(), error)
        else {
            return;
        };
        // Debug, not info: a client sending bad events at line rate must not
        // become a log flood; the count and the last refusal are in the
        // operator API, and the client got the reason in its 400.
        tracing::debug!(path, processor = %processor, position, reason = %reason, "append rejected by an inline processor");
        if let Some(p) = gate.processor(processor) {
            p.rejected(path, &crate::InlineRefusal { position: *position, reason: reason.clone() });
        }
    }

    async fn inline_base(
        &self,
        stream: &StreamHandle,
        meta: &StreamMeta,
        p: &dyn InlineProcessor,
        limits: RefoldLimits,
        reads: Reads,
    ) -> ServiceResult<Base> {
        let Some(initial) = p.initial_state() else {
            return Ok(Base::Stateless);
        };
        let stored = self.record_for_update(stream, meta, &inline_record_key(p.slug()), reads).await?;
        // A record that does not decode is rebuilt like one of another version.
        let reduction = stored.as_ref().and_then(|r| InlineReduction::decode(&r.value).ok());
        let current = reduction.as_ref().filter(|r| r.reducer_version == p.reducer_version());
        let (from, state) = match (&reduction, current) {
            (Some(r), _) if r.skipped.is_some() => return Ok(Base::Skipped),
            // The usual case, and one the commit's preconditions will refuse
            // (a record ahead of a stale meta): either way no refold.
            (_, Some(r)) if r.reduced_through >= meta.tail => {
                return Ok(Base::State { state: r.state.clone(), stored });
            }
            (None, _) if stored.is_none() && meta.tail == 0 => return Ok(Base::State { state: initial, stored }),
            // Behind the stream (appends made while it was not bound).
            (_, Some(r)) => (r.reduced_through, r.state.clone()),
            // Another reducer version, or none yet on a stream with history.
            _ => (0, initial),
        };
        if reads == Reads::MayCache {
            // Refolds run on consistent reads only: this error is dropped by
            // `mutate`, which re-plans with them.
            return Err(ServiceError::Contention);
        }
        let state = self.refold(stream, meta, p, from, state, limits).await.map_err(|reason| {
            ServiceError::InlineUnavailable {
                processor: p.slug().to_owned(),
                reason: format!("refold failed: {reason}"),
            }
        })?;
        Ok(Base::State { state, stored })
    }

    /// Folds the stream's messages after `from` through `meta.tail` into
    /// `state`, a page at a time.
    async fn refold(
        &self,
        stream: &StreamHandle,
        meta: &StreamMeta,
        p: &dyn InlineProcessor,
        from: u64,
        mut state: Bytes,
        limits: RefoldLimits,
    ) -> Result<Bytes, String> {
        let started = Instant::now();
        let mut after = from;
        while after < meta.tail {
            if after - from > limits.max_bytes {
                return Err(format!("history past {} bytes (the refold limit)", limits.max_bytes));
            }
            if started.elapsed() > limits.max_duration {
                return Err(format!("took longer than {:?} (the refold limit)", limits.max_duration));
            }
            let entries =
                self.journal_entries(stream, meta, after, REFOLD_PAGE_BYTES).await.map_err(|e| e.to_string())?;
            let messages: Vec<InlineMessage<'_>> = entries
                .iter()
                .filter(|(position, _)| *position <= meta.tail)
                .map(|(position, data)| InlineMessage { position: *position, data })
                .collect();
            let Some(last) = messages.last().map(|m| m.position) else {
                return Err(format!("no message after offset {after} (tail {})", meta.tail));
            };
            state = p.fold(&state, &messages)?;
            after = last;
        }
        tracing::info!(
            path = %meta.path, processor = p.slug(), from, through = meta.tail,
            millis = started.elapsed().as_millis() as u64, "inline reduction refolded"
        );
        Ok(state)
    }

    /// One processor's reduction of the stream at `path`.
    pub async fn inline_view(&self, slug: &str, path: &str) -> ServiceResult<InlineView> {
        let stream = self.sub.registry.enter(path);
        let meta = self.read_live_meta(&stream).await?;
        let record = self.sub.store.read_record(&stream, &meta.incarnation, &inline_record_key(slug)).await?;
        let reduction = record
            .map(|r| InlineReduction::decode(&r.value))
            .transpose()
            .map_err(|reason| crate::StoreError::corrupt(format!("inline reduction {slug} of {path}"), reason))?;
        Ok(InlineView { meta, reduction })
    }

    /// Applies `control` to processor `p`'s reduction of the stream at
    /// `path`, fenced like an append (the record's revision), then shows it.
    pub async fn inline_control(
        &self,
        p: &dyn InlineProcessor,
        path: &str,
        control: InlineControl,
    ) -> ServiceResult<InlineView> {
        let initial = p.initial_state().ok_or_else(|| {
            ServiceError::BadRequest(format!("processor {:?} keeps no state: there is nothing to control", p.slug()))
        })?;
        let stream = self.sub.registry.enter(path);
        let limits = self.inline.get().map(|g| g.refold_limits()).unwrap_or_default();
        self.mutate(&stream, |reads| {
            let (stream, control, initial) = (&stream, &control, initial.clone());
            async move {
                let meta = self.live_meta(stream, reads).await?;
                let key = inline_record_key(p.slug());
                let stored = self.sub.store.read_record(stream, &meta.incarnation, &key).await?;
                let previous = stored.as_ref().and_then(|r| InlineReduction::decode(&r.value).ok());
                let reduction = match control {
                    InlineControl::Reset => InlineReduction {
                        reducer_version: p.reducer_version().to_owned(),
                        reduced_through: meta.tail,
                        state: initial,
                        skipped: None,
                    },
                    InlineControl::Skip { reason } => {
                        let base = previous.unwrap_or(InlineReduction {
                            reducer_version: p.reducer_version().to_owned(),
                            reduced_through: meta.tail,
                            state: initial,
                            skipped: None,
                        });
                        InlineReduction { skipped: Some(reason.clone()), ..base }
                    }
                    InlineControl::ReReduce => {
                        let state = self.refold(stream, &meta, p, 0, initial, limits).await.map_err(|reason| {
                            ServiceError::InlineUnavailable {
                                processor: p.slug().to_owned(),
                                reason: format!("refold failed: {reason}"),
                            }
                        })?;
                        InlineReduction {
                            reducer_version: p.reducer_version().to_owned(),
                            reduced_through: meta.tail,
                            state,
                            skipped: None,
                        }
                    }
                };
                let value = encode_bounded(p, &reduction)
                    .map_err(|reason| ServiceError::InlineUnavailable { processor: p.slug().to_owned(), reason })?;
                let write = next_write(p.slug(), value, stored.as_ref());
                let mut commit = Commit::with_capacity(1);
                commit.push(Op::PutRecord {
                    path: meta.path.clone(),
                    incarnation: meta.incarnation.clone(),
                    key: write.key,
                    record: write.record,
                    expect: write.expect,
                });
                let value = InlineView { meta, reduction: Some(reduction) };
                Ok(Plan::Commit { commit, publish: None, deleted: Vec::new(), value, predicted: None, registry: None })
            }
        })
        .await
    }
}

/// The record value of `reduction`, if it fits a record.
fn encode_bounded(p: &dyn InlineProcessor, reduction: &InlineReduction) -> Result<Bytes, String> {
    let value = reduction.encode()?;
    if value.len() > MAX_RECORD_BYTES {
        return Err(format!(
            "processor {:?}'s reduction would grow to {} bytes, over the {MAX_RECORD_BYTES} a stream's reduction may hold",
            p.slug(),
            value.len()
        ));
    }
    Ok(value)
}

/// The conditional write replacing `stored` with `value`.
fn next_write(slug: &str, value: Bytes, stored: Option<&Record>) -> InlineWrite {
    let (revision, expect) = match stored {
        Some(r) => (r.revision + 1, RecordExpect::Revision(r.revision)),
        None => (1, RecordExpect::Absent),
    };
    InlineWrite { key: inline_record_key(slug), record: Record { revision, value }, expect }
}

/// The framed messages of an append landing at `base`, with their positions.
fn split_messages(data: &Bytes, base: u64) -> Vec<InlineMessage<'_>> {
    let mut position = base;
    data.split_inclusive(|b| *b == b'\n')
        .map(|line| {
            position += line.len() as u64;
            InlineMessage { position, data: line.strip_suffix(b"\n").unwrap_or(line) }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_positioned_just_past_their_line() {
        let data = Bytes::from_static(b"{\"a\":1}\n[2]\n");
        let m = split_messages(&data, 10);
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].position, m[0].data), (18, &b"{\"a\":1}"[..]));
        assert_eq!((m[1].position, m[1].data), (22, &b"[2]"[..]));
    }
}
