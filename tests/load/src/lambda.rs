//! Lambda init time: a built `bootstrap` started under a stand-in for the
//! Lambda Runtime API on 127.0.0.1, timed from process spawn to its first
//! `GET /runtime/invocation/next` (ready for the first event, the span
//! Lambda bills as Init for a custom runtime, minus the sandbox's own start).
//! Each start is then handed one event and its response is checked, so the
//! figure belongs to a bootstrap that works (the AWS calls it makes go to
//! whatever `AWS_ENDPOINT_URL` the environment names, e.g. the emulator).

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// What one start of the function is given and reports.
#[derive(Default)]
struct RunState {
    ready: Option<oneshot::Sender<Instant>>,
    event: Option<String>,
    result: Option<oneshot::Sender<Result<Bytes, String>>>,
}

type Shared = Arc<Mutex<RunState>>;

fn take<T>(state: &Shared, f: impl FnOnce(&mut RunState) -> Option<T>) -> Option<T> {
    state.lock().ok().and_then(|mut s| f(&mut s))
}

async fn runtime_api(state: Shared, req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_owned();
    let ok = |body: Bytes| Response::new(Full::new(body));
    if req.method() == Method::GET && path.ends_with("/runtime/invocation/next") {
        if let Some(tx) = take(&state, |s| s.ready.take()) {
            let _ = tx.send(Instant::now());
        }
        let Some(event) = take(&state, |s| s.event.take()) else {
            // One event per start: later polls wait until the process is stopped.
            futures::future::pending::<()>().await;
            unreachable!()
        };
        let deadline =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis() + 30_000;
        let mut resp = ok(Bytes::from(event));
        let h = resp.headers_mut();
        h.insert("lambda-runtime-aws-request-id", "init-probe-1".parse().expect("header"));
        h.insert("lambda-runtime-deadline-ms", deadline.to_string().parse().expect("header"));
        h.insert(
            "lambda-runtime-invoked-function-arn",
            "arn:aws:lambda:us-east-1:000000000000:function:init-probe".parse().expect("header"),
        );
        h.insert(
            "lambda-runtime-trace-id",
            "Root=1-65a1b2c3-0123456789abcdef01234567;Sampled=0".parse().expect("header"),
        );
        h.insert("content-type", "application/json".parse().expect("header"));
        return Ok(resp);
    }
    let is_error = path.ends_with("/error");
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    if let Some(tx) = take(&state, |s| s.result.take()) {
        let r = if is_error { Err(String::from_utf8_lossy(&body).into_owned()) } else { Ok(body) };
        let _ = tx.send(r);
    }
    let mut resp = ok(Bytes::from_static(b"{}"));
    *resp.status_mut() = StatusCode::ACCEPTED;
    Ok(resp)
}

/// Which event the function gets and how its answer is judged.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Probe {
    /// lambda-http: a Function URL PUT creating a stream; must answer 201.
    Http,
    /// lambda-alarm: an expiry alarm for a stream that does not exist; must
    /// succeed (nothing to delete).
    Alarm,
    /// lambda-processor: a DynamoDB Stream batch of one chunk insert (a
    /// doorbell) of a stream that does not exist; must answer with no
    /// batch item failures.
    Processor,
}

impl Probe {
    fn event(self, i: usize) -> String {
        let path = format!("init-probe/{}-{i}", std::process::id());
        match self {
            Probe::Http => serde_json::json!({
                "version": "2.0", "routeKey": "$default",
                "rawPath": format!("/v1/stream/{path}"), "rawQueryString": "",
                "headers": { "content-type": "text/plain", "host": "probe.lambda-url.us-east-1.on.aws" },
                "requestContext": {
                    "accountId": "anonymous", "apiId": "probe", "domainName": "probe.lambda-url.us-east-1.on.aws",
                    "domainPrefix": "probe",
                    "http": { "method": "PUT", "path": format!("/v1/stream/{path}"), "protocol": "HTTP/1.1",
                              "sourceIp": "127.0.0.1", "userAgent": "ds-load" },
                    "requestId": "init-probe", "routeKey": "$default", "stage": "$default",
                    "time": "01/Dec/2026:00:00:00 +0000", "timeEpoch": 1796083200000u64
                },
                "body": "hello", "isBase64Encoded": false
            })
            .to_string(),
            Probe::Alarm => serde_json::json!({ "path": path, "incarnation": "none", "at_ms": 0 }).to_string(),
            Probe::Processor => serde_json::json!({ "Records": [{
                "eventID": "1", "eventName": "INSERT", "eventVersion": "1.1", "eventSource": "aws:dynamodb",
                "awsRegion": "us-east-1",
                "eventSourceARN": "arn:aws:dynamodb:us-east-1:000000000000:table/durable-streams/stream/probe",
                "dynamodb": {
                    // The store's key layout: pk `stream#<path>`, chunk sk
                    // `c#<incarnation>#<end as 16 hex digits>`.
                    "Keys": { "pk": { "S": format!("stream#{path}") }, "sk": { "S": "c#none#0000000000000005" } },
                    "NewImage": { "start": { "N": "0" }, "data": { "B": "aGVsbG8=" } },
                    "SequenceNumber": format!("{}", i + 1), "StreamViewType": "NEW_AND_OLD_IMAGES"
                }
            }]})
            .to_string(),
        }
    }

