//! Sending a wake: the signed webhook `POST` (§7.1) or the wake event
//! appended to the wake stream (§7.2), then recording how it went as a
//! transition (which also schedules a retry, or the next wake).

use std::sync::Arc;

use bytes::Bytes;
use ds_core::AppendRequest;
use tracing::Instrument;

use crate::config::Kind;
use crate::engine::Subscriptions;
use crate::machine::{self, Delivery};
use crate::record::{SubscriptionRecord, Tails, Wake};
use crate::{token, view};

/// Streams of one wake whose trace ring a delivery reads, at most (export on only).
const TRACE_LOOKUPS: usize = 4;

/// Removes a wake id from the in-flight set when its delivery ends.
struct Sending<'a>(&'a Subscriptions, String);

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        self.0.inner.delivering.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&self.1);
    }
}

impl Subscriptions {
    /// Deliver `rec`'s wake if it is issued and not yet delivered (and no
    /// other task is delivering it), then record the outcome.
    pub(crate) async fn deliver_if_due(&self, rec: Arc<SubscriptionRecord>) {
        let Some(wake) = rec.wake.as_ref().filter(|w| !w.delivered) else { return };
        let wake_id = wake.wake_id.clone();
        let fresh =
            self.inner.delivering.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(wake_id.clone());
        if !fresh {
            return;
        }
        let _sending = Sending(self, wake_id.clone());
        if !self.still_undelivered(&rec.id, &wake_id) {
            return;
        }
        let outcome = match rec.kind() {
            Kind::Webhook => self.post_webhook(&rec).await,
            Kind::PullWake => self.append_wake_event(&rec).await,
        };
        let recorded = self
            .transition(&rec.id, |r, tails, now, e| Ok(machine::delivered(r, &wake_id, outcome, tails, now, e)))
            .await;
        drop(_sending);
        match recorded {
            // A wake issued by the outcome (work arrived meanwhile, or `done`
            // left some) is delivered by the run the scheduler was asked for.
            Ok(_) | Err(crate::SubscriptionError::NotFound) => {}
            Err(e) => {
                // Nothing else arms it while it was being sent (`arm`): look
                // again shortly, to record or send it again.
                tracing::warn!(subscription = %rec.id, error = %e, "could not record a delivery");
                self.inner.scheduler.wake_at(&rec.id, self.clock().now_ms() + 1000).await;
            }
        }
    }

    async fn post_webhook(&self, rec: &SubscriptionRecord) -> Delivery {
        let (Some(url), Some(wake)) = (rec.config.webhook_url.as_deref(), rec.wake.as_ref()) else {
            return Delivery::Failed;
        };
        let prepared = async {
            let tails = self.read_tails(wake.streams.iter().map(|(p, _)| p)).await?;
            let token = token::mint(rec, wake.generation, &wake.wake_id)?;
            let body = view::notification(rec, &tails, &token).unwrap_or_default();
            let body = serde_json::to_vec(&body).map_err(|e| crate::SubscriptionError::Invalid(e.to_string()))?;
            Ok::<_, crate::SubscriptionError>((body, tails))
        };
        let (body, tails) = match prepared.await {
            Ok(prepared) => prepared,
            Err(e) => {
                tracing::warn!(subscription = %rec.id, error = %e, "could not prepare a webhook notification");
                return Delivery::Failed;
            }
        };
        let span = webhook_span(url);
        if ds_telemetry::enabled() {
            if let Some(parent) = self.wake_trace(rec, wake, &tails).await {
                ds_telemetry::continue_from(&span, &parent);
            }
        }
        self.send_webhook(rec, wake, url, body).instrument(span).await
    }

