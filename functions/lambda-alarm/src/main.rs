//! Lambda entry point: substrate and clients once per process, then one
//! expiry check per EventBridge Scheduler invocation.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_alarm_fn::init_logs();
    let service = lambda_alarm_fn::service_from_env().await?;
    lambda_runtime::run(lambda_runtime::service_fn(move |event: lambda_runtime::LambdaEvent<serde_json::Value>| {
        let service = service.clone();
        async move { lambda_alarm_fn::handle(&service, event.payload).await }
    }))
    .await
}
