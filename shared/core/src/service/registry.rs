//! The `__registry__` stream: a list of the server's streams any client can
//! read or tail, as the reference server keeps it. It is an
//! `application/json` stream of State Protocol change messages — type
//! `stream`, key = the stream's path, value `{path, contentType,
//! createdAt}` (epoch milliseconds); `insert` when a stream is created,
//! `delete` when it is deleted, soft-deleted or expired.
//!
//! # Why it cannot drift from the streams
//! Each change is appended in the **same commit** as the create or delete
//! it describes (memory: one critical section; local: one log batch; AWS:
//! one `TransactWriteItems`), so no crash or lost answer leaves an entry
//! without its stream or a stream without its entry. The registry's meta
//! carries a version precondition like any append: two processes (two
//! Lambdas) that change it at once cannot both commit, and the loser
//! re-plans from a fresh read.
//!
//! # Why it holds a lock across the commit
//! Within a process, creates and deletes of different streams all append
//! here. Each takes the registry's [`crate::StreamMutex`] while it plans and
//! keeps it until its commit has resolved ([`RegistryWrite`] rides in the
//! mutation's value), so the next one plans on the applied state instead of
//! losing a race to it. Lock order: the mutated stream's lock, then this one;
//! nothing holding this one waits for another stream's lock.
//!
//! Clients may read it (under the access rules of any path: a grant whose
//! prefix covers `__registry__`); only the server writes it.

use bytes::Bytes;
use serde::Serialize;

use super::{Plan, ServiceError, ServiceResult, StreamService};
use crate::{Chunk, Commit, Expect, Op, Record, RecordExpect, StreamGuard, StreamHandle, StreamMeta, TailSignal};

/// The registry stream's path.
pub const REGISTRY_PATH: &str = "__registry__";

/// The registry's content type.
const REGISTRY_CONTENT_TYPE: &str = "application/json";

/// What a commit does to the list of streams.
pub(crate) enum Change<'a> {
    Created(&'a StreamMeta),
    /// An open stream closed: an `update` whose value says `closed: true`.
    Closed(&'a StreamMeta),
    Deleted(&'a str),
    /// The stream's meta record vanished without a delete (AWS's TTL
    /// backstop): a delete, written once per incarnation (a marker record
    /// on the registry, `removed/<incarnation>`; one per such removal, which
    /// only a lost expiry alarm causes).
    Removed {
        path: &'a str,
        incarnation: &'a str,
    },
}

/// The registry's part of a planned commit: its lock, held until the commit
/// resolved, and what its live readers are told once it applied.
#[must_use = "publish once the commit applied (dropping it releases the lock without waking readers)"]
pub(crate) struct RegistryWrite {
    _guard: StreamGuard,
    stream: StreamHandle,
    signal: TailSignal,
}

#[derive(Serialize)]
struct Message<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<Value<'a>>,
    headers: Headers,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Value<'a> {
    path: &'a str,
    content_type: &'a str,
    created_at: i64,
    /// Only on streams that are closed (created closed, or an `update`
    /// for a close); beyond the reference server's fields, which readers
    /// of it ignore.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    closed: bool,
}

#[derive(Serialize)]
struct Headers {
    operation: &'static str,
}

impl Change<'_> {
    /// The change message, framed as JSON mode stores messages (minified,
    /// `\n`-terminated).
    fn framed(&self) -> Bytes {
        let message = match self {
            Change::Created(meta) | Change::Closed(meta) => Message {
                kind: "stream",
                key: &meta.path,
                value: Some(Value {
                    path: &meta.path,
                    content_type: &meta.content_type,
                    created_at: meta.created_at_ms,
                    closed: meta.closed,
                }),
                headers: Headers { operation: if matches!(self, Change::Created(_)) { "insert" } else { "update" } },
            },
            Change::Deleted(path) | Change::Removed { path, .. } => {
                Message { kind: "stream", key: path, value: None, headers: Headers { operation: "delete" } }
            }
        };
        // Strings, integers and fixed keys only: serializing cannot fail.
        let mut bytes = serde_json::to_vec(&message).unwrap_or_default();
        bytes.push(b'\n');
        Bytes::from(bytes)
    }
}

impl StreamService {
    /// Whether this service keeps `__registry__` (and so reserves its path).
    pub fn keeps_registry(&self) -> bool {
        self.cfg.registry
    }

