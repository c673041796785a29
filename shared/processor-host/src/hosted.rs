//! What a host (the local server, the processor Lambda) runs: processors
//! registered by name for stream path patterns, opened per stream as
//! type-erased runners.
//!
//! A [`ProcessorSpec`] builds a processor and opens its [`Runner`] on one
//! stream; [`HostedRunner`] is that runner without its processor type, so
//! one host drives any mix of processors. [`ProcessorRegistry`] maps stream
//! paths to the specs registered for them.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ds_processor::{Adapters, DrainReport, DriveReport, Processor, Runner, RunnerConfig, RunnerError, RuntimeState};
use ds_protocol::glob::Glob;
use futures::future::BoxFuture;

/// A processor type a host can open on any stream.
pub trait ProcessorSpec: Send + Sync {
    /// The processor's slug (its progress record and alarm are keyed by it).
    fn slug(&self) -> &str;
    /// Opens a runner of a fresh processor instance with `adapters`.
    fn open(
        &self,
        adapters: Adapters,
        config: RunnerConfig,
    ) -> BoxFuture<'_, Result<Arc<dyn HostedRunner>, RunnerError>>;
    /// Opens a runner on the stream at `stream` (the path the adapters
    /// serve). Hosts call this one: a processor that needs to know its
    /// stream (an outbox naming its source) overrides it; by default it is
    /// [`Self::open`].
    fn open_on<'a>(
        &'a self,
        stream: &str,
        adapters: Adapters,
        config: RunnerConfig,
    ) -> BoxFuture<'a, Result<Arc<dyn HostedRunner>, RunnerError>> {
        let _ = stream;
        self.open(adapters, config)
    }
    /// How long a host that rings a runner on every commit waits after a
    /// ring before driving it, so that a burst of appends costs one drive
    /// and one checkpoint instead of one each. Zero (the default): at once,
    /// as a processor with effects wants. A processor that consumes nothing
    /// (the `state` kind) has no effect to make prompt, only its lag.
    fn wake_delay(&self) -> Duration {
        Duration::ZERO
    }
}

/// A [`ProcessorSpec`] from a constructor of processors.
pub struct Spec<F> {
    slug: String,
    make: F,
    wake_delay: Duration,
}

impl<P, F> Spec<F>
where
    P: Processor,
    F: Fn() -> P + Send + Sync,
{
    /// The spec of the processors `make` builds (its slug is theirs).
    pub fn new(make: F) -> Self {
        let slug = make().contract().slug.clone();
        Self { slug, make, wake_delay: Duration::ZERO }
    }

    /// See [`ProcessorSpec::wake_delay`].
    #[must_use]
    pub fn with_wake_delay(mut self, delay: Duration) -> Self {
        self.wake_delay = delay;
        self
    }
}

impl<P, F> ProcessorSpec for Spec<F>
where
    P: Processor,
    F: Fn() -> P + Send + Sync,
{
    fn slug(&self) -> &str {
        &self.slug
    }

    fn wake_delay(&self) -> Duration {
        self.wake_delay
    }

    fn open(
        &self,
        adapters: Adapters,
        config: RunnerConfig,
    ) -> BoxFuture<'_, Result<Arc<dyn HostedRunner>, RunnerError>> {
        let processor = (self.make)();
        Box::pin(async move {
            let runner = Runner::open(processor, adapters, config).await?;
            Ok(Arc::new(runner) as Arc<dyn HostedRunner>)
        })
    }
}

/// A runner whose processor type is erased (see [`Runner`] for each call).
#[async_trait]
pub trait HostedRunner: Send + Sync {
    fn slug(&self) -> &str;
    async fn catch_up(&self) -> Result<DriveReport, RunnerError>;
    async fn drain(&self, deadline_ms: u64) -> DrainReport;
    fn runtime_state(&self) -> RuntimeState;
    /// The stream life the runner processes; a runner whose life is over
    /// says nothing about the stream's current one.
    fn incarnation(&self) -> &str;
    /// The persisted reduction's state, as JSON.
    fn state_json(&self) -> serde_json::Value;
    fn reducer_version(&self) -> String;
    async fn re_reduce(&self, reason: &str) -> Result<(), RunnerError>;
    async fn reprocess_from(
        &self,
        position: u64,
        expected_cursor_revision: u64,
        reason: &str,
    ) -> Result<(), RunnerError>;
    async fn skip_through(&self, position: u64, reason: &str, expected_cursor_revision: u64)
        -> Result<(), RunnerError>;
}

