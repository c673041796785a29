//! Compaction of State Protocol streams: a snapshot of the live state is
//! appended (`snapshot-start`, one `insert` per live row in (type, key)
//! order, `snapshot-end`, as ONE append), then the stream's history before
//! the snapshot is trimmed. A reader from `offset=-1` then downloads the
//! live state once, plus what followed it.
//!
//! # Why no row is lost
//! The snapshot is the state folded through position `T`, and it is
//! appended with `expect_tail = T`: it lands at `T` exactly, or, when
//! anything else was appended meanwhile (a change between the fold and the
//! append, one still in flight ahead of it), is refused whole with
//! `TailMoved`, writes nothing, and is rebuilt from the caught-up view.
//! The fold's last step and the append run under the stream's lock
//! (`StreamService::append_built`), after the appends in flight are
//! durable, so only another process's append can refuse it: a writer that
//! keeps the stream busy no longer starves compaction.
//! So the stream reads: history up to `T`, the snapshot (= the fold of that
//! history), everything after. Trimming at `T` drops only history the
//! snapshot restates, and for any reader starting at `T`
//! `fold(snapshot ++ rest) = fold(history ++ rest)`, because folding
//! continues from equal states (a fresh reader's empty state plus the
//! snapshot's inserts equals the history's fold; `snapshot-start` clears
//! nothing, so a live reader holding the state at `T` re-inserts equal rows).
//!
//! # Exactly once across crashes
//! A snapshot is appended once per compaction: it is an idempotent-producer
//! append (producer `state-compaction/{slug}`, epoch `T`, seq 0), so a retry
//! of one that landed answers `Duplicate` and writes nothing, and a stale
//! compaction (another host's, at an older `T`) is fenced (`StaleEpoch`);
//! the tail condition alone already forbids a second snapshot at `T`. One
//! producer state per stream and processor: nothing piles up per
//! compaction, as one idempotency record per snapshot would. The trim is the second step: the snapshot's first
//! message names its own position (`offset`) and the processor
//! (`compactedBy`), so after a crash between append and trim, the next
//! compaction's fold finds it and trims there first. Both steps are
//! idempotent; a crash anywhere leaves either the old history, or the old
//! history plus a snapshot (still a correct stream: the snapshot restates
//! what precedes it), or the trimmed stream.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use ds_core::{AppendOutcome, AppendRequest, BuildAppend, ServiceError, StreamService};
use ds_processor_host::{processed_stream, CompactionOutcome, CompactionReport, OperatorError};
use ds_protocol::headers::ProducerHeaders;
use serde_json::{json, Value};

use super::snapshot::snapshot_messages;
use super::view::{StateViews, View};

/// Defaults of `compact_min_bytes` and `compact_interval`.
pub const DEFAULT_MIN_BYTES: u64 = 1024 * 1024;
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
/// The largest snapshot: the server's default largest append, so a snapshot
/// is never an append no client could have written.
pub const MAX_SNAPSHOT_BYTES: usize = 16 * 1024 * 1024;
/// Snapshots refused by a moving tail before a compaction gives up (the
/// next pass tries again).
const ATTEMPTS: u32 = 16;
/// Streams listed per page by a background pass.
const LIST_PAGE: usize = 500;

/// When a `state` processor compacts its streams by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionSettings {
    /// Compact when the history is over `ratio` times the live state's
    /// size; `None`: only when an operator asks.
    pub ratio: Option<u64>,
    /// Never compact a history smaller than this.
    pub min_bytes: u64,
    /// How often a background pass checks the bound streams.
    pub interval: Duration,
}

impl StateViews {
    /// Compacts `slug`'s stream `stream` if its history is over the
    /// configured multiple of its live state (`force`: whatever the sizes).
    /// Finishes first an earlier compaction whose trim a crash interrupted.
    pub async fn compact(
        &self,
        slug: &str,
        stream: &str,
        service: &StreamService,
        force: bool,
    ) -> Result<CompactionReport, OperatorError> {
        let settings = self.settings_for(slug, stream)?;
        let mut view = self.current(slug, stream, service).await?;
        let meta = processed_stream(service, stream).await?;
        let history_before = meta.tail - meta.retained_from;
        let mut report = CompactionReport {
            processor: slug.to_owned(),
            stream: stream.to_owned(),
            outcome: CompactionOutcome::NotNeeded,
            snapshot_at: None,
            snapshot_bytes: None,
            rows: view.fold.rows() as u64,
            live_bytes: view.fold.bytes() as u64,
            history_before,
            history_after: history_before,
            earliest_offset: meta.retained_from,
            attempts: 0,
        };
        let mut retained_from = meta.retained_from;
        if let Some(at) = view.last_snapshot.filter(|at| *at > retained_from) {
            retained_from = trim(service, stream, view.incarnation(), at).await?;
            report.outcome = CompactionOutcome::Resumed;
            report.snapshot_at = Some(at);
        }
        let history = meta.tail - retained_from;
        let due = settings.compaction.ratio.is_some_and(|ratio| {
            history >= settings.compaction.min_bytes && history > ratio.saturating_mul(report.live_bytes.max(1))
        });
        if force || due {
            let (at, bytes, attempts) = append_snapshot(&mut view, slug, stream, service, settings).await?;
            retained_from = trim(service, stream, view.incarnation(), at).await?;
            report.outcome = CompactionOutcome::Compacted;
            report.snapshot_at = Some(at);
            report.snapshot_bytes = Some(bytes);
            report.attempts = attempts;
            report.rows = view.fold.rows() as u64;
            report.live_bytes = view.fold.bytes() as u64;
        }
        // Fold the snapshot too: the view's status shows where it stands.
        view.catch_up(service, slug, stream, settings).await?;
        view.usable(slug, stream)?;
        report.earliest_offset = retained_from;
        report.history_after = view.through().max(retained_from) - retained_from;
        Ok(report)
    }