    /// Refuses a client's write to the registry stream.
    pub(crate) fn refuse_registry_write(&self, path: &str) -> ServiceResult<()> {
        if self.cfg.registry && path == REGISTRY_PATH {
            return Err(ServiceError::Reserved(format!("{REGISTRY_PATH} is written by the server only")));
        }
        Ok(())
    }

    /// Adds `change` to `commit` (creating the registry stream with its
    /// first change), unless the registry is off or the change is the
    /// registry's own. Takes the registry's lock; the caller holds the
    /// returned write until its commit resolved, then publishes it.
    pub(crate) async fn plan_registry(
        &self,
        commit: &mut Commit,
        change: Change<'_>,
    ) -> ServiceResult<Option<RegistryWrite>> {
        let path = match &change {
            Change::Created(meta) | Change::Closed(meta) => &*meta.path,
            Change::Deleted(path) | Change::Removed { path, .. } => path,
        };
        if !self.cfg.registry || path == REGISTRY_PATH {
            return Ok(None);
        }
        let stream = self.sub.registry.enter(REGISTRY_PATH);
        let guard = match self.sub.mutex.try_lock(&stream) {
            Some(guard) => guard,
            None => self.sub.mutex.lock(&stream).await,
        };
        let data = change.framed();
        let (next, expect) = match self.sub.store.read_meta_for_update(&stream).await? {
            Some(current) => {
                let mut next = current.clone();
                next.version += 1;
                next.tail += data.len() as u64;
                (next, Expect::VersionAt { version: current.version, tail: current.tail })
            }
            None => (self.registry_meta(data.len() as u64), Expect::Absent),
        };
        if let Change::Removed { incarnation, .. } = &change {
            let key = format!("removed/{incarnation}");
            if expect != Expect::Absent && self.sub.store.read_record(&stream, &next.incarnation, &key).await?.is_some()
            {
                return Ok(None);
            }
            commit.push(Op::PutRecord {
                path: next.path.clone(),
                incarnation: next.incarnation.clone(),
                key,
                record: Record { revision: 1, value: Bytes::new() },
                expect: RecordExpect::Absent,
            });
        }
        let start = next.tail - data.len() as u64;
        let (path, incarnation) = (next.path.clone(), next.incarnation.clone());
        let signal = TailSignal::of(&next);
        commit.push(Op::PutMeta { meta: next, expect });
        commit.push(Op::PutChunk { path, incarnation, chunk: Chunk { start, data } });
        Ok(Some(RegistryWrite { _guard: guard, stream, signal }))
    }

    /// Creates the registry stream, empty, if it is missing, so a reader
    /// finds it before the first create. The binaries call it at start.
    pub async fn ensure_registry(&self) -> ServiceResult<()> {
        if !self.cfg.registry {
            return Ok(());
        }
        let stream = self.sub.registry.enter(REGISTRY_PATH);
        self.mutate(&stream, |_| async {
            if self.sub.store.read_meta(&stream).await?.is_some() {
                return Ok(Plan::Done(()));
            }
            let meta = self.registry_meta(0);
            let publish = Some(TailSignal::of(&meta));
            let mut commit = Commit::new();
            commit.push(Op::PutMeta { meta, expect: Expect::Absent });
            Ok(Plan::Commit { commit, publish, deleted: Vec::new(), value: (), predicted: None, registry: None })
        })
        .await
    }

    /// A new registry stream's meta, `tail` bytes long.
    fn registry_meta(&self, tail: u64) -> StreamMeta {
        let now = self.clock.now_ms();
        StreamMeta {
            path: REGISTRY_PATH.into(),
            incarnation: uuid::Uuid::new_v4().simple().to_string().into(),
            version: 0,
            content_type: REGISTRY_CONTENT_TYPE.into(),
            created_at_ms: now,
            tail,
            closed: false,
            closed_by: None,
            ttl_secs: None,
            expires_at_ms: None,
            touched_at_ms: now,
            last_stream_seq: None,
            fork: None,
            ref_count: 0,
            soft_deleted: false,
            retained_from: 0,
        }
    }

    /// Wakes the registry's live readers after the commit carrying `write`
    /// applied, then releases its lock.
    pub(crate) fn publish_registry(&self, write: Option<RegistryWrite>) {
        if let Some(write) = write {
            self.sub.hub.publish(&write.stream, write.signal);
        }
    }
}
