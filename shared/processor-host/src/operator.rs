//! What operators see of hosted processors, and the controls they may use:
//! the [`ProcessorOperator`] seam the HTTP operator API (`ds-http`) serves.
//!
//! A host that keeps runners open (the local server) answers from them; a
//! host that does not (the HTTP Lambda) uses [`OnDemandOperator`], which
//! reads progress records and opens a runner only for the duration of a
//! control. Either way a control goes through the runner, so it is fenced
//! by the cursor revision and audited by its core event exactly as the
//! runner defines.

use std::sync::Arc;

use async_trait::async_trait;
use ds_core::{ServiceError, StreamMeta, StreamService};
use ds_processor::StreamIncarnation;
use ds_processor::{Adapters, Journal, Phase, ProgressStore, RunnerConfig, RunnerError, RuntimeState, StoredProgress};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::alarms::AlarmScheduler;
use crate::hosted::{HostedRunner, ProcessorRegistry, Registration};
use crate::{adapters, RecordProgressStore, StreamJournal};

/// One processor on one stream, as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessorStatus {
    pub processor: String,
    pub stream: String,
    /// The registration's stream pattern.
    pub pattern: String,
    /// The stream's tail offset when this was read.
    pub tail: u64,
    pub reduced_through: u64,
    pub acknowledged_through: u64,
    /// `tail - acknowledged_through`: stream offsets not yet acknowledged
    /// (0 once the processor is caught up, its own audit events included).
    pub lag: u64,
    pub cursor_revision: u64,
    /// A runner is open on the stream in the answering process; the fields
    /// below are its in-memory view (absent otherwise).
    pub running: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<u64>,
    #[serde(default)]
    pub retry_count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default)]
    pub pending_background: usize,
    /// Set for an inline processor (validated and reduced in each append's
    /// commit): what it refused, whether an operator skipped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<InlineStatus>,
    /// Set for a materialized view (the `state` kind): its size and the
    /// messages it refused to fold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub materialized: Option<crate::MaterializedStatus>,
}

/// What an inline processor adds to its status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InlineStatus {
    pub kind: String,
    /// Appends it refused (on any stream) since the answering process started.
    pub rejections: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_rejection: Option<crate::LastRejection>,
    /// Why an operator skipped it on this stream (appends pass unchecked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl ProcessorStatus {
    /// The status of an open runner on a stream whose tail is `tail`.
    pub fn of_runner(registration: &Registration, stream: &str, tail: u64, runtime: &RuntimeState) -> Self {
        Self {
            processor: registration.spec.slug().to_owned(),
            stream: stream.to_owned(),
            pattern: registration.pattern.to_string(),
            tail,
            reduced_through: runtime.reduced_through,
            acknowledged_through: runtime.acknowledged_through,
            lag: tail.saturating_sub(runtime.acknowledged_through),
            cursor_revision: runtime.cursor_revision,
            running: !runtime.drained,
            phase: Some(phase_name(runtime.phase).to_owned()),
            in_flight: runtime.in_flight,
            retry_count: runtime.retry_count,
            last_error: runtime.last_error.clone(),
            pending_background: runtime.pending_background,
            inline: None,
            materialized: None,
        }
    }

    /// The status from the stored progress record (none: nothing processed).
    pub fn of_record(registration: &Registration, stream: &str, tail: u64, stored: Option<&StoredProgress>) -> Self {
        let (reduced, acknowledged, revision) = stored.map_or((0, 0, 0), |s| {
            (s.progress.reduction.reduced_through, s.progress.acknowledged_through(), s.progress.cursor_revision())
        });
        Self {
            processor: registration.spec.slug().to_owned(),
            stream: stream.to_owned(),
            pattern: registration.pattern.to_string(),
            tail,
            reduced_through: reduced,
            acknowledged_through: acknowledged,
            lag: tail.saturating_sub(acknowledged),
            cursor_revision: revision,
            running: false,
            phase: None,
            in_flight: None,
            retry_count: 0,
            last_error: None,
            pending_background: 0,
            inline: None,
            materialized: None,
        }
    }
}

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::CatchingUp => "catching-up",
        Phase::Live => "live",
    }
}

/// One processor on one stream with its reduced state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessorDetail {
    #[serde(flatten)]
    pub status: ProcessorStatus,
    pub reducer_version: String,
    /// The persisted reduction's state (as of `reducedThrough`).
    pub state: Value,
}

