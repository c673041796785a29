//! Lambda entry point: substrate and clients once per process, then one
//! expiry check per EventBridge Scheduler invocation.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let _telemetry = lambda_alarm_fn::init_logs()?;
    let service = lambda_alarm_fn::service_from_env().await?;
    lambda_runtime::run(lambda_runtime::service_fn(move |event: lambda_runtime::LambdaEvent<serde_json::Value>| {
        let service = service.clone();
        async move {
            let handled = lambda_alarm_fn::handle(&service, event.payload).await;
            // Spans out before the environment is frozen (nothing when export is off).
            if ds_telemetry::enabled() {
                let _ = tokio::task::spawn_blocking(ds_telemetry::flush).await;
            }
            handled
        }
    }))
    .await
}