#[async_trait]
impl<P: Processor> HostedRunner for Runner<P> {
    fn slug(&self) -> &str {
        &self.contract().slug
    }

    async fn catch_up(&self) -> Result<DriveReport, RunnerError> {
        Runner::catch_up(self).await
    }

    async fn drain(&self, deadline_ms: u64) -> DrainReport {
        Runner::drain(self, deadline_ms).await
    }

    fn runtime_state(&self) -> RuntimeState {
        Runner::runtime_state(self)
    }

    fn incarnation(&self) -> &str {
        Runner::incarnation(self).as_str()
    }

    fn state_json(&self) -> serde_json::Value {
        serde_json::to_value(self.snapshot().state).unwrap_or(serde_json::Value::Null)
    }

    fn reducer_version(&self) -> String {
        self.snapshot().reducer_version
    }

    async fn re_reduce(&self, reason: &str) -> Result<(), RunnerError> {
        Runner::re_reduce(self, reason).await
    }

    async fn reprocess_from(
        &self,
        position: u64,
        expected_cursor_revision: u64,
        reason: &str,
    ) -> Result<(), RunnerError> {
        Runner::reprocess_from(self, position, expected_cursor_revision, reason).await
    }

    async fn skip_through(
        &self,
        position: u64,
        reason: &str,
        expected_cursor_revision: u64,
    ) -> Result<(), RunnerError> {
        Runner::skip_through(self, position, reason, expected_cursor_revision).await
    }
}

/// One registration: a processor for the streams matching a pattern.
#[derive(Clone)]
pub struct Registration {
    pub pattern: Glob,
    pub spec: Arc<dyn ProcessorSpec>,
}

/// Which processors run on which streams.
#[derive(Clone, Default)]
pub struct ProcessorRegistry {
    registrations: Vec<Registration>,
}

/// A registration the registry refuses.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistryError {
    #[error(transparent)]
    Pattern(#[from] ds_protocol::ProtocolError),
    /// Two registrations would run the same slug on one stream: they would
    /// share (and fight over) one progress record.
    #[error("processor {slug:?} is registered twice for patterns {first:?} and {second:?}")]
    DuplicateSlug { slug: String, first: String, second: String },
}

impl ProcessorRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `spec` on every stream whose path matches `pattern`.
    pub fn register(&mut self, pattern: &str, spec: Arc<dyn ProcessorSpec>) -> Result<(), RegistryError> {
        let pattern = Glob::parse(pattern)?;
        if let Some(other) = self.registrations.iter().find(|r| r.spec.slug() == spec.slug()) {
            return Err(RegistryError::DuplicateSlug {
                slug: spec.slug().to_owned(),
                first: other.pattern.to_string(),
                second: pattern.to_string(),
            });
        }
        self.registrations.push(Registration { pattern, spec });
        Ok(())
    }

    /// The processors registered for the stream at `path`.
    pub fn for_path(&self, path: &str) -> Vec<Arc<dyn ProcessorSpec>> {
        self.registrations.iter().filter(|r| r.pattern.matches(path)).map(|r| Arc::clone(&r.spec)).collect()
    }

    /// The registration of processor `slug`, if any.
    pub fn registration(&self, slug: &str) -> Option<&Registration> {
        self.registrations.iter().find(|r| r.spec.slug() == slug)
    }

    pub fn registrations(&self) -> &[Registration] {
        &self.registrations
    }

    pub fn is_empty(&self) -> bool {
        self.registrations.is_empty()
    }
}
