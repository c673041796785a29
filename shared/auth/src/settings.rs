//! What an operator configures, in one shape for every host: the local
//! server fills it from its flags (reading the files they name), the Lambda
//! function from its environment ([`AuthSettings::from_env`]).

use std::time::Duration;

use ds_config::{ConfigError, Settings};
use ds_egress::{EgressClient, EgressConfig};

use crate::budget::{Budgets, Rate};
use crate::jwks::JwksCache;
use crate::jwt::{public_key_from_pem, JwtKeys, JwtVerifier};
use crate::{Authenticator, StaticTokens};

#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// The static token file's JSON (digests and grants).
    pub tokens_json: Option<String>,
    pub jwt_hs256_secret: Option<Vec<u8>>,
    /// PEM public key (RSA, P-256 or Ed25519).
    pub jwt_public_key_pem: Option<Vec<u8>>,
    pub jwks_url: Option<String>,
    /// Extra trusted CA (PEM) for the JWKS URL.
    pub jwks_ca_pem: Option<Vec<u8>>,
    /// Let the JWKS URL be on loopback (development and tests only).
    pub jwks_allow_loopback: bool,
    pub jwks_refresh: Duration,
    pub jwt_issuer: Option<String>,
    pub jwt_audience: Option<String>,
    /// Clock-skew allowance for `exp` and `nbf`.
    pub jwt_leeway: Duration,
    /// Every credential's request budget (`None`: unlimited).
    pub rate_limit: Option<Rate>,
    /// Credentials' own budgets, by token name or JWT `sub` (`None`: unlimited).
    pub rate_limit_for: Vec<(String, Option<Rate>)>,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            tokens_json: None,
            jwt_hs256_secret: None,
            jwt_public_key_pem: None,
            jwks_url: None,
            jwks_ca_pem: None,
            jwks_allow_loopback: false,
            jwks_refresh: Duration::from_secs(600),
            jwt_issuer: None,
            jwt_audience: None,
            jwt_leeway: Duration::from_secs(30),
            rate_limit: None,
            rate_limit_for: Vec::new(),
        }
    }
}

impl AuthSettings {
    /// Reads `DS_AUTH_TOKENS` (the token file's JSON, inline),
    /// `DS_JWT_HS256_SECRET`, `DS_JWT_PUBLIC_KEY` (PEM text), `DS_JWKS_URL`,
    /// `DS_JWKS_REFRESH`, `DS_JWT_ISSUER`, `DS_JWT_AUDIENCE`, `DS_JWT_LEEWAY`,
    /// `DS_RATE_LIMIT` (a [`Rate`]) and `DS_RATE_LIMIT_FOR` (comma-separated
    /// `NAME=RATE` or `NAME=off`).
    pub fn from_env<F: Fn(&str) -> Option<String>>(env: &Settings<F>) -> Result<Self, ConfigError> {
        let d = Self::default();
        Ok(Self {
            tokens_json: env.raw("DS_AUTH_TOKENS"),
            jwt_hs256_secret: env.raw("DS_JWT_HS256_SECRET").map(String::into_bytes),
            jwt_public_key_pem: env.raw("DS_JWT_PUBLIC_KEY").map(String::into_bytes),
            jwks_url: env.raw("DS_JWKS_URL"),
            jwks_ca_pem: None,
            jwks_allow_loopback: false,
            jwks_refresh: env.duration("DS_JWKS_REFRESH")?.unwrap_or(d.jwks_refresh),
            jwt_issuer: env.raw("DS_JWT_ISSUER"),
            jwt_audience: env.raw("DS_JWT_AUDIENCE"),
            jwt_leeway: env.duration("DS_JWT_LEEWAY")?.unwrap_or(d.jwt_leeway),
            rate_limit: env
                .raw("DS_RATE_LIMIT")
                .map(|r| Rate::parse(&r))
                .transpose()
                .map_err(|e| ConfigError::invalid("DS_RATE_LIMIT", e))?,
            rate_limit_for: env
                .raw("DS_RATE_LIMIT_FOR")
                .unwrap_or_default()
                .split(',')
                .filter(|item| !item.trim().is_empty())
                .map(Budgets::parse_named)
                .collect::<Result<_, _>>()
                .map_err(|e| ConfigError::invalid("DS_RATE_LIMIT_FOR", e))?,
        })
    }

    fn jwt_configured(&self) -> bool {
        self.jwt_hs256_secret.is_some() || self.jwt_public_key_pem.is_some() || self.jwks_url.is_some()
    }

    /// Whether any credential is configured (access control is on).
    pub fn is_configured(&self) -> bool {
        self.tokens_json.is_some() || self.jwt_configured()
    }

    /// The request budgets, or `None` when no credential has one. A budget
    /// belongs to a credential, so budgets without access control are a
    /// configuration error.
    pub fn budgets(&self) -> Result<Option<Budgets>, ConfigError> {
        let budgets = Budgets::new(self.rate_limit, self.rate_limit_for.clone());
        if budgets.is_some() && !self.is_configured() {
            return Err(ConfigError::invalid(
                "DS_RATE_LIMIT",
                "rate limits are per credential: they need access control (static tokens or a JWT key)",
            ));
        }
        Ok(budgets)
    }

    /// The authenticator, or `None` when nothing is configured. Checks the
    /// settings (a JWT key needs an issuer and an audience; an HS256 secret
    /// must be at least 32 bytes; the JWKS URL must pass the SSRF rules).
    pub fn build(self) -> Result<Option<Authenticator>, ConfigError> {
        if !self.is_configured() {
            return Ok(None);
        }
        let tokens = match &self.tokens_json {
            Some(json) => StaticTokens::from_json(json)?,
            None => StaticTokens::default(),
        };
        let jwt = if self.jwt_configured() { Some(self.verifier()?) } else { None };
        Ok(Some(Authenticator::new(tokens, jwt)))
    }

    fn verifier(self) -> Result<JwtVerifier, ConfigError> {
        let issuer = self
            .jwt_issuer
            .ok_or_else(|| ConfigError::invalid("DS_JWT_ISSUER", "a JWT key needs an issuer to check"))?;
        let audience = self
            .jwt_audience
            .ok_or_else(|| ConfigError::invalid("DS_JWT_AUDIENCE", "a JWT key needs an audience to check"))?;
        if self.jwt_hs256_secret.as_ref().is_some_and(|s| s.len() < 32) {
            return Err(ConfigError::invalid("DS_JWT_HS256_SECRET", "the HS256 secret must be at least 32 bytes"));
        }
        let public_key = self.jwt_public_key_pem.as_deref().map(public_key_from_pem).transpose()?;
        let jwks = match self.jwks_url {
            None => None,
            Some(url) => {
                let client = EgressClient::new(EgressConfig {
                    allow_loopback: self.jwks_allow_loopback,
                    extra_roots_pem: self.jwks_ca_pem,
                    ..EgressConfig::default()
                })
                .map_err(|e| ConfigError::invalid("DS_JWKS_CA_FILE", e.to_string()))?;
                Some(JwksCache::new(url, client, self.jwks_refresh)?)
            }
        };
        let keys = JwtKeys { hs256_secret: self.jwt_hs256_secret, public_key, jwks };
        Ok(JwtVerifier::new(keys, issuer, audience, self.jwt_leeway))
    }
}