/// A page of [`ProcessorOperator::list`], ordered by stream then processor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessorPage {
    pub processors: Vec<ProcessorStatus>,
    /// More streams follow: pass this as `after` for the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// An operator control (see [`ds_processor::Runner`] for each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    ReReduce { reason: String },
    ReprocessFrom { position: u64, expected_revision: u64, reason: String },
    SkipThrough { position: u64, expected_revision: u64, reason: String },
}

impl Control {
    /// Applies the control to `runner`.
    pub async fn apply(&self, runner: &dyn HostedRunner) -> Result<(), RunnerError> {
        match self {
            Self::ReReduce { reason } => runner.re_reduce(reason).await,
            Self::ReprocessFrom { position, expected_revision, reason } => {
                runner.reprocess_from(*position, *expected_revision, reason).await
            }
            Self::SkipThrough { position, expected_revision, reason } => {
                runner.skip_through(*position, reason, *expected_revision).await
            }
        }
    }
}

/// An operator request that cannot be served.
#[derive(Debug, thiserror::Error)]
// Exhaustive on purpose: ds-http's error.rs maps every variant to a status
// code, and a new variant must fail that build rather than become a 500.
pub enum OperatorError {
    #[error("no processor {slug:?} is configured")]
    UnknownProcessor { slug: String },
    #[error("processor {slug:?} does not run on stream {stream:?} (its streams are {pattern:?})")]
    NotRegistered { slug: String, stream: String, pattern: String },
    #[error("stream {stream:?} does not exist")]
    StreamNotFound { stream: String },
    /// The stream exists but is not a JSON stream: no processor runs on it.
    #[error(
        "stream {stream:?} is not a JSON stream (content type {content_type:?}): processors read JSON streams only"
    )]
    NotJson { stream: String, content_type: String },
    /// A control only inline processors have (reset, skip) asked of a hosted one.
    #[error("processor {slug:?} is not an inline processor: {control} applies to inline processors only")]
    NotInline { slug: String, control: &'static str },
    /// A state read asked of a processor that keeps no materialized view.
    #[error("processor {slug:?} keeps no materialized state (only `state` processors do)")]
    NotMaterialized { slug: String },
    #[error("processor {slug:?} has no row {key:?} of type {entity_type:?} on stream {stream:?}")]
    RowNotFound { slug: String, stream: String, entity_type: String, key: String },
    /// The view outgrew its configured `max_rows` / `max_bytes`: it is
    /// dropped rather than served truncated.
    #[error("processor {slug:?} on stream {stream:?}: {reason}")]
    StateLimit { slug: String, stream: String, reason: String },
    #[error(transparent)]
    Runner(#[from] RunnerError),
    /// The stream's state refuses the request (a closed stream cannot take
    /// a snapshot); retrying will not help until it changes.
    #[error("{0}")]
    Conflict(String),
    /// The store could not be read; may be retried.
    #[error("{0}")]
    Unavailable(String),
}

impl From<ServiceError> for OperatorError {
    fn from(e: ServiceError) -> Self {
        Self::Unavailable(e.to_string())
    }
}

/// What a host offers operators.
#[async_trait]
pub trait ProcessorOperator: Send + Sync {
    /// Processors with their lag, by stream, for streams after `after`
    /// (at most `limit` streams).
    async fn list(&self, after: Option<&str>, limit: usize) -> Result<ProcessorPage, OperatorError>;
    /// One processor on one stream, with its state.
    async fn show(&self, slug: &str, stream: &str) -> Result<ProcessorDetail, OperatorError>;
    /// Applies `control`, then answers as [`Self::show`].
    async fn control(&self, slug: &str, stream: &str, control: Control) -> Result<ProcessorDetail, OperatorError>;
    /// An inline processor's own controls (reset, skip); a host without
    /// inline processors has none.
    async fn inline_control(
        &self,
        slug: &str,
        _stream: &str,
        control: ds_core::InlineControl,
    ) -> Result<ProcessorDetail, OperatorError> {
        Err(OperatorError::NotInline { slug: slug.to_owned(), control: inline_control_name(&control) })
    }
    /// Part of a processor's materialized state; only a host with
    /// materialized views (the `state` kind) has any.
    async fn state(
        &self,
        slug: &str,
        _stream: &str,
        _query: crate::StateQuery,
    ) -> Result<crate::StateAnswer, OperatorError> {
        Err(OperatorError::NotMaterialized { slug: slug.to_owned() })
    }
    /// Compacts a `state` processor's stream now (whatever its sizes);
    /// only a host with materialized views has any to compact.
    async fn compact(&self, slug: &str, _stream: &str) -> Result<crate::CompactionReport, OperatorError> {
        Err(OperatorError::NotMaterialized { slug: slug.to_owned() })
    }
}

/// A control's name in messages.
pub fn inline_control_name(control: &ds_core::InlineControl) -> &'static str {
    match control {
        ds_core::InlineControl::Reset => "reset",
        ds_core::InlineControl::Skip { .. } => "skip",
        ds_core::InlineControl::ReReduce => "re-reduce",
    }
}