    /// The trace context of the newest traced append this wake announces
    /// (the first of its streams that has one, looking at no more than
    /// [`TRACE_LOOKUPS`] of them: one record read each), if any.
    async fn wake_trace(&self, rec: &SubscriptionRecord, wake: &Wake, tails: &Tails) -> Option<String> {
        for (path, through) in wake.streams.iter().take(TRACE_LOOKUPS) {
            let Some(Some(tail)) = tails.get(path) else { continue };
            let after = rec.links.get(path).map_or(0, |link| link.acked_for(&tail.incarnation));
            match self.inner.service.latest_trace_context(path, &tail.incarnation, after, *through).await {
                Ok(Some(context)) => return Some(context),
                Ok(None) => {}
                Err(e) => tracing::debug!(subscription = %rec.id, error = %e, "trace ring not read"),
            }
        }
        None
    }

    async fn send_webhook(&self, rec: &SubscriptionRecord, wake: &Wake, url: &str, body: Vec<u8>) -> Delivery {
        let signature = self.inner.keys.signature_header(self.clock().now_ms() / 1000, &body);
        // The delivery span's context, when exported: the receiver continues the trace.
        let traceparent = ds_telemetry::current_traceparent();
        let mut headers = vec![("content-type", "application/json"), ("webhook-signature", signature.as_str())];
        if let Some(traceparent) = &traceparent {
            headers.push((ds_telemetry::TRACEPARENT, traceparent.as_str()));
        }
        let outcome = self.inner.http.post(url, &headers, Bytes::from(body)).await;
        if ds_telemetry::enabled() {
            let span = tracing::Span::current();
            match &outcome {
                Ok((status, _)) => {
                    span.record("http.response.status_code", status);
                    if *status >= 400 {
                        span.record("otel.status_code", "ERROR");
                    }
                }
                Err(_) => {
                    span.record("error.type", "unreachable");
                    span.record("otel.status_code", "ERROR");
                }
            }
        }
        match outcome {
            Ok((status, reply)) if (200..300).contains(&status) => {
                let done = serde_json::from_slice::<serde_json::Value>(&reply)
                    .ok()
                    .and_then(|v| v.get("done").and_then(serde_json::Value::as_bool))
                    .unwrap_or(false);
                tracing::debug!(subscription = %rec.id, generation = wake.generation, status, done, "webhook delivered");
                if done {
                    Delivery::Done
                } else {
                    Delivery::Accepted
                }
            }
            Ok((status, _)) => {
                tracing::info!(subscription = %rec.id, generation = wake.generation, status, "webhook refused the wake");
                Delivery::Failed
            }
            Err(e) => {
                tracing::info!(subscription = %rec.id, generation = wake.generation, error = %e, "webhook not reached");
                Delivery::Failed
            }
        }
    }

    async fn append_wake_event(&self, rec: &SubscriptionRecord) -> Delivery {
        let (Some(path), Some(event)) = (rec.config.wake_stream.as_ref(), view::wake_event(rec, self.clock().now_ms()))
        else {
            return Delivery::Failed;
        };
        let request = AppendRequest {
            path: path.as_str().into(),
            content_type: Some("application/json".into()),
            close: false,
            seq: None,
            producer: None,
            body: Bytes::from(event.to_string()),
            dedupe_key: None,
            incarnation: None,
            expect_tail: None,
            trace_context: None,
        };
        match self.inner.service.append(request).await {
            Ok(_) => Delivery::Accepted,
            Err(e) => {
                tracing::info!(subscription = %rec.id, wake_stream = %path, error = %e, "wake event not appended");
                Delivery::Failed
            }
        }
    }
}

/// The client span of one webhook `POST` (OpenTelemetry HTTP client
/// conventions). Only the scheme, host and port of the URL: its path and
/// query are the subscriber's and may hold a secret.
fn webhook_span(url: &str) -> tracing::Span {
    let parsed = url::Url::parse(url).ok();
    let host = parsed.as_ref().and_then(|u| u.host_str().map(str::to_owned)).unwrap_or_default();
    let port = parsed.as_ref().and_then(url::Url::port_or_known_default);
    let scheme = parsed.as_ref().map(|u| u.scheme().to_owned()).unwrap_or_default();
    tracing::debug_span!(
        "webhook",
        otel.name = "POST",
        otel.kind = "client",
        http.request.method = "POST",
        server.address = host,
        server.port = port,
        url.scheme = scheme,
        http.response.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}
