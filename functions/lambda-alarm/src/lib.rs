//! The alarm function: target of the one-shot EventBridge Scheduler schedules
//! that `ds_store_aws`'s expiry scheduler creates. Its event is the
//! schedule's `Input`, an [`AlarmInput`]. The core's `run_expiry` decides:
//! delete the stream if it has expired, re-arm the alarm if a sliding TTL
//! moved the deadline, nothing if the stream is gone or was re-created
//! (another incarnation).
//!
//! It also applies the retention policies (`DS_RETENTION`, template
//! parameter `RetentionPolicies`): a rate schedule, created only when
//! policies are set, invokes it with [`RETENTION_EVENT`]; each invocation is
//! one `ds_core::RetentionRunner` pass (listing through the path index,
//! trims through `StreamService::trim`, whose AWS reclaim deletes the
//! chunk items and S3 objects below the new earliest offset). Here, not in
//! the HTTP function: a reclaim deletes up to thousands of items, and a
//! request's trim would pay for it.

use ds_core::retention::policy_syntax;
use ds_core::{RetentionPass, RetentionRunner, ServiceConfig, StreamService};
use ds_store_aws::AlarmInput;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

/// The retention schedule's input (template.yaml `RetentionSchedule`):
/// `{"retention": "pass"}`. Expiry alarms never carry the key.
pub const RETENTION_EVENT: &str = "retention";

/// The variable holding the policies (`;` between them), as the local
/// server's `DS_RETENTION`.
const RETENTION_VAR: &str = "DS_RETENTION";

/// Whether `event` asks for a retention pass rather than an expiry check.
pub fn is_retention_event(event: &serde_json::Value) -> bool {
    event.get(RETENTION_EVENT).is_some()
}

/// The runner of the policies in `DS_RETENTION`, `None` without any. Kept
/// for the life of the process: its `max-age` tail samples survive between
/// passes while the environment stays warm (a cold start forgets them,
/// which delays age trims, never makes them early).
pub fn retention_from_env(service: &StreamService) -> anyhow::Result<Option<Mutex<RetentionRunner>>> {
    retention_runner(service, &std::env::var(RETENTION_VAR).unwrap_or_default())
}

/// The runner of the policies in `text` (`DS_RETENTION`'s syntax), `None`
/// for none; a bad policy is refused with the field and the reason.
pub fn retention_runner(service: &StreamService, text: &str) -> anyhow::Result<Option<Mutex<RetentionRunner>>> {
    let policies = policy_syntax::parse_policies(RETENTION_VAR, text)?;
    if policies.is_empty() {
        return Ok(None);
    }
    tracing::info!(policies = policies.len(), "retention policies on");
    Ok(Some(Mutex::new(RetentionRunner::new(service.clone(), policies))))
}

/// Time a pass leaves before the invocation's deadline: the stream it is
/// on finishes (a trim and a bounded reclaim take a few seconds at most).
pub const RETENTION_MARGIN: Duration = Duration::from_secs(15);

/// One retention pass, stopped by `deadline` (the invocation's, less
/// [`RETENTION_MARGIN`]; see [`pass_deadline`]): the next pass resumes
/// where it stopped. Without policies (the schedule outlived a change of
/// `RetentionPolicies`, or an operator invoked it) nothing is done. Trims
/// that failed are logged and retried by the next pass, so the invocation
/// succeeds (a failed async invocation would be retried whole).
#[tracing::instrument(level = "info", skip(runner))]
pub async fn handle_retention(runner: Option<&Mutex<RetentionRunner>>, deadline: Option<Instant>) -> serde_json::Value {
    let Some(runner) = runner else {
        tracing::info!("retention event without policies: nothing to do");
        return serde_json::json!({ "retention": "off" });
    };
    let RetentionPass { streams, trimmed, failed, complete } = runner.lock().await.pass_until(deadline).await;
    tracing::info!(streams, trimmed, failed, complete, "retention pass");
    serde_json::json!({
        "retention": { "streams": streams, "trimmed": trimmed, "failed": failed, "complete": complete }
    })
}

/// The instant a pass must stop by, from the invocation's deadline (epoch
/// milliseconds, `lambda_runtime::Context::deadline`).
pub fn pass_deadline(invocation_deadline_ms: u64) -> Instant {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let left = Duration::from_millis(invocation_deadline_ms.saturating_sub(now_ms));
    Instant::now() + left.saturating_sub(RETENTION_MARGIN)
}

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