/// The registration of `slug`, if it runs on `stream`.
pub fn resolve<'a>(
    registry: &'a ProcessorRegistry,
    slug: &str,
    stream: &str,
) -> Result<&'a Registration, OperatorError> {
    let registration =
        registry.registration(slug).ok_or_else(|| OperatorError::UnknownProcessor { slug: slug.to_owned() })?;
    if !registration.pattern.matches(stream) {
        return Err(OperatorError::NotRegistered {
            slug: slug.to_owned(),
            stream: stream.to_owned(),
            pattern: registration.pattern.to_string(),
        });
    }
    Ok(registration)
}

/// The live meta of a JSON stream processors may run on.
pub async fn processed_stream(service: &StreamService, stream: &str) -> Result<StreamMeta, OperatorError> {
    match service.head(stream).await {
        Ok(meta) if ds_protocol::headers::is_json(&meta.content_type) => Ok(meta),
        Ok(meta) => {
            Err(OperatorError::NotJson { stream: stream.to_owned(), content_type: meta.content_type.to_string() })
        }
        Err(ServiceError::NotFound | ServiceError::Gone | ServiceError::Expired(_)) => {
            Err(OperatorError::StreamNotFound { stream: stream.to_owned() })
        }
        Err(e) => Err(e.into()),
    }
}

/// The stored progress of `slug` on `meta`'s incarnation.
pub async fn stored_progress(
    service: &StreamService,
    meta: &StreamMeta,
    slug: &str,
) -> Result<Option<StoredProgress>, OperatorError> {
    let store = RecordProgressStore::new(service.clone(), &meta.path, slug);
    store.read(&StreamIncarnation::new(meta.incarnation.to_string())).await.map_err(|e| OperatorError::Runner(e.into()))
}

/// The detail of a processor with no runner open, from its stored progress
/// on the stream life `meta` (nothing stored: no state yet).
pub async fn record_detail(
    service: &StreamService,
    registration: &Registration,
    meta: &StreamMeta,
    slug: &str,
) -> Result<ProcessorDetail, OperatorError> {
    let stored = stored_progress(service, meta, slug).await?;
    let (reducer_version, state) = match &stored {
        Some(s) => (s.progress.reduction.reducer_version.clone(), s.progress.reduction.state.clone()),
        None => (String::new(), Value::Null),
    };
    let status = ProcessorStatus::of_record(registration, &meta.path, meta.tail, stored.as_ref());
    Ok(ProcessorDetail { status, reducer_version, state })
}

/// The detail of an open runner.
pub fn runner_detail(
    registration: &Registration,
    stream: &str,
    tail: u64,
    runner: &dyn HostedRunner,
) -> ProcessorDetail {
    ProcessorDetail {
        status: ProcessorStatus::of_runner(registration, stream, tail, &runner.runtime_state()),
        reducer_version: runner.reducer_version(),
        state: runner.state_json(),
    }
}

/// [`ProcessorOperator`] for hosts that keep no runner open: answers from
/// progress records, opens a runner for a control and drops it after.
pub struct OnDemandOperator {
    service: StreamService,
    registry: ProcessorRegistry,
    /// Recovery for the runners controls open; `None`: without recovery
    /// (controls register no effects, so none is owed).
    alarms: Option<Arc<dyn AlarmScheduler>>,
    config: RunnerConfig,
}

/// Stream metas read per listing call.
const LIST_PAGE: usize = 500;

/// What a listing of processed streams needs to read: the streams under
/// the longest common start of the registrations' literal prefixes (every
/// stream a registration can match is there; on AWS a listing costs what
/// it finds, not the table); `None` without registrations.
fn listing_prefix(registrations: &[Registration]) -> Option<String> {
    common_prefix(registrations.iter().map(|r| r.pattern.literal_prefix()))
}

