//! Lambda entry point of the processor function (logic: `ds-processor-aws`).
//! One function for three event sources: the table's DynamoDB Stream,
//! revival schedules (EventBridge Scheduler) and the background-task queue
//! (SQS). Which processors run on which streams is [`deployment`]'s choice.

use ds_processor_aws::{Deployment, TaskHandlers, Wiring};
use ds_processor_host::ProcessorRegistry;

/// The processors this deployment runs (by stream path pattern) and the
/// handlers of their background tasks. Empty: the function then does the
/// table's upkeep only (TTL removals, sealing, sweeping).
fn deployment(_wiring: &Wiring) -> Deployment {
    Deployment { registry: ProcessorRegistry::new(), tasks: TaskHandlers::new() }
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).json().without_time().try_init();
    let function = std::sync::Arc::new(ds_processor_aws::function_from_env(deployment).await?);
    lambda_runtime::run(lambda_runtime::service_fn(move |event: lambda_runtime::LambdaEvent<serde_json::Value>| {
        let function = std::sync::Arc::clone(&function);
        async move { function.handle(event.payload, event.context.deadline).await.map_err(lambda_runtime::Error::from) }
    }))
    .await
}
