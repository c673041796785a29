//! The host's in-memory views: one [`Materialized`] per `state` processor
//! and bound stream, folded from the stream's earliest retained offset on
//! first read and brought up to the tail on every read after.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use ds_core::{ServiceError, StreamService};
use ds_processor_host::{processed_stream, MalformedAt, MaterializedStatus, OperatorError};
use ds_protocol::glob::Glob;
use futures::lock::Mutex as AsyncMutex;

use super::fold::Materialized;
use super::snapshot;
use super::{settings, StateSettings, KIND};
use crate::config::{ConfigError, ProcessorsConfig};

/// How much of the stream one read folds at a time.
const READ_BYTES: usize = 256 * 1024;

/// One `state` processor's registration.
#[derive(Debug, Clone)]
pub(crate) struct Binding {
    pub(crate) pattern: Glob,
    pub(crate) settings: StateSettings,
}

/// The live state of one stream, as far as it has been folded.
#[derive(Debug, Default)]
pub(crate) struct View {
    incarnation: String,
    through: u64,
    folded_from: u64,
    pub(crate) fold: Materialized,
    /// Why the view was dropped (over `max_rows` / `max_bytes`).
    over_limit: Option<String>,
    /// Where the newest snapshot this processor's compaction appended
    /// starts, as folded: the trim that follows it is redone from here
    /// after a crash between the two.
    pub(crate) last_snapshot: Option<u64>,
}

impl View {
    fn fresh(incarnation: &str, from: u64) -> Self {
        Self { incarnation: incarnation.to_owned(), through: from, folded_from: from, ..Self::default() }
    }

    pub(crate) fn status(&self) -> MaterializedStatus {
        let malformed = self.fold.malformed();
        MaterializedStatus {
            through: self.through,
            folded_from: self.folded_from,
            rows: self.fold.rows() as u64,
            bytes: self.fold.bytes() as u64,
            malformed: malformed.count,
            last_malformed: malformed.last.as_ref().map(|l| MalformedAt { offset: l.offset, reason: l.reason.clone() }),
        }
    }

    /// The position the view has folded through.
    pub(crate) fn through(&self) -> u64 {
        self.through
    }

    pub(crate) fn incarnation(&self) -> &str {
        &self.incarnation
    }

