//! Lambda entry point of the processor function (logic: `ds-processor-aws`).
//! One function for three event sources: the table's DynamoDB Stream,
//! revival schedules (EventBridge Scheduler) and the background-task queue
//! (SQS). It also runs subscriptions (their wakes, leases and retries; the
//! HTTP function only serves their API). Which processors run on which
//! streams is [`deployment`]'s choice. The `state` processors that compact
//! by themselves (`compact_ratio`) are compacted by scheduled passes
//! (`{"compaction": "pass"}`, template.yaml `CompactionSchedule`).

use std::sync::{Arc, OnceLock};

use ds_core::StreamService;
use ds_processor_aws::{Deployment, TaskHandlers, Wiring};
use ds_processors_builtin::state::{is_compaction_event, StateViews};
use ds_processors_builtin::Catalog;

/// The `state` views compaction passes work on, once the deployment is read.
type Compaction = Arc<OnceLock<(Arc<StateViews>, StreamService)>>;

/// The processors this deployment runs: those `DS_PROCESSORS_TOML` holds
/// (or the file `DS_PROCESSORS` names: the TOML of `serve --processors`,
/// the same settings on every host; built-in kinds, checked against the store
/// like the local server and the HTTP function's operator API do). Without
/// it the function does the table's upkeep only (TTL removals, sealing,
/// sweeping). A processor of your own: add its kind to the catalog
/// (`Catalog::builtin().with_kind(..)`), or register it here directly.
async fn deployment(wiring: Wiring, compaction: Compaction) -> anyhow::Result<Deployment> {
    let Some(source) = ds_config::Settings::from_env().processors()? else {
        return Ok(Deployment::default());
    };
    let (config, registry) = Catalog::builtin()
        .load(&source.text, &wiring.service)
        .await
        .map_err(|e| anyhow::anyhow!("{}: {e}", source.origin))?;
    let slugs: Vec<&str> = config.processors.iter().map(|p| p.slug.as_str()).collect();
    tracing::info!(processors = ?slugs, "processors registered");
    let views = StateViews::from_config(&config).map_err(|e| anyhow::anyhow!("{}: {e}", source.origin))?;
    if !views.compacting().is_empty() {
        let _ = compaction.set((Arc::new(views), wiring.service.clone()));
    }
    Ok(Deployment { registry, tasks: TaskHandlers::new() })
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    // JSON logs to stdout; span export when the `OTEL_*` variables ask for it.
    let _telemetry = ds_telemetry::init_lambda("durable-streams-processor")?;
    let compaction = Compaction::default();
    let deploy = |wiring| deployment(wiring, Arc::clone(&compaction));
    let function = Arc::new(ds_processor_aws::function_from_env(deploy).await?);
    lambda_runtime::run(lambda_runtime::service_fn(move |event: lambda_runtime::LambdaEvent<serde_json::Value>| {
        let (function, compaction) = (Arc::clone(&function), Arc::clone(&compaction));
        async move {
            let handled = if is_compaction_event(&event.payload) {
                Ok(match compaction.get() {
                    Some((views, service)) => views.scheduled_passes(service, Some(pass_deadline(&event))).await,
                    None => serde_json::json!({ "compaction": "off" }),
                })
            } else {
                function.handle(event.payload, event.context.deadline).await.map_err(lambda_runtime::Error::from)
            };
            // The steps' and deliveries' spans out before the environment
            // is frozen (nothing when export is off).
            if ds_telemetry::enabled() {
                let _ = tokio::task::spawn_blocking(ds_telemetry::flush).await;
            }
            handled
        }
    }))
    .await
}

/// When a compaction pass stops: 15 s before the invocation's deadline (the
/// stream it is on finishes; the next pass resumes after it).
fn pass_deadline(event: &lambda_runtime::LambdaEvent<serde_json::Value>) -> std::time::Instant {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let left = std::time::Duration::from_millis(event.context.deadline.saturating_sub(now_ms));
    std::time::Instant::now() + left.saturating_sub(std::time::Duration::from_secs(15))
}
