//! `lambda-pump`: what Lambda's event source mappings and EventBridge
//! Scheduler do for the processor function, played against the AWS
//! emulator (moto runs no mappings and fires no schedules) while the
//! function itself runs as a real binary behind a Lambda runtime emulator
//! (`cargo lambda watch`), invoked over its Invoke API. The pumps are
//! this crate's library's (the table's stream filtered by
//! template.yaml's `FilterCriteria`, `ReportBatchItemFailures` semantics;
//! the task queue, whose delayed messages carry subscriptions' times; due
//! revival schedules). Runs until killed.
//!
//!   lambda-pump <invoke-url>
//!
//! `<invoke-url>`: `http://127.0.0.1:PORT/2015-03-31/functions/NAME/invocations`
//! (loopback only). Environment: the emulator's `AWS_ENDPOINT_URL` and
//! credentials, `DS_AWS_TABLE`, `DS_PROCESSOR_TASK_QUEUE_URL`,
//! `DS_PROCESSOR_SCHEDULE_GROUP`; `DS_PROCESSOR_FAILED_INVOCATIONS_QUEUE_URL`
//! (optional: schedules are then invoked as Lambda's asynchronous
//! invocation, failures ending there with the template's retry count);
//! `DS_PUMP_INTERVAL_MS` (default 100).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use ds_lambda_pump::{template, AsyncInvoke, Invoke, SchedulePump, SqsPump, StreamPump};
use serde_json::Value;

/// The function behind a runtime emulator's Invoke API.
struct Remote {
    http: reqwest::Client,
    url: String,
}

#[async_trait::async_trait]
impl Invoke for Remote {
    async fn invoke(&self, payload: Value, _deadline_ms: u64) -> Result<Value, String> {
        let resp = self.http.post(&self.url).body(payload.to_string()).send().await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let function_error = resp.headers().contains_key("x-amz-function-error");
        let text = resp.text().await.map_err(|e| e.to_string())?;
        let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if !status.is_success() || function_error || answer.get("errorType").is_some() {
            return Err(format!("invocation failed ({status}): {text}"));
        }
        Ok(answer)
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn var(name: &str) -> anyhow::Result<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty()).with_context(|| format!("{name} is not set"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::args().nth(1).context("usage: lambda-pump <invoke-url>")?;
    let parsed = reqwest::Url::parse(&url).context("the invoke URL")?;
    if !matches!(parsed.host_str(), Some("127.0.0.1" | "localhost")) {
        bail!("the invoke URL must be on loopback: {url}");
    }
    let interval = Duration::from_millis(var("DS_PUMP_INTERVAL_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(100));
    let conf = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
    let function = Remote { http: reqwest::Client::new(), url };
    let mut stream = StreamPump::for_table(&conf, &var("DS_AWS_TABLE")?).await;
    let tasks = SqsPump::new(aws_sdk_sqs::Client::new(&conf), &var("DS_PROCESSOR_TASK_QUEUE_URL")?);
    let mut schedules = SchedulePump::for_group(&conf, &var("DS_PROCESSOR_SCHEDULE_GROUP")?);
    if let Ok(on_failure_url) = var("DS_PROCESSOR_FAILED_INVOCATIONS_QUEUE_URL") {
        schedules = schedules.asynchronous(AsyncInvoke {
            function_arn: var("DS_PROCESSOR_FUNCTION_ARN")?,
            maximum_retry_attempts: template::async_retry_attempts("ProcessorFunction"),
            on_failure_url,
            sqs: aws_sdk_sqs::Client::new(&conf),
        });
    }
    eprintln!("lambda-pump: pumping into {}", function.url);
    let (mut records, mut messages, mut failed) = (0usize, 0usize, 0usize);
    let (mut fired_at, mut reported_at) = (std::time::Instant::now(), std::time::Instant::now());
    loop {
        // Deadlines are the function's own (the runtime emulator's).
        let deadline = now_ms() + 60_000;
        let d = stream.deliver_all(&function, deadline, 50).await;
        records += d.delivered;
        failed += d.failed.len();
        let t = tasks.deliver_all(&function, deadline, 50).await;
        messages += t.delivered;
        failed += t.failed;
        if fired_at.elapsed() >= Duration::from_secs(1) {
            fired_at = std::time::Instant::now();
            let now = i64::try_from(now_ms()).unwrap_or(i64::MAX);
            schedules.fire_due(&function, now, deadline).await;
        }
        if reported_at.elapsed() >= Duration::from_secs(30) {
            reported_at = std::time::Instant::now();
            eprintln!("lambda-pump: {records} stream records, {messages} queue messages delivered, {failed} failed");
        }
        tokio::time::sleep(interval).await;
    }
}
