//! Runs stream processors inside a server process (`durable-streams serve
//! --processors FILE`), over whatever substrate it serves.
//!
//! Where this crate sits in the processor plane, which reads left to right:
//! runner ([`ds_processor`]) → adapters (`ds-processor-host`) → hosts
//! (`ds-processor-local` in the server, **this crate**, `ds-processor-aws` in the Lambda
//! processor function) → built-in kinds and their TOML (`ds-processors-builtin`).
//! Test support for all of them: `ds-processor-testkit` (tests/processor-testkit).
//!
//! - **Woken by commits.** [`LocalHost::tap`] wraps the substrate's hub: the
//!   core publishes after every commit, and the publish rings the host for
//!   that stream. No polling: a processor runs when its stream changed.
//! - **New streams.** A commit on a stream that matches a registered pattern
//!   and has no processors yet (typically its creation) starts them; a
//!   stream deleted or expired retires them; a stream re-created gets its
//!   processors back on its new life.
//! - **Start-up.** [`LocalHost::start`] lists the existing streams, catches up
//!   every matching one (work left by a crash is redone under the same
//!   idempotency keys, so effects stay exactly once) and re-arms their
//!   revival alarms (`InProcAlarms::rearm`).
//! - **Shutdown.** [`LocalHost::shutdown`] drains every runner: in-flight
//!   blocking work is cancelled (its event stays unacknowledged, redone on
//!   the next start), settled work is checkpointed.
//! - **Operators.** [`LocalHost::operator`] serves the operator API from the
//!   open runners; [`LocalHost::lag`] summarizes lag for gauges, and lag is
//!   logged at an interval (target `ds_processor_lag`).
//!
//! Each processor on each stream has its own task, so a processor wedged on
//! a failing effect holds back only itself, on that stream.

mod host;
mod lag;
mod operator;
mod slot;
mod tap;
mod tasks;

use std::sync::Arc;
use std::time::Duration;

use ds_core::{ServiceError, StreamService, Substrate};
use ds_processor_host::{InProcAlarms, ProcessorOperator, ProcessorRegistry};

pub use host::HostConfig;
pub use lag::LagSummary;

use host::{matching, Inner, Running};

/// The in-process processor host (see crate docs). Cheap to clone.
#[derive(Clone)]
pub struct LocalHost {
    inner: Arc<Inner>,
}

/// The host could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    #[error("the processor host was already started")]
    AlreadyStarted,
    #[error("listing streams at start-up: {0}")]
    Store(#[from] ServiceError),
    #[error("re-arming the revival alarms of {stream:?}: {message}")]
    Alarms { stream: String, message: String },
}

/// Stream metas per `list_streams` call at start-up.
const SCAN_PAGE: usize = 500;

impl LocalHost {
    pub fn new(config: HostConfig) -> Self {
        Self { inner: Arc::new(Inner::new(config)) }
    }

    /// `substrate` with its hub wrapped so every commit rings this host. Build
    /// the service over the returned substrate.
    pub fn tap(&self, mut substrate: Substrate) -> Substrate {
        substrate.hub = Arc::new(tap::RingingHub { inner: substrate.hub, host: Arc::downgrade(&self.inner) });
        substrate
    }

    /// Starts the processors of `registry` on `service` (which must be built
    /// over [`Self::tap`]'s substrate): follows new commits from now on,
    /// re-arms revival alarms and catches up every matching stream that
    /// exists. Returns the number of matching streams found.
    pub async fn start(&self, service: StreamService, registry: ProcessorRegistry) -> Result<usize, HostError> {
        let (alarms, fired) = InProcAlarms::new(service.clone());
        let running = Running { service: service.clone(), registry, alarms: Arc::clone(&alarms) };
        self.inner.running.set(running).map_err(|_| HostError::AlreadyStarted)?;
        let inner = &self.inner;
        inner.tasks.spawn(host::run_alarms(Arc::clone(inner), fired));
        if let Some(interval) = inner.config.lag_log_interval {
            inner.tasks.spawn(lag::report(Arc::clone(inner), interval));
        }
        let registry = &inner.running().registry;
        let store = &service.substrate().store;
        let mut after: Option<String> = None;
        let mut found = 0;
        loop {
            let page = store.list_streams(after.as_deref(), SCAN_PAGE).await.map_err(ServiceError::from)?;
            let Some(last) = page.last() else { break };
            after = Some(last.path.to_string());
            for meta in page.iter().filter(|m| !m.soft_deleted && ds_protocol::headers::is_json(&m.content_type)) {
                let regs = matching(registry, &meta.path);
                if regs.is_empty() {
                    continue;
                }
                let slugs: Vec<String> = regs.iter().map(|r| r.spec.slug().to_owned()).collect();
                alarms
                    .rearm(&meta.path, &slugs)
                    .await
                    .map_err(|e| HostError::Alarms { stream: meta.path.to_string(), message: e.to_string() })?;
                inner.ensure(&meta.path, regs, None);
                found += 1;
            }
        }
        tracing::info!(
            processors = registry.registrations().len(),
            streams = found,
            "processor host started: catching up matching streams, following new commits"
        );
        Ok(found)
    }

    /// The operator API over this host's runners.
    pub fn operator(&self) -> Arc<dyn ProcessorOperator> {
        Arc::new(operator::LocalOperator { inner: Arc::clone(&self.inner) })
    }

    /// Lag per processor now (for gauges).
    pub fn lag(&self) -> Vec<LagSummary> {
        lag::summary(&self.inner)
    }

    /// Stops every processor: drains the runners (within the configured
    /// drain timeout) and waits for the host's tasks to end.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.shutdown.cancel();
        let timeout = inner.config.drain_timeout;
        // On the service's clock, the runners' own (a host never started has no runners).
        let now = inner.running.get().map_or(0, |running| running.service.clock().now_ms());
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let deadline_ms = u64::try_from(now).unwrap_or(0).saturating_add(timeout_ms);
        let runners: Vec<_> =
            inner.slots().into_iter().flat_map(|(_, slots)| slots).filter_map(|slot| slot.runner()).collect();
        let drains = runners.iter().map(|r| r.drain(deadline_ms));
        let reports = futures::future::join_all(drains).await;
        let uncovered = reports.iter().filter(|r| !r.revival.covered()).count();
        let stopped = tokio::time::timeout(timeout + Duration::from_secs(1), inner.tasks.wait()).await.is_ok();
        tracing::info!(runners = reports.len(), uncovered, stopped, "processor host stopped");
    }
}
