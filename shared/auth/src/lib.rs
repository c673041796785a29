//! Access control for Durable Streams, the same model on every host.
//!
//! A request carries `Authorization: Bearer <token>`. The token is either a
//! static API token ([`tokens`], for a single-tenant server) or a JWT
//! ([`jwt`]: HS256 shared secret, or RS256/ES256/EdDSA via a static public
//! key or a JWKS URL). Either way it resolves to a [`Principal`] whose
//! [`Grants`] say which operations ([`Op`]) it may perform under which stream
//! path prefixes. Tokens themselves are never logged or kept: only their
//! SHA-256 digests. [`budget`] keeps optional request budgets per principal
//! (rate limits, `429`).

pub mod budget;
pub mod jwks;
pub mod jwt;
pub mod mint;
pub mod scope;
mod settings;
pub mod tokens;

use std::sync::Arc;

pub use budget::{Budgets, Rate};
pub use scope::{Grant, Grants, Op};
pub use settings::AuthSettings;
pub use tokens::StaticTokens;

/// Why a request is not authenticated (401), or could not be checked (503).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
// Exhaustive on purpose: ds-http's error.rs maps every variant to a status
// code, and a new variant must fail that build rather than become a 500.
pub enum AuthError {
    #[error("missing bearer token (send Authorization: Bearer <token>)")]
    Missing,
    #[error("the Authorization header is not a bearer token")]
    NotBearer,
    #[error("token expired")]
    Expired,
    #[error("invalid token: {0}")]
    Invalid(String),
    #[error("the signing keys could not be fetched; try again")]
    KeysUnavailable,
}

/// How a principal was authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialKind {
    StaticToken,
    Jwt,
}

/// Who made a request and what they may do. `subject` (the JWT `sub`, or the
/// static token's name) is safe to log; the token is not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub subject: String,
    pub grants: Grants,
    pub kind: CredentialKind,
}

/// Verifies bearer tokens against the configured credentials.
pub struct Authenticator {
    tokens: StaticTokens,
    jwt: Option<jwt::JwtVerifier>,
}

impl Authenticator {
    pub fn new(tokens: StaticTokens, jwt: Option<jwt::JwtVerifier>) -> Self {
        Self { tokens, jwt }
    }

    /// Authenticate the value of an `Authorization` header.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Arc<Principal>, AuthError> {
        if let Some(answer) = self.authenticate_now(authorization) {
            return answer;
        }
        // `authenticate_now` answers everything but a JWT to verify.
        let token = bearer(authorization)?;
        match &self.jwt {
            Some(jwt) => jwt.verify(token).await,
            None => Err(AuthError::Invalid("JWTs are not accepted by this server".into())),
        }
    }

    /// The answer of [`Self::authenticate`] when it needs no waiting: a
    /// static token, a malformed header, or a JWT verified within the last
    /// [`jwt::CACHE_TTL`] (and not expired since). `None`: a JWT to verify,
    /// whose signing key may have to be fetched first. Lets the edge run an
    /// authorized request without a future around it.
    pub fn authenticate_now(&self, authorization: Option<&str>) -> Option<Result<Arc<Principal>, AuthError>> {
        let token = match bearer(authorization) {
            Ok(token) => token,
            Err(e) => return Some(Err(e)),
        };
        // A JWT is three dot-separated parts; a static token has no dots.
        if token.bytes().filter(|&b| b == b'.').count() == 2 {
            return match &self.jwt {
                Some(jwt) => jwt.verified(token).map(Ok),
                None => Some(Err(AuthError::Invalid("JWTs are not accepted by this server".into()))),
            };
        }
        Some(self.tokens.find(token).ok_or_else(|| AuthError::Invalid("unknown token".into())))
    }

    /// Fetch the JWKS once (at start-up); `None` when no JWKS is configured.
    pub async fn prefetch_keys(&self) -> Option<Result<usize, String>> {
        match self.jwt.as_ref().and_then(jwt::JwtVerifier::jwks) {
            Some(jwks) => Some(jwks.prefetch().await),
            None => None,
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(authorization: Option<&str>) -> Result<&str, AuthError> {
    let value = authorization.ok_or(AuthError::Missing)?;
    let (scheme, token) = value.trim().split_once(' ').ok_or(AuthError::NotBearer)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::NotBearer);
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(AuthError::Missing);
    }
    Ok(token)
}
