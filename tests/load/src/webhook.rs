//! Subscription webhook latency (protocol §6-7): an append is acknowledged;
//! how long until the subscription's webhook notification reaches its
//! receiver? ds-load runs the receiver itself (hyper on 127.0.0.1, port 0),
//! subscribes it to one stream, and appends one event at a time: the clock
//! runs from the append's acknowledgement (and, for reference, from its
//! send) to the moment the receiver has read the whole `POST`. The receiver
//! answers `{"done": true}`, so the server auto-acks the wake and the next
//! append issues a new one; a settle between iterations lets that ack commit
//! before the next append, so each sample is one wake from idle.
//!
//! Every notification is checked: it names the subscription and exactly
//! the appended stream, its `tail_offset` is the offset the append returned
//! (`Stream-Next-Offset`) and its `acked_offset` the previous one (the
//! auto-ack of the previous wake moved the cursor), its generation is the
//! previous one plus one, it carries a callback URL and token, and its
//! `Webhook-Signature` header has a fresh `t`, a `kid` the server's JWKS
//! publishes and a 64-byte `ed25519` value (the signature itself is not
//! verified here: that is the subscription tests' job). A notification that
//! does not arrive within 10 s, or one more than the appends asked for,
//! fails the run.

use std::collections::HashSet;
use std::convert::Infallible;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, ensure, Context, Result};
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::time::timeout;

use crate::client::Client;
use crate::cpu::{process_cpu_secs, CpuMeter};
use crate::stats::percentile;

const JSON: &str = "application/json";
/// A notification slower than this is a failure.
const RECEIVE_LIMIT: Duration = Duration::from_secs(10);
/// The receiver's path.
const HOOK: &str = "/hook";

/// What the receiver got, and when it had all of it.
struct Received {
    at: Instant,
    method: String,
    path: String,
    content_type: Option<String>,
    signature: Option<String>,
    body: Bytes,
}

/// One run's samples (µs) and what was seen around them.
pub struct Latency {
    pub ack_to_received: Vec<f64>,
    pub send_to_received: Vec<f64>,
    pub ack: Vec<f64>,
    /// Notifications received before the append's acknowledgement reached the client.
    pub before_ack: usize,
    /// Other processes' CPU during the run (cores).
    pub others: Option<f64>,
    /// The server's CPU time per iteration (ms), if its PID was given.
    pub server_cpu_ms: Option<f64>,
}

/// Where and how long to measure.
pub struct Params {
    /// The stream appended to (created if absent).
    pub stream: String,
    /// The subscription's id (created; deleted at the end).
    pub subscription: String,
    pub iterations: usize,
    /// Pause before each append.
    pub settle: Duration,
    pub server_pid: Option<u32>,
}

/// Starts the receiver on 127.0.0.1 (port 0); returns its port and what it receives.
async fn start_receiver() -> Result<(u16, UnboundedReceiver<Received>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await.context("binding the webhook receiver")?;
    let port = listener.local_addr()?.port();
    let (tx, rx) = unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let tx = tx.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| receive(req, tx.clone()));
                // A server hanging up mid-request shows up as a missing notification.
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    Ok((port, rx))
}

