//! A JSON Web Key Set fetched over HTTPS through the SSRF-guarded client and
//! cached: refreshed when older than the refresh interval or when a token
//! names an unknown `kid`, at most once per [`MIN_REFETCH`]. A failed refresh
//! keeps the keys already known.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use ds_config::ConfigError;
use ds_egress::EgressClient;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};

use crate::AuthError;

/// Least time between two fetches (an unknown `kid` must not become a way
/// to make the server hammer the identity provider).
pub const MIN_REFETCH: Duration = Duration::from_secs(30);

#[derive(Clone)]
struct Key {
    key: DecodingKey,
    alg: Algorithm,
}

#[derive(Default)]
struct State {
    keys: HashMap<Option<String>, Key>,
    fetched: Option<Instant>,
    attempted: Option<Instant>,
}

pub struct JwksCache {
    url: String,
    client: EgressClient,
    refresh: Duration,
    state: RwLock<State>,
    fetching: tokio::sync::Mutex<()>,
}

impl JwksCache {
    /// Checks the URL now (before any connection is ever made).
    pub fn new(url: String, client: EgressClient, refresh: Duration) -> Result<Self, ConfigError> {
        client.check_url(&url).map_err(|e| ConfigError::invalid("DS_JWKS_URL", e.to_string()))?;
        Ok(Self { url, client, refresh, state: RwLock::default(), fetching: tokio::sync::Mutex::new(()) })
    }

    /// The verification key for a token's `kid` and `alg`.
    pub async fn key(&self, kid: Option<&str>, alg: Algorithm) -> Result<DecodingKey, AuthError> {
        let (hit, stale) = self.lookup(kid, alg);
        if let (Some(key), false) = (&hit, stale) {
            return Ok(key.clone());
        }
        self.refresh_if_due().await;
        match self.lookup(kid, alg) {
            (Some(key), _) => Ok(key),
            (None, _) if self.read().fetched.is_none() => Err(AuthError::KeysUnavailable),
            (None, _) => Err(AuthError::Invalid("no key in the key set matches the token's kid and alg".into())),
        }
    }

    /// Fetch once now (at start-up), reporting failure to the caller.
    pub async fn prefetch(&self) -> Result<usize, String> {
        let _guard = self.fetching.lock().await;
        self.fetch().await
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lookup(&self, kid: Option<&str>, alg: Algorithm) -> (Option<DecodingKey>, bool) {
        let state = self.read();
        let stale = state.fetched.is_none_or(|t| t.elapsed() >= self.refresh);
        let key = match kid {
            Some(kid) => state.keys.get(&Some(kid.to_owned())),
            // No kid: only unambiguous when the set has exactly one key.
            None if state.keys.len() == 1 => state.keys.values().next(),
            None => None,
        };
        (key.filter(|k| k.alg == alg).map(|k| k.key.clone()), stale)
    }

    async fn refresh_if_due(&self) {
        let _guard = self.fetching.lock().await;
        let due = self.read().attempted.is_none_or(|t| t.elapsed() >= MIN_REFETCH);
        if due {
            if let Err(e) = self.fetch().await {
                tracing::warn!(url = %self.url, error = %e, "JWKS refresh failed; keeping the keys already known");
            }
        }
    }

    async fn fetch(&self) -> Result<usize, String> {
        self.state.write().unwrap_or_else(std::sync::PoisonError::into_inner).attempted = Some(Instant::now());
        let body = self.client.get(&self.url, "application/jwk-set+json, application/json").await;
        let body = body.map_err(|e| e.to_string())?;
        let set: JwkSet = serde_json::from_slice(&body).map_err(|e| format!("not a JWK set: {e}"))?;
        let keys = usable_keys(&set);
        let n = keys.len();
        let mut state = self.state.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.keys = keys;
        state.fetched = Some(Instant::now());
        tracing::info!(url = %self.url, keys = n, "JWKS fetched");
        Ok(n)
    }
}

/// Signature keys of the supported algorithms (RS256, ES256, EdDSA), by kid.
/// Symmetric and encryption keys are ignored.
fn usable_keys(set: &JwkSet) -> HashMap<Option<String>, Key> {
    let mut out = HashMap::new();
    for jwk in &set.keys {
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            continue;
        }
        let inferred = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => Some(Algorithm::RS256),
            AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => Some(Algorithm::ES256),
            AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => Some(Algorithm::EdDSA),
            _ => None,
        };
        let declared = match jwk.common.key_algorithm {
            None => inferred,
            Some(KeyAlgorithm::RS256) => Some(Algorithm::RS256),
            Some(KeyAlgorithm::ES256) => Some(Algorithm::ES256),
            Some(KeyAlgorithm::EdDSA) => Some(Algorithm::EdDSA),
            Some(_) => None,
        };
        let (Some(alg), true) = (declared, declared == inferred) else { continue };
        if let Ok(key) = DecodingKey::from_jwk(jwk) {
            out.insert(jwk.common.key_id.clone(), Key { key, alg });
        }
    }
    out
}
