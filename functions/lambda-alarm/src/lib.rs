//! The alarm function: target of the one-shot EventBridge Scheduler schedules
//! that `ds_store_aws`'s expiry scheduler creates. Its event is the
//! schedule's `Input`, an [`AlarmInput`]. The core's `run_expiry` decides:
//! delete the stream if it has expired, re-arm the alarm if a sliding TTL
//! moved the deadline, nothing if the stream is gone or was re-created
//! (another incarnation).

use ds_core::{ServiceConfig, StreamService};
use ds_store_aws::AlarmInput;

/// Handle one schedule invocation.
#[tracing::instrument(level = "info", skip(service, event))]
pub async fn handle(
    service: &StreamService,
    event: serde_json::Value,
) -> Result<serde_json::Value, lambda_runtime::Error> {
    let input: AlarmInput = serde_json::from_value(event).map_err(|e| format!("not an alarm input: {e}"))?;
    tracing::info!(path = %input.path, incarnation = %input.incarnation, at_ms = input.at_ms, "expiry alarm");
    service
        .run_expiry(&input.path, &input.incarnation)
        .await
        .map_err(|e| format!("expiry of {} failed: {e}", input.path))?;
    Ok(serde_json::json!({ "path": input.path, "incarnation": input.incarnation }))
}

/// The core over the AWS substrate, from the environment.
pub async fn service_from_env() -> anyhow::Result<StreamService> {
    let aws = ds_store_aws::AwsSubstrate::from_env().await?;
    // The registry setting must match the HTTP function's: expiry deletes
    // streams, and the registry learns of it in the same commit.
    let registry = ds_config::Settings::from_env().switch_or("DS_REGISTRY", ServiceConfig::default().registry)?;
    Ok(StreamService::new(aws.substrate(), ServiceConfig { registry, ..ServiceConfig::default() }))
}

/// JSON logs to stdout (CloudWatch), filter from `RUST_LOG`; span export
/// when the `OTEL_*` variables ask for it (keep the answer while the
/// process lives, and `ds_telemetry::flush` after each invocation).
pub fn init_logs() -> Result<Option<ds_telemetry::Telemetry>, ds_telemetry::TelemetryError> {
    ds_telemetry::init_lambda("durable-streams-alarm")
}
