//! Lambda entry point: substrate and clients once per process, then one
//! expiry check (or retention pass) per EventBridge Scheduler invocation.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let _telemetry = lambda_alarm_fn::init_logs()?;
    let service = lambda_alarm_fn::service_from_env().await?;
    let retention = std::sync::Arc::new(lambda_alarm_fn::retention_from_env(&service)?);
    lambda_runtime::run(lambda_runtime::service_fn(move |event: lambda_runtime::LambdaEvent<serde_json::Value>| {
        let service = service.clone();
        let retention = std::sync::Arc::clone(&retention);
        async move {
            let handled = if lambda_alarm_fn::is_retention_event(&event.payload) {
                let deadline = lambda_alarm_fn::pass_deadline(event.context.deadline);
                Ok(lambda_alarm_fn::handle_retention(retention.as_ref().as_ref(), Some(deadline)).await)
            } else {
                lambda_alarm_fn::handle(&service, event.payload).await
            };
            // Spans out before the environment is frozen (nothing when export is off).
            if ds_telemetry::enabled() {
                let _ = tokio::task::spawn_blocking(ds_telemetry::flush).await;
            }
            handled
        }
    }))
    .await
}
