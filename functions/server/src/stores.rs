//! Build the chosen substrate.

use std::sync::Arc;

use anyhow::Context;
use ds_core::{ExpiryDue, StreamService, Substrate};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::cli::{ServeArgs, StoreKind};

/// The substrate, and the in-process expiry alarms to feed to the service
/// (`None` where alarms fire elsewhere, e.g. EventBridge Scheduler).
pub async fn open(args: &ServeArgs) -> anyhow::Result<(Substrate, Option<UnboundedReceiver<ExpiryDue>>)> {
    match args.store {
        StoreKind::Memory => {
            let (sub, due) = ds_store_memory::memory_substrate();
            Ok((sub, Some(due)))
        }
        StoreKind::Local => {
            std::fs::create_dir_all(&args.data_dir)
                .with_context(|| format!("creating data dir {}", args.data_dir.display()))?;
            let (sub, due) = ds_store_local::local_substrate(&args.data_dir)
                .with_context(|| format!("opening local store in {}", args.data_dir.display()))?;
            Ok((sub, Some(due)))
        }
        StoreKind::Aws => Ok((crate::aws::open().await?, None)),
    }
}

/// The store's name, as `/health` reports it.
pub fn name(kind: StoreKind) -> &'static str {
    match kind {
        StoreKind::Local => "local",
        StoreKind::Memory => "memory",
        StoreKind::Aws => "aws",
    }
}

/// The process-wide Prometheus recorder, with the gauges read at scrape time
/// (`more`: other components' gauges).
pub fn prometheus(
    service: &StreamService,
    more: Vec<ds_metrics::prometheus::ScrapeHook>,
) -> anyhow::Result<Arc<dyn ds_metrics::Metrics>> {
    let registry = service.substrate().registry.clone();
    let contexts = move || metrics::gauge!("ds_stream_contexts").set(registry.live_contexts() as f64);
    let mut hooks: Vec<ds_metrics::prometheus::ScrapeHook> = vec![Box::new(contexts)];
    hooks.extend(more);
    let m = ds_metrics::prometheus::PrometheusMetrics::install(hooks).map_err(anyhow::Error::msg)?;
    Ok(m)
}
