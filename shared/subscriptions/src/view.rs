//! The JSON the protocol serves: a subscription (§6.3), the stream entries
//! of a wake (§7.1, §7.2), a webhook notification. Never the token key.

use ds_protocol::headers::format_rfc3339_ms;
use ds_protocol::Offset;
use serde_json::{json, Value};

use crate::config::Kind;
use crate::record::{SubscriptionRecord, Tails};

/// `{base}/v1/stream/__ds/jwks.json`.
pub fn jwks_url(base_url: &str) -> String {
    format!("{base_url}/v1/stream/__ds/jwks.json")
}

/// `{base}/v1/stream/__ds/subscriptions/{id}/callback`.
pub fn callback_url(base_url: &str, id: &str) -> String {
    format!("{base_url}/v1/stream/__ds/subscriptions/{id}/callback")
}

/// A subscription as `GET` (and `PUT`) answer it; `base_url` is the base
/// the request came through, `kid` the active signing key.
pub fn subscription(rec: &SubscriptionRecord, tails: &Tails, base_url: &str, kid: &str) -> Value {
    let streams: Vec<Value> = rec
        .links
        .iter()
        .map(|(path, link)| {
            let acked = match tails.get(path).and_then(Option::as_ref) {
                Some(t) => link.acked_for(&t.incarnation),
                None => link.acked,
            };
            json!({ "path": path, "link_type": link.link_type(), "acked_offset": Offset(acked).to_string() })
        })
        .collect();
    let c = &rec.config;
    let webhook = c
        .webhook_url
        .as_ref()
        .map(|url| json!({ "url": url, "signing": { "alg": "ed25519", "kid": kid, "jwks_url": jwks_url(base_url) } }));
    json!({
        "id": rec.id,
        "subscription_id": rec.id,
        "type": c.kind.as_str(),
        "pattern": c.pattern,
        "streams": streams,
        "webhook": webhook,
        "wake_stream": c.wake_stream,
        "lease_ttl_ms": c.lease_ttl_ms,
        "created_at": format_rfc3339_ms(rec.created_at_ms),
        "status": rec.status(),
        "description": c.description,
        "generation": rec.generation,
    })
}

/// The entries of a wake: each `(path, tail)` with its link type and cursor.
pub fn wake_streams(rec: &SubscriptionRecord, tails: &Tails, streams: &[(String, u64)]) -> Vec<Value> {
    streams
        .iter()
        .filter_map(|(path, tail)| {
            let link = rec.links.get(path)?;
            let acked = match tails.get(path).and_then(Option::as_ref) {
                Some(t) => link.acked_for(&t.incarnation),
                None => link.acked,
            };
            Some(json!({
                "path": path,
                "link_type": link.link_type(),
                "acked_offset": Offset(acked).to_string(),
                "tail_offset": Offset(*tail).to_string(),
                "has_pending": *tail > acked,
            }))
        })
        .collect()
}

/// The webhook notification body of `rec`'s current wake (§7.1).
pub fn notification(rec: &SubscriptionRecord, tails: &Tails, token: &str) -> Option<Value> {
    let wake = rec.wake.as_ref().filter(|_| rec.kind() == Kind::Webhook)?;
    Some(json!({
        "subscription_id": rec.id,
        "wake_id": wake.wake_id,
        "generation": wake.generation,
        "streams": wake_streams(rec, tails, &wake.streams),
        "callback_url": callback_url(&rec.base_url, &rec.id),
        "callback_token": token,
    }))
}

/// The wake event appended to a pull-wake subscription's wake stream (§7.2).
pub fn wake_event(rec: &SubscriptionRecord, now_ms: i64) -> Option<Value> {
    let wake = rec.wake.as_ref()?;
    let stream = wake.streams.first().map(|(p, _)| p.as_str());
    Some(json!({
        "type": "wake",
        "subscription_id": rec.id,
        "stream": stream,
        "generation": wake.generation,
        "wake_id": wake.wake_id,
        "ts": now_ms,
    }))
}