    /// The view holds the state (it was not dropped at its limits).
    pub(crate) fn usable(&self, slug: &str, stream: &str) -> Result<(), OperatorError> {
        match &self.over_limit {
            Some(reason) => Err(OperatorError::StateLimit {
                slug: slug.to_owned(),
                stream: stream.to_owned(),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Folds what the stream holds past [`Self::through`].
    pub(crate) async fn catch_up(
        &mut self,
        service: &StreamService,
        slug: &str,
        path: &str,
        settings: StateSettings,
    ) -> Result<(), OperatorError> {
        let meta = processed_stream(service, path).await?;
        // A fork's history starts where its source lineage's does.
        let earliest = service.earliest(&meta).await?;
        if *meta.incarnation != *self.incarnation {
            // A new stream at the path (or the first read): start over.
            *self = Self::fresh(&meta.incarnation, earliest);
        } else if self.through < earliest {
            // Retention dropped messages this view never folded: the state
            // from before them cannot be known, so fold what remains.
            *self = Self::fresh(&meta.incarnation, earliest);
        }
        while self.over_limit.is_none() && self.through < meta.tail {
            let page = match service.read_journal(path, &self.incarnation, self.through, READ_BYTES).await {
                Ok(page) => page,
                Err(ServiceError::NotFound | ServiceError::Gone | ServiceError::Expired(_)) => {
                    return Err(OperatorError::StreamNotFound { stream: path.to_owned() })
                }
                Err(ServiceError::IncarnationChanged { .. }) => {
                    return Err(OperatorError::Unavailable(format!("stream {path:?} was re-created; read again")))
                }
                // Trimmed past this fold meanwhile: fold what remains.
                Err(ServiceError::NotRetained { earliest }) => {
                    *self = Self::fresh(&self.incarnation, earliest);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            if page.entries.is_empty() {
                break;
            }
            for (position, data) in page.entries {
                let start = position - data.len() as u64 - 1;
                if snapshot::is_own_snapshot(&data, slug, start) {
                    self.last_snapshot = Some(start);
                }
                // A malformed message is reported by the fold itself.
                let _ = self.fold.apply(position, &data);
                self.through = position;
                if let Some(reason) = over(&self.fold, settings, position) {
                    // Dropped, not truncated: a partial state would read as
                    // a whole one.
                    self.fold = Materialized::new();
                    self.over_limit = Some(reason);
                    break;
                }
            }
        }
        Ok(())
    }
}

fn over(fold: &Materialized, settings: StateSettings, offset: u64) -> Option<String> {
    let (rows, bytes) = (fold.rows(), fold.bytes());
    (rows > settings.max_rows || bytes > settings.max_bytes).then(|| {
        format!(
            "the live state passed its limits at offset {offset} ({rows} rows of max_rows {}, {bytes} bytes of \
             max_bytes {}); raise them in the processors file and restart",
            settings.max_rows, settings.max_bytes
        )
    })
}

/// Views by (slug, stream); each locked on its own so one stream's fold
/// does not hold up another's reads.
type ViewMap = HashMap<(String, String), Arc<AsyncMutex<View>>>;

/// The views of every `state` processor of a configuration.
#[derive(Default)]
pub struct StateViews {
    bindings: BTreeMap<String, Binding>,
    views: Mutex<ViewMap>,
    /// Per processor, the stream a compaction pass stopped after.
    resume: Mutex<HashMap<String, String>>,
}

impl StateViews {
    /// The `state` processors of `config` (none: an empty set).
    pub fn from_config(config: &ProcessorsConfig) -> Result<Self, ConfigError> {
        let mut bindings = BTreeMap::new();
        for def in config.processors.iter().filter(|d| d.kind == KIND) {
            let pattern = Glob::parse(&def.streams).map_err(|e| def.error("streams", e.to_string()))?;
            let settings = settings(def.clone())?;
            bindings.insert(def.slug.clone(), Binding { pattern, settings });
        }
        Ok(Self { bindings, views: Mutex::default(), resume: Mutex::default() })
    }

    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    pub(crate) fn binding(&self, slug: &str) -> Option<&Binding> {
        self.bindings.get(slug)
    }

    /// The slugs of the `state` processors that compact by themselves,
    /// with their pass interval.
    pub fn compacting(&self) -> Vec<(String, std::time::Duration)> {
        let auto = self.bindings.iter().filter(|(_, b)| b.settings.compaction.ratio.is_some());
        auto.map(|(slug, b)| (slug.clone(), b.settings.compaction.interval)).collect()
    }

    /// Takes where `slug`'s last pass stopped and leaves `next` in its place.
    pub(crate) fn resume_after(&self, slug: &str, next: Option<String>) -> Option<String> {
        let mut resume = self.resume.lock().unwrap_or_else(PoisonError::into_inner);
        match next {
            Some(next) => resume.insert(slug.to_owned(), next),
            None => resume.remove(slug),
        }
    }

    /// `slug`'s settings, if it is a `state` processor bound to `stream`.
    pub(crate) fn settings_for(&self, slug: &str, stream: &str) -> Result<StateSettings, OperatorError> {
        let binding =
            self.bindings.get(slug).ok_or_else(|| OperatorError::NotMaterialized { slug: slug.to_owned() })?;
        if !binding.pattern.matches(stream) {
            return Err(OperatorError::NotRegistered {
                slug: slug.to_owned(),
                stream: stream.to_owned(),
                pattern: binding.pattern.to_string(),
            });
        }
        Ok(binding.settings)
    }

    /// The view of `slug` on `stream`, caught up with the stream's tail;
    /// the caller reads it while holding the returned guard.
    pub(crate) async fn current(
        &self,
        slug: &str,
        stream: &str,
        service: &StreamService,
    ) -> Result<futures::lock::OwnedMutexGuard<View>, OperatorError> {
        let Some(binding) = self.bindings.get(slug) else {
            return Err(OperatorError::NotMaterialized { slug: slug.to_owned() });
        };
        let view = {
            let mut views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(views.entry((slug.to_owned(), stream.to_owned())).or_default())
        };
        let mut guard = view.lock_owned().await;
        if let Err(e) = guard.catch_up(service, slug, stream, binding.settings).await {
            if matches!(e, OperatorError::StreamNotFound { .. }) {
                // A deleted stream's view would otherwise stay until restart.
                let mut views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
                views.remove(&(slug.to_owned(), stream.to_owned()));
            }
            return Err(e);
        }
        guard.usable(slug, stream)?;
        Ok(guard)
    }

    /// The status of `slug`'s view on `stream`, caught up; `None` for a
    /// processor that is not a `state` one.
    pub(crate) async fn status(
        &self,
        slug: &str,
        stream: &str,
        service: &StreamService,
    ) -> Option<Result<MaterializedStatus, OperatorError>> {
        self.bindings.get(slug)?;
        Some(match self.current(slug, stream, service).await {
            Ok(view) => Ok(view.status()),
            Err(e) => Err(e),
        })
    }
}
