//! Lambda entry point of the processor function (logic: `ds-processor-aws`).
//! One function for three event sources: the table's DynamoDB Stream,
//! revival schedules (EventBridge Scheduler) and the background-task queue
//! (SQS). It also runs subscriptions (their wakes, leases and retries; the
//! HTTP function only serves their API). Which processors run on which
//! streams is [`deployment`]'s choice.

use ds_processor_aws::{Deployment, TaskHandlers, Wiring};
use ds_processors_builtin::Catalog;

/// The processors this deployment runs: those `DS_PROCESSORS_TOML` holds
/// (or the file `DS_PROCESSORS` names: the TOML of `serve --processors`,
/// the same settings on every host; built-in kinds, checked against the store
/// like the local server and the HTTP function's operator API do). Without
/// it the function does the table's upkeep only (TTL removals, sealing,
/// sweeping). A processor of your own: add its kind to the catalog
/// (`Catalog::builtin().with_kind(..)`), or register it here directly.
async fn deployment(wiring: Wiring) -> anyhow::Result<Deployment> {
    let Some(source) = ds_config::Settings::from_env().processors()? else {
        return Ok(Deployment::default());
    };
    let (config, registry) = Catalog::builtin()
        .load(&source.text, &wiring.service)
        .await
        .map_err(|e| anyhow::anyhow!("{}: {e}", source.origin))?;
    let slugs: Vec<&str> = config.processors.iter().map(|p| p.slug.as_str()).collect();
    tracing::info!(processors = ?slugs, "processors registered");
    Ok(Deployment { registry, tasks: TaskHandlers::new() })
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    // JSON logs to stdout; span export when the `OTEL_*` variables ask for it.
    let _telemetry = ds_telemetry::init_lambda("durable-streams-processor")?;
    let function = std::sync::Arc::new(ds_processor_aws::function_from_env(deployment).await?);
    lambda_runtime::run(lambda_runtime::service_fn(move |event: lambda_runtime::LambdaEvent<serde_json::Value>| {
        let function = std::sync::Arc::clone(&function);
        async move {
            let handled = function.handle(event.payload, event.context.deadline).await;
            // The steps' and deliveries' spans out before the environment
            // is frozen (nothing when export is off).
            if ds_telemetry::enabled() {
                let _ = tokio::task::spawn_blocking(ds_telemetry::flush).await;
            }
            handled.map_err(lambda_runtime::Error::from)
        }
    }))
    .await
}