/// The longest common start of `prefixes`; `None` without any.
pub(crate) fn common_prefix(mut prefixes: impl Iterator<Item = String>) -> Option<String> {
    let first = prefixes.next()?;
    let common = prefixes.fold(first, |common, p| {
        let mut len = common.bytes().zip(p.bytes()).take_while(|(a, b)| a == b).count();
        while !common.is_char_boundary(len) {
            len -= 1;
        }
        common[..len].to_owned()
    });
    Some(common)
}

/// One page of a processor listing: the live JSON streams under `prefix`
/// after `after` that `matches` takes, at most `limit` of them, each with
/// what `statuses` says of it; `next` when more may follow.
pub(crate) async fn list_streams<M, S, Fut>(
    service: &StreamService,
    prefix: &str,
    after: Option<&str>,
    limit: usize,
    matches: M,
    mut statuses: S,
) -> Result<ProcessorPage, OperatorError>
where
    M: Fn(&str) -> bool,
    S: FnMut(StreamMeta) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<ProcessorStatus>, OperatorError>>,
{
    let store = &service.substrate().store;
    let now = service.clock().now_ms();
    let (mut cursor, mut streams) = (after.map(str::to_owned), 0);
    let mut page = ProcessorPage { processors: Vec::new(), next: None };
    loop {
        let metas =
            store.list_streams_with_prefix(prefix, cursor.as_deref(), LIST_PAGE).await.map_err(ServiceError::from)?;
        let Some(last) = metas.last() else { return Ok(page) };
        cursor = Some(last.path.to_string());
        for meta in metas {
            let live = !meta.soft_deleted && !meta.is_expired(now) && ds_protocol::headers::is_json(&meta.content_type);
            if !live || !matches(&meta.path) {
                continue;
            }
            if streams == limit {
                page.next = page.processors.last().map(|s| s.stream.clone());
                return Ok(page);
            }
            page.processors.extend(statuses(meta).await?);
            streams += 1;
        }
    }
}

impl OnDemandOperator {
    pub fn new(service: StreamService, registry: ProcessorRegistry, alarms: Option<Arc<dyn AlarmScheduler>>) -> Self {
        Self { service, registry, alarms, config: RunnerConfig::default() }
    }

    fn adapters(&self, stream: &str, slug: &str) -> Adapters {
        match &self.alarms {
            Some(alarms) => adapters(&self.service, stream, slug, Arc::clone(alarms)),
            None => {
                let journal: Arc<dyn Journal> = Arc::new(StreamJournal::new(self.service.clone(), stream));
                let progress: Arc<dyn ProgressStore> =
                    Arc::new(RecordProgressStore::new(self.service.clone(), stream, slug));
                Adapters::without_recovery(journal, progress)
            }
        }
    }

    async fn statuses(&self, meta: &StreamMeta) -> Result<Vec<ProcessorStatus>, OperatorError> {
        let mut out = Vec::new();
        for registration in self.registry.registrations().iter().filter(|r| r.pattern.matches(&meta.path)) {
            let stored = stored_progress(&self.service, meta, registration.spec.slug()).await?;
            out.push(ProcessorStatus::of_record(registration, &meta.path, meta.tail, stored.as_ref()));
        }
        Ok(out)
    }
}

#[async_trait]
impl ProcessorOperator for OnDemandOperator {
    async fn list(&self, after: Option<&str>, limit: usize) -> Result<ProcessorPage, OperatorError> {
        let Some(prefix) = listing_prefix(self.registry.registrations()) else {
            return Ok(ProcessorPage { processors: Vec::new(), next: None });
        };
        let matches = |path: &str| self.registry.registrations().iter().any(|r| r.pattern.matches(path));
        list_streams(&self.service, &prefix, after, limit, matches, |meta| async move { self.statuses(&meta).await })
            .await
    }

    async fn show(&self, slug: &str, stream: &str) -> Result<ProcessorDetail, OperatorError> {
        let registration = resolve(&self.registry, slug, stream)?;
        let meta = processed_stream(&self.service, stream).await?;
        record_detail(&self.service, registration, &meta, slug).await
    }

    async fn control(&self, slug: &str, stream: &str, control: Control) -> Result<ProcessorDetail, OperatorError> {
        let registration = resolve(&self.registry, slug, stream)?;
        processed_stream(&self.service, stream).await?;
        let runner = registration.spec.open_on(stream, self.adapters(stream, slug), self.config.clone()).await?;
        control.apply(runner.as_ref()).await?;
        let meta = processed_stream(&self.service, stream).await?;
        Ok(runner_detail(registration, stream, meta.tail, runner.as_ref()))
    }
}
