//! Callback and claim tokens (§7.1, §12.9): `<generation>.<wake_id>.<mac>`,
//! where `mac` is HMAC-SHA256 under the subscription instance's own key over
//! the subscription id, instance, generation and wake id. So a token is
//! unguessable, bound to one subscription instance and one wake, checked in
//! constant time (aws-lc-rs `hmac::verify`), and a stale but genuine token
//! is told apart from a forged one (`409 FENCED` versus `401`).

use aws_lc_rs::hmac;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use rand::RngCore;

use crate::error::{SubResult, SubscriptionError};
use crate::record::SubscriptionRecord;

/// A new instance's token key (base64 of 32 random bytes).
pub fn new_key() -> String {
    let mut key = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut key);
    STANDARD.encode(key)
}

fn key_of(rec: &SubscriptionRecord) -> SubResult<hmac::Key> {
    let raw = STANDARD.decode(&rec.token_key).map_err(|_| SubscriptionError::Unauthorized("token key unreadable"))?;
    Ok(hmac::Key::new(hmac::HMAC_SHA256, &raw))
}

fn message(rec: &SubscriptionRecord, generation: u64, wake_id: &str) -> String {
    format!("ds-wake-token\n{}\n{}\n{generation}\n{wake_id}", rec.id, rec.instance)
}

/// The token of wake `(generation, wake_id)` of `rec`.
pub fn mint(rec: &SubscriptionRecord, generation: u64, wake_id: &str) -> SubResult<String> {
    let tag = hmac::sign(&key_of(rec)?, message(rec, generation, wake_id).as_bytes());
    Ok(format!("{generation}.{wake_id}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref())))
}

/// The `(generation, wake_id)` a genuine token of `rec` was minted for;
/// `401` for anything else.
pub fn verify(rec: &SubscriptionRecord, token: &str) -> SubResult<(u64, String)> {
    let bad = SubscriptionError::Unauthorized("invalid callback token");
    let mut parts = token.splitn(3, '.');
    let (Some(generation), Some(wake_id), Some(mac)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad);
    };
    let generation: u64 = generation.parse().map_err(|_| SubscriptionError::Unauthorized("invalid callback token"))?;
    let mac = URL_SAFE_NO_PAD.decode(mac).map_err(|_| SubscriptionError::Unauthorized("invalid callback token"))?;
    hmac::verify(&key_of(rec)?, message(rec, generation, wake_id).as_bytes(), &mac).map_err(|_| bad)?;
    Ok((generation, wake_id.to_owned()))
}

/// The bearer token of an `Authorization` header value.
pub fn bearer(header: Option<&str>) -> SubResult<&str> {
    let value = header.ok_or(SubscriptionError::Unauthorized("missing Authorization: Bearer <token>"))?;
    let (scheme, token) = value.split_once(' ').ok_or(SubscriptionError::Unauthorized("not a bearer token"))?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(SubscriptionError::Unauthorized("not a bearer token"));
    }
    Ok(token.trim())
}