    fn check(self, body: &[u8]) -> Result<()> {
        match self {
            Probe::Http => {
                // Streaming response: JSON prelude, 8 NUL bytes, then the body.
                let end = body.windows(8).position(|w| w == [0u8; 8]).ok_or_else(|| anyhow!("no streaming prelude"))?;
                let prelude: serde_json::Value = serde_json::from_slice(&body[..end]).context("prelude")?;
                if prelude["statusCode"] != 201 {
                    bail!(
                        "PUT answered {} (expected 201): {}",
                        prelude["statusCode"],
                        String::from_utf8_lossy(&body[end + 8..])
                    );
                }
                Ok(())
            }
            Probe::Alarm => Ok(()),
            Probe::Processor => {
                let answer: serde_json::Value = serde_json::from_slice(body).context("batch response")?;
                match answer["batchItemFailures"].as_array() {
                    Some(failures) if failures.is_empty() => Ok(()),
                    _ => bail!("the batch answered {answer} (expected no batchItemFailures)"),
                }
            }
        }
    }
}

/// Init times (ms) of `runs` starts of `bootstrap`.
pub async fn init_times(bootstrap: &Path, probe: Probe, runs: usize, log: &Path) -> Result<Vec<f64>> {
    let state: Shared = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let api = listener.local_addr()?;
    let server_state = state.clone();
    let server = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { break };
            let st = server_state.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| runtime_api(st.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    let mut times = Vec::new();
    for i in 0..runs.max(1) {
        let (ready_tx, ready_rx) = oneshot::channel();
        let (result_tx, result_rx) = oneshot::channel();
        if let Ok(mut s) = state.lock() {
            *s = RunState { ready: Some(ready_tx), event: Some(probe.event(i)), result: Some(result_tx) };
        }
        let out = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
        let err = out.try_clone()?;
        let t0 = Instant::now();
        let mut child = tokio::process::Command::new(bootstrap)
            .env("AWS_LAMBDA_RUNTIME_API", api.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", "init-probe")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "init-probe")
            .env("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/init-probe")
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bootstrap.display()))?;
        let outcome = async {
            let ready = tokio::time::timeout(Duration::from_secs(30), ready_rx)
                .await
                .map_err(|_| anyhow!("not ready for an event within 30 s (log {})", log.display()))??;
            let result = tokio::time::timeout(Duration::from_secs(30), result_rx)
                .await
                .map_err(|_| anyhow!("no answer to the event within 30 s (log {})", log.display()))??;
            let body = result.map_err(|e| anyhow!("the function reported an error: {e}"))?;
            probe.check(&body)?;
            anyhow::Ok(ready.duration_since(t0).as_secs_f64() * 1e3)
        }
        .await;
        let _ = child.start_kill();
        let _ = child.wait().await;
        times.push(outcome?);
    }
    server.abort();
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_processor_probe_accepts_only_a_batch_without_failures() {
        assert!(Probe::Processor.check(br#"{"batchItemFailures":[]}"#).is_ok());
        assert!(Probe::Processor.check(br#"{"batchItemFailures":[{"itemIdentifier":"1"}]}"#).is_err());
        assert!(Probe::Processor.check(br#"{}"#).is_err());
        let event: serde_json::Value = serde_json::from_str(&Probe::Processor.event(3)).expect("json");
        assert_eq!(event["Records"][0]["eventSource"], "aws:dynamodb");
        assert_eq!(event["Records"][0]["dynamodb"]["SequenceNumber"], "4");
    }
}