async fn receive(
    req: Request<hyper::body::Incoming>,
    tx: UnboundedSender<Received>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (content_type, signature) = (header("content-type"), header("webhook-signature"));
    let (method, path) = (req.method().to_string(), req.uri().path().to_owned());
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let at = Instant::now();
    let _ = tx.send(Received { at, method, path, content_type, signature, body });
    let mut resp = Response::new(Full::new(Bytes::from_static(br#"{"done":true}"#)));
    resp.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static(JSON));
    Ok(resp)
}

/// Creates the stream and a webhook subscription to it, appends
/// `iterations` events one at a time and times each notification.
pub async fn run(client: &Client, p: &Params) -> Result<Latency> {
    let (port, mut inbox) = start_receiver().await?;
    let hook_url = format!("http://127.0.0.1:{port}{HOOK}");
    client.create(&p.stream, JSON, None).await?;
    let kids = jwks_kids(client).await?;
    let mut acked = subscribe(client, &p.subscription, &p.stream, &hook_url).await?;
    let mut check =
        Checker { subscription: p.subscription.clone(), stream: p.stream.clone(), kids, ..Default::default() };
    let mut out = Latency {
        ack_to_received: Vec::new(),
        send_to_received: Vec::new(),
        ack: Vec::new(),
        before_ack: 0,
        others: None,
        server_cpu_ms: None,
    };
    let meter = CpuMeter::start(&p.server_pid.into_iter().collect::<Vec<_>>());
    let cpu_start = p.server_pid.and_then(process_cpu_secs);
    for i in 0..p.iterations {
        tokio::time::sleep(p.settle).await;
        if let Ok(extra) = inbox.try_recv() {
            bail!("iteration {i}: a notification nobody asked for arrived: {}", String::from_utf8_lossy(&extra.body));
        }
        let body = Bytes::from(format!(r#"[{{"type":"bench/appended","payload":{{"i":{i}}}}}]"#));
        let sent = Instant::now();
        let offset = client.append(&p.stream, JSON, body).await?;
        let acked_at = Instant::now();
        let got = timeout(RECEIVE_LIMIT, inbox.recv())
            .await
            .map_err(|_| anyhow!("iteration {i}: no notification within {RECEIVE_LIMIT:?}"))?
            .ok_or_else(|| anyhow!("the webhook receiver stopped"))?;
        check.notification(&got, &acked, &offset).with_context(|| format!("iteration {i}"))?;
        out.before_ack += usize::from(got.at < acked_at);
        out.ack_to_received.push(got.at.saturating_duration_since(acked_at).as_secs_f64() * 1e6);
        out.send_to_received.push(got.at.duration_since(sent).as_secs_f64() * 1e6);
        out.ack.push(acked_at.duration_since(sent).as_secs_f64() * 1e6);
        acked = offset;
    }
    out.others = meter.others_cores();
    if let (Some(pid), Some(start)) = (p.server_pid, cpu_start) {
        out.server_cpu_ms = process_cpu_secs(pid).map(|end| (end - start) * 1e3 / p.iterations.max(1) as f64);
    }
    finish(client, p, &mut inbox, &acked).await?;
    Ok(out)
}

/// The `kid`s the server's JWKS publishes.
async fn jwks_kids(client: &Client) -> Result<HashSet<String>> {
    let resp = client.http.get(client.target.url("__ds/jwks.json")).send().await.context("GET jwks.json")?;
    ensure!(resp.status() == StatusCode::OK, "GET jwks.json: HTTP {}", resp.status());
    let jwks = json_body(resp).await.context("jwks.json is not JSON")?;
    let kids: HashSet<String> = jwks["keys"]
        .as_array()
        .map(|keys| keys.iter().filter_map(|k| k["kid"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    ensure!(!kids.is_empty(), "jwks.json publishes no key: {jwks}");
    Ok(kids)
}

async fn json_body(resp: reqwest::Response) -> Result<Value> {
    Ok(serde_json::from_slice(&resp.bytes().await?)?)
}

fn subscription_url(client: &Client, id: &str) -> String {
    client.target.url(&format!("__ds/subscriptions/{id}"))
}

/// Creates the webhook subscription (201); returns the stream's
/// `acked_offset` (its tail when linked).
async fn subscribe(client: &Client, id: &str, stream: &str, hook_url: &str) -> Result<String> {
    let config = json!({
        "type": "webhook",
        "streams": [stream],
        "webhook": { "url": hook_url },
        "description": "ds-load webhook-latency",
    });
    let resp = client
        .http
        .put(subscription_url(client, id))
        .header("content-type", JSON)
        .body(config.to_string())
        .send()
        .await
        .context("PUT subscription")?;
    let status = resp.status();
    let body = json_body(resp).await.unwrap_or(Value::Null);
    ensure!(status == StatusCode::CREATED, "PUT subscription {id}: HTTP {status} (expected 201): {body}");
    body["streams"]
        .as_array()
        .and_then(|s| s.iter().find(|l| l["path"] == stream))
        .and_then(|l| l["acked_offset"].as_str())
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("PUT subscription {id}: the answer does not link {stream}: {body}"))
}

/// After the last iteration: the auto-ack of the last wake moved the
/// cursor to the last offset, no further notification comes, and the
/// subscription is deleted (a run leaves nothing that wakes anyone).
async fn finish(client: &Client, p: &Params, inbox: &mut UnboundedReceiver<Received>, last: &str) -> Result<()> {
    let url = subscription_url(client, &p.subscription);
    let mut seen = Value::Null;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        seen = json_body(client.http.get(&url).send().await?).await.unwrap_or(Value::Null);
        let link = seen["streams"].as_array().and_then(|s| s.iter().find(|l| l["path"] == p.stream.as_str()));
        if link.is_some_and(|l| l["acked_offset"] == last) {
            if let Ok(extra) = inbox.try_recv() {
                bail!("a notification after the last append: {}", String::from_utf8_lossy(&extra.body));
            }
            let resp = client.http.delete(&url).send().await.context("DELETE subscription")?;
            ensure!(resp.status() == StatusCode::NO_CONTENT, "DELETE subscription: HTTP {}", resp.status());
            return Ok(());
        }
    }
    bail!("the last wake's {{\"done\": true}} did not ack {last} within 2 s: {seen}")
}

/// Checks each notification against what was appended.
#[derive(Default)]
struct Checker {
    subscription: String,
    stream: String,
    kids: HashSet<String>,
    generation: Option<u64>,
    wake_ids: HashSet<String>,
}

impl Checker {
    fn notification(&mut self, got: &Received, acked: &str, tail: &str) -> Result<()> {
        ensure!(got.method == "POST" && got.path == HOOK, "the receiver got {} {}", got.method, got.path);
        ensure!(
            got.content_type.as_deref().is_some_and(|c| c.starts_with(JSON)),
            "notification content type {:?}",
            got.content_type
        );
        self.signature(got.signature.as_deref())?;
        let n: Value = serde_json::from_slice(&got.body).context("the notification is not JSON")?;
        let fail = |what: &str| anyhow!("{what}: {n}");
        if n["subscription_id"] != self.subscription.as_str() {
            return Err(fail("the notification names another subscription"));
        }
        let generation = n["generation"].as_u64().ok_or_else(|| fail("no generation"))?;
        if let Some(previous) = self.generation {
            ensure!(generation == previous + 1, "generation {generation} after {previous} (one wake per append)");
        }
        self.generation = Some(generation);
        let wake_id = n["wake_id"].as_str().filter(|w| !w.is_empty()).ok_or_else(|| fail("no wake_id"))?;
        ensure!(self.wake_ids.insert(wake_id.to_owned()), "wake_id {wake_id} seen before");
        let callback = format!("/__ds/subscriptions/{}/callback", self.subscription);
        if !n["callback_url"].as_str().is_some_and(|u| u.ends_with(&callback)) {
            return Err(fail("no callback_url for this subscription"));
        }
        if n["callback_token"].as_str().is_none_or(str::is_empty) {
            return Err(fail("no callback_token"));
        }
        let streams = n["streams"].as_array().ok_or_else(|| fail("no streams"))?;
        let [s] = streams.as_slice() else { return Err(fail("not exactly one stream")) };
        if s["path"] != self.stream.as_str() {
            return Err(fail("the notification names another stream"));
        }
        if s["tail_offset"] != tail {
            return Err(fail(&format!("tail_offset is not the append's Stream-Next-Offset {tail}")));
        }
        if s["acked_offset"] != acked {
            return Err(fail(&format!("acked_offset is not the previous wake's tail {acked}")));
        }
        if s["has_pending"] != true || s["link_type"] != "explicit" {
            return Err(fail("has_pending is not true or link_type is not explicit"));
        }
        Ok(())
    }

    /// `t=<unix seconds>,kid=<kid>,ed25519=<base64url>` (§7.1).
    fn signature(&self, header: Option<&str>) -> Result<()> {
        let header = header.ok_or_else(|| anyhow!("no Webhook-Signature header"))?;
        let field = |name: &str| {
            header.split(',').find_map(|kv| kv.trim().strip_prefix(name).and_then(|v| v.strip_prefix('=')))
        };
        let t: i64 =
            field("t").and_then(|t| t.parse().ok()).ok_or_else(|| anyhow!("Webhook-Signature {header:?}: no t"))?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() as i64;
        ensure!((t - now).abs() <= 300, "Webhook-Signature t={t} is not within 5 minutes of now ({now})");
        let kid = field("kid").ok_or_else(|| anyhow!("Webhook-Signature {header:?}: no kid"))?;
        ensure!(self.kids.contains(kid), "Webhook-Signature kid {kid} is not in the JWKS");
        let sig = field("ed25519").ok_or_else(|| anyhow!("Webhook-Signature {header:?}: no ed25519"))?;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(sig)
            .map_err(|e| anyhow!("Webhook-Signature ed25519 is not unpadded base64url: {e}"))?;
        ensure!(bytes.len() == 64, "Webhook-Signature ed25519 is {} bytes, not 64", bytes.len());
        Ok(())
    }
}

impl Latency {
    /// The report's table and the notes under it.
    pub fn markdown(&self) -> String {
        let ms = |v: &[f64], p: f64| percentile(v, p) / 1e3;
        let row = |name: &str, v: &[f64]| {
            format!(
                "| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {} |\n",
                ms(v, 50.0),
                ms(v, 90.0),
                ms(v, 99.0),
                ms(v, 100.0),
                v.len()
            )
        };
        let mut s = String::from(
            "| latency | p50 (ms) | p90 (ms) | p99 (ms) | max (ms) | samples |\n|---|---|---|---|---|---|\n",
        );
        s.push_str(&row("append acknowledged → webhook received", &self.ack_to_received));
        s.push_str(&row("append sent → webhook received", &self.send_to_received));
        s.push_str(&row("append sent → acknowledged (for reference)", &self.ack));
        s.push_str(&format!(
            "\nIterations: {}. Notifications received before the append's acknowledgement reached the client (counted as 0 ms above): {}. Server CPU per iteration: {} ms. Other processes' CPU during the run: {} cores.\n",
            self.ack_to_received.len(),
            self.before_ack,
            self.server_cpu_ms.map_or("?".into(), |c| format!("{c:.2}")),
            self.others.map_or("?".into(), |o| format!("{o:.2}"))
        ));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAIL: &str = "0000000000000000_0000000000000042";
    const ACKED: &str = "0000000000000000_0000000000000021";

    /// A change that makes a good notification wrong.
    type Edit = fn(&mut Value);

    fn checker() -> Checker {
        Checker {
            subscription: "sub-1".into(),
            stream: "bench/s".into(),
            kids: ["ds_k1".to_string()].into(),
            generation: Some(6),
            ..Default::default()
        }
    }

    fn signature() -> String {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs();
        let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([7u8; 64]);
        format!("t={now},kid=ds_k1,ed25519={sig}")
    }

    fn notification(edit: impl FnOnce(&mut Value)) -> Received {
        let mut body = json!({
            "subscription_id": "sub-1",
            "wake_id": "w_1",
            "generation": 7,
            "streams": [{ "path": "bench/s", "link_type": "explicit", "acked_offset": ACKED,
                          "tail_offset": TAIL, "has_pending": true }],
            "callback_url": "http://127.0.0.1:1/v1/stream/__ds/subscriptions/sub-1/callback",
            "callback_token": "tok",
        });
        edit(&mut body);
        Received {
            at: Instant::now(),
            method: "POST".into(),
            path: HOOK.into(),
            content_type: Some(JSON.into()),
            signature: Some(signature()),
            body: Bytes::from(body.to_string()),
        }
    }

    #[test]
    fn a_notification_of_the_append_passes() {
        checker().notification(&notification(|_| {}), ACKED, TAIL).expect("a good notification");
    }

    #[test]
    fn a_notification_that_does_not_match_the_append_fails() {
        let wrong: [(&str, Edit); 7] = [
            ("subscription", |n| n["subscription_id"] = json!("other")),
            ("stream", |n| n["streams"][0]["path"] = json!("bench/t")),
            ("tail", |n| n["streams"][0]["tail_offset"] = json!(ACKED)),
            ("acked", |n| n["streams"][0]["acked_offset"] = json!(TAIL)),
            ("generation", |n| n["generation"] = json!(8)),
            ("streams", |n| n["streams"] = json!([])),
            ("token", |n| n["callback_token"] = json!("")),
        ];
        for (what, edit) in wrong {
            assert!(checker().notification(&notification(edit), ACKED, TAIL).is_err(), "wrong {what} passed");
        }
    }

    #[test]
    fn a_wake_id_seen_before_fails() {
        let mut c = checker();
        c.notification(&notification(|_| {}), ACKED, TAIL).expect("a good notification");
        let again = notification(|n| n["generation"] = json!(8));
        assert!(c.notification(&again, ACKED, TAIL).is_err());
    }

    #[test]
    fn the_signature_header_must_be_present_fresh_and_from_the_jwks() {
        let c = checker();
        c.signature(Some(&signature())).expect("a good signature header");
        assert!(c.signature(None).is_err());
        assert!(c.signature(Some(&signature().replace("ds_k1", "ds_k2"))).is_err());
        assert!(c.signature(Some(&format!("t=1,kid=ds_k1,ed25519={}", "A".repeat(86)))).is_err());
        let good = signature();
        let (head, _) = good.split_once(",ed25519=").expect("ed25519 field");
        let short = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([7u8; 32]);
        assert!(c.signature(Some(&format!("{head},ed25519={short}"))).is_err());
        assert!(c.signature(Some(&format!("{head},ed25519=not+base64url/"))).is_err());
        assert!(c.signature(Some(head)).is_err());
    }
}