    /// One background pass over `slug`'s streams: each whose history is
    /// past `compact_min_bytes` is compacted if due. Failures are logged and
    /// retried on the next pass.
    pub async fn compaction_pass(&self, slug: &str, service: &StreamService) -> CompactionPass {
        self.compaction_pass_until(slug, service, None).await
    }

    /// [`Self::compaction_pass`] that stops at `deadline` (after at least
    /// one stream, so passes progress): the next pass resumes after the
    /// last stream this one examined (a host whose passes run under a time
    /// limit, a Lambda invocation, covers every stream over several).
    pub async fn compaction_pass_until(
        &self,
        slug: &str,
        service: &StreamService,
        deadline: Option<Instant>,
    ) -> CompactionPass {
        let mut pass = CompactionPass::default();
        let Some(binding) = self.binding(slug) else { return pass };
        let (pattern, min_bytes) = (binding.pattern.clone(), binding.settings.compaction.min_bytes);
        let prefix = pattern.literal_prefix();
        let mut after = self.resume_after(slug, None);
        loop {
            let store = &service.substrate().store;
            let page = match store.list_streams_with_prefix(&prefix, after.as_deref(), LIST_PAGE).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(processor = slug, error = %e, "state compaction: listing streams failed");
                    pass.failed += 1;
                    return pass;
                }
            };
            if page.is_empty() {
                pass.complete = true;
                return pass;
            }
            for meta in page.iter() {
                if pass.examined > 0 && deadline.is_some_and(|d| Instant::now() >= d) {
                    self.resume_after(slug, after);
                    return pass;
                }
                after = Some(meta.path.to_string());
                if !pattern.matches(&meta.path) || meta.tail - meta.retained_from < min_bytes {
                    continue;
                }
                pass.examined += 1;
                self.compact_in_pass(slug, &meta.path, service, &mut pass).await;
            }
        }
    }

    async fn compact_in_pass(&self, slug: &str, stream: &str, service: &StreamService, pass: &mut CompactionPass) {
        match self.compact(slug, stream, service, false).await {
            Ok(report) if report.outcome == CompactionOutcome::NotNeeded => {}
            Ok(report) => {
                tracing::info!(
                    processor = slug,
                    stream,
                    outcome = ?report.outcome,
                    snapshot_at = report.snapshot_at,
                    history_before = report.history_before,
                    history_after = report.history_after,
                    "state compaction"
                );
                pass.compacted += 1;
            }
            Err(OperatorError::StreamNotFound { .. } | OperatorError::NotJson { .. }) => {}
            Err(e) => {
                tracing::warn!(processor = slug, stream, error = %e, "state compaction failed");
                pass.failed += 1;
            }
        }
    }

    /// A pass of every `state` processor that compacts by itself, under one
    /// deadline (the scheduled pass of a host without background tasks).
    pub async fn scheduled_passes(&self, service: &StreamService, deadline: Option<Instant>) -> Value {
        let mut passes = serde_json::Map::new();
        for (slug, _) in self.compacting() {
            let pass = self.compaction_pass_until(&slug, service, deadline).await;
            tracing::info!(processor = %slug, ?pass, "state compaction pass");
            let summary = json!({
                "examined": pass.examined, "compacted": pass.compacted, "failed": pass.failed, "complete": pass.complete
            });
            passes.insert(slug, summary);
        }
        json!({ "compaction": passes })
    }
}

/// Whether a scheduled invocation's `event` asks for compaction passes
/// (`{"compaction": "pass"}`, template.yaml `CompactionSchedule`).
pub fn is_compaction_event(event: &Value) -> bool {
    event.get("compaction").is_some()
}

/// What a background pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionPass {
    /// Streams with enough history to be checked.
    pub examined: usize,
    pub compacted: usize,
    pub failed: usize,
    /// The pass reached the end of the listing (`false`: stopped by its
    /// deadline; the next pass resumes).
    pub complete: bool,
}

