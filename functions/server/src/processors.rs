//! `serve --processors FILE` (or `--processors-toml TEXT`): the processors
//! configuration, the in-process host that runs it, and its lag gauges.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use ds_config::ProcessorsOrigin;
use ds_core::{StreamService, Substrate};
use ds_metrics::prometheus::ScrapeHook;
use ds_processor_host::{InlineOperator, InlineRegistry};
use ds_processor_local::{HostConfig, LocalHost};
use ds_processors_builtin::state::{StateOperator, StateViews};
use ds_processors_builtin::{Catalog, ProcessorsConfig};

pub struct Hosted {
    /// Where the configuration came from, as the operator wrote it.
    origin: String,
    config: ProcessorsConfig,
    host: LocalHost,
    /// The inline processors (validated and reduced in each append's commit).
    inline: Arc<InlineRegistry>,
    /// The `state` processors' in-memory views (served by the operator API).
    views: Arc<StateViews>,
}

/// Reads the configuration (a file, or the TOML itself) and checks what
/// needs no store (syntax, kinds, patterns, slugs) before anything opens:
/// such a typo fails before the store is touched.
pub fn load(file: Option<&Path>, inline: Option<&str>) -> anyhow::Result<Option<Hosted>> {
    let Some(source) = ds_config::processors_text(file, inline)? else { return Ok(None) };
    let origin = match &source.origin {
        ProcessorsOrigin::File(path) => format!("--processors {}", path.display()),
        ProcessorsOrigin::Inline => "--processors-toml".to_owned(),
    };
    let config = ProcessorsConfig::from_toml(&source.text).with_context(|| origin.clone())?;
    let inline = Arc::new(Catalog::builtin().build_inline(&config).with_context(|| origin.clone())?);
    let views = Arc::new(StateViews::from_config(&config).with_context(|| origin.clone())?);
    let host_config = HostConfig { lag_log_interval: config.host.lag_log_interval, ..HostConfig::default() };
    Ok(Some(Hosted { origin, config, host: LocalHost::new(host_config), inline, views }))
}

impl Hosted {
    /// The substrate whose commits wake the processors.
    pub fn tap(&self, substrate: Substrate) -> Substrate {
        self.host.tap(substrate)
    }

    /// Binds the inline processors to `service`'s appends: before anything
    /// appends, so no append passes unchecked.
    pub fn bind_inline(&self, service: &StreamService) {
        if !self.inline.is_empty() {
            service.set_inline_gate(Arc::clone(&self.inline) as Arc<dyn ds_core::InlineGate>);
        }
    }

    /// Checks every processor against the store (kinds, patterns, options,
    /// target streams) and starts them.
    pub async fn start(&self, service: &StreamService) -> anyhow::Result<()> {
        let registry = Catalog::builtin().build(&self.config, service).await.with_context(|| self.origin.clone())?;
        self.host.start(service.clone(), registry).await.context("starting the processors")?;
        self.start_compaction(service);
        Ok(())
    }

    /// One background task per `state` processor with a `compact_ratio`:
    /// a pass at start (it finishes a compaction a crash interrupted), then
    /// one per `compact_interval`.
    fn start_compaction(&self, service: &StreamService) {
        for (slug, interval) in self.views.compacting() {
            let (views, service) = (Arc::clone(&self.views), service.clone());
            tracing::info!(processor = %slug, interval_ms = interval.as_millis() as u64, "state compaction on");
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(interval);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let pass = views.compaction_pass(&slug, &service).await;
                    tracing::debug!(processor = %slug, ?pass, "state compaction pass");
                }
            });
        }
    }

    pub fn operator(&self, service: &StreamService) -> Arc<dyn ds_processor_host::ProcessorOperator> {
        let operator = if self.inline.is_empty() {
            self.host.operator()
        } else {
            Arc::new(InlineOperator::new(Some(self.host.operator()), Arc::clone(&self.inline), service.clone()))
        };
        if self.views.is_empty() {
            return operator;
        }
        Arc::new(StateOperator::new(operator, Arc::clone(&self.views), service.clone()))
    }

    /// Sets `ds_processor_streams{processor}` and
    /// `ds_processor_max_lag{processor}` before each scrape.
    pub fn gauges(&self) -> ScrapeHook {
        let host = self.host.clone();
        Box::new(move || {
            for lag in host.lag() {
                metrics::gauge!("ds_processor_streams", "processor" => lag.processor.clone()).set(lag.streams as f64);
                metrics::gauge!("ds_processor_max_lag", "processor" => lag.processor).set(lag.max_lag as f64);
            }
        })
    }

    /// Drains every runner.
    pub async fn shutdown(&self) {
        self.host.shutdown().await;
    }
}
