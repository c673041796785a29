//! Bearer JWT verification: HS256 with a shared secret, RS256/ES256/EdDSA
//! with a static public key or a JWKS. Issuer, audience and expiry are always
//! checked (with a small clock-skew allowance), `nbf` when present.
//!
//! Verified tokens are remembered by their SHA-256 digest until they expire
//! or [`CACHE_TTL`] has passed, whichever is first, so a client that sends
//! the same token with every request pays for one signature check per
//! minute, not per request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ds_config::ConfigError;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::jwks::JwksCache;
use crate::scope::Grants;
use crate::{AuthError, Principal};

/// How long a verified token is trusted without re-checking its signature
/// (also bounds how long a key removed from the JWKS keeps working).
pub const CACHE_TTL: Duration = Duration::from_secs(60);
/// Most remembered tokens; past that, expired ones are dropped, then all.
const CACHE_MAX: usize = 10_000;

/// Where verification keys come from.
pub struct JwtKeys {
    pub hs256_secret: Option<Vec<u8>>,
    /// A PEM public key (RSA, P-256 or Ed25519) and the algorithm it implies.
    pub public_key: Option<(DecodingKey, Algorithm)>,
    pub jwks: Option<JwksCache>,
}

/// Verified tokens by digest: who, and until when (Unix seconds).
type VerifiedCache = Mutex<HashMap<[u8; 32], (Arc<Principal>, u64)>>;

#[derive(Deserialize)]
struct Claims {
    sub: Option<String>,
    exp: u64,
    #[serde(default)]
    streams: Grants,
}

pub struct JwtVerifier {
    keys: JwtKeys,
    hs256: Option<DecodingKey>,
    issuer: String,
    audience: String,
    leeway: Duration,
    cache: VerifiedCache,
}

impl JwtVerifier {
    pub fn new(keys: JwtKeys, issuer: String, audience: String, leeway: Duration) -> Self {
        let hs256 = keys.hs256_secret.as_deref().map(DecodingKey::from_secret);
        Self { keys, hs256, issuer, audience, leeway, cache: Mutex::default() }
    }

    pub fn jwks(&self) -> Option<&JwksCache> {
        self.keys.jwks.as_ref()
    }

    pub async fn verify(&self, token: &str) -> Result<Arc<Principal>, AuthError> {
        let digest = crate::tokens::sha256(token);
        let now = now_secs();
        if let Some(p) = self.cached(&digest, now) {
            return Ok(p);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| AuthError::Invalid("malformed JWT".into()))?;
        let key = self.key(header.alg, header.kid.as_deref()).await?;
        let data = jsonwebtoken::decode::<Claims>(token, &key, &self.validation(header.alg)).map_err(jwt_error)?;
        let claims = data.claims;
        let principal = Arc::new(Principal {
            subject: claims.sub.unwrap_or_else(|| "(no sub)".into()),
            grants: claims.streams,
            kind: crate::CredentialKind::Jwt,
        });
        let until = (claims.exp + self.leeway.as_secs()).min(now + CACHE_TTL.as_secs());
        self.remember(digest, principal.clone(), until, now);
        Ok(principal)
    }

    async fn key(&self, alg: Algorithm, kid: Option<&str>) -> Result<DecodingKey, AuthError> {
        match alg {
            Algorithm::HS256 => self.hs256.clone().ok_or_else(|| unsupported(alg)),
            Algorithm::RS256 | Algorithm::ES256 | Algorithm::EdDSA => {
                if let Some((key, key_alg)) = &self.keys.public_key {
                    if *key_alg == alg {
                        return Ok(key.clone());
                    }
                }
                match &self.keys.jwks {
                    Some(jwks) => jwks.key(kid, alg).await,
                    None => Err(unsupported(alg)),
                }
            }
            _ => Err(unsupported(alg)),
        }
    }

    fn validation(&self, alg: Algorithm) -> Validation {
        let mut v = Validation::new(alg);
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&[&self.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        v.validate_nbf = true;
        v.leeway = self.leeway.as_secs();
        v
    }

    /// The principal of `token` if it was verified within the cache window
    /// (and has not expired since); `None`: verify it with [`Self::verify`].
    pub fn verified(&self, token: &str) -> Option<Arc<Principal>> {
        self.cached(&crate::tokens::sha256(token), now_secs())
    }

    fn cached(&self, digest: &[u8; 32], now: u64) -> Option<Arc<Principal>> {
        let cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        cache.get(digest).filter(|(_, until)| now < *until).map(|(p, _)| p.clone())
    }

    fn remember(&self, digest: [u8; 32], principal: Arc<Principal>, until: u64, now: u64) {
        let mut cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.len() >= CACHE_MAX {
            cache.retain(|_, (_, u)| now < *u);
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
        }
        cache.insert(digest, (principal, until));
    }
}

fn unsupported(alg: Algorithm) -> AuthError {
    AuthError::Invalid(format!("no key is configured for alg {alg:?}"))
}

fn jwt_error(e: jsonwebtoken::errors::Error) -> AuthError {
    match e.kind() {
        ErrorKind::ExpiredSignature => AuthError::Expired,
        ErrorKind::InvalidIssuer => AuthError::Invalid("wrong issuer".into()),
        ErrorKind::InvalidAudience => AuthError::Invalid("wrong audience".into()),
        ErrorKind::ImmatureSignature => AuthError::Invalid("token not valid yet (nbf)".into()),
        ErrorKind::InvalidSignature => AuthError::Invalid("bad signature".into()),
        ErrorKind::InvalidAlgorithm => AuthError::Invalid("alg does not match the key".into()),
        ErrorKind::MissingRequiredClaim(c) => AuthError::Invalid(format!("missing claim {c}")),
        ErrorKind::Json(_) | ErrorKind::InvalidClaimFormat(_) => AuthError::Invalid("malformed claims".into()),
        _ => AuthError::Invalid("invalid token".into()),
    }
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A PEM public key, with the algorithm its type implies: RSA → RS256,
/// P-256 → ES256, Ed25519 → EdDSA.
pub fn public_key_from_pem(pem: &[u8]) -> Result<(DecodingKey, Algorithm), ConfigError> {
    if let Ok(k) = DecodingKey::from_rsa_pem(pem) {
        return Ok((k, Algorithm::RS256));
    }
    if let Ok(k) = DecodingKey::from_ec_pem(pem) {
        return Ok((k, Algorithm::ES256));
    }
    if let Ok(k) = DecodingKey::from_ed_pem(pem) {
        return Ok((k, Algorithm::EdDSA));
    }
    Err(ConfigError::invalid("DS_JWT_PUBLIC_KEY", "not an RSA, P-256 or Ed25519 public key in PEM form"))
}