/// Appends the snapshot of `view` right after the state it holds, built
/// under the stream's lock ([`StreamService::append_built`]), so no append
/// of this process lands between the fold and the snapshot; another
/// process's append refuses it (`TailMoved`) and it is built again. Returns
/// where it starts, its size, and the attempts it took.
async fn append_snapshot(
    view: &mut View,
    slug: &str,
    stream: &str,
    service: &StreamService,
    settings: super::StateSettings,
) -> Result<(u64, u64, u32), OperatorError> {
    let content_type = processed_stream(service, stream).await?.content_type.to_string();
    let mut build = SnapshotBuild { view, slug, stream, service, settings, content_type, built: None, error: None };
    for attempt in 1..=ATTEMPTS {
        let outcome = service.append_built(stream, &mut build).await;
        if let Some(error) = build.error.take() {
            return Err(error);
        }
        let Some((at, bytes)) = build.built else {
            return Err(OperatorError::Unavailable(format!("compaction of {stream:?}: no snapshot was built")));
        };
        match outcome {
            Ok(Some(AppendOutcome::Appended { start, .. })) => {
                debug_assert_eq!(start, at, "a conditional append lands where it said");
                return Ok((at, bytes, attempt));
            }
            // Appended before (an answer lost on the way, or another host's
            // compaction at the same state): epoch `at` is only ever used
            // by a snapshot conditional on the tail `at`, so it is at `at`.
            Ok(Some(AppendOutcome::Duplicate { .. })) => return Ok((at, bytes, attempt)),
            Ok(other) => {
                return Err(OperatorError::Unavailable(format!("compaction: unexpected append outcome {other:?}")))
            }
            // Another process appended between the fold and the snapshot.
            Err(ServiceError::TailMoved { .. }) => {}
            Err(ServiceError::NotFound | ServiceError::Gone | ServiceError::Expired(_)) => {
                return Err(OperatorError::StreamNotFound { stream: stream.to_owned() })
            }
            // Another host's compaction landed a later snapshot meanwhile.
            Err(e @ ServiceError::StaleEpoch { .. }) => {
                return Err(OperatorError::Unavailable(format!("compaction of {stream:?}: {e}; read again")))
            }
            Err(e @ (ServiceError::StreamClosed { .. } | ServiceError::IncarnationChanged { .. })) => {
                return Err(OperatorError::Conflict(format!("compaction of {stream:?}: {e}")))
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(OperatorError::Unavailable(format!(
        "compaction of {stream:?}: the tail moved under {ATTEMPTS} snapshots in a row; the next pass tries again"
    )))
}

/// One snapshot, built under the stream's lock from the view caught up to
/// the tail. What it built, or why it built nothing, is kept for the caller.
struct SnapshotBuild<'a> {
    view: &'a mut View,
    slug: &'a str,
    stream: &'a str,
    service: &'a StreamService,
    settings: super::StateSettings,
    content_type: String,
    /// `(at, bytes)` of the last snapshot built.
    built: Option<(u64, u64)>,
    error: Option<OperatorError>,
}

#[async_trait]
impl BuildAppend for SnapshotBuild<'_> {
    async fn build(&mut self) -> Option<AppendRequest<'static>> {
        // Under the lock only the appends since the caller's catch-up are
        // folded here.
        let caught_up = self.view.catch_up(self.service, self.slug, self.stream, self.settings).await;
        // A view dropped at its limits holds no state to snapshot.
        if let Err(error) = caught_up.and_then(|()| self.view.usable(self.slug, self.stream)) {
            self.error = Some(error);
            return None;
        }
        let at = self.view.through();
        let body = snapshot_messages(&self.view.fold, self.slug, at);
        if body.len() > MAX_SNAPSHOT_BYTES {
            self.error = Some(OperatorError::StateLimit {
                slug: self.slug.to_owned(),
                stream: self.stream.to_owned(),
                reason: format!(
                    "the snapshot would be {} bytes, over the largest append a snapshot may be ({MAX_SNAPSHOT_BYTES})",
                    body.len()
                ),
            });
            return None;
        }
        self.built = Some((at, body.len() as u64));
        Some(AppendRequest {
            path: self.stream.to_owned().into(),
            content_type: Some(self.content_type.clone().into()),
            body: Bytes::from(body),
            close: false,
            seq: None,
            producer: Some(ProducerHeaders { id: format!("state-compaction/{}", self.slug), epoch: at, seq: 0 }),
            dedupe_key: None,
            incarnation: Some(self.view.incarnation().to_owned()),
            expect_tail: Some(at),
            trace_context: None,
        })
    }
}

/// Trims the stream's life `incarnation` at `at`; returns its earliest
/// retained position after.
async fn trim(service: &StreamService, stream: &str, incarnation: &str, at: u64) -> Result<u64, OperatorError> {
    match service.trim_incarnation(stream, incarnation, at).await {
        Ok(out) => Ok(out.retained_from),
        Err(ServiceError::NotFound | ServiceError::Gone | ServiceError::Expired(_)) => {
            Err(OperatorError::StreamNotFound { stream: stream.to_owned() })
        }
        Err(e) => Err(e.into()),
    }
}
