//! Sending a wake: the signed webhook `POST` (§7.1) or the wake event
//! appended to the wake stream (§7.2), then recording how it went as a
//! transition (which also schedules a retry, or the next wake).

use std::sync::Arc;

use bytes::Bytes;
use ds_core::AppendRequest;

use crate::config::Kind;
use crate::engine::Subscriptions;
use crate::machine::{self, Delivery};
use crate::record::SubscriptionRecord;
use crate::{token, view};

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
            serde_json::to_vec(&body).map_err(|e| crate::SubscriptionError::Invalid(e.to_string()))
        };
        let body = match prepared.await {
            Ok(body) => body,
            Err(e) => {
                tracing::warn!(subscription = %rec.id, error = %e, "could not prepare a webhook notification");
                return Delivery::Failed;
            }
        };
        let signature = self.inner.keys.signature_header(self.clock().now_ms() / 1000, &body);
        let headers = [("content-type", "application/json"), ("webhook-signature", signature.as_str())];
        match self.inner.http.post(url, &headers, Bytes::from(body)).await {
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
